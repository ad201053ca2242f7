"""Time capsnotes against the straightforward baseline, side by side, in one process.

    python -m benchmarks.compare                       # GPU if present, else CPU
    python -m benchmarks.compare --device cpu --batch-size 64 --steps 5
    python -m benchmarks.compare --train paper --record h100-paper   # + a full run, saved

Both implementations train the same architecture (8,215,568 parameters) on real MNIST
with the same batch size: forward with labels, margin + reconstruction loss, backward,
Adam. Rounds alternate between them, and the median of the rounds is reported:

* baseline  — benchmarks/baseline.py fed by a torchvision DataLoader (ToTensor per
              image), float32, eager, NCHW convolutions, einsum routing.
* capsnotes — the run the trainer builds (capsnotes.train.build_run) on whole-tensor
              batches (capsnotes.data): fused routing and fused Adam; on a CPU the
              convolutions chosen by timing them; on CUDA bf16 autocast and a CUDA
              graph of the step.

Further rows (skip them with --no-ablation) are the plain reference model and the fast
paths one at a time: on a CPU added one after another, on a GPU each left out of the
trainer's path in turn (and two techniques it does not use, channels-last memory and
cuDNN autotuning, added to it), then larger batches (--larger-batches). --compile adds
torch.compile'd rows, without and with the CUDA graph, and records the compilation time.
Every row runs in the same process, so every row has the same allocator settings (the
record keeps the GLIBC_TUNABLES the process was started with). The command then
measures the device's
matrix-multiply rate, reports the achieved arithmetic rate against it, and breaks a
capsnotes step down by part (benchmarks/breakdown.py).

--train PROFILE then runs ``capsnotes.train.train`` with that profile in the same
process, and --record NAME writes benchmarks/results/NAME.json with the device, torch
version, date, command, throughputs, speedup, and the run's test accuracy and wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmarks.baseline import BaselineCapsNet, baseline_loss
from benchmarks.breakdown import allocator_setting, breakdown, flops_per_image, print_breakdown
from capsnotes.config import TrainConfig, profile
from capsnotes.data import data_root, load_dataset
from capsnotes.fast.graphs import GraphedStep
from capsnotes.fast.precision import device_name, resolve_device
from capsnotes.step import TrainingStep
from capsnotes.train import build_run, train

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


def capsnotes_stepper(
    device: torch.device,
    batch_size: int,
    root: Path,
    *,
    mixed_precision: bool = True,
    channels_last: bool = False,
    fast_routing: bool = True,
    convolutions: str = "trainer",
    precision: str = "trainer",
    fused_adam: bool = True,
    cudnn_autotune: bool = False,
    graphed: bool = True,
    compiled: bool = False,
    notes: dict | None = None,
) -> Callable[[int], None]:
    """capsnotes as its trainer runs it on this device: the run of
    :func:`capsnotes.train.build_run`, one training step at a time. The keywords switch one
    technique on or off for the ablation rows (those named for CUDA do nothing on a CPU):
    bf16 autocast, the fused routing backward, on a CPU ``convolutions`` ``"native"`` or
    ``"matmul"`` and ``precision`` ``"float32"`` or ``"bfloat16"`` instead of the
    trainer's timed choice (``"trainer"``; with ``convolutions`` given and ``precision``
    not, float32), fused Adam and the
    CUDA graph, which the trainer uses; channels-last parameters and cuDNN's autotuning,
    which it does not. ``compiled`` runs the model through ``torch.compile`` (with the
    reference routing, which the compiler fuses itself). The trainer's choice of
    convolutions, the timings it made it by, and the compilation time go into ``notes``."""
    on_gpu = device.type == "cuda"
    data = load_dataset("mnist", train=True, root=root, download=False).to(device)
    config = TrainConfig(batch_size=batch_size, mixed_precision=mixed_precision)
    implementation = {"routing": "fused" if fast_routing and not compiled else "reference"}
    if not on_gpu and convolutions != "trainer":
        implementation["convolution"] = convolutions
    if not on_gpu and precision != "trainer":
        implementation["precision"] = precision
    sample = next(data.batches(batch_size)) if not on_gpu and convolutions == "trainer" else None
    graphed = graphed and on_gpu
    run = build_run(
        config,
        device,
        sample=sample,
        implementation=implementation,
        fused_adam=fused_adam,
        graphed=graphed and not compiled,
    )
    if notes is not None and not on_gpu:
        notes["convolution"] = run.details["convolution"]
        notes["precision"] = run.details["precision"]
        for key in ("step_seconds", "matmul_gflops"):
            if key in run.details:
                notes[key] = run.details[key]
    if on_gpu and channels_last:
        run.model.to(memory_format=torch.channels_last)
    step = run.step
    if compiled:  # the same step, with the compiled model in it
        step = TrainingStep(
            torch.compile(run.model),
            run.optimizer,
            config.objective,
            run.step.precision,
            run.step.scaler,
            run.average,
        )
        if graphed:
            step = GraphedStep(step)
    generator = torch.Generator(device=device).manual_seed(0)

    def epoch() -> Iterator:  # whole batches only: a graph replays one batch size
        shuffled = data.batches(batch_size, shuffle=True, max_shift=2, generator=generator)
        return (batch for batch in shuffled if len(batch[0]) == batch_size)

    stream = endless(epoch)

    def run_steps(steps: int) -> None:
        started = time.perf_counter()
        with cudnn_autotuning(on_gpu and cudnn_autotune):
            for _ in range(steps):
                step(next(stream))
            synchronize(device)
        if compiled and notes is not None and "compile_seconds" not in notes:
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
    trainer_notes: dict = {}
    contenders: dict[str, tuple[int, Callable[[int], None]]] = {
        "baseline": (batch_size, baseline_stepper(device, batch_size, root)),
        "capsnotes": (
            batch_size,
            capsnotes_stepper(device, batch_size, root, notes=trainer_notes),
        ),
    }
    notes: dict[str, dict] = {"capsnotes": trainer_notes}

    def add(name: str, size: int = batch_size, **switches: object) -> None:
        notes[name] = {}
        contenders[name] = (
            size,
            capsnotes_stepper(device, size, root, notes=notes[name], **switches),
        )

    if ablation and device.type == "cuda":
        # The trainer's path with one technique left out at a time, and with none; then
        # with each of two that it does not use added.
        techniques = {
            "bf16 autocast": "mixed_precision",
            "fused routing backward": "fast_routing",
            "fused Adam": "fused_adam",
            "CUDA graph": "graphed",
        }
        add("capsnotes, reference code only", **dict.fromkeys(techniques.values(), False))
        for label, switch in techniques.items():
            add(f"  without {label}", **{switch: False})
        add("  with channels-last", channels_last=True)
        add("  with cuDNN autotuning", cudnn_autotune=True)
        for size in larger_batches:
            add(f"capsnotes, batch {size}", size)
    elif ablation:
        add(
            "capsnotes, reference code only",
            fast_routing=False,
            convolutions="native",
            fused_adam=False,
        )
        add("  + fused routing backward", convolutions="native", fused_adam=False)
        add("  + fused Adam", convolutions="native")
        add("  + convolutions as matmul", convolutions="matmul")
        add("  + bf16 autocast", convolutions="native", precision="bfloat16")
        add(
            "  + bf16 autocast, convolutions as matmul",
            convolutions="matmul",
            precision="bfloat16",
        )
        add("capsnotes, float32 only", mixed_precision=False)
    if compiled and device.type == "cuda":
        add("capsnotes, torch.compile, no graph", compiled=True, graphed=False)
        add("capsnotes, torch.compile + graph", compiled=True)
    failed: dict[str, dict] = {}
    for name, (size, run) in list(contenders.items()):
        try:
            run(warmup)
        except Exception as error:  # an optional technique that does not work here
            if name in ("baseline", "capsnotes"):
                raise
            message = f"{type(error).__name__}: {error}"[:500]
            failed[name] = {"batch_size": size, "error": message}
            del contenders[name]
            print(f"{name.strip()}: failed, left out ({message[:200]})")
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
        } | notes.get(name, {})  # on a CPU: which convolutions, and why; compile time
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
        if "error" in row:
            print(f"{name:32s} failed: {row['error'][:60]}")
            continue
        print(
            f"{name:32s} {device[:28]:28s} {row['batch_size']:5d} "
            f"{row['images_per_second']:11.1f} {row['seconds_per_epoch']:8.2f} "
            f"{row['images_per_second'] / base:6.2f}"
        )


def main(argv: list[str] | None = None) -> int:
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
    parser.add_argument("--train", metavar="PROFILE", help="also run capsnotes.train with PROFILE")
    parser.add_argument("--record", metavar="NAME", help="write benchmarks/results/NAME.json")
    args = parser.parse_args(argv)

    device = resolve_device(args.device)
    on_gpu = device.type == "cuda"
    batch_size = args.batch_size or (128 if on_gpu else 64)
    steps = args.steps or (100 if on_gpu else 5)
    warmup = args.warmup if args.warmup is not None else (20 if on_gpu else 2)
    root = data_root(args.data_root)
    name = device_name(device)
    started = time.perf_counter()
    larger = (256, 512) if args.larger_batches is None else tuple(args.larger_batches)
    rows = compare(
        device,
        batch_size,
        steps,
        args.rounds,
        warmup,
        root,
        not args.no_ablation,
        larger_batches=larger if on_gpu else (),
        compiled=args.compile and on_gpu,
    )
    print(f"allocator: {allocator_setting()}")
    print_table(rows, name)
    if "step_seconds" in rows["capsnotes"]:
        timed = ", ".join(f"{k} {v:.3f} s" for k, v in rows["capsnotes"]["step_seconds"].items())
        print(
            f"the trainer chose {rows['capsnotes']['convolution']} convolutions in "
            f"{rows['capsnotes']['precision']} ({timed})"
        )
    peak = matmul_peak(device)
    peak_bf16 = matmul_peak(device, torch.bfloat16) if not on_gpu else peak
    parts = breakdown(device, batch_size, repeats=50 if device.type == "cuda" else 5, root=root)
    flops = flops_per_image(profile("paper"))
    achieved = flops * rows["capsnotes"]["images_per_second"] / 1e12
    print(
        f"\n{flops / 1e9:.3f} GFLOP per training image: {achieved:.3f} TFLOP/s achieved, "
        f"{achieved / peak['tflops']:.1%} of the measured {peak['dtype']} matrix-multiply "
        f"rate ({peak['tflops']:.2f} TFLOP/s)\n"
    )
    print_breakdown(parts)

    record = {
        "device": name,
        "cpu": cpu_details() if not on_gpu else None,
        "torch": torch.__version__,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m benchmarks.compare "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "allocator": allocator_setting(),
        "batch_size": batch_size,
        "steps_per_round": steps,
        "rounds": args.rounds,
        "images_per_second": rows["capsnotes"]["images_per_second"],
        "baseline_images_per_second": rows["baseline"]["images_per_second"],
        "speedup_vs_baseline": rows["capsnotes"]["images_per_second"]
        / rows["baseline"]["images_per_second"],
        "speedup_vs_plain": rows["capsnotes"]["images_per_second"]
        / rows["capsnotes, reference code only"]["images_per_second"]
        if "capsnotes, reference code only" in rows
        else None,
        "rows": rows,
        "flops_per_training_image": flops,
        "achieved_tflops": achieved,
        "matmul_peak": peak,
        "matmul_peak_bf16": peak_bf16,
        "breakdown": parts,
        "comparison_seconds": time.perf_counter() - started,
        "test_accuracy": None,
        "wall_seconds": None,
        "profile": None,
    }
    if args.train:
        with tempfile.TemporaryDirectory() as out:
            result = train(profile(args.train), out, device=device, data_root=root, progress=False)
        history = result.history
        record.update(
            profile=args.train,
            test_accuracy=history["test_accuracy"],
            wall_seconds=history["wall_seconds"],
            train_config=history["train_config"],
            epochs=[
                {k: v for k, v in e.items() if not k.startswith("step_")} for e in history["epochs"]
            ],
        )
        print(
            f"\n{args.train} profile: test accuracy {history['test_accuracy']:.4f}, "
            f"whole run {history['wall_seconds']:.1f} s on {name}"
        )
    if args.record:
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"{args.record}.json"
        path.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
