"""The nbval plugin that compares glued floats within a tolerance (tests/nbval_glue.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import nbformat
import pytest

from tests.conftest import REPO
from tests.nbval_glue import GLUE_PREFIX, glued_floats_within_tolerance

GLUED = GLUE_PREFIX + "text/plain"


def display(data: dict) -> dict:
    return nbformat.v4.new_output("display_data", data=data)


def test_a_glued_float_within_the_tolerance_takes_the_reference_text():
    reference = [display({GLUED: "784.0000499514215"})]
    test = [display({GLUED: "783.9999871919442"})]
    assert glued_floats_within_tolerance(test, reference) == reference
    assert test[0]["data"][GLUED] == "783.9999871919442"  # the input is not changed


@pytest.mark.parametrize(
    "ours, theirs",
    [
        ({GLUED: "784.1"}, {GLUED: "784.0"}),  # a real difference
        ({GLUED: "'784.00001'"}, {GLUED: "'784.0'"}),  # text, not a float
        ({"text/plain": "784.00000001"}, {"text/plain": "784.0"}),  # printed, not glued
    ],
)
def test_anything_else_is_left_for_nbval_to_compare_exactly(ours, theirs):
    test = [display(ours)]
    assert glued_floats_within_tolerance(test, [display(theirs)]) == test


def test_outputs_that_do_not_pair_up_are_left_alone():
    test = [display({GLUED: "1.0000001"}), display({GLUED: "2.0"})]
    assert glued_floats_within_tolerance(test, [display({GLUED: "1.0"})]) == test


@pytest.mark.slow
def test_nbval_with_the_plugin_passes_rounding_and_fails_a_real_difference(tmp_path):
    """Real nbval runs on a notebook whose stored glue differs from what its cell
    computes: by rounding (passes) and in the fourth digit (fails)."""
    code = (
        "from IPython.display import display\n"
        f"display({{'{GLUED}': repr(783.9999871919442)}}, raw=True)"
    )
    for stored, expected in (("784.0000499514215", 0), ("784.1", 1)):
        cell = nbformat.v4.new_code_cell(code, execution_count=1)
        cell.outputs = [display({GLUED: stored})]
        path = tmp_path / f"glued_{expected}.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=[cell]), path)
        (tmp_path / "pytest.ini").write_text("[pytest]\n")
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
            + ["-p", "tests.nbval_glue", "--nbval", path.name],
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == expected, run.stdout + run.stderr
