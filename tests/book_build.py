"""Building the book once per test session, from a fresh copy of the repository.

The copy holds what a clone would (the files git tracks, and new files it does not
ignore). Its execution cache is seeded with the committed, executed notebooks, whose
code cells are exactly the chapters' (tools/colab.py changes only markdown), so the
build renders the committed outputs instead of running every chapter a second time;
nbval runs each notebook in the same test session and compares those outputs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def repository_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    return [name for name in listed.decode().split("\0") if name and (REPO / name).exists()]


def fresh_copy(target: Path) -> Path:
    for name in repository_files():
        source, copy = REPO / name, target / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            copy.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, copy)
    return target


def seed_execution_cache(repo: Path) -> int:
    """Put every committed notebook into jupyter-book's cache; returns how many.

    jupyter-cache finds a chapter's entry by a hash of its code cells with their metadata,
    so the one key tools/colab.py adds for Colab (``cellView``, on collapsed cells) is
    dropped first: with it, every chapter with a collapsed solution missed the cache and
    the build ran it again (7 minutes of a test run)."""
    import jupytext
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache = get_cache(str(repo / "_build" / ".jupyter_cache"))
    notebooks = sorted((repo / "book").glob("*.ipynb"))
    for path in notebooks:
        notebook = nbformat.read(path, as_version=4)
        for cell in notebook.cells:
            cell.metadata.pop("cellView", None)
        source = path.with_suffix(".md")
        _, built = cache.create_hashed_notebook(jupytext.read(source))
        _, seeded = cache.create_hashed_notebook(notebook)
        assert seeded == built, f"{path.name}: its code cells are not those of {source.name}"
        # jupyter-cache's validity check wants every code cell executed; a cell tagged
        # skip-execution (run by hand) never is, and the build's own execution skips it
        # too (tests/test_book.py checks that every other cell ran).
        cache.cache_notebook_bundle(CacheBundleIn(notebook, str(source)), check_validity=False)
    return len(notebooks)


def build_book(target: Path) -> tuple[Path, subprocess.CompletedProcess]:
    """``jupyter-book build book`` (warnings as errors) in a fresh copy under ``target``;
    returns the HTML folder and the finished process."""
    repo = fresh_copy(target / "repo")
    seed_execution_cache(repo)
    jupyter_book = shutil.which("jupyter-book", path=str(Path(sys.executable).parent))
    assert jupyter_book, "jupyter-book is not installed (pip install -e '.[book]')"
    result = subprocess.run(
        [jupyter_book, "build", "book", "-W", "-n", "--keep-going"],
        cwd=repo,
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=1800,
    )
    return repo / "_build" / "html", result
