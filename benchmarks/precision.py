"""Does bf16 autocast cost accuracy on a CPU? The same runs in float32 and in bf16.

    python -m benchmarks.precision --runs ~/capsnotes-runs/precision --record NAME

For each seed, the ``quick`` profile and one epoch of the ``paper`` profile train twice
with the trainer (:func:`capsnotes.training.train.train`): once with ``mixed_precision`` off
(float32 throughout) and once with it on, where the trainer times float32 and bf16
autocast on the real batch and, on a CPU with bf16 units, picks bf16 (the record says
what it picked). Same seed, same initial weights, same batches: what differs is the
precision of the forward pass, and with it the convolution the trainer's timing chose for
each (the record names both). The record (``benchmarks/results/NAME.json``) keeps
per run the test accuracy, the losses of every step, the seconds and the chosen
implementation, so that the difference between precisions can be set against the spread
between seeds. Runs live in ``--runs`` and resume there.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from benchmarks.record import RESULTS, command_line, header
from capsnotes.data.files import write_json
from capsnotes.training.config import profile
from capsnotes.training.options import DataRoot
from capsnotes.training.train import train

#: name → (profile, overrides) of the runs compared
PROTOCOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "quick": ("quick", {}),
    "paper, 1 epoch": ("paper", {"epochs": 1}),
}


def run_record(history: dict[str, Any]) -> dict[str, Any]:
    """What the comparison keeps of one finished run."""
    details = history["session_details"][-1]
    epochs = history["epochs"]
    return {
        "test_accuracy": history["test_accuracy"],
        "test_count": history["train_config"]["test_size"],
        "precision": details["precision"],
        "convolution": details.get("convolution"),
        "wall_seconds": history["wall_seconds"],
        "train_seconds": sum(e["seconds"] for e in epochs),
        "images_per_second": statistics.mean(e["images_per_second"] for e in epochs),
        "step_margin_loss": [x for e in epochs for x in e["step_margin_loss"]],
        "step_reconstruction_loss": [x for e in epochs for x in e["step_reconstruction_loss"]],
        "test_margin_loss": [e["test_margin_loss"] for e in epochs],
        "test_accuracy_per_epoch": [e["test_accuracy"] for e in epochs],
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    accuracies = [r["test_accuracy"] for r in runs]
    return {
        "mean": statistics.mean(accuracies),
        "std": statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0,
        "min": min(accuracies),
        "max": max(accuracies),
    }


@dataclass(frozen=True)
class Options:
    """Does bf16 autocast cost accuracy on a CPU? The same runs in float32 and in bf16."""

    runs: Path
    """folder of the training runs (they resume there)"""
    record: Annotated[str, tyro.conf.arg(metavar="NAME")]
    """write benchmarks/results/NAME.json"""
    seeds: tuple[int, ...] = (0, 1, 2)
    """the seeds each protocol trains with"""
    protocols: tuple[Literal[tuple(PROTOCOLS)], ...] = tuple(PROTOCOLS)  # type: ignore[valid-type]
    """the runs compared"""
    data_root: DataRoot = None


def main(argv: Sequence[str] | None = None) -> int:
    args = tyro.cli(Options, args=argv, prog="python -m benchmarks.precision")
    command = command_line("benchmarks.precision", argv)
    results: dict[str, Any] = {}
    for protocol in args.protocols:
        name, overrides = PROTOCOLS[protocol]
        runs: dict[str, list[dict[str, Any]]] = {"float32": [], "bf16 autocast (if chosen)": []}
        for seed in args.seeds:
            for label, mixed in (("float32", False), ("bf16 autocast (if chosen)", True)):
                config = profile(name, seed=seed, mixed_precision=mixed, **overrides)
                folder = args.runs / f"{name}-{config.key()}"
                history = train(
                    config,
                    folder,
                    device="cpu",
                    data_root=args.data_root,
                    progress=False,
                    provenance={"command": command},
                ).history
                record = run_record(history) | {"seed": seed, "folder": folder.name}
                runs[label].append(record)
                print(
                    f"{protocol}, seed {seed}, {record['precision']}: "
                    f"{record['test_accuracy']:.4f} in {record['wall_seconds']:.0f} s",
                    flush=True,
                )
        pairs = zip(runs["float32"], runs["bf16 autocast (if chosen)"], strict=True)
        differences = [b["test_accuracy"] - a["test_accuracy"] for a, b in pairs]
        results[protocol] = {
            "profile": name,
            "overrides": overrides,
            "runs": runs,
            "summary": {label: summary(r) for label, r in runs.items()},
            "paired_difference": {
                "per_seed": differences,
                "mean": statistics.mean(differences),
                "std": statistics.stdev(differences) if len(differences) > 1 else 0.0,
            },
        }
    record = header(command, "cpu") | {"seeds": list(args.seeds), "protocols": results}
    path = RESULTS / f"{args.record}.json"
    write_json(path, record)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
