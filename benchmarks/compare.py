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
              fast paths capsnotes.train uses on this device (capsnotes.fast; bf16
              autocast on CUDA).

On a CPU a third row, "baseline + retained memory", runs the baseline with the one
process-wide setting capsnotes uses (glibc keeps freed memory), to show how much of the
difference that setting alone makes.

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
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmarks.baseline import BaselineCapsNet, baseline_loss
from capsnotes import CapsNet, margin_loss, reconstruction_loss
from capsnotes.data import batches, data_root, load_dataset
from capsnotes.fast import accelerate, retain_freed_memory
from capsnotes.train import device_name, profile, resolve_device, train

RESULTS = Path(__file__).resolve().parent / "results"


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def baseline_stepper(device: torch.device, batch_size: int, root: Path) -> Callable[[int], None]:
    """The baseline: a torchvision DataLoader and a plain float32 model."""
    import torchvision
    from torch.utils.data import DataLoader

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
    iterator: Iterator = iter(loader)

    def run(steps: int) -> None:
        nonlocal iterator
        for _ in range(steps):
            try:
                x, y = next(iterator)
            except StopIteration:
                iterator = iter(loader)
                x, y = next(iterator)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            v, recon = model(x, y)
            loss = baseline_loss(v, recon, x, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        synchronize(device)

    return run


def capsnotes_stepper(device: torch.device, batch_size: int, root: Path) -> Callable[[int], None]:
    """capsnotes as its trainer runs it on this device."""
    data = load_dataset("mnist", train=True, root=root, download=False).to(device)
    torch.manual_seed(0)
    model = accelerate(CapsNet().to(device), device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    generator = torch.Generator(device=device).manual_seed(0)
    iterator: Iterator = iter(())
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if device.type == "cuda"
        else contextlib.nullcontext()
    )

    def run(steps: int) -> None:
        nonlocal iterator
        for _ in range(steps):
            try:
                images, labels = next(iterator)
            except StopIteration:
                iterator = batches(
                    data, batch_size, shuffle=True, max_shift=2, generator=generator, drop_last=True
                )
                images, labels = next(iterator)
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


def time_steps(
    run: Callable[[int], None],
    steps: int,
    device: torch.device,
    memory: contextlib.AbstractContextManager,
) -> float:
    """Seconds for ``steps`` training steps (after the caller's warm-up)."""
    with memory:
        run(1)  # settle the allocator under this memory setting
        synchronize(device)
        started = time.perf_counter()
        run(steps)
        return time.perf_counter() - started


def compare(
    device: torch.device, batch_size: int, steps: int, rounds: int, warmup: int, root: Path
) -> dict:
    contenders = {
        "baseline": (baseline_stepper(device, batch_size, root), contextlib.nullcontext),
        "capsnotes": (
            capsnotes_stepper(device, batch_size, root),
            retain_freed_memory if device.type == "cpu" else contextlib.nullcontext,
        ),
    }
    if device.type == "cpu":
        contenders["baseline + retained memory"] = (
            baseline_stepper(device, batch_size, root),
            retain_freed_memory,
        )
    for run, _ in contenders.values():
        run(warmup)
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, (run, memory) in contenders.items():
            seconds[name].append(time_steps(run, steps, device, memory()))
    rows = {}
    for name, times in seconds.items():
        per_step = statistics.median(times) / steps
        rows[name] = {
            "images_per_second": batch_size / per_step,
            "seconds_per_epoch": 60_000 * per_step / batch_size,
            "round_seconds": times,
        }
    return rows


def print_table(rows: dict, device: str, batch_size: int) -> None:
    base = rows["baseline"]["images_per_second"]
    print(
        f"\n{'implementation':28s} {'device':34s} {'batch':>5s} {'train img/s':>11s} "
        f"{'s/epoch':>8s} {'ratio':>6s}"
    )
    for name, row in rows.items():
        print(
            f"{name:28s} {device[:34]:34s} {batch_size:5d} {row['images_per_second']:11.1f} "
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
    rows = compare(device, batch_size, steps, args.rounds, warmup, root)
    print_table(rows, name, batch_size)

    record = {
        "device": name,
        "torch": torch.__version__,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m benchmarks.compare "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "batch_size": batch_size,
        "steps_per_round": steps,
        "rounds": args.rounds,
        "images_per_second": rows["capsnotes"]["images_per_second"],
        "baseline_images_per_second": rows["baseline"]["images_per_second"],
        "speedup_vs_baseline": rows["capsnotes"]["images_per_second"]
        / rows["baseline"]["images_per_second"],
        "rows": rows,
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
