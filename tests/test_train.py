"""The trainer: a run built from its configuration (plain or fast) as its plan says, real
training on real MNIST (short) for one digit and for two, resuming (also across
implementations and devices), the estimate of a run's time, and the configuration's
checks."""

import dataclasses
import json

import pytest
import torch

from capsnotes import CapsNet, CapsNetConfig, DigitCapsules
from capsnotes.data import load_dataset
from capsnotes.experiments.convnet import ConvNet, ConvNetConfig
from capsnotes.experiments.multimnist import PairedCapsNet
from capsnotes.fast.convolution import MatmulConv2d
from capsnotes.fast.plan import plan_for, plan_run
from capsnotes.fast.precision import Autocast
from capsnotes.fast.routing import FusedDigitCapsules
from capsnotes.training.checkpoint import load_checkpoint, save_checkpoint
from capsnotes.training.config import PROFILES, TrainConfig, build_model, load_run_data, profile
from capsnotes.training.evaluation import evaluate
from capsnotes.training.step import TrainingStep
from capsnotes.training.train import build_optimizer, build_run, estimate_run, train
from tests.conftest import TINY

#: how the runs compared here compute, so that timing cannot choose differently for each
PINNED = {"convolution": "native", "precision": "float32"}

TIMING = {"seconds", "images_per_second", "eval_seconds"}


