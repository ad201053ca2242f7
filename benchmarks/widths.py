"""How fast does the trainer train narrower CapsNets on this machine? The measurement
that chose the campaign's CPU scale (``benchmarks/campaign.py``).

    python -m benchmarks.widths --record cpu-amd-zen5-2core-widths

For each candidate — the first convolution's channels and the primary capsule types, on
28×28 MNIST digits (r = 1 and r = 3) and on the 36×36 MultiMNIST canvas, and the CPU
baseline CNN — the run the trainer would build (:func:`capsnotes.training.train.build_run`, its
implementation and precision chosen by timing) trains a few batches of 128 real images,
after warm-up; the median of the rounds gives images per second, and the FLOP count of
the model (``FlopCounterMode``, :func:`capsbook.analysis.training_flops`) the arithmetic
per image.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import torch
import tyro

from benchmarks.breakdown import flops_per_image
from benchmarks.record import RESULTS, command_line, header
from capsnotes.data import load_dataset
from capsnotes.data.files import write_json
from capsnotes.fast.plan import plan_for
from capsnotes.training.config import build_model, profile
from capsnotes.training.options import DataRoot
from capsnotes.training.train import build_run

#: name → (profile, model fields)
CANDIDATES = {
    "capsnet 256/32 (the paper's), 28x28, r=3": ("paper", {}),
    "capsnet 128/16, 28x28, r=3": ("paper", {"conv_channels": 128, "primary_channels": 16}),
    "capsnet 128/16, 28x28, r=1": (
        "paper",
        {"conv_channels": 128, "primary_channels": 16, "routing_iterations": 1},
    ),
    "capsnet 64/8, 28x28, r=3": ("paper", {"conv_channels": 64, "primary_channels": 8}),
    "capsnet 64/8, 28x28, r=1": (
        "paper",
        {"conv_channels": 64, "primary_channels": 8, "routing_iterations": 1},
    ),
    "capsnet 256/32, 36x36, r=3": ("paper", {"image_size": 36}),
    "capsnet 128/16, 36x36, r=3": (
        "paper",
        {"image_size": 36, "conv_channels": 128, "primary_channels": 16},
    ),
    "capsnet 64/8, 36x36, r=3": (
        "paper",
        {"image_size": 36, "conv_channels": 64, "primary_channels": 8},
    ),
    "cnn (the cnn profile, 1.25M parameters)": ("cnn", {}),
    # the campaign's affine40 stage: the paper's CapsNet and CNN on the 40x40 canvas
    "capsnet 256/32, 40x40, r=3": ("paper", {"image_size": 40}),
    "cnn (the paper-cnn profile), 40x40": ("paper-cnn", {"image_size": 40}),
}


def images_per_second(name: str, model: dict, data, steps: int, rounds: int) -> dict:
    config = profile(name, batch_size=128, model=model)
    canvas = config.model.image_size
    images = data.padded(canvas) if canvas != 28 else data
    generator = torch.Generator().manual_seed(0)
    stream = images.batches(128, shuffle=True, max_shift=2, generator=generator)
    run = build_run(
        config,
        "cpu",
        plan_for(
            config, "cpu", sample=lambda: next(stream), make_model=lambda: build_model(config)
        ),
    )
    for _ in range(2):
        run.step(next(stream))
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(steps):
            run.step(next(stream))
        times.append((time.perf_counter() - started) / steps)
    per_step = statistics.median(times)
    result = {
        "images_per_second": 128 / per_step,
        "parameters": sum(p.numel() for p in run.model.parameters()),
        "implementation": {k: v for k, v in run.details.items() if k != "step_seconds"},
    }
    result["training_gflop_per_image"] = flops_per_image(config) / 1e9
    return result


@dataclass(frozen=True)
class Options:
    """How fast does the trainer train narrower CapsNets on this machine?"""

    record: Annotated[str, tyro.conf.arg(metavar="NAME")]
    """write benchmarks/results/NAME.json"""
    steps: int = 4
    """timed steps per round"""
    rounds: int = 3
    """rounds per candidate (the median counts)"""
    data_root: DataRoot = None
    only: Annotated[tuple[str, ...], tyro.conf.arg(metavar="TEXT")] = ()
    """the candidates whose name holds any TEXT (none: every candidate)"""


def main(argv: Sequence[str] | None = None) -> int:
    args = tyro.cli(Options, args=argv, prog="python -m benchmarks.widths")
    chosen = {
        label: candidate
        for label, candidate in CANDIDATES.items()
        if not args.only or any(text in label for text in args.only)
    }
    if not chosen:
        only = " ".join(args.only)
        print(f"error: --only {only} matches none of: {', '.join(CANDIDATES)}", file=sys.stderr)
        return 2
    data = load_dataset("mnist", True, args.data_root).subset(4096, seed=0)
    rows = {}
    for label, (name, model) in chosen.items():
        rows[label] = images_per_second(name, model, data, args.steps, args.rounds)
        print(f"{label:45s} {rows[label]['images_per_second']:8.0f} img/s", flush=True)
    command = command_line("benchmarks.widths", argv)
    record = header(command, "cpu") | {"batch_size": 128, "rows": rows}
    write_json(RESULTS / f"{args.record}.json", record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
