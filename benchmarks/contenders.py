"""What :mod:`benchmarks.compare` times: the baseline's training step, the trainer's, and the
rows between them (the trainer's plan with named choices replaced).

Each contender is a function ``run(steps)`` that takes ``steps`` training steps on its
device and returns without waiting for the device: the clock that times it waits
(:func:`benchmarks.compare.clock`), so that a round's steps queue as a training run's do.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from benchmarks.baseline import BaselineCapsNet, baseline_loss
from capsnotes.data import load_dataset
from capsnotes.fast.plan import Plan, plan_for
from capsnotes.training.config import TrainConfig, build_model
from capsnotes.training.train import build_run


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def endless(epoch: Callable[[], Iterable]) -> Iterator:
    """Batches from ``epoch()``, starting a new epoch whenever one runs out."""
    while True:
        yield from epoch()


@contextlib.contextmanager
def cudnn_autotuning(enabled: bool = True) -> Iterator[None]:
    """Let cuDNN time its convolution algorithms and keep the fastest
    (``torch.backends.cudnn.benchmark``) inside the block; the setting is restored after."""
    previous = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = enabled or previous
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = previous


def baseline_stepper(device: torch.device, batch_size: int, root: Path) -> Callable[[int], None]:
    """The baseline: a torchvision DataLoader and a plain float32 model."""
    import torchvision
    from torch.utils.data import DataLoader

    load_dataset("mnist", train=True, root=root, download=False)  # unpacks *.gz, checks files
    dataset = torchvision.datasets.MNIST(
        str(root), train=True, download=False, transform=torchvision.transforms.ToTensor()
    )
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        pin_memory=device.type == "cuda",
    )
    torch.manual_seed(0)
    model = BaselineCapsNet().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    stream = endless(lambda: loader)

    def run(steps: int) -> None:
        for _ in range(steps):
            x, y = next(stream)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            v, recon = model(x, y)
            loss = baseline_loss(v, recon, x, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    return run


@dataclass(frozen=True)
class Row:
    """A row of the comparison: the trainer's run (its plan,
    :func:`capsnotes.fast.plan.plan_for`) with some of the plan's choices replaced by name
    (``choices``), or the reference code, at a batch size; and two techniques the trainer does not
    use, added."""

    batch_size: int
    choices: dict[str, Any] = field(default_factory=dict)
    reference: bool = False
    channels_last: bool = False
    cudnn_autotune: bool = False


#: The 16-bit formats by the names the rows use.
FORMATS = {"bfloat16": "bf16 autocast", "float16": "float16 autocast"}


def ablation_rows(
    trainer: Plan, batch_size: int, larger_batches: Iterable[int] = (), compiled: bool = False
) -> dict[str, Row]:
    """The rows beside the trainer's own for a device whose trainer runs ``trainer``.

    On a CPU: the techniques added one after another; with ``compiled``, the trainer's
    choices under ``torch.compile`` with either routing, and the reference routing
    uncompiled as the control. On a GPU: each technique the trainer uses left out in
    turn, two it does not use added, larger batches; with ``compiled``,
    ``torch.compile`` without and with the graph. A row whose plan cannot run is
    refused when it is built (:meth:`capsnotes.fast.plan.Plan.check`)."""
    size = batch_size
    if trainer.device_type != "cuda":
        native, matmul = {"convolution": "native"}, {"convolution": "matmul"}
        native_input = {"convolution": "matmul-native-input"}
        float32, bf16 = {"precision": "float32"}, {"precision": "bfloat16"}
        rows = {
            "capsnotes, reference code only": Row(size, reference=True),
            "  + fused routing backward": Row(size, native | float32 | {"fused_adam": False}),
            "  + fused Adam": Row(size, native | float32),
            "  + convolutions as matmul": Row(size, matmul | float32),
            "  + convolutions as matmul, native input gradient": Row(size, native_input | float32),
            "  + bf16 autocast": Row(size, native | bf16),
            "  + bf16 autocast, convolutions as matmul": Row(size, matmul | bf16),
            "  + bf16 autocast, convolutions as matmul, native input gradient": Row(
                size, native_input | bf16
            ),
            "capsnotes, float32 only": Row(size, float32),
        }
        if compiled:  # the trainer's choices compiled, with either routing
            rows["capsnotes, torch.compile"] = Row(size, {"compile": True})
            rows["capsnotes, reference routing"] = Row(size, {"routing": "reference"})
            rows["capsnotes, torch.compile, reference routing"] = Row(
                size, {"compile": True, "routing": "reference"}
            )
        return rows
    rows = {"capsnotes, reference code only": Row(size, reference=True)}
    if trainer.precision != "float32":
        rows[f"  without {FORMATS[trainer.precision]}"] = Row(size, {"precision": "float32"})
    if trainer.routing == "fused":
        rows["  without fused routing backward"] = Row(size, {"routing": "reference"})
    if trainer.fused_adam:
        rows["  without fused Adam"] = Row(size, {"fused_adam": False})
    if trainer.cuda_graph:
        rows["  without CUDA graph"] = Row(size, {"cuda_graph": False})
    rows["  with channels-last"] = Row(size, channels_last=True)
    rows["  with cuDNN autotuning"] = Row(size, cudnn_autotune=True)
    for larger in larger_batches:
        rows[f"capsnotes, batch {larger}"] = Row(larger)
    if compiled:  # the reference routing, which the compiler fuses itself
        compile_ = {"compile": True, "routing": "reference"}
        rows["capsnotes, torch.compile, no graph"] = Row(size, compile_ | {"cuda_graph": False})
        rows["capsnotes, torch.compile + graph"] = Row(size, compile_ | {"cuda_graph": True})
    return rows


def capsnotes_stepper(
    device: torch.device, root: Path, row: Row, notes: dict | None = None
) -> Callable[[int], None]:
    """The run :func:`capsnotes.training.train.build_run` builds for ``row`` on this device, one
    training step at a time (on a CPU the plan's timed choices are made on a real batch).
    Raises a ``ValueError`` for a row whose plan cannot run. What the run computed with
    (its plan, on a CPU the timings that decided it) and the compilation time go into
    ``notes``."""
    on_gpu = device.type == "cuda"
    data = load_dataset("mnist", train=True, root=root, download=False).to(device)
    config = TrainConfig(batch_size=row.batch_size)
    sample = lambda: next(data.batches(row.batch_size))  # noqa: E731
    plan = plan_for(
        config,
        device,
        reference=row.reference,
        sample=sample,
        make_model=lambda: build_model(config),
        **row.choices,
    )
    run = build_run(config, device, plan)
    if notes is not None:
        notes["plan"] = {k: v for k, v in run.details.items() if k != "step_seconds"}
        if not on_gpu:  # the CPU's choice, and the timings that made it
            for key in ("convolution", "precision", "step_seconds", "matmul_gflops"):
                if key in run.details:
                    notes[key] = run.details[key]
    if row.channels_last:
        run.model.to(memory_format=torch.channels_last)
    generator = torch.Generator(device=device).manual_seed(0)

    def epoch() -> Iterator:  # whole batches only: a graph replays one batch size
        shuffled = data.batches(row.batch_size, shuffle=True, max_shift=2, generator=generator)
        return (batch for batch in shuffled if len(batch[0]) == row.batch_size)

    stream = endless(epoch)

    def run_steps(steps: int) -> None:  # the Timer's clock waits for the device
        started = time.perf_counter()
        with cudnn_autotuning(row.cudnn_autotune):
            for _ in range(steps):
                run.step(next(stream))
        if run.plan.compile and notes is not None and "compile_seconds" not in notes:
            synchronize(device)  # the first call compiles
            notes["compile_seconds"] = time.perf_counter() - started

    return run_steps
