"""The benchmark compares like with like: the baseline computes capsnotes' function; every
row is the trainer's plan with named choices replaced, consistent or refused with the
reason, on every device; a row that fails is left out and the others are timed."""

import json
import statistics

import pytest
import torch

import benchmarks.compare
from benchmarks.baseline import BaselineCapsNet, baseline_loss
from benchmarks.breakdown import breakdown
from benchmarks.compare import Options, Row, Settings, ablation_rows, compare
from benchmarks.runs import attach_runs
from capsnotes import CapsNet, margin_loss, reconstruction_loss
from capsnotes.fast.plan import plan_run
from capsnotes.training.config import TrainConfig


def test_baseline_computes_the_same_model_and_loss():
    torch.manual_seed(0)
    ours = CapsNet().double()
    theirs = BaselineCapsNet().double()
    with torch.no_grad():
        theirs.conv1.load_state_dict(ours.conv1.state_dict())
        theirs.primary.load_state_dict(ours.primary.conv.state_dict())
        theirs.W.copy_(ours.digits.weight)
        theirs.decoder.load_state_dict(ours.decoder.layers.state_dict())
    images = torch.rand(3, 1, 28, 28, dtype=torch.float64)
    labels = torch.tensor([4, 0, 9])
    out = ours(images, labels)
    v, recon = theirs(images, labels)
    torch.testing.assert_close(v, out.capsules)
    torch.testing.assert_close(recon, out.reconstructions)
    torch.testing.assert_close(
        baseline_loss(v, recon, images, labels),
        margin_loss(out.capsules, labels) + reconstruction_loss(out.reconstructions, images),
    )
    assert sum(p.numel() for p in theirs.parameters()) == 8_215_568


@pytest.mark.slow
def test_compare_and_breakdown_run_on_real_mnist(mnist_root):
    device = torch.device("cpu")
    rows = compare(
        device, batch_size=4, steps=2, rounds=3, warmup=1, root=mnist_root, ablation=True
    )
    assert set(rows) >= {"baseline", "capsnotes", "capsnotes, reference code only"}
    for name, row in rows.items():
        # a row's rate is its batch over the median round's time per step
        per_step = statistics.median(row["round_seconds"]) / 2
        assert row["images_per_second"] == pytest.approx(4 / per_step), name
        assert len(row["round_seconds"]) == 3
    trainer = rows["capsnotes"]
    chosen = f"{trainer['convolution']}, {trainer['precision']}"
    assert trainer["step_seconds"][chosen] == min(trainer["step_seconds"].values())
    assert rows["  + bf16 autocast"]["precision"] == "bfloat16"
    assert rows["capsnotes, float32 only"]["precision"] == "float32"
    assert rows["capsnotes, reference code only"]["plan"]["routing"] == "reference"
    assert rows["  + fused Adam"]["plan"]["optimizer"] == "Adam, fused"
    result = breakdown(device, batch_size=4, repeats=2, root=mnist_root)
    parts = result["parts_seconds"]
    assert set(parts) == {
        "data",
        "conv1",
        "primary capsules",
        "digit capsules (votes + routing)",
        "decoder + losses",
        "optimizer",
    }
    # the intervals divide the instrumented step between the parts: they add up to it
    assert sum(parts.values()) == pytest.approx(result["instrumented_step_seconds"], rel=0.25)
    assert result["precision"] in ("float32", "bfloat16")


def _history(folder, seed, accuracies, device="GPU X", epochs=None):
    folder.mkdir(parents=True)
    history = {
        "device": device,
        "torch": "2.x",
        "provenance": {"command": f"python -m capsnotes train --seed {seed}"},
        "train_config": {
            "seed": seed,
            "epochs": epochs or len(accuracies),
            "batch_size": 128,
            "lr_decay": 0.9,
        },
        "epochs": [{"test_accuracy": a, "seconds": 1.0, "eval_seconds": 0.1} for a in accuracies],
        "test_accuracy": accuracies[-1],
        "wall_seconds": 10.0 + seed,
    }
    (folder / "history.json").write_text(json.dumps(history))
    return folder


