"""MultiMNIST (Sabour et al. 2017, §6): two overlapping digits, both to be recognised
and each reconstructed on its own.

Each example overlays two MNIST digits of different classes from the same split: each is
centred on a 36×36 canvas and shifted by up to 4 pixels in each direction, and the image
is their pixel-wise maximum. The network is the CapsNet of the earlier chapters on the
larger canvas, trained with :func:`capsnotes.capsnet_loss` unchanged, given the two
labels as a presence matrix and the two digits as the reconstruction targets. An
example is right when the two longest digit capsules are its two classes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..data import ImageSet, checks, random_shift
from ..losses import Loss, capsnet_loss
from ..model import CapsNet
from .convnet import ConvNet, ConvNetOutput

#: The canvas and the largest shift of each digit, as in the paper.
CANVAS, MAX_SHIFT = 36, 4


@dataclass
class DigitPairs:
    """``N`` MultiMNIST examples as bytes, each pair's classes in ascending order."""

    images: Tensor  #: ``uint8 [N, 1, S, S]``: the two digits overlaid (pixel-wise max)
    parts: Tensor  #: ``uint8 [N, 2, 1, S, S]``: each digit alone, where it was placed
    labels: Tensor  #: ``int64 [N, 2]``: the two classes, different, the smaller first

    def __len__(self) -> int:
        return self.images.shape[0]

    def to(self, device: torch.device | str) -> DigitPairs:
        return DigitPairs(
            self.images.to(device), self.parts.to(device), self.labels.to(device)
        )

    def batches(
        self,
        batch_size: int,
        shuffle: bool = False,
        max_shift: int = 0,
        generator=None,  # noqa: ANN001
    ) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
        """``(images, labels, parts)``, images and parts as floats in ``[0, 1]``, in
        order or shuffled (the digits were shifted when the pairs were made)."""
        checks.integer("batch_size", batch_size, minimum=1)
        device = self.images.device
        if shuffle:
            order = torch.randperm(len(self), generator=generator, device=device)
        else:
            order = torch.arange(len(self), device=device)
        for index in order.split(batch_size):
            images = self.images[index].float().div_(255)
            yield images, self.labels[index], self.parts[index].float().div_(255)


def make_pairs(
    data: ImageSet,
    count: int | None = None,
    seed: int = 0,
    canvas: int = CANVAS,
    max_shift: int = MAX_SHIFT,
) -> DigitPairs:
    """MultiMNIST examples from ``data`` (28×28 digits), drawn with a generator seeded
    by ``seed``: the first digit of example ``n`` is ``data[n]`` when ``count`` is None
    (one example per digit) and a random digit otherwise; the second is a random digit
    of another class. Each is shifted on its own by up to ``max_shift`` pixels."""
    generator = torch.Generator().manual_seed(seed)
    labels = data.labels.cpu()
    if count is None:
        first = torch.arange(len(data))
    else:
        first = torch.randint(
            len(data), (checks.integer("count", count, minimum=1),), generator=generator
        )
    second = torch.randint(len(data), first.shape, generator=generator)
    same = labels[first] == labels[second]
    while same.any():  # draw again where the classes agree
        second[same] = torch.randint(len(data), (int(same.sum()),), generator=generator)
        same = labels[first] == labels[second]
    images = data.padded(canvas).images.cpu()
    shifted = [
        random_shift(images[index], max_shift, generator) for index in (first, second)
    ]
    parts = torch.stack(shifted, dim=1)  # [N, 2, 1, S, S]
    pair_labels = torch.stack([labels[first], labels[second]], dim=1)
    order = pair_labels.argsort(dim=1)  # the smaller class first, its digit with it
    parts = parts[torch.arange(len(parts))[:, None], order]
    return DigitPairs(parts.amax(dim=1), parts, pair_labels.gather(1, order))


