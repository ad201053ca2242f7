"""Helpers for the book's chapters: show the package's own code, and get the trained
model without training twice.

* :func:`show_source` displays a function or class of ``capsnotes`` as it is in the
  package, with its file and line numbers, so a chapter never holds a copy that could
  drift from the tested code. Only the ``.. math::`` blocks of its docstring are left
  out: the chapter renders those equations itself.
* :func:`beside_procedure` sets a function's code beside the numbered algorithm it
  implements, each step next to the lines that compute it (the code marks them with
  ``# line N:`` comments), as the annotated paper implementations do.
* :func:`glue` keeps a computed value for the prose to quote (MyST-NB's glue), so that a
  number in the text comes from an output and cannot drift from it.
* :func:`trained_model` is the book's "load the checkpoint if it exists, else train":
  runs live in ``$CAPSNOTES_CACHE/runs/<profile>-<config hash>`` (default
  ``~/.cache/capsnotes``), so any chapter can be run on its own and a changed
  configuration trains anew.
"""

from __future__ import annotations

import html
import inspect
import json
import os
import re
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

__all__ = [
    "PROCEDURE_1",
    "ProcedureAndCode",
    "SourceCode",
    "beside_procedure",
    "cache_dir",
    "glue",
    "show_source",
    "trained_model",
    "without_math_blocks",
]

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


#: Procedure 1 of Sabour et al. (2017), routing by agreement, line by line, in the
#: notation of the book (û: votes, b: logits, c: couplings, s: total input, v: output).
PROCEDURE_1 = (
    "procedure ROUTING(û_{j|i}, r)",
    "for all children i and parents j: b_ij ← 0",
    "for r iterations do",
    "    for all children i: c_i ← softmax(b_i)",
    "    for all parents j: s_j ← Σ_i c_ij û_{j|i}",
    "    for all parents j: v_j ← squash(s_j)",
    "    for all i, j: b_ij ← b_ij + û_{j|i} · v_j",
    "return v_j",
)

_LINE_MARK = re.compile(r"#\s*(?:Procedure 1, )?line (\d+)")
#: ``x_{j|i}`` and ``x_ij`` in a step, for HTML subscripts.
_SUBSCRIPT = re.compile(r"_(?:\{([^}]*)\}|(\w+))")


def _step_html(step: str) -> str:
    """A step of the procedure as HTML, its subscripts set as subscripts."""
    return _SUBSCRIPT.sub(lambda m: f"<sub>{m[1] or m[2]}</sub>", html.escape(step))


@dataclass
class ProcedureAndCode:
    """An algorithm's numbered steps beside the code lines that compute each one.

    ``rows[k]`` is ``(number, step, code)``: step ``number`` of the algorithm and the
    lines of the function that carry its ``# line N`` mark, up to the next mark."""

    location: str
    rows: list[tuple[int, str, str]]

    def _repr_html_(self) -> str:
        cells = []
        for number, step, code in self.rows:
            cells.append(
                "<tr>"
                f'<td style="vertical-align:top;padding:2px 8px;white-space:pre;'
                f'font-family:monospace;border-right:1px solid #999">{number}  '
                f"{_step_html(step)}</td>"
                f'<td style="vertical-align:top;padding:2px 8px"><pre style="margin:0;'
                f'background:none">{html.escape(code)}</pre></td></tr>'
            )
        return (
            f"<p><code>{html.escape(self.location)}</code>, beside Procedure 1</p>"
            '<table style="border-collapse:collapse;text-align:left">'
            "<tr><th>Procedure 1</th><th>code</th></tr>" + "".join(cells) + "</table>"
        )

    def __repr__(self) -> str:
        blocks = [f"# {self.location}, beside Procedure 1"]
        for number, step, code in self.rows:
            blocks.append(f"{number}  {step}\n" + textwrap.indent(code, "      | "))
        return "\n".join(blocks)


def beside_procedure(function: Any, procedure: tuple[str, ...] = PROCEDURE_1) -> ProcedureAndCode:
    """Set ``function``'s body beside ``procedure``: each numbered step (counted from 1)
    with the code lines that follow the ``# line N`` comment for it in the source (the
    comment itself is left out: the step stands beside the code). Steps with no code,
    such as the procedure's heading, get none. Raises if the code marks a step the
    procedure does not have."""
    source = show_source(function)
    code_of: dict[int, list[str]] = {}
    current: int | None = None
    body = source.code.split('"""')[-1] if '"""' in source.code else source.code
    for line in body.splitlines():
        mark = _LINE_MARK.search(line)
        if mark:
            current = int(mark.group(1))
            if not 1 <= current <= len(procedure):
                raise ValueError(
                    f"{source.location} marks line {current}; the procedure has lines "
                    f"1 to {len(procedure)}"
                )
            code_of.setdefault(current, [])
            rest = line[: mark.start()].rstrip().rstrip("#").rstrip()
            if rest.strip():
                code_of[current].append(rest)
            continue
        if current is not None and line.strip():
            code_of[current].append(line)
    # one indentation for all: the loop's body stays indented under the loop
    lines = [line for block in code_of.values() for line in block]
    indent = min((len(line) - len(line.lstrip()) for line in lines), default=0)
    rows = [
        (number, step, "\n".join(line[indent:] for line in code_of.get(number, [])))
        for number, step in enumerate(procedure, start=1)
    ]
    return ProcedureAndCode(source.location, rows)


def glue(name: str, value: Any) -> None:
    """Keep ``value`` under ``name`` for the chapter's prose (``{glue:text}`name:.2f```), as
    MyST-NB's ``glue`` does, without displaying it. It returns nothing, so a cell that
    ends with it prints nothing more. Where MyST-NB is not installed (Colab), nothing is
    kept: the Colab notebooks carry the values in their text already
    (``tools/colab.py``)."""
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        return
    myst_glue(name, value, display=False)


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
