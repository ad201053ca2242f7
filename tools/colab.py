"""Chapters as Colab shows them: the book's MyST syntax turned into plain Markdown.

Sphinx renders roles (``{cite:p}``, ``{doc}``, ``{eq}``), directives (``{literalinclude}``,
``{bibliography}``), equation labels and figure captions kept in cell metadata; Colab and
Jupyter render none of them. :func:`colab_cells` rewrites a chapter's markdown cells so
that they read the same there as in the HTML book:

* citations become author-year text linked to the reference;
* links to other chapters become links to their pages in the hosted book, and equation
  references the equation numbers the HTML shows, e.g. ``(6.1)``, with ``\\tag`` in the
  equation itself;
* an included source file becomes a code block with the included lines;
* a figure's caption becomes a paragraph at the top of the next markdown cell,
  ``**Fig. 8.2** ...``, numbered as in the HTML;
* the bibliography becomes a list;
* an admonition (``{admonition}``, ``{note}``, ...) becomes a quotation under its title
  in bold, or, where the HTML collapses it (``:class: dropdown``), a ``<details>`` box;
* a code cell the HTML collapses (tag ``hide-cell``: the exercises' solutions) is
  collapsed in Colab too, as a form cell showing its ``#@title`` line;
* the interactive parts of the HTML book (chapter 9's explorer, chapter 5's routing
  playground) become a note that links to them;
* a number glued from a computed output (MyST-NB's ``{glue:text}`name:format```) becomes
  that number as text, formatted as the HTML formats it.

A code cell tagged to be skipped (:data:`SKIPPING`) is refused: Colab's "Run all" honours
no tag, so it would run there although the test machine's nbval never ran it; a cell that
needs a GPU or hours of training guards itself in code instead.

Code cells are left exactly as they are, so the notebook runs (and hashes, for the
book's execution cache) the same. ``tools/refresh_notebooks.py`` uses this when it
writes the notebooks; ``tests/test_book.py`` checks that no MyST syntax is left.

Hand-written because no maintained tool writes MyST as plain Markdown: jupytext reads
and writes it as MyST (its pairing keeps roles and directives as they are), and
Sphinx/MyST-NB render them only into a built page. The glued values are read by MyST-NB's
own reader of glued outputs, so they are the ones the HTML pastes.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from myst_nb.core.variables import format_plain_text
from myst_nb.ext.glue import extract_glue_data_cell
from pybtex.database import parse_file
from pybtex.plugin import find_plugin

REPO = Path(__file__).resolve().parents[1]
BOOK = REPO / "book"
HOSTED = "https://capsnotes.github.io/capsnotes"

ROLE = re.compile(r"\{(?P<role>[a-z:]+)\}`(?P<target>[^`]*)`")
EQUATION_LABEL = re.compile(r"\$\$\s*\((?P<label>[\w-]+)\)")
DIRECTIVE = re.compile(
    r"^```\{(?P<name>[\w-]+)\}(?P<argument>[^\n]*)\n(?P<body>.*?)^```", re.M | re.S
)
#: What must not survive in a markdown cell of a Colab notebook.
MYST_ONLY = [
    re.compile(r"\{[a-z:-]+\}`"),  # a role
    re.compile(r"^(```|:::)\{", re.M),  # a directive
    re.compile(r"\$\$\s*\([\w-]+\)"),  # an equation label
    re.compile(r"^\([\w-]+\)=\s*$", re.M),  # a target
]
#: The tags with which a runner leaves a code cell out (the book's build, nbval): Colab
#: honours none of them.
SKIPPING = frozenset({"skip-execution", "nbval-skip", "remove-cell-execution"})


@dataclass
class Chapter:
    name: str
    number: int | None  #: as the HTML numbers it (None: unnumbered)
    title: str


def chapter_sources(prefixes: Sequence[str] = ()) -> list[Path]:
    """The chapters' MyST sources (``book/*.md`` with a jupytext header), those whose file
    names start with one of ``prefixes`` where any are given."""
    found = sorted(p for p in BOOK.glob("*.md") if p.read_text().startswith("---\njupytext:"))
    return [p for p in found if not prefixes or p.name.startswith(tuple(prefixes))]


def chapters(toc_path: Path = REPO / "_toc.yml") -> dict[str, Chapter]:
    """Every page of the table of contents with its number and title."""
    toc = yaml.safe_load(toc_path.read_text())
    found = {toc["root"]: Chapter(toc["root"], None, _title(toc["root"]))}
    number = 0
    for part in toc["parts"]:
        for entry in part["chapters"]:
            if part.get("numbered"):
                number += 1
            name = entry["file"]
            found[name] = Chapter(name, number if part.get("numbered") else None, _title(name))
    return found


def _title(name: str) -> str:
    text = (BOOK / f"{name}.md").read_text()
    return re.search(r"^# (.+)$", text, re.M).group(1).strip()


class References:
    """The book's bibliography (``book/references.bib``), for citations in plain text."""

    def __init__(self, path: Path = BOOK / "references.bib") -> None:
        self.data = parse_file(str(path))
        self.style = find_plugin("pybtex.style.formatting", "plain")()
        self.text = find_plugin("pybtex.backends", "plaintext")()

    def _authors(self, key: str) -> str:
        people = self.data.entries[key].persons.get("author", [])
        if not people:
            return self.data.entries[key].fields.get("organization", key)
        last = [" ".join(p.last_names) for p in people]
        last = [re.sub(r"[{}]", "", name) for name in last]
        if len(last) == 1:
            return last[0]
        return f"{last[0]} and {last[1]}" if len(last) == 2 else f"{last[0]} et al."

    def _link(self, key: str) -> str:
        fields = self.data.entries[key].fields
        if "url" in fields:
            return fields["url"]
        if "doi" in fields:
            return f"https://doi.org/{fields['doi']}"
        return f"{HOSTED}/16_references.html"

    def cite(self, keys: str, textual: bool) -> str:
        parts = []
        for key in (k.strip() for k in keys.split(",")):
            year = self.data.entries[key].fields.get("year", "n.d.")
            if textual:
                parts.append(f"{self._authors(key)} ([{year}]({self._link(key)}))")
            else:
                parts.append(f"[{self._authors(key)}, {year}]({self._link(key)})")
        return "; ".join(parts) if textual else "(" + "; ".join(parts) + ")"

    def listing(self) -> str:
        """Every reference, formatted as the HTML's bibliography, as a Markdown list."""
        entries = sorted(self.data.entries, key=lambda k: (self._authors(k), k))
        formatted = self.style.format_entries(self.data.entries[k] for k in entries)
        return "\n".join(f"- {entry.text.render(self.text)}" for entry in formatted)


