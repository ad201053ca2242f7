"""One training step, the whole of the training math on one page: :func:`training_step`.
The trainer calls a :class:`TrainingStep`, whose parts :mod:`capsnotes.fast` wraps.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim.swa_utils import get_ema_multi_avg_fn

from ..losses import Loss

#: ``objective(output, *batch) -> Loss`` for a batch ``(images, labels, ...)``, e.g.
#: :meth:`TrainConfig.objective <capsnotes.training.config.TrainConfig.objective>`.
Objective = Callable[..., Loss]


class WeightAverage:
    """An exponential moving average of a model's weights, held in ``average.model``:
    after every step ``a ← a + (1 - decay) (w - a)`` (torch's ``swa_utils`` EMA)."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.model = copy.deepcopy(model).requires_grad_(False)
        self._update = get_ema_multi_avg_fn(decay)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        self._update(list(self.model.parameters()), list(model.parameters()), None)


def training_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    objective: Objective,
    batch: Sequence[Tensor],
) -> dict[str, Tensor]:
    """Train ``model`` on one ``batch``: ``(images [B, C, H, W], labels, ...)``.

    Returns the loss terms and the number of right answers as scalar tensors, left on
    the device (reading them would make the host wait for every step).
    """
    images, labels = batch[0], batch[1]
    # In place, so that every step uses the same buffers (a recorded step needs that).
    optimizer.zero_grad(set_to_none=False)
    output = model(images, labels)  # with the labels: the decoder sees the true class
    loss = objective(output, *batch)  # computed in float32
    loss.total.backward()
    optimizer.step()
    right = (output.predictions == labels).reshape(len(labels), -1).all(dim=1)
    return {**loss.terms, "correct": right.sum()}


class TrainingStep:
    """``step(batch)``: :func:`training_step` with everything but the batch bound, then
    the moving average of the weights updated (if ``average`` is given)."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: Any,
        objective: Objective,
        average: WeightAverage | None = None,
    ) -> None:
        self.model, self.optimizer, self.objective = model, optimizer, objective
        self.average = average

    def __call__(self, batch: Sequence[Tensor]) -> dict[str, Tensor]:
        stats = training_step(self.model, self.optimizer, self.objective, batch)
        if self.average is not None:
            self.average.update(self.model)
        return stats
