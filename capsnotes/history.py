"""The record a training run keeps of itself (``history.json`` and the checkpoint's
metadata): its configuration, device, versions and provenance, every epoch, and the wall
time of each call that trained."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import torch

from .config import TrainConfig
from .devices import device_name
from .version import __version__

__all__ = ["RunHistory"]


class RunHistory:
    """The history of one run, as the plain dict that is written to disk (``record``).

    Keys: ``train_config``, ``device``, ``torch``, ``capsnotes``, ``started``,
    ``provenance`` (how the call that started the run was made), ``epochs`` (one record
    per epoch), ``sessions`` (wall seconds of each call of ``train()`` that trained),
    ``session_details`` (how each of those calls trained: fast paths, allocator, chosen
    implementations), ``wall_seconds`` (their sum) and ``test_accuracy`` (the last epoch's).
    """

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record
        self._session_open = False

    @classmethod
    def start(
        cls, config: TrainConfig, device: torch.device, provenance: dict[str, Any] | None
    ) -> RunHistory:
        """The history of a new run."""
        return cls(
            {
                "format": 1,
                "train_config": config.to_dict(),
                "device": device_name(device),
                "torch": torch.__version__,
                "capsnotes": __version__,
                "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "provenance": provenance or {},
                "epochs": [],
            }
        )

    @classmethod
    def resume(cls, record: dict[str, Any], config: TrainConfig) -> RunHistory:
        """The history of a run continued with ``config`` (the same, or more epochs)."""
        record["train_config"] = config.to_dict()
        return cls(record)

    def add_epoch(self, epoch: dict[str, Any], call_seconds: float, details: dict) -> None:
        """Append ``epoch``'s record. ``call_seconds`` is how long the current call has
        run so far; ``details`` says how it trains (kept once per call)."""
        sessions = self.record.setdefault("sessions", [])
        if not self._session_open:
            sessions.append(0.0)
            self.record.setdefault("session_details", []).append(details)
            self._session_open = True
        self.record["epochs"].append(epoch)
        sessions[-1] = call_seconds
        self.record["wall_seconds"] = sum(sessions)
        self.record["test_accuracy"] = epoch["test_accuracy"]
