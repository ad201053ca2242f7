"""Helpers for the book's chapters: show the package's own code, and get the trained
model without training twice.

* :func:`show_source` displays a function or class of ``capsnotes`` as it is in the
  package, with its file and line numbers, so a chapter never holds a copy that could
  drift from the tested code. Only the ``.. math::`` blocks of its docstring are left
  out: the chapter renders those equations itself.
* :func:`trained_model` is the book's "load the checkpoint if it exists, else train":
  runs live in ``$CAPSNOTES_CACHE/runs/<profile>-<config hash>`` (default
  ``~/.cache/capsnotes``), so any chapter can be run on its own and a changed
  configuration trains anew.
"""

from __future__ import annotations

import inspect
import json
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .checkpoint import load_checkpoint, load_model_state
from .config import TrainConfig, profile
from .devices import resolve_device
from .run import build_model
from .train import TrainResult, train

__all__ = ["SourceCode", "cache_dir", "show_source", "trained_model", "without_math_blocks"]

PACKAGE_ROOT = Path(__file__).resolve().parent


@dataclass
class SourceCode:
    """Source text that renders as a highlighted Python block in Jupyter and the book."""

    location: str
    code: str

    def _repr_markdown_(self) -> str:
        return f"`{self.location}`\n\n```python\n{self.code}\n```\n"

    def __repr__(self) -> str:
        return f"# {self.location}\n{self.code}"


def show_source(obj: Any) -> SourceCode:
    """The source of ``obj`` (a function, class or method of capsnotes) with its place,
    e.g. ``capsnotes/squash.py, lines 22-48``, without the docstring's math blocks."""
    target = inspect.unwrap(obj)
    lines, start = inspect.getsourcelines(target)
    path = Path(inspect.getsourcefile(target)).resolve()
    try:
        shown = path.relative_to(PACKAGE_ROOT.parent).as_posix()
    except ValueError:
        shown = path.name
    location = f"{shown}, lines {start}-{start + len(lines) - 1}"
    code = without_math_blocks(textwrap.dedent("".join(lines)))
    return SourceCode(location, code.rstrip("\n"))


def without_math_blocks(code: str) -> str:
    """``code`` without its reStructuredText ``.. math::`` blocks: the directive line and
    every following line that is blank or indented deeper than it."""
    kept: list[str] = []
    block_indent: int | None = None
    for line in code.splitlines(keepends=True):
        text = line.strip()
        indent = len(line) - len(line.lstrip())
        if block_indent is not None and (not text or indent > block_indent):
            continue
        block_indent = indent if text.startswith(".. math::") else None
        if block_indent is None:
            kept.append(line)
    return "".join(kept)


def cache_dir() -> Path:
    """``$CAPSNOTES_CACHE``, else ``~/.cache/capsnotes``."""
    return Path(os.environ.get("CAPSNOTES_CACHE") or "~/.cache/capsnotes").expanduser()


def run_dir(config: TrainConfig, name: str) -> Path:
    return cache_dir() / "runs" / f"{name}-{config.key()}"


def trained_model(
    profile_name: str = "quick",
    *,
    device: torch.device | str | None = None,
    progress: bool = False,
    **overrides: Any,
) -> TrainResult:
    """The model trained with ``profile_name``: loaded from the cache if that run is
    complete, else trained (or resumed) into the cache.

    ``overrides`` replace fields of the profile (and so give another cache entry).
    """
    name = profile_name
    config = profile(name, **overrides)
    out_dir = run_dir(config, name)
    device = resolve_device(device)
    history_path = out_dir / "history.json"
    if history_path.exists():
        history = json.loads(history_path.read_text())
        if len(history.get("epochs", [])) == config.epochs and "wall_seconds" in history:
            checkpoint = load_checkpoint(out_dir / "checkpoint.safetensors")
            model = _reference_model(config, checkpoint.result_state, device, checkpoint.path)
            return TrainResult(model, history, out_dir)
    result = train(config, out_dir, device=device, progress=progress)
    # Hand back the model with the reference implementations, as load_pretrained does.
    model = _reference_model(config, result.model.state_dict(), device, out_dir)
    return TrainResult(model, result.history, out_dir)


def _reference_model(
    config: TrainConfig, state: dict[str, Any], device: torch.device, source: object
) -> nn.Module:
    """The model of ``config`` with the reference implementations, holding ``state``, on
    ``device``, in evaluation mode."""
    model = build_model(config)
    load_model_state(model, state, source)
    return model.to(device).eval()
