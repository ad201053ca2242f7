"""The training step recorded once as a CUDA graph and replayed for every batch.

At the paper's batch of 128 a GPU finishes the arithmetic of a training step faster than
Python can launch its few hundred kernels. :class:`GraphedStep` records the whole of
:func:`capsnotes.step.training_step` (forward, losses, backward, Adam, the weight
average) once as a CUDA graph and then launches it with a single call per batch
(PyTorch's "whole-network capture"). The graph does exactly what the eager step does;
the test suite checks that both reach the same weights.

Three details make the capture correct:

* The graph reads its inputs from fixed buffers; each batch is copied into them.
* The first few steps run eagerly on a side stream, so that cuDNN, cuBLAS and autocast
  have made their one-time choices and allocations before anything is recorded.
* Adam's learning rate is a number baked into the recorded update, so the step records
  a new graph whenever the learning rate has changed (once per epoch). Batches of
  another size (the last, smaller batch of an epoch) run eagerly into the same
  gradient buffers.

float16's loss scaling reads the gradients on the host after every step, which a graph
cannot do: a run with a ``GradScaler`` is not graphed (``build_run`` decides).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..step import TrainingStep


class GraphedStep(TrainingStep):
    """A :class:`~capsnotes.step.TrainingStep` replayed from a CUDA graph: the same
    attributes and the same result. Its model must be on a CUDA device and its optimizer
    capturable (``torch.optim.Adam(..., capturable=True)``); ``warmup`` eager steps run
    before the first recording."""

    def __init__(self, step: TrainingStep, warmup: int = 3) -> None:
        super().__init__(
            step.model,
            step.optimizer,
            step.objective,
            step.precision,
            step.scaler,
            step.average,
        )
        self.device = next(step.model.parameters()).device
        if self.device.type != "cuda":
            raise ValueError(
                f"CUDA graphs need a model on a CUDA device, not {self.device}"
            )
        if not all(group.get("capturable") for group in step.optimizer.param_groups):
            raise ValueError(
                "a graphed step needs a capturable optimizer (capturable=True)"
            )
        if step.scaler is not None:
            raise ValueError(
                "a graphed step cannot scale the loss (float16 needs the host)"
            )
        self.warmup, self.eager_steps = warmup, 0
        self.recordings = 0  #: how many graphs were recorded (one per learning rate)
        self._graph: torch.cuda.CUDAGraph | None = None
        self._graph_lr: float | None = None
        self._inputs: list[Tensor] = []
        self._stats: dict[str, Tensor] = {}

    @property
    def _learning_rate(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def _eager(self, batch: Sequence[Tensor]) -> dict[str, Tensor]:
        self.eager_steps += 1
        return super().__call__(batch)

    def _record(self, batch: Sequence[Tensor]) -> None:
        self._inputs = [torch.empty_like(t) for t in batch]
        for buffer, value in zip(self._inputs, batch):
            buffer.copy_(value)
        self._graph = None  # free the previous recording before making the next
        # No gradient buffers yet: the recorded backward allocates its own, which every
        # replay then overwrites.
        self.optimizer.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            stats = super().__call__(self._inputs)
        self._graph, self._stats = graph, stats
        self._graph_lr = self._learning_rate
        self.recordings += 1

    def __call__(self, batch: Sequence[Tensor]) -> dict[str, Tensor]:
        if self._graph is None and self.eager_steps < self.warmup:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                stats = self._eager(batch)
            torch.cuda.current_stream(self.device).wait_stream(side)
            return stats
        if self._graph is not None and batch[0].shape != self._inputs[0].shape:
            return self._eager(batch)  # e.g. the last, smaller batch
        if self._graph is None or self._learning_rate != self._graph_lr:
            self._record(batch)
        else:
            for buffer, value in zip(self._inputs, batch):
                buffer.copy_(value)
        self._graph.replay()
        return {name: value.clone() for name, value in self._stats.items()}
