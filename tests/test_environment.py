"""The pinned test environment and how the chapters' outputs are compared: exact pins
(names and versions only), floors that are the package's declared ones, notebooks
executed in the pinned versions, a run with other versions said so by name, and the
sanitizer that removes float noise from diagrams and nothing else."""

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


def sanitized(text: str) -> str:
    from nbval.plugin import get_sanitize_patterns

    for regex, replace in get_sanitize_patterns(book_conftest.SANITIZER.read_text()):
        text = re.sub(regex, replace, text)
    return text


SVG = (
    '<g id="patch_3"><path d="M 46.8 73.688604 L {x} 73.688604 z" '
    'clip-path="url(#p{clip})" style="fill: #d55e00; opacity: {alpha}"/></g>'
    '<text x="{x}" y="80.5" style="font-size: 9px">{label}</text>'
    '<use xlink:href="#m{clip}" x="{x}" y="3"/><clipPath id="p{clip}"/>'
)


def test_the_sanitizer_removes_a_diagram_s_float_noise_and_nothing_it_shows():
    one = SVG.format(x="51.335346", clip="cdca8b8c59", alpha="0.7", label="r = 3")
    noisy = SVG.format(x="51.335345", clip="0123456789", alpha="0.700001", label="r = 3")
    relabelled = SVG.format(x="51.335346", clip="cdca8b8c59", alpha="0.7", label="r = 2")
    recoloured = one.replace("#d55e00", "#0072b2")
    assert sanitized(one) == sanitized(noisy)
    assert sanitized(one) != sanitized(relabelled)
    assert sanitized(one) != sanitized(recoloured)
    # printed numbers, counts and words are compared as they are
    for printed in ("margin loss 0.266, test 91.8%", "changes 0 answers", "x=0.146 d=2"):
        assert sanitized(printed) == printed
