"""Ship a finished training run as a pretrained model of the package.

    python tools/ship_pretrained.py runs/mnist-paper-cpu                # as "mnist"
    python tools/ship_pretrained.py RUN_DIR --name fashion-mnist \\
        --record book/results/fashion_mnist.json

Writes capsnotes/training/weights/<name>.safetensors (float16) and <name>.json (the run's
provenance and history), after checking that the stored weights score within 0.1 point
of the run's final test accuracy on the whole test set. See capsnotes/training/pretrained.py.

With --record, also writes a summary that the book's chapters read: the shipped model's
test accuracy (evaluated after loading it), its confusion matrix, the run's epochs,
device, wall time and command, and this command.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import torch
import tyro

from capsbook.analysis import confusion_matrix
from capsnotes.data.files import write_json
from capsnotes.fast.precision import device_name
from capsnotes.training.config import TrainConfig, load_run_data
from capsnotes.training.evaluation import evaluate
from capsnotes.training.options import DataRoot
from capsnotes.training.pretrained import (
    PRETRAINED,
    load_pretrained,
    pretrained_files,
    save_pretrained,
)


def summary(name: str, data_root: str | None, command: str) -> dict:
    """What the chapters need to know about the shipped model ``name``, measured now."""
    model, history = load_pretrained(name)
    config = TrainConfig.from_dict(history["train_config"])
    _, test_set = load_run_data(config, "cpu", data_root)
    scores = evaluate(model, test_set, return_outputs=True)
    confusion = confusion_matrix(scores["predictions"], test_set.labels, len(test_set.classes))
    return {
        "name": name,
        "dataset": config.dataset,
        "architecture": config.architecture,
        "parameters": sum(p.numel() for p in model.parameters()),
        "test_accuracy": scores["accuracy"],
        "test_count": scores["count"],
        "trained_test_accuracy": history["epochs"][-1]["test_accuracy"],
        "epochs": len(history["epochs"]),
        "device": history["device"],
        "wall_seconds": history["wall_seconds"],
        "command": history["provenance"].get("command"),
        "train_config": history["train_config"],
        "classes": list(test_set.classes),
        "confusion": confusion.tolist(),
        "evaluated_on": device_name(torch.device("cpu")),
        "evaluated_with_torch": torch.__version__,
        "record_command": command,
    }


@dataclass(frozen=True)
class Options:
    """Ship a finished training run as a pretrained model of the package."""

    run_dir: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """a folder written by python -m capsnotes train"""
    name: Literal[tuple(sorted(PRETRAINED))] = "mnist"  # type: ignore[valid-type]
    """the pretrained model's name"""
    data_root: DataRoot = None
    record: Annotated[Path | None, tyro.conf.arg(metavar="FILE")] = None
    """also write the summary record here"""


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = tyro.cli(Options, args=argv, prog="python tools/ship_pretrained.py")
    try:
        record = save_pretrained(args.run_dir, args.name, data_root=args.data_root)
        if args.record:
            command = "python tools/ship_pretrained.py " + shlex.join(argv)
            write_json(args.record, summary(args.name, args.data_root, command))
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    weights, provenance = pretrained_files(args.name)
    shipped = record["shipped"]
    print(
        f"{weights} ({shipped['bytes'] / 1e6:.1f} MB, {shipped['dtype']}) and {provenance.name}: "
        f"test accuracy {shipped['test_accuracy']:.4f} after loading, "
        f"{record['epochs'][-1]['test_accuracy']:.4f} in training"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