def test_runs_are_summarised_into_the_record(tmp_path):
    record = tmp_path / "gpu.json"
    record.write_text(json.dumps({"device": "GPU X", "speedup_vs_baseline": 5.0}))
    runs = [
        _history(tmp_path / "a", 0, [0.99, 0.996]),
        _history(tmp_path / "b", 1, [0.99, 0.998, 0.994]),
    ]
    attach_runs(record, runs)
    saved = json.loads(record.read_text())
    assert saved["speedup_vs_baseline"] == 5.0  # kept
    assert saved["test_accuracy"] == pytest.approx(0.995)
    assert saved["test_accuracy_min"] == 0.994 and saved["test_accuracy_max"] == 0.996
    assert saved["test_accuracy_std"] == pytest.approx(0.002 / 2**0.5)
    assert saved["wall_seconds"] == 11.0
    assert [r["best_test_accuracy"] for r in saved["training_runs"]] == [0.996, 0.998]
    with pytest.raises(ValueError, match="ran on 'CPU'"):
        attach_runs(record, [_history(tmp_path / "c", 2, [0.9], device="CPU")])
    with pytest.raises(ValueError, match="unfinished: 1 of 3 epochs"):
        attach_runs(record, [_history(tmp_path / "d", 3, [0.9], epochs=3)])
    with pytest.raises(FileNotFoundError, match="history.json not found"):
        attach_runs(record, [tmp_path / "nowhere"])
    with pytest.raises(ValueError, match="no training runs given"):
        attach_runs(record, [])


DEVICES = {"cpu": None, "P100": (6, 1), "T4": (7, 5), "A100": (8, 0), "H100": (9, 0)}


def row_plans(card):
    """The plan of every row of the comparison on ``card`` (a ValueError's message for a
    row refused), as compare builds them."""
    config = TrainConfig(batch_size=128)
    device_type = "cpu" if card == "cpu" else "cuda"
    capability = DEVICES[card]
    trainer = plan_run(config, device_type, capability, "2.11.0")
    rows = {"capsnotes": Row(128)} | ablation_rows(trainer, 128, (256,), compiled=True)
    plans = {}
    for name, row in rows.items():
        try:
            plans[name] = plan_run(
                config, device_type, capability, "2.11.0", reference=row.reference, **row.choices
            )
        except ValueError as error:
            plans[name] = str(error)
    return trainer, plans


@pytest.mark.parametrize("card", list(DEVICES))
def test_every_row_is_the_trainer_s_plan_with_one_technique_changed(card):
    """A row leaves out (or, on a CPU, adds) what its name says and keeps the rest of the
    trainer's plan; only the compiled graph of a float16 step is refused, with the
    reason (before, compare built a graph around a non-capturable Adam, or around a
    float16 step, and the session failed)."""
    trainer, plans = row_plans(card)
    assert plans["capsnotes"] == trainer
    refused = {name: plan for name, plan in plans.items() if isinstance(plan, str)}
    if card == "T4":
        assert list(refused) == ["capsnotes, torch.compile + graph"]
        assert (
            "float16 step with its loss scaler has not been run"
            in refused["capsnotes, torch.compile + graph"]
        )
        assert "  without CUDA graph" not in plans  # the trainer has none to leave out
        assert plans["  without float16 autocast"].precision == "float32"
        assert not plans["  without float16 autocast"].cuda_graph  # only the format
    else:
        assert refused == {}
    for name, plan in plans.items():
        if name.startswith("  without"):
            changed = {
                field
                for field in ("routing", "precision", "cuda_graph", "fused_adam")
                if getattr(plan, field) != getattr(trainer, field)
            }
            assert len(changed) == 1, (name, changed)
        if "torch.compile" in name and not isinstance(plan, str):
            assert plan.compile and plan.capturable_adam == plan.cuda_graph
    if card in ("A100", "H100"):
        assert {"  without bf16 autocast", "  without CUDA graph"} <= set(plans)


