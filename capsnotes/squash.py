"""The squashing non-linearity (Sabour et al. 2017, eq. 1).

A capsule's output is a vector whose *length* is the probability that the entity it
represents is present and whose *orientation* encodes that entity's pose. ``squash``
enforces the first half of that contract: it keeps the direction of its input and maps
the length into ``[0, 1)``.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor, nn

from .checks import check_squash, check_squash_options


def squash(
    s: Float[Tensor, "*shape"], dim: int = -1, eps: float = 1e-8
) -> Float[Tensor, "*shape"]:
    r"""Squash the vectors along ``dim`` (eq. 1).

    .. math::
        v = \frac{\lVert s\rVert^2}{1 + \lVert s\rVert^2}\,\frac{s}{\lVert s\rVert}

    ``‖s‖`` is computed as ``sqrt(‖s‖² + eps)``, so that ``squash(0) = 0`` with gradient
    0 instead of 0/0 (in float16, with ``eps`` at least 6.1e-5). The result has the
    shape, dtype and device of ``s``, points along ``s``, and is shorter than 1.
    """
    check_squash(s, dim, eps)
    squared_length = s.pow(2).sum(dim=dim, keepdim=True)  # ‖s‖²
    # eps keeps ‖s‖ from 0; float16 rounds 1e-8 to 0, so there it is float16's smallest
    # normal number, 6.1e-5
    eps = max(eps, torch.finfo(squared_length.dtype).tiny)
    # ‖s‖²/(1+‖s‖²) shrinks the length into [0, 1); dividing by ‖s‖ makes s a unit
    # vector.
    scale = squared_length / (1.0 + squared_length) / torch.sqrt(squared_length + eps)
    return s * scale


class Squash(nn.Module):
    """Module form of :func:`squash`, for use inside ``nn.Sequential``."""

    def __init__(self, dim: int = -1, eps: float = 1e-8) -> None:
        super().__init__()
        check_squash_options(dim, eps)
        self.dim, self.eps = dim, eps

    def forward(self, s: Tensor) -> Tensor:
        return squash(s, self.dim, self.eps)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, eps={self.eps}"
