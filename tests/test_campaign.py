"""The campaign's --smoke runs on the CPU: the CPU scale's two stages (Table 1 and
MultiMNIST) with their records, the model shipped, a second call that resumes instead of
redoing; the full scale's other stages; and the scale's promise to fit its budget."""

import json
from pathlib import Path

import pytest

from benchmarks.campaign import CPU, FULL, SCALES, STAGES, main, run_campaign

pytestmark = pytest.mark.slow


def test_the_cpu_scale_smoke_writes_its_records_ships_and_resumes(tmp_path, mnist_root):
    out = tmp_path / "campaign"
    records = run_campaign(
        out, scale="cpu", smoke_run=True, device="cpu", data_root=mnist_root, command="smoke"
    )
    assert list(records) == ["table1", "multimnist"]
    table = json.loads((out / "table1.json").read_text())
    assert table["scale"] == "cpu, smoke" and table["scale_reason"] == CPU.reason
    # the record names the processor as /proc/cpuinfo does, where there is one
    if Path("/proc/cpuinfo").exists():
        assert table["cpu"]["model_name"] and "flags" in table["cpu"]
    keys = [row["key"] for row in table["rows"]]
    assert keys == [
        "r=1, no reconstruction",
        "r=1, reconstruction",
        "r=3, no reconstruction",
        "r=3, reconstruction",
        "baseline",
    ]
    for row in table["rows"]:
        assert len(row["test_errors"]) == len(row["seeds"]) == 1
        assert row["test_count"] == 200 and row["train_config"]["train_size"] == 96
        assert row["test_error"]["mean"] == row["test_errors"][0]
        # each run's own choice (its precision, and how it computes) is kept
        (chosen,) = row["implementations"]
        assert chosen["precision"] in ("float32", "bfloat16") and "optimizer" in chosen
    capsnets = {row["key"]: row for row in table["rows"] if row["model"] == "capsnet"}
    # the decoder trains only in the rows with reconstruction, routing iterates only at r=3
    assert capsnets["r=1, no reconstruction"]["train_config"]["reconstruction_weight"] == 0.0
    assert capsnets["r=3, reconstruction"]["model_config"]["routing_iterations"] == 3
    routing = capsnets["r=3, reconstruction"]["routing"][0]
    assert routing["entropy"][0] == pytest.approx(routing["uniform_entropy"], abs=1e-5)
    paired = table["paired_r3_minus_r1"]["reconstruction"]
    errors = {key: row["test_errors"][0] for key, row in capsnets.items()}
    expected = errors["r=3, reconstruction"] - errors["r=1, reconstruction"]
    assert paired["r3_minus_r1_per_seed"] == [pytest.approx(expected)]

    pairs = json.loads((out / "multimnist.json").read_text())
    assert pairs["test_count"] == 10_000 and pairs["pairs"]["test_pairs"] == "one per test digit"
    shipped = json.loads((out / "weights" / "multimnist.json").read_text())
    assert shipped["train_config"]["architecture"] == "capsnet-pairs"
    # the float16 weights, loaded back, score what the run scored (within the tolerance)
    assert abs(shipped["shipped"]["test_accuracy"] - (1 - pairs["test_error"])) <= 0.2

    again = run_campaign(
        out, scale="cpu", smoke_run=True, device="cpu", data_root=mnist_root, command="smoke"
    )
    assert again == {}  # every stage was done: nothing rerun
    assert json.loads((out / "table1.json").read_text()) == table


def test_the_full_scale_smoke_runs_the_other_stages(tmp_path, mnist_root):
    out = tmp_path / "campaign"
    stages = ["paper", "affine40", "fashion", "speed"]
    records = run_campaign(
        out, stages, smoke_run=True, device="cpu", data_root=mnist_root, command="smoke"
    )
    assert list(records) == stages
    assert records["paper"]["ship"]["shipped"] and records["fashion"]["ship"]["shipped"]
    for name in ("mnist", "fashion-mnist"):
        assert (out / "weights" / f"{name}.safetensors").is_file()
    assert {"capsnet_accuracy", "cnn_accuracy", "ranges"} <= set(records["affine40"])
    assert records["speed"]["speedup_vs_baseline"] > 0


def test_a_stage_outside_the_scale_is_refused_before_anything_runs(tmp_path, capsys):
    assert set(FULL.stages) == set(STAGES) and set(CPU.stages) < set(STAGES)
    code = main(["--out", str(tmp_path / "x"), "--scale", "cpu", "--stages", "paper"])
    assert code == 2
    assert "the cpu scale has no stage ['paper']" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    assert set(SCALES) == {"full", "cpu"}
