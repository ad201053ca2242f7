"""Where a computation runs and in what precision.

* :func:`resolve_device` turns ``"auto"``/``"cpu"``/``"cuda"``/``"cuda:N"`` into a device,
  with a clear error when a GPU is asked for and none is there.
* :func:`device_name` describes a device for the records every run keeps.
* :func:`autocast_dtype` and :func:`autocast_for` decide mixed precision: bf16 autocast
  on a CUDA GPU that computes bf16 natively (compute capability 8.0 and later: A100, L4,
  H100, ...), float32 everywhere else. A GPU without native bf16, such as Colab's T4,
  would emulate it slowly; float16 would need gradient scaling, which checks for
  overflow on the host after every step and so cannot run inside the recorded training
  step of chapter 14. Such GPUs train in float32.
"""

from __future__ import annotations

import contextlib
import platform
from pathlib import Path

import torch

__all__ = ["autocast_dtype", "autocast_for", "bf16_is_native", "device_name", "resolve_device"]


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


def autocast_dtype(device: torch.device | str, enabled: bool = True) -> torch.dtype | None:
    """The dtype to autocast to on ``device``: ``torch.bfloat16`` on a CUDA GPU with native
    bf16 when ``enabled``; None (float32 throughout) otherwise."""
    device = torch.device(device)
    native = device.type == "cuda" and bf16_is_native(torch.cuda.get_device_capability(device))
    return torch.bfloat16 if enabled and native else None


def autocast_for(
    device: torch.device | str, dtype: torch.dtype | None
) -> contextlib.AbstractContextManager:
    """Autocast to ``dtype`` on ``device``, or nothing when ``dtype`` is None.

    The cast weights are not cached: each weight of the models here is used once per
    forward pass, so the cache would save nothing, and recording a CUDA graph needs it off.
    """
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype, cache_enabled=False)
