"""benchmarks/gpu_session.sh, the commands of a GPU machine, run here with stand-ins: a
``python3`` and an ``nvidia-smi`` first on PATH that log their arguments and succeed,
except the one a test makes fail. A failed stage must fail the session (set -e), also
where its output goes through ``tail`` or ``tee`` (pipefail); and the pytest line the
script runs its GPU tests with must be one this pytest accepts without pytest-xdist."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_session.sh"

#: python3's stand-in: logs its arguments; fails (status 3) where they contain $FAIL_ON;
#: for ``--record NAME`` writes the record the script then copies, as benchmarks.compare
#: does.
PYTHON3 = r"""#!/usr/bin/env bash
echo "python3 $*" >> "$STUB_LOG"
if [[ -n "${FAIL_ON:-}" && "$*" == *"$FAIL_ON"* ]]; then
    echo "stand-in failure: $FAIL_ON" >&2
    exit 3
fi
args=("$@")
for ((i = 0; i + 1 < ${#args[@]}; i++)); do
    if [[ ${args[i]} == --record ]]; then
        mkdir -p benchmarks/results && echo "{}" > "benchmarks/results/${args[i + 1]}.json"
    fi
done
"""

NVIDIA_SMI = """#!/usr/bin/env bash
echo "nvidia-smi $*" >> "$STUB_LOG"
"""


def run_session(tmp_path: Path, *args: str, fail_on: str = "") -> tuple[int, str, list[str]]:
    """Run the script in an empty folder of ``tmp_path`` with the stand-ins; returns its
    status, its output and the stand-ins' calls in order."""
    stubs, work = tmp_path / "stubs", tmp_path / "work"
    for folder in (stubs, work):
        folder.mkdir(exist_ok=True)
    for name, text in (("python3", PYTHON3), ("nvidia-smi", NVIDIA_SMI)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    log = tmp_path / "calls.log"
    log.write_text("")
    env = {
        **os.environ,
        "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}",
        "STUB_LOG": str(log),
        "FAIL_ON": fail_on,
        "OUT": str(tmp_path / "out"),
    }
    result = subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.returncode, result.stdout + result.stderr, log.read_text().splitlines()


def test_a_measure_session_whose_stages_succeed_runs_them_all(tmp_path):
    status, output, calls = run_session(tmp_path, "measure", "test")
    assert status == 0, output
    order = ["benchmarks.preflight", "nvidia-smi", "-m pytest", "--record test-measure"]
    order += ["capsnotes train", "python3 -", "--record test-compile"]
    where = [
        next(i for i, call in enumerate(calls) if call.endswith(part) or f"{part} " in call)
        for part in order
    ]
    assert where == sorted(where), calls
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "compare.log",
        "compile.log",
        "test-compile.json",
        "test-measure.json",
    ]


@pytest.mark.parametrize(
    ("stage", "fail_on", "after"),
    [
        ("measure", "-m pytest", "compare"),  # piped into tail
        ("measure", "benchmarks.compare --device cuda --record", "two epochs"),  # into tee
        ("measure", "capsnotes train", "torch.compile"),  # into tail
        ("measure", "import torch, torchvision", "tests"),
        ("seeds", "-m pytest", "seed 0"),
        ("campaign", "benchmarks.campaign", "done"),
        ("preflight", "benchmarks.preflight", "never"),
    ],
)
def test_a_failed_stage_fails_the_session(tmp_path, stage, fail_on, after):
    """The stand-in of one command fails: the session stops there with a failure, even
    where the command's output is piped into tail or tee (the campaign first copies
    what finished, then ends with the campaign's status)."""
    status, output, calls = run_session(tmp_path, stage, "test", fail_on=fail_on)
    assert status != 0, output
    assert any(fail_on in call for call in calls), calls  # the failing command did run
    if stage == "campaign":
        assert status == 3 and "done (campaign status 3)" in output
    else:
        assert f"] {after}" not in output, output  # and nothing after it


def test_the_session_s_pytest_line_is_accepted_without_pytest_xdist():
    """The pytest options every stage runs the GPU tests with, as the script spells them,
    given to this pytest with xdist switched off (a machine without it): this file is
    collected, not refused (pyproject.toml's addopts carry ``-n 2``); without the
    conftest, and this file imports no torch, so that it is quick."""
    script = re.sub(r"\\\n\s*", " ", SCRIPT.read_text())
    [line] = re.findall(r"^PYTEST=\((.*)\)$", script, flags=re.MULTILINE)
    words = shlex.split(line)
    assert words[:3] == ["python3", "-m", "pytest"]
    commands = [line for line in script.split("\n") if not line.lstrip().startswith("#")]
    runs = [line for line in commands if "tests/test_" in line]  # measure, seeds, campaign
    assert len(runs) == 3 and all('"${PYTEST[@]}" tests/' in part for part in runs)
    assert "python3 -m pytest" not in script.replace("PYTEST=(python3 -m pytest", "")
    here = "tests/test_gpu_session.py"
    result = subprocess.run(
        [sys.executable, *words[1:], "-p", "no:xdist", "--noconftest", "--collect-only", here],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{here}::test_the_session_s_pytest_line_is_accepted" in result.stdout
