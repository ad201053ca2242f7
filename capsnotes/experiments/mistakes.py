"""Popular mistakes, written out so that the book can show what each one changes.

Public implementations of CapsNet get several details of the paper wrong, and each still
trains, which is why they survive. Here they are, each marked WRONG: the chapters run
them beside the correct code they replace (chapter 2 the squash, 3 the primary capsules,
5 routing, 6 the margin loss, 7 the decoder and its loss), ``benchmarks/variants.py``
trains with them, and the tests check that the checks guarding the correct code catch
them. Nothing else in the package uses this module.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..capsules import PrimaryCapsules
from ..losses import class_presence
from ..model import CapsNet, CapsNetOutput
from ..squash import squash


def squash_without_eps(s: Tensor, dim: int = -1) -> Tensor:
    """WRONG: eq. 1 straight from the formula, dividing by ``‖s‖``: NaN at ``s = 0``."""
    norm = s.norm(dim=dim, keepdim=True)
    return norm**2 / (1 + norm**2) * s / norm


class ReshapedPrimaryCapsules(PrimaryCapsules):
    """WRONG: ``maps.view(batch, -1, capsule_dim)`` on the convolution's ``[B, C·D, H',
    W']`` output. Memory runs along the grid first, so a "capsule" is ``capsule_dim``
    neighbouring positions of one channel (some straddle two channels), not the
    ``capsule_dim`` channels of one capsule type at one position."""

    def forward(self, features: Tensor) -> Tensor:
        maps = self.conv(features)
        return squash(maps.reshape(maps.shape[0], -1, self.capsule_dim))


def routing_over_children(u_hat: Tensor, iterations: int = 3) -> tuple[Tensor, Tensor]:
    """WRONG: Procedure 1 with the softmax over the children (dim 1 of the logits
    ``[batch, child, parent]``): now every ``c[b, :, j]`` sums to 1. Returns ``(v,
    c)``."""
    logits = u_hat.new_zeros(u_hat.shape[:3])
    for iteration in range(iterations):
        coupling = logits.softmax(dim=1)  # over the children: the mistake
        v = squash(torch.einsum("bij,bijd->bjd", coupling, u_hat))
        if iteration + 1 < iterations:
            logits = logits + torch.einsum("bijd,bjd->bij", u_hat, v)
    return v, coupling


def routing_with_shared_logits(
    u_hat: Tensor, iterations: int = 3
) -> tuple[Tensor, Tensor]:
    """WRONG: one set of logits ``[1, child, parent]`` for the whole batch, grown by the
    agreement averaged over the batch: an image's routing depends on the others in its
    batch. Returns ``(v, c)``."""
    logits = u_hat.new_zeros(1, *u_hat.shape[1:3])  # shared: the mistake
    for iteration in range(iterations):
        coupling = logits.softmax(dim=2).expand(u_hat.shape[:3])
        v = squash(torch.einsum("bij,bijd->bjd", coupling, u_hat))
        if iteration + 1 < iterations:
            agreement = torch.einsum("bijd,bjd->bij", u_hat, v)
            logits = logits + agreement.mean(dim=0, keepdim=True)
    return v, coupling


def routing_that_returns_early(u_hat: Tensor, iterations: int = 3) -> Tensor:
    """WRONG: the ``return`` indented into the loop, so routing stops after its first
    pass (uniform couplings) however many iterations are asked for."""
    logits = u_hat.new_zeros(u_hat.shape[:3])
    for _ in range(iterations):
        coupling = logits.softmax(dim=2)
        v = squash(torch.einsum("bij,bijd->bjd", coupling, u_hat))
        logits = logits + torch.einsum("bijd,bjd->bij", u_hat, v)
        return v  # inside the loop: the mistake
    raise ValueError(f"routing iterations must be >= 1, got {iterations}")


def unsquared_margin_loss(
    v: Tensor, target: Tensor, m_pos: float = 0.9, m_neg: float = 0.1, lam: float = 0.5
) -> Tensor:
    """WRONG: the margin loss of eq. 4 with hinge terms that are not squared, so the
    pull on a capsule stays constant up to its margin and then stops."""
    present = class_presence(target, v.shape[1], v.dtype)
    lengths = torch.linalg.vector_norm(v, dim=-1)
    loss_present = present * torch.relu(m_pos - lengths)
    loss_absent = lam * (1.0 - present) * torch.relu(lengths - m_neg)
    return (loss_present + loss_absent).sum(dim=1).mean()


class PredictionMaskedCapsNet(CapsNet):
    """WRONG: the decoder draws from the capsule of the prediction in training too (the
    labels are ignored), so while the network is wrong it learns to draw the wrong
    digit."""

    def forward(self, images: Tensor, labels: Tensor | None = None) -> CapsNetOutput:
        return super().forward(images)  # labels dropped: the mistake


def mean_reconstruction_loss(
    reconstructions: Tensor, images: Tensor, weight: float = 0.0005
) -> Tensor:
    """WRONG: ``weight`` times the *mean* squared pixel error (``nn.MSELoss``), where
    the paper scales the sum: on 28×28 images 784 times weaker."""
    errors = (
        reconstructions.flatten(1) - images.flatten(1).to(reconstructions.dtype)
    ).pow(2)
    return weight * errors.mean()
