"""Time capsnotes against the straightforward baseline, side by side, in one process.

    python -m benchmarks.compare                       # GPU if present, else CPU
    python -m benchmarks.compare --device cpu --batch-size 64 --steps 5
    python -m benchmarks.compare --train paper --record h100-paper   # + a full run, saved

Both implementations train the same architecture (8,215,568 parameters) on real MNIST
with the same batch size: forward with labels, margin + reconstruction loss, backward,
Adam. Rounds alternate between them, and the median of the rounds is reported:

* baseline  — benchmarks/baseline.py fed by a torchvision DataLoader (ToTensor per
              image), float32, eager, NCHW convolutions, einsum routing.
* capsnotes — the run the trainer builds (capsnotes.training.train.build_run) on whole-tensor
              batches (capsnotes.data): fused routing and fused Adam; on a CPU the
              convolutions and precision chosen by timing them; on CUDA the card's
              16-bit format and, outside float16, a CUDA graph of the step.

Further rows (skip them with --no-ablation) are the plain reference model and the fast
paths one at a time: on a CPU added one after another, on a GPU each left out of the
trainer's path in turn (and two techniques it does not use, channels-last memory and
cuDNN autotuning, added to it), then larger batches (--larger-batches). --compile adds
torch.compile'd rows (on a GPU without and with the CUDA graph, on a CPU with either
routing) and records the compilation time.
Every row is the trainer's plan (capsnotes.fast.plan) with named choices replaced; a row
whose plan cannot run (a CUDA graph of a float16 step, for one) is refused with the
reason, and a row that fails is left out with its error, while the others are timed.
Every row runs in the same process, so every row has the same allocator settings (the
record keeps the GLIBC_TUNABLES the process was started with; on a CPU, from the first
fast run built on, freed memory is kept: capsnotes.fast.memory). The command then
measures the device's matrix-multiply rate, reports the achieved arithmetic rate
against it, and breaks a capsnotes step down by part (benchmarks/breakdown.py).

The timing is ``torch.utils.benchmark``'s: each round of a row is a ``Timer`` of its
steps (after the Timer's own warm-up steps, with the process's threads, and a clock that
waits for the device), the matrix-multiply rate is the Timer's blocked autorange, and the
table is its ``Compare``. Only the rounds are written here: a Timer times one statement,
and the rows must take turns, so that a drift of the machine's speed (another process, the
clock, the heat) falls on every row alike rather than on whichever ran last.

--train PROFILE then runs ``capsnotes.training.train.train`` with that profile in the same
process, and --record NAME writes benchmarks/results/NAME.json with the record's header
(benchmarks.record), the trainer's plan, throughputs, speedup, and the run's test
accuracy and wall time (``training_runs``, as ``benchmarks.runs`` writes them).
"""

from __future__ import annotations

import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import tyro
from torch.utils.benchmark import Compare, Measurement, TaskSpec, Timer

from benchmarks.breakdown import breakdown, flops_per_image, print_breakdown
from benchmarks.contenders import (
    Row,
    ablation_rows,
    baseline_stepper,
    capsnotes_stepper,
    synchronize,
)
from benchmarks.record import RESULTS, command_line, header
from benchmarks.runs import run_summary
from capsnotes.data import data_root
from capsnotes.data.files import write_json
from capsnotes.fast.plan import plan_for
from capsnotes.fast.precision import resolve_device
from capsnotes.training.config import PROFILES, TrainConfig, profile
from capsnotes.training.options import DataRoot, Device
from capsnotes.training.train import train


def clock(device: torch.device) -> Callable[[], float]:
    """The Timer's clock on ``device``: it waits for the work queued on that device first
    (the Timer's default clock waits for the current accelerator, which may be another)."""

    def now() -> float:
        synchronize(device)
        return time.perf_counter()

    return now


