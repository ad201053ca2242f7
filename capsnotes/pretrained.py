"""The book's trained models, shipped inside the package.

Training the paper's model takes hours on a CPU, so the chapters do not: they load the
weights that ``python -m capsnotes train ...`` produced once, stored in
``capsnotes/weights/`` and installed with the package. Each model is two files:

* ``<name>.safetensors`` — the weights, in the checkpoint format of
  :mod:`capsnotes.checkpoint` (verified by the SHA-256 of its tensors when read), stored
  as float16 to halve the download; :func:`load_pretrained` returns them as float32.
* ``<name>.json`` — the provenance record: the exact command, profile and overrides,
  seed, device, torch version, wall time and the whole per-epoch history of the run,
  plus the SHA-256 of the weights file it belongs to and the accuracy of the stored
  weights measured after loading.

``tools/ship_pretrained.py`` writes both from a finished training run.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .checkpoint import load_checkpoint, load_model_state, save_checkpoint
from .config import TrainConfig
from .data import load_dataset
from .devices import device_name
from .evaluation import evaluate
from .files import file_sha256, write_json
from .run import build_model

__all__ = [
    "PRETRAINED",
    "WEIGHTS_DIR",
    "load_pretrained",
    "pretrained_files",
    "save_pretrained",
]

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"

#: The shipped models: name → what it is.
PRETRAINED: dict[str, str] = {
    "mnist": "the paper's MNIST CapsNet (3 routing iterations, with the decoder)",
    "fashion-mnist": "the paper's CapsNet trained on Fashion-MNIST",
    "cnn-mnist": "the baseline CNN (the `cnn` profile) trained on MNIST",
    "multimnist": "a CapsNet reading two overlapping digits (MultiMNIST, the campaign's CPU scale)",
}


def pretrained_files(name: str, folder: Path | None = None) -> tuple[Path, Path]:
    """The weights file and the provenance record of the model ``name``: one of the
    shipped models (:data:`PRETRAINED`), or with ``folder`` any model stored there."""
    if not isinstance(name, str) or (folder is None and name not in PRETRAINED):
        raise ValueError(f"unknown pretrained model {name!r}; expected one of {sorted(PRETRAINED)}")
    folder = WEIGHTS_DIR if folder is None else Path(folder)
    return folder / f"{name}.safetensors", folder / f"{name}.json"


def load_pretrained(
    name: str = "mnist",
    device: torch.device | str | None = None,
    *,
    folder: str | Path | None = None,
) -> tuple[nn.Module, dict[str, Any]]:
    """The shipped trained model ``name`` and the history of the run that made it.

    Args:
        name: one of :data:`PRETRAINED`.
        device: where to put the model (default: the CPU).
        folder: where the files are (default: ``capsnotes/weights``).

    Returns:
        ``(model, history)``: the model (a plain :class:`~capsnotes.CapsNet` with the
        reference implementations, a :class:`~capsnotes.multimnist.PairedCapsNet`, or a
        :class:`~capsnotes.convnet.ConvNet`) in float32
        and evaluation mode, and the provenance record, in which
        ``history["epochs"][-1]["test_accuracy"]`` is the run's final accuracy (a fraction)
        on all 10,000 test images and ``history["shipped"]`` describes the stored weights.

    Raises:
        ValueError: unknown ``name``, or the files are damaged, do not belong together, or
            do not fit the model they describe.
        FileNotFoundError: a file is missing; the message names it.
    """
    weights_path, record_path = pretrained_files(name, None if folder is None else Path(folder))
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
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{record_path} is not a readable provenance record: {error}") from None
    if file_sha256(weights_path) != expected_sha:
        raise ValueError(
            f"{weights_path} does not match its record {record_path.name} (SHA-256 differs): "
            "the file is damaged or comes from another run"
        )
    checkpoint = load_checkpoint(weights_path)  # checks the format and the tensor digest
    model = build_model(config)
    state = {key: value.float() for key, value in checkpoint.model_state.items()}
    load_model_state(model, state, f"{weights_path} (with its record {record_path.name})")
    return model.to("cpu" if device is None else device).eval(), history


def save_pretrained(
    run_dir: str | Path,
    name: str = "mnist",
    *,
    folder: str | Path | None = None,
    data_root: str | Path | None = None,
    tolerance: float = 0.001,
    score: Callable[[nn.Module], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Ship the finished training run in ``run_dir`` as the pretrained model ``name``.

    Stores the weights as float16 beside the run's history, loads them back through
    :func:`load_pretrained`, scores them on the whole test set, and refuses (leaving the
    shipped files as they were) if that accuracy differs from the run's final test
    accuracy by more than ``tolerance``. Both files appear together or not at all.

    ``score(model)`` replaces the scoring for models that :func:`~capsnotes.evaluate`
    does not score (MultiMNIST's); it returns ``accuracy`` and ``count`` as ``evaluate``
    does.

    Returns the provenance record that was written.
    """
    run_dir = Path(run_dir)
    checkpoint = load_checkpoint(run_dir / "checkpoint.safetensors")
    history = checkpoint.metadata["history"]
    config = TrainConfig.from_dict(history["train_config"])
    if len(history["epochs"]) != config.epochs:
        raise ValueError(
            f"{run_dir} has trained {len(history['epochs'])} of {config.epochs} epochs: "
            "finish the run first (the same train command resumes it)"
        )
    if config.test_size is not None:
        raise ValueError(
            f"{run_dir} was scored on a subset of the test set: ship a run tested on all of it"
        )
    weights_path, record_path = pretrained_files(name, None if folder is None else Path(folder))
    weights_path.parent.mkdir(parents=True, exist_ok=True)
    half = {
        key: value.half() if value.is_floating_point() else value
        for key, value in checkpoint.result_state.items()
    }
    with tempfile.TemporaryDirectory(dir=weights_path.parent, prefix=".staging-") as staging:
        staged_weights, staged_record = pretrained_files(name, Path(staging))
        save_checkpoint(staged_weights, half, {"name": name, "train_config": config.to_dict()})
        record = dict(history)
        record["shipped"] = {
            "name": name,
            "dtype": "float16",
            "bytes": staged_weights.stat().st_size,
            "sha256": file_sha256(staged_weights),
        }
        write_json(staged_record, record)
        model, _ = load_pretrained(name, folder=staging)
        if score is None:
            test_set = load_dataset(config.dataset, train=False, root=data_root)
            scores = evaluate(model, test_set, config)
        else:
            scores = score(model)
        trained = history["epochs"][-1]["test_accuracy"]
        if abs(scores["accuracy"] - trained) > tolerance:
            raise ValueError(
                f"the float16 weights score {scores['accuracy']:.4f} on the test set, the "
                f"run {trained:.4f}: more than {tolerance} apart, nothing was shipped"
            )
        record["shipped"].update(
            test_accuracy=scores["accuracy"],
            test_count=scores["count"],
            evaluated_on=device_name(torch.device("cpu")),
            evaluated_with_torch=torch.__version__,
        )
        write_json(staged_record, record)
        os.replace(staged_weights, weights_path)
        os.replace(staged_record, record_path)
    return record
