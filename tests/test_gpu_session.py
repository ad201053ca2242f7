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
#: writes the files the script then copies, where the real command writes them: for
#: ``--record NAME`` the record (benchmarks.compare, benchmarks.runs), for ``--out DIR``
#: the preflight's record, a training run's history or a campaign stage's record, and
#: for tools/ship_pretrained.py the shipped weights.
PYTHON3 = r"""#!/usr/bin/env bash
echo "python3 $*" >> "$STUB_LOG"
if [[ -n "${FAIL_ON:-}" && "$*" == *"$FAIL_ON"* ]]; then
    echo "stand-in failure: $FAIL_ON" >&2
    exit 3
fi
case "$*" in
*benchmarks.preflight*) written=preflight.json ;;
*"capsnotes train"*) written=history.json ;;
*benchmarks.campaign*) written=stand-in-stage.json ;;
*) written= ;;
esac
args=("$@")
for ((i = 0; i + 1 < ${#args[@]}; i++)); do
    if [[ ${args[i]} == --record ]]; then
        mkdir -p benchmarks/results && echo "{}" > "benchmarks/results/${args[i + 1]}.json"
    elif [[ ${args[i]} == --out && -n $written ]]; then
        mkdir -p "${args[i + 1]}" && echo "{}" > "${args[i + 1]}/$written"
    elif [[ ${args[0]} == tools/ship_pretrained.py && ${args[i]} == --name ]]; then
        weights=capsnotes/training/weights/${args[i + 1]}
        mkdir -p "${weights%/*}"
        echo "{}" > "$weights.safetensors" && echo "{}" > "$weights.json"
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
        "preflight.json",
        "test-compile.json",
        "test-measure.json",
    ]


#: Each stage's commands, in order (a part of each call), and what it brings back in $OUT.
STAGES = {
    "preflight": (["benchmarks.preflight"], ["preflight.json"]),
    "measure": (
        ["benchmarks.preflight", "nvidia-smi", "-m pytest", "--record test-measure"]
        + ["capsnotes train", "python3 -", "--record test-compile"],
        ["compare.log", "compile.log", "preflight.json", "test-compile.json", "test-measure.json"],
    ),
    "ablation": (
        ["benchmarks.preflight", "--record test-paper", "capsnotes train --profile paper"]
        + ["benchmarks.runs --record test-paper", "tools/ship_pretrained.py"],
        ["compare.log", "mnist.json", "mnist.safetensors", "preflight.json", "seed0-history.json"]
        + ["seed0.log", "test-paper.json"],
    ),
    "seeds": (
        ["benchmarks.preflight", "-m pytest", "--seed 0", "--seed 1", "--seed 2"]
        + ["benchmarks.runs --record test-paper", "tools/ship_pretrained.py"],
        ["mnist.json", "mnist.safetensors", "preflight.json", "seed0-history.json"]
        + ["seed1-history.json", "seed2-history.json", "test-paper.json"],
    ),
    "campaign": (
        ["benchmarks.preflight", "-m pytest", "benchmarks.campaign"],
        ["preflight.json", "stand-in-stage.json"],
    ),
}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_every_stage_runs_to_its_end_with_the_stand_ins(tmp_path, stage):
    """Each stage, in a bare folder, with stand-ins that write what the real commands
    write: it runs every command in order, ends with status 0 after its last stamp and
    brings back its files; the stages that run GPU tests run them with the script's
    pytest line, on tests/test_step.py."""
    args = ("campaign", "stage-a", "stage-b") if stage == "campaign" else (stage, "test")
    status, output, calls = run_session(tmp_path, *args)
    assert status == 0, output
    order, brought = STAGES[stage]
    where = [
        next((i for i, call in enumerate(calls) if call.endswith(part) or f"{part} " in call), -1)
        for part in order
    ]
    assert -1 not in where and where == sorted(where), (order, calls)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == brought
    last = {"preflight": "preflight", "campaign": "done (campaign status 0)"}
    assert output.rstrip().endswith(last.get(stage, "done")), output
    tests = [call for call in calls if " -m pytest " in call]
    if stage in ("measure", "seeds", "campaign"):
        assert len(tests) == 1 and "-o addopts= tests/test_step.py" in tests[0], tests
    else:
        assert tests == [], tests
    if stage == "campaign":
        assert any(call.endswith("--stages stage-a stage-b") for call in calls), calls


def test_a_machine_without_pytest_installs_its_carried_wheels_before_the_preflight(tmp_path):
    """A python3 that cannot import pytest (its stand-in fails ``import pytest``): with no
    wheels in .whl/pytest/ the session stops before the preflight, saying what to carry;
    with them it installs them (and not tyro's: this machine has tyro), then runs."""
    (tmp_path / "bare").mkdir()
    no_pytest = "import pytest"
    status, output, calls = run_session(tmp_path / "bare", "seeds", "t", fail_on=no_pytest)
    assert status == 2 and "pytest is missing and .whl/pytest/ has no wheels" in output, output
    assert "gpu_wheels.sh" in output
    assert not [call for call in calls if "benchmarks.preflight" in call], calls
    wheels = tmp_path / "carried" / "work" / ".whl"
    (wheels / "pytest").mkdir(parents=True)
    (wheels / "tyro-1.0.17-py3-none-any.whl").write_bytes(b"")
    (wheels / "pytest" / "pytest-9.2.0-py3-none-any.whl").write_bytes(b"")
    status, output, calls = run_session(tmp_path / "carried", "seeds", "t", fail_on=no_pytest)
    assert status == 0, output
    (install,) = [i for i, call in enumerate(calls) if " pip install " in call]
    assert calls[install].endswith("--target /tmp/site .whl/pytest/pytest-9.2.0-py3-none-any.whl")
    assert install < next(i for i, c in enumerate(calls) if "benchmarks.preflight" in c)


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


def session_pytest() -> tuple[list[str], list[str]]:
    """The script's pytest line (``PYTEST``) as words, and the lines that run it (measure,
    seeds, campaign), checked to be the script's only pytest runs."""
    script = re.sub(r"\\\n\s*", " ", SCRIPT.read_text())
    [line] = re.findall(r"^PYTEST=\((.*)\)$", script, flags=re.MULTILINE)
    words = shlex.split(line)
    assert words[:3] == ["python3", "-m", "pytest"]
    commands = [line for line in script.split("\n") if not line.lstrip().startswith("#")]
    runs = [line for line in commands if "tests/test_" in line]  # measure, seeds, campaign
    assert len(runs) == 3 and all('"${PYTEST[@]}" tests/' in part for part in runs)
    assert "python3 -m pytest" not in script.replace("PYTEST=(python3 -m pytest", "")
    return words, runs


def test_the_session_s_pytest_line_is_accepted_without_pytest_xdist():
    """The pytest options every stage runs the GPU tests with, as the script spells them,
    given to this pytest with xdist switched off (a machine without it): this file is
    collected, not refused (pyproject.toml's addopts carry ``-n 2``); without the
    conftest, and this file imports no torch, so that it is quick."""
    words, runs = session_pytest()
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


def test_the_session_s_pytest_line_collects_the_gpu_tests_it_runs():
    """The files the stages test, collected as the script runs them (its pytest line,
    with the conftest) by this pytest with xdist switched off: every GPU-only test is
    collected, beside its CPU twin, and none fails to import."""
    words, runs = session_pytest()
    files = sorted({name for line in runs for name in re.findall(r"tests/test_\w+\.py", line)})
    assert "tests/test_step.py" in files
    result = subprocess.run(
        [sys.executable, *words[1:], "-p", "no:xdist", "--collect-only", *files],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for test in (
        "test_graph_replay_trains_as_the_eager_step_does",
        "test_a_graph_records_on_the_model_s_gpu_when_it_is_not_the_current_one",
    ):
        for device in ("cpu-stand-in", "cuda"):
            assert f"tests/test_step.py::{test}[{device}]" in result.stdout, result.stdout
