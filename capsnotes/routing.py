"""Routing by agreement (Sabour et al. 2017, Procedure 1, eqs. 2-3).

Every lower ("child") capsule ``i`` predicts the output of every higher ("parent")
capsule ``j``: the vote ``û_{j|i}``. Routing decides how much of each child's vote goes
to each parent. It starts undecided (uniform coupling), and then, iteration by
iteration, moves each child's vote towards the parents whose output agrees with it.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from .checks import FloatTensor, Int, check_iterations, checked
from .squash import squash

__all__ = ["Routing", "dynamic_routing", "DynamicRouting"]

#: A routing implementation: ``route(u_hat, iterations, return_coupling)`` with the
#: signature and results of :func:`dynamic_routing`.
Routing = Callable[..., Tensor | tuple[Tensor, Tensor]]


@checked(
    u_hat=FloatTensor("[batch, in_caps, out_caps, out_dim]", dims=4),
    iterations=Int(minimum=1, label="routing iterations"),
)
def dynamic_routing(
    u_hat: Tensor, iterations: int = 3, return_coupling: bool = False
) -> Tensor | tuple[Tensor, Tensor]:
    r"""Route the votes ``u_hat`` to the parent capsules (Procedure 1).

    Runs ``r`` iterations with per-example logits ``b`` that start at zero: each child
    splits its vote among the parents by a softmax of its logits, each parent squashes
    the weighted sum of its votes, and each logit grows by the agreement (dot product) of
    the child's vote with the parent's output.

    .. math::
        c_{ij} = \operatorname{softmax}_j(b_{ij}), \quad
        s_j = \sum_i c_{ij}\,\hat u_{j|i}, \quad
        v_j = \operatorname{squash}(s_j), \quad
        b_{ij} \leftarrow b_{ij} + \hat u_{j|i}\cdot v_j .

    Args:
        u_hat: votes ``û_{j|i}``, shape ``[batch, in_caps, out_caps, out_dim]``.
        iterations: ``r ≥ 1``; ``1`` is a single pass with uniform coupling.
        return_coupling: also return the coupling coefficients used in the last
            iteration.

    Returns:
        ``v`` of shape ``[batch, out_caps, out_dim]``, or ``(v, c)`` with ``c`` of shape
        ``[batch, in_caps, out_caps]`` where every ``c[b, i, :]`` sums to 1.
    """
    # Procedure 1, line 1: the votes û_{j|i}
    # laid out [B, O, I, D]: for each example and parent the children's votes form one
    # matrix, so both sums over the children i below are batched matrix products.
    batch, in_caps, out_caps, _ = u_hat.shape
    votes = u_hat.transpose(1, 2).contiguous()
    # line 2: b_ij ← 0
    # one set of logits per example, so that no image's routing depends on another's;
    # stored [B, O, I] like the votes (b_ij at [b, j, i]), so that no step transposes
    logits = u_hat.new_zeros(batch, out_caps, in_caps)  # b: [B, O, I]
    for iteration in range(iterations):  # line 3: r iterations
        # line 4: c_i ← softmax(b_i)
        # over the parents j (dim 1): each child splits its vote
        coupling = logits.softmax(dim=1)  # c: [B, O, I]
        # line 5: s_j ← Σ_i c_ij û_{j|i}
        s = (coupling.unsqueeze(2) @ votes).squeeze(2)  # s: [B, O, D]
        # line 6: v_j ← squash(s_j)
        v = squash(s)  # v: [B, O, D]
        # line 7: b_ij ← b_ij + û_{j|i} · v_j
        # (not after the last pass: those logits would never be read)
        if iteration + 1 < iterations:
            agreement = (v.unsqueeze(2) @ votes.transpose(2, 3)).squeeze(2)  # û·v: [B, O, I]
            logits = logits + agreement
    # line 8: return v_j
    if return_coupling:
        return v, coupling.transpose(1, 2)  # c: [B, I, O]
    return v


class DynamicRouting(nn.Module):
    """Module form of :func:`dynamic_routing` with a fixed number of iterations."""

    def __init__(self, iterations: int = 3) -> None:
        super().__init__()
        self.iterations = check_iterations(iterations)

    def forward(self, u_hat: Tensor) -> Tensor:
        return dynamic_routing(u_hat, self.iterations)

    def extra_repr(self) -> str:
        return f"iterations={self.iterations}"
