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
torch.compile'd rows, without and with the CUDA graph, and records the compilation time.
Every row is the trainer's plan (capsnotes.fast.plan) with named choices replaced; a row
whose plan cannot run (a CUDA graph of a float16 step, for one) is refused with the
reason, and a row that fails is left out with its error, while the others are timed.
Every row runs in the same process, so every row has the same allocator settings (the
record keeps the GLIBC_TUNABLES the process was started with). The command then
measures the device's matrix-multiply rate, reports the achieved arithmetic rate
against it, and breaks a capsnotes step down by part (benchmarks/breakdown.py).

--train PROFILE then runs ``capsnotes.training.train.train`` with that profile in the same
process, and --record NAME writes benchmarks/results/NAME.json with the device, torch
version, date, command, the trainer's plan, throughputs, speedup, and the run's test
accuracy and wall time (``training_runs``, as ``benchmarks.runs`` writes them).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from benchmarks.baseline import BaselineCapsNet, baseline_loss
from benchmarks.breakdown import allocator_setting, breakdown, flops_per_image, print_breakdown
from benchmarks.runs import run_summary
from capsnotes.data import data_root, load_dataset
from capsnotes.fast.plan import Plan
from capsnotes.fast.precision import device_name, resolve_device
from capsnotes.training.config import TrainConfig, profile
from capsnotes.training.train import build_run, plan_for, train

RESULTS = Path(__file__).resolve().parent / "results"


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
        synchronize(device)

    return run


@dataclass(frozen=True)
class Row:
    """A row of the comparison: the trainer's run (its plan,
    :func:`capsnotes.training.train.plan_for`) with some of the plan's choices replaced by name
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
    """The rows beside the trainer's own for a device whose trainer runs ``trainer``: on a
    CPU the techniques added one after another; on a GPU each technique the trainer uses
    left out in turn, two it does not use added, larger batches, and with ``compiled``
    ``torch.compile`` without and with the graph. A row whose plan cannot run is refused
    when it is built (:meth:`capsnotes.fast.plan.Plan.check`)."""
    size = batch_size
    if trainer.device_type != "cuda":
        native, matmul = {"convolution": "native"}, {"convolution": "matmul"}
        float32, bf16 = {"precision": "float32"}, {"precision": "bfloat16"}
        return {
            "capsnotes, reference code only": Row(size, reference=True),
            "  + fused routing backward": Row(size, native | float32 | {"fused_adam": False}),
            "  + fused Adam": Row(size, native | float32),
            "  + convolutions as matmul": Row(size, matmul | float32),
            "  + bf16 autocast": Row(size, native | bf16),
            "  + bf16 autocast, convolutions as matmul": Row(size, matmul | bf16),
            "capsnotes, float32 only": Row(size, float32),
        }
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
    plan = plan_for(config, device, reference=row.reference, sample=sample, **row.choices)
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

    def run_steps(steps: int) -> None:
        started = time.perf_counter()
        with cudnn_autotuning(row.cudnn_autotune):
            for _ in range(steps):
                run.step(next(stream))
            synchronize(device)
        if run.plan.compile and notes is not None and "compile_seconds" not in notes:
            notes["compile_seconds"] = time.perf_counter() - started  # the first call compiles

    return run_steps


def time_steps(run: Callable[[int], None], steps: int, device: torch.device) -> float:
    """Seconds for ``steps`` training steps (after one untimed step)."""
    run(1)
    synchronize(device)
    started = time.perf_counter()
    run(steps)
    return time.perf_counter() - started


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
    :func:`ablation_rows` in alternating rounds; a row other than the first two that
    cannot be built or run is left out, with the reason, and the rest go on."""
    trainer = plan_for(TrainConfig(batch_size=batch_size), device)
    rows_to_run = {"capsnotes": Row(batch_size)}
    if ablation:
        rows_to_run |= ablation_rows(trainer, batch_size, larger_batches, compiled)
    elif compiled:
        compile_rows = ablation_rows(trainer, batch_size, (), compiled=True)
        rows_to_run |= {k: v for k, v in compile_rows.items() if "torch.compile" in k}
    notes: dict[str, dict] = {name: {} for name in rows_to_run}
    builders: dict[str, tuple[int, Callable[[], Callable[[int], None]]]] = {
        "baseline": (batch_size, lambda: baseline_stepper(device, batch_size, root)),
    }
    for name, row in rows_to_run.items():
        builders[name] = (
            row.batch_size,
            functools.partial(capsnotes_stepper, device, root, row, notes[name]),
        )
    contenders: dict[str, tuple[int, Callable[[int], None]]] = {}
    failed: dict[str, dict] = {}
    for name, (size, build) in builders.items():
        try:  # building a row is part of what may fail
            contenders[name] = (size, build())
            contenders[name][1](warmup)
        except Exception as error:  # an optional technique that does not work here
            if name in ("baseline", "capsnotes"):
                raise
            contenders.pop(name, None)
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
            seconds[name].append(time_steps(contenders[name][1], steps, device))
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
    CPU, bf16 on a GPU)."""
    size = 8192 if device.type == "cuda" else 2048
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    times = []
    for _ in range(8 if device.type == "cuda" else 4):
        synchronize(device)
        started = time.perf_counter()
        a @ b
        synchronize(device)
        times.append(time.perf_counter() - started)
    seconds = statistics.median(times[1:])
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "size": size,
        "tflops": 2 * size**3 / seconds / 1e12,
    }


def cpu_details() -> dict:
    """What /proc/cpuinfo says of the CPU (Linux; empty elsewhere): the model name, family
    and model numbers, and which of the flags that matter for bf16 it reports. For the
    record only: the trainer decides by timing, not by flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor is enough
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    flags = set(fields.get("flags", "").split())
    return {
        "model_name": fields.get("model name"),
        "vendor": fields.get("vendor_id"),
        "family": fields.get("cpu family"),
        "model": fields.get("model"),
        "flags": sorted(flags & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}),
    }