def test_a_row_that_fails_to_build_is_left_out_and_the_rest_are_timed(monkeypatch, tmp_path):
    """Building a row is inside the row's try: a row refused by its plan or failing in
    its constructor is recorded with the reason, the others are timed."""

    def stepper(device, root, row, notes=None):
        if row.choices.get("precision") == "bfloat16":
            raise ValueError("a plan that cannot run")
        if row.choices.get("convolution") == "matmul" and row.choices.get("fused_adam", 1):
            raise RuntimeError("a kernel that does not exist here")
        return lambda steps: None

    monkeypatch.setattr(benchmarks.compare, "capsnotes_stepper", stepper)
    monkeypatch.setattr(benchmarks.compare, "baseline_stepper", lambda *a: lambda steps: None)
    rows = compare(torch.device("cpu"), 4, 1, 1, 1, tmp_path, ablation=True)
    assert rows["  + bf16 autocast"] == {"batch_size": 4, "refused": "a plan that cannot run"}
    assert rows["  + convolutions as matmul"]["error"].startswith("RuntimeError: a kernel")
    assert rows["capsnotes"]["images_per_second"] > 0
    assert "images_per_second" in rows["capsnotes, reference code only"]


def test_the_comparison_s_command_line_fills_in_a_cpu_s_defaults(monkeypatch, capsys, tmp_path):
    """On a CPU: batch 64, 5 steps, 2 warm-up steps, and no larger batches (a GPU's rows)
    whatever is asked, compilation where asked; --help measures nothing; no step is no
    round."""
    import tyro

    asked = ["--device", "cpu", "--larger-batches", "1024", "--compile", "--no-ablation"]
    settings = Settings.of(tyro.cli(Options, args=asked), "python -m benchmarks.compare")
    assert (settings.batch_size, settings.steps, settings.warmup, settings.rounds) == (64, 5, 2, 3)
    assert settings.larger_batches == () and settings.compiled and not settings.ablation
    monkeypatch.setattr(benchmarks.compare, "run", lambda settings: pytest.fail("it measured"))
    with pytest.raises(SystemExit) as done:
        benchmarks.compare.main(["--help"])
    assert done.value.code == 0 and "--larger-batches" in capsys.readouterr().out
    with pytest.raises(ValueError, match="at least 1"):
        compare(torch.device("cpu"), 4, 0, 1, 1, tmp_path, ablation=False)


@pytest.mark.slow
def test_the_preflight_trains_a_few_steps_and_reads_its_record_back(tmp_path, mnist_root):
    """What gpu_session.sh runs first, on a CPU with a small model: the imports, the plan,
    two steps through the trainer, the record and the checkpoint read back."""
    import dataclasses

    from benchmarks.preflight import preflight
    from capsnotes.training.config import profile
    from tests.conftest import TINY

    config = dataclasses.replace(profile("paper"), model=TINY, batch_size=16)
    record = preflight(tmp_path, "cpu", steps=2, data_root=mnist_root, config=config)
    saved = json.loads((tmp_path / "preflight.json").read_text())
    written = {k: v for k, v in record.items() if k != "preflight_seconds"}
    assert saved == json.loads(json.dumps(written))  # as JSON has it: tuples as lists
    assert saved["steps"] == 2 and saved["plan"]["routing"] == "fused"
    assert saved["versions"]["tyro"] and 0 <= saved["test_accuracy"] <= 1


def test_the_preflight_names_what_cannot_be_imported():
    from benchmarks.preflight import check_imports

    with pytest.raises(RuntimeError, match=r"cannot import no_such_module .*gpu_wheels.sh"):
        check_imports(("torch", "no_such_module"))


