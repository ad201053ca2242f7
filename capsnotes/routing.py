"""Routing by agreement (Sabour et al. 2017, Procedure 1, eqs. 2-3).

Every lower ("child") capsule ``i`` predicts the output of every higher ("parent")
capsule ``j``: the vote ``û_{j|i}``. Routing decides how much of each child's vote goes
to each parent. It starts undecided (uniform coupling), and then, iteration by
iteration, moves each child's vote towards the parents whose output agrees with it.

The tensors keep the paper's indices in the paper's order: ``u_hat[b, i, j]`` is
``û_{j|i}`` of example ``b``, and the logits and couplings are ``[batch, child,
parent]``. (``capsnotes.fast.routing`` computes the same with the parents first in
memory, which is faster; its tests hold it to this function.)
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor, nn

from .checks import check_iterations, check_votes
from .squash import squash

Votes = Float[Tensor, "batch child parent dim"]
Outputs = Float[Tensor, "batch parent dim"]
Couplings = Float[Tensor, "batch child parent"]


def dynamic_routing_with_couplings(
    u_hat: Votes, iterations: int = 3
) -> tuple[Outputs, Couplings]:
    r"""Route the votes ``u_hat`` to the parent capsules (Procedure 1).

    .. math::
        c_{ij} = \operatorname{softmax}_j(b_{ij}), \quad
        s_j = \sum_i c_{ij}\,\hat u_{j|i}, \quad
        v_j = \operatorname{squash}(s_j), \quad
        b_{ij} \leftarrow b_{ij} + \hat u_{j|i}\cdot v_j .

    ``iterations`` is ``r ≥ 1`` (1: one pass with uniform coupling). Returns ``v`` and
    the couplings ``c`` of the last iteration, where every ``c[b, i, :]`` sums to 1.
    """
    # line 1: the votes û_{j|i} of every child i for every parent j, and r
    check_votes(u_hat, iterations)
    batch, children, parents, _ = u_hat.shape
    # line 2: b_ij ← 0, per example: no image's routing depends on another's
    logits = u_hat.new_zeros(batch, children, parents)  # b
    for iteration in range(iterations):  # line 3
        # line 4: c_i ← softmax(b_i), over the parents j: each child splits its vote
        coupling = logits.softmax(dim=2)
        # line 5: s_j ← Σ_i c_ij û_{j|i}
        s = torch.einsum("bij,bijd->bjd", coupling, u_hat)
        # line 6: v_j ← squash(s_j)
        v = squash(s)
        # line 7: b_ij ← b_ij + û_{j|i} · v_j (not after the last pass: never read)
        if iteration + 1 < iterations:
            logits = logits + torch.einsum("bijd,bjd->bij", u_hat, v)
    # line 8: return v_j (and the last pass's c_ij, which the figures draw)
    return v, coupling


def dynamic_routing(u_hat: Votes, iterations: int = 3) -> Outputs:
    """The parents' outputs ``v`` ``[batch, parent, dim]`` of routing ``u_hat``
    (:func:`dynamic_routing_with_couplings` without the couplings)."""
    return dynamic_routing_with_couplings(u_hat, iterations)[0]


class DynamicRouting(nn.Module):
    """Module form of :func:`dynamic_routing` with a fixed number of iterations."""

    def __init__(self, iterations: int = 3) -> None:
        super().__init__()
        self.iterations = check_iterations(iterations)

    def forward(self, u_hat: Votes) -> Outputs:
        return dynamic_routing(u_hat, self.iterations)

    def extra_repr(self) -> str:
        return f"iterations={self.iterations}"
