"""The popular mistakes differ from the paper exactly as the book says, and the checks
that guard the correct functions catch them."""

import pytest
import torch

from capsnotes import capsnet_loss, margin_loss, reconstruction_loss, squash
from capsnotes.mistakes import (
    mean_reconstruction_loss,
    squash_without_eps,
    unsquared_margin_loss,
)
from capsnotes.model import CapsNetOutput


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
