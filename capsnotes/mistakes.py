"""Popular mistakes, written out so that the book can show what each one changes.

Public implementations of CapsNet get several details of the paper wrong, and each still
trains, which is why they survive (the book's introduction names them). Here they are,
each beside the correct function it replaces, in one place: the chapters display them
and run them side by side with the correct code, ``benchmarks/variants.py`` trains with
them, and the tests check that the assertions which guard the correct functions catch
them. Nothing else in the package uses this module.

* :func:`squash_without_eps` — eq. 1 as written, 0/0 for a zero vector (chapter 2);
* :func:`routing_over_children` — the routing softmax over the wrong axis (chapter 5);
* :func:`unsquared_margin_loss` — eq. 4 without its squares (chapters 6 and 8);
* :func:`mean_reconstruction_loss` — the reconstruction loss averaged over the pixels
  instead of summed, 784 times weaker on MNIST (chapters 7 and 8).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .losses import class_presence
from .squash import squash

__all__ = [
    "mean_reconstruction_loss",
    "routing_over_children",
    "squash_without_eps",
    "unsquared_margin_loss",
]


def squash_without_eps(s: Tensor, dim: int = -1) -> Tensor:
    """WRONG: eq. 1 straight from the formula, dividing by ``‖s‖``: NaN at ``s = 0``."""
    norm = s.norm(dim=dim, keepdim=True)
    return norm**2 / (1 + norm**2) * s / norm


def routing_over_children(u_hat: Tensor, iterations: int = 3) -> tuple[Tensor, Tensor]:
    """WRONG: Procedure 1 with the softmax over the children (``dim=1`` of logits
    ``[batch, children, parents]``) instead of the parents. ``u_hat`` ``[B, I, O, D]`` →
    ``(v [B, O, D], c [B, I, O])``, where now every ``c[b, :, j]`` sums to 1."""
    logits = u_hat.new_zeros(u_hat.shape[:3])
    for iteration in range(iterations):
        coupling = logits.softmax(dim=1)  # over the children: the mistake
        v = squash((coupling.unsqueeze(-1) * u_hat).sum(dim=1))
        if iteration + 1 < iterations:
            logits = logits + (u_hat * v.unsqueeze(1)).sum(-1)
    return v, coupling


def unsquared_margin_loss(
    v: Tensor, target: Tensor, m_pos: float = 0.9, m_neg: float = 0.1, lam: float = 0.5
) -> Tensor:
    """WRONG: the margin loss of eq. 4 with hinge terms that are not squared, so the pull
    on a capsule stays constant up to its margin and then stops."""
    present = class_presence(target, v.shape[1], v.dtype)
    lengths = torch.linalg.vector_norm(v, dim=-1)
    loss_present = present * torch.relu(m_pos - lengths)
    loss_absent = lam * (1.0 - present) * torch.relu(lengths - m_neg)
    return (loss_present + loss_absent).sum(dim=1).mean()


def mean_reconstruction_loss(
    reconstructions: Tensor, images: Tensor, weight: float = 0.0005
) -> Tensor:
    """WRONG: ``weight`` times the *mean* squared pixel error (``nn.MSELoss``), where the
    paper scales the sum: on 28×28 images 784 times weaker."""
    errors = (reconstructions.flatten(1) - images.flatten(1).to(reconstructions.dtype)).pow(2)
    return weight * errors.mean()
