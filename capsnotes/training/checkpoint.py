"""Checkpoints as safetensors files, written atomically: the model's tensors
(``model.<name>``), the moving average's (``average.<name>``), Adam's per-parameter
state (``optimizer.<index>.<name>``), and, as JSON in the file's metadata, everything
else: the configuration, the history so far, the plain numbers of the optimizer, the
scheduler and float16's loss scaler, and a SHA-256 of the tensors, checked when the file
is read."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as safetensors_load
from safetensors.torch import save as safetensors_save
from torch import Tensor, nn

from ..data.files import atomic_write_bytes

FORMAT = "capsnotes-checkpoint-1"


def _digest(tensors: dict[str, Tensor]) -> str:
    sha = hashlib.sha256()
    for name in sorted(tensors):
        sha.update(name.encode())
        sha.update(tensors[name].contiguous().reshape(-1).view(torch.uint8).numpy())
    return sha.hexdigest()


@dataclass
class Checkpoint:
    """What :func:`load_checkpoint` returns; all tensors are on the CPU."""

    path: Path
    metadata: dict[str, Any]
    model_state: dict[str, Tensor]
    average_state: dict[str, Tensor] | None = None
    optimizer_state: dict[str, Any] | None = None
    scheduler_state: dict[str, Any] | None = None
    #: ``torch.amp.GradScaler.state_dict()`` of a float16 run (None: no scaler)
    scaler_state: dict[str, Any] | None = None

    @property
    def result_state(self) -> dict[str, Tensor]:
        """The run's result: the moving average of the weights where it kept one."""
        return self.average_state or self.model_state


def save_checkpoint(
    path: str | os.PathLike[str],
    model_state: dict[str, Tensor],
    metadata: dict[str, Any],
    optimizer_state: dict[str, Any] | None = None,
    scheduler_state: dict[str, Any] | None = None,
    average_state: dict[str, Tensor] | None = None,
    scaler_state: dict[str, Any] | None = None,
) -> Path:
    tensors = {f"model.{k}": v for k, v in model_state.items()}
    tensors |= {f"average.{k}": v for k, v in (average_state or {}).items()}
    optimizer = None
    if optimizer_state is not None:
        plain: dict[str, dict[str, Any]] = {}
        for index, state in optimizer_state["state"].items():
            for name, value in state.items():
                if hasattr(value, "shape"):
                    tensors[f"optimizer.{index}.{name}"] = value
                else:
                    plain.setdefault(str(index), {})[name] = value
        optimizer = {"param_groups": optimizer_state["param_groups"], "plain": plain}
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    header = {
        "format": FORMAT,
        "metadata": json.dumps(metadata),
        "optimizer": json.dumps(optimizer),
        "scheduler": json.dumps(scheduler_state),
        "scaler": json.dumps(scaler_state),
        "sha256": _digest(tensors),
    }
    atomic_write_bytes(path, safetensors_save(tensors, metadata=header))
    return Path(path)


def load_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint` (``path`` or its folder).
    Raises ``FileNotFoundError`` without a file, ``ValueError`` for any other file."""
    path = Path(path)
    path = path / "checkpoint.safetensors" if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    data = path.read_bytes()
    try:
        tensors = safetensors_load(data)
        size = int.from_bytes(data[:8], "little")  # the length of the JSON header
        header = json.loads(data[8 : 8 + size])["__metadata__"]
        if header.get("format") != FORMAT:
            raise ValueError(f"format {header.get('format')!r}")
        metadata, optimizer, scheduler = (
            json.loads(header[k]) for k in ("metadata", "optimizer", "scheduler")
        )
        scaler = json.loads(header.get("scaler", "null"))  # absent before float16 runs
    except (SafetensorError, ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"{path} is not readable: expected a capsnotes safetensors checkpoint "
            f"({FORMAT}); {error}"
        ) from None
    if _digest(tensors) != header.get("sha256"):
        raise ValueError(
            f"{path} is corrupted: its tensor data does not match its SHA-256"
        )
    parts: dict[str, dict[str, Any]] = {"model": {}, "average": {}, "optimizer": {}}
    for key, value in tensors.items():
        kind, name = key.split(".", 1)
        parts[kind][name] = value
    optimizer_state = None
    if optimizer is not None:
        state = {int(i): dict(v) for i, v in optimizer["plain"].items()}
        for key, value in parts["optimizer"].items():
            index, name = key.split(".", 1)
            state.setdefault(int(index), {})[name] = value
        state = dict(sorted(state.items()))  # by parameter, as the optimizer keeps them
        optimizer_state = {"state": state, "param_groups": optimizer["param_groups"]}
    return Checkpoint(
        path,
        metadata,
        parts["model"],
        parts["average"] or None,
        optimizer_state,
        scheduler,
        scaler,
    )


def load_model_state(
    model: nn.Module, state: dict[str, Tensor], source: object
) -> None:
    """``model.load_state_dict(state)``, raising a ``ValueError`` that names ``source``
    (where the state came from) if it does not fit."""
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        detail = " ".join(str(error).split())
        raise ValueError(
            f"{source} does not fit a {type(model).__name__} built from its "
            f"configuration: {detail}"
        ) from None


def load_optimizer_state(
    optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> None:
    """``optimizer.load_state_dict(state)``, keeping how ``optimizer`` computes: torch
    replaces the groups' settings with the saved ones (a run saved on a CPU would resume
    on a GPU with a non-capturable Adam), so the built flags are put back, and Adam's
    step counts moved to where they belong."""
    how = ("fused", "capturable", "foreach", "differentiable")  # not what it learned
    built = [
        {key: group[key] for key in how if key in group}
        for group in optimizer.param_groups
    ]
    optimizer.load_state_dict(state)
    for group, flags in zip(optimizer.param_groups, built):
        group.update(flags)
        on_device = bool(group.get("fused") or group.get("capturable"))
        for parameter in group["params"]:
            saved = optimizer.state.get(parameter, {})
            if torch.is_tensor(saved.get("step")):
                where = parameter.device if on_device else torch.device("cpu")
                saved["step"] = saved["step"].to(where)
