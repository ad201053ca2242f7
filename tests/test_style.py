"""The code base is ruff-clean: its lint rules (pyproject.toml), its formatting, and no
private member of another module in the package or the book's helpers (ruff's SLF001:
torch's private APIs change between the versions the two CI lanes install).

Hand-written rather than with pytest-ruff: that plugin is not in the pinned test
environment (constraints/test.txt), and adding it means re-pinning and re-executing
every chapter. A test rather than a step of .ci/run: every run of pytest runs it, a
contributor's and both lanes of .ci/run and of .github/workflows/tests.yml alike, with
no second list of steps to keep in step."""

import subprocess
import sys

from tests.conftest import REPO

#: Each ruff command CI holds the code to, by what it checks.
RUFF = {
    "lint": ["check", "."],
    "formatting": ["format", "--check", "."],
    "private members": ["check", "--select", "SLF001", "capsnotes", "book/capsbook"],
}


def test_ruff_finds_nothing():
    said = {}
    for what, command in RUFF.items():
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *command], cwd=REPO, capture_output=True, text=True
        )
        if result.returncode != 0:
            said[what] = result.stdout + result.stderr
    assert not said, "\n".join(f"ruff ({what}):\n{text}" for what, text in said.items())
