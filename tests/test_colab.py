"""Chapters run as Colab runs them: capsnotes installed the way the install cell does
(pip from a git URL, at the pinned commit; here a clone of this repository), and the
notebook executed from a folder that holds nothing but the notebook file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import REPO

pytestmark = pytest.mark.slow

#: A chapter that reads no repository file (the records chapters clone the repository)
#: and uses what the install brings: capsbook's helpers and a shipped model's weights.
#: One is enough to try the install: nbval runs every chapter in the repository.
CHAPTERS = ("02_squash",)
URL = re.compile(r'f"capsnotes @ git\+https://github\.com/capsnotes/capsnotes@\{COMMIT\}"')
COMMIT = re.compile(r'^COMMIT = "([0-9a-f]{40})"', re.M)


def test_chapters_run_outside_the_repository(tmp_path: Path, mnist_root: Path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    site = tmp_path / "site-packages"
    env = dict(os.environ, PYTHONPATH=str(site), CAPSNOTES_DATA=str(mnist_root))
    commits = set()
    for name in CHAPTERS:
        notebook = nbformat.read(REPO / "book" / f"{name}.ipynb", as_version=4)
        install = notebook.cells[
            next(i for i, c in enumerate(notebook.cells) if c.cell_type == "code")
        ]
        assert URL.search(install.source), install.source
        (commit,) = COMMIT.findall(install.source)
        if commit not in commits:
            # what the install cell runs on Colab, with the repository's URL made local
            url = f"capsnotes @ git+file://localhost{clone}@{commit}"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--no-deps",
                    "--no-build-isolation",
                    "--target",
                    str(site),
                    url,
                ],
                check=True,
                capture_output=True,
            )
            commits.add(commit)
        folder = tmp_path / f"colab-{name}"
        folder.mkdir()
        # the notebook alone, plus one cell that says where capsnotes came from
        notebook.cells.append(
            nbformat.v4.new_code_cell("import capsnotes\nprint(capsnotes.__file__)")
        )
        nbformat.write(notebook, folder / f"{name}.ipynb")
        client = NotebookClient(
            notebook,
            timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": str(folder)}},
        )
        client.execute(env=env)
        errors = [
            output
            for cell in notebook.cells
            if cell.cell_type == "code"
            for output in cell.get("outputs", [])
            if output.output_type == "error"
        ]
        assert errors == [], errors
        where = notebook.cells[-1].outputs[0]["text"].strip()
        assert where.startswith(str(site)), f"{name} imported capsnotes from {where}"
        assert sorted(p.name for p in folder.iterdir()) == [f"{name}.ipynb"]
