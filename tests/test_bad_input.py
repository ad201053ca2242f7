"""Bad input at every door (the model's entrance, the paper's functions and layers, the
configurations and layers' constructors, the loader, evaluation, the files, the command
line) gets a TypeError (the wrong kind or dtype) or ValueError (the wrong shape, size or
range), or a clear FileNotFoundError, that names the argument and what was expected. One
case per row. Inside the model the layers check again what the model's door let in
(capsnotes/checks.py): Python on shapes, no value of a GPU's or a meta tensor read, which
the last tests hold on meta tensors and in float64 and bfloat16."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from capsbook.analysis import image_moments, perturb_dimensions
from capsnotes import (
    CapsNet,
    CapsNetConfig,
    CapsNetOutput,
    Decoder,
    DigitCapsules,
    DynamicRouting,
    PrimaryCapsules,
    Squash,
    capsnet_loss,
    dynamic_routing,
    dynamic_routing_with_couplings,
    margin_loss,
    mask_capsules,
    reconstruction_loss,
    squash,
)
from capsnotes.data import ImageSet, load_dataset, random_shift
from capsnotes.fast.precision import resolve_device
from capsnotes.training.checkpoint import load_checkpoint, load_model_state, save_checkpoint
from capsnotes.training.cli import main
from capsnotes.training.config import TrainConfig, profile
from capsnotes.training.evaluation import evaluate, routing_statistics
from capsnotes.training.pretrained import load_pretrained
from tests.conftest import TINY

CAPSULES = torch.rand(3, 10, 16)
LABELS = torch.tensor([0, 1, 2])
VOTES = torch.rand(2, 4, 3, 5)  # [batch, child, parent, dim]
DIGITS = ImageSet(torch.zeros(4, 1, 28, 28, dtype=torch.uint8), torch.arange(4), ("a",) * 10)


def small_model():
    torch.manual_seed(0)
    return CapsNet(TINY)


def small_primary():
    """Primary capsules of 8 input channels, 3x3 kernel: [B, 8, H, W] → [B, N, 2]."""
    return PrimaryCapsules(8, 4, 2, 3, 1)


def small_digits():
    """Digit capsules of 6 inputs of 4 dimensions: [B, 6, 4] → [B, 3, 5]."""
    return DigitCapsules(6, 4, 3, 5)


def output_of(capsules, reconstructions):
    """What a CapsNet returns, as far as capsnet_loss reads it (not the lengths)."""
    return CapsNetOutput(capsules, None, LABELS, reconstructions)


#: The paper's functional forms and layers, called directly (tests/test_structure.py
#: checks their jaxtyping signatures; these are their doors, capsnotes/checks.py).
PAPER_CASES = {
    # squash (eq. 1)
    "squash, a list": (
        lambda: squash([3.0, 4.0]),
        TypeError,
        r"s must be a floating-point torch.Tensor with at least one dimension, got list",
    ),
    "squash, integers": (
        lambda: squash(torch.arange(4)),
        TypeError,
        r"s must be a floating-point torch.Tensor .*, got dtype torch.int64",
    ),
    "squash, a scalar": (
        lambda: squash(torch.tensor(5.0)),
        ValueError,
        r"s must be .* at least one dimension, got shape \(\)",
    ),
    "squash, dim past the last axis": (
        lambda: squash(torch.rand(2, 3), dim=2),
        ValueError,
        r"dim must be an int in \[-2, 2\) for s of shape \(2, 3\), got 2",
    ),
    "squash, dim before the first axis": (
        lambda: squash(torch.rand(2, 3), dim=-3),
        ValueError,
        r"dim must be an int in \[-2, 2\)",
    ),
    "squash, fractional dim": (
        lambda: squash(torch.rand(2, 3), dim=1.0),
        TypeError,
        "dim must be an int, got float 1.0",
    ),
    "squash, dim True": (
        lambda: squash(torch.rand(2, 3), dim=True),
        TypeError,
        "dim must be an int, got bool True",
    ),
    "squash, negative eps": (
        lambda: squash(torch.rand(2, 3), eps=-1e-8),
        ValueError,
        "eps must be a non-negative real number, got -1e-08",
    ),
    "squash, NaN eps": (
        lambda: squash(torch.rand(2, 3), eps=float("nan")),
        ValueError,
        "eps must be a non-negative real number, got nan",
    ),
    "squash, eps as a string": (
        lambda: squash(torch.rand(2, 3), eps="1e-8"),
        TypeError,
        "eps must be a non-negative real number, got str '1e-8'",
    ),
    "squash, eps as a tensor": (
        lambda: squash(torch.rand(2, 3), eps=torch.tensor(1e-8)),
        TypeError,
        "eps must be a non-negative real number, got Tensor",
    ),
    "Squash, negative eps": (
        lambda: Squash(eps=-1.0),
        ValueError,
        "eps must be a non-negative real number, got -1.0",
    ),
    "Squash, fractional dim": (
        lambda: Squash(dim=0.5),
        TypeError,
        "dim must be an int, got float 0.5",
    ),
    "Squash, integers": (
        lambda: Squash()(torch.arange(4)),
        TypeError,
        "s must be a floating-point torch.Tensor",
    ),
    "Squash, dim past the last axis": (
        lambda: Squash(dim=3)(torch.rand(2, 3)),
        ValueError,
        r"dim must be an int in \[-2, 2\)",
    ),
    # routing by agreement (Procedure 1)
    "routing, zero iterations (was an UnboundLocalError)": (
        lambda: dynamic_routing(VOTES, iterations=0),
        ValueError,
        "routing iterations must be >= 1, got 0",
    ),
    "routing, negative iterations": (
        lambda: dynamic_routing(VOTES, -2),
        ValueError,
        "routing iterations must be >= 1, got -2",
    ),
    "routing, iterations True": (
        lambda: dynamic_routing(VOTES, True),
        TypeError,
        "routing iterations must be an int >= 1, got bool True",
    ),
    "routing, iterations 1.5": (
        lambda: dynamic_routing(VOTES, 1.5),
        TypeError,
        "routing iterations must be an int >= 1, got float 1.5",
    ),
    "routing, iterations as a tensor": (
        lambda: dynamic_routing(VOTES, torch.tensor(3)),
        TypeError,
        "routing iterations must be an int",
    ),
    "routing, votes without a batch axis": (
        lambda: dynamic_routing(VOTES[0]),
        ValueError,
        r"u_hat must be a floating-point torch.Tensor \[batch, child, parent, dim\], "
        r"got shape \(4, 3, 5\)",
    ),
    "routing, integer votes": (
        lambda: dynamic_routing(VOTES.long()),
        TypeError,
        r"u_hat must be .*\[batch, child, parent, dim\], got dtype torch.int64",
    ),
    "routing, votes as an array": (
        lambda: dynamic_routing(VOTES.numpy()),
        TypeError,
        r"u_hat must be .*\[batch, child, parent, dim\], got ndarray",
    ),
    "routing module, votes of 5 axes": (
        lambda: DynamicRouting(2)(VOTES.unsqueeze(0)),
        ValueError,
        r"u_hat must be .*, got shape \(1, 2, 4, 3, 5\)",
    ),
    "routing module, iterations True": (
        lambda: DynamicRouting(True),
        TypeError,
        "routing iterations must be an int >= 1, got bool True",
    ),
    "routing module, zero iterations": (
        lambda: DynamicRouting(0),
        ValueError,
        "routing iterations must be >= 1, got 0",
    ),
    # primary capsules
    "primary capsules, the wrong number of channels": (
        lambda: small_primary()(torch.rand(2, 4, 10, 10)),
        ValueError,
        r"features must be a floating-point torch.Tensor \[batch, 8, height, width\]"
        r".*got shape \(2, 4, 10, 10\)",
    ),
    "primary capsules, a map smaller than the kernel": (
        lambda: small_primary()(torch.rand(2, 8, 10, 2)),
        ValueError,
        r"at least the kernel, 3x3\), got shape \(2, 8, 10, 2\)",
    ),
    "primary capsules, no batch axis": (
        lambda: small_primary()(torch.rand(8, 10, 10)),
        ValueError,
        r"features must be .*, got shape \(8, 10, 10\)",
    ),
    "primary capsules, integer features": (
        lambda: small_primary()(torch.ones(2, 8, 10, 10, dtype=torch.int32)),
        TypeError,
        r"features must be .*\[batch, 8, height, width\].*, got dtype torch.int32",
    ),
    "primary capsules, features as a list": (
        lambda: small_primary()([[0.0]]),
        TypeError,
        "features must be a floating-point torch.Tensor .*, got list",
    ),
    "primary capsules, no capsule dimensions": (
        lambda: PrimaryCapsules(capsule_dim=0),
        ValueError,
        "capsule_dim must be a positive int, got 0",
    ),
    "primary capsules, stride 1.5": (
        lambda: PrimaryCapsules(stride=1.5),
        TypeError,
        "stride must be a positive int, got float 1.5",
    ),
    "primary capsules, in_channels True": (
        lambda: PrimaryCapsules(in_channels=True),
        TypeError,
        "in_channels must be a positive int, got bool True",
    ),
    "primary capsules, zero kernel": (
        lambda: PrimaryCapsules(kernel_size=0),
        ValueError,
        "kernel_size must be a positive int, got 0",
    ),
    "primary capsules, no capsule channels": (
        lambda: PrimaryCapsules(capsule_channels=-32),
        ValueError,
        "capsule_channels must be a positive int, got -32",
    ),
    # digit capsules
    "digit capsules, the wrong number of inputs": (
        lambda: small_digits()(torch.rand(2, 5, 4)),
        ValueError,
        r"u must be a floating-point torch.Tensor \[batch, 6, 4\], got shape \(2, 5, 4\)",
    ),
    "digit capsules, inputs of the wrong dimension": (
        lambda: small_digits()(torch.rand(2, 6, 8)),
        ValueError,
        r"u must be .*\[batch, 6, 4\], got shape \(2, 6, 8\)",
    ),
    "digit capsules, no batch axis": (
        lambda: small_digits()(torch.rand(6, 4)),
        ValueError,
        r"u must be .*\[batch, 6, 4\], got shape \(6, 4\)",
    ),
    "digit capsules, integer inputs": (
        lambda: small_digits()(torch.ones(2, 6, 4, dtype=torch.long)),
        TypeError,
        r"u must be .*\[batch, 6, 4\], got dtype torch.int64",
    ),
    "digit capsules, votes of the wrong size": (
        lambda: small_digits().votes(torch.rand(2, 6, 3)),
        ValueError,
        r"u must be .*\[batch, 6, 4\], got shape \(2, 6, 3\)",
    ),
    "digit capsules, votes of a tuple": (
        lambda: small_digits().votes((1.0, 2.0)),
        TypeError,
        "u must be a floating-point torch.Tensor .*, got tuple",
    ),
    "digit capsules, no inputs": (
        lambda: DigitCapsules(in_caps=0),
        ValueError,
        "in_caps must be a positive int, got 0",
    ),
    "digit capsules, negative input dimension": (
        lambda: DigitCapsules(in_dim=-1),
        ValueError,
        "in_dim must be a positive int, got -1",
    ),
    "digit capsules, fractional output dimension": (
        lambda: DigitCapsules(out_dim=2.0),
        TypeError,
        "out_dim must be a positive int, got float 2.0",
    ),
    "digit capsules, no outputs": (
        lambda: DigitCapsules(out_caps=0),
        ValueError,
        "out_caps must be a positive int, got 0",
    ),
    "digit capsules, iterations True": (
        lambda: DigitCapsules(iterations=True),
        TypeError,
        "routing iterations must be an int >= 1, got bool True",
    ),
    # the mask and the decoder
    "mask, a label short": (
        lambda: mask_capsules(CAPSULES, LABELS[:2]),
        ValueError,
        r"classes must have shape \[3\] \(one class per image\), got \(2,\)",
    ),
    "mask, labels out of range": (
        lambda: mask_capsules(CAPSULES, torch.tensor([0, 1, 10])),
        ValueError,
        r"classes must lie in \[0, 10\), got values 0 to 10",
    ),
    "mask, negative labels": (
        lambda: mask_capsules(CAPSULES, torch.tensor([-1, 1, 2])),
        ValueError,
        r"classes must lie in \[0, 10\), got values -1 to 2",
    ),
    "mask, float labels": (
        lambda: mask_capsules(CAPSULES, LABELS.float()),
        TypeError,
        r"classes must be an integer tensor \[3\] of classes, got torch.float32",
    ),
    "mask, labels as a list": (
        lambda: mask_capsules(CAPSULES, [0, 1, 2]),
        TypeError,
        r"classes must be an integer tensor \[3\] of classes, got list",
    ),
    "mask, integer capsules": (
        lambda: mask_capsules(CAPSULES.long(), LABELS),
        TypeError,
        r"capsules must be a floating-point torch.Tensor \[batch, classes, dim\], "
        "got dtype torch.int64",
    ),
    "mask, lengths instead of capsules": (
        lambda: mask_capsules(CAPSULES.norm(dim=-1), LABELS),
        ValueError,
        r"capsules must be .*\[batch, classes, dim\], got shape \(3, 10\)",
    ),
    "mask, capsules as a list": (
        lambda: mask_capsules(CAPSULES.tolist(), LABELS),
        TypeError,
        r"capsules must be .*\[batch, classes, dim\], got list",
    ),
    "decoder, capsules of the wrong dimension": (
        lambda: Decoder(10, 16, 784, (32,))(torch.rand(3, 10, 8), LABELS),
        ValueError,
        r"capsules must be a floating-point torch.Tensor \[batch, 10, 16\], "
        r"got shape \(3, 10, 8\)",
    ),
    "decoder, the wrong number of capsules": (
        lambda: Decoder(10, 16, 784, (32,))(torch.rand(3, 8, 16), LABELS),
        ValueError,
        r"capsules must be .*\[batch, 10, 16\], got shape \(3, 8, 16\)",
    ),
    "decoder, labels out of range": (
        lambda: Decoder(10, 16, 784, (32,))(CAPSULES, torch.tensor([0, 12, 2])),
        ValueError,
        r"classes must lie in \[0, 10\), got values 0 to 12",
    ),
    "decoder, boolean labels": (
        lambda: Decoder(10, 16, 784, (32,))(CAPSULES, LABELS > 0),
        TypeError,
        "classes must be an integer tensor",
    ),
    "decoder, no classes": (
        lambda: Decoder(num_classes=0),
        ValueError,
        "num_classes must be a positive int, got 0",
    ),
    "decoder, fractional capsule dimension": (
        lambda: Decoder(capsule_dim=16.0),
        TypeError,
        "capsule_dim must be a positive int, got float 16.0",
    ),
    "decoder, negative output size": (
        lambda: Decoder(output_size=-1),
        ValueError,
        "output_size must be a positive int, got -1",
    ),
    "decoder, an empty hidden layer": (
        lambda: Decoder(hidden=(512, 0)),
        ValueError,
        r"hidden\[1\] must be a positive int, got 0",
    ),
    # the margin loss (eq. 4)
    "margin loss, a label too many (was torch's size mismatch)": (
        lambda: margin_loss(torch.rand(2, 10, 16), torch.tensor([0, 1, 2])),
        ValueError,
        r"target must have shape \[2\] \(one class per image\), got \(3,\)",
    ),
    "margin loss, labels out of range (was one_hot's error)": (
        lambda: margin_loss(torch.rand(2, 10, 16), torch.tensor([0, 12])),
        ValueError,
        r"target must lie in \[0, 10\), got values 0 to 12",
    ),
    "margin loss, float labels": (
        lambda: margin_loss(CAPSULES, LABELS.float()),
        TypeError,
        r"target must be an integer tensor \[3\] of classes, got torch.float32",
    ),
    "margin loss, labels as a list": (
        lambda: margin_loss(CAPSULES, [0, 1, 2]),
        TypeError,
        r"target must be class indices \[3\] or a presence matrix \[3, 10\] "
        r"\(v has shape \(3, 10, 16\)\), got list",
    ),
    "margin loss, a presence matrix of the wrong size": (
        lambda: margin_loss(CAPSULES, torch.zeros(3, 9)),
        ValueError,
        r"target must be class indices \[3\] or a presence matrix \[3, 10\].*"
        r"got shape \(3, 9\)",
    ),
    "margin loss, a target of three axes": (
        lambda: margin_loss(CAPSULES, torch.zeros(3, 10, 1)),
        ValueError,
        r"target must be .*, got shape \(3, 10, 1\)",
    ),
    "margin loss, a scalar target": (
        lambda: margin_loss(CAPSULES, torch.tensor(1)),
        ValueError,
        r"target must be .*, got shape \(\)",
    ),
    "margin loss, lengths instead of capsules": (
        lambda: margin_loss(CAPSULES.norm(dim=-1), LABELS),
        ValueError,
        r"v must be a floating-point torch.Tensor \[batch, classes, dim\], "
        r"got shape \(3, 10\)",
    ),
    "margin loss, integer capsules": (
        lambda: margin_loss(CAPSULES.long(), LABELS),
        TypeError,
        r"v must be .*\[batch, classes, dim\], got dtype torch.int64",
    ),
    "margin loss, capsules as an array": (
        lambda: margin_loss(CAPSULES.numpy(), LABELS),
        TypeError,
        r"v must be .*\[batch, classes, dim\], got ndarray",
    ),
    "margin loss, m_pos as a string": (
        lambda: margin_loss(CAPSULES, LABELS, m_pos="0.9"),
        TypeError,
        "m_pos must be a real number, got str '0.9'",
    ),
    "margin loss, m_neg NaN": (
        lambda: margin_loss(CAPSULES, LABELS, m_neg=float("nan")),
        ValueError,
        "m_neg must be a real number, got nan",
    ),
    "margin loss, lam True": (
        lambda: margin_loss(CAPSULES, LABELS, lam=True),
        TypeError,
        "lam must be a real number, got bool True",
    ),
    # the reconstruction loss
    "reconstruction loss, integer reconstructions": (
        lambda: reconstruction_loss(torch.ones(2, 784, dtype=torch.uint8), torch.rand(2, 784)),
        TypeError,
        r"reconstructions must be a floating-point torch.Tensor \[batch, ...\].*"
        "got dtype torch.uint8",
    ),
    "reconstruction loss, reconstructions as a list": (
        lambda: reconstruction_loss([[0.5]], torch.rand(1, 1)),
        TypeError,
        r"reconstructions must be .*, got list",
    ),
    "reconstruction loss, one value per example": (
        lambda: reconstruction_loss(torch.rand(2), torch.rand(2)),
        ValueError,
        r"reconstructions must be .*\(at least 2 dimensions\), got shape \(2,\)",
    ),
    "reconstruction loss, an image too many": (
        lambda: reconstruction_loss(torch.rand(2, 784), torch.rand(3, 1, 28, 28)),
        ValueError,
        r"images must be a torch.Tensor \[batch, ...\] of 2 examples of 784 values each"
        r".*got shape \(3, 1, 28, 28\)",
    ),
    "reconstruction loss, images of another size": (
        lambda: reconstruction_loss(torch.rand(2, 784), torch.rand(2, 1, 28, 27)),
        ValueError,
        r"images must be .* of 2 examples of 784 values each.*got shape \(2, 1, 28, 27\)",
    ),
    "reconstruction loss, images without a batch axis": (
        lambda: reconstruction_loss(torch.rand(2, 1), torch.rand(2)),
        ValueError,
        r"images must be .* of 2 examples of 1 values each.*got shape \(2,\)",
    ),
    "reconstruction loss, images as a list": (
        lambda: reconstruction_loss(torch.rand(2, 1), [[0.0], [1.0]]),
        TypeError,
        r"images must be a torch.Tensor \[batch, ...\].*got list",
    ),
    "reconstruction loss, negative weight": (
        lambda: reconstruction_loss(torch.rand(2, 4), torch.rand(2, 4), -0.0005),
        ValueError,
        "weight must be a non-negative real number, got -0.0005",
    ),
    "reconstruction loss, weight as a string": (
        lambda: reconstruction_loss(torch.rand(2, 4), torch.rand(2, 4), "0.0005"),
        TypeError,
        "weight must be a non-negative real number, got str '0.0005'",
    ),
    # the whole objective
    "capsnet loss, a dict for the output": (
        lambda: capsnet_loss({"capsules": CAPSULES}, torch.rand(3, 4), LABELS),
        TypeError,
        "output must be what a CapsNet returns, with the tensors capsules and "
        "reconstructions, got dict",
    ),
    "capsnet loss, integer capsules": (
        lambda: capsnet_loss(
            output_of(CAPSULES.long(), torch.rand(3, 4)), torch.rand(3, 4), LABELS
        ),
        TypeError,
        r"output.capsules must be a floating-point torch.Tensor \[batch, classes, dim\], "
        "got dtype torch.int64",
    ),
    "capsnet loss, integer reconstructions": (
        lambda: capsnet_loss(
            output_of(CAPSULES, torch.ones(3, 4, dtype=torch.long)), torch.rand(3, 4), LABELS
        ),
        TypeError,
        r"output.reconstructions must be .*\[batch, ...\], got dtype torch.int64",
    ),
    "capsnet loss, labels out of range": (
        lambda: capsnet_loss(output_of(CAPSULES, torch.rand(3, 4)), torch.rand(3, 4), LABELS + 8),
        ValueError,
        r"target must lie in \[0, 10\), got values 8 to 10",
    ),
    "capsnet loss, negative weight": (
        lambda: capsnet_loss(output_of(CAPSULES, torch.rand(3, 4)), torch.rand(3, 4), LABELS, -1),
        ValueError,
        "weight must be a non-negative real number, got -1",
    ),
}


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
    "model, a label short": (
        lambda: small_model()(torch.rand(2, 1, 28, 28), torch.tensor([3])),
        ValueError,
        r"labels must have shape \[2\] \(one class per image\), got \(1,\)",
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


@pytest.mark.parametrize("case", list(PAPER_CASES), ids=list(PAPER_CASES))
def test_bad_input_to_the_paper_is_named(case):
    call, error, message = PAPER_CASES[case]
    with pytest.raises(error, match=message):
        call()


def call_every_function(device, dtype):
    """Every public function and layer of the paper, called with good inputs of
    ``dtype`` on ``device``; returns what each gave."""
    torch.manual_seed(0)
    with torch.device(device):
        floats = {"dtype": dtype}
        images, labels = torch.rand(2, 1, 28, 28, **floats), torch.tensor([1, 3])
        votes, presence = torch.rand(2, 4, 3, 5, **floats), torch.tensor([[0, 1, 1]])
        capsules = torch.rand(2, 10, 4, **floats)
        layers = {
            "primary": small_primary().to(dtype),
            "digits": small_digits().to(dtype),
            "decoder": Decoder(10, 4, 784, (16,)).to(dtype),
            "model": CapsNet(TINY).to(dtype),
        }
        u = torch.rand(2, 6, 4, **floats)
        output = layers["model"](images, labels)
        return {
            "squash": squash(votes, dim=1, eps=0),
            "Squash": Squash(dim=-2, eps=1e-3)(votes),
            "dynamic_routing_with_couplings": dynamic_routing_with_couplings(votes, 1),
            "DynamicRouting": DynamicRouting(2)(votes),
            "PrimaryCapsules": layers["primary"](torch.rand(2, 8, 5, 6, **floats)),
            "DigitCapsules.votes": layers["digits"].votes(u),
            "DigitCapsules": layers["digits"](u),
            "DigitCapsules, couplings": layers["digits"].forward_with_couplings(u),
            "mask_capsules": mask_capsules(capsules, labels),
            "Decoder": layers["decoder"](capsules, labels),
            "margin_loss": margin_loss(capsules, labels, 0.9, 0.1, 1),
            "margin_loss, presence": margin_loss(votes[:1, 0], presence),
            "reconstruction_loss": reconstruction_loss(
                output.reconstructions, images.to(torch.uint8), weight=0
            ),
            "capsnet_loss": capsnet_loss(output, images, labels).total,
            "CapsNet": output.capsules,
        }


@pytest.mark.parametrize(
    "device, dtype",
    [("meta", torch.float32), ("cpu", torch.float64), ("cpu", torch.bfloat16)],
    ids=["meta", "float64", "bfloat16"],
)
def test_good_input_passes_every_door(device, dtype):
    """The doors read shapes and dtypes only: on meta tensors, which hold no values
    (reading one raises), every function of the paper still runs; in float64 and
    bfloat16 it keeps the dtype. (Routing's float64 gradcheck: tests/test_routing.py.)"""
    results = call_every_function(device, dtype)
    for name, result in results.items():
        first = result[0] if isinstance(result, tuple) else result
        assert first.device.type == device, name
        assert first.dtype == (torch.float32 if name == "capsnet_loss" else dtype), name


def test_the_doors_read_no_values_of_a_meta_tensor():
    """Class indices on a meta device get their shape checked and no range (a CPU's
    would be refused: tests above)."""
    with torch.device("meta"):
        v, far_out = torch.rand(3, 10, 16), torch.tensor([0, 1, 2])
        assert margin_loss(v, far_out).device.type == "meta"
        assert mask_capsules(v, far_out).shape == (3, 160)
        with pytest.raises(ValueError, match=r"classes must have shape \[3\]"):
            mask_capsules(v, far_out[:2])


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
