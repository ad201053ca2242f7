"""The whole CapsNet (Sabour et al. 2017, Fig. 1 and Fig. 2).

::

    images [B, C, H, W]
      → conv1 9×9, 256, ReLU                     [B, 256, 20, 20]
      → PrimaryCapsules                          u  [B, 1152, 8]
      → DigitCapsules (votes + routing)          v  [B, 10, 16]
      → lengths ‖v_j‖                            [B, 10]  → margin loss
      → Decoder on the label's (or prediction's) capsule → reconstruction loss
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import torch
from torch import Tensor, nn

from .checks import check_class_indices, check_float_tensor
from .decoder import Decoder
from .digit_capsules import DigitCapsules
from .primary_capsules import PrimaryCapsules, conv_output_size
from .routing import check_iterations

__all__ = ["CapsNet", "CapsNetConfig", "CapsNetOutput", "dataclass_from_dict"]

Config = TypeVar("Config")


def dataclass_from_dict(cls: type[Config], values: dict[str, Any]) -> Config:
    """``cls(**values)`` for a configuration dataclass, refusing unknown keys by name."""
    known = [field.name for field in dataclasses.fields(cls)]
    unknown = set(values) - set(known)
    if unknown:
        raise ValueError(
            f"unknown {cls.__name__} fields: {sorted(unknown)}; expected some of {known}"
        )
    return cls(**values)


@dataclass(frozen=True)
class CapsNetConfig:
    """Every size of the model. The defaults are the paper's MNIST model."""

    image_size: int = 28
    in_channels: int = 1
    num_classes: int = 10
    conv_channels: int = 256
    conv_kernel: int = 9
    primary_channels: int = 32
    primary_dim: int = 8
    primary_kernel: int = 9
    primary_stride: int = 2
    digit_dim: int = 16
    routing_iterations: int = 3
    decoder_hidden: tuple[int, ...] = (512, 1024)

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "decoder_hidden":
                if isinstance(value, list):  # accept lists, e.g. from JSON
                    object.__setattr__(self, "decoder_hidden", tuple(value))
                    value = self.decoder_hidden
                if not all(isinstance(h, int) and h > 0 for h in value):
                    raise ValueError(f"decoder_hidden must be positive ints, got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field.name} must be a positive int, got {value!r}")
        check_iterations(self.routing_iterations)
        if self.num_classes < 2:
            raise ValueError(f"num_classes must be at least 2, got {self.num_classes}")
        # Raises if an image is too small for the two convolutions.
        _ = self.primary_grid

    @property
    def primary_grid(self) -> int:
        """Side of the primary-capsule grid (6 for 28×28 inputs)."""
        features = conv_output_size(self.image_size, self.conv_kernel)
        return conv_output_size(features, self.primary_kernel, self.primary_stride)

    @property
    def num_primary_capsules(self) -> int:
        """1,152 for the paper's model: 32 channels × 6 × 6 positions."""
        return self.primary_channels * self.primary_grid**2

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> CapsNetConfig:
        return dataclass_from_dict(cls, values)


class CapsNetOutput(NamedTuple):
    """What :class:`CapsNet` returns for a batch of ``B`` images."""

    capsules: Tensor  #: ``[B, num_classes, digit_dim]``, the digit capsules ``v_j``
    lengths: Tensor  #: ``[B, num_classes]``, ``‖v_j‖``: the class probabilities
    predictions: Tensor  #: ``[B]``, the longest capsule
    reconstructions: Tensor  #: ``[B, C, H, W]``, the decoder's image


class CapsNet(nn.Module):
    """Conv → primary capsules → digit capsules with routing → decoder.

    ``model(images, labels=None)`` takes ``images`` ``[B, C, H, W]`` (floats in
    ``[0, 1]``) and optional integer ``labels`` ``[B]``; the decoder reconstructs from the
    capsule of the label when given, of the prediction otherwise.
    """

    def __init__(self, config: CapsNetConfig | None = None, **overrides: Any) -> None:
        super().__init__()
        if config is None:
            config = CapsNetConfig(**overrides)
        elif overrides:
            config = dataclasses.replace(config, **overrides)
        self.config = config
        self.conv1 = nn.Conv2d(config.in_channels, config.conv_channels, config.conv_kernel)
        self.primary = PrimaryCapsules(
            config.conv_channels,
            config.primary_channels,
            config.primary_dim,
            config.primary_kernel,
            config.primary_stride,
        )
        self.digits = DigitCapsules(
            config.num_primary_capsules,
            config.primary_dim,
            config.num_classes,
            config.digit_dim,
            config.routing_iterations,
        )
        self.decoder = Decoder(
            config.num_classes,
            config.digit_dim,
            config.in_channels * config.image_size**2,
            config.decoder_hidden,
        )

    def primary_capsules(self, images: Tensor) -> Tensor:
        """Images ``[B, C, H, W]`` → primary capsules ``u`` ``[B, num_primary, primary_dim]``."""
        self.check_images(images)
        return self.primary(torch.relu(self.conv1(images)))

    def encode(self, images: Tensor, return_coupling: bool = False) -> Any:
        """Images ``[B, C, H, W]`` → digit capsules ``[B, num_classes, digit_dim]`` (and
        the last coupling coefficients ``[B, num_primary, num_classes]`` if asked)."""
        return self.digits(self.primary_capsules(images), return_coupling=return_coupling)

    def forward(self, images: Tensor, labels: Tensor | None = None) -> CapsNetOutput:
        capsules = self.encode(images)
        lengths = torch.linalg.vector_norm(capsules, dim=-1)
        predictions = lengths.argmax(dim=1)
        if labels is not None:
            self.check_labels(labels, images.shape[0])
        # Training: reconstruct from the true class; evaluation: from the predicted one.
        chosen = predictions if labels is None else labels
        pixels = self.decoder(capsules, chosen)
        reconstructions = pixels.view(images.shape)
        return CapsNetOutput(capsules, lengths, predictions, reconstructions)

    def check_images(self, images: Tensor) -> None:
        """Raise ``TypeError``/``ValueError`` unless ``images`` is ``[B, C, H, W]`` floats."""
        cfg = self.config
        check_float_tensor(
            "images",
            images,
            f"[batch, {cfg.in_channels}, {cfg.image_size}, {cfg.image_size}] (pixels in [0, 1])",
            shape=(None, cfg.in_channels, cfg.image_size, cfg.image_size),
        )

    def check_labels(self, labels: Tensor, batch: int) -> None:
        """Raise unless ``labels`` is an integer tensor ``[batch]`` of valid classes (see
        :func:`capsnotes.checks.check_class_indices`)."""
        check_class_indices("labels", labels, self.config.num_classes, batch)
