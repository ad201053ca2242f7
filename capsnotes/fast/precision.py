"""Where a run computes, and in what precision.

* :func:`resolve_device` turns ``"auto"``/``"cpu"``/``"cuda"``/``"cuda:N"`` into a
  device, with a clear error when a GPU is asked for and none is there;
  :func:`device_name` describes it for the records every run keeps.
* :func:`gpu_precision` chooses a GPU's 16-bit format: bf16 where the GPU computes it
  natively (compute capability 8.0 and later: A100, L4, H100, ...), else float16
  (Colab's T4), whose narrow exponent needs the loss scaled (``torch.amp.GradScaler``)
  so that small gradients do not round to zero. On a CPU the choice is timed
  (:mod:`capsnotes.fast.cpu`).
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


def bf16_is_native(capability: tuple[int, int]) -> bool:
    """Whether a CUDA GPU of this compute capability has bf16 tensor cores (8.0+)."""
    return capability >= (8, 0)


def gpu_precision(device: torch.device) -> torch.dtype:
    """The 16-bit format a CUDA GPU trains in: bf16 where native, else float16."""
    native = bf16_is_native(torch.cuda.get_device_capability(device))
    return torch.bfloat16 if native else torch.float16
