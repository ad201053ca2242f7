"""Bad input to every public function gets a TypeError or ValueError (or a clear
FileNotFoundError) that names what was expected. One case per row."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from capsbook.analysis import image_moments, perturb_dimensions, routing_statistics
from capsnotes import (
    CapsNet,
    CapsNetConfig,
    Decoder,
    DigitCapsules,
    DynamicRouting,
    PrimaryCapsules,
    dynamic_routing,
    margin_loss,
    mask_capsules,
    reconstruction_loss,
    squash,
)
from capsnotes.training.cli import main
from capsnotes.training.checkpoint import load_checkpoint, load_model_state, save_checkpoint
from capsnotes.training.config import TrainConfig, profile
from capsnotes.data import ImageSet, load_dataset, random_shift
from capsnotes.training.evaluation import evaluate
from capsnotes.fast.precision import resolve_device
from capsnotes.training.pretrained import load_pretrained
from tests.conftest import TINY

CAPSULES = torch.rand(3, 10, 16)
DIGITS = ImageSet(torch.zeros(4, 1, 28, 28, dtype=torch.uint8), torch.arange(4), ("a",) * 10)


def small_model():
    torch.manual_seed(0)
    return CapsNet(TINY)


CASES = {
    # labels and targets
    "margin loss, label out of range": (
        lambda: margin_loss(CAPSULES, torch.tensor([0, 12, 3])),
        ValueError,
        r"target must lie in \[0, 10\), got values from 0 to 12",
    ),
    "margin loss, negative label": (
        lambda: margin_loss(CAPSULES, torch.tensor([0, -1, 3])),
        ValueError,
        r"target must lie in \[0, 10\)",
    ),
    "margin loss, float labels": (
        lambda: margin_loss(CAPSULES, torch.tensor([0.0, 1.0, 2.0])),
        TypeError,
        "target must be an integer tensor",
    ),
    "margin loss, wrong number of labels": (
        lambda: margin_loss(CAPSULES, torch.tensor([0, 1])),
        ValueError,
        r"target must have shape \[3\]",
    ),
    "margin loss, presence of the wrong width": (
        lambda: margin_loss(CAPSULES, torch.zeros(3, 9)),
        ValueError,
        r"presence \[3, 10\]",
    ),
    "margin loss, capsules without the dim axis": (
        lambda: margin_loss(torch.rand(3, 10), torch.tensor([0, 1, 2])),
        ValueError,
        r"v must be a floating-point torch.Tensor \[batch, classes, dim\]",
    ),
    "margin loss, margins in the wrong order": (
        lambda: margin_loss(CAPSULES, torch.tensor([0, 1, 2]), m_pos=0.1, m_neg=0.9),
        ValueError,
        "0 <= m_neg < m_pos",
    ),
    "mask, class out of range": (
        lambda: mask_capsules(CAPSULES, torch.tensor([0, 1, 10])),
        ValueError,
        r"classes must lie in \[0, 10\)",
    ),
    "decoder, wrong number of classes": (
        lambda: Decoder()(CAPSULES, torch.tensor([0, 1])),
        ValueError,
        r"classes must have shape \[3\]",
    ),
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
    "primary capsules, wrong channels": (
        lambda: PrimaryCapsules()(torch.rand(1, 3, 20, 20)),
        ValueError,
        r"features must be a floating-point torch.Tensor of shape \[batch, 256, any, any\]",
    ),
    "digit capsules, wrong number of capsules": (
        lambda: DigitCapsules()(torch.rand(2, 1000, 8)),
        ValueError,
        r"u must be a floating-point torch.Tensor of shape \[batch, 1152, 8\]",
    ),
    "squash, integers": (
        lambda: squash(torch.ones(3, dtype=torch.int64)),
        TypeError,
        "s must be a floating-point torch.Tensor",
    ),
    "squash, zero eps": (
        lambda: squash(torch.ones(3), eps=0.0),
        ValueError,
        "eps must be positive",
    ),
    "routing, votes without a batch axis": (
        lambda: dynamic_routing(torch.rand(1152, 10, 16)),
        ValueError,
        r"u_hat must be a floating-point torch.Tensor \[batch, child, parent, dim\]",
    ),
    "routing, zero iterations": (
        lambda: dynamic_routing(torch.rand(1, 5, 3, 4), 0),
        ValueError,
        "routing iterations must be >= 1",
    ),
    "routing, fractional iterations": (
        lambda: DynamicRouting(2.5),
        TypeError,
        "routing iterations must be an int",
    ),
    "reconstruction loss, pixel counts differ": (
        lambda: reconstruction_loss(torch.rand(2, 784), torch.rand(2, 1, 20, 20)),
        ValueError,
        "as many pixels as its image",
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
    "decoder with an empty hidden layer": (
        lambda: Decoder(hidden=(512, 0)),
        ValueError,
        r"hidden\[1\] must be a positive int",
    ),
    "digit capsules of dimension zero": (
        lambda: DigitCapsules(out_dim=0),
        ValueError,
        "out_dim must be a positive int",
    ),
    "primary capsules with stride zero": (
        lambda: PrimaryCapsules(stride=0),
        ValueError,
        "stride must be a positive int",
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
