"""Routing by agreement (Sabour et al. 2017, Procedure 1, eqs. 2-3).

Every lower ("child") capsule ``i`` predicts the output of every higher ("parent")
capsule ``j``: the vote ``û_{j|i}``. Routing decides how much of each child's vote goes
to each parent. It starts undecided (uniform coupling), and then, iteration by
iteration, moves each child's vote towards the parents whose output agrees with it.
"""

from __future__ import annotations

from torch import Tensor, nn

from .checks import check_float_tensor
from .squash import squash

__all__ = ["dynamic_routing", "DynamicRouting", "check_iterations"]


def check_iterations(iterations: object) -> int:
    """Return ``iterations`` if it is a whole number ≥ 1, else raise a clear error."""
    if isinstance(iterations, bool) or not isinstance(iterations, int):
        raise TypeError(f"routing iterations must be an int >= 1, got {type(iterations).__name__}")
    if iterations < 1:
        raise ValueError(
            f"routing iterations must be >= 1 (1 means uniform coupling), got {iterations}"
        )
    return iterations


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
    check_float_tensor("u_hat", u_hat, "[batch, in_caps, out_caps, out_dim]", dims=4)
    check_iterations(iterations)
    batch, in_caps, out_caps, _ = u_hat.shape

    # Lay the votes out as [batch, out_caps, in_caps, out_dim], so that for each example
    # and parent the children's votes form one matrix: both sums over i below are then a
    # single batched matrix product, with no [B, I, O, D]-sized temporary.
    votes = u_hat.transpose(1, 2).contiguous()
    # b_ij: one set of logits per example, all zero, so the first coupling is uniform.
    logits = u_hat.new_zeros(batch, in_caps, out_caps)
    for iteration in range(iterations):
        # Each child splits its vote among the parents: softmax over j (the last axis).
        coupling = logits.softmax(dim=-1)
        # s_j = Σ_i c_ij û_{j|i}:  [B, O, 1, I] @ [B, O, I, D] -> [B, O, D]
        s = (coupling.transpose(1, 2).unsqueeze(2) @ votes).squeeze(2)
        v = squash(s)
        if iteration + 1 < iterations:
            # Agreement a_ij = û_{j|i} · v_j:  [B, O, I, D] @ [B, O, D, 1] -> [B, O, I]
            agreement = (votes @ v.unsqueeze(-1)).squeeze(-1)
            logits = logits + agreement.transpose(1, 2)
    if return_coupling:
        return v, coupling
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
