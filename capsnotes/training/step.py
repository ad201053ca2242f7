"""One training step, the whole of the training math on one page.

::

    output = model(images, labels)            # the decoder sees the label's capsule
    loss = objective(output, images, labels)  # margin loss + 0.0005 · SSE
    loss.total.backward()                     # gradients
    optimizer.step()                          # Adam
    average.update(model)                     # optional moving average of the weights

:func:`training_step` is that step; :class:`TrainingStep` binds it to a model, an
optimizer, an objective, a precision and an average, so that the trainer calls
``step(batch)``. On a GPU the trainer records this same step as a CUDA graph and replays
it (:mod:`capsnotes.fast.graphs`).
"""

from __future__ import annotations

import contextlib
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
    """An exponential moving average of a model's weights: after every step ``a ← a + (1
    - decay) (w - a)`` (torch's ``swa_utils`` EMA update). ``average.model`` holds the
    averaged weights; evaluate and save it like the model itself."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay = decay
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
    *,
    precision: torch.dtype | None = None,
    scaler: torch.amp.GradScaler | None = None,
    average: WeightAverage | None = None,
) -> dict[str, Tensor]:
    """Train ``model`` on one ``batch``: ``(images [B, C, H, W], labels, ...)``.

    Returns the loss terms and the number of right answers as scalar tensors, left on
    the device (reading them would make the host wait for every step). ``precision``: a
    16-bit dtype to run the forward pass in (None: float32); ``scaler``: fp16's loss
    scaling (the GPU chapter).
    """
    images, labels = batch[0], batch[1]
    # In place, so that every step uses the same buffers (a recorded step needs that).
    optimizer.zero_grad(set_to_none=False)
    # the forward pass in the 16-bit precision if one is given (autocast), else float32
    autocast = (
        torch.autocast(images.device.type, precision, cache_enabled=False)
        if precision is not None
        else contextlib.nullcontext()
    )
    with autocast:
        # with the labels: the decoder sees the true class
        output = model(images, labels)
    loss = objective(output, *batch)  # computed in float32
    if scaler is None:
        loss.total.backward()
        optimizer.step()
    else:  # fp16: scale the loss so small gradients survive; skip steps that overflow
        scaler.scale(loss.total).backward()
        scaler.step(optimizer)
        scaler.update()
    if average is not None:
        average.update(model)
    right = (output.predictions == labels).reshape(len(labels), -1).all(dim=1)
    return {**loss.terms, "correct": right.sum()}


class TrainingStep:
    """``step(batch)``: :func:`training_step` with everything but the batch bound."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        objective: Objective,
        precision: torch.dtype | None = None,
        scaler: torch.amp.GradScaler | None = None,
        average: WeightAverage | None = None,
    ) -> None:
        self.model, self.optimizer, self.objective = model, optimizer, objective
        self.precision, self.scaler, self.average = precision, scaler, average

    def __call__(self, batch: Sequence[Tensor]) -> dict[str, Any]:
        return training_step(
            self.model,
            self.optimizer,
            self.objective,
            batch,
            precision=self.precision,
            scaler=self.scaler,
            average=self.average,
        )
