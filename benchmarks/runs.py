"""Add finished training runs to a benchmark record.

    python -m benchmarks.runs --record h100-paper runs/seed0 runs/seed1 runs/seed2

Each argument is a folder written by ``python -m capsnotes train``. The record
(``benchmarks/results/NAME.json``, written by ``benchmarks.compare`` on the same device)
gains ``training_runs`` (per run: seed, command, final test accuracy, wall time, epochs)
and the summary the speed chapters read: ``test_accuracy`` (the mean over the
runs), ``test_accuracy_min``/``_max``/``_std`` and ``wall_seconds`` (the slowest run).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

from benchmarks.record import RESULTS


def run_summary(folder: Path) -> dict:
    """The facts of one finished run, read from its ``history.json``."""
    path = folder / "history.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is {folder} a training run's folder?")
    history = json.loads(path.read_text())
    config = history["train_config"]
    if len(history["epochs"]) != config["epochs"]:
        raise ValueError(
            f"{folder} is unfinished: {len(history['epochs'])} of {config['epochs']} epochs"
        )
    return {
        "folder": folder.name,
        "seed": config["seed"],
        "command": history.get("provenance", {}).get("command"),
        "device": history["device"],
        "torch": history["torch"],
        "test_accuracy": history["test_accuracy"],
        "best_test_accuracy": max(e["test_accuracy"] for e in history["epochs"]),
        "wall_seconds": history["wall_seconds"],
        "epochs": config["epochs"],
        "batch_size": config["batch_size"],
        "lr_decay": config["lr_decay"],
        "train_seconds": sum(e["seconds"] for e in history["epochs"]),
        "eval_seconds": sum(e["eval_seconds"] for e in history["epochs"]),
        "test_accuracy_per_epoch": [e["test_accuracy"] for e in history["epochs"]],
    }


def attach_runs(record_path: Path, folders: list[Path]) -> dict:
    """Write the runs into the record at ``record_path`` and return the record."""
    if not folders:
        raise ValueError("no training runs given: name at least one run's folder")
    record = json.loads(record_path.read_text())
    runs = [run_summary(folder) for folder in folders]
    for run in runs:
        if run["device"] != record["device"]:
            raise ValueError(
                f"run {run['folder']} ran on {run['device']!r}, the record on {record['device']!r}"
            )
    accuracies = [run["test_accuracy"] for run in runs]
    record.update(
        training_runs=runs,
        profile="paper",
        test_accuracy=statistics.fmean(accuracies),
        test_accuracy_min=min(accuracies),
        test_accuracy_max=max(accuracies),
        test_accuracy_std=statistics.stdev(accuracies) if len(runs) > 1 else 0.0,
        wall_seconds=max(run["wall_seconds"] for run in runs),
    )
    record_path.write_text(json.dumps(record, indent=1) + "\n")
    return record


@dataclass(frozen=True)
class Options:
    """Add finished training runs to a benchmark record."""

    record: Annotated[str, tyro.conf.arg(metavar="NAME")]
    """benchmarks/results/NAME.json's NAME"""
    runs: Annotated[tuple[Path, ...], tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """training-run folders"""


def main(argv: Sequence[str] | None = None) -> int:
    args = tyro.cli(Options, args=argv, prog="python -m benchmarks.runs")
    try:
        record = attach_runs(RESULTS / f"{args.record}.json", args.runs)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for run in record["training_runs"]:
        print(
            f"seed {run['seed']}: {run['test_accuracy']:.2%} after {run['epochs']} epochs, "
            f"{run['wall_seconds']:.1f} s"
        )
    print(
        f"mean {record['test_accuracy']:.4%} (min {record['test_accuracy_min']:.2%}, max "
        f"{record['test_accuracy_max']:.2%}, std {record['test_accuracy_std']:.4%}); "
        f"slowest run {record['wall_seconds']:.1f} s on {record['device']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
