"""Routing by agreement, computed faster: the same values and gradients as
:func:`capsnotes.dynamic_routing` (tested in float64). Hand-written: torch fuses neither
the loop nor its backward.

* Layout: the paper's ``[batch, child, parent, dim]`` makes both sums over the children
  einsums that reorder the votes on every pass. Laid out ``[batch, parent, child, dim]``
  once, the children's votes for each example and parent form one matrix, and both sums
  are batched matrix products (the logits ``[batch, parent, child]``, their softmax
  over dim 1).
* Backward: autograd through Procedure 1 writes one votes-sized gradient per iteration;
  :class:`FusedRouting` collects every contribution to the gradient of the votes as a
  rank-``(2r - 1)`` product and writes that tensor once.
* The agreements ``û·v`` (forward) and ``V·gs`` (backward) multiply each parent's
  votes transposed. Handed a transposed view, those batched products ran 2-4 times
  slower than on a contiguous copy (one-off timings on a 2-core AMD Zen 5, bf16, batch
  128: about 3 against 0.9 ms each, five per step). So
  :class:`FusedRouting` lays the votes out ``[batch, parent, dim, child]`` once per
  step, in two copies (``[batch, child, parent, dim]`` → ``[batch, parent, child,
  dim]`` → ``[batch, parent, dim, child]``: 4 ms at batch 128), and every product of
  both passes reads that layout. The weighted sums over the children run faster on it
  too (timed alone at batch 128: 0.57 against 0.85 ms).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..capsules import DigitCapsules
from ..checks import check_capsules
from ..squash import squash


def permuted_copy(x: Tensor, dims: tuple[int, ...]) -> Tensor:
    """``x.permute(dims)`` copied into a new contiguous tensor, for a permutation that
    keeps the last dimension last.

    Where the last dimension's bytes allow, the copy moves 8-byte words: a bf16 vector
    of 16 values goes as 4 words instead of 16 values. The votes' copy into ``[B,
    parent, child, D]`` at batch 64 took 0.9 against 2.3 ms alone this way (one-off
    timings on a 2-core AMD Zen 5). The bits are copied unchanged.
    """
    if sorted(dims) != list(range(x.dim())) or dims[-1] != x.dim() - 1:
        raise ValueError(
            f"dims must be a permutation of {x.dim()} dimensions that keeps the last "
            f"last, got {tuple(dims)}"
        )
    words = _as_words(x)
    if words is None:
        return x.permute(dims).contiguous()
    return words.permute(dims).contiguous().view(x.dtype)


def _as_words(x: Tensor) -> Tensor | None:
    """``x`` viewed as 8-byte integers along its last dimension, or None where its
    layout does not allow that view."""
    size = x.element_size()
    if size >= 8 or x.shape[-1] * size % 8 or x.stride(-1) != 1:
        return None
    ratio = 8 // size
    strides = (*x.stride()[:-1], x.storage_offset())
    if any(stride % ratio for stride in strides):
        return None
    return x.view(torch.int64)


def route_parents_first(
    votes: Tensor, iterations: int, votes_t: Tensor | None = None
) -> tuple[Tensor, list[tuple[Tensor, Tensor, Tensor]]]:
    """Procedure 1 on votes ``[B, parent, child, D]``: the outputs ``v`` ``[B, parent,
    D]`` and, per iteration, its couplings ``[B, parent, child]``, ``s`` and ``v``.
    ``votes_t``: the same votes laid out ``[B, parent, D, child]``, if the caller has
    them: every product then reads them (otherwise the weighted sums read ``votes``
    and the agreements a transposed view)."""
    logits = votes.new_zeros(votes.shape[:3])  # b, laid out [B, parent, child]
    passes = []
    for iteration in range(iterations):
        coupling = logits.softmax(dim=1)  # over the parents
        if votes_t is None:  # Σ_i c_ij û_j|i: [B, parent, D]
            s = (coupling.unsqueeze(2) @ votes).squeeze(2)
        else:
            s = (votes_t @ coupling.unsqueeze(3)).squeeze(3)
        v = squash(s)
        passes.append((coupling, s, v))
        if iteration + 1 < iterations:
            agreement = v.unsqueeze(2) @ (votes.mT if votes_t is None else votes_t)
            logits = logits + agreement.squeeze(2)  # û·v
    return v, passes


class FusedRouting(torch.autograd.Function):
    """:func:`route_parents_first` with a backward derived by hand."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, u_hat: Tensor, iterations: int) -> Tensor:  # noqa: ANN001
        # Vᵀ: [B, O, D, I], through V: [B, O, I, D] (two copies take less time than
        # one that transposes every value; the first moves whole D-vectors)
        votes = permuted_copy(u_hat, (0, 2, 1, 3))
        votes_t = votes.transpose(2, 3).contiguous()
        v, passes = route_parents_first(votes, iterations, votes_t)
        ctx.iterations = iterations
        # the votes' gradient is handed back in the votes' own layout where that is
        # children first ([I, B, O, D], as FusedDigitCapsules makes them)
        ctx.children_first = u_hat.transpose(0, 1).is_contiguous()
        ctx.save_for_backward(votes_t, *[t for one in passes for t in one])
        return v

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad_v: Tensor):  # noqa: ANN001, ANN205
        grad_votes = _routing_backward(ctx.saved_tensors, grad_v, ctx.iterations)
        if ctx.children_first:  # [B, O, I, D] → [I, B, O, D], seen as [B, I, O, D]
            return permuted_copy(grad_votes, (2, 0, 1, 3)).transpose(0, 1), None
        return grad_votes.transpose(1, 2), None


