"""The book's trained models, shipped inside the package.

Training the paper's model takes hours on a CPU, so the chapters load the weights that
``python -m capsnotes train ...`` produced once, stored in ``weights/`` beside this
module. Each model is two files, written by ``tools/ship_pretrained.py``:

* ``<name>.safetensors`` — the weights in the checkpoint format, stored as float16 to
  halve the download;
* ``<name>.json`` — the provenance record: the run's command, configuration and whole
  history, plus the SHA-256 of the weights file and the accuracy of the stored weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data.files import file_sha256
from .checkpoint import load_checkpoint, load_model_state
from .config import TrainConfig, build_model

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"

#: The shipped models: name → what it is.
PRETRAINED: dict[str, str] = {
    "mnist": "the paper's MNIST CapsNet (3 routing iterations, with the decoder)",
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
    """The shipped model ``name`` (:data:`PRETRAINED`; from ``folder`` if given), in
    float32 and evaluation mode on ``device`` (default: the CPU), with the reference
    implementations, and the provenance record of the run that made it, in which
    ``history["epochs"][-1]["test_accuracy"]`` is its final accuracy on all 10,000 test
    images. Raises ``FileNotFoundError`` for a missing file and ``ValueError`` for files
    that are damaged, do not belong together or do not fit their model."""
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
    # checks the format and the tensor digest
    checkpoint = load_checkpoint(weights_path)
    model = build_model(config)
    state = {key: value.float() for key, value in checkpoint.model_state.items()}
    source = f"{weights_path} (with its record {record_path.name})"
    load_model_state(model, state, source)
    return model.to("cpu" if device is None else device).eval(), history
