"""The whole CapsNet on one page: the package's own code, with the paper beside it.

:func:`whole_network` reads the source of the paper's functions and layers from
``capsnotes`` (as :func:`capsbook.display.show_source` does) and sets them one after the
other, in the order the book builds them, as one listing. Left out, so that the page
holds the paper's lines:

* docstrings (each object's own chapter shows them);
* the one-line checks at the doors (``check_...(...)`` statements,
  ``capsnotes/checks.py``), which refuse bad input and compute nothing, and an ``if``
  whose body is only such checks; a check whose value is kept
  (``self.iterations = check_iterations(iterations)``) shows as the argument it returns;
* a class's methods that are not the paper's (``extra_repr``,
  ``forward_with_couplings``): each :class:`Piece` names the methods it shows, and its
  header the ones it leaves out;
* blank lines left doubled, or left at either end, by the cuts.

Beside a line, a note quotes the sentence of the paper it implements (:data:`NOTES`,
each anchored to a piece of that line's text) and where the paper says it. What the page
shows and the notes are in :mod:`capsbook.listing_notes`; this module cuts and sets
them.

Nothing is copied: the listing is read from the package when a chapter runs, so it
shows what the tests test, and ``pytest --nbval`` fails when the package's code changes
under a committed listing; an anchor that no longer finds exactly one line raises.

The HTML is a two-column table (code, and the paper beside it), each note spanning the
lines from its own to the next note's, on a white ground with its own colours (as the
book's figures are), so that it reads alike in the book's light and dark themes, in
Jupyter and in Colab.
"""

from __future__ import annotations

import ast
import html
import inspect
import textwrap
from dataclasses import dataclass
from typing import Any

from capsbook.display import show_source
from capsbook.listing_notes import NOTES, PARTS, Piece


@dataclass(frozen=True)
class Part:
    """One part of the page: where it lives, the chapter that explains it, its lines,
    and the notes beside them (line index → note)."""

    location: str
    chapter: str
    lines: list[str]
    notes: dict[int, str]


def _is_check(node: ast.AST) -> bool:
    """A call of a ``check_...`` function (``check_x(...)`` or ``mod.check_x(...)``)."""
    if not isinstance(node, ast.Call):
        return False
    name = getattr(node.func, "id", getattr(node.func, "attr", ""))
    return name.startswith("check_")


def _is_check_statement(node: ast.AST) -> bool:
    """A statement that only calls a check, or an ``if`` (with no ``else``) whose body
    is only such statements."""
    if isinstance(node, ast.Expr):
        return _is_check(node.value)
    if isinstance(node, ast.If) and not node.orelse:
        return all(_is_check_statement(statement) for statement in node.body)
    return False


def _lines_of(node: ast.AST) -> range:
    """The 0-based lines ``node`` spans, decorators included."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return range(first - 1, node.end_lineno)


def _cuts(
    source: str, methods: tuple[str, ...] = ()
) -> tuple[set[int], dict[int, str]]:
    """What the page cuts from ``source`` (dedented): the 0-based lines it leaves out
    (docstrings, check statements, the methods of a class not in ``methods`` when it
    names some), and the lines it rewrites (index → text: a check whose value is kept,
    shown as its first argument)."""
    tree = ast.parse(source)
    dropped: set[int] = set()
    if methods:
        (top,) = tree.body
        if not isinstance(top, ast.ClassDef):
            raise TypeError(f"methods are chosen only from a class, got {top.name!r}")
        defined = {n.name for n in top.body if isinstance(n, ast.FunctionDef)}
        missing = set(methods) - defined
        if missing:
            raise LookupError(f"{top.name} has no method {sorted(missing)}")
        for node in top.body:
            if isinstance(node, ast.FunctionDef) and node.name not in methods:
                dropped.update(_lines_of(node))
    checks: list[ast.Call] = []
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and body:
            first = body[0]
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                dropped.update(_lines_of(first))
        if isinstance(node, ast.stmt) and _is_check_statement(node):
            dropped.update(_lines_of(node))
        elif _is_check(node):
            checks.append(node)
    lines = source.splitlines()
    rewritten: dict[int, str] = {}
    for call in checks:
        row = call.lineno - 1
        if row in dropped:
            continue
        if call.end_lineno != call.lineno or not call.args:
            raise ValueError(f"a check kept as a value must fit one line: {lines[row]}")
        text = rewritten.get(row, lines[row])
        argument = ast.get_source_segment(source, call.args[0])
        call_text = ast.get_source_segment(source, call)
        rewritten[row] = text.replace(call_text, argument, 1)
    return dropped, rewritten


def _shown_lines(source: str, methods: tuple[str, ...] = ()) -> list[str]:
    """``source`` (dedented) as the page shows it: the cuts made, no blank line right
    after a cut or another blank line, or at either end."""
    dropped, rewritten = _cuts(source, methods)
    kept: list[str] = []
    for index, line in enumerate(source.splitlines()):
        if index in dropped:
            continue
        line = rewritten.get(index, line)
        after_cut = index - 1 in dropped
        if not line.strip() and (after_cut or not kept or not kept[-1].strip()):
            continue
        kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    return kept


def part(piece: Piece, notes: tuple[tuple[Any, str, str], ...] = NOTES) -> Part:
    """``piece``'s source as the page shows it, with its notes."""
    shown = show_source(piece.obj)
    target = inspect.unwrap(piece.obj)
    source = textwrap.dedent("".join(inspect.getsourcelines(target)[0]))
    lines = _shown_lines(source, piece.methods)
    anchored: dict[int, str] = {}
    for owner, anchor, note in notes:
        if owner is not piece.obj:
            continue
        found = [i for i, line in enumerate(lines) if anchor in line]
        if len(found) != 1:
            raise LookupError(
                f"the note on {anchor!r} should find one line of {shown.location}, "
                f"found {len(found)}: the code changed, so the note must too"
            )
        if found[0] in anchored:
            raise ValueError(f"two notes on one line of {shown.location}: {anchor!r}")
        anchored[found[0]] = note
    return Part(
        _location(shown.location, source, piece), piece.chapter, lines, anchored
    )


