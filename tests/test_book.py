"""The book: paired sources in sync, table of contents, Colab links, the README's
commands, and (slow) a full `jupyter-book build book` with warnings as errors."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml

from tests.conftest import REPO

BOOK = REPO / "book"
CONFIG = yaml.safe_load((REPO / "_config.yml").read_text())
TOC = yaml.safe_load((REPO / "_toc.yml").read_text())


def toc_files() -> list[str]:
    files = [TOC["root"]]
    for part in TOC.get("parts", []):
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


def chapter_sources() -> list[Path]:
    return sorted(p for p in BOOK.glob("*.md") if p.read_text().startswith("---\njupytext:"))


def test_every_toc_entry_exists_and_every_chapter_is_listed():
    for name in toc_files():
        assert (BOOK / f"{name}.md").is_file(), name
    listed = set(toc_files())
    for source in chapter_sources():
        assert source.stem in listed, f"{source.name} is not in _toc.yml"


def test_book_toc_is_the_top_level_one():
    # jupyter-book looks for the table of contents in book/; it must be the real one
    assert (BOOK / "_toc.yml").resolve() == (REPO / "_toc.yml").resolve()


@pytest.mark.parametrize("source", chapter_sources(), ids=lambda p: p.stem)
def test_notebook_pair_is_in_sync(source):
    paired = source.with_suffix(".ipynb")
    assert paired.is_file(), f"{paired.name} is missing: run python tools/refresh_notebooks.py"
    text = jupytext.read(source)
    notebook = nbformat.read(paired, as_version=4)
    nbformat.validate(notebook)

    def cells(nb):
        return [(c.cell_type, c.source, sorted(c.metadata.get("tags", []))) for c in nb.cells]

    assert cells(text) == cells(notebook), (
        f"{source.name} and {paired.name} differ: run python tools/refresh_notebooks.py "
        f"{source.stem[:2]}"
    )
    assert notebook.metadata["accelerator"] == "GPU"  # Colab: ask for a GPU runtime
    assert notebook.metadata["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("source", chapter_sources(), ids=lambda p: p.stem)
def test_notebooks_are_executed_and_install_capsnotes_only_on_colab(source):
    notebook = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "committed without outputs"
    first = code[0].source
    assert 'if "google.colab" in sys.modules:' in first and "pip" in first
    assert "capsnotes @ git+" + CONFIG["repository"]["url"] in first


def test_colab_links_point_at_notebooks_in_the_repository():
    url = CONFIG["repository"]["url"]
    owner_repo = url.removeprefix("https://github.com/")
    assert CONFIG["launch_buttons"]["colab_url"] == "https://colab.research.google.com"
    assert CONFIG["repository"]["path_to_book"] == "book"
    assert "*.ipynb" in CONFIG["exclude_patterns"]  # so Sphinx reads the .md sources
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", owner_repo), url
    assert CONFIG["repository"]["branch"] == "main"
    for source in chapter_sources():  # the button opens blob/main/book/<chapter>.ipynb
        assert source.with_suffix(".ipynb").is_file(), source.name


def test_readme_starts_with_the_two_commands_and_ci_runs_the_test_one():
    readme = (REPO / "README.md").read_text()
    commands = re.findall(r"```sh\n(.+?)\n```", readme)
    assert len(commands) >= 2
    build, test = commands[0], commands[1]
    assert build.endswith("jupyter-book build book") and "pip install" in build
    assert "pytest --nbval" in test and "pip install" in test
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == test, ".ci/run must run the README's test command unchanged"
    before_tests = readme.split("```sh", 1)[0]
    assert len(before_tests.splitlines()) < 15, "the commands belong at the top of the README"


@pytest.mark.slow
def test_the_book_builds_without_warnings(tmp_path):
    """`jupyter-book build book` from the repository root, warnings as errors, every
    chapter executed, and every chapter page with its Colab button."""
    jupyter_book = shutil.which("jupyter-book", path=str(Path(sys.executable).parent))
    assert jupyter_book, "jupyter-book is not installed (pip install -e '.[book]')"
    result = subprocess.run(
        [jupyter_book, "build", "book", "-W", "-n", "--keep-going", "--path-output", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=1800,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    html = tmp_path / "_build" / "html"
    owner_repo = CONFIG["repository"]["url"].removeprefix("https://github.com/")
    for source in chapter_sources():
        page = (html / f"{source.stem}.html").read_text()
        link = f"colab.research.google.com/github/{owner_repo}/blob/main/book/{source.stem}.ipynb"
        assert link in page, f"{source.stem}.html has no Colab link to its notebook"
        assert "Traceback" not in page and "cell_output" in page, source.stem
    figures = sum((html / f"{s.stem}.html").read_text().count("<figure") for s in chapter_sources())
    assert figures >= 15
