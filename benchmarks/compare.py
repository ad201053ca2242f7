"""Time capsnotes against the straightforward baseline, side by side, in one process.

    python -m benchmarks.compare                       # GPU if present, else CPU
    python -m benchmarks.compare --device cpu --batch-size 64 --steps 5
    python -m benchmarks.compare --train paper --record h100-paper   # + a full run, saved

Both implementations train the same architecture (8,215,568 parameters) on real MNIST
with the same batch size: forward with labels, margin + reconstruction loss, backward,
Adam. Rounds alternate between them, and the median of the rounds is reported:

* baseline  — benchmarks/baseline.py fed by a torchvision DataLoader (ToTensor per
              image), float32, eager, NCHW convolutions, einsum routing.
* capsnotes — capsnotes.CapsNet on whole-tensor batches (capsnotes.data), with the
              fast paths capsnotes.train uses on this device (capsnotes.fast: fused
              routing; on a CPU the convolutions chosen by timing them, as the trainer
              does; bf16 autocast on CUDA).

Further rows (skip them with --no-ablation) are the plain reference model and the
fast paths one at a time. Every row runs in the same process, so every row has the same
allocator setting: on glibc Linux the command restarts itself with the malloc tunables
the trainer's command line uses (capsnotes/allocator.py) unless --allocator default is
given, and the record says which. The command then measures the device's
matrix-multiply rate, reports the achieved arithmetic rate against it, and breaks a
capsnotes step down by part (benchmarks/breakdown.py).

--train PROFILE then runs ``capsnotes.train.train`` with that profile in the same
process, and --record NAME writes benchmarks/results/NAME.json with the device, torch
version, date, command, throughputs, speedup, and the run's test accuracy and wall time.
"""

from __future__ import annotations

import argparse
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
from benchmarks.breakdown import breakdown, print_breakdown
from capsnotes import CapsNet, dynamic_routing, margin_loss, reconstruction_loss
from capsnotes.allocator import allocator_setting, restart_retaining_freed_memory
from capsnotes.data import batches, data_root, load_dataset
from capsnotes.fast import accelerate, use_matmul_convolutions
from capsnotes.flops import training_flops_per_image
from capsnotes.train import (
    TrainConfig,
    autocast_for,
    device_name,
    make_optimizer,
    profile,
    resolve_device,
    train,
    tune_cpu_convolutions,
)

RESULTS = Path(__file__).resolve().parent / "results"


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def endless(epoch: Callable[[], Iterable]) -> Iterator:
    """Batches from ``epoch()``, starting a new epoch whenever one runs out."""
    while True:
        yield from epoch()


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
    fast_routing: bool = True,
    convolutions: str = "trainer",
    fused_adam: bool = True,
    notes: dict | None = None,
) -> Callable[[int], None]:
    """capsnotes as its trainer runs it on this device. For the ablation rows,
    ``fast_routing=False`` routes with the reference dynamic_routing, on a CPU
    ``convolutions`` is ``"native"`` or ``"matmul"`` instead of the trainer's timed
    choice (``"trainer"``), and ``fused_adam=False`` steps with torch's default Adam.
    The trainer's choice of convolutions, and the timings it made it by, go into ``notes``."""
    data = load_dataset("mnist", train=True, root=root, download=False).to(device)
    torch.manual_seed(0)
    model = CapsNet().to(device)
    accelerate(model, device)  # every fast path for this device
    if not fast_routing:
        model.digits.routing_function = dynamic_routing
    if device.type == "cpu":
        if convolutions == "trainer":
            choice = tune_cpu_convolutions(model, TrainConfig(batch_size=batch_size), data)
            if notes is not None:
                notes.update(choice.to_dict())
        else:
            use_matmul_convolutions(model, convolutions == "matmul")
    optimizer = make_optimizer(model, 1e-3, fused=fused_adam)
    generator = torch.Generator(device=device).manual_seed(0)
    stream = endless(
        lambda: batches(
            data, batch_size, shuffle=True, max_shift=2, generator=generator, drop_last=True
        )
    )
    autocast = autocast_for(device)  # bf16 on CUDA, as the trainer

    def run(steps: int) -> None:
        for _ in range(steps):
            images, labels = next(stream)
            with autocast:
                out = model(images, labels)
            loss = margin_loss(out.capsules.float(), labels) + reconstruction_loss(
                out.reconstructions.float(), images
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        synchronize(device)

    return run


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
) -> dict:
    trainer_choice: dict = {}
    contenders = {
        "baseline": baseline_stepper(device, batch_size, root),
        "capsnotes": capsnotes_stepper(device, batch_size, root, notes=trainer_choice),
    }
    if ablation:
        contenders["capsnotes, reference code only"] = capsnotes_stepper(
            device, batch_size, root, fast_routing=False, convolutions="native", fused_adam=False
        )
        contenders["  + fused routing backward"] = capsnotes_stepper(
            device, batch_size, root, convolutions="native", fused_adam=False
        )
        contenders["  + fused Adam"] = capsnotes_stepper(
            device, batch_size, root, convolutions="native"
        )
        if device.type == "cpu":
            contenders["  + convolutions as matmul"] = capsnotes_stepper(
                device, batch_size, root, convolutions="matmul"
            )
    for run in contenders.values():
        run(warmup)
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for round_ in range(rounds):
        # rotate the order, so that no row always runs right after the same other row
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            seconds[name].append(time_steps(contenders[name], steps, device))
    rows = {}
    for name, times in seconds.items():
        per_step = statistics.median(times) / steps
        rows[name] = {
            "images_per_second": batch_size / per_step,
            "seconds_per_epoch": 60_000 * per_step / batch_size,
            "round_seconds": times,
        }
    rows["capsnotes"] |= trainer_choice  # on a CPU: which convolutions, and why
    return rows