def _location(location: str, source: str, piece: Piece) -> str:
    """Where ``piece`` lives (``capsnotes/x.py, lines a-b``), and the methods of its
    class that the page leaves out, if any: the line range covers them too."""
    if not piece.methods:
        return location
    (top,) = ast.parse(source).body
    left = [
        node.name
        for node in top.body
        if isinstance(node, ast.FunctionDef) and node.name not in piece.methods
    ]
    return f"{location}, without {', '.join(left)}" if left else location


#: The listing's colours, on white: the book's figures' greys, and Okabe-Ito blue for
#: the rule that joins a note to its line.
INK, FAINT, RULE, MARKED = "#222222", "#666666", "#0072B2", "#eaf2fa"
MONO = "SFMono-Regular, Menlo, Consolas, 'Liberation Mono', monospace"
PRE_STYLE = (
    "margin:0;padding:0 10px 0 6px;border:0;background:transparent;box-shadow:none;"
    f"white-space:pre;overflow:visible;font-family:{MONO};font-size:0.8125rem;"
    f"line-height:1.4;color:{INK}"
)
CELL_STYLE = "padding:0;border:0;text-align:left;vertical-align:top"
#: About how many characters of a note fit a line of the note column in the book's
#: page (its full width): what :meth:`Listing._cells` counts a note's lines by.
NOTE_CHARACTERS = 45
NOTE_STYLE = (
    f"{CELL_STYLE};min-width:15em;padding:1px 6px 6px 10px;font-size:0.8rem;"
    f"line-height:1.35;color:{INK};font-style:italic"
)


def _token_colour(style: Any, kind: Any) -> tuple[str, bool]:
    found = style.style_for_token(kind)
    return (f"#{found['color']}" if found["color"] else INK), bool(found["bold"])


def highlighted(lines: list[str]) -> list[str]:
    """``lines`` of Python as HTML, one string a line, coloured as Pygments' default
    style colours them on white (escaped and uncoloured where Pygments is missing)."""
    try:
        from pygments.lexers import PythonLexer
        from pygments.styles import get_style_by_name
    except ImportError:  # pragma: no cover - Jupyter and Colab have it
        return [html.escape(line) for line in lines]
    style = get_style_by_name("default")
    rows: list[list[str]] = [[]]
    lexer = PythonLexer(stripnl=False, ensurenl=True)
    for kind, value in lexer.get_tokens("\n".join(lines)):
        colour, bold = _token_colour(style, kind)
        for number, piece in enumerate(value.split("\n")):
            if number:
                rows.append([])
            if not piece:
                continue
            text = html.escape(piece)
            if colour != INK or bold:
                weight = ";font-weight:bold" if bold else ""
                text = f'<span style="color:{colour}{weight}">{text}</span>'
            rows[-1].append(text)
    return ["".join(row) for row in rows[: len(lines)]]


def chapter_number(chapter: str) -> int:
    """``"02_squash"`` → 2."""
    return int(chapter.split("_", 1)[0])


