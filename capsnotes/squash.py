"""The squashing non-linearity (Sabour et al. 2017, eq. 1).

A capsule's output is a vector whose *length* is the probability that the entity it
represents is present and whose *orientation* encodes that entity's pose. ``squash``
enforces the first half of that contract: it keeps the direction of its input and maps
the length into ``[0, 1)``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .checks import FloatTensor, Positive, checked

__all__ = ["squash", "Squash", "DEFAULT_EPS"]

#: Added to the squared length under the square root, so that the zero vector has a
#: finite value (zero) and a finite gradient (zero) instead of 0/0.
DEFAULT_EPS = 1e-8


@checked(s=FloatTensor(), eps=Positive())
def squash(s: Tensor, dim: int = -1, eps: float = DEFAULT_EPS) -> Tensor:
    r"""Squash the vectors along ``dim`` (eq. 1).

    .. math:: v = \frac{\lVert s\rVert^2}{1 + \lVert s\rVert^2}\,\frac{s}{\lVert s\rVert}

    Args:
        s: any shape ``[..., D, ...]``; the vectors lie along ``dim``.
        dim: the axis holding each capsule's components.
        eps: small positive number inside the square root; ``‖s‖`` is computed as
            ``sqrt(‖s‖² + eps)``, so ``squash(0) = 0`` with gradient 0.

    Returns:
        ``v`` with the shape, dtype and device of ``s``; ``v`` points along ``s`` and
        ``‖v‖ < 1``.
    """
    squared_length = s.pow(2).sum(dim=dim, keepdim=True)  # ‖s‖²
    # ‖s‖²/(1+‖s‖²) shrinks the length into [0, 1); dividing by ‖s‖ makes s a unit vector.
    scale = squared_length / (1.0 + squared_length) / torch.sqrt(squared_length + eps)
    return s * scale


class Squash(nn.Module):
    """Module form of :func:`squash`, for use inside ``nn.Sequential``."""

    def __init__(self, dim: int = -1, eps: float = DEFAULT_EPS) -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps

    def forward(self, s: Tensor) -> Tensor:
        return squash(s, dim=self.dim, eps=self.eps)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, eps={self.eps}"
