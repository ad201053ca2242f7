"""Scoring a model on a test set, the same way for every model the book trains."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ..data import checks
from ..losses import Loss


@torch.no_grad()
def evaluate(
    model: nn.Module,
    data: Any,
    objective: Callable[..., Loss] | None = None,
    *,
    batch_size: int = 500,
    return_outputs: bool = False,
) -> dict[str, Any]:
    """The fraction of ``data`` (anything with ``batches(batch_size)`` yielding
    ``(images, labels, ...)``) that ``model`` gets right, in evaluation mode. With
    ``objective`` (``objective(output, *batch) -> Loss``), also the mean of each loss
    term; with ``return_outputs``, also the model's outputs for every image but the
    reconstructions, on the CPU."""
    if objective is not None and not callable(objective):
        raise TypeError(
            f"objective must be a function of (output, *batch), got {objective!r}"
        )
    checks.integer("batch_size", batch_size, minimum=1)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    right = torch.zeros((), dtype=torch.int64, device=device)
    totals: dict[str, Tensor] = {}  # loss terms summed over the images
    kept: dict[str, list[Tensor]] = {}
    for batch in data.to(device).batches(batch_size):
        images, labels = batch[0], batch[1]
        output = model(images)
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
