"""Every command line's ``--help`` prints its usage and writes nothing: each script in
``benchmarks/`` and ``tools/`` that has a command line (found by its ``__main__`` block,
so a new script is covered without being named here), ``python -m capsnotes`` and each of
its commands, run as processes of their own in a copy of the tracked tree, whose every
file is the same after as before."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from capsnotes.training.config import PROFILES
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def scripts() -> list[list[str]]:
    """The command of each script with a command line: ``-m benchmarks.NAME`` or
    ``tools/NAME.py``."""
    found = []
    for folder, command in (
        ("benchmarks", lambda p: ["-m", f"benchmarks.{p.stem}"]),
        ("tools", lambda p: [f"tools/{p.name}"]),
    ):
        for path in sorted((REPO / folder).glob("*.py")):
            if "__name__ == " in path.read_text():
                found.append(command(path))
    return found


#: ``python -m capsnotes`` and its commands (``train NAME``: each profile's options).
CAPSNOTES = [[], ["train"], ["evaluate"], ["affine"], ["profiles"], ["train", "--profile"]]
CAPSNOTES += [["train", name] for name in PROFILES]

COMMANDS = scripts() + [["-m", "capsnotes", *words] for words in CAPSNOTES]


def tracked(root: Path) -> dict[str, str]:
    """Every file under ``root`` by its path, with its content's SHA-256."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() or path.is_symlink()
    }


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of the files git tracks (the tree as committed, nothing built)."""
    root = tmp_path_factory.mktemp("tree")
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    return root


def test_the_scripts_are_found():
    assert ["-m", "benchmarks.floor"] in COMMANDS
    assert ["tools/pin_environment.py"] in COMMANDS
    assert ["-m", "benchmarks.record"] not in COMMANDS  # a module, not a command


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_prints_the_usage_and_changes_no_file(tree, command):
    before = tracked(tree)
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        [sys.executable, *command, "--help"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    after = tracked(tree)
    created, deleted = sorted(after.keys() - before.keys()), sorted(before.keys() - after.keys())
    changed = sorted(name for name in before.keys() & after.keys() if before[name] != after[name])
    assert (created, deleted, changed) == ([], [], []), "files created, deleted, changed"
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout.lower(), done.stdout[-2000:]
