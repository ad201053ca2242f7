"""The GPU campaign's --smoke run on the CPU: every stage, every record, the weights
shipped, and a second call that resumes instead of redoing."""

import json
import subprocess
import sys

import pytest

from capsnotes.campaign import STAGES
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def test_the_smoke_campaign_writes_every_record_and_resumes(tmp_path, mnist_root):
    out = tmp_path / "campaign"
    command = [
        sys.executable,
        "-m",
        "capsnotes",
        "campaign",
        "--smoke",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--data-root",
        str(mnist_root),
    ]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    records = {stage: json.loads((out / f"{stage}.json").read_text()) for stage in STAGES}
    for stage, record in records.items():
        assert record["smoke"] is True and record["stage"] == stage
        assert record["command"].startswith("python -m capsnotes campaign --smoke")
        assert record["device"].startswith("CPU") and record["stage_seconds"] > 0
    rows = records["table1"]["rows"]
    assert [(r["model"], r["routing_iterations"], r["reconstruction"]) for r in rows] == [
        ("capsnet", 1, False),
        ("capsnet", 1, True),
        ("capsnet", 3, False),
        ("capsnet", 3, True),
        ("cnn", None, None),
    ]
    for row in rows:
        assert set(row) >= {
            "name",
            "model",
            "routing_iterations",
            "reconstruction",
            "epochs",
            "test_errors",
            "device",
            "wall_seconds",
        }
        assert all(0 <= e <= 1 for e in row["test_errors"])
    assert 0 <= records["multimnist"]["test_error"] <= 1
    assert len(records["multimnist"]["examples"]["reconstructions"][0]) == 2
    for key in ("capsnet_accuracy", "cnn_accuracy", "ranges", "seed"):
        assert key in records["affine40"]
    assert records["paper"]["ship"]["shipped"] and records["fashion"]["ship"]["shipped"]
    for name in ("mnist", "fashion-mnist"):
        assert (out / "weights" / f"{name}.safetensors").is_file()
        assert (out / "weights" / f"{name}.json").is_file()
    assert "speedup_vs_baseline" in records["speed"]
    again = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stdout == ""  # every stage was done: nothing rerun
    for stage in STAGES:
        assert json.loads((out / f"{stage}.json").read_text()) == records[stage]