@pytest.mark.slow
def test_short_real_training_loss_falls_and_accuracy_rises(mnist_root, tmp_path):
    """The paper's architecture at a width that trains in seconds on one core (64
    channels and 8 primary capsule types: about 13 times less arithmetic per image);
    chapter 8 trains the full width through the same step."""
    config = TrainConfig(
        epochs=2,
        batch_size=16,
        train_size=640,
        test_size=500,
        max_shift=0,
        seed=0,
        model=CapsNetConfig(conv_channels=64, primary_channels=8),
    )
    test_set = load_dataset("mnist", train=False, root=mnist_root).subset(500, seed=0)
    untrained = evaluate(build_model(config), test_set)
    result = train(config, tmp_path, data_root=mnist_root, progress=False)
    first, second = result.history["epochs"]
    steps = first["step_margin_loss"] + second["step_margin_loss"]
    assert len(steps) == 2 * 40
    assert sum(steps[-5:]) / 5 < 0.5 * sum(steps[:5]) / 5
    assert second["margin_loss"] < first["margin_loss"]
    assert second["train_accuracy"] > first["train_accuracy"]
    assert untrained["accuracy"] < 0.3
    assert second["test_accuracy"] > 0.8 > untrained["accuracy"]
    assert result.history["test_accuracy"] == second["test_accuracy"]
    # what was written is what was returned
    on_disk = json.loads((tmp_path / "history.json").read_text())
    assert on_disk["epochs"] == result.history["epochs"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.safetensors", "history.json"]


def without_timing(history):
    return [{k: v for k, v in record.items() if k not in TIMING} for record in history["epochs"]]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("averaging", "implementation"),
    [(0.0, {"convolution": "matmul", "precision": "bfloat16"}), (0.9, PINNED)],
)
def test_resume_after_interruption_gives_the_same_history(
    mnist_root, tmp_path, averaging, implementation
):
    """Also with a moving average of the weights, which the checkpoint must carry, and in
    bf16. Both runs compute the same way (``implementation``): timed choices of a model
    this small can differ from run to run."""
    config = TrainConfig(
        epochs=3,
        batch_size=32,
        train_size=192,
        test_size=100,
        max_shift=2,
        seed=3,
        model=TINY,
        weight_averaging=averaging,
    )
    whole = train(
        config,
        tmp_path / "whole",
        data_root=mnist_root,
        progress=False,
        implementation=implementation,
    )

    def stop_after_second_epoch(record):
        if record["epoch"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(
            config,
            tmp_path / "cut",
            data_root=mnist_root,
            progress=False,
            implementation=implementation,
            on_epoch_end=stop_after_second_epoch,
        )
    assert len(json.loads((tmp_path / "cut" / "history.json").read_text())["epochs"]) == 2
    resumed = train(
        config,
        tmp_path / "cut",
        data_root=mnist_root,
        progress=False,
        implementation=implementation,
    )
    assert without_timing(resumed.history) == without_timing(whole.history)
    assert all(("test_accuracy_live" in e) == bool(averaging) for e in whole.history["epochs"])
    saved = load_checkpoint(tmp_path / "whole")
    assert (saved.average_state is not None) == bool(averaging)
    for name, value in whole.model.state_dict().items():
        assert torch.equal(saved.result_state[name], value.cpu()), name
        assert torch.equal(resumed.model.state_dict()[name], value), name
    # the whole run's wall time adds up the two calls that trained
    assert len(whole.history["sessions"]) == 1 and len(resumed.history["sessions"]) == 2
    assert resumed.history["wall_seconds"] == pytest.approx(sum(resumed.history["sessions"]))
    # a finished run resumes to nothing new, and leaves its files alone
    written = (tmp_path / "cut" / "history.json").read_text()
    again = train(
        config,
        tmp_path / "cut",
        data_root=mnist_root,
        progress=False,
        implementation=implementation,
    )
    assert without_timing(again.history) == without_timing(whole.history)
    assert again.history["sessions"] == resumed.history["sessions"]
    assert (tmp_path / "cut" / "history.json").read_text() == written


@pytest.mark.slow
def test_a_cnn_with_dropout_resumed_in_another_process_state_trains_the_same(mnist_root, tmp_path):
    """Dropout draws from torch's global generator: the trainer seeds it per epoch, so
    whatever the process drew before (here: different draws before each call), the
    epochs train alike, resumed or not, and the caller's random state is left alone."""
    config = TrainConfig(
        architecture="cnn",
        epochs=2,
        batch_size=32,
        train_size=128,
        test_size=100,
        seed=5,
        model=ConvNetConfig(channels=(4, 4, 4), pool_after=(1, 2), hidden=(16, 8)),
    )
    torch.manual_seed(1)
    whole = train(config, tmp_path / "whole", data_root=mnist_root, progress=False)
    state = torch.random.get_rng_state()
    first = train(
        dataclasses.replace(config, epochs=1),
        tmp_path / "cut",
        data_root=mnist_root,
        progress=False,
    )
    assert torch.equal(torch.random.get_rng_state(), state)  # left as it was
    torch.manual_seed(2)
    torch.rand(100)
    resumed = train(config, tmp_path / "cut", data_root=mnist_root, progress=False)
    assert without_timing(resumed.history) == without_timing(whole.history)
    assert without_timing(first.history) == without_timing(whole.history)[:1]


@pytest.mark.slow
def test_a_finished_run_extended_trains_as_the_longer_run(mnist_root, tmp_path):
    config = TrainConfig(
        epochs=2, batch_size=32, train_size=96, test_size=50, max_shift=2, seed=1, model=TINY
    )
    longer = dataclasses.replace(config, epochs=3)
    whole = train(
        longer, tmp_path / "whole", data_root=mnist_root, progress=False, implementation=PINNED
    )
    train(
        config, tmp_path / "extended", data_root=mnist_root, progress=False, implementation=PINNED
    )
    extended = train(
        longer, tmp_path / "extended", data_root=mnist_root, progress=False, implementation=PINNED
    )
    assert without_timing(extended.history) == without_timing(whole.history)
    assert extended.history["train_config"] == longer.to_dict()
    assert len(extended.history["session_details"]) == 2
    assert {d["optimizer"] for d in extended.history["session_details"]} == {"Adam, fused"}
    for name, value in whole.model.state_dict().items():
        assert torch.equal(extended.model.state_dict()[name], value), name
    with pytest.raises(ValueError, match="has trained 3 epochs already, more than the 2"):
        train(
            config,
            tmp_path / "extended",
            data_root=mnist_root,
            progress=False,
            implementation=PINNED,
        )


@pytest.mark.slow
def test_resume_refuses_a_different_configuration(mnist_root, tmp_path):
    config = TrainConfig(epochs=1, batch_size=32, train_size=64, test_size=50, model=TINY)
    train(config, tmp_path, data_root=mnist_root, progress=False)
    with pytest.raises(ValueError, match="different configuration"):
        train(
            dataclasses.replace(config, learning_rate=5e-4),
            tmp_path,
            data_root=mnist_root,
            progress=False,
        )


def test_a_resumed_run_s_kept_choices_never_silently_override_the_caller_s():
    """A resumed run keeps its last session's choices (another convolution would change
    its results); where the caller chose otherwise, the plan refuses and says why."""
    config = TrainConfig(model=TINY)
    kept = {"routing": "fused", "convolution": "matmul", "precision": "float32"}
    assert plan_for(config, "cpu", kept=kept).convolution == "matmul"
    assert plan_for(config, "cpu", kept=kept, convolution="matmul").convolution == "matmul"
    assert not plan_for(config, "cpu", kept=kept, fused_adam=False).fused_adam  # not kept
    refused = r"computed with convolution='matmul' .* convolution='native' would change"
    with pytest.raises(ValueError, match=refused):
        plan_for(config, "cpu", kept=kept, convolution="native")
    assert plan_for(config, "cpu", reference=True, kept=kept).convolution == "native"


@pytest.mark.slow
def test_resume_refuses_to_change_the_kept_convolution(mnist_root, tmp_path):
    config = TrainConfig(epochs=1, batch_size=32, train_size=64, test_size=50, model=TINY)
    run = {"data_root": mnist_root, "progress": False}
    train(config, tmp_path, implementation={"convolution": "matmul", "precision": "float32"}, **run)
    before = (tmp_path / "history.json").read_text()
    with pytest.raises(ValueError, match="convolution='native' would change its results"):
        train(dataclasses.replace(config, epochs=2), tmp_path, implementation=PINNED, **run)
    assert (tmp_path / "history.json").read_text() == before  # nothing written


def test_dataset_must_fit_the_model(mnist_root, tmp_path):
    config = TrainConfig(model=dataclasses.replace(TINY, image_size=36), train_size=10)
    with pytest.raises(ValueError, match=r"model expects images \(1, 36, 36\)"):
        train(config, tmp_path, data_root=mnist_root, progress=False)


def test_train_config_checks_and_round_trip():
    config = profile("quick", seed=4)
    assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert config.key() == TrainConfig.from_dict(config.to_dict()).key() != PROFILES["quick"].key()
    with pytest.raises(ValueError, match="epochs must be a positive int"):
        TrainConfig(epochs=0)
    with pytest.raises(ValueError, match="train_size"):
        TrainConfig(train_size=0)
    with pytest.raises(ValueError, match=r"lr_decay must lie in \(0, 1\]"):
        TrainConfig(lr_decay=1.5)
    with pytest.raises(ValueError, match="learning_rate"):
        TrainConfig(learning_rate=-1.0)
    with pytest.raises(ValueError, match="unknown profile"):
        profile("fast")
    with pytest.raises(ValueError, match="unknown TrainConfig fields"):
        TrainConfig.from_dict({"epoch": 3})


#: What a training run reads and how it is scheduled: the fields two runs compared with
#: each other share (their architecture and model differ).
DATA_AND_SCHEDULE = (
    "dataset", "epochs", "batch_size", "learning_rate", "lr_decay", "train_size",
    "test_size", "max_shift", "canvas", "seed", "eval_batch_size", "weight_averaging",
)  # fmt: skip


def differing(a: TrainConfig, b: TrainConfig, fields=DATA_AND_SCHEDULE) -> set[str]:
    return {name for name in fields if getattr(a, name) != getattr(b, name)}


def test_the_paper_profiles_are_the_paper_s_settings_and_baselines_compare_like_with_like():
    """The paper's settings, from the paper: its CapsNet (8.2M parameters) on all 60,000
    training and 10,000 test digits shifted by up to 2 pixels; MultiMNIST on 36x36
    canvases with digits shifted by up to 4 pixels. Each CNN baseline trains as the
    CapsNet it is compared with: the paper's CNN with the paper's data and schedule, the
    MultiMNIST CNN with the MultiMNIST CapsNet's, and the CPU-sized CNN on the same
    shifted digits as the paper's CapsNet (its epochs and decay are its own)."""
    paper, pairs = PROFILES["paper"], PROFILES["multimnist"]
    assert paper.architecture == "capsnet" and paper.model == CapsNetConfig()
    assert sum(p.numel() for p in build_model(paper).parameters()) == 8_215_568
    assert (paper.train_size, paper.test_size, paper.max_shift) == (None, None, 2)
    assert pairs.architecture == "capsnet-pairs"
    assert (pairs.model.image_size, pairs.max_shift) == (36, 4)
    for capsnet, cnn, own in (
        ("paper", "paper-cnn", set()),
        ("multimnist", "multimnist-cnn", set()),
        ("paper", "cnn", {"epochs", "lr_decay"}),
    ):
        assert PROFILES[cnn].architecture.startswith("cnn"), cnn
        assert differing(PROFILES[capsnet], PROFILES[cnn]) == own, (capsnet, cnn)
    assert pairs.model.image_size == PROFILES["multimnist-cnn"].model.image_size
    quick = PROFILES["quick"]
    assert quick.train_size < 60_000 and quick.model == paper.model  # a subset, same model


def test_the_reference_run_is_plain_pytorch():
    run = build_run(
        TrainConfig(model=TINY), "cpu", plan_for(TrainConfig(model=TINY), reference=True)
    )
    assert type(run.model) is CapsNet and type(run.model.digits) is DigitCapsules
    assert type(run.model.conv1) is torch.nn.Conv2d
    assert not run.optimizer.defaults["fused"]
    assert type(run.step) is TrainingStep and run.average is None and run.scaler is None
    assert run.step.model is run.model and run.step.optimizer is run.optimizer
    assert run.result_model is run.model
    assert run.details == {
        "fast_paths": False,
        "optimizer": "Adam",
        "cuda_graphs": False,
        "precision": "float32",
        "loss_scaling": False,
        "compile": False,
        "routing": "reference",
        "convolution": "native",
        "keep_freed_memory": False,
    }
    assert run.plan.reference and run.scaler is None


def test_a_fast_cpu_run_times_the_convolutions_on_the_sample():
    # float32 only: on a CPU without bf16 units the bf16 probe alone takes ~10 s (the
    # choice among six candidates is tested in test_fast.py)
    config = TrainConfig(model=TINY, weight_averaging=0.9, mixed_precision=False)
    sample = (torch.rand(4, 1, 28, 28), torch.tensor([0, 1, 2, 3]))
    trial = {"sample": lambda: sample, "make_model": lambda: build_model(config)}
    run = build_run(config, "cpu", plan_for(config, "cpu", **trial))
    assert isinstance(run.model.digits, FusedDigitCapsules) and run.details["routing"] == "fused"
    timed = run.details["step_seconds"]
    assert set(timed) == {
        "native, float32",
        "matmul, float32",
        "matmul-native-input, float32",
    }
    chosen = f"{run.details['convolution']}, {run.details['precision']}"
    assert timed[chosen] == min(timed.values())
    assert isinstance(run.step.model, Autocast) == (run.details["precision"] != "float32")
    products = run.details["convolution"] != "native"  # either form of the input gradient
    assert isinstance(run.model.primary.conv, MatmulConv2d) is products
    if products:
        native_input = run.details["convolution"] == "matmul-native-input"
        assert (run.model.primary.conv.input_gradient == "native") is native_input
    assert run.optimizer.defaults["fused"] and run.details["optimizer"] == "Adam, fused"
    assert run.result_model is run.average.model
    # an explicit choice overrides the measured one
    chosen = {"convolution": "matmul", "precision": "bfloat16"}
    forced = build_run(config, "cpu", plan_for(config, "cpu", **trial, **chosen))
    assert (
        isinstance(forced.model.conv1, MatmulConv2d) and forced.details["convolution"] == "matmul"
    )
    assert forced.step.model.dtype is torch.bfloat16 and forced.details["precision"] == "bfloat16"
    assert "step_seconds" not in forced.details  # nothing was left to time
    with pytest.raises(ValueError, match="precision must be one of"):
        plan_for(config, "cpu", **trial, precision="float8")
    with pytest.raises(ValueError, match="pass both, or neither"):
        plan_for(config, "cpu", sample=lambda: sample)
    with pytest.raises(ValueError, match="a CUDA graph needs a CUDA device"):
        plan_for(config, "cpu", cuda_graph=True)


def test_the_model_is_seeded_by_the_configuration_only():
    config = TrainConfig(model=TINY, seed=7)
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    a, b = (
        build_model(config),
        build_run(config, "cpu", plan_for(config, "cpu", convolution="matmul")).model,
    )
    assert torch.equal(torch.random.get_rng_state(), state)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name
    assert isinstance(build_model(profile("cnn")), ConvNet)
    assert isinstance(build_model(profile("multimnist")), PairedCapsNet)


def test_the_run_is_built_as_its_plan_says():
    """build_run builds what plan_for decides for the device (tests/test_plan.py holds
    the plans of other devices); without a sample, the CPU's timed choices keep their
    defaults."""
    cnn = build_run(profile("cnn"), "cpu")
    assert cnn.details == plan_for(profile("cnn"), "cpu").to_dict()
    assert "routing" not in cnn.details and cnn.optimizer.defaults["fused"]
    capsnet = TrainConfig(model=TINY)
    run = build_run(capsnet, "cpu")
    assert run.plan == plan_for(capsnet, "cpu") and run.plan.timed
    assert (run.details["routing"], run.details["convolution"]) == ("fused", "native")
    assert run.details["precision"] == "float32" and run.step.model is run.model
    assert not run.optimizer.defaults["capturable"] and type(run.step) is TrainingStep


@pytest.mark.parametrize(
    ("capability", "graphed"), [((9, 0), True), ((8, 0), True), ((7, 5), False), ((6, 0), True)]
)
def test_a_graphed_plan_builds_a_capturable_adam(capability, graphed):
    """A step recorded as a CUDA graph replays Adam's update, step count included, so its
    Adam must be capturable; build_run refuses a GPU's plan on this CPU, so the Adam of
    each GPU's plan is built here for CPU parameters by the function build_run builds
    its Adam with (the Adam of each run built on the CPU: the test below)."""
    config = TrainConfig(model=TINY)
    plan = plan_run(config, "cuda", capability, torch.__version__)
    assert plan.cuda_graph is graphed  # the H100, A100 and P100 graph; the T4 (float16) not
    optimizer = build_optimizer(CapsNet(TINY).parameters(), config, plan)
    for group in optimizer.param_groups:
        assert group["capturable"] is graphed and group["fused"] is True
        assert group["lr"] == config.learning_rate
    eager = plan_run(config, "cuda", capability, torch.__version__, cuda_graph=False)
    optimizer = build_optimizer(CapsNet(TINY).parameters(), config, eager)
    assert not any(group["capturable"] for group in optimizer.param_groups)


#: Plans build_run accepts on a CPU, and whether each one's Adam is fused: the fast
#: paths are (torch 2.4 added a fused Adam for CPUs); the paper's code, a plan told not
#: to, and a plan for an older torch are not. None is graphed, so none is capturable.
CPU_ADAMS = {
    "fast": (lambda config: plan_for(config, "cpu"), True),
    "reference": (lambda config: plan_for(config, "cpu", reference=True), False),
    "told not to fuse": (lambda config: plan_for(config, "cpu", fused_adam=False), False),
    "torch 2.3": (lambda config: plan_run(config, "cpu", None, "2.3.1"), False),
}


@pytest.mark.parametrize("kind", list(CPU_ADAMS))
def test_a_run_s_adam_steps_its_model_as_its_plan_says(kind):
    """The Adam of a built run holds every parameter of the run's model, at the
    configuration's learning rate, fused and capturable as the run's plan asks; one step
    moves every parameter that has a gradient."""
    make_plan, fused = CPU_ADAMS[kind]
    config = TrainConfig(model=TINY, learning_rate=3e-4)
    run = build_run(config, "cpu", make_plan(config))
    assert run.plan.fused_adam is fused and not run.plan.capturable_adam
    (group,) = run.optimizer.param_groups
    assert bool(group["fused"]) is fused and group["capturable"] is False
    assert group["lr"] == 3e-4
    assert [id(p) for p in group["params"]] == [id(p) for p in run.model.parameters()]
    before = [p.detach().clone() for p in run.model.parameters()]
    run.step((torch.rand(4, 1, 28, 28), torch.tensor([0, 1, 2, 3])))
    for (name, parameter), old in zip(run.model.named_parameters(), before, strict=True):
        if parameter.grad is not None and parameter.grad.abs().sum() > 0:
            assert not torch.equal(parameter.detach(), old), name


def test_the_run_state_round_trips_through_a_checkpoint(tmp_path):
    config = TrainConfig(model=TINY, weight_averaging=0.5)
    run = build_run(config, "cpu", plan_for(config, reference=True))
    run.step((torch.rand(4, 1, 28, 28), torch.tensor([0, 1, 2, 3])))
    run.scheduler.step()
    save_checkpoint(tmp_path / "c.safetensors", metadata={}, **run.state())
    other = build_run(config, "cpu", plan_for(config, reference=True))
    other.load(load_checkpoint(tmp_path / "c.safetensors"))
    assert other.optimizer.param_groups[0]["lr"] == pytest.approx(
        run.optimizer.param_groups[0]["lr"]
    )
    for a, b in zip(run.average.model.parameters(), other.average.model.parameters()):
        assert torch.equal(a, b)
    save_checkpoint(
        tmp_path / "n.safetensors", run.model.state_dict(), {}, run.optimizer.state_dict()
    )
    with pytest.raises(ValueError, match="no averaged weights"):
        other.load(load_checkpoint(tmp_path / "n.safetensors"))


@pytest.mark.slow
def test_multimnist_trains_through_the_same_trainer(mnist_root, tmp_path):
    """Two overlapping digits: new pairs every epoch, the pair objective, both digits
    counted, a resumable run (as for one digit)."""
    tiny = dataclasses.replace(TINY, image_size=36)
    config = profile(
        "multimnist",
        epochs=2,
        batch_size=16,
        train_size=64,
        test_size=40,
        model=dataclasses.asdict(tiny),
    )
    result = train(config, tmp_path, data_root=mnist_root, progress=False)
    first, second = result.history["epochs"]
    assert set(first) >= {"margin_loss", "reconstruction_loss", "test_accuracy", "train_accuracy"}
    assert first["test_count"] == 40 and len(first["step_margin_loss"]) == 4
    assert isinstance(result.model, PairedCapsNet)
    # each epoch saw new pairs: the same seed and epoch give the same ones again
    train_data, test_data = load_run_data(config, "cpu", mnist_root)
    generator = torch.Generator().manual_seed(5)
    one = next(train_data.batches(8, generator=generator))
    again = next(train_data.batches(8, generator=torch.Generator().manual_seed(5)))
    assert all(torch.equal(a, b) for a, b in zip(one, again))
    assert one[1].shape == (8, 2) and one[2].shape == (8, 2, 1, 36, 36)
    assert (one[1][:, 0] < one[1][:, 1]).all()
    scored = evaluate(result.model, test_data)
    assert scored["accuracy"] == pytest.approx(second["test_accuracy"])


def test_a_run_resumed_with_other_implementations_keeps_its_own_adam_and_the_loss_scale(
    tmp_path,
):
    """A checkpoint of the reference code (unfused Adam), resumed by a fast run: the
    fast run steps with the fused Adam it built, from the saved moments (torch's
    load_state_dict alone would bring back fused=False). float16's loss scale comes
    back with the checkpoint (a GradScaler stands in for a T4 run's: a CPU plans no
    float16)."""
    config = TrainConfig(model=TINY)
    batch = (torch.rand(4, 1, 28, 28), torch.tensor([0, 1, 2, 3]))
    reference = build_run(config, "cpu", plan_for(config, reference=True))
    reference.step(batch)
    reference.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=7)
    save_checkpoint(tmp_path / "c.safetensors", metadata={}, **reference.state())
    fast = build_run(config, "cpu")
    fast.scaler = torch.amp.GradScaler("cpu")
    fast.load(load_checkpoint(tmp_path / "c.safetensors"))
    assert fast.optimizer.param_groups[0]["fused"] and fast.details["optimizer"] == "Adam, fused"
    saved = reference.optimizer.state_dict()["state"]
    for index, state in fast.optimizer.state_dict()["state"].items():
        assert torch.equal(state["exp_avg"], saved[index]["exp_avg"])
        assert torch.equal(state["step"], saved[index]["step"])
    assert fast.scaler.state_dict() == reference.scaler.state_dict()
    assert fast.scaler.get_scale() == 1024.0
    fast.step(batch)  # and it trains on, fused
    assert all(s["step"].item() == 2 for s in fast.optimizer.state.values())


