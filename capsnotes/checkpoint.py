"""Checkpoints as safetensors files, written atomically and verified when read.

One file holds the model's tensors (``model.<name>``), the optimizer's per-parameter
state (``optimizer.<index>.<name>``) and, in the safetensors metadata, everything else
as JSON: the configuration, the epoch, the history so far, the optimizer's and the
scheduler's plain-number state, and a SHA-256 of the tensor data.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as safetensors_load
from safetensors.torch import save as safetensors_save
from torch import Tensor

from .files import atomic_write_bytes

__all__ = [
    "CHECKPOINT_FORMAT",
    "Checkpoint",
    "load_checkpoint",
    "load_model_state",
    "save_checkpoint",
]

CHECKPOINT_FORMAT = "capsnotes-checkpoint-1"


@dataclass
class Checkpoint:
    """What :func:`load_checkpoint` returns; all tensors are on the CPU."""

    model_state: dict[str, Tensor]
    metadata: dict[str, Any]
    optimizer_state: dict[str, Any] | None = None
    scheduler_state: dict[str, Any] | None = None
    path: Path | None = field(default=None, repr=False)
    #: the moving average of the weights, when the run kept one (``average.<name>``)
    average_state: dict[str, Tensor] | None = None

    @property
    def result_state(self) -> dict[str, Tensor]:
        """The weights that are the run's result: the moving average if the run kept
        one, else the trained weights themselves."""
        return self.average_state if self.average_state is not None else self.model_state


def _digest(tensors: dict[str, Tensor]) -> str:
    sha = hashlib.sha256()
    for name in sorted(tensors):
        sha.update(name.encode())
        sha.update(tensors[name].contiguous().reshape(-1).view(torch.uint8).numpy())
    return sha.hexdigest()


def save_checkpoint(
    path: str | os.PathLike[str],
    model_state: dict[str, Tensor],
    metadata: dict[str, Any],
    optimizer_state: dict[str, Any] | None = None,
    scheduler_state: dict[str, Any] | None = None,
    average_state: dict[str, Tensor] | None = None,
) -> Path:
    """Write a checkpoint atomically. ``metadata`` must be JSON-serialisable."""
    tensors: dict[str, Tensor] = {
        f"model.{name}": value.detach().to("cpu").contiguous()
        for name, value in model_state.items()
    }
    for name, value in (average_state or {}).items():
        tensors[f"average.{name}"] = value.detach().to("cpu").contiguous()
    optimizer_meta = None
    if optimizer_state is not None:
        per_param: dict[str, dict[str, Any]] = {}
        for index, state in optimizer_state["state"].items():
            plain: dict[str, Any] = {}
            for name, value in state.items():
                if torch.is_tensor(value):
                    tensors[f"optimizer.{index}.{name}"] = value.detach().to("cpu").contiguous()
                else:
                    plain[name] = value
            per_param[str(index)] = plain
        optimizer_meta = {"param_groups": optimizer_state["param_groups"], "plain": per_param}
    header = {
        "format": CHECKPOINT_FORMAT,
        "metadata": json.dumps(metadata),
        "optimizer": json.dumps(optimizer_meta),
        "scheduler": json.dumps(scheduler_state),
        "sha256": _digest(tensors),
    }
    path = Path(path)
    atomic_write_bytes(path, safetensors_save(tensors, metadata=header))
    return path


def load_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """Read and verify a checkpoint written by :func:`save_checkpoint`.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is not a capsnotes checkpoint, or its contents were damaged.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "checkpoint.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    data = path.read_bytes()
    expected = f"expected a capsnotes safetensors checkpoint ({CHECKPOINT_FORMAT})"
    try:
        tensors = safetensors_load(data)
        header = _read_header(data)
    except (SafetensorError, ValueError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not readable: {expected}; {error}") from None
    if header.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: {expected}, found format {header.get('format')!r}")
    if _digest(tensors) != header.get("sha256"):
        raise ValueError(f"{path} is corrupted: its tensor data does not match its SHA-256")
    try:
        metadata = json.loads(header["metadata"])
        optimizer_meta = json.loads(header["optimizer"])
        scheduler_state = json.loads(header["scheduler"])
    except (KeyError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: {expected}; bad metadata: {error}") from None
    model_state = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
    average_state = {
        k[len("average.") :]: v for k, v in tensors.items() if k.startswith("average.")
    }
    optimizer_state = None
    if optimizer_meta is not None:
        state: dict[int, dict[str, Any]] = {}
        for index, plain in optimizer_meta["plain"].items():
            state[int(index)] = dict(plain)
        for key, value in tensors.items():
            if key.startswith("optimizer."):
                _, index, name = key.split(".", 2)
                state.setdefault(int(index), {})[name] = value
        optimizer_state = {"state": state, "param_groups": optimizer_meta["param_groups"]}
    return Checkpoint(
        model_state, metadata, optimizer_state, scheduler_state, path, average_state or None
    )


def load_model_state(model: torch.nn.Module, state: dict[str, Tensor], source: object) -> None:
    """``model.load_state_dict(state)``, raising a ``ValueError`` that names ``source``
    (the file the state came from) when the tensors do not fit the model."""
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        detail = " ".join(str(error).split())
        raise ValueError(
            f"{source} does not fit a {type(model).__name__} built from its configuration: {detail}"
        ) from None


def _read_header(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors byte string."""
    if len(data) < 8:
        raise ValueError("file too short")
    size = int.from_bytes(data[:8], "little")
    if size > len(data) - 8:
        raise ValueError("header runs past the end of the file")
    header = json.loads(data[8 : 8 + size].decode("utf-8"))
    return header.get("__metadata__") or {}
