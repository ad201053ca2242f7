"""The campaign's --smoke runs on the CPU: the CPU scale's three stages (Table 1,
MultiMNIST and its controls) with their records, the model shipped, a second call that
resumes instead of redoing; the full scale's other stages; and a stage outside the scale
refused before anything runs."""

import json
from pathlib import Path

import pytest

from benchmarks.campaign import CPU, FULL, SCALES, STAGES, main, run_campaign


def wrong_pairs(hex_bits: str, count: int) -> list[bool]:
    """The pairs a row read wrong, from its record's bits (pair 0 the lowest bit)."""
    bits = int(hex_bits, 16)
    assert bits >> count == 0  # no pair beyond the test pairs
    return [bool(bits >> i & 1) for i in range(count)]


@pytest.mark.slow
def test_the_cpu_scale_smoke_writes_its_records_ships_and_resumes(tmp_path, mnist_root):
    out = tmp_path / "campaign"
    records = run_campaign(
        out, scale="cpu", smoke_run=True, device="cpu", data_root=mnist_root, command="smoke"
    )
    assert list(records) == ["table1", "multimnist", "multimnist_controls"]
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

    controls = json.loads((out / "multimnist_controls.json").read_text())
    rows = {row["key"]: row for row in controls["rows"]}
    assert list(rows) == ["r=3", "r=1", "baseline"]
    assert [row["architecture"] for row in rows.values()] == [
        "capsnet-pairs",
        "capsnet-pairs",
        "cnn-pairs",
    ]
    assert rows["r=3"]["model_config"]["routing_iterations"] == 3
    assert rows["r=1"]["model_config"]["routing_iterations"] == 1
    assert "routing_iterations" not in rows["baseline"]["model_config"]
    # both CapsNets train with the reconstruction loss, as the paper's rows
    assert rows["r=3"]["train_config"]["reconstruction_weight"] > 0
    assert rows["r=1"]["train_config"]["reconstruction_weight"] > 0
    wrong = {}
    for key, row in rows.items():
        assert row["seeds"] == [0] and row["test_count"] == 10_000, key
        assert row["model_config"]["image_size"] == 36 and row["train_config"]["max_shift"] == 4
        for field in ("test_errors", "wall_seconds", "pairs_per_second", "implementations"):
            assert len(row[field]) == 1, (key, field)
        assert row["test_error"]["mean"] == row["test_errors"][0]
        (per_epoch,) = row["test_errors_per_epoch"]
        assert len(per_epoch) == row["train_config"]["epochs"] == 1
        (bits,) = row["wrong_pairs_hex"]
        wrong[key] = wrong_pairs(bits, 10_000)
        # the row's error is the fraction of the pairs its record says were read wrong (to
        # float32's rounding of the mean, far below one pair in 10,000)
        assert row["test_errors"][0] == pytest.approx(sum(wrong[key]) / 10_000, abs=1e-6)
    assert list(controls["paired"]) == ["r=3 vs r=1", "r=3 vs baseline", "r=1 vs baseline"]
    for name, paired in controls["paired"].items():
        first, second = name.split(" vs ")
        (counts,) = paired["per_seed"]
        # read by the first and not the second (the second reads it wrong), and the other way
        a, b = wrong[first], wrong[second]
        assert counts["only_first"] == sum(y and not x for x, y in zip(a, b, strict=True))
        assert counts["only_second"] == sum(x and not y for x, y in zip(a, b, strict=True))
        difference = (counts["only_second"] - counts["only_first"]) / 10_000
        assert counts["first_minus_second_error"] == difference
        errors = rows[first]["test_errors"][0] - rows[second]["test_errors"][0]
        assert difference == pytest.approx(errors, abs=1e-6)
        assert paired["first_minus_second_error"] == {"mean": difference, "std": 0.0}

    again = run_campaign(
        out, scale="cpu", smoke_run=True, device="cpu", data_root=mnist_root, command="smoke"
    )
    assert again == {}  # every stage was done: nothing rerun
    assert json.loads((out / "table1.json").read_text()) == table
    assert json.loads((out / "multimnist_controls.json").read_text()) == controls


@pytest.mark.slow
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
