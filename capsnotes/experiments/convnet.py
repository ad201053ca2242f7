"""A conventional CNN to compare CapsNet with (Sabour et al. 2017, §5).

The paper's baseline, :class:`ConvNetConfig`'s defaults, is three 5×5 convolutions of
256, 256 and 128 channels, then fully connected layers of 328 and 192 units, dropout,
and a 10-way softmax: about 35.4M parameters, most of them in the first fully connected
layer. With fewer channels and 2×2 max pooling it trains on a CPU (the ``cnn`` profile).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch.nn.functional as F
from torch import Tensor, nn

from ..checks import check_images
from ..data import checks
from ..losses import Loss


@dataclass(frozen=True)
class ConvNetConfig:
    """Every size of the CNN; the defaults are the paper's baseline."""

    image_size: int = 28
    """side of the square input images, in pixels"""
    in_channels: int = 1
    """channels of the input images"""
    num_classes: int = 10
    """classes"""
    channels: tuple[int, ...] = (256, 256, 128)
    """output channels of each convolution"""
    kernel_size: int = 5
    """kernel size of the convolutions (same padding)"""
    pool_after: tuple[int, ...] = ()
    """the convolutions (counted from 1) followed by 2×2 max pooling"""
    hidden: tuple[int, ...] = (328, 192)
    """sizes of the fully connected layers"""
    dropout: float = 0.5
    """dropout before the last layer"""

    def __post_init__(self) -> None:
        for name in ("channels", "pool_after", "hidden"):  # lists from JSON
            object.__setattr__(self, name, tuple(getattr(self, name)))
        sizes = dataclasses.asdict(self)
        del sizes["pool_after"], sizes["dropout"]
        checks.positive_ints(**sizes)
        convolutions = set(range(1, len(self.channels) + 1))
        if not self.channels or not set(self.pool_after) <= convolutions:
            raise ValueError(
                f"pool_after must name some of the {len(self.channels)} convolutions "
                f"(counted from 1), got {self.pool_after}"
            )
        if self.kernel_size % 2 == 0 or not 0 <= self.dropout < 1:
            raise ValueError(
                f"need an odd kernel_size (same padding) and dropout in [0, 1), got "
                f"{self.kernel_size} and {self.dropout}"
            )
        if self.feature_side < 1:
            raise ValueError(
                f"{len(self.pool_after)} poolings leave nothing of {self.image_size}"
            )

    @property
    def feature_side(self) -> int:
        """Side of the last feature map (every pooling halves it, rounding down)."""
        return self.image_size // 2 ** len(self.pool_after)


class ConvNetOutput(NamedTuple):
    """What :class:`ConvNet` returns for a batch of ``B`` images."""

    logits: Tensor  #: ``[B, num_classes]``
    predictions: Tensor  #: ``[B]``, the largest logit


class ConvNet(nn.Module):
    """Convolutions (same padding, ReLU, optional pooling) → fully connected layers →
    dropout → class scores.

    ``model(images, labels=None)`` takes ``images`` ``[B, C, H, W]``; ``labels`` is
    accepted so that the trainer calls every model the same way, and is not used.
    """

    def __init__(self, config: ConvNetConfig | None = None, **overrides: Any) -> None:
        super().__init__()
        self.config = config = dataclasses.replace(
            config or ConvNetConfig(), **overrides
        )
        layers: list[nn.Module] = []
        channels = config.in_channels
        for index, out_channels in enumerate(config.channels, start=1):
            layers += [
                nn.Conv2d(channels, out_channels, config.kernel_size, padding="same"),
                nn.ReLU(inplace=True),
            ]
            if index in config.pool_after:
                layers.append(nn.MaxPool2d(2))
            channels = out_channels
        self.features = nn.Sequential(*layers)
        sizes = [channels * config.feature_side**2, *config.hidden]
        dense: list[nn.Module] = [nn.Flatten()]
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            dense += [nn.Linear(fan_in, fan_out), nn.ReLU(inplace=True)]
        dense += [nn.Dropout(config.dropout), nn.Linear(sizes[-1], config.num_classes)]
        self.classifier = nn.Sequential(*dense)

    def forward(self, images: Tensor, labels: Tensor | None = None) -> ConvNetOutput:
        check_images(images, self.config)
        logits = self.classifier(self.features(images))
        return ConvNetOutput(logits, logits.argmax(dim=1))


def convnet_loss(output: ConvNetOutput, images: Tensor, target: Tensor) -> Loss:
    """Cross-entropy of the class scores, averaged over the batch (``images`` is unused:
    the argument is there so that every objective is called alike)."""
    cross_entropy = F.cross_entropy(output.logits.float(), target)
    return Loss(cross_entropy, {"cross_entropy": cross_entropy.detach()})
