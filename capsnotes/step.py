"""One training step of CapsNet, run eagerly or replayed from a CUDA graph.

A step is: forward with the labels (under bf16 autocast on a GPU), margin loss plus the
weighted reconstruction loss in float32, backward, one Adam update. At the paper's batch
of 128 a GPU finishes the arithmetic of a step faster than Python can launch its few
hundred kernels, so on CUDA :class:`TrainingStep` records the whole step once as a CUDA
graph and then launches it with a single call per batch (PyTorch's "whole-network
capture"). What the graph does is exactly what the eager step does; the test suite
checks that both reach the same weights.

Three details make the capture correct:

* The graph reads its inputs from fixed buffers; each batch is copied into them.
* The first few steps run eagerly on a side stream, so that cuDNN, cuBLAS and autocast
  have made their one-time choices and allocations before anything is recorded.
* Adam's learning rate is a number baked into the recorded update, so the step records
  a new graph whenever the learning rate has changed (once per epoch). Batches of
  another size (the last, smaller batch of an epoch) run eagerly into the same
  gradient buffers.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor, nn

from .losses import margin_loss, reconstruction_loss
from .model import CapsNet

__all__ = ["TrainingStep", "autocast_for"]


def autocast_for(
    device: torch.device, enabled: bool = True, cache: bool = True
) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA when ``enabled``; on other devices, nothing. ``cache=False``
    re-casts the weights at every use, which recording a CUDA graph requires."""
    if enabled and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=cache)
    return contextlib.nullcontext()


class TrainingStep:
    """``step(images, labels)`` trains ``model`` on one batch and returns its statistics
    as a float32 tensor ``[3]`` on the device: margin loss, reconstruction loss (both
    batch means) and the number of correct predictions. Nothing is read back to the host.

    Args:
        model: the model, already on its device.
        optimizer: its optimizer. With ``graphed``, it must be capturable
            (``torch.optim.Adam(..., capturable=True)``).
        reconstruction_weight: the weight of the reconstruction loss.
        mixed_precision: bf16 autocast on CUDA.
        graphed: record the step as a CUDA graph (CUDA only).
        warmup: eager steps before the first recording.
        averaged: a copy of ``model`` whose parameters follow an exponential moving
            average of ``model``'s after every step: ``a ← a + (1 - decay)(w - a)``.
        decay: the moving average's decay per step, in ``(0, 1)``.
    """

    def __init__(
        self,
        model: CapsNet,
        optimizer: torch.optim.Optimizer,
        reconstruction_weight: float = 0.0005,
        mixed_precision: bool = True,
        graphed: bool = False,
        warmup: int = 3,
        averaged: nn.Module | None = None,
        decay: float = 0.999,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.reconstruction_weight = reconstruction_weight
        self.mixed_precision = mixed_precision
        self.device = next(model.parameters()).device
        if graphed and self.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a model on a CUDA device, not {self.device}")
        if graphed and not all(g.get("capturable") for g in optimizer.param_groups):
            raise ValueError("a graphed step needs a capturable optimizer (capturable=True)")
        if graphed and (isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1):
            raise ValueError(f"a graphed step needs warmup >= 1 eager steps, got {warmup!r}")
        self.graphed = graphed
        self.warmup = warmup
        self.averaged = averaged
        self.decay = decay
        if averaged is not None:
            if not 0 < decay < 1:
                raise ValueError(f"decay must lie in (0, 1), got {decay}")
            self._live = [p.detach() for p in model.parameters()]
            self._average = [p.detach() for p in averaged.parameters()]
            if [a.shape for a in self._average] != [p.shape for p in self._live]:
                raise ValueError("averaged must be a copy of model (same parameter shapes)")
        self.eager_steps = 0
        self.recordings = 0  #: how many graphs were recorded (one per learning rate)
        self._graph: torch.cuda.CUDAGraph | None = None
        self._graph_lr: float | None = None
        self._inputs: tuple[Tensor, Tensor] | None = None
        self._stats: Tensor | None = None

    def _forward_backward(self, images: Tensor, labels: Tensor, cache: bool = True) -> Tensor:
        with autocast_for(self.device, self.mixed_precision, cache):
            out = self.model(images, labels)
        margin = margin_loss(out.capsules.float(), labels)
        recon = reconstruction_loss(out.reconstructions.float(), images, self.reconstruction_weight)
        (margin + recon).backward()
        correct = (out.predictions == labels).sum().float()
        return torch.stack([margin.detach(), recon.detach(), correct])

    def _eager(self, images: Tensor, labels: Tensor, cache: bool = True) -> Tensor:
        # Once a graph owns the gradient buffers, keep them: zero them in place.
        self.optimizer.zero_grad(set_to_none=self._graph is None)
        stats = self._forward_backward(images, labels, cache)
        self._update()
        self.eager_steps += 1
        return stats

    def _update(self) -> None:
        self.optimizer.step()
        if self.averaged is not None:
            with torch.no_grad():
                torch._foreach_lerp_(self._average, self._live, 1.0 - self.decay)

    def _record(self, images: Tensor, labels: Tensor) -> None:
        if self._inputs is None or self._inputs[0].shape != images.shape:
            self._inputs = (torch.empty_like(images), torch.empty_like(labels))
        static_images, static_labels = self._inputs
        static_images.copy_(images)
        static_labels.copy_(labels)
        self._graph = None  # free the previous recording before making the next
        self.optimizer.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            stats = self._forward_backward(static_images, static_labels, cache=False)
            self._update()
        self._graph, self._stats = graph, stats
        self._graph_lr = self.optimizer.param_groups[0]["lr"]
        self.recordings += 1

    def __call__(self, images: Tensor, labels: Tensor) -> Tensor:
        if not self.graphed:
            return self._eager(images, labels)
        if self._graph is None and self.eager_steps < self.warmup:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                stats = self._eager(images, labels, cache=False)  # as it will be recorded
            torch.cuda.current_stream(self.device).wait_stream(side)
            return stats
        recorded_shape = self._inputs[0].shape if self._inputs is not None else None
        if self._graph is not None and images.shape != recorded_shape:
            return self._eager(images, labels)  # e.g. the last, smaller batch
        if self._graph is None or self.optimizer.param_groups[0]["lr"] != self._graph_lr:
            self._record(images, labels)
        else:
            self._inputs[0].copy_(images)
            self._inputs[1].copy_(labels)
        self._graph.replay()
        return self._stats.clone()
