"""Digit capsules: votes ``û_{j|i} = W_ij u_i`` and routing (Sabour et al. 2017, eq. 2).

Every one of the ``in_caps`` primary capsules has its own ``out_dim × in_dim`` matrix for
every one of the ``out_caps`` digit capsules: 1,152 × 10 matrices of 16×8 in the paper's
model, 1,474,560 weights, and no bias.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .checks import FloatTensor, check_iterations, check_positive_ints, checked
from .routing import Routing, dynamic_routing

__all__ = ["DigitCapsules", "WEIGHT_INIT_STD"]

#: Standard deviation of the normal initialisation of ``W_ij``.
WEIGHT_INIT_STD = 0.01


def _capsules_shape(arguments: dict) -> tuple[int | None, ...]:
    layer = arguments["self"]
    return (None, layer.in_caps, layer.in_dim)


class DigitCapsules(nn.Module):
    """Fully connected capsule layer with routing by agreement.

    Input ``u`` of shape ``[B, in_caps, in_dim]``; output ``v`` of shape
    ``[B, out_caps, out_dim]``. ``weight`` holds ``W`` as ``[in_caps, out_caps, out_dim,
    in_dim]``, so ``weight[i, j]`` is the paper's ``W_ij``. ``routing`` is the function
    that runs Procedure 1: :func:`~capsnotes.dynamic_routing`, or one with its signature
    and results (chapter 14's ``fused_dynamic_routing``).
    """

    def __init__(
        self,
        in_caps: int = 1152,
        in_dim: int = 8,
        out_caps: int = 10,
        out_dim: int = 16,
        iterations: int = 3,
        routing: Routing = dynamic_routing,
    ) -> None:
        super().__init__()
        check_positive_ints(in_caps=in_caps, in_dim=in_dim, out_caps=out_caps, out_dim=out_dim)
        self.in_caps, self.in_dim = in_caps, in_dim
        self.out_caps, self.out_dim = out_caps, out_dim
        self.iterations = check_iterations(iterations)
        # W_ij for every child i and parent j: [in_caps, out_caps, out_dim, in_dim]
        self.weight = nn.Parameter(torch.empty(in_caps, out_caps, out_dim, in_dim))
        self.route = routing
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=WEIGHT_INIT_STD)

    @checked(u=FloatTensor(shape=_capsules_shape))
    def votes(self, u: Tensor) -> Tensor:
        """``û_{j|i} = W_ij u_i`` for all ``i, j``: ``[B, in_caps, in_dim]`` →
        ``[B, in_caps, out_caps, out_dim]``."""
        return torch.einsum("ijdk,bik->bijd", self.weight, u)

    def forward(self, u: Tensor, return_coupling: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """``u`` ``[B, in_caps, in_dim]`` → ``v`` ``[B, out_caps, out_dim]`` (and the last
        couplings ``[B, in_caps, out_caps]`` if asked)."""
        return self.route(self.votes(u), self.iterations, return_coupling)

    def extra_repr(self) -> str:
        return (
            f"in_caps={self.in_caps}, in_dim={self.in_dim}, out_caps={self.out_caps}, "
            f"out_dim={self.out_dim}, iterations={self.iterations}, "
            f"routing={self.route.__name__}"
        )
