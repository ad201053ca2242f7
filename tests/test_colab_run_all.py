"""Colab's "Run all" on a CPU runtime: every cell of the chapters with a GPU or training
cell (14, 10, 11), top to bottom, with no cell tag honoured (Colab honours none),
finishes in seconds without an exception. The cells that need a GPU say so in a line;
the long runs wait for a flag at the top of the chapter that is off.

The chapters are run from their MyST source, whose code cells are the notebook's
(tests/test_book.py checks that the notebooks match their sources)."""

from __future__ import annotations

import os

import jupytext
import nbclient
import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

BOOK = REPO / "book"


def run_all(chapter: str, data_root) -> list[str]:
    """Execute every code cell of ``chapter`` as Colab's Run all does, in a kernel on
    this CPU; returns each code cell's printed text."""
    notebook = jupytext.read(BOOK / f"{chapter}.md")
    for cell in notebook.cells:  # no tag is honoured, as in Colab
        cell.metadata.pop("tags", None)
    client = nbclient.NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(BOOK)}},
        skip_cells_with_tag="no tag has this name",
        allow_errors=False,
    )
    environment = {"CAPSNOTES_DATA": str(data_root), "CUDA_VISIBLE_DEVICES": ""}
    saved = {key: os.environ.get(key) for key in environment}
    os.environ.update(environment)  # the kernel inherits them: a CPU runtime
    try:
        client.execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return [
        "".join(output.get("text", "") for output in cell.get("outputs", []))
        for cell in notebook.cells
        if cell.cell_type == "code"
    ]


def test_chapter_14_runs_all_on_a_cpu_runtime(mnist_root):
    assert not (BOOK / "runs").exists()  # where a training cell would write
    printed = run_all("14_training_on_a_gpu", mnist_root)
    needs_gpu = [text for text in printed if text.startswith("needs a GPU")]
    assert len(needs_gpu) == 4, printed  # the card, its run, the probe, the training
    assert all(text.count("\n") == 1 for text in needs_gpu)  # one line each
    assert not (BOOK / "runs").exists()  # nothing was trained


@pytest.mark.parametrize(
    ("chapter", "flag"),
    [("10_does_routing_matter", "TRAIN_ROW"), ("11_multimnist", "TRAIN_MULTIMNIST")],
)
def test_a_chapter_s_training_cell_waits_for_its_flag(chapter, flag, mnist_root):
    assert not (BOOK / "runs").exists()
    printed = run_all(chapter, mnist_root)
    assert f"{flag} is False: set it at the top of the chapter" in "".join(printed)
    assert not (BOOK / "runs").exists()
