"""Digit capsules: votes ``û_{j|i} = W_ij u_i`` and routing (Sabour et al. 2017, eq. 2).

Every one of the ``in_caps`` primary capsules has its own ``out_dim × in_dim`` matrix for
every one of the ``out_caps`` digit capsules: 1,152 × 10 matrices of 16×8 in the paper's
model, 1,474,560 weights, and no bias.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .checks import check_float_tensor, check_positive_ints
from .kernels import routing_function
from .routing import check_iterations

__all__ = ["DigitCapsules", "WEIGHT_INIT_STD"]

#: Standard deviation of the normal initialisation of ``W_ij``.
WEIGHT_INIT_STD = 0.01


class DigitCapsules(nn.Module):
    """Fully connected capsule layer with routing by agreement.

    Input ``u`` of shape ``[B, in_caps, in_dim]``; output ``v`` of shape
    ``[B, out_caps, out_dim]``. ``weight`` holds ``W`` as ``[in_caps, out_caps, out_dim,
    in_dim]``, so ``weight[i, j]`` is the paper's ``W_ij``. ``routing`` picks the
    implementation of Procedure 1: ``"reference"`` (:func:`~capsnotes.dynamic_routing`)
    or ``"fused"`` (the same function with a faster backward, see
    :mod:`capsnotes.kernels`).
    """

    def __init__(
        self,
        in_caps: int = 1152,
        in_dim: int = 8,
        out_caps: int = 10,
        out_dim: int = 16,
        iterations: int = 3,
        routing: str = "reference",
    ) -> None:
        super().__init__()
        check_positive_ints(in_caps=in_caps, in_dim=in_dim, out_caps=out_caps, out_dim=out_dim)
        self.in_caps, self.in_dim = in_caps, in_dim
        self.out_caps, self.out_dim = out_caps, out_dim
        self.iterations = check_iterations(iterations)
        self.weight = nn.Parameter(torch.empty(in_caps, out_caps, out_dim, in_dim))
        self.routing = routing
        self.route = routing_function(routing)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=WEIGHT_INIT_STD)

    def votes(self, u: Tensor) -> Tensor:
        """``û_{j|i} = W_ij u_i`` for all ``i, j``: ``[B, in_caps, in_dim]`` →
        ``[B, in_caps, out_caps, out_dim]``."""
        check_float_tensor("u", u, shape=(None, self.in_caps, self.in_dim))
        return torch.einsum("ijdk,bik->bijd", self.weight, u)

    def forward(self, u: Tensor, return_coupling: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        return self.route(self.votes(u), self.iterations, return_coupling)

    def extra_repr(self) -> str:
        return (
            f"in_caps={self.in_caps}, in_dim={self.in_dim}, out_caps={self.out_caps}, "
            f"out_dim={self.out_dim}, iterations={self.iterations}, routing={self.routing!r}"
        )