def print_table(rows: dict, device: str) -> None:
    base = rows["baseline"]["images_per_second"]
    print(
        f"\n{'implementation':32s} {'device':28s} {'batch':>5s} {'train img/s':>11s} "
        f"{'s/epoch':>8s} {'ratio':>6s}"
    )
    for name, row in rows.items():
        if "error" in row or "refused" in row:
            why = row.get("error") or row["refused"]
            print(f"{name:32s} {'failed' if 'error' in row else 'refused'}: {why[:60]}")
            continue
        print(
            f"{name:32s} {device[:28]:28s} {row['batch_size']:5d} "
            f"{row['images_per_second']:11.1f} {row['seconds_per_epoch']:8.2f} "
            f"{row['images_per_second'] / base:6.2f}"
        )


@dataclass(frozen=True)
class Settings:
    """What the command line asks for, with the device's defaults filled in."""

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


def parse(argv: list[str] | None = None) -> Settings:
    """The command line's settings; the batch size, steps and warm-up default by device,
    and the larger batches and ``--compile`` apply on a GPU only."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.compare", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--batch-size", type=int, default=None, help="default: 64 on a CPU, 128 on a GPU"
    )
    parser.add_argument("--steps", type=int, default=None, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--data-root", default=None)
    parser.add_argument(
        "--no-ablation",
        action="store_true",
        help="time only baseline and capsnotes, not the steps in between",
    )
    parser.add_argument(
        "--larger-batches",
        type=int,
        nargs="*",
        default=None,
        metavar="N",
        help="on a GPU, also time the trainer's path at these batch sizes (default: 256 512)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="on a GPU, also time a torch.compile'd model (and report its compilation time)",
    )
    parser.add_argument(
        "--train", metavar="PROFILE", help="also run capsnotes.training.train with PROFILE"
    )
    parser.add_argument("--record", metavar="NAME", help="write benchmarks/results/NAME.json")
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    on_gpu = device.type == "cuda"
    larger = (256, 512) if args.larger_batches is None else tuple(args.larger_batches)
    return Settings(
        device=device,
        batch_size=args.batch_size or (128 if on_gpu else 64),
        steps=args.steps or (100 if on_gpu else 5),
        rounds=args.rounds,
        warmup=args.warmup if args.warmup is not None else (20 if on_gpu else 2),
        root=data_root(args.data_root),
        ablation=not args.no_ablation,
        larger_batches=larger if on_gpu else (),
        compiled=args.compile and on_gpu,
        train=args.train,
        record=args.record,
        command="python -m benchmarks.compare " + " ".join(sys.argv[1:] if argv is None else argv),
    )


def run(settings: Settings) -> dict:
    """The record of the comparison: every row, the device's matrix-multiply rates, the
    achieved arithmetic rate and the step's breakdown (the training fields still None)."""
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
    return {
        "device": device_name(s.device),
        "cpu": cpu_details() if not on_gpu else None,
        "torch": torch.__version__,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": s.command,
        "allocator": allocator_setting(),
        "plan": ours["plan"],  # as it ran: on a CPU, its timed choices
        "batch_size": s.batch_size,
        "steps_per_round": s.steps,
        "rounds": s.rounds,
        "images_per_second": ours["images_per_second"],
        "baseline_images_per_second": rows["baseline"]["images_per_second"],
        "speedup_vs_baseline": ours["images_per_second"] / rows["baseline"]["images_per_second"],
        "speedup_vs_plain": ours["images_per_second"] / plain["images_per_second"]
        if plain
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
    """Print the comparison of ``record``: the table, the trainer's choice on a CPU, the
    arithmetic rate against the measured peak, and the breakdown."""
    rows, peak, flops = record["rows"], record["matmul_peak"], record["flops_per_training_image"]
    print(f"allocator: {record['allocator']}")
    print_table(rows, record["device"])
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


def report_training(record: dict) -> None:
    print(
        f"\n{record['profile']} profile: test accuracy {record['test_accuracy']:.4f}, "
        f"whole run {record['wall_seconds']:.1f} s on {record['device']}"
    )


def write_record(record: dict, name: str) -> Path:
    """Write ``record`` as ``benchmarks/results/<name>.json``."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}")
    return path


def main(argv: list[str] | None = None) -> int:
    settings = parse(argv)
    record = run(settings)
    report(record)  # now, before the training run, which may take a while
    if settings.train:
        record |= run_training(settings)
        report_training(record)
    if settings.record:
        write_record(record, settings.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
