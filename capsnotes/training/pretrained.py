"""The book's trained models, shipped inside the package: training the paper's model
takes hours on a CPU, so the chapters load the weights a ``python -m capsnotes train``
run produced once. Each model is two files in ``weights/``, written by
:func:`save_pretrained`: ``<name>.safetensors``, the weights in the checkpoint format as
float16 (half the download), and ``<name>.json``, the run's history (command,
configuration, epochs) with the SHA-256 and test accuracy of the stored weights.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data.files import file_sha256, write_json
from ..fast.precision import device_name
from .checkpoint import load_checkpoint, load_model_state, save_checkpoint
from .config import TrainConfig, build_model, load_run_data
from .evaluation import evaluate

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"

#: The shipped models: name → what it is.
PRETRAINED: dict[str, str] = {
    "mnist": "the paper's MNIST CapsNet (3 routing iterations, with the decoder)",
    "mnist-long": "the paper's MNIST CapsNet trained 50 epochs on the paper's schedule",
    "fashion-mnist": "the paper's CapsNet trained on Fashion-MNIST",
    "cnn-mnist": "the baseline CNN (the `cnn` profile) trained on MNIST",
    "multimnist": "a CapsNet reading two overlapping digits (MultiMNIST, the "
    "campaign's CPU scale)",
}


def pretrained_files(name: str, folder: str | Path | None = None) -> tuple[Path, Path]:
    """The weights file and the provenance record of the model ``name``: one of the
    shipped models (:data:`PRETRAINED`), or with ``folder`` any model stored there."""
    if not isinstance(name, str) or (folder is None and name not in PRETRAINED):
        raise ValueError(
            f"unknown pretrained model {name!r}; expected one of {sorted(PRETRAINED)}"
        )
    folder = WEIGHTS_DIR if folder is None else Path(folder)
    return folder / f"{name}.safetensors", folder / f"{name}.json"


def load_pretrained(
    name: str = "mnist",
    device: torch.device | str | None = None,
    *,
    folder: str | Path | None = None,
) -> tuple[nn.Module, dict[str, Any]]:
    """The shipped model ``name`` (from ``folder`` if given) in float32, evaluation mode
    and the reference implementations on ``device`` (default: the CPU), and its record
    (``history["epochs"][-1]["test_accuracy"]``: on all 10,000 test images). Raises
    ``FileNotFoundError`` for a missing file, ``ValueError`` for damaged, mismatched or
    unfitting files."""
    weights_path, record_path = pretrained_files(name, folder)
    for path in (weights_path, record_path):
        if not path.is_file():
            raise FileNotFoundError(
                f"the pretrained model {name!r} is incomplete: {path} is missing "
                "(reinstall capsnotes, or recreate it with tools/ship_pretrained.py)"
            )
    try:
        history = json.loads(record_path.read_text())
        expected_sha = history["shipped"]["sha256"]
        config = TrainConfig.from_dict(history["train_config"])
    except (KeyError, TypeError, ValueError) as error:  # ValueError: bad JSON, too
        raise ValueError(
            f"{record_path} is not a readable provenance record: {error}"
        ) from None
    if file_sha256(weights_path) != expected_sha:
        raise ValueError(
            f"{weights_path} does not match its record {record_path.name} (SHA-256 "
            "differs): the file is damaged or comes from another run"
        )
    checkpoint = load_checkpoint(weights_path)  # checks the format and tensor digest
    model = build_model(config)
    state = {key: value.float() for key, value in checkpoint.model_state.items()}
    source = f"{weights_path} (with its record {record_path.name})"
    load_model_state(model, state, source)
    return model.to("cpu" if device is None else device).eval(), history


def save_pretrained(
    run_dir: str | Path,
    name: str = "mnist",
    *,
    folder: str | Path | None = None,
    data_root: str | Path | None = None,
    tolerance: float = 0.001,
) -> dict[str, Any]:
    """Ship the finished run in ``run_dir`` as the pretrained model ``name`` and return
    its record: the weights as float16, loaded back by :func:`load_pretrained` and
    scored on the whole test set; refused, the shipped files left as they were, if that
    accuracy is more than ``tolerance`` from the run's. Both files appear or neither."""
    run_dir = Path(run_dir)
    checkpoint = load_checkpoint(run_dir / "checkpoint.safetensors")
    history = checkpoint.metadata["history"]
    config = TrainConfig.from_dict(history["train_config"])
    if len(history["epochs"]) != config.epochs:
        raise ValueError(
            f"{run_dir} has trained {len(history['epochs'])} of {config.epochs} "
            "epochs: finish the run first (the same train command resumes it)"
        )
    if config.test_size is not None:
        raise ValueError(
            f"{run_dir} was scored on a subset of the test set: ship a run tested on "
            "all of it"
        )
    weights_path, record_path = pretrained_files(name, folder)
    weights_path.parent.mkdir(parents=True, exist_ok=True)
    half = {
        key: value.half() if value.is_floating_point() else value
        for key, value in checkpoint.result_state.items()
    }
    with tempfile.TemporaryDirectory(
        dir=weights_path.parent, prefix=".staging-"
    ) as staging:
        staged_weights, staged_record = pretrained_files(name, Path(staging))
        save_checkpoint(
            staged_weights, half, {"name": name, "train_config": config.to_dict()}
        )
        record = dict(history)
        record["shipped"] = {
            "name": name,
            "dtype": "float16",
            "bytes": staged_weights.stat().st_size,
            "sha256": file_sha256(staged_weights),
        }
        write_json(staged_record, record)
        model, _ = load_pretrained(name, folder=staging)
        _, test_data = load_run_data(config, "cpu", data_root)
        scores = evaluate(model, test_data)
        trained = history["epochs"][-1]["test_accuracy"]
        if abs(scores["accuracy"] - trained) > tolerance:
            raise ValueError(
                f"the float16 weights score {scores['accuracy']:.4f} on the test set, "
                f"the run {trained:.4f}: more than {tolerance} apart, nothing was "
                "shipped"
            )
        record["shipped"].update(
            test_accuracy=scores["accuracy"],
            test_count=scores["count"],
            evaluated_on=device_name("cpu"),
            evaluated_with_torch=torch.__version__,
        )
        write_json(staged_record, record)
        os.replace(staged_weights, weights_path)
        os.replace(staged_record, record_path)
    return record
