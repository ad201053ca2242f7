"""Where a run computes, and what the device is.

* :func:`resolve_device` turns ``"auto"``/``"cpu"``/``"cuda"``/``"cuda:N"`` into a
  device, with a clear error when a GPU is asked for and none is there;
* :func:`device_name` describes it for the records every run keeps;
* :func:`device_capability` reads a GPU's compute capability, from which the run's plan
  (:mod:`capsnotes.fast.plan`) chooses its format.
"""

from __future__ import annotations

import contextlib
import platform
from pathlib import Path

import torch


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
    """The compute capability of a CUDA device, e.g. ``(7, 5)`` for a T4; None for any
    other device."""
    if device.type != "cuda":
        return None
    return tuple(torch.cuda.get_device_capability(device))
