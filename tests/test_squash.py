import math

import pytest
import torch

from capsnotes import Squash, squash


def test_hand_computed_value():
    # ‖(3, 4)‖ = 5, so v = 25/26 · (3, 4)/5
    v = squash(torch.tensor([[3.0, 4.0]], dtype=torch.float64))
    expected = torch.tensor([[25 / 26 * 0.6, 25 / 26 * 0.8]], dtype=torch.float64)
    torch.testing.assert_close(v, expected, rtol=1e-7, atol=1e-7)


def test_keeps_direction_and_lengths_below_one():
    s = torch.randn(64, 10, 16, dtype=torch.float64) * torch.logspace(
        -3, 3, 16, dtype=torch.float64
    )
    v = squash(s)
    lengths = v.norm(dim=-1)
    assert (lengths < 1).all()
    cosine = torch.nn.functional.cosine_similarity(v, s, dim=-1)
    torch.testing.assert_close(cosine, torch.ones_like(cosine))
    # ‖v‖ = ‖s‖² / (1 + ‖s‖²), up to the tiny eps
    norm_sq = s.pow(2).sum(-1)
    torch.testing.assert_close(lengths, norm_sq / (1 + norm_sq), rtol=1e-6, atol=1e-6)


def test_length_is_monotone_in_input_length():
    scales = torch.linspace(0.0, 10.0, 101, dtype=torch.float64)
    lengths = squash(
        scales[:, None] * torch.tensor([[1.0, 2.0, 2.0]], dtype=torch.float64) / 3
    ).norm(dim=-1)
    assert (lengths.diff() > 0).all()
    assert lengths[0] == 0
    # ‖s‖ = 1 gives exactly half
    assert math.isclose(float(lengths[10]), 0.5, rel_tol=1e-6)


def test_zero_vector_has_finite_value_and_gradient():
    s = torch.zeros(2, 8, requires_grad=True)
    v = squash(s)
    assert torch.equal(v, torch.zeros(2, 8))
    v.sum().backward()
    assert torch.isfinite(s.grad).all()
    assert torch.equal(s.grad, torch.zeros(2, 8))  # the true derivative at 0 is 0


def test_dim_argument_squashes_along_that_axis():
    s = torch.randn(3, 8, 5)
    torch.testing.assert_close(squash(s, dim=1), squash(s.transpose(1, 2)).transpose(1, 2))


def test_module_form_matches_function():
    s = torch.randn(4, 7)
    torch.testing.assert_close(Squash()(s), squash(s))
    assert "dim=-1" in repr(Squash())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_keeps_dtype(dtype):
    assert squash(torch.randn(3, 4).to(dtype)).dtype == dtype


def test_gradcheck_float64():
    s = torch.randn(3, 5, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(squash, (s,))
    assert torch.autograd.gradgradcheck(squash, (s,))