def _included(argument: str, body: str, source: Path) -> str:
    """The lines a ``{literalinclude}`` shows (``:pyobject:`` supported), as a code block."""
    path = (source.parent / argument.strip()).resolve()
    lines = path.read_text().splitlines()
    options = dict(re.findall(r"^:(\w+):\s*(.*)$", body, re.M))
    if "pyobject" in options:
        node = _find(ast.parse(path.read_text()), options["pyobject"].split("."))
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        lines = lines[start - 1 : node.end_lineno]
        indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
        lines = [line[indent:] for line in lines]
    shown = path.relative_to(REPO).as_posix()
    return f"`{shown}`:\n\n```python\n" + "\n".join(lines) + "\n```"


#: MyST's admonitions: boxes of prose, with a title (``{admonition} Title``) or not.
ADMONITIONS = ("admonition", "note", "tip", "important", "warning")


def _admonition(name: str, argument: str, body: str) -> str:
    """An admonition as Markdown: a quotation under its title, or, collapsed
    (``:class: dropdown``), a ``<details>`` box that opens on a click, as in the HTML."""
    options = dict(re.findall(r"^:(\w+):\s*(.*)$", body, re.M))
    text = "\n".join(line for line in body.splitlines() if not re.match(r"^:\w+:", line))
    title = argument.strip() or name.capitalize()
    if "dropdown" in options.get("class", ""):
        return f"<details><summary>{title}</summary>\n\n{text.strip()}\n\n</details>"
    quoted = "\n".join(f"> {line}".rstrip() for line in text.strip().splitlines())
    return f"> **{title}**\n>\n{quoted}"


def _find(tree: ast.AST, names: list[str]) -> ast.AST:
    for node in getattr(tree, "body", []):
        if getattr(node, "name", None) == names[0]:
            return node if len(names) == 1 else _find(node, names[1:])
    raise ValueError(f"{'.'.join(names)} not found")


#: The HTML book's capsule explorer (chapter 9): a page element and its scripts, which
#: Colab does not run.
EXPLORER = re.compile(
    r'^<div id="capsnotes-explorer">.*?capsnotes-explorer\.js"></script>', re.M | re.S
)
EXPLORER_NOTE = (
    f"*The interactive explorer of this section runs in the [HTML book]({HOSTED}/"
    "09_what_capsules_learned.html), in the browser; the cell below builds a simpler one "
    "with ipywidgets.*"
)


#: The HTML book's routing playground (chapter 5): a page element and its script.
PLAYGROUND = re.compile(
    r'^<div id="capsnotes-playground">.*?capsnotes-playground\.js"></script>', re.M | re.S
)
PLAYGROUND_NOTE = (
    "*The routing playground of this section, where you drag the votes and watch the "
    f"couplings settle, runs in the [HTML book]({HOSTED}/05_routing.html), in the "
    "browser; the figure above shows where it starts.*"
)


