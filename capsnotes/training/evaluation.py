"""Scoring a model on a test set, the same way for every model the book trains; and
measuring how a trained CapsNet routes a test set (:func:`routing_statistics`: chapters
5 and 10, and the campaign's Table 1 records)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..data import ImageSet, checks
from ..fast.routing import route_parents_first
from ..fast.scoring import scorer_for
from ..losses import Loss
from ..model import CapsNet


@torch.no_grad()
def evaluate(
    model: nn.Module,
    data: Any,
    objective: Callable[..., Loss] | None = None,
    *,
    batch_size: int = 500,
    return_outputs: bool = False,
    fast: bool = True,
) -> dict[str, Any]:
    """The fraction of ``data`` (anything with ``batches(batch_size)`` yielding
    ``(images, labels, ...)``) that ``model`` gets right, in evaluation mode. With
    ``objective`` (``objective(output, *batch) -> Loss``), also the mean of each loss
    term; with ``return_outputs``, also the model's outputs for every image but the
    reconstructions, on the CPU. With ``fast``, the predictions alone come from
    :func:`~capsnotes.fast.scoring.scorer_for` (on a CPU with bf16 units, the same
    counts about 3x as fast); without, always from ``model`` itself."""
    if objective is not None and not callable(objective):
        raise TypeError(
            f"objective must be a function of (output, *batch), got {objective!r}"
        )
    checks.integer("batch_size", batch_size, minimum=1)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    alone = fast and objective is None and not return_outputs  # predictions only
    scorer = scorer_for(model, device) if alone else model
    right = torch.zeros((), dtype=torch.int64, device=device)
    totals: dict[str, Tensor] = {}  # loss terms summed over the images
    kept: dict[str, list[Tensor]] = {}
    for batch in data.to(device).batches(batch_size):
        images, labels = batch[0], batch[1]
        output = scorer(images)
        right += (output.predictions == labels).reshape(len(labels), -1).all(1).sum()
        if objective is not None:
            for name, value in objective(output, *batch).terms.items():
                totals[name] = totals.get(name, 0) + value * len(labels)
        if return_outputs:
            for name, value in output._asdict().items():
                if name != "reconstructions":
                    value = value.float() if value.is_floating_point() else value
                    kept.setdefault(name, []).append(value.cpu())
    model.train(was_training)
    count = len(data)
    result: dict[str, Any] = {"accuracy": right.item() / count, "count": count}
    result |= {name: value.item() / count for name, value in totals.items()}
    return result | {name: torch.cat(parts) for name, parts in kept.items()}


@dataclass
class RoutingStatistics:
    """What :func:`routing_statistics` measures over ``count`` images.

    For each number of iterations ``r`` routing ran: ``accuracy[r]``, the fraction
    right; ``changed[r]``, how many images get another prediction than with the fewest
    iterations asked for; ``winner_length[r]``, the mean length of the longest capsule.
    For the iterations ``t = 1, 2, ...`` (index ``t - 1``), the couplings ``c_i`` that
    iteration uses, averaged over children and images:

    * ``entropy`` — ``H(c_i) = -Σ_j c_ij log c_ij`` in nats (uniform: ``log classes``);
    * ``weighted_entropy`` — the same, each child weighted by its length ``‖u_i‖``;
    * ``top_coupling`` — ``max_j c_ij``, the share of a child's vote its favourite
      parent gets; ``weighted_top_coupling`` — the same weighted by ``‖u_i‖``.
    """

    count: int
    classes: int
    accuracy: dict[int, float]
    changed: dict[int, int]
    winner_length: dict[int, float]
    entropy: list[float]
    weighted_entropy: list[float]
    top_coupling: list[float]
    weighted_top_coupling: list[float]

    @property
    def uniform_entropy(self) -> float:
        return math.log(self.classes)


@torch.no_grad()
def routing_statistics(
    model: CapsNet,
    data: ImageSet,
    iterations: Sequence[int] = (1, 2, 3, 5),
    batch_size: int = 250,
) -> RoutingStatistics:
    """Route every image of ``data`` with each number of iterations in ``iterations``,
    using ``model``'s votes (the model itself is not changed).

    Routing is deterministic, so iteration ``t`` of a run with ``max(iterations)``
    iterations uses the couplings, and ends with the outputs, of a run with ``r = t``:
    one run per batch measures every ``r`` (with the votes laid out parents first, as
    :mod:`capsnotes.fast.routing` routes them; the same values as the paper's layout).
    """
    if not iterations or any(
        isinstance(r, bool) or not isinstance(r, int) for r in iterations
    ):
        raise TypeError(
            f"iterations must be a non-empty sequence of ints, got {iterations!r}"
        )
    if min(iterations) < 1:
        raise ValueError(f"routing iterations must be >= 1, got {sorted(iterations)}")
    device = next(model.parameters()).device
    deepest, fewest = max(iterations), min(iterations)
    correct, changed, winner = (dict.fromkeys(iterations, 0) for _ in range(3))
    # per iteration: entropy, weighted entropy, top and weighted top coupling, summed
    sums = torch.zeros(4, deepest, dtype=torch.float64)
    children, weight_total = 0, 0.0
    for images, labels in data.to(device).batches(batch_size):
        u = model.primary_capsules(images)  # [B, I, D_in]
        votes = model.digits.votes(u).transpose(1, 2).contiguous()  # [B, O, I, D]
        lengths = u.norm(dim=-1)  # [B, I]
        _, passes = route_parents_first(votes, deepest)
        for r, (c, _, v) in enumerate(passes, start=1):  # c: [B, O, I]
            h = torch.special.entr(c.double()).sum(dim=1)  # [B, I], in float64
            top = c.amax(dim=1)  # [B, I]
            terms = [h.sum(), (h * lengths).sum(), top.sum(), (top * lengths).sum()]
            sums[:, r - 1] += torch.stack(terms).cpu()  # float64
            if r in correct:
                longest, predictions = v.norm(dim=-1).max(dim=1)
                if r == fewest:
                    first_predictions = predictions
                correct[r] += (predictions == labels).sum().item()
                changed[r] += (predictions != first_predictions).sum().item()
                winner[r] += longest.sum().item()
        children += lengths.numel()
        weight_total += lengths.sum().item()
    return RoutingStatistics(
        count=len(data),
        classes=model.config.num_classes,
        accuracy={r: correct[r] / len(data) for r in sorted(correct)},
        changed={r: changed[r] for r in sorted(changed)},
        winner_length={r: winner[r] / len(data) for r in sorted(winner)},
        entropy=(sums[0] / children).tolist(),
        weighted_entropy=(sums[1] / weight_total).tolist(),
        top_coupling=(sums[2] / children).tolist(),
        weighted_top_coupling=(sums[3] / weight_total).tolist(),
    )