def step_timer(run: Callable[[int], None], device: torch.device) -> Timer:
    """A Timer of one training step of ``run``; ``timeit(steps)`` times a round of
    ``steps`` steps, after its own untimed ones (two below 300), with the process's threads."""
    return Timer(
        "run(1)", globals={"run": run}, timer=clock(device), num_threads=torch.get_num_threads()
    )


def compare(
    device: torch.device,
    batch_size: int,
    steps: int,
    rounds: int,
    warmup: int,
    root: Path,
    ablation: bool,
    larger_batches: Iterable[int] = (),
    compiled: bool = False,
) -> dict:
    """Time the baseline, the trainer's run and (with ``ablation``) the rows of
    :func:`ablation_rows` in alternating rounds of ``steps`` steps; a row other than the first
    two that cannot be built or run is left out, with the reason, and the rest go on."""
    if min(batch_size, steps, rounds) < 1 or warmup < 0:
        raise ValueError(
            f"expected a batch size, steps and rounds of at least 1 and warm-up steps of at "
            f"least 0; got {batch_size}, {steps}, {rounds} and {warmup}"
        )
    trainer = plan_for(TrainConfig(batch_size=batch_size), device)
    rows_to_run = {"capsnotes": Row(batch_size)}
    if ablation:
        rows_to_run |= ablation_rows(trainer, batch_size, larger_batches, compiled)
    elif compiled:  # the rows compilation adds, alone
        compile_rows = ablation_rows(trainer, batch_size, (), compiled=True)
        plain_rows = ablation_rows(trainer, batch_size, (), compiled=False)
        rows_to_run |= {k: v for k, v in compile_rows.items() if k not in plain_rows}
    notes: dict[str, dict] = {name: {} for name in rows_to_run}
    builders: dict[str, tuple[int, Callable[[], Callable[[int], None]]]] = {
        "baseline": (batch_size, lambda: baseline_stepper(device, batch_size, root)),
    }
    for name, row in rows_to_run.items():
        builders[name] = (
            row.batch_size,
            functools.partial(capsnotes_stepper, device, root, row, notes[name]),
        )
    contenders: dict[str, tuple[int, Timer]] = {}
    failed: dict[str, dict] = {}
    for name, (size, build) in builders.items():
        try:  # building a row is part of what may fail
            stepper = build()
            stepper(warmup)
            synchronize(device)  # an error of the warm-up's kernels shows here
            contenders[name] = (size, step_timer(stepper, device))
        except Exception as error:  # an optional technique that does not work here
            if name in ("baseline", "capsnotes"):
                raise
            refused = isinstance(error, ValueError)
            message = (str(error) if refused else f"{type(error).__name__}: {error}")[:500]
            failed[name] = {"batch_size": size, "refused" if refused else "error": message}
            print(f"{name.strip()}: {'refused' if refused else 'failed'}, left out ({message})")
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for round_ in range(rounds):
        # rotate the order, so that no row always runs right after the same other row
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            seconds[name] += contenders[name][1].timeit(steps).raw_times  # the round's seconds
    rows = {}
    for name, times in seconds.items():
        size = contenders[name][0]
        per_step = statistics.median(times) / steps
        rows[name] = {
            "batch_size": size,
            "images_per_second": size / per_step,
            "seconds_per_epoch": 60_000 * per_step / size,
            "round_seconds": times,
        } | notes.get(name, {})  # the row's plan; on a CPU its timings; compile time
    rows |= failed
    return rows


def matmul_peak(device: torch.device, dtype: torch.dtype | None = None) -> dict:
    """The device's measured matrix-multiply rate in ``dtype`` (default: float32 on a
    CPU, bf16 on a GPU): the median product of the Timer's blocked autorange."""
    size = 8192 if device.type == "cuda" else 2048
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    timer = Timer(
        "a @ b", globals={"a": a, "b": b}, timer=clock(device), num_threads=torch.get_num_threads()
    )
    seconds = timer.blocked_autorange(min_run_time=0.5).median
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "size": size,
        "tflops": 2 * size**3 / seconds / 1e12,
    }


