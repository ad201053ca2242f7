"""What the popular loss mistakes change in a trained network: the paper's objective
against the unsquared margin loss and the mean-reduced reconstruction loss.

    python -m benchmarks.variants --record book/results/loss_variants.json

For each seed, the three objectives train the same narrow CapsNet (the CPU scale of
``benchmarks/campaign.py``: 64 first-layer channels, 8 primary capsule types) from the
same initial weights on the same batches — only the objective differs
(:func:`capsnotes.capsnet_loss` with one term replaced from :mod:`capsnotes.experiments.mistakes`) —
and each is tested on all 10,000 test digits: the error, the lengths of the true class's
capsule and of the others, and how well the decoder redraws each test digit from its
true class's capsule (the summed squared pixel error). The loop is the plain one of the
training chapter: batches, :func:`capsnotes.training.step.training_step`, a test after training.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import torch
import tyro

from benchmarks.record import command_line, header
from capsnotes import CapsNet, CapsNetConfig, capsnet_loss
from capsnotes.data import load_dataset
from capsnotes.data.files import write_json
from capsnotes.experiments.mistakes import mean_reconstruction_loss, unsquared_margin_loss
from capsnotes.training.options import DataRoot
from capsnotes.training.step import training_step

#: name → the objective's replaced term (none: the paper's)
VARIANTS: dict[str, dict[str, Any]] = {
    "paper": {},
    "unsquared margin loss": {"margin": unsquared_margin_loss},
    "mean reconstruction loss": {"reconstruction": mean_reconstruction_loss},
}
MODEL = CapsNetConfig(conv_channels=64, primary_channels=8)


@torch.no_grad()
def test_scores(model: CapsNet, test_set: Any) -> dict[str, float]:
    """Error, median capsule lengths of the true class and of the others, and the mean
    summed squared error of the reconstruction from the true class's capsule."""
    model.eval()
    wrong, present, absent, errors = 0, [], [], []
    for images, labels in test_set.batches(500):
        output = model(images, labels)  # the decoder sees the true class's capsule
        wrong += (output.predictions != labels).sum().item()
        truth = torch.nn.functional.one_hot(labels, 10).bool()
        present.append(output.lengths[truth])
        absent.append(output.lengths[~truth])
        errors.append((output.reconstructions - images).pow(2).flatten(1).sum(1))
    return {
        "test_error": wrong / len(test_set),
        "median_length_present": torch.cat(present).median().item(),
        "median_length_absent": torch.cat(absent).median().item(),
        "reconstruction_sse": torch.cat(errors).mean().item(),
    }


def train_variant(
    objective_terms: dict[str, Any], seed: int, data: Any, epochs: int, batch_size: int
) -> CapsNet:
    torch.manual_seed(seed)
    model = CapsNet(MODEL)  # the same initial weights for every variant of a seed
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    schedule = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
    objective = functools.partial(capsnet_loss, **objective_terms)
    for epoch in range(1, epochs + 1):
        generator = torch.Generator().manual_seed(1000 * seed + epoch)  # the same batches
        for batch in data.batches(batch_size, shuffle=True, max_shift=2, generator=generator):
            training_step(model, optimizer, objective, batch)
        schedule.step()
    return model


@dataclasses.dataclass(frozen=True)
class Options:
    """What the popular loss mistakes change in a trained network."""

    record: Annotated[Path, tyro.conf.arg(metavar="FILE")]
    """the JSON record to write"""
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """the seeds each objective trains with"""
    train_size: int = 20_000
    """training digits (a random subset per seed)"""
    epochs: int = 3
    """passes over the training digits"""
    batch_size: int = 128
    """training images per step"""
    data_root: DataRoot = None


def main(argv: Sequence[str] | None = None) -> int:
    args = tyro.cli(Options, args=argv, prog="python -m benchmarks.variants")
    train_set = load_dataset("mnist", True, args.data_root)
    test_set = load_dataset("mnist", False, args.data_root)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    started = time.perf_counter()
    for seed in args.seeds:
        data = train_set.subset(args.train_size, seed=seed)
        for name, terms in VARIANTS.items():
            run_started = time.perf_counter()
            model = train_variant(terms, seed, data, args.epochs, args.batch_size)
            scores = test_scores(model, test_set)
            scores |= {"seed": seed, "seconds": time.perf_counter() - run_started}
            runs[name].append(scores)
            print(f"seed {seed}, {name}: {scores}", flush=True)
    summary = {
        name: {
            key: {
                "mean": statistics.fmean(r[key] for r in values),
                "std": statistics.stdev(r[key] for r in values) if len(values) > 1 else 0.0,
            }
            for key in (
                "test_error",
                "median_length_present",
                "median_length_absent",
                "reconstruction_sse",
            )
        }
        for name, values in runs.items()
    }
    record = header(command_line("benchmarks.variants", argv), "cpu") | {
        "model": dataclasses.asdict(MODEL),
        "protocol": {
            "train_size": args.train_size,
            "epochs": args.epochs,
            "batch_size": args.batch_size,
            "max_shift": 2,
            "optimizer": "Adam, learning rate 1e-3, x0.9 per epoch",
            "precision": "float32",
            "test_count": len(test_set),
        },
        "seconds": time.perf_counter() - started,
        "runs": runs,
        "summary": summary,
    }
    write_json(args.record, record)
    print(f"wrote {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
