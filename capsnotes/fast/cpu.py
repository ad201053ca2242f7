"""Choosing how a CPU trains, by measurement: the convolutions and the precision.

Whether a CPU trains CapsNet faster with torch's native convolutions or with the
convolutions as matrix products (:mod:`capsnotes.fast.convolution`) depends on the CPU
(each has won on some), and so does whether bf16 autocast pays: CPUs with bf16
dot-product or matrix units (AVX512-BF16, AMX) multiply bf16 matrices several times
faster than float32, others emulate it slowly. So the trainer times one training pass
of each candidate on a real batch and builds its run with the fastest, as cuDNN's
benchmark mode does on a GPU.

PyTorch has no public query for bf16 units on a CPU, so :func:`cpu_bf16_speedup` asks
the question the choice depends on directly: how much faster is a bf16 matrix product
than a float32 one on this machine? Only where it is clearly faster are bf16 candidates
timed at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import torch
from torch import Tensor, nn

from . import CONVOLUTIONS, speed_up
from .plan import DTYPES

#: bf16 candidates are timed only where a bf16 matrix product runs at least this many
#: times as fast as a float32 one (measured: 2.4x on AMD Zen 4, 4.1x on Zen 5; CPUs that
#: emulate bf16 run it slower than float32).
BF16_SPEEDUP_THRESHOLD = 1.5


@dataclass(frozen=True)
class MatmulRates:
    """Measured rates of a ``size × size`` matrix product on the CPU, in GFLOP/s."""

    size: int
    float32: float
    bfloat16: float

    @property
    def speedup(self) -> float:
        return self.bfloat16 / self.float32


def cpu_bf16_speedup(size: int = 1024, repeats: int = 3) -> MatmulRates:
    """Time a ``size × size`` matrix product in float32 and in bf16 (the fastest of
    ``repeats`` after a warm-up) on the CPU."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator)
    b = torch.randn(size, size, generator=generator)
    operands = {torch.float32: (a, b), torch.bfloat16: (a.bfloat16(), b.bfloat16())}
    best = dict.fromkeys(operands, float("inf"))
    for round_ in range(repeats + 1):
        for dtype, (x, y) in operands.items():
            started = perf_counter()
            x @ y
            elapsed = perf_counter() - started
            if round_:  # the first round warms up
                best[dtype] = min(best[dtype], elapsed)
    flop = 2 * size**3 / 1e9
    return MatmulRates(size, flop / best[torch.float32], flop / best[torch.bfloat16])


@dataclass(frozen=True)
class CpuChoice:
    """What :func:`choose_cpu_implementation` decided, the seconds of one forward and
    backward pass of every candidate (the fastest of the repeats, keyed
    ``"<convolution>, <precision>"``), and the matrix-product rates that decided whether
    bf16 was timed."""

    convolution: str
    precision: str
    seconds: dict[str, float]
    matmul: MatmulRates | None = None

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {"step_seconds": self.seconds}
        if self.matmul is not None:
            record["matmul_gflops"] = vars(self.matmul)
        return record


def choose_cpu_implementation(
    make_model: Callable[[], nn.Module],
    objective: Callable[..., Any],
    batch: Sequence[Tensor],
    *,
    mixed_precision: bool = True,
    convolutions: Sequence[str] = CONVOLUTIONS,
    precisions: Sequence[str] | None = None,
    repeats: int = 2,
) -> CpuChoice:
    """Time a forward and backward pass on ``batch`` (``(images, labels, ...)`` on the
    CPU) of a model from ``make_model()`` with each of ``convolutions``, in float32 and
    (where ``mixed_precision`` allows it and bf16 products are at least
    :data:`BF16_SPEEDUP_THRESHOLD` times as fast) bf16, alternating, after a warm-up
    round; return the fastest. ``precisions`` fixes the precisions to time instead."""
    rates = None
    if precisions is None:
        rates = cpu_bf16_speedup() if mixed_precision else None
        precisions = ["float32"]
        if rates is not None and rates.speedup >= BF16_SPEEDUP_THRESHOLD:
            precisions.append("bfloat16")
    with torch.random.fork_rng(devices=[]):  # leave the caller's random state alone
        models = {
            name: speed_up(make_model(), convolution=name) for name in convolutions
        }
    times: dict[tuple[str, str], float] = {}
    for round_ in range(repeats + 1):
        for convolution, model in models.items():
            for precision in precisions:
                started = perf_counter()
                with torch.autocast(
                    "cpu",
                    DTYPES[precision] or torch.bfloat16,
                    enabled=precision != "float32",
                    cache_enabled=False,
                ):
                    output = model(batch[0], batch[1])
                objective(output, *batch).total.backward()
                elapsed = perf_counter() - started
                if round_:  # the first round warms up
                    key = (convolution, precision)
                    times[key] = min(times.get(key, float("inf")), elapsed)
    fastest = min(times, key=times.get)
    seconds = {
        f"{conv}, {precision}": value for (conv, precision), value in times.items()
    }
    return CpuChoice(fastest[0], fastest[1], seconds, rates)