@dataclass(frozen=True)
class Listing:
    """The parts, rendered as a two-column page in HTML (code, and the paper beside
    it) and as plain text (each note as a comment above its line)."""

    parts: list[Part]

    @staticmethod
    def _note_starts(piece: Part) -> dict[int, int]:
        """Where each note's cell starts (note's line → first row): at the comment
        lines right above its line, if any, so that a note shares the rows of the
        block it explains (never above the previous note's line)."""
        starts, floor = {}, 0
        for line in sorted(piece.notes):
            first = line
            while first > floor and piece.lines[first - 1].lstrip().startswith("#"):
                first -= 1
            starts[line], floor = first, line + 1
        return starts

    @classmethod
    def _cells(cls, piece: Part) -> dict[int, tuple[int, str]]:
        """The note column's cells: first row → (rows spanned, note, or "" for an
        empty cell). A note's cell runs from its start to the end of its block (the
        next blank line), or on to the next note's start where the block has fewer
        rows than the note needs lines (:data:`NOTE_CHARACTERS` a line), so that a
        long note does not stretch the code's rows."""
        starts = cls._note_starts(piece)
        bounds = sorted(starts.values())
        blank = [i for i, line in enumerate(piece.lines) if not line.strip()]
        cells: dict[int, tuple[int, str]] = {}
        row = 0
        for line, first in sorted(starts.items()):
            if first > row:
                cells[row] = (first - row, "")
            later = [b for b in bounds if b > first] + [len(piece.lines)]
            end = min([later[0], *(b for b in blank if b > line)])
            needed = -(-len(piece.notes[line]) // NOTE_CHARACTERS) + 1
            if end - first < needed:
                end = later[0]
            cells[first] = (end - first, piece.notes[line])
            row = end
        if row < len(piece.lines):
            cells[row] = (len(piece.lines) - row, "")
        return cells

    def _rows(self, piece: Part) -> list[str]:
        spans = self._cells(piece)
        rows = [
            f'<tr><td colspan="2" style="{CELL_STYLE};padding:16px 0 4px 6px;'
            f"border-bottom:1px solid #cccccc;font-family:{MONO};font-size:0.75rem;"
            f'color:{FAINT}">{html.escape(piece.location)} · chapter '
            f"{chapter_number(piece.chapter)}</td></tr>"
        ]
        for index, code in enumerate(highlighted(piece.lines)):
            marked = f";background:{MARKED}" if index in piece.notes else ""
            cells = (
                f'<td style="{CELL_STYLE}{marked}"><pre style="{PRE_STYLE}">'
                f"{code or ' '}</pre></td>"
            )
            if index in spans:
                count, note = spans[index]
                rule = (
                    f";border-left:3px solid {RULE};border-top:5px solid #ffffff"
                    if note
                    else ""
                )
                cells += (
                    f'<td rowspan="{count}" style="{NOTE_STYLE}{rule}">'
                    f"{html.escape(note)}</td>"
                )
            rows.append(f'<tr style="background:#ffffff">{cells}</tr>')
        return rows

    def _repr_html_(self) -> str:
        rows = [row for piece in self.parts for row in self._rows(piece)]
        return (
            '<div class="capsnotes-listing" style="overflow-x:auto;background:#ffffff;'
            f'color:{INK};padding:4px 8px 12px;border:1px solid #dddddd">'
            '<table style="border-collapse:collapse;border:0;width:100%;margin:0;'
            'background:#ffffff">' + "".join(rows) + "</table></div>"
        )

    def __repr__(self) -> str:
        blocks = []
        for piece in self.parts:
            where = f"# {piece.location} (chapter {chapter_number(piece.chapter)})"
            lines = [where]
            for index, line in enumerate(piece.lines):
                if index in piece.notes:
                    indent = line[: len(line) - len(line.lstrip())]
                    lines.append(f"{indent}# paper: {piece.notes[index]}")
                lines.append(line)
            blocks.append("\n".join(lines))
        return "\n\n".join(blocks)

    @property
    def line_count(self) -> int:
        """Lines of code on the page."""
        return sum(len(piece.lines) for piece in self.parts)

    @property
    def note_count(self) -> int:
        """Notes beside them."""
        return sum(len(piece.notes) for piece in self.parts)


def whole_network(
    parts: tuple[Piece, ...] = PARTS, notes: tuple[tuple[Any, str, str], ...] = NOTES
) -> Listing:
    """The whole CapsNet as one listing of the package's code (see the module). Raises
    if a note belongs to no part shown, or does not find exactly one line of it."""
    shown = {id(piece.obj) for piece in parts}
    stray = [anchor for owner, anchor, _ in notes if id(owner) not in shown]
    if stray:
        raise ValueError(f"notes for parts the page does not show: {stray}")
    return Listing([part(piece, notes) for piece in parts])
