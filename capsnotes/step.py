"""One training step, the whole of the training math on one page.

::

    output = model(images, labels)               # forward; the decoder sees the label's capsule
    loss = objective(output, images, labels)     # capsnet_loss: margin loss + 0.0005 · SSE
    loss.total.backward()                        # gradients
    optimizer.step()                             # Adam
    average.update(model)                        # optional moving average of the weights

:func:`training_step` is that step; :class:`TrainingStep` binds it to a model, an
optimizer, an objective, a precision and an average, so that the trainer calls
``step(images, labels)``. On a GPU the trainer records this same step as a CUDA graph and
replays it (:mod:`capsnotes.graphs`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim.swa_utils import get_ema_multi_avg_fn

from .checks import check_range
from .devices import autocast_for
from .losses import Loss

__all__ = ["Objective", "TrainingStep", "WeightAverage", "training_step"]

#: ``objective(output, images, labels) -> Loss``, e.g. :meth:`TrainConfig.loss
#: <capsnotes.config.TrainConfig.loss>` (which calls :func:`~capsnotes.capsnet_loss`).
Objective = Callable[[Any, Tensor, Tensor], Loss]


class WeightAverage:
    """An exponential moving average of a model's weights: after every step
    ``a ← a + (1 - decay) (w - a)`` (torch's ``swa_utils`` EMA update).

    ``average.model`` is a copy of the model, made when the average starts, that holds the
    averaged weights; evaluate and save it like the model itself.
    """

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay = check_range("decay", decay, 0, 1, low_open=True, high_open=True)
        self.model = copy.deepcopy(model).requires_grad_(False)
        self._update = get_ema_multi_avg_fn(decay)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Move the average towards ``model``'s current weights."""
        self._update(list(self.model.parameters()), list(model.parameters()), None)


def training_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    objective: Objective,
    images: Tensor,
    labels: Tensor,
    *,
    precision: torch.dtype | None = None,
    average: WeightAverage | None = None,
) -> dict[str, Tensor]:
    """Train ``model`` on one batch: ``images`` ``[B, C, H, W]``, ``labels`` ``[B]``.

    Returns the batch's loss terms and its number of correct predictions as scalar
    tensors, left on the device: reading them would make the host wait for every step.
    ``precision`` is a 16-bit dtype to compute the forward pass in, where the hardware
    multiplies it faster (chapter 14); None: float32.
    """
    # Zero the gradients in place, so that every step uses the same buffers (chapter 14
    # records one step and replays it, which needs that).
    optimizer.zero_grad(set_to_none=False)
    with autocast_for(images.device, precision):
        output = model(images, labels)  # with the labels: the decoder sees the true class
    loss = objective(output, images, labels)  # computed in float32
    loss.total.backward()
    optimizer.step()
    if average is not None:
        average.update(model)
    return {**loss.terms, "correct": (output.predictions == labels).sum()}


class TrainingStep:
    """``step(images, labels)``: :func:`training_step` with everything but the batch bound."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        objective: Objective,
        precision: torch.dtype | None = None,
        average: WeightAverage | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.objective = objective
        self.precision = precision
        self.average = average

    def __call__(self, images: Tensor, labels: Tensor) -> dict[str, Tensor]:
        return training_step(
            self.model,
            self.optimizer,
            self.objective,
            images,
            labels,
            precision=self.precision,
            average=self.average,
        )
