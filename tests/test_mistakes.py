"""The popular mistakes differ from the paper exactly as the book says, and the checks
that guard the correct functions catch them."""

import pytest
import torch

from capsnotes import (
    CapsNet,
    PrimaryCapsules,
    capsnet_loss,
    dynamic_routing,
    margin_loss,
    reconstruction_loss,
    squash,
)
from capsnotes.experiments.mistakes import (
    PredictionMaskedCapsNet,
    ReshapedPrimaryCapsules,
    mean_reconstruction_loss,
    routing_that_returns_early,
    routing_with_shared_logits,
    squash_without_eps,
    unsquared_margin_loss,
)
from capsnotes.model import CapsNetOutput
from tests.conftest import TINY


def test_squash_without_eps_agrees_except_at_zero_where_it_is_nan():
    s = torch.randn(5, 8, dtype=torch.float64)
    torch.testing.assert_close(squash_without_eps(s), squash(s))
    zero = torch.zeros(1, 8, dtype=torch.float64, requires_grad=True)
    assert torch.isnan(squash_without_eps(zero)).all()
    assert torch.isfinite(squash(zero)).all()


def test_the_unsquared_margin_loss_pulls_with_a_constant_force():
    """Three images whose present class 0 has a capsule of length 0.3, 0.6 and 0.85 (the
    absent class 1 has length 0): the squared loss pulls by 2 (0.9 - length), fading at the
    margin; the unsquared one by 1 everywhere below it."""
    lengths = torch.tensor([0.3, 0.6, 0.85], dtype=torch.float64, requires_grad=True)
    zeros = torch.zeros(3, 3, dtype=torch.float64)
    present_capsule = torch.cat([lengths[:, None], zeros], dim=1)  # [3, 4]
    v = torch.stack([present_capsule, torch.zeros(3, 4, dtype=torch.float64)], dim=1)
    target = torch.tensor([0, 0, 0])
    (grad,) = torch.autograd.grad(3 * unsquared_margin_loss(v, target), lengths)
    torch.testing.assert_close(grad, torch.full_like(grad, -1.0))
    (grad,) = torch.autograd.grad(3 * margin_loss(v, target), lengths)
    torch.testing.assert_close(grad, -2 * (0.9 - lengths.detach()))


def test_the_mean_reconstruction_loss_is_784_times_weaker_on_mnist():
    reconstructions, images = torch.rand(6, 784), torch.rand(6, 1, 28, 28)
    torch.testing.assert_close(
        784 * mean_reconstruction_loss(reconstructions, images),
        reconstruction_loss(reconstructions, images),
    )


def test_capsnet_loss_trains_a_variant_with_one_term_replaced():
    capsules, reconstructions = torch.rand(4, 10, 16), torch.rand(4, 1, 28, 28)
    images, labels = torch.rand(4, 1, 28, 28), torch.tensor([1, 2, 3, 4])
    output = CapsNetOutput(capsules, capsules.norm(dim=-1), labels, reconstructions)
    variant = capsnet_loss(output, images, labels, margin=unsquared_margin_loss)
    expected = unsquared_margin_loss(capsules, labels) + reconstruction_loss(
        reconstructions, images
    )
    torch.testing.assert_close(variant.total, expected)
    assert variant.terms["margin_loss"] == pytest.approx(
        unsquared_margin_loss(capsules, labels).item()
    )


def test_the_reshaped_primary_capsules_mix_positions_of_one_channel():
    """The paper's capsule (type 1, row 2, column 3) holds channels 8..15 at one position;
    the reshape's capsule 1 holds positions 8..15 of channel 0 (memory runs along the
    6×6 grid first)."""
    torch.manual_seed(0)
    right = PrimaryCapsules(in_channels=3, capsule_channels=2, capsule_dim=8, kernel_size=3)
    wrong = ReshapedPrimaryCapsules(in_channels=3, capsule_channels=2, capsule_dim=8, kernel_size=3)
    wrong.load_state_dict(right.state_dict())
    features = torch.rand(1, 3, 13, 13)
    maps = right.conv(features)  # [1, 16, 6, 6]
    u_right, u_wrong = right(features), wrong(features)
    assert u_right.shape == u_wrong.shape == (1, 72, 8)
    torch.testing.assert_close(u_right[0, 36 + 2 * 6 + 3], squash(maps[0, 8:16, 2, 3]))
    torch.testing.assert_close(u_wrong[0, 1], squash(maps[0, 0].flatten()[8:16]))
    assert not torch.allclose(u_right, u_wrong)


def test_shared_logits_make_one_image_depend_on_its_batch():
    u_hat = torch.randn(4, 12, 5, 6, dtype=torch.float64)
    other = u_hat.clone()
    other[1:] = torch.randn_like(other[1:])
    alone, _ = routing_with_shared_logits(u_hat)
    changed, _ = routing_with_shared_logits(other)
    assert not torch.allclose(alone[0], changed[0])
    torch.testing.assert_close(dynamic_routing(u_hat)[0], dynamic_routing(other)[0])
    # with one iteration there is no agreement yet, and nothing to share
    torch.testing.assert_close(routing_with_shared_logits(u_hat, 1)[0], dynamic_routing(u_hat, 1))


def test_the_early_return_routes_once_whatever_r_asks():
    u_hat = torch.randn(2, 12, 5, 6, dtype=torch.float64)
    for r in (1, 2, 3, 5):
        torch.testing.assert_close(routing_that_returns_early(u_hat, r), dynamic_routing(u_hat, 1))
    assert not torch.allclose(dynamic_routing(u_hat, 3), dynamic_routing(u_hat, 1))


def test_the_prediction_masked_model_ignores_the_labels():
    torch.manual_seed(0)
    right = CapsNet(TINY)
    wrong = PredictionMaskedCapsNet(TINY)
    wrong.load_state_dict(right.state_dict())
    images = torch.rand(3, 1, 28, 28)
    labels = (right(images).predictions + 1) % 10  # never the prediction
    torch.testing.assert_close(wrong(images, labels).reconstructions, right(images).reconstructions)
    assert not torch.equal(right(images, labels).reconstructions, right(images).reconstructions)
