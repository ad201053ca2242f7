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

import argparse
import shlex
import sys

import torch

from capsbook.analysis import confusion_matrix
from capsnotes.data.files import write_json
from capsnotes.fast.precision import device_name
from capsnotes.training.config import TrainConfig, load_run_data
from capsnotes.training.evaluation import evaluate
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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a folder written by python -m capsnotes train")
    parser.add_argument("--name", default="mnist", choices=sorted(PRETRAINED))
    parser.add_argument("--data-root", help="data folder (default: $CAPSNOTES_DATA)")
    parser.add_argument("--record", metavar="FILE", help="also write the summary record here")
    args = parser.parse_args(argv)
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
