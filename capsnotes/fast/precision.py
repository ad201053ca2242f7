"""Where a run computes, what the device is, and the 16-bit formats around the step:
:class:`Autocast` and :func:`loss_scaling` wrap the model, the objective and the
optimizer that the trainer hands to :func:`capsnotes.training.step.training_step`,
which leaves the step itself as the paper's.
"""

from __future__ import annotations

import contextlib
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..losses import Loss


def resolve_device(device: torch.device | str | None = None) -> torch.device:
    """``None`` or ``"auto"``: the GPU if there is one, else the CPU."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(
            f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}: {error}"
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for, but PyTorch sees no CUDA GPU")
    return device


def device_name(device: torch.device | str) -> str:
    """A readable description of ``device``, e.g. ``NVIDIA H100 80GB HBM3`` or
    ``CPU: AMD EPYC, 2 threads``."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    threads = torch.get_num_threads()
    return f"CPU: {model}, {threads} thread{'s' if threads != 1 else ''}"


def device_capability(device: torch.device) -> tuple[int, int] | None:
    """A CUDA device's compute capability (a T4's is ``(7, 5)``); None off CUDA."""
    cuda = device.type == "cuda"
    return tuple(torch.cuda.get_device_capability(device)) if cuda else None


class Autocast(nn.Module):
    """``model`` whose forward pass runs under autocast to ``dtype`` (bf16, or float16
    with :func:`loss_scaling`) on its input's device. Autocast's cache is off: a step
    recorded as a CUDA graph needs it off (PyTorch's CUDA-graph notes), and a step that
    runs its forward pass once gains nothing from it."""

    def __init__(self, model: nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        self.model, self.dtype = model, dtype

    def forward(self, images: torch.Tensor, *rest: Any) -> Any:
        with torch.autocast(images.device.type, self.dtype, cache_enabled=False):
            return self.model(images, *rest)


class ScaledOptimizer:
    """An optimizer whose ``step()`` unscales the gradients, skips a step whose
    gradients overflowed and updates the scale (``GradScaler.step`` and ``update``)."""

    def __init__(
        self, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler
    ) -> None:
        self.optimizer, self.scaler = optimizer, scaler
        self.param_groups = optimizer.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        self.scaler.step(self.optimizer)
        self.scaler.update()


def loss_scaling(
    objective: Callable[..., Loss],
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
) -> tuple[Callable[..., Loss], ScaledOptimizer]:
    """float16's loss scaling: an objective whose total is multiplied by the scaler's
    factor (so that small gradients survive in float16; its terms stay as they were)
    and an optimizer that divides the gradients by it before stepping."""

    def scaled(output: Any, *batch: torch.Tensor) -> Loss:
        loss = objective(output, *batch)
        return Loss(scaler.scale(loss.total), loss.terms)

    return scaled, ScaledOptimizer(optimizer, scaler)
