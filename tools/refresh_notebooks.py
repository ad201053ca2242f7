"""Regenerate the committed notebooks (book/*.ipynb) from their MyST sources (book/*.md).

Each chapter is converted with jupytext, executed top to bottom in book/ (as the book
build and nbval run it) and written next to its source with its outputs, which nbval
then compares against. Run from the repository root:

    python tools/refresh_notebooks.py            # every chapter
    python tools/refresh_notebooks.py 03 08      # chapters whose file names start so

Set CAPSNOTES_DATA if MNIST is not in the default data folder. The outputs are those of
the machine you run this on: commit them from a CPU run (CI compares on a CPU).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

BOOK = Path(__file__).resolve().parents[1] / "book"


def chapters(prefixes: list[str]) -> list[Path]:
    sources = sorted(
        path for path in BOOK.glob("*.md") if path.read_text().startswith("---\njupytext:")
    )
    if prefixes:
        sources = [p for p in sources if any(p.name.startswith(x) for x in prefixes)]
    return sources


def refresh(source: Path) -> float:
    notebook = jupytext.read(source)
    started = time.perf_counter()
    NotebookClient(
        notebook,
        timeout=1800,
        kernel_name="python3",
        resources={"metadata": {"path": str(BOOK)}},
        record_timing=False,
    ).execute()
    seconds = time.perf_counter() - started
    for cell in notebook.cells:  # keep the files stable between runs
        cell.metadata.pop("execution", None)
    notebook.metadata.pop("language_info", None)
    nbformat.validate(notebook)
    jupytext.write(notebook, source.with_suffix(".ipynb"), fmt="ipynb")
    return seconds


def main(argv: list[str]) -> int:
    selected = chapters(argv)
    if not selected:
        print("no chapter matches", argv, file=sys.stderr)
        return 1
    for source in selected:
        seconds = refresh(source)
        print(f"{source.name}: executed in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
