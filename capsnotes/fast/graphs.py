"""The training step recorded once as a CUDA graph and replayed for every batch.

At the paper's batch of 128 a GPU finishes the arithmetic of a training step faster than
Python can launch its few hundred kernels. :class:`GraphedStep` records the whole of
:func:`capsnotes.training.step.training_step` (forward, losses, backward, Adam, the
weight average) once and then launches it with a single call per batch, reaching the
weights the eager step reaches (tested). Four details make the capture correct:

* the graph reads its inputs from fixed buffers, into which each batch is copied;
* the first steps run eagerly on a side stream, so that cuDNN, cuBLAS and autocast have
  made their one-time choices before anything is recorded;
* Adam's learning rate is baked into the recorded update, so a new graph is recorded
  when it changes; a batch of another size (an epoch's last) runs eagerly;
* everything runs with the model's GPU made the current device, on a stream of it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from .precision import ScaledOptimizer

#: Why a float16 step with its loss scaler is not recorded (the plan refuses it too).
SCALED_GRAPH_REFUSAL = (
    "a CUDA graph of a float16 step with its loss scaler has not been run on a GPU yet"
)


class CudaGraphs:
    """What :class:`GraphedStep` asks of CUDA, for one GPU: to make it the current
    device, a side stream on it (for the warm-up and the recording), and a recording.
    The tests hand in a stand-in to check the step's control flow on a CPU."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device)

    def on_device(self) -> contextlib.AbstractContextManager:
        return torch.cuda.device(self.device)

    @contextlib.contextmanager
    def side_stream(self) -> Iterator[None]:
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            yield
        current.wait_stream(self.stream)

    def record(self, function: Callable[[], Any]) -> tuple[torch.cuda.CUDAGraph, Any]:
        """Record what ``function()`` launches (it runs nothing yet) and return the
        graph and ``function``'s result, whose tensors each replay fills."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.stream):
            result = function()
        return graph, result


class GraphedStep:
    """A training ``step`` (with a ``model`` on a CUDA device and a capturable
    ``optimizer``) replayed from a CUDA graph recorded, after ``warmup`` (at least 1)
    eager steps, on a batch of ``batch_size`` examples (None: the first batch's
    size)."""

    def __init__(
        self,
        step: Callable[[Sequence[Tensor]], dict[str, Tensor]],
        batch_size: int | None = None,
        warmup: int = 3,
        graphs: CudaGraphs | None = None,
    ) -> None:
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1:
            raise ValueError(
                f"a graphed step needs warmup >= 1 eager steps before it records, got "
                f"{warmup!r}: Adam's state, cuBLAS's handles and cuDNN's choices are "
                "made on a first step, and a graph cannot record their making"
            )
        device = next(step.model.parameters()).device
        if graphs is None and device.type != "cuda":
            raise ValueError(f"CUDA graphs need a model on a CUDA device, not {device}")
        if not all(group.get("capturable") for group in step.optimizer.param_groups):
            raise ValueError(
                "a graphed step needs a capturable optimizer (capturable=True)"
            )
        if isinstance(step.optimizer, ScaledOptimizer):
            raise ValueError(SCALED_GRAPH_REFUSAL)
        self.step, self.optimizer = step, step.optimizer
        self.graphs = CudaGraphs(device) if graphs is None else graphs
        self.batch_size, self.warmup, self.eager_steps = batch_size, warmup, 0
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
        return self.step(batch)

    def _record(self, batch: Sequence[Tensor]) -> None:
        self._inputs = [value.clone() for value in batch]
        self._graph = None  # free the previous recording before making the next
        # No gradient buffers yet: the recorded backward allocates its own, which every
        # replay then overwrites.
        self.optimizer.zero_grad(set_to_none=True)
        self._graph, self._stats = self.graphs.record(lambda: self.step(self._inputs))
        self._graph_lr = self._learning_rate
        self.recordings += 1

    def __call__(self, batch: Sequence[Tensor]) -> dict[str, Tensor]:
        with self.graphs.on_device():
            if self._graph is None and self.eager_steps < self.warmup:
                with self.graphs.side_stream():
                    return self._eager(batch)
            size = len(batch[0])
            if self.batch_size is None:
                self.batch_size = size
            if size != self.batch_size:
                return self._eager(batch)  # e.g. an epoch's last, smaller batch
            if self._graph is None or self._learning_rate != self._graph_lr:
                self._record(batch)
            else:
                for buffer, value in zip(self._inputs, batch):
                    buffer.copy_(value)
            self._graph.replay()
            return {name: value.clone() for name, value in self._stats.items()}