@pytest.mark.slow
def test_a_run_continued_with_reference_then_fast_code_and_on_another_device(
    mnist_root, tmp_path, monkeypatch
):
    """Three sessions of one run: fast, --reference, fast again on a device of another
    name. Each trains with the Adam its plan built (the last checkpoint's Adam is
    fused), the history says which device and plan each session had, and the run's
    device names both."""
    config = TrainConfig(
        epochs=1, batch_size=32, train_size=64, test_size=50, max_shift=0, model=TINY
    )
    run = {"data_root": mnist_root, "progress": False, "implementation": PINNED}
    train(config, tmp_path, **run)
    train(dataclasses.replace(config, epochs=2), tmp_path, fast=False, **run)
    cpu = json.loads((tmp_path / "history.json").read_text())["device"]
    monkeypatch.setattr("capsnotes.training.history.device_name", lambda device: "GPU X")
    result = train(dataclasses.replace(config, epochs=3), tmp_path, **run)
    history = result.history
    sessions = history["session_details"]
    assert [s["fast_paths"] for s in sessions] == [True, False, True]
    assert [s["optimizer"] for s in sessions] == ["Adam, fused", "Adam", "Adam, fused"]
    assert [s["routing"] for s in sessions] == ["fused", "reference", "fused"]
    assert [s["device"] for s in sessions] == [cpu, cpu, "GPU X"]
    assert history["device"] == f"{cpu}; GPU X" and len(history["epochs"]) == 3
    saved = load_checkpoint(tmp_path)
    assert saved.optimizer_state["param_groups"][0]["fused"] is True
    assert all(torch.isfinite(p).all() for p in result.model.parameters())
    monkeypatch.undo()  # a fourth session, back on the first device
    history = train(dataclasses.replace(config, epochs=4), tmp_path, **run).history
    assert history["device"] == f"{cpu}; GPU X" and len(history["session_details"]) == 4


@pytest.mark.slow
def test_the_estimate_of_a_run_times_its_steps(mnist_root):
    config = TrainConfig(
        epochs=3, batch_size=16, train_size=64, test_size=50, max_shift=1, model=TINY
    )
    estimate = estimate_run(config, "cpu", steps=2, data_root=mnist_root)
    assert estimate["steps_per_epoch"] == 4 and estimate["seconds_per_step"] > 0
    assert estimate["epoch_seconds"] == pytest.approx(4 * estimate["seconds_per_step"])
    assert estimate["run_seconds"] == pytest.approx(3 * estimate["epoch_seconds"])
    assert estimate["plan"]["routing"] == "fused" and "step_seconds" in estimate["plan"]
    with pytest.raises(ValueError, match="at least one batch of 128"):
        estimate_run(dataclasses.replace(config, batch_size=128), "cpu", data_root=mnist_root)
