"""The book's chapters as Sphinx reads them: each MyST source with the outputs of its
committed notebook, so that `jupyter-book build book` executes nothing.

`_config.yml` names :func:`read_chapter` as MyST-NB's reader of ``.md`` files
(``nb_custom_formats``) and turns execution off. The chapter's text, roles, directives
and figure captions come from ``book/NN_name.md``, as the author wrote them; the outputs
(printed values, figures, glued numbers) come from ``book/NN_name.ipynb``, which
``tools/refresh_notebooks.py`` executed and which ``pytest --nbval`` re-executes and
compares. A notebook whose code cells differ from its source's stops the build with the
chapter's name and the command that refreshes it: a page never shows outputs of other code.

MyST-NB hands a reader the file's text but not its name, so the chapter is found by its
text among the book's sources. Hand-written: jupytext pairs a text file with a notebook,
but only through the files' paths, which MyST-NB does not pass to a reader; MyST-NB's
``execution_mode: off`` reads outputs only from a page that is itself a notebook (here,
the Colab form, without the roles and directives the HTML renders), and its ``cache``
mode executes the chapters, which the build (no PyTorch) cannot.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from myst_nb.core.read import read_myst_markdown_notebook
from sphinx.errors import SphinxError

BOOK = Path(__file__).resolve().parents[1]


class StaleChapter(SphinxError):
    """A chapter whose committed notebook was not made from its current source (a Sphinx
    error, which stops the build with this message and no traceback)."""

    category = "Chapter out of step with its notebook"


def chapter_source(text: str, book: Path = BOOK) -> Path | None:
    """The source file under ``book`` whose text is ``text`` (None if there is none)."""
    for path in sorted(book.glob("*.md")):
        if path.read_text(encoding="utf-8") == text:
            return path
    return None


def code_sources(notebook: nbformat.NotebookNode) -> list[str]:
    return [cell.source.strip() for cell in notebook.cells if cell.cell_type == "code"]


def with_committed_outputs(notebook: nbformat.NotebookNode, source: Path) -> None:
    """Give the code cells of ``notebook`` (read from ``source``) the outputs of the
    notebook committed beside it; raises :class:`StaleChapter` if the two disagree."""
    refresh = f"python tools/refresh_notebooks.py {source.stem[:2]}"
    paired = source.with_suffix(".ipynb")
    if not paired.is_file():
        raise StaleChapter(f"{source.name} has no executed notebook {paired.name}: run {refresh}")
    committed = nbformat.read(paired, as_version=4)
    if code_sources(committed) != code_sources(notebook):
        raise StaleChapter(
            f"{paired.name} was not made from the current {source.name} (their code cells "
            f"differ), so its outputs are not this chapter's: run {refresh}"
        )
    executed = (cell for cell in committed.cells if cell.cell_type == "code")
    for cell in notebook.cells:
        if cell.cell_type == "code":
            done = next(executed)
            cell.outputs = done.get("outputs", [])
            cell.execution_count = done.get("execution_count")


def read_chapter(text: str) -> nbformat.NotebookNode:
    """MyST-NB's reader for the book's ``.md`` files: a chapter (a MyST notebook) with its
    committed outputs; any other page as plain MyST markdown cells."""
    # MyST-NB's own reading of a MyST notebook, as without this reader; the source map
    # gives warnings their line numbers
    notebook = read_myst_markdown_notebook(text, add_source_map=True)
    source = chapter_source(text)
    if source is not None and text.startswith("---\njupytext:"):
        with_committed_outputs(notebook, source)
    return notebook
