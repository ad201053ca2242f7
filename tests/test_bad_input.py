"""Bad input at every door (the model's entrance, the configurations and layers'
constructors, the loader, evaluation, the files, the command line) gets a TypeError or
ValueError (or a clear FileNotFoundError) that names what was expected. One case per
row. Inside the model, the layers and losses trust what the door let in."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from capsbook.analysis import image_moments, perturb_dimensions, routing_statistics
from capsnotes import (
    CapsNet,
    CapsNetConfig,
    DigitCapsules,
    DynamicRouting,
)
from capsnotes.data import ImageSet, load_dataset, random_shift
from capsnotes.fast.precision import resolve_device
from capsnotes.training.checkpoint import load_checkpoint, load_model_state, save_checkpoint
from capsnotes.training.cli import main
from capsnotes.training.config import TrainConfig, profile
from capsnotes.training.evaluation import evaluate
from capsnotes.training.pretrained import load_pretrained
from tests.conftest import TINY

CAPSULES = torch.rand(3, 10, 16)
DIGITS = ImageSet(torch.zeros(4, 1, 28, 28, dtype=torch.uint8), torch.arange(4), ("a",) * 10)


def small_model():
    torch.manual_seed(0)
    return CapsNet(TINY)


CASES = {
    # labels (the model's door checks them; the layers and losses inside it trust them,
    # and their shapes are checked under jaxtyping in tests/test_structure.py)
    "model, labels out of range": (
        lambda: small_model()(torch.rand(2, 1, 28, 28), torch.tensor([3, 10])),
        ValueError,
        r"labels must lie in \[0, 10\)",
    ),
    "model, labels as a list": (
        lambda: small_model()(torch.rand(2, 1, 28, 28), [3, 4]),
        TypeError,
        "labels must be an integer tensor",
    ),
    # images
    "model, images as bytes": (
        lambda: small_model()(torch.zeros(2, 1, 28, 28, dtype=torch.uint8)),
        TypeError,
        r"images must be a floating-point torch.Tensor \[batch, 1, 28, 28\]",
    ),
    "model, images without a channel axis": (
        lambda: small_model()(torch.rand(2, 28, 28)),
        ValueError,
        r"\[batch, 1, 28, 28\].*got shape \(2, 28, 28\)",
    ),
    "model, images of the wrong size": (
        lambda: small_model()(torch.rand(2, 1, 32, 32)),
        ValueError,
        r"\[batch, 1, 28, 28\]",
    ),
    "routing, zero iterations": (
        lambda: DigitCapsules(iterations=0),
        ValueError,
        "routing iterations must be >= 1",
    ),
    "routing, fractional iterations": (
        lambda: DynamicRouting(2.5),
        TypeError,
        "routing iterations must be an int",
    ),
    "shift, images without a batch axis": (
        lambda: random_shift(torch.rand(1, 28, 28), 2),
        ValueError,
        r"images must be a tensor \[B, C, H, W\]",
    ),
    "shift, negative": (
        lambda: random_shift(torch.rand(1, 1, 28, 28), -1),
        ValueError,
        "max_shift must be >= 0",
    ),
    "image moments, three channels": (
        lambda: image_moments(torch.rand(2, 3, 28, 28)),
        ValueError,
        "expected one channel",
    ),
    "perturbations, capsule of the wrong size": (
        lambda: perturb_dimensions(small_model(), torch.rand(16), 1, [0.0]),
        ValueError,
        r"capsule must have shape \[4\]",
    ),
    "image set, float images": (
        lambda: ImageSet(torch.rand(2, 1, 28, 28), torch.arange(2), ("a", "b")),
        TypeError,
        r"images must be a uint8 tensor \[N, C, H, W\]",
    ),
    "image set, a label short": (
        lambda: ImageSet(torch.zeros(2, 1, 28, 28, dtype=torch.uint8), torch.arange(1), ("a",)),
        ValueError,
        "need one label per image",
    ),
    # zero or negative sizes
    "batches of zero": (
        lambda: next(DIGITS.batches(0)),
        ValueError,
        "batch_size must be >= 1",
    ),
    "a subset of zero": (
        lambda: DIGITS.subset(0),
        ValueError,
        "subset size must be >= 1",
    ),
    "model config with no classes": (
        lambda: CapsNetConfig(num_classes=0),
        ValueError,
        "num_classes must be a positive int",
    ),
    "model config too small an image": (
        lambda: CapsNetConfig(image_size=12),
        ValueError,
        "needs inputs of at least 9 pixels",
    ),
    "train config, zero epochs": (
        lambda: TrainConfig(epochs=0),
        ValueError,
        "epochs must be a positive int",
    ),
    "train config, negative batch": (
        lambda: TrainConfig(batch_size=-8),
        ValueError,
        "batch_size must be a positive int",
    ),
    "train config, zero learning rate": (
        lambda: TrainConfig(learning_rate=0.0),
        ValueError,
        r"learning_rate must lie in \(0, inf\)",
    ),
    "train config, fractional shift": (
        lambda: TrainConfig(max_shift=1.5),
        TypeError,
        "max_shift must be an int",
    ),
    "train config, averaging decay of 1": (
        lambda: TrainConfig(weight_averaging=1.0),
        ValueError,
        "weight_averaging must lie in",
    ),
    "train config, unknown dataset": (
        lambda: TrainConfig(dataset="cifar10"),
        ValueError,
        "unknown dataset 'cifar10'; expected one of",
    ),
    "evaluate, an objective that is not a function": (
        lambda: evaluate(small_model(), DIGITS, {"eval_batch_size": 10}),
        TypeError,
        r"objective must be a function of \(output, \*batch\), got \{",
    ),
    "evaluate, batches of zero": (
        lambda: evaluate(small_model(), DIGITS, batch_size=0),
        ValueError,
        "batch_size must be >= 1",
    ),
    "train config, unknown architecture": (
        lambda: TrainConfig(architecture="resnet"),
        ValueError,
        "unknown architecture 'resnet'; expected one of",
    ),
    "train config, a CapsNet configuration for the CNN": (
        lambda: TrainConfig(architecture="cnn", model=TINY),
        TypeError,
        r"a cnn run needs model=ConvNetConfig\(...\), got CapsNetConfig",
    ),
    "routing statistics, zero iterations": (
        lambda: routing_statistics(small_model(), DIGITS, iterations=(0,)),
        ValueError,
        "routing iterations must be >= 1",
    ),
    # names
    "unknown profile": (
        lambda: profile("fast"),
        ValueError,
        "unknown profile 'fast'; expected one of",
    ),
    "unknown profile field": (
        lambda: profile("quick", epoch=3),
        ValueError,
        r"unknown TrainConfig fields: \['epoch'\]",
    ),
    "unknown dataset": (
        lambda: load_dataset("svhn"),
        ValueError,
        "unknown dataset 'svhn'; expected one of",
    ),
    "unknown pretrained model": (
        lambda: load_pretrained("fashion"),
        ValueError,
        "unknown pretrained model 'fashion'",
    ),
    "unknown device": (lambda: resolve_device("tpu"), ValueError, "device"),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_bad_input_is_named(case):
    call, error, message = CASES[case]
    with pytest.raises(error, match=message):
        call()


def test_mismatched_checkpoint_names_the_file(tmp_path):
    path = save_checkpoint(tmp_path / "other.safetensors", small_model().state_dict(), {})
    state = load_checkpoint(path).model_state
    with pytest.raises(ValueError, match="other.safetensors does not fit a CapsNet"):
        load_model_state(CapsNet(), state, path)


def test_cli_reports_a_mismatched_checkpoint(tmp_path, capsys):
    """The command line turns the error into one line on stderr and exit status 2 (its
    other bad values: tests/test_cli.py)."""
    model = small_model()
    config = dataclasses.replace(TrainConfig(), model=TINY).to_dict()
    config["model"]["digit_dim"] = 8  # the metadata describes another model
    save_checkpoint(
        tmp_path / "checkpoint.safetensors",
        model.state_dict(),
        {"train_config": config, "history": {}},
    )
    assert main(["evaluate", "--checkpoint", str(tmp_path), "--device", "cpu"]) == 2
    assert "checkpoint.safetensors does not fit a CapsNet" in capsys.readouterr().err
