import pytest
import torch

from capsnotes import DigitCapsules, PrimaryCapsules, squash
from capsnotes.capsules import conv_output_size


def test_primary_capsules_shape_and_count():
    layer = PrimaryCapsules()
    u = layer(torch.rand(3, 256, 20, 20))
    assert u.shape == (3, 1152, 8)
    assert (u.norm(dim=-1) < 1).all()


def test_primary_capsule_parameters():
    assert sum(p.numel() for p in PrimaryCapsules().parameters()) == 256 * 256 * 81 + 256


def test_primary_capsule_layout_is_channel_major():
    torch.manual_seed(0)
    layer = PrimaryCapsules(
        in_channels=3, capsule_channels=2, capsule_dim=4, kernel_size=3, stride=2
    )
    features = torch.rand(1, 3, 9, 9)
    maps = layer.conv(features)  # [1, 8, 4, 4]
    u = layer(features)  # [1, 2*4*4, 4]
    # capsule (channel 1, row 2, column 3) is conv channels 4..7 at (2, 3)
    index = 1 * 16 + 2 * 4 + 3
    torch.testing.assert_close(u[0, index], squash(maps[0, 4:8, 2, 3]))


def test_conv_output_size():
    assert conv_output_size(28, 9) == 20
    assert conv_output_size(20, 9, 2) == 6
    assert conv_output_size(36, 9) == 28 and conv_output_size(28, 9, 2) == 10
    with pytest.raises(ValueError, match="at least 9 pixels"):
        conv_output_size(8, 9)


def test_digit_capsules_votes_are_w_times_u():
    layer = DigitCapsules(in_caps=5, in_dim=3, out_caps=4, out_dim=2)
    u = torch.randn(2, 5, 3)
    u_hat = layer.votes(u)
    assert u_hat.shape == (2, 5, 4, 2)
    for b, i, j in [(0, 0, 0), (1, 4, 3), (0, 2, 1)]:
        torch.testing.assert_close(u_hat[b, i, j], layer.weight[i, j] @ u[b, i])


def test_digit_capsules_parameters_and_output():
    layer = DigitCapsules()
    assert sum(p.numel() for p in layer.parameters()) == 1152 * 10 * 16 * 8 == 1_474_560
    u = squash(torch.randn(2, 1152, 8))
    v, c = layer.forward_with_couplings(u)
    assert v.shape == (2, 10, 16) and c.shape == (2, 1152, 10)
    torch.testing.assert_close(layer(u), v)
    assert "iterations=3" in repr(layer)


def test_digit_capsules_refuse_zero_iterations():
    with pytest.raises(ValueError, match="iterations must be >= 1"):
        DigitCapsules(iterations=0)


def test_digit_capsules_gradcheck_float64():
    layer = DigitCapsules(in_caps=6, in_dim=3, out_caps=3, out_dim=2).double()
    u = torch.randn(2, 6, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x, w: torch.func.functional_call(layer, {"weight": w}, (x,)),
        (u, layer.weight.detach().clone().requires_grad_()),
    )
