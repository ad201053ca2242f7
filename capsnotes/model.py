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
from typing import NamedTuple

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from .capsules import DigitCapsules, PrimaryCapsules, conv_output_size
from .checks import check_images, check_labels, check_sizes
from .decoder import Decoder


@dataclass(frozen=True)
class CapsNetConfig:
    """Every size of the model. The defaults are the paper's MNIST model."""

    image_size: int = 28
    """side of the square input images, in pixels"""
    in_channels: int = 1
    """channels of the input images"""
    num_classes: int = 10
    """classes: one digit capsule each"""
    conv_channels: int = 256
    """channels of the first convolution"""
    conv_kernel: int = 9
    """kernel size of the first convolution"""
    primary_channels: int = 32
    """primary capsule types"""
    primary_dim: int = 8
    """dimensions of a primary capsule"""
    primary_kernel: int = 9
    """kernel size of the primary-capsule convolution"""
    primary_stride: int = 2
    """stride of the primary-capsule convolution"""
    digit_dim: int = 16
    """dimensions of a digit capsule"""
    routing_iterations: int = 3
    """routing iterations r (1: a single pass, no routing)"""
    decoder_hidden: tuple[int, ...] = (512, 1024)
    """sizes of the decoder's hidden layers"""

    def __post_init__(self) -> None:
        object.__setattr__(self, "decoder_hidden", tuple(self.decoder_hidden))  # JSON
        check_sizes(**dataclasses.asdict(self))
        if self.num_classes < 2:
            raise ValueError(f"num_classes must be at least 2, got {self.num_classes}")
        # raises if an image is too small for the two convolutions
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


class CapsNetOutput(NamedTuple):
    """What :class:`CapsNet` returns for a batch of ``B`` images."""

    capsules: Tensor  #: ``[B, num_classes, digit_dim]``, the digit capsules ``v_j``
    lengths: Tensor  #: ``[B, num_classes]``, ``‖v_j‖``, one probability per class
    predictions: Tensor  #: ``[B]``, the longest capsule
    reconstructions: Tensor  #: ``[B, C, H, W]``, the decoder's image


class CapsNet(nn.Module):
    """Conv → primary capsules → digit capsules with routing → decoder.

    ``model(images, labels=None)`` takes ``images`` ``[B, C, H, W]`` (floats in ``[0,
    1]``) and optional integer ``labels`` ``[B]``; the decoder reconstructs from the
    capsule of the label when given, of the prediction otherwise.
    """

    def __init__(
        self, config: CapsNetConfig | None = None, **overrides: int | tuple[int, ...]
    ) -> None:
        super().__init__()
        config = dataclasses.replace(config or CapsNetConfig(), **overrides)
        self.config = config
        self.conv1 = nn.Conv2d(
            config.in_channels, config.conv_channels, config.conv_kernel
        )
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

    def primary_capsules(
        self, images: Float[Tensor, "batch channel height width"]
    ) -> Float[Tensor, "batch child primary_dim"]:
        """Images → primary capsules ``u``."""
        check_images(images, self.config)
        return self.primary(torch.relu(self.conv1(images)))

    def encode(
        self, images: Float[Tensor, "batch channel height width"]
    ) -> Float[Tensor, "batch class digit_dim"]:
        """Images → digit capsules ``v``."""
        return self.digits(self.primary_capsules(images))

    def forward(
        self,
        images: Float[Tensor, "batch channel height width"],
        labels: Int[Tensor, " batch"] | None = None,
    ) -> CapsNetOutput:
        capsules = self.encode(images)  # v: [B, classes, digit_dim]
        if labels is not None:
            check_labels(labels, len(images), self.config.num_classes)
        lengths = torch.linalg.vector_norm(capsules, dim=-1)  # ‖v_j‖: [B, classes]
        predictions = lengths.argmax(dim=1)
        # Training: reconstruct from the true class; evaluation: from the predicted one.
        chosen = predictions if labels is None else labels
        pixels = self.decoder(capsules, chosen)  # [B, C·H·W]
        reconstructions = pixels.view(images.shape)
        return CapsNetOutput(capsules, lengths, predictions, reconstructions)
