"""Choosing how a CPU trains, by measurement: the convolutions and the precision.

Whether native convolutions or matrix products (:mod:`capsnotes.fast.convolution`)
train CapsNet faster depends on the CPU, and so does whether bf16 autocast pays. So the
trainer times a training pass of each candidate on a real batch and builds its run with
the fastest, as cuDNN's benchmark mode does on a GPU. PyTorch has no public query for
bf16 units: :func:`cpu_matmul_rates` measures how much faster a bf16 product is.

Both time with ``time.perf_counter``, not ``torch.utils.benchmark.Timer``: they run
before every CPU training run, so they take as few passes as decide (one warm-up, then
the fastest of ``repeats``, the candidates taking turns). A Timer runs at least two
untimed passes per measurement, or as many as fill its minimum run time: it would
triple the passes, each up to a second of the paper's model, and cannot interleave.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import torch
from torch import Tensor, nn

from . import CONVOLUTIONS, speed_up
from .plan import BF16_SPEEDUP, DTYPES
from .precision import Autocast


@dataclass(frozen=True)
class MatmulRates:
    """The best measured rates of square matrix products on the CPU, in GFLOP/s, over
    the ``sizes`` measured."""

    sizes: tuple[int, ...]
    float32: float
    bfloat16: float

    @property
    def speedup(self) -> float:
        return self.bfloat16 / self.float32


def cpu_matmul_rates(
    sizes: Sequence[int] = (1024, 2048), repeats: int = 3
) -> MatmulRates:
    """Time square matrix products in float32 and in bf16 on the CPU (the fastest of
    ``repeats`` after a warm-up) at each of ``sizes``, and keep each dtype's best rate.
    The next size is measured only where bf16 kept up at this one: a CPU that emulates
    bf16 is not kept waiting, and one with bf16 units is not judged by one product."""
    generator = torch.Generator().manual_seed(0)
    best = {torch.float32: 0.0, torch.bfloat16: 0.0}
    measured: list[int] = []
    for size in sizes:
        a = torch.randn(size, size, generator=generator)
        b = torch.randn(size, size, generator=generator)
        rates = {}
        for dtype in best:
            x, y, seconds = a.to(dtype), b.to(dtype), []
            for _ in range(repeats + 1):
                started = perf_counter()
                x @ y
                seconds.append(perf_counter() - started)
            rates[dtype] = 2 * size**3 / 1e9 / min(seconds[1:])  # the first warms up
            best[dtype] = max(best[dtype], rates[dtype])
        measured.append(size)
        if rates[torch.bfloat16] < rates[torch.float32]:
            break
    return MatmulRates(tuple(measured), best[torch.float32], best[torch.bfloat16])


@functools.cache
def bf16_is_fast() -> bool:
    """Whether this process's CPU kernels multiply bf16 at least ``BF16_SPEEDUP`` times
    as fast as float32, by one 256² product of each (milliseconds; about 40 where bf16
    is emulated): measured once per process, as the kernels are chosen once."""
    return cpu_matmul_rates(sizes=(256,)).speedup >= BF16_SPEEDUP


@dataclass(frozen=True)
class CpuChoice:
    """What :func:`choose_cpu_implementation` decided, and the seconds of a forward and
    backward pass of every candidate (keyed ``"<convolution>, <precision>"``)."""

    convolution: str
    precision: str
    seconds: dict[str, float]


def choose_cpu_implementation(
    make_model: Callable[[], nn.Module],
    objective: Callable[..., Any],
    batch: Sequence[Tensor],
    *,
    convolutions: Sequence[str] = CONVOLUTIONS,
    precisions: Sequence[str] = ("float32",),
    repeats: int = 2,
) -> CpuChoice:
    """Time a forward and backward pass on ``batch`` (``(images, labels, ...)`` on the
    CPU) of a model from ``make_model()`` with each of ``convolutions`` in each of
    ``precisions``, alternating, after a warm-up round; return the fastest."""
    with torch.random.fork_rng(devices=[]):  # leave the caller's random state alone
        models = {c: speed_up(make_model(), convolution=c) for c in convolutions}
    times: dict[tuple[str, str], float] = {}
    for round_ in range(repeats + 1):
        for convolution, model in models.items():
            for precision in precisions:
                # the forward pass as the run will compute it
                dtype = DTYPES[precision]
                stepped = model if dtype is None else Autocast(model, dtype)
                started = perf_counter()
                output = stepped(batch[0], batch[1])
                objective(output, *batch).total.backward()
                elapsed = perf_counter() - started
                if round_:  # the first round warms up
                    key = (convolution, precision)
                    times[key] = min(times.get(key, float("inf")), elapsed)
    seconds = {", ".join(key): value for key, value in times.items()}
    return CpuChoice(*min(times, key=times.get), seconds)
