"""What the book's chapters display: the package's own code, and numbers for the prose.

* :func:`show_source` displays a function or class of ``capsnotes`` as it is in the
  package, with its file and line numbers, so a chapter never holds a copy that could
  drift from the tested code. Only the ``.. math::`` blocks of its docstring are left
  out: the chapter renders those equations itself.
* :func:`beside_procedure` sets a function's code beside the numbered algorithm it
  implements, each step above the lines that compute it (the code marks them with
  ``# line N:`` comments), as the annotated paper implementations do.
* :func:`glue` keeps a computed value, formatted as the prose shows it, for the prose to
  quote (MyST-NB's glue), so that a number in the text comes from an output and cannot
  drift from it.
"""

from __future__ import annotations

import html
import inspect
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import capsnotes

#: Where shown code's paths are counted from: the repository root (the folder that holds
#: the package capsnotes).
SHOWN_FROM = Path(capsnotes.__file__).resolve().parents[1]


@dataclass
class SourceCode:
    """Source text that renders as a highlighted Python block in Jupyter and the
    book."""

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
        shown = path.relative_to(SHOWN_FROM).as_posix()
    except ValueError:
        shown = path.name
    location = f"{shown}, lines {start}-{start + len(lines) - 1}"
    code = without_math_blocks(textwrap.dedent("".join(lines)))
    return SourceCode(location, code.rstrip("\n"))


def without_math_blocks(code: str) -> str:
    """``code`` without its reStructuredText ``.. math::`` blocks: the directive line
    and every following line that is blank or indented deeper than it."""
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


#: The colour of a step's rule: Okabe-Ito blue, readable on the book's light and dark
#: themes alike.
_STEP_RULE = "#0072B2"


@dataclass
class ProcedureAndCode:
    """An algorithm's numbered steps, each above the code lines that compute it.

    ``rows[k]`` is ``(number, step, code)``: step ``number`` of the algorithm and the
    lines of the function that carry its ``# line N`` mark, up to the next mark.
    ``notes[number]`` is what the mark's comment says beyond the step itself (e.g.
    ``per example: ...``), shown after the step.

    The HTML stacks each step above its code, both as wide as the page's column: a
    code line gets the whole column (the book's shows 88 characters), where a step and
    its code side by side would share it and clip the code."""

    location: str
    rows: list[tuple[int, str, str]]
    notes: dict[int, str] = field(default_factory=dict)

    def _repr_html_(self) -> str:
        blocks = []
        for number, step, code in self.rows:
            note = self.notes.get(number)
            note = f'<i style="opacity:0.8"> — {_step_html(note)}</i>' if note else ""
            block = (
                f'<div style="border-left:3px solid {_STEP_RULE};padding:0 0 0 8px;'
                f'margin:4px 0 2px;white-space:pre-wrap"><b>{number}</b>&ensp;'
                f"{_step_html(step)}{note}</div>"
            )
            if code:
                block += (
                    '<pre style="margin:0 0 0 11px;padding:4px 10px;white-space:pre;'
                    f'overflow-x:auto">{html.escape(code)}</pre>'
                )
            blocks.append(f'<div class="procedure-step">{block}</div>')
        return (
            '<p><span style="font-family:monospace">'
            f"{html.escape(self.location)}</span>: each step of Procedure 1 "
            "above the lines that compute it</p>" + "".join(blocks)
        )

    def __repr__(self) -> str:
        blocks = [f"# {self.location}, beside Procedure 1"]
        for number, step, code in self.rows:
            note = f"\n      # {self.notes[number]}" if number in self.notes else ""
            blocks.append(
                f"{number}  {step}{note}\n" + textwrap.indent(code, "      | ")
            )
        return "\n".join(blocks)


def beside_procedure(
    function: Any, procedure: tuple[str, ...] = PROCEDURE_1
) -> ProcedureAndCode:
    """Set ``function``'s body beside ``procedure``: each numbered step (counted from 1)
    with the code lines that follow the ``# line N`` comment for it in the source (the
    comment becomes the step's note, less the step's own formula). Steps with no code,
    such as the procedure's heading, get none. Raises if the code marks a step the
    procedure does not have."""
    source = show_source(function)
    code_of: dict[int, list[str]] = {}
    notes: dict[int, str] = {}
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
            note = _note(line[mark.end() :], procedure[current - 1])
            if note:
                notes[current] = note
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
    return ProcedureAndCode(source.location, rows, notes)


def _note(comment: str, step: str) -> str:
    """What a ``# line N: ...`` comment says beyond ``step``: the comment less the
    step's formula (its text after the last ``": "``) where it starts with it."""
    comment = comment.lstrip(":").strip()
    formula = step.rsplit(": ", 1)[-1].strip()
    if comment.startswith(formula):
        comment = comment[len(formula) :].lstrip(" ,;").strip()
    return comment


def glue(name: str, value: int | str | float, spec: str = "") -> None:
    """Keep ``value`` under ``name`` for the chapter's prose (``{glue:text}`name```), as
    MyST-NB's ``glue`` does, without displaying it; formatted with ``spec`` (``".2%"``)
    when given. A float must be given one: the glued text is what the page shows, and
    nbval compares it exactly, so it holds no digit the page does not show (a float's
    last digits follow the machine's order of summation). Where MyST-NB is not installed
    (Colab) nothing is kept: the Colab notebooks carry the text already
    (``tools/colab.py``). Returns nothing, so a cell that ends with it prints no
    more."""
    if isinstance(value, float) and not spec:
        raise ValueError(
            f"glue({name!r}, {value}) needs the format the prose shows it in"
        )
    text = format(value, spec) if spec else value
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        return
    myst_glue(name, text, display=False)
