"""What a training run is made of: :class:`TrainConfig` and the predefined profiles.

Every field carries its documentation, from which the command line builds its options
(``python -m capsnotes train --help``), and every field is checked when a configuration
is made, so a bad value fails before anything is loaded or trained.

Profiles:

* ``quick`` — a 2-core CPU: real MNIST, a subset, a few minutes at most.
* ``paper`` — a GPU: all 60,000 training images with the paper's shift augmentation.
* ``cnn`` — the CPU-sized baseline CNN of :mod:`capsnotes.convnet` on all of MNIST.
* ``paper-cnn`` — the paper's 35.4M-parameter baseline CNN (a GPU).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from .checks import (
    check_choice,
    check_int,
    check_positive_int,
    check_positive_number,
    check_range,
    dataclass_from_dict,
)
from .convnet import ConvNet, ConvNetConfig, convnet_loss
from .data import DATASETS
from .losses import Loss, capsnet_loss
from .model import CapsNet, CapsNetConfig
from .multimnist import PairedCapsNet

__all__ = [
    "ARCHITECTURES",
    "Architecture",
    "PROFILES",
    "TrainConfig",
    "default_profile",
    "profile",
]


@dataclass(frozen=True)
class Architecture:
    """What a run's ``architecture`` names: the configuration class of its model, the
    model class, the objective it trains with (``loss(config, output, images, labels)``,
    None where the objective needs more than a batch of images and labels), and which
    implementation choices (:mod:`capsnotes.tuning`) its constructor takes."""

    config: type
    model: type[nn.Module]
    loss: Callable[[TrainConfig, Any, Tensor, Tensor], Loss] | None
    implementations: tuple[str, ...] = ()


def _capsnet_objective(config: TrainConfig, output: Any, images: Tensor, labels: Tensor) -> Loss:
    return capsnet_loss(output, images, labels, config.reconstruction_weight)


def _convnet_objective(config: TrainConfig, output: Any, images: Tensor, labels: Tensor) -> Loss:
    return convnet_loss(output, images, labels)


#: The models a run can build, by the name the configuration uses.
ARCHITECTURES: dict[str, Architecture] = {
    "capsnet": Architecture(CapsNetConfig, CapsNet, _capsnet_objective, ("routing", "convolution")),
    "cnn": Architecture(ConvNetConfig, ConvNet, _convnet_objective),
    # MultiMNIST: its loss needs each digit alone (capsnotes.multimnist.pair_loss), so
    # its runs are trained by the campaign's MultiMNIST stage, not by train()
    "capsnet-pairs": Architecture(CapsNetConfig, PairedCapsNet, None, ("routing", "convolution")),
}


def _doc(text: str, **extra: Any) -> dict[str, Any]:
    return {"help": text, **extra}


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run (and so its results)."""

    architecture: str = field(
        default="capsnet",
        metadata=_doc(
            "the model: CapsNet, the baseline CNN, or CapsNet for two overlapping digits",
            choices=tuple(ARCHITECTURES),
        ),
    )
    dataset: str = field(default="mnist", metadata=_doc("the dataset", choices=tuple(DATASETS)))
    epochs: int = field(default=1, metadata=_doc("passes over the training set"))
    batch_size: int = field(default=128, metadata=_doc("training images per step"))
    learning_rate: float = field(
        default=1e-3, metadata=_doc("Adam's initial learning rate", flags=("--lr",))
    )
    lr_decay: float = field(
        default=0.96, metadata=_doc("the learning rate is multiplied by this after every epoch")
    )
    train_size: int | None = field(
        default=None, metadata=_doc("train on a random subset of this size (unset: all)")
    )
    test_size: int | None = field(
        default=None, metadata=_doc("test on a fixed random subset of this size (unset: all)")
    )
    max_shift: int = field(
        default=2, metadata=_doc("shift each training image by up to this many pixels")
    )
    canvas: int | None = field(
        default=None,
        metadata=_doc("centre the images on a black canvas of this size (unset: as they are)"),
    )
    seed: int = field(default=0, metadata=_doc("random seed of the weights, shuffles and shifts"))
    reconstruction_weight: float = field(
        default=0.0005,
        metadata=_doc("weight of the reconstruction loss (capsnet; 0: no decoder training)"),
    )
    eval_batch_size: int = field(default=500, metadata=_doc("test images per batch"))
    mixed_precision: bool = field(
        default=True,
        metadata=_doc(
            "bf16 autocast on GPUs with native bf16, and on CPUs with bf16 units where "
            "it trains a real batch faster (timed); else float32"
        ),
    )
    weight_averaging: float = field(
        default=0.0,
        metadata=_doc(
            "decay per step of a moving average of the weights (0: none); the average "
            "becomes the run's model",
            metavar="DECAY",
        ),
    )
    model: CapsNetConfig | ConvNetConfig = field(
        default_factory=CapsNetConfig, metadata=_doc("the model's sizes")
    )

    def __post_init__(self) -> None:
        check_choice("architecture", self.architecture, list(ARCHITECTURES))
        check_choice("dataset", self.dataset, list(DATASETS))
        model_class = ARCHITECTURES[self.architecture].config
        if isinstance(self.model, dict):
            object.__setattr__(self, "model", model_class.from_dict(self.model))
        if not isinstance(self.model, model_class):
            raise TypeError(
                f"a {self.architecture} run needs model={model_class.__name__}(...), "
                f"got {type(self.model).__name__}"
            )
        for name in ("epochs", "batch_size", "eval_batch_size"):
            check_positive_int(name, getattr(self, name))
        for name in ("train_size", "test_size"):
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name))
        check_positive_number("learning_rate", self.learning_rate)
        check_range("lr_decay", self.lr_decay, 0, 1, low_open=True)
        check_int("max_shift", self.max_shift, minimum=0)
        if self.canvas is not None:
            check_positive_int("canvas", self.canvas)
        check_int("seed", self.seed)
        check_range("reconstruction_weight", self.reconstruction_weight, 0, float("inf"))
        if not isinstance(self.mixed_precision, bool):
            raise TypeError(f"mixed_precision must be True or False, got {self.mixed_precision!r}")
        check_range("weight_averaging", self.weight_averaging, 0, 1, high_open=True)

    def loss(self, output: Any, images: Tensor, labels: Tensor) -> Loss:
        """This run's training objective on one batch: :func:`~capsnotes.capsnet_loss`
        with the run's reconstruction weight for a CapsNet, cross-entropy for the CNN."""
        objective = ARCHITECTURES[self.architecture].loss
        if objective is None:
            raise ValueError(
                f"a {self.architecture} model has no objective of images and labels alone"
            )
        return objective(self, output, images, labels)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        return dataclass_from_dict(cls, values)

    def key(self) -> str:
        """A short hash of the configuration: equal configurations, equal keys."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


#: A 1.25M-parameter member of the paper's baseline family that trains on a 2-core CPU
#: in minutes: 5×5 convolutions of 32, 64 and 64 channels, 2×2 pooling after the first
#: two, then the paper's 328 and 192 units and dropout.
CPU_CNN = ConvNetConfig(channels=(32, 64, 64), pool_after=(1, 2))

PROFILES: dict[str, TrainConfig] = {
    "quick": TrainConfig(
        epochs=2, batch_size=32, train_size=2560, test_size=2000, max_shift=0, lr_decay=0.9
    ),
    "paper": TrainConfig(epochs=100, batch_size=128, max_shift=2, lr_decay=0.955),
    "cnn": TrainConfig(
        architecture="cnn", epochs=12, batch_size=128, max_shift=2, lr_decay=0.85, model=CPU_CNN
    ),
    "paper-cnn": TrainConfig(
        architecture="cnn",
        epochs=100,
        batch_size=128,
        max_shift=2,
        lr_decay=0.955,
        model=ConvNetConfig(),
    ),
}


def profile(name: str, **overrides: Any) -> TrainConfig:
    """The predefined configuration ``name`` with some fields replaced; ``model`` may be
    a dict of the model's fields to replace (e.g. ``model={"routing_iterations": 1}``)."""
    check_choice("profile", name, list(PROFILES))
    base = PROFILES[name]
    model_changes = overrides.pop("model", None) or {}
    if isinstance(model_changes, dict):
        model = dataclasses.replace(base.model, **model_changes)
    else:
        model = model_changes
    return TrainConfig.from_dict(base.to_dict() | overrides | {"model": model.__dict__})


def default_profile() -> str:
    """``paper`` where a CUDA GPU is available, ``quick`` otherwise."""
    return "paper" if torch.cuda.is_available() else "quick"
