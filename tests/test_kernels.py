"""The fast kernels compute what the reference code computes: values and gradients
(float64), under autocast, and in a whole model built with them."""

import pytest
import torch
import torch.nn.functional as F

from capsnotes import CapsNet, CapsNetConfig, capsnet_loss, dynamic_routing
from capsnotes.kernels import (
    MatmulConv2d,
    conv2d_as_matmul,
    fused_dynamic_routing,
    patches,
)


@pytest.mark.parametrize(
    ("channels", "kernel", "stride", "size"),
    [(1, 9, 1, 28), (5, 3, 2, 13), (4, 9, 2, 20), (3, 4, 3, 17)],
)
def test_conv_as_matmul_matches_conv2d(channels, kernel, stride, size):
    x = torch.randn(3, channels, size, size, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, channels, kernel, kernel, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, requires_grad=True)
    out = conv2d_as_matmul(x, w, b, stride)
    ref = F.conv2d(x, w, b, stride=stride)
    torch.testing.assert_close(out, ref)
    grad = torch.randn_like(ref)
    for mine, theirs in zip(
        torch.autograd.grad(out, (x, w, b), grad),
        torch.autograd.grad(ref, (x, w, b), grad),
        strict=True,
    ):
        torch.testing.assert_close(mine, theirs)


def test_conv_as_matmul_gradcheck_float64():
    x = torch.randn(2, 3, 9, 9, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: conv2d_as_matmul(x, w, b, 2), (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w: conv2d_as_matmul(x, w, None, 1), (x, w))


def test_matmul_conv_follows_cpu_autocast_like_conv2d():
    """Under bf16 autocast the matrix products run in bf16, as nn.Conv2d's would: the
    output is bf16, the gradients reach the float32 parameters and input as float32, and
    they agree with the native convolution's under the same autocast."""
    torch.manual_seed(0)
    native = torch.nn.Conv2d(4, 6, 3, stride=2)
    fast = MatmulConv2d(4, 6, 3, stride=2)
    fast.load_state_dict(native.state_dict())
    x = torch.rand(2, 4, 13, 13)
    results = []
    for layer in (fast, native):
        layer.zero_grad()
        inputs = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = layer(inputs)
        assert out.dtype == torch.bfloat16
        out.float().pow(2).sum().backward()
        assert layer.weight.grad.dtype == torch.float32 and inputs.grad.dtype == torch.float32
        results.append((out.float(), layer.weight.grad, layer.bias.grad, inputs.grad))
    for mine, theirs in zip(*results, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0.03, atol=0.03)


def test_patches_rows_are_windows():
    x = torch.randn(2, 7, 7, 3)
    cols = patches(x, 3, 2)  # 3x3 output positions
    assert cols.shape == (2 * 9, 27)
    torch.testing.assert_close(cols[4], x[0, 2:5, 2:5, :].reshape(-1))
    with pytest.raises(ValueError, match="contiguous"):
        patches(x.permute(0, 3, 1, 2).permute(0, 2, 1, 3), 3, 2)


def test_matmul_conv_has_the_parameters_of_conv2d_and_rejects_padding():
    conv = torch.nn.Conv2d(4, 8, 3, stride=2)
    fast = MatmulConv2d(4, 8, 3, stride=2)
    assert isinstance(fast, torch.nn.Conv2d)
    fast.load_state_dict(conv.state_dict())  # the same state_dict, both ways
    conv.load_state_dict(fast.state_dict())
    x = torch.randn(2, 4, 11, 11)
    torch.testing.assert_close(fast(x), conv(x))
    with torch.no_grad():
        torch.testing.assert_close(fast(x), conv(x))
    with pytest.raises(ValueError, match="unpadded"):
        MatmulConv2d(4, 8, 3, padding=1)


def test_a_model_built_with_the_fast_kernels_agrees_with_the_reference():
    """Values and gradients in float64, and weights that load both ways."""
    torch.manual_seed(0)
    config = CapsNetConfig(conv_channels=16, primary_channels=8, decoder_hidden=(64, 128))
    reference = CapsNet(config).double()
    fast = CapsNet(config, routing=fused_dynamic_routing, convolution=MatmulConv2d).double()
    fast.load_state_dict(reference.state_dict())
    assert isinstance(fast.primary.conv, MatmulConv2d) and isinstance(fast.conv1, MatmulConv2d)
    assert type(reference.primary.conv) is torch.nn.Conv2d
    assert fast.digits.route is fused_dynamic_routing
    assert reference.digits.route is dynamic_routing
    assert fast.state_dict().keys() == reference.state_dict().keys()
    images = torch.rand(4, 1, 28, 28, dtype=torch.float64)
    labels = torch.tensor([0, 3, 7, 9])
    results = []
    for model in (reference, fast):
        out = model(images, labels)
        loss = capsnet_loss(out, images, labels).total
        results.append((out.capsules, torch.autograd.grad(loss, list(model.parameters()))))
    torch.testing.assert_close(results[0][0], results[1][0])
    for mine, theirs in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize("iterations", [1, 2, 3, 5])
def test_fused_routing_matches_reference_values_and_gradients(iterations):
    torch.manual_seed(iterations)
    u_hat = torch.randn(3, 11, 4, 5, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(3, 4, 5, dtype=torch.float64)
    fused = fused_dynamic_routing(u_hat, iterations)
    reference = dynamic_routing(u_hat, iterations)
    torch.testing.assert_close(fused, reference)
    (grad_fused,) = torch.autograd.grad(fused, u_hat, upstream)
    (grad_reference,) = torch.autograd.grad(reference, u_hat, upstream)
    torch.testing.assert_close(grad_fused, grad_reference)


def test_fused_routing_gradcheck_float64():
    u_hat = torch.randn(2, 6, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda u: fused_dynamic_routing(u, 3), (u_hat,))


def test_fused_routing_checks_and_falls_back():
    u_hat = torch.randn(2, 6, 3, 4)
    v, c = fused_dynamic_routing(u_hat, 2, return_coupling=True)
    torch.testing.assert_close(c.sum(-1), torch.ones(2, 6))
    with pytest.raises(ValueError, match="iterations must be >= 1"):
        fused_dynamic_routing(u_hat, 0)
    with pytest.raises(ValueError, match="out_dim"):
        fused_dynamic_routing(torch.randn(6, 3, 4), 2)


def test_fused_routing_handles_mixed_precision_like_the_reference():
    # bf16 votes under autocast: values and gradients close to the reference's
    torch.manual_seed(0)
    u_hat = (0.1 * torch.randn(2, 40, 5, 8)).bfloat16().requires_grad_()
    upstream = torch.randn(2, 5, 8)
    results = []
    for routing in (fused_dynamic_routing, dynamic_routing):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            v = routing(u_hat, 3)
        (grad,) = torch.autograd.grad(v.float(), u_hat, upstream)
        assert grad.dtype == u_hat.dtype and torch.isfinite(grad).all()
        results.append((v.float(), grad.float()))
    torch.testing.assert_close(results[0][0], results[1][0], atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(results[0][1], results[1][1], atol=2e-2, rtol=5e-2)