def test_a_gpu_machine_without_tyro_installs_the_carried_wheels_before_the_preflight(tmp_path):
    """benchmarks/gpu_session.sh with tests/test_gpu_session.py's stand-ins, on a machine
    whose python3 cannot import tyro: with no wheels carried in .whl/ it stops, saying
    how to make them, before the preflight; with them it installs them, then runs it."""
    from tests.test_gpu_session import run_session

    no_tyro = "import tyro"  # the stand-in python3 fails what says so
    (tmp_path / "bare").mkdir()
    status, output, calls = run_session(tmp_path / "bare", "preflight", "t", fail_on=no_tyro)
    assert status == 2 and "tyro is missing and .whl/ has no wheels" in output, output
    assert not [call for call in calls if "benchmarks.preflight" in call]
    wheels = tmp_path / "carried" / "work" / ".whl"
    wheels.mkdir(parents=True)
    (wheels / "tyro-1.0.14-py3-none-any.whl").write_bytes(b"")
    status, output, calls = run_session(tmp_path / "carried", "preflight", "t", fail_on=no_tyro)
    assert status == 0, output
    (install,) = [i for i, call in enumerate(calls) if " pip install " in call]
    assert "--target /tmp/site .whl/tyro-1.0.14-py3-none-any.whl" in calls[install]
    assert install < next(i for i, c in enumerate(calls) if "benchmarks.preflight" in c)


@pytest.mark.parametrize(("stage", "seeds"), [("ablation", 1), ("seeds", 3)])
def test_the_stages_that_train_the_paper_model_attach_its_runs_to_its_record(
    tmp_path, stage, seeds
):
    """ablation and seeds (run with the stand-ins, the training's files put where the
    training would write them) write NAME-paper.json, the record chapter 14 reads,
    with benchmarks.runs after the last training run, and bring it back."""
    from tests.test_gpu_session import run_session

    work = tmp_path / "work"
    for seed in range(seeds):
        (work / "runs" / f"paper-seed{seed}").mkdir(parents=True)
        (work / "runs" / f"paper-seed{seed}" / "history.json").write_text("{}")
    (work / "capsnotes" / "training" / "weights").mkdir(parents=True)
    for shipped in ("mnist.safetensors", "mnist.json"):
        (work / "capsnotes" / "training" / "weights" / shipped).write_text("{}")
    status, output, calls = run_session(tmp_path, stage, "t")
    assert status == 0, output
    trained = [i for i, call in enumerate(calls) if "capsnotes train" in call]
    (attached,) = [i for i, call in enumerate(calls) if "benchmarks.runs --record t-paper" in call]
    assert len(trained) == seeds and trained[-1] < attached, calls
    assert (tmp_path / "out" / "t-paper.json").is_file()


@pytest.mark.slow
def test_choice_records_each_plans_fastest_candidate(mnist_root):
    """benchmarks.choice keeps, per plan, what it picked and what it timed: the pick is
    the fastest of the timed candidates, and every convolution was timed."""
    from benchmarks.choice import timed_choices
    from capsnotes.fast import CONVOLUTIONS

    choices = timed_choices(4, 2, mnist_root, name="quick")
    assert len(choices) == 2
    for choice in choices:
        seconds = choice["timings"]["step_seconds"]
        assert f"{choice['convolution']}, {choice['precision']}" == min(seconds, key=seconds.get)
        assert {key.split(", ")[0] for key in seconds} == set(CONVOLUTIONS)
        assert {key.split(", ")[1] for key in seconds} <= {"float32", "bfloat16"}


def test_each_kernel_setting_adds_its_own_entry_to_a_record(tmp_path, monkeypatch):
    """A record made under several kernel settings keeps one entry per setting, named
    by the environment that chose the kernels; a setting run again replaces its own."""
    from benchmarks.record import add_kernels_entry

    path = tmp_path / "x-choice.json"
    for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA"):
        monkeypatch.delenv(name, raising=False)
    add_kernels_entry(path, {"n": 1})
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    add_kernels_entry(path, {"n": 2})
    add_kernels_entry(path, {"n": 3})
    assert json.loads(path.read_text()) == {
        "the machine's own": {"n": 1},
        "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2": {"n": 3},
    }
