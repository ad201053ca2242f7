"""Every command line's ``--help`` prints its usage and writes nothing: each script in
``benchmarks/`` and ``tools/`` that has a command line (found by its ``__main__`` block,
so a new script is covered without being named here), ``python -m capsnotes`` and each of
its commands, run as ``__main__`` in a copy of the tracked tree, whose every file is the
same after each as before.

The commands run one after another in one process of their own (:data:`RUNNER`), as
``python -m`` and ``python path`` run them (``runpy``): a process each would spend most of
its time starting Python and importing torch, thirty times over."""

from __future__ import annotations

import json
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


#: Runs each command of ``argv[1]`` (JSON) with ``--help`` in this process, in the
#: current folder, and prints one JSON line per command: its exit code, what it printed,
#: and the files of the folder it created, deleted or changed.
RUNNER = """
import contextlib, hashlib, io, json, runpy, sys, traceback
from pathlib import Path

def tracked():
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path().rglob("*")) if p.is_file() or p.is_symlink()}

for command in json.loads(sys.argv[1]):
    before, out, err, code = tracked(), io.StringIO(), io.StringIO(), 0
    module = command[1] if command[0] == "-m" else None
    sys.argv = [module or command[0], *command[2 if module else 1:], "--help"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if module:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(command[0], run_name="__main__")
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (done.code is not None)
        except BaseException:
            traceback.print_exc()
            code = -1
    after = tracked()
    print(json.dumps({
        "command": command, "returncode": code, "stdout": out.getvalue(),
        "stderr": err.getvalue(),
        "created": sorted(after.keys() - before.keys()),
        "deleted": sorted(before.keys() - after.keys()),
        "changed": sorted(k for k in before.keys() & after.keys() if before[k] != after[k]),
    }), flush=True)
"""


@pytest.fixture(scope="module")
def helped(tree) -> dict[str, dict]:
    """What each command's ``--help`` did, by the command's words, from :data:`RUNNER`."""
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(COMMANDS)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {" ".join(result["command"]): result for result in results}


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_prints_the_usage_and_changes_no_file(helped, command):
    done = helped[" ".join(command)]
    files = done["created"], done["deleted"], done["changed"]
    assert files == ([], [], []), "files created, deleted, changed"
    assert done["returncode"] == 0, done["stderr"][-2000:]
    assert "usage:" in done["stdout"].lower(), done["stdout"][-2000:]
