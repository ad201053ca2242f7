"""What a training run is: :class:`TrainConfig`, the models it can name, the profiles.
Each field's docstring is its ``python -m capsnotes train`` option's help, and each
field is checked when a configuration is made: a bad value fails before any training.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from ..data import DATASETS, checks, load_dataset
from ..experiments.convnet import ConvNet, ConvNetConfig, convnet_loss
from ..experiments.multimnist import (
    FreshPairs,
    PairedCapsNet,
    PairedConvNet,
    make_pairs,
    pair_cross_entropy,
    pair_loss,
)
from ..losses import Loss, capsnet_loss
from ..model import CapsNet, CapsNetConfig

#: the seed of the MultiMNIST test pairs (one per test digit, or ``test_size`` of them)
TEST_PAIRS_SEED = 1


@dataclass(frozen=True)
class Architecture:
    """A model a run can train: its configuration class, its class, its objective
    ``objective(config, output, *batch)``."""

    config: type
    model: type[nn.Module]
    objective: Callable[..., Loss]


#: The models, by the name a configuration uses.
ARCHITECTURES: dict[str, Architecture] = {
    "capsnet": Architecture(
        CapsNetConfig,
        CapsNet,
        lambda config, output, images, labels: capsnet_loss(
            output, images, labels, config.reconstruction_weight
        ),
    ),
    "cnn": Architecture(
        ConvNetConfig,
        ConvNet,
        lambda config, output, *batch: convnet_loss(output, *batch),
    ),
    "capsnet-pairs": Architecture(
        CapsNetConfig,
        PairedCapsNet,
        lambda config, output, *batch: pair_loss(
            output, *batch, config.reconstruction_weight
        ),
    ),
    "cnn-pairs": Architecture(
        ConvNetConfig,
        PairedConvNet,
        lambda config, output, *batch: pair_cross_entropy(output, *batch),
    ),
}

#: The architectures that read two overlapping digits (MultiMNIST; a batch carries
#: each digit alone too).
PAIRED = ("capsnet-pairs", "cnn-pairs")

#: The command line's choices (runtime ``Literal``s, so that they cannot drift apart).
ArchitectureName = Literal[tuple(ARCHITECTURES)]  # type: ignore[valid-type]
DatasetName = Literal[tuple(DATASETS)]  # type: ignore[valid-type]


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run (and so its results)."""

    architecture: ArchitectureName = "capsnet"
    """the model: capsnet, cnn (the baseline), or capsnet-pairs and cnn-pairs (two
    overlapping digits)"""
    dataset: DatasetName = "mnist"
    """the digits: mnist or fashion-mnist"""
    epochs: int = 1
    """passes over the training set"""
    batch_size: int = 128
    """training images per step"""
    learning_rate: float = 1e-3
    """Adam's initial learning rate"""
    lr_decay: float = 0.96
    """the learning rate is multiplied by this after every epoch"""
    train_size: int | None = None
    """train on a random subset of this size (unset: all; two-digit runs: new pairs per
    epoch)"""
    test_size: int | None = None
    """test on a fixed random subset of this size (unset: all)"""
    max_shift: int = 2
    """shift each training image by up to this many pixels"""
    canvas: int | None = None
    """centre the images on a black canvas of this size (unset: as they are)"""
    seed: int = 0
    """random seed of the weights, shuffles and shifts"""
    reconstruction_weight: float = 0.0005
    """weight of the reconstruction loss (0: the decoder does not train)"""
    eval_batch_size: int = 500
    """test images per batch"""
    mixed_precision: bool = True
    """16-bit autocast where the hardware has it: bf16 on GPUs with native bf16, float16
    with loss scaling on older GPUs, bf16 on CPUs where it trains faster (timed)"""
    weight_averaging: float = 0.0
    """decay per step of a moving average of the weights, which becomes the run's model
    (0: none)"""
    model: CapsNetConfig | ConvNetConfig = field(default_factory=CapsNetConfig)
    """the model's sizes"""

    def __post_init__(self) -> None:
        for name, value, known in (
            ("architecture", self.architecture, ARCHITECTURES),
            ("dataset", self.dataset, DATASETS),
        ):
            if value not in known:
                raise ValueError(
                    f"unknown {name} {value!r}; expected one of {sorted(known)}"
                )
        model_class = ARCHITECTURES[self.architecture].config
        if isinstance(self.model, dict):
            object.__setattr__(self, "model", model_class(**self.model))
        if not isinstance(self.model, model_class):
            raise TypeError(
                f"a {self.architecture} run needs model={model_class.__name__}(...), "
                f"got {type(self.model).__name__}"
            )
        optional = ("train_size", "test_size", "canvas")  # None: unset
        checks.positive_ints(
            epochs=self.epochs,
            batch_size=self.batch_size,
            eval_batch_size=self.eval_batch_size,
            **{n: getattr(self, n) for n in optional if getattr(self, n) is not None},
        )
        checks.integer("max_shift", self.max_shift, minimum=0)
        checks.integer("seed", self.seed)
        for name, interval, valid in (
            ("learning_rate", "(0, inf)", lambda x: x > 0),
            ("lr_decay", "(0, 1]", lambda x: 0 < x <= 1),
            ("reconstruction_weight", "[0, inf)", lambda x: x >= 0),
            ("weight_averaging", "[0, 1)", lambda x: 0 <= x < 1),
        ):
            value = getattr(self, name)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not number or not valid(value):
                raise ValueError(f"{name} must lie in {interval}, got {value!r}")
        if not isinstance(self.mixed_precision, bool):
            raise TypeError(
                f"mixed_precision must be True or False, got {self.mixed_precision!r}"
            )

    def objective(self, output: Any, *batch: torch.Tensor) -> Loss:
        """This run's training objective on one batch ``(images, labels, ...)``."""
        return ARCHITECTURES[self.architecture].objective(self, output, *batch)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        if set(values) - known:
            raise ValueError(
                f"unknown TrainConfig fields: {sorted(set(values) - known)}; "
                f"expected some of {sorted(known)}"
            )
        return cls(**values)

    def key(self) -> str:
        """A short hash of the configuration: equal configurations, equal keys."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def build_model(config: TrainConfig) -> nn.Module:
    """A fresh model of ``config`` on the CPU, seeded by ``config.seed`` (the global
    random state untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        return ARCHITECTURES[config.architecture].model(config.model)


def load_run_data(
    config: TrainConfig,
    device: torch.device | str = "cpu",
    data_root: str | Path | None = None,
) -> tuple[Any, Any]:
    """The run's training and test data on ``device`` (two-digit runs: new training
    pairs every epoch, fixed test pairs)."""
    train_set = load_dataset(config.dataset, True, data_root)
    test_set = load_dataset(config.dataset, False, data_root)
    if config.architecture in PAIRED:
        canvas = config.model.image_size
        pairs = make_pairs(
            test_set, config.test_size, TEST_PAIRS_SEED, canvas, config.max_shift
        )
        count = config.train_size or len(train_set)
        return FreshPairs(train_set.to(device), count, canvas), pairs.to(device)
    train_set = train_set.subset(config.train_size, config.seed)
    test_set = test_set.subset(config.test_size, seed=0)
    if config.canvas is not None:
        train_set, test_set = (s.padded(config.canvas) for s in (train_set, test_set))
    model, images = config.model, tuple(train_set.images.shape[1:])
    expected = (model.in_channels, model.image_size, model.image_size)
    if images != expected or len(train_set.classes) != model.num_classes:
        raise ValueError(
            f"dataset {config.dataset!r} has images {images} and "
            f"{len(train_set.classes)} classes, but the model expects images "
            f"{expected} and {model.num_classes} classes"
        )
    return train_set.to(device), test_set.to(device)


PROFILES: dict[str, TrainConfig] = {
    "quick": TrainConfig(
        epochs=2,
        batch_size=32,
        train_size=2560,
        test_size=2000,
        max_shift=0,
        lr_decay=0.9,
    ),
    "paper": TrainConfig(epochs=100, batch_size=128, max_shift=2, lr_decay=0.955),
    # the CPU-sized baseline: 1.25M parameters, the paper's dense layers and dropout
    "cnn": TrainConfig(
        architecture="cnn",
        epochs=12,
        max_shift=2,
        lr_decay=0.85,
        model=ConvNetConfig(channels=(32, 64, 64), pool_after=(1, 2)),
    ),
    "paper-cnn": TrainConfig(
        architecture="cnn",
        epochs=100,
        max_shift=2,
        lr_decay=0.955,
        model=ConvNetConfig(),
    ),
    # the book's MultiMNIST model (chapter 11): 60,000 new pairs every epoch
    "multimnist": TrainConfig(
        architecture="capsnet-pairs",
        epochs=25,
        train_size=60_000,
        max_shift=4,
        lr_decay=0.95,
        model=CapsNetConfig(image_size=36, conv_channels=128, primary_channels=16),
    ),
    # the cnn profile's layers on the same pairs, reading the two largest scores
    "multimnist-cnn": TrainConfig(
        architecture="cnn-pairs",
        epochs=25,
        train_size=60_000,
        max_shift=4,
        lr_decay=0.95,
        model=ConvNetConfig(image_size=36, channels=(32, 64, 64), pool_after=(1, 2)),
    ),
}


def profile(name: str, **overrides: Any) -> TrainConfig:
    """The profile ``name`` with some fields replaced; ``model`` may be a dict of the
    model's fields to replace (``model={"routing_iterations": 1}``)."""
    if name not in PROFILES:
        raise ValueError(
            f"unknown profile {name!r}; expected one of {sorted(PROFILES)}"
        )
    base = PROFILES[name]
    model = overrides.pop("model", None) or {}
    if isinstance(model, dict):
        model = dataclasses.replace(base.model, **model)
    return TrainConfig.from_dict(
        base.to_dict() | overrides | {"model": dataclasses.asdict(model)}
    )


def with_choices(config: TrainConfig) -> TrainConfig:
    """``config`` as a subclass whose ``architecture`` choices take only its kind of
    model: the command line reads a profile's options from it, so that a CapsNet
    profile cannot name a CNN (``TrainConfig.from_dict(c.to_dict())``: plain again)."""
    model = ARCHITECTURES[config.architecture].config
    kinds = tuple(a for a, kind in ARCHITECTURES.items() if kind.config is model)
    narrowed = dataclasses.make_dataclass(
        "TrainConfig",
        [("architecture", Literal[kinds], config.architecture)],
        bases=(TrainConfig,),
        frozen=True,
        namespace={"__doc__": TrainConfig.__doc__},
    )
    return narrowed.from_dict(config.to_dict())
