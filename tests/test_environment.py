"""The pinned test environment and how the chapters' outputs are compared: exact pins
(names and versions only), floors that are the package's declared ones, notebooks
executed in the pinned versions, and a run with other versions said so by name."""

from __future__ import annotations

import re

import nbformat
import pytest

from book import conftest as book_conftest
from tests.conftest import REPO
from tools import pin_environment, refresh_notebooks

PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!-]+$")


@pytest.mark.parametrize("name", ["test.txt", "floor.txt"])
def test_constraints_are_exact_names_and_versions_only(name):
    lines = (REPO / "constraints" / name).read_text().splitlines()
    assert len(lines) > 50
    for line in lines:
        assert PIN.match(line), f"constraints/{name}: {line!r} is not name==version"
    names = [line.split("==")[0].lower() for line in lines]
    assert len(names) == len(set(names)), "a package pinned twice"
    for needed in ("torch", "torchvision", "matplotlib", "nbval", "pytest", "jupyter-book"):
        assert needed in names


def test_the_floor_pins_are_the_floors_the_package_declares():
    floors = pin_environment.declared_floors()
    assert {"torch", "torchvision", "matplotlib"} <= set(floors)
    pinned = refresh_notebooks.pinned_versions(REPO / "constraints" / "floor.txt")
    for name, floor in floors.items():
        # "0.4" is met by the release 0.4.0
        assert pinned[name.lower()] in (floor, f"{floor}.0"), name
    test = refresh_notebooks.pinned_versions()
    assert test["torch"] != pinned["torch"], "the floor lane would test nothing new"


def test_a_requirement_without_a_floor_is_refused(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["torch>=2.11", "tqdm"]\n')
    with pytest.raises(SystemExit, match="'tqdm' declares no floor"):
        pin_environment.declared_floors(pyproject)


def test_every_notebook_was_executed_in_the_pinned_environment():
    pins = refresh_notebooks.pinned_versions()
    for path in sorted((REPO / "book").glob("*.ipynb")):
        made = nbformat.read(path, as_version=4).metadata["capsnotes"]
        assert made["kernels"] == "ATEN_CPU_CAPABILITY=default", path.name
        for name in refresh_notebooks.RECORDED:
            assert made["executed_with"][name] == pins[name], (path.name, name)


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
