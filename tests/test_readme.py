"""The README's figure is chapter 1's architecture diagram as its committed notebook
shows it (tools/refresh_notebooks.py writes the file when it executes chapter 1)."""

import nbformat

from tests.conftest import REPO
from tools.refresh_notebooks import README_FIGURE, figure_output


def test_the_readme_figure_is_the_chapter_s_committed_output():
    chapter, figure, path = README_FIGURE
    notebook = nbformat.read(REPO / "book" / f"{chapter}.ipynb", as_version=4)
    assert path.read_text() == figure_output(notebook, figure), (
        f"{path.relative_to(REPO)} is not chapter {chapter}'s {figure}: "
        f"python tools/refresh_notebooks.py {chapter[:2]}"
    )
    assert f"]({path.relative_to(REPO)})" in (REPO / "README.md").read_text()