@dataclass
class FreshPairs:
    """``count`` new pairs of ``digits`` every pass (every training epoch), drawn from
    the pass's ``generator``: a run that is resumed sees the pairs it would have
    seen."""

    digits: ImageSet
    count: int
    canvas: int = CANVAS

    def __len__(self) -> int:
        return self.count

    def batches(
        self,
        batch_size: int,
        shuffle: bool = True,
        max_shift: int = MAX_SHIFT,
        generator=None,  # noqa: ANN001
    ) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
        device = self.digits.device
        seed = int(torch.randint(2**62, (1,), generator=generator, device=device))
        pairs = make_pairs(self.digits, self.count, seed, self.canvas, max_shift)
        yield from pairs.to(device).batches(batch_size, shuffle, generator=generator)


class PairOutput(NamedTuple):
    """What :class:`PairedCapsNet` returns for ``B`` images."""

    capsules: Tensor  #: ``[B, classes, dim]``
    lengths: Tensor  #: ``[B, classes]``
    predictions: Tensor  #: ``[B, 2]``: the two longest capsules, smaller class first
    reconstructions: Tensor  #: ``[B, 2, C, H, W]``: one image per digit


class PairedCapsNet(CapsNet):
    """A CapsNet that reads two digits: the same layers, parameters and ``state_dict``,
    and a decoder that draws one image per digit — from the capsule of each label in
    training (``labels`` ``[B, 2]``), of each of the two longest capsules otherwise."""

    def forward(  # type: ignore[override]
        self, images: Tensor, labels: Tensor | None = None
    ) -> PairOutput:
        capsules = self.encode(images)
        lengths = torch.linalg.vector_norm(capsules, dim=-1)
        predictions = lengths.topk(2, dim=1).indices.sort(dim=1).values
        if labels is not None:
            if labels.dim() != 2 or labels.shape[1] != 2:
                raise ValueError(
                    f"labels must be [batch, 2], got shape {tuple(labels.shape)}"
                )
            checks.class_indices("labels", labels.flatten(), self.config.num_classes)
        chosen = predictions if labels is None else labels
        # one digit at a time: the decoder sees only the capsule of that digit
        drawn = [
            self.decoder(capsules, chosen[:, k]).view(images.shape) for k in range(2)
        ]
        return PairOutput(capsules, lengths, predictions, torch.stack(drawn, dim=1))


def pair_loss(
    output: PairOutput,
    images: Tensor,
    labels: Tensor,
    parts: Tensor,
    reconstruction_weight: float = 0.0005,
) -> Loss:
    """:func:`~capsnotes.capsnet_loss` for two digits: both classes present in the
    margin loss, each reconstruction compared with its own digit (``parts`` ``[B, 2, C,
    H, W]``)."""
    # [B, classes]
    presence = F.one_hot(labels, output.capsules.shape[1]).sum(dim=1).clamp(max=1)
    return capsnet_loss(output, parts, presence, reconstruction_weight)


class PairedConvNet(ConvNet):
    """The baseline CNN for two digits: the same layers, with the two largest class
    scores as its reading (the CapsNet's two longest capsules)."""

    def forward(  # type: ignore[override]
        self, images: Tensor, labels: Tensor | None = None
    ) -> ConvNetOutput:
        logits = super().forward(images).logits
        return ConvNetOutput(logits, logits.topk(2, dim=1).indices.sort(dim=1).values)


def pair_cross_entropy(
    output: ConvNetOutput, images: Tensor, labels: Tensor, parts: Tensor
) -> Loss:
    """The CNN's objective for two digits: each class's score a separate sigmoid, its
    binary cross-entropy against the class's presence, summed over the classes and
    averaged over the batch (``images`` and ``parts`` are unused)."""
    presence = F.one_hot(labels, output.logits.shape[1]).sum(dim=1).clamp(max=1)
    per_class = F.binary_cross_entropy_with_logits(
        output.logits.float(), presence.float(), reduction="none"
    )
    loss = per_class.sum(dim=1).mean()
    return Loss(loss, {"cross_entropy": loss.detach()})


def both_right(predictions: Tensor, labels: Tensor) -> Tensor:
    """Per example, whether the two predicted classes are the two labels (in any
    order)."""
    return (predictions.sort(dim=1).values == labels.sort(dim=1).values).all(dim=1)
