"""Building the book from a fresh copy of the repository, as a newcomer's clone would.

The copy holds what a clone would (the files git tracks, and new files it does not
ignore). The build runs with no dataset to be found and no network to download one
from: it renders the committed notebooks' outputs and must need neither."""

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


def offline_environment(home: Path) -> dict[str, str]:
    """The environment of a newcomer's machine with no MNIST and no network: an empty
    data root and cache, and every download sent to a port where nothing listens."""
    (home / "data").mkdir(parents=True, exist_ok=True)
    dead = "http://127.0.0.1:9"
    return dict(
        os.environ,
        CAPSNOTES_DATA=str(home / "data"),
        CAPSNOTES_CACHE=str(home / "cache"),
        HTTP_PROXY=dead,
        HTTPS_PROXY=dead,
        http_proxy=dead,
        https_proxy=dead,
    )


def build_book(
    target: Path, warnings_as_errors: bool = True
) -> tuple[Path, subprocess.CompletedProcess]:
    """``jupyter-book build book`` in the copy of the repository at ``target`` (made
    first if it is not there), offline and without MNIST; returns the HTML folder and the
    finished process."""
    repo = target / "repo"
    if not repo.is_dir():
        fresh_copy(repo)
    jupyter_book = shutil.which("jupyter-book", path=str(Path(sys.executable).parent))
    assert jupyter_book, "jupyter-book is not installed (pip install -e '.[book]')"
    strict = ["-W", "-n", "--keep-going"] if warnings_as_errors else []
    result = subprocess.run(
        [jupyter_book, "build", "book", *strict],
        cwd=repo,
        capture_output=True,
        text=True,
        env=offline_environment(target / "home"),
        timeout=600,
    )
    return repo / "_build" / "html", result