def glued_values(cells: list) -> dict[str, str]:
    """The values the executed code ``cells`` glued (``myst_nb.glue``), by name, as the
    text/plain that MyST-NB pastes: read by MyST-NB's own reader of glued outputs (on a
    copy, as it takes them out of the cell)."""
    code = [copy.deepcopy(cell) for cell in cells if cell.cell_type == "code"]
    return {
        name: output["data"].get("text/plain")
        for cell in code
        for name, output in extract_glue_data_cell(cell)
    }


def colab_markdown(
    text: str,
    chapter: Chapter,
    book: dict[str, Chapter],
    refs: References,
    glued: dict[str, str] | None = None,
) -> str:
    """One markdown cell of ``chapter`` in plain Markdown; ``glued`` holds the values the
    chapter's outputs glued (:func:`glued_values`)."""
    text = EXPLORER.sub(EXPLORER_NOTE, text)
    text = PLAYGROUND.sub(PLAYGROUND_NOTE, text)
    source = BOOK / f"{chapter.name}.md"
    labels = _equation_labels(source.read_text())

    def directive(match: re.Match) -> str:
        name, argument, body = match["name"], match["argument"], match["body"]
        if name == "literalinclude":
            return _included(argument, body, source)
        if name == "bibliography":
            return refs.listing()
        if name in ADMONITIONS:
            return _admonition(name, argument, body)
        raise ValueError(f"{source.name}: no Colab form for the directive {{{name}}}")

    def role(match: re.Match) -> str:
        kind, target = match["role"], match["target"]
        if kind in ("cite:p", "cite:t"):
            return refs.cite(target, textual=kind == "cite:t")
        if kind == "doc":
            shown, _, name = target.rpartition(" <")
            name = name.rstrip(">") if shown else target
            page = book[name]
            label = shown or page.title
            return f"[{label}]({HOSTED}/{name}.html)"
        if kind == "eq":
            return f"({chapter.number}.{labels.index(target) + 1})"
        if kind == "glue:text":
            name, _, spec = target.rpartition(":") if ":" in target else (target, "", "")
            if glued is None or name not in glued:
                raise ValueError(f"{source.name}: no glued value {name!r} (execute it first)")
            return format_plain_text(glued[name], spec)
        raise ValueError(f"{source.name}: no Colab form for the role {{{kind}}}")

    def equation(match: re.Match) -> str:
        number = f"{chapter.number}.{labels.index(match['label']) + 1}"
        return f"{match['indent']}\\tag{{{number}}}\n{match['indent']}$$"

    text = DIRECTIVE.sub(directive, text)
    text = re.sub(r"^(?P<indent>[ \t]*)\$\$\s*\((?P<label>[\w-]+)\)", equation, text, flags=re.M)
    return ROLE.sub(role, text)


def _equation_labels(text: str) -> list[str]:
    return [m["label"] for m in EQUATION_LABEL.finditer(text)]


def colab_cells(
    cells: list,
    chapter: Chapter,
    book: dict[str, Chapter],
    refs: References,
    glued: dict[str, str] | None = None,
) -> list:
    """The notebook cells of ``chapter`` for Colab: markdown rewritten (with the values
    ``glued`` by the executed chapter), figure captions moved into the markdown cell
    that follows each figure, code cells unchanged."""
    figure = 0
    caption = None
    for index, cell in enumerate(cells):
        if cell.cell_type == "markdown":
            cell.source = colab_markdown(cell.source, chapter, book, refs, glued)
            if caption is not None:
                cell.source = caption + "\n\n" + cell.source
                caption = None
            continue
        if caption is not None:
            raise ValueError(
                f"{chapter.name}: a figure must be followed by text, cell {index} is code"
            )
        skipped = SKIPPING & set(cell.metadata.get("tags", []))
        if skipped:
            raise ValueError(
                f"{chapter.name}: cell {index} is tagged {', '.join(sorted(skipped))}, but "
                "Colab's Run all honours no tag and would run it: guard it in code instead"
            )
        # collapsed in the HTML (hide-cell) or left out of it (remove-cell, the
        # bookkeeping that glues numbers into the text): a titled form in Colab
        if {"hide-cell", "remove-cell"} & set(cell.metadata.get("tags", [])):
            if not cell.source.startswith("#@title "):
                raise ValueError(f"{chapter.name}: a collapsed cell needs a #@title line")
            cell.metadata["cellView"] = "form"
        text = cell.metadata.get("mystnb", {}).get("figure", {}).get("caption")
        if text is not None:
            figure += 1
            text = colab_markdown(" ".join(text.split()), chapter, book, refs, glued)
            caption = f"**Fig. {chapter.number}.{figure}** {text}"
    if caption is not None:
        raise ValueError(f"{chapter.name}: the last figure needs a markdown cell after it")
    return cells


def myst_left_in(text: str) -> list[str]:
    """The MyST-only syntax found in ``text`` (empty when it reads the same in Colab)."""
    return [match.group(0) for pattern in MYST_ONLY for match in pattern.finditer(text)]