def matmul_peak(device: torch.device) -> dict:
    """The device's measured matrix-multiply rate: float32 on a CPU, bf16 on a GPU."""
    size, dtype = (8192, torch.bfloat16) if device.type == "cuda" else (2048, torch.float32)
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


def print_table(rows: dict, device: str, batch_size: int) -> None:
    base = rows["baseline"]["images_per_second"]
    print(
        f"\n{'implementation':32s} {'device':28s} {'batch':>5s} {'train img/s':>11s} "
        f"{'s/epoch':>8s} {'ratio':>6s}"
    )
    for name, row in rows.items():
        print(
            f"{name:32s} {device[:28]:28s} {batch_size:5d} {row['images_per_second']:11.1f} "
            f"{row['seconds_per_epoch']:8.1f} {row['images_per_second'] / base:6.2f}"
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
    parser.add_argument("--train", metavar="PROFILE", help="also run capsnotes.train with PROFILE")
    parser.add_argument("--record", metavar="NAME", help="write benchmarks/results/NAME.json")
    parser.add_argument(
        "--allocator",
        choices=["retaining", "default"],
        default="retaining",
        help="retaining (default): restart with glibc keeping large freed blocks, as the "
        "trainer's command line does; default: glibc's defaults. Every row gets the same.",
    )
    args = parser.parse_args(argv)
    if args.allocator == "retaining":
        restart_retaining_freed_memory("benchmarks.compare", sys.argv[1:] if argv is None else argv)

    device = resolve_device(args.device)
    on_gpu = device.type == "cuda"
    batch_size = args.batch_size or (128 if on_gpu else 64)
    steps = args.steps or (100 if on_gpu else 5)
    warmup = args.warmup if args.warmup is not None else (20 if on_gpu else 2)
    root = data_root(args.data_root)
    name = device_name(device)
    started = time.perf_counter()
    rows = compare(device, batch_size, steps, args.rounds, warmup, root, not args.no_ablation)
    print(f"allocator: {allocator_setting()}")
    print_table(rows, name, batch_size)
    if "convolutions" in rows["capsnotes"]:
        timed = ", ".join(f"{k} {v:.3f} s" for k, v in rows["capsnotes"]["step_seconds"].items())
        print(f"the trainer chose {rows['capsnotes']['convolutions']} convolutions ({timed})")
    peak = matmul_peak(device)
    parts = breakdown(device, batch_size, repeats=50 if device.type == "cuda" else 5, root=root)
    flops = training_flops_per_image()
    achieved = flops * rows["capsnotes"]["images_per_second"] / 1e12
    print(
        f"\n{flops / 1e9:.3f} GFLOP per training image: {achieved:.3f} TFLOP/s achieved, "
        f"{achieved / peak['tflops']:.1%} of the measured {peak['dtype']} matrix-multiply "
        f"rate ({peak['tflops']:.2f} TFLOP/s)\n"
    )
    print_breakdown(parts)

    record = {
        "device": name,
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