def _routing_backward(saved: tuple[Tensor, ...], grad_v: Tensor, r: int) -> Tensor:
    """The gradient of the votes ``[B, O, I, D]`` from :class:`FusedRouting`'s saved
    tensors (the votes ``[B, O, D, I]``, then each iteration's couplings, s and v)."""
    votes_t, *saved = saved
    grad_logits = None  # dL/db of the logits after iteration t
    weights: list[Tensor] = []  # dL/dV = Σ_k weights[k] ⊗ vectors[k]
    vectors: list[Tensor] = []
    for t in reversed(range(r)):
        coupling, s, v = saved[3 * t : 3 * t + 3]
        if t == r - 1:
            grad_out = grad_v
        else:
            # b_{t+1} = b_t + V·v_t: v_t receives Σ_i gb_i V_i, V receives gb ⊗ v_t
            grad_out = (votes_t @ grad_logits.unsqueeze(3)).squeeze(3)
            weights.append(grad_logits)
            vectors.append(v)
        with torch.enable_grad():
            s_leaf = s.detach().requires_grad_()
            (grad_s,) = torch.autograd.grad(squash(s_leaf), s_leaf, grad_out)
        # s_t = Σ_i c_i V_i: c receives V·gs ([B, O, I]), V receives c ⊗ gs
        grad_coupling = (grad_s.unsqueeze(2) @ votes_t).squeeze(2)
        weights.append(coupling)
        vectors.append(grad_s)
        # softmax over the parents (dim 1), backwards
        grad_b = coupling * (
            grad_coupling - (coupling * grad_coupling).sum(1, keepdim=True)
        )
        grad_logits = grad_b if grad_logits is None else grad_logits + grad_b
    # One product writes the whole gradient of the votes: [B,O,I,K] @ [B,O,K,D]
    return torch.stack(weights, dim=-1) @ torch.stack(vectors, dim=-2)


def fused_dynamic_routing(u_hat: Tensor, iterations: int = 3) -> Tensor:
    """:func:`capsnotes.dynamic_routing` through :class:`FusedRouting` (the couplings,
    which a run never reads, come from the reference:
    :func:`capsnotes.dynamic_routing_with_couplings`)."""
    return FusedRouting.apply(u_hat, iterations)


class ChildVotes(torch.autograd.Function):
    """The votes of every child as one batched product, ``[I, B, in] @ [I, in, O·D]``
    → ``[I, B, O·D]``, whose backward hands the weight's gradient over in the weight's
    own layout ``[I, O·D, in]``.

    Autograd's backward of the same product hands over a transposed view, and adding
    that to the parameter's gradient took 1.2 ms at batch 64 (one-off profile on a
    2-core AMD Zen 5, bf16). Under autocast the product runs in the autocast dtype, and
    ``u`` is saved contiguous in that dtype. Alone, at batch 64, the weight's gradient
    with its conversion and accumulation took 2.2 ms this way against 2.5 ms from
    autograd's (one-off timings, same machine).
    """

    @staticmethod
    def forward(ctx, u: Tensor, weight: Tensor) -> Tensor:  # noqa: ANN001
        device = u.device.type
        autocast = torch.amp.is_autocast_available(device)  # meta, for one, has none
        autocast = autocast and torch.is_autocast_enabled(device)
        dtype = torch.get_autocast_dtype(device) if autocast else u.dtype
        ctx.dtypes = (u.dtype, weight.dtype)
        u = u.to(dtype, memory_format=torch.contiguous_format).contiguous()
        weight = weight.to(dtype)
        ctx.save_for_backward(u, weight)
        return torch.bmm(u, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad: Tensor):  # noqa: ANN001, ANN205
        u, weight = ctx.saved_tensors
        u_dtype, weight_dtype = ctx.dtypes
        grad = grad.to(u.dtype)
        grad_u = grad_weight = None
        if ctx.needs_input_grad[0]:
            grad_u = torch.bmm(grad, weight).to(u_dtype)
        if ctx.needs_input_grad[1]:
            grad_weight = torch.bmm(u.transpose(1, 2), grad).transpose(1, 2)
            grad_weight = grad_weight.to(
                weight_dtype, memory_format=torch.contiguous_format
            ).contiguous()  # [I, O·D, in]
        return grad_u, grad_weight


class FusedDigitCapsules(DigitCapsules):
    """:class:`~capsnotes.DigitCapsules` that routes with :func:`fused_dynamic_routing`:
    the same parameters, ``state_dict`` and results."""

    def votes(self, u: Tensor) -> Tensor:
        """The votes of :meth:`DigitCapsules.votes`, ``[B, child, parent, D]``, as a
        view of the one batched product that computes them, laid out ``[child, B,
        parent, D]``: routing copies them to its own layout anyway, and the einsum's
        copy into ``[B, child, parent, D]`` (2 ms at batch 64) is skipped."""
        check_capsules("u", u, self.in_caps, self.in_dim)
        children, parents, dim = self.in_caps, self.out_caps, self.out_dim
        weight = self.weight.view(children, parents * dim, self.in_dim)
        votes = ChildVotes.apply(u.transpose(0, 1), weight)  # [I, B, O·D]
        return votes.view(children, -1, parents, dim).transpose(0, 1)

    def forward(self, u: Tensor) -> Tensor:
        return fused_dynamic_routing(self.votes(u), self.iterations)

    @classmethod
    def like(cls, layer: DigitCapsules) -> FusedDigitCapsules:
        """A FusedDigitCapsules that shares ``layer``'s weight."""
        with torch.device("meta"):  # no weights of its own
            fused = cls(
                layer.in_caps,
                layer.in_dim,
                layer.out_caps,
                layer.out_dim,
                layer.iterations,
            )
        fused.weight = layer.weight
        return fused