def print_table(record: dict) -> None:
    """The timed rows as ``torch.utils.benchmark.Compare`` prints them (the median round's
    time per step and per image), and the rows left out with the reason."""
    rows, threads = record["rows"], torch.get_num_threads()
    timed = {name: row for name, row in rows.items() if "round_seconds" in row}
    table = Compare(
        [
            Measurement(
                record["steps_per_round"] * per,
                row["round_seconds"],
                TaskSpec(
                    "run(1)",
                    "pass",
                    label=f"{record['device']}, batch {record['batch_size']} unless named",
                    sub_label=name,
                    description=f"per {unit}",
                    num_threads=threads,
                ),
            )
            for name, row in timed.items()
            for unit, per in (("step", 1), ("image", row["batch_size"]))
        ]
    )
    table.highlight_warnings()
    table.print()
    for name, row in rows.items():
        if name not in timed:
            why = row.get("error") or row["refused"]
            print(f"{name:40s} {'failed' if 'error' in row else 'refused'}: {why[:60]}")


@dataclass(frozen=True)
class Options:
    """Time capsnotes against the straightforward baseline, side by side, in one process."""

    device: Device = "auto"
    batch_size: int | None = None
    """images per step (None: 64 on a CPU, 128 on a GPU)"""
    steps: int | None = None
    """timed steps per round (None: 5 on a CPU, 100 on a GPU)"""
    rounds: int = 3
    """rounds, in each of which every row is timed once"""
    warmup: int | None = None
    """untimed steps of every row before the rounds (None: 2 on a CPU, 20 on a GPU)"""
    data_root: DataRoot = None
    ablation: bool = True
    """time the rows between baseline and capsnotes (--no-ablation: those two only)"""
    larger_batches: tuple[int, ...] = (256, 512)
    """on a GPU, also time the trainer's path at these batch sizes"""
    compile: bool = False
    """also time torch.compile'd models (and report their compilation time)"""
    train: Literal[tuple(PROFILES)] | None = None  # type: ignore[valid-type]
    """also run capsnotes.training.train with this profile, in the same process"""
    record: str | None = None
    """write the record to benchmarks/results/NAME.json"""


@dataclass(frozen=True)
class Settings:
    """What the command line asks for, with the device's defaults filled in: the batch size,
    steps and warm-up by device, and the larger batches on a GPU only."""

    device: torch.device
    batch_size: int
    steps: int
    rounds: int
    warmup: int
    root: Path
    ablation: bool
    larger_batches: tuple[int, ...]
    compiled: bool
    train: str | None
    record: str | None
    command: str

    @classmethod
    def of(cls, options: Options, command: str) -> Settings:
        o, device = options, resolve_device(options.device)
        on_gpu = device.type == "cuda"
        return cls(
            device=device,
            batch_size=o.batch_size or (128 if on_gpu else 64),
            steps=o.steps or (100 if on_gpu else 5),
            rounds=o.rounds,
            warmup=o.warmup if o.warmup is not None else (20 if on_gpu else 2),
            root=data_root(o.data_root),
            ablation=o.ablation,
            larger_batches=o.larger_batches if on_gpu else (),
            compiled=o.compile,
            train=o.train,
            record=o.record,
            command=command,
        )


