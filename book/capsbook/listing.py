"""The whole CapsNet on one page: the package's own code, with the paper beside it.

:func:`whole_network` reads the source of the paper's functions and layers from
``capsnotes`` (as :func:`capsbook.display.show_source` does) and sets them one after the
other, in the order the data flows, as one listing. Two things are left out, so that
the page holds the paper's lines: docstrings (each object's own page shows them) and
the one-line checks at the doors (``check_...(...)`` calls, ``capsnotes/checks.py``),
which refuse bad input and compute nothing. Beside a line, a note quotes the paper's
sentence it implements (:data:`NOTES`, each anchored to a piece of that line's text).

Nothing is copied: the listing is read from the package when a chapter runs, so it
shows what the tests test, and ``pytest --nbval`` fails when the package's code
changes under a committed listing; an anchor that no longer finds its line raises.
"""

from __future__ import annotations

import ast
import html
import inspect
import textwrap
from dataclasses import dataclass
from typing import Any

from capsbook.display import show_source
from capsnotes import (
    CapsNet,
    Decoder,
    DigitCapsules,
    PrimaryCapsules,
    capsnet_loss,
    dynamic_routing,
    margin_loss,
    mask_capsules,
    reconstruction_loss,
    squash,
)

#: What the page shows, in the order the data flows: conv → primary capsules → votes
#: and routing → lengths → decoder → loss.
PARTS: tuple[Any, ...] = (
    squash,
    PrimaryCapsules,
    DigitCapsules,
    dynamic_routing,
    mask_capsules,
    Decoder,
    CapsNet.forward,
    margin_loss,
    reconstruction_loss,
    capsnet_loss,
)

#: (part, a piece of one of its lines, the paper's words beside that line). Quotations
#: from Sabour, Frosst & Hinton (2017), arXiv v2, with their section.
NOTES: tuple[tuple[Any, str, str], ...] = (
    (
        squash,
        "scale = squared_length",
        "“short vectors get shrunk to almost zero length and long vectors get shrunk "
        "to a length slightly below 1” (§2, eq. 1)",
    ),
    (
        PrimaryCapsules,
        "self.conv = ",
        "“a convolutional capsule layer with 32 channels of convolutional 8D capsules” "
        "(§4)",
    ),
    (
        DigitCapsules,
        'torch.einsum("ijdk,bik->bijd"',
        "û_{j|i} = W_ij u_i: “prediction vectors” from “multiplying the output u_i of "
        "a capsule in the layer below by a weight matrix W_ij” (§2, eq. 2)",
    ),
    (
        dynamic_routing,
        "coupling = logits.softmax(dim=2)",
        "“The coupling coefficients between capsule i and all the capsules in the "
        "layer above sum to 1” (§2, eq. 3)",
    ),
    (
        dynamic_routing,
        'logits = logits + torch.einsum("bijd,bjd->bij"',
        "“The agreement is simply the scalar product a_ij = v_j · û_{j|i}” (§2)",
    ),
    (
        mask_capsules,
        "keep = nn.functional.one_hot",
        "“During training, we mask out all but the activity vector of the correct "
        "digit capsule” (§4.1)",
    ),
    (
        CapsNet.forward,
        "lengths = torch.linalg.vector_norm",
        "“the length of the activity vector to represent the probability that the "
        "entity exists” (abstract)",
    ),
    (
        margin_loss,
        "loss_absent = lam",
        "“The λ down-weighting of the loss for absent digit classes stops the initial "
        "learning from shrinking the lengths of the activity vectors” (§3)",
    ),
    (
        reconstruction_loss,
        "return weight * errors.sum(dim=1).mean()",
        "“We scale down this reconstruction loss by 0.0005 so that it does not "
        "dominate the margin loss during training” (§4.1)",
    ),
)


@dataclass(frozen=True)
class Part:
    """One part of the page: where it lives, its lines, and the notes beside them
    (line index → note)."""

    location: str
    lines: list[str]
    notes: dict[int, str]


def _left_out(source: str) -> set[int]:
    """The lines (0-based) of ``source`` that the page leaves out: docstrings, and
    statements that only call a ``check_...`` function."""
    dropped: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(node, ast.FunctionDef | ast.ClassDef)
        ):
            first = body[0]
            constant = isinstance(first, ast.Expr) and isinstance(
                first.value, ast.Constant
            )
            if constant and isinstance(first.value.value, str):
                dropped.update(range(first.lineno - 1, first.end_lineno))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            name = getattr(node.value.func, "id", getattr(node.value.func, "attr", ""))
            if name.startswith("check_"):
                dropped.update(range(node.lineno - 1, node.end_lineno))
    return dropped


def part(obj: Any) -> Part:
    """``obj``'s source as the page shows it, with its notes."""
    shown = show_source(obj)
    source = textwrap.dedent("".join(inspect.getsourcelines(inspect.unwrap(obj))[0]))
    dropped = _left_out(source)
    lines = [line for i, line in enumerate(source.splitlines()) if i not in dropped]
    notes: dict[int, str] = {}
    for owner, anchor, note in NOTES:
        if owner is not obj:
            continue
        found = [i for i, line in enumerate(lines) if anchor in line]
        if len(found) != 1:
            raise LookupError(
                f"the note on {anchor!r} should find one line of {shown.location}, "
                f"found {len(found)}: the code changed, so the note must too"
            )
        notes[found[0]] = note
    return Part(shown.location.split(",")[0], lines, notes)


CODE_STYLE = "margin:0;padding:0;white-space:pre"
CELL_STYLE = "padding:0 12px 0 0;vertical-align:top"
NOTE_STYLE = (
    "padding:0;vertical-align:top;font-size:0.85em;font-style:italic;min-width:14em"
)


@dataclass(frozen=True)
class Listing:
    """The parts, rendered as a two-column page in HTML (code, and the paper beside
    it) and as plain text (each note as a comment above its line)."""

    parts: list[Part]

    def _repr_html_(self) -> str:
        rows = []
        for piece in self.parts:
            rows.append(
                '<tr><td colspan="2" style="padding:10px 0 2px;font-family:monospace;'
                f'opacity:0.75">{html.escape(piece.location)}</td></tr>'
            )
            for index, line in enumerate(piece.lines):
                note = piece.notes.get(index, "")
                code = f'<pre style="{CODE_STYLE}">{html.escape(line)}</pre>'
                rows.append(
                    f'<tr><td style="{CELL_STYLE}">{code}</td>'
                    f'<td style="{NOTE_STYLE}">{html.escape(note)}</td></tr>'
                )
        return (
            '<div style="overflow-x:auto"><table class="capsnotes-listing" '
            'style="border-collapse:collapse">' + "".join(rows) + "</table></div>"
        )

    def __repr__(self) -> str:
        blocks = []
        for piece in self.parts:
            lines = [f"# --- {piece.location}"]
            for index, line in enumerate(piece.lines):
                if index in piece.notes:
                    indent = line[: len(line) - len(line.lstrip())]
                    lines.append(f"{indent}# paper: {piece.notes[index]}")
                lines.append(line)
            blocks.append("\n".join(lines))
        return "\n\n".join(blocks)

    @property
    def line_count(self) -> int:
        return sum(len(piece.lines) for piece in self.parts)


def whole_network(parts: tuple[Any, ...] = PARTS) -> Listing:
    """The whole CapsNet as one listing of the package's code (see the module)."""
    return Listing([part(obj) for obj in parts])
