"""The seam that builds a run from its configuration: implementations chosen at
construction, the optimizer, the schedule, the average and the step."""

import pytest
import torch

from capsnotes import CapsNet, TrainConfig, dynamic_routing
from capsnotes.config import profile
from capsnotes.convnet import ConvNet
from capsnotes.kernels import MatmulConv2d, fused_dynamic_routing
from capsnotes.run import build_model, build_run, choose_implementation, make_optimizer
from capsnotes.step import TrainingStep
from tests.conftest import TINY


def test_the_reference_run_is_plain_pytorch():
    config = TrainConfig(model=TINY)
    run = build_run(config, "cpu", fast=False)
    assert type(run.model) is CapsNet
    assert run.model.digits.route is dynamic_routing and type(run.model.conv1) is torch.nn.Conv2d
    assert not run.optimizer.defaults["fused"]
    assert isinstance(run.step, TrainingStep) and run.average is None
    assert run.result_model is run.model
    assert run.details == {
        "fast_paths": False,
        "optimizer": "Adam",
        "cuda_graphs": False,
        "precision": "float32",
        "routing": "reference",
        "convolution": "native",
    }


def test_a_fast_cpu_run_times_the_convolutions_on_the_sample():
    config = TrainConfig(model=TINY, weight_averaging=0.9)
    sample = (torch.rand(4, 1, 28, 28), torch.tensor([0, 1, 2, 3]))
    run = build_run(config, "cpu", sample=sample)
    assert run.model.digits.route is fused_dynamic_routing and run.details["routing"] == "fused"
    assert {"native, float32", "matmul, float32"} <= set(run.details["step_seconds"])
    timed = run.details["step_seconds"]
    chosen = f"{run.details['convolution']}, {run.details['precision']}"
    assert timed[chosen] == min(timed.values())
    assert (run.step.precision is None) == (run.details["precision"] == "float32")
    matmul = run.details["convolution"] == "matmul"
    assert isinstance(run.model.primary.conv, MatmulConv2d) is matmul
    assert run.optimizer.defaults["fused"] and run.details["optimizer"] == "Adam, fused"
    assert run.result_model is run.average.model
    # an explicit choice overrides the measured one
    forced = build_run(
        config,
        "cpu",
        sample=sample,
        implementation={"convolution": "matmul", "precision": "bfloat16"},
    )
    assert (
        isinstance(forced.model.conv1, MatmulConv2d) and forced.details["convolution"] == "matmul"
    )
    assert forced.step.precision is torch.bfloat16 and forced.details["precision"] == "bfloat16"
    with pytest.raises(ValueError, match="unknown precision 'float16'"):
        build_run(config, "cpu", sample=sample, implementation={"precision": "float16"})


def test_the_model_is_seeded_by_the_configuration_only():
    config = TrainConfig(model=TINY, seed=7)
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    a, b = build_model(config), build_model(config, routing="fused", convolution="matmul")
    assert torch.equal(torch.random.get_rng_state(), state)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), name
    assert isinstance(build_model(profile("cnn")), ConvNet)


def test_implementation_choices():
    assert choose_implementation(profile("cnn"), torch.device("cpu")) == ({}, None)
    capsnet = TrainConfig(model=TINY)
    assert choose_implementation(capsnet, torch.device("cpu"), fast=False) == ({}, None)
    assert choose_implementation(capsnet, torch.device("cpu")) == ({"routing": "fused"}, None)


def test_the_run_state_round_trips_through_a_checkpoint(tmp_path):
    from capsnotes.checkpoint import load_checkpoint, save_checkpoint

    config = TrainConfig(model=TINY, weight_averaging=0.5)
    run = build_run(config, "cpu", fast=False)
    images, labels = torch.rand(4, 1, 28, 28), torch.tensor([0, 1, 2, 3])
    run.step(images, labels)
    run.scheduler.step()
    save_checkpoint(tmp_path / "c.safetensors", metadata={}, **run.state())
    other = build_run(config, "cpu", fast=False)
    other.load(load_checkpoint(tmp_path / "c.safetensors"))
    assert other.learning_rate == pytest.approx(run.learning_rate)
    for a, b in zip(run.average.model.parameters(), other.average.model.parameters(), strict=True):
        assert torch.equal(a, b)
    plain = build_run(TrainConfig(model=TINY, weight_averaging=0.5), "cpu", fast=False)
    save_checkpoint(
        tmp_path / "n.safetensors", run.model.state_dict(), {}, run.optimizer.state_dict()
    )
    with pytest.raises(ValueError, match="no averaged weights"):
        plain.load(load_checkpoint(tmp_path / "n.safetensors"))


def test_fused_adam_makes_the_same_updates_as_the_default():
    """make_optimizer's fused Adam is torch's Adam: same parameters after a few steps."""
    torch.manual_seed(0)
    models = [torch.nn.Linear(6, 3), torch.nn.Linear(6, 3)]
    models[1].load_state_dict(models[0].state_dict())
    start = models[0].weight.detach().clone()
    fused, default = make_optimizer(models[0], 0.01), make_optimizer(models[1], 0.01, fused=False)
    assert fused.defaults["fused"] and not default.defaults["fused"]
    for _ in range(5):
        x = torch.randn(4, 6)
        for model, optimizer in zip(models, (fused, default), strict=True):
            optimizer.zero_grad()
            model(x).square().sum().backward()
            optimizer.step()
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    assert (models[0].weight - start).abs().max() > 0.02  # the steps did move it
