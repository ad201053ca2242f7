"""Colab's "Run all" honours no cell tag, so no chapter skips a cell: what nbval runs on
the test machine's CPU, top to bottom in one kernel, is what Run all runs on a CPU
runtime. Cells that need a GPU or hours of training guard themselves in code; on a CPU
each prints one line saying what it would do. The committed notebooks were executed on
a CPU (tools/refresh_notebooks.py), so they show those lines."""

from __future__ import annotations

import jupytext
import nbformat
import pytest

from tests.conftest import REPO

BOOK = REPO / "book"
CHAPTERS = sorted(p for p in BOOK.glob("*.md") if p.read_text().startswith("---\njupytext:"))
#: The tags with which a runner would leave a cell out: Colab honours neither.
SKIPPING = {"skip-execution", "nbval-skip", "remove-cell-execution"}


@pytest.mark.parametrize("source", CHAPTERS, ids=lambda p: p.stem)
def test_no_chapter_skips_a_cell(source):
    for cell in jupytext.read(source).cells:
        skipped = SKIPPING & set(cell.metadata.get("tags", []))
        assert not skipped, f"{source.name}: a cell tagged {skipped} runs in Colab anyway"


def printed(chapter: str) -> list[str]:
    """Each code cell's printed text in the committed notebook of ``chapter``."""
    notebook = nbformat.read(BOOK / f"{chapter}.ipynb", as_version=4)
    return [
        "".join(o.get("text", "") for o in cell.get("outputs", []))
        for cell in notebook.cells
        if cell.cell_type == "code"
    ]


def test_chapter_14_s_gpu_cells_each_say_in_one_line_that_they_need_a_gpu():
    needs_gpu = [text for text in printed("14_training_on_a_gpu") if "needs a GPU" in text]
    # the card, the run built for it, the 50-step probe, the 100 epochs
    assert len(needs_gpu) == 4
    assert all(text.startswith("needs a GPU: would ") for text in needs_gpu)
    assert all(text.count("\n") == 1 for text in needs_gpu)


@pytest.mark.parametrize(
    ("chapter", "flag"),
    [("10_does_routing_matter", "TRAIN_ROW"), ("11_multimnist", "TRAIN_MULTIMNIST")],
)
def test_a_chapter_s_training_cell_waits_for_its_flag(chapter, flag):
    source = (BOOK / f"{chapter}.md").read_text()
    assert f"\n{flag} = False\n" in source  # off at the top of the chapter
    said = [text for text in printed(chapter) if f"{flag} is False" in text]
    assert len(said) == 1
    assert said[0].startswith(f"{flag} is False: set it at the top of the chapter")
