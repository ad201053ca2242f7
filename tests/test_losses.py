import pytest
import torch

from capsnotes import margin_loss, reconstruction_loss


def capsules_with_lengths(lengths: list[list[float]], dim: int = 4) -> torch.Tensor:
    """Capsules [B, classes, dim] whose lengths are exactly ``lengths``."""
    lengths_t = torch.tensor(lengths, dtype=torch.float64)
    direction = torch.nn.functional.normalize(
        torch.randn(*lengths_t.shape, dim, dtype=torch.float64), dim=-1
    )
    return direction * lengths_t.unsqueeze(-1)


def test_margin_loss_hand_computed():
    v = capsules_with_lengths([[0.95, 0.30, 0.05], [0.50, 0.10, 0.80]])
    labels = torch.tensor([0, 2])
    # example 0: present 0.95 > 0.9 -> 0; absent 0.30 -> 0.5·0.2²; absent 0.05 < 0.1 -> 0
    # example 1: absent 0.50 -> 0.5·0.4²; absent 0.10 -> 0; present 0.80 -> 0.1²
    expected = ((0.5 * 0.2**2) + (0.5 * 0.4**2 + 0.1**2)) / 2
    assert margin_loss(v, labels).item() == pytest.approx(expected, rel=1e-9)


def test_margin_loss_terms_are_squared_not_linear():
    v = capsules_with_lengths([[0.5, 0.0]])
    # present at 0.5: (0.9 - 0.5)² = 0.16, where an unsquared hinge would give 0.4
    assert margin_loss(v, torch.tensor([0])).item() == pytest.approx(0.16, rel=1e-9)


def test_margin_loss_parameters():
    v = capsules_with_lengths([[0.5, 0.5]])
    loss = margin_loss(v, torch.tensor([0]), m_pos=0.8, m_neg=0.2, lam=1.0)
    assert loss.item() == pytest.approx(0.3**2 + 0.3**2, rel=1e-9)


def test_margin_loss_sums_classes_and_averages_batch():
    v = capsules_with_lengths([[0.0] * 10] * 3)
    # every example: the present class at length 0 costs 0.81; the absent ones nothing
    assert margin_loss(v, torch.tensor([1, 2, 3])).item() == pytest.approx(0.81, rel=1e-9)


def test_margin_loss_accepts_presence_matrix():
    v = capsules_with_lengths([[0.5, 0.5, 0.0]])
    both = torch.tensor([[1.0, 1.0, 0.0]])
    assert margin_loss(v, both).item() == pytest.approx(2 * 0.4**2, rel=1e-9)
    torch.testing.assert_close(
        margin_loss(v, torch.tensor([0])), margin_loss(v, torch.tensor([[1.0, 0.0, 0.0]]))
    )


def test_margin_loss_is_zero_when_all_margins_are_met():
    v = capsules_with_lengths([[0.95, 0.05, 0.0]])
    assert margin_loss(v, torch.tensor([0])).item() == 0.0


def test_margin_loss_gradcheck_float64():
    v = capsules_with_lengths([[0.5, 0.3, 0.7], [0.2, 0.6, 0.4]]).requires_grad_()
    labels = torch.tensor([2, 0])
    assert torch.autograd.gradcheck(lambda x: margin_loss(x, labels), (v,))


def test_reconstruction_loss_hand_computed():
    images = torch.zeros(2, 1, 2, 2)
    recon = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0]])
    # sums of squares: 2 and 0.25; mean 1.125; times 0.0005
    assert reconstruction_loss(recon, images).item() == pytest.approx(0.0005 * 1.125)
    assert reconstruction_loss(recon, images, weight=1.0).item() == pytest.approx(1.125)


def test_reconstruction_loss_is_784_times_a_mean():
    images, recon = torch.rand(4, 1, 28, 28), torch.rand(4, 1, 28, 28)
    mean_version = 0.0005 * ((recon - images) ** 2).mean()
    torch.testing.assert_close(reconstruction_loss(recon, images), 784 * mean_version)


def test_reconstruction_loss_gradcheck_float64():
    images = torch.rand(3, 1, 4, 4, dtype=torch.float64)
    recon = torch.rand(3, 16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda r: reconstruction_loss(r, images), (recon,))
