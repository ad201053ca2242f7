"""A training run's history, and the checkpoint a run resumes from: a run may train in
several *sessions* (calls of :func:`~capsnotes.training.train.train` that trained), on
different devices and plans, and continues exactly where its checkpoint stopped.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from .. import __version__
from ..data.files import write_json
from ..fast.precision import device_name
from .checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from .config import TrainConfig


class RunHistory:
    """A run's history, in ``history.json`` and in the checkpoint (so that it covers the
    epochs its weights have seen): every epoch's record, and every session's seconds,
    device, versions, provenance and plan; ``device`` names every device used."""

    def __init__(
        self,
        out_dir: Path,
        config: TrainConfig,
        device: torch.device,
        provenance: dict[str, Any] | None,
        resume: bool,
    ) -> None:
        self.out_dir, self.config = out_dir, config
        self.started = time.perf_counter()
        self.session = {
            "device": device_name(device),
            "torch": torch.__version__,
            "capsnotes": __version__,
            "provenance": provenance or {},
        }
        self.path = out_dir / "checkpoint.safetensors"
        self.checkpoint = checkpoint_to_resume(self.path, config) if resume else None
        if self.checkpoint is None:
            self.history: dict[str, Any] = {
                "train_config": config.to_dict(),
                **{key: self.session[key] for key in ("device", "torch", "capsnotes")},
                "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "provenance": provenance or {},
                "epochs": [],
            }
        else:
            self.history = self.checkpoint.metadata["history"]
            self.history["train_config"] = config.to_dict()
        self.done_before = len(self.history["epochs"])

    def epochs_to_train(self) -> range:
        return range(self.done_before + 1, self.config.epochs + 1)

    def choices_to_keep(self) -> dict[str, Any]:
        """A fast run resumed on the device of its last session computes as that session
        did (another convolution or precision would change its results): its choices,
        or none."""
        last = (self.history.get("session_details") or [{}])[-1]
        device = last.get("device", self.history["device"])
        if device != self.session["device"] or not last.get("fast_paths"):
            return {}
        keys = ("routing", "convolution", "precision")
        return {key: last[key] for key in keys if key in last}

    def add(self, record: dict[str, Any], details: dict[str, Any]) -> None:
        """Add an epoch's record; the session's first also starts the session."""
        history = self.history
        if len(history["epochs"]) == self.done_before:
            sessions = history.setdefault("session_details", [])
            for earlier in sessions:  # written before a session named its device
                earlier.setdefault("device", history["device"])
            sessions.append(self.session | details)
            history.setdefault("sessions", []).append(0.0)
            history["device"] = "; ".join(dict.fromkeys(s["device"] for s in sessions))
        history["epochs"].append(record)
        history["sessions"][-1] = time.perf_counter() - self.started
        history["wall_seconds"] = sum(history["sessions"])
        history["test_accuracy"] = record["test_accuracy"]

    def save(self, state: Callable[[], dict[str, Any]], checkpoint_every: int) -> None:
        """Write ``history.json``, after the checkpoint of the run's ``state()`` (its
        weights, Adam's state, ...) when one is due: every ``checkpoint_every`` epochs
        of this session, and after the last epoch."""
        epoch = len(self.history["epochs"])
        due = (epoch - self.done_before) % checkpoint_every == 0
        if due or epoch == self.config.epochs:
            metadata = {
                "train_config": self.config.to_dict(),
                "epoch": epoch,
                "history": self.history,
            }
            save_checkpoint(self.path, metadata=metadata, **state())
        write_json(self.out_dir / "history.json", self.history)


def checkpoint_to_resume(path: Path, config: TrainConfig) -> Checkpoint | None:
    """The checkpoint at ``path`` to continue a run of ``config`` from (None if there is
    none); raises if it comes from another configuration or has more epochs."""
    if not path.exists():
        return None
    checkpoint = load_checkpoint(path)
    before = TrainConfig.from_dict(checkpoint.metadata["train_config"])
    if dataclasses.replace(before, epochs=config.epochs) != config:
        raise ValueError(
            f"{path} comes from a different configuration; train into another folder, "
            "or pass resume=False (--no-resume) to start over"
        )
    done = len(checkpoint.metadata["history"]["epochs"])
    if config.epochs < done:
        raise ValueError(
            f"{path} has trained {done} epochs already, more than the {config.epochs} "
            "asked for"
        )
    return checkpoint
