"""Choosing how a CPU trains, by measurement: the convolutions and the precision.

Whether a CPU trains CapsNet faster with torch's native convolutions or with the
convolutions as matrix products of :mod:`capsnotes.kernels` depends on the CPU (each has
won on some), and so does whether bf16 autocast pays: CPUs with bf16 dot-product or
matrix units (AVX512-BF16, AMX) multiply bf16 matrices several times faster than
float32, others emulate it slowly. So the trainer times one training pass of each
candidate on a real batch and builds its run with the fastest, as cuDNN's benchmark mode
does on a GPU. The timing builds its own models; nothing is changed on a model after it
is built.

PyTorch has no public query for bf16 units on a CPU, so :func:`cpu_bf16_speedup` asks
the question the choice depends on directly: how much faster is a bf16 matrix product
than a float32 one on this machine? Only where it is clearly faster are bf16 candidates
timed at all; elsewhere the choice is among float32 candidates, as it always was.
"""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter
from typing import Any

import torch
from torch import Tensor, nn

from .checks import check_choice
from .devices import autocast_for, device_name
from .kernels import MatmulConv2d, fused_dynamic_routing
from .losses import capsnet_loss
from .model import CapsNet, CapsNetConfig
from .routing import dynamic_routing

__all__ = [
    "BF16_SPEEDUP_THRESHOLD",
    "IMPLEMENTATIONS",
    "PRECISIONS",
    "CpuChoice",
    "MatmulRates",
    "choose_cpu_implementation",
    "cpu_bf16_speedup",
    "implementations",
]

#: The implementations a model can be built with, by the names the configurations and
#: the records use: the model's keyword argument → {name: what it is given}.
IMPLEMENTATIONS: dict[str, dict[str, Any]] = {
    "routing": {"reference": dynamic_routing, "fused": fused_dynamic_routing},
    "convolution": {"native": nn.Conv2d, "matmul": MatmulConv2d},
}


def implementations(**names: str) -> dict[str, Any]:
    """The model's keyword arguments for implementations named as in
    :data:`IMPLEMENTATIONS`, e.g. ``{"routing": fused_dynamic_routing}`` for
    ``routing="fused"``."""
    chosen = {}
    for keyword, name in names.items():
        table = IMPLEMENTATIONS.get(keyword)
        if table is None:
            raise ValueError(
                f"no implementation choice {keyword!r}; expected one of {sorted(IMPLEMENTATIONS)}"
            )
        chosen[keyword] = table[check_choice(f"{keyword} implementation", name, list(table))]
    return chosen


#: The precisions a CPU run can train in, by name: the dtype to autocast to (None:
#: float32 throughout).
PRECISIONS: dict[str, torch.dtype | None] = {"float32": None, "bfloat16": torch.bfloat16}

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
    """Time a ``size × size`` matrix product in float32 and in bf16 on the CPU, alternating,
    and return the rates (the fastest of ``repeats`` after one warm-up each)."""
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
    """What :func:`choose_cpu_implementation` decided: the convolution implementation and
    the precision, the measured seconds of one forward and backward pass of every
    candidate (the fastest of the repeats, keyed ``"<convolution>, <precision>"``), and
    the matrix-multiply rates that decided whether bf16 was a candidate."""

    convolution: str
    precision: str
    seconds: dict[str, float]
    matmul: MatmulRates | None = None

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "convolution": self.convolution,
            "precision": self.precision,
            "step_seconds": self.seconds,
        }
        if self.matmul is not None:
            record["matmul_gflops"] = {
                "size": self.matmul.size,
                "float32": self.matmul.float32,
                "bfloat16": self.matmul.bfloat16,
            }
        return record


def choose_cpu_implementation(
    config: CapsNetConfig,
    images: Tensor,
    labels: Tensor,
    *,
    routing: str = "fused",
    reconstruction_weight: float = 0.0005,
    mixed_precision: bool = True,
    repeats: int = 2,
    cache: dict[str, CpuChoice] | None = None,
) -> CpuChoice:
    """Time a forward and backward pass of a CapsNet built with each convolution
    implementation, in each candidate precision, on the batch ``images`` ``[B, C, H, W]``,
    ``labels`` ``[B]`` (on the CPU), alternating, after one warm-up round, and return the
    fastest.

    The precisions are float32 and, where ``mixed_precision`` allows it and
    :func:`cpu_bf16_speedup` finds bf16 products at least :data:`BF16_SPEEDUP_THRESHOLD`
    times as fast, bf16 autocast. ``cache``, if given, maps a description of the CPU,
    torch, the model, the batch shape and the precisions allowed to an earlier choice,
    which is returned instead of timing again (and a new choice is stored in it).
    """
    key = (
        f"{device_name('cpu')}|torch {torch.__version__}|{config}|{tuple(images.shape)}"
        f"|mixed precision {mixed_precision}"
    )
    if cache is not None and key in cache:
        return cache[key]
    rates = cpu_bf16_speedup() if mixed_precision else None
    precisions = ["float32"]
    if rates is not None and rates.speedup >= BF16_SPEEDUP_THRESHOLD:
        precisions.append("bfloat16")
    with torch.random.fork_rng(devices=[]):  # leave the caller's random state alone
        models = {
            name: CapsNet(config, **implementations(routing=routing, convolution=name))
            for name in IMPLEMENTATIONS["convolution"]
        }
    candidates = [(conv, precision) for conv in models for precision in precisions]
    times: dict[tuple[str, str], list[float]] = {candidate: [] for candidate in candidates}
    for round_ in range(repeats + 1):
        for convolution, precision in candidates:
            model = models[convolution]
            started = perf_counter()
            with autocast_for("cpu", PRECISIONS[precision]):
                output = model(images, labels)
            capsnet_loss(output, images, labels, reconstruction_weight).total.backward()
            if round_:  # the first round warms up
                times[(convolution, precision)].append(perf_counter() - started)
    seconds = {f"{conv}, {precision}": min(times[(conv, precision)]) for conv, precision in times}
    fastest = min(candidates, key=lambda c: min(times[c]))
    choice = CpuChoice(fastest[0], fastest[1], seconds, rates)
    if cache is not None:
        cache[key] = choice
    return choice
