"""The pinned test environment, as the tools behave: the floors the package declares,
read for the floor lane; a refresh of the notebooks refused outside the pinned versions
(what it executes and records: tests/test_book.py); and a run of the comparison with
other versions than the outputs were made with, said so by name in one line."""

from __future__ import annotations

import pytest

from book import conftest as book_conftest
from tools import pin_environment, refresh_notebooks


def test_the_floors_are_the_lowest_versions_the_project_requires(tmp_path):
    """Each requirement of [project] dependencies with its lower bound (upper bounds and
    environment markers aside); the extras' and the tools' tables are not the package's
    requirements."""
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        "[project]\n"
        'name = "x"\n'
        "dependencies = [\n"
        '    "torch>=2.11",\n'
        '    "jupyter-book>=1.0.2,<2",\n'
        "    \"numpy >= 1.26 ; python_version >= '3.11'\",\n"
        "]\n\n"
        "[project.optional-dependencies]\n"
        'test = ["pytest>=8"]\n\n'
        "[tool.x]\n"
        'dependencies = ["tqdm>=4"]\n'
    )
    assert pin_environment.declared_floors(pyproject) == {
        "torch": "2.11",
        "jupyter-book": "1.0.2",
        "numpy": "1.26",
    }


def test_a_requirement_without_a_floor_is_refused(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["torch>=2.11", "tqdm"]\n')
    with pytest.raises(SystemExit, match="'tqdm' declares no floor"):
        pin_environment.declared_floors(pyproject)


def test_refreshing_refuses_an_environment_other_than_the_pinned_one(tmp_path, monkeypatch):
    constraints = tmp_path / "test.txt"
    constraints.write_text("torch==0.0.1\nnbval==0.11.0\n")
    versions = {"torch": "2.15.0", "nbval": "0.11.0"}
    monkeypatch.setattr(refresh_notebooks, "version", lambda name: versions[name])
    monkeypatch.setattr(refresh_notebooks, "REPO", tmp_path)
    with pytest.raises(SystemExit, match=r"torch 2\.15\.0 \(pinned: 0\.0\.1\)") as refused:
        refresh_notebooks.check_environment(constraints)
    assert "nbval" not in str(refused.value).split("install")[0]
    assert "uv pip install -e '.[test]' -c test.txt" in str(refused.value)


def test_a_run_with_other_versions_says_which_in_one_line(monkeypatch):
    made = {"torch": {"2.15.0"}, "matplotlib": {"3.11.2"}, "nbval": {"0.11.0"}}
    monkeypatch.setattr(book_conftest, "executed_with", lambda: made)
    here = {"torch": "2.16.0", "matplotlib": "3.11.2", "nbval": "0.11.0"}
    monkeypatch.setattr(book_conftest, "running", lambda name: here[name])
    line = book_conftest.versions_line()
    assert "\n" not in line and "VERSIONS DIFFER" in line
    assert "torch 2.16.0 (outputs made with 2.15.0)" in line
    assert "matplotlib" not in line and "nbval" not in line
    here["torch"] = "2.15.0"
    line = book_conftest.versions_line()
    assert "DIFFER" not in line and "torch 2.15.0" in line
