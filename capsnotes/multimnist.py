"""MultiMNIST (Sabour et al. 2017, §6): two overlapping digits, both to be recognised and
each reconstructed on its own.

Each example overlays two MNIST digits of different classes: each is centred on a 36×36
canvas and shifted by up to 4 pixels in each direction, and the image is their
pixel-wise maximum. The paper counts an example as right when the two longest digit
capsules are the two labels, and trains the decoder to redraw each digit from its own
capsule — :func:`capsnotes.capsnet_loss` does that unchanged, given the two labels as a
presence matrix and the two digits as the reconstruction targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .checks import check_class_indices, check_positive_int
from .data import ImageSet, random_shift
from .losses import Loss, capsnet_loss
from .model import CapsNet, CapsNetConfig

__all__ = ["DigitPairs", "PairOutput", "PairedCapsNet", "both_right", "make_pairs", "pair_loss"]


@dataclass
class DigitPairs:
    """``N`` MultiMNIST examples, kept as bytes."""

    images: Tensor  #: ``uint8 [N, 1, S, S]``: the two digits overlaid (pixel-wise max)
    parts: Tensor  #: ``uint8 [N, 2, 1, S, S]``: each digit alone, where it was placed
    labels: Tensor  #: ``int64 [N, 2]``: the two classes, always different

    def __len__(self) -> int:
        return self.images.shape[0]

    def batches(self, batch_size: int, generator: torch.Generator | None = None):
        """``(images, parts, labels)`` as floats in ``[0, 1]``, shuffled with ``generator``
        (in order without it)."""
        check_positive_int("batch_size", batch_size)
        order = (
            torch.arange(len(self), device=self.images.device)
            if generator is None
            else torch.randperm(len(self), generator=generator, device=self.images.device)
        )
        for start in range(0, len(self), batch_size):
            index = order[start : start + batch_size]
            yield (
                self.images[index].float().div_(255),
                self.parts[index].float().div_(255),
                self.labels[index],
            )

    def to(self, device: torch.device | str) -> DigitPairs:
        return DigitPairs(self.images.to(device), self.parts.to(device), self.labels.to(device))


def make_pairs(
    data: ImageSet, count: int, seed: int = 0, canvas: int = 36, max_shift: int = 4
) -> DigitPairs:
    """``count`` examples drawn from ``data`` (28×28 digits) with a generator seeded by
    ``seed``: a random first digit, a random second digit of another class."""
    check_positive_int("count", count)
    generator = torch.Generator().manual_seed(seed)
    labels = data.labels.cpu()
    first = torch.randint(len(data), (count,), generator=generator)
    second = torch.randint(len(data), (count,), generator=generator)
    same = labels[first] == labels[second]
    while same.any():  # draw again where the classes agree
        second[same] = torch.randint(len(data), (int(same.sum()),), generator=generator)
        same = labels[first] == labels[second]
    images = data.padded(canvas).images.cpu()
    shifted = [random_shift(images[index], max_shift, generator) for index in (first, second)]
    parts = torch.stack(shifted, dim=1)  # [N, 2, 1, S, S]
    return DigitPairs(parts.amax(dim=1), parts, torch.stack([labels[first], labels[second]], 1))


class PairOutput(NamedTuple):
    """What :class:`PairedCapsNet` returns for ``B`` images."""

    capsules: Tensor  #: ``[B, classes, dim]``
    lengths: Tensor  #: ``[B, classes]``
    predictions: Tensor  #: ``[B, 2]``: the two longest capsules
    reconstructions: Tensor  #: ``[B, 2, C, H, W]``: one image per digit


class PairedCapsNet(nn.Module):
    """A CapsNet that reads two digits: the decoder draws one image from the capsule of
    each label in training (``labels`` ``[B, 2]``), of each of the two longest capsules
    otherwise. Its ``capsnet`` is a plain :class:`~capsnotes.CapsNet`."""

    def __init__(self, config: CapsNetConfig | None = None, **implementation: Any) -> None:
        super().__init__()
        self.capsnet = CapsNet(config, **implementation)
        self.config = self.capsnet.config
        self.implementation = self.capsnet.implementation

    def forward(self, images: Tensor, labels: Tensor | None = None) -> PairOutput:
        capsules = self.capsnet.encode(images)
        lengths = torch.linalg.vector_norm(capsules, dim=-1)
        predictions = lengths.topk(2, dim=1).indices
        chosen = predictions if labels is None else labels
        if labels is not None and (labels.dim() != 2 or labels.shape[1] != 2):
            raise ValueError(f"labels must be [batch, 2], got shape {tuple(labels.shape)}")
        drawn = [self.capsnet.decoder(capsules, chosen[:, k]).view(images.shape) for k in range(2)]
        return PairOutput(capsules, lengths, predictions, torch.stack(drawn, dim=1))


def pair_loss(
    output: PairOutput, parts: Tensor, labels: Tensor, reconstruction_weight: float = 0.0005
) -> Loss:
    """:func:`~capsnotes.capsnet_loss` for two digits: both classes present in the margin
    loss, each reconstruction compared with its own digit (``parts`` ``[B, 2, C, H, W]``)."""
    check_class_indices("labels", labels.flatten(), output.capsules.shape[1])
    classes = output.capsules.shape[1]
    presence = F.one_hot(labels, classes).sum(dim=1).clamp(max=1)  # [B, classes]
    return capsnet_loss(output, parts, presence, reconstruction_weight)


def both_right(predictions: Tensor, labels: Tensor) -> Tensor:
    """Per example, whether the two predicted classes are the two labels (in any order)."""
    return (predictions.sort(dim=1).values == labels.sort(dim=1).values).all(dim=1)