def run(settings: Settings) -> dict:
    """The record of the comparison: its header (:func:`benchmarks.record.header`), every
    row, the device's matrix-multiply rates, the achieved arithmetic rate and the step's
    breakdown (the training fields still None)."""
    s, started = settings, time.perf_counter()
    on_gpu = s.device.type == "cuda"
    rows = compare(
        s.device,
        s.batch_size,
        s.steps,
        s.rounds,
        s.warmup,
        s.root,
        s.ablation,
        larger_batches=s.larger_batches,
        compiled=s.compiled,
    )
    peak = matmul_peak(s.device)
    peak_bf16 = matmul_peak(s.device, torch.bfloat16) if not on_gpu else peak
    parts = breakdown(s.device, s.batch_size, repeats=50 if on_gpu else 5, root=s.root)
    flops = flops_per_image(profile("paper"))
    ours, plain = rows["capsnotes"], rows.get("capsnotes, reference code only")
    return header(s.command, s.device) | {
        "plan": ours["plan"],  # as it ran: on a CPU, its timed choices
        "batch_size": s.batch_size,
        "steps_per_round": s.steps,
        "rounds": s.rounds,
        "images_per_second": ours["images_per_second"],
        "baseline_images_per_second": rows["baseline"]["images_per_second"],
        "speedup_vs_baseline": ours["images_per_second"] / rows["baseline"]["images_per_second"],
        "speedup_vs_plain": ours["images_per_second"] / plain["images_per_second"]
        if plain and "images_per_second" in plain
        else None,
        "rows": rows,
        "flops_per_training_image": flops,
        "achieved_tflops": flops * ours["images_per_second"] / 1e12,
        "matmul_peak": peak,
        "matmul_peak_bf16": peak_bf16,
        "breakdown": parts,
        "comparison_seconds": time.perf_counter() - started,
        "test_accuracy": None,
        "wall_seconds": None,
        "profile": None,
    }


def run_training(settings: Settings) -> dict:
    """The record's fields of a full training run of ``settings.train`` in this process."""
    with tempfile.TemporaryDirectory() as out:
        result = train(
            profile(settings.train),
            out,
            device=settings.device,
            data_root=settings.root,
            progress=False,
        )
        summary = run_summary(Path(out)) | {"folder": None}
    history = result.history
    return {
        "profile": settings.train,
        "test_accuracy": history["test_accuracy"],
        "wall_seconds": history["wall_seconds"],
        "train_config": history["train_config"],
        "training_runs": [summary],  # as benchmarks.runs writes them
        "epochs": [
            {k: v for k, v in e.items() if not k.startswith("step_")} for e in history["epochs"]
        ],
    }


def report(record: dict) -> None:
    """Print the comparison of ``record``: the table, the speed-ups, the trainer's choice
    on a CPU, the arithmetic rate against the measured peak, and the breakdown."""
    rows, peak, flops = record["rows"], record["matmul_peak"], record["flops_per_training_image"]
    print(f"allocator: {record['allocator']}")
    print_table(record)
    plain = record["speedup_vs_plain"]
    print(
        f"capsnotes: {record['images_per_second']:.1f} images/s, "
        f"{record['speedup_vs_baseline']:.2f}x the baseline's"
        + (f", {plain:.2f}x the reference code's" if plain else "")
    )
    if "step_seconds" in rows["capsnotes"]:
        timed = ", ".join(f"{k} {v:.3f} s" for k, v in rows["capsnotes"]["step_seconds"].items())
        print(
            f"the trainer chose {rows['capsnotes']['convolution']} convolutions in "
            f"{rows['capsnotes']['precision']} ({timed})"
        )
    achieved = record["achieved_tflops"]
    print(
        f"\n{flops / 1e9:.3f} GFLOP per training image: {achieved:.3f} TFLOP/s achieved, "
        f"{achieved / peak['tflops']:.1%} of the measured {peak['dtype']} matrix-multiply "
        f"rate ({peak['tflops']:.2f} TFLOP/s)\n"
    )
    print_breakdown(record["breakdown"])


def main(argv: list[str] | None = None) -> int:
    options = tyro.cli(Options, args=argv, prog="python -m benchmarks.compare")
    settings = Settings.of(options, command_line("benchmarks.compare", argv))
    record = run(settings)
    report(record)  # now, before the training run, which may take a while
    if settings.train:
        record |= run_training(settings)
        print(
            f"\n{record['profile']} profile: test accuracy {record['test_accuracy']:.4f}, "
            f"whole run {record['wall_seconds']:.1f} s on {record['device']}"
        )
    if settings.record:
        path = RESULTS / f"{settings.record}.json"
        write_json(path, record)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
