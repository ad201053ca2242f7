"""MultiMNIST (Sabour et al. 2017, §6): two overlapping digits, both to be recognised and
each reconstructed on its own.

Each example overlays two MNIST digits of different classes from the same split: each is
centred on a 36×36 canvas and shifted by up to 4 pixels in each direction, and the image
is their pixel-wise maximum. The network is the CapsNet of the earlier chapters on the
larger canvas. It is trained with both classes present in the margin loss and with one
reconstruction per digit, each drawn from that digit's own capsule and compared with
that digit alone — :func:`capsnotes.capsnet_loss` does this unchanged, given the two
labels as a presence matrix and the two digits as the reconstruction targets. The paper
counts an example as right when the two longest digit capsules are its two classes.

::

    pairs = make_pairs(test_set, seed=1)            # images [N, 1, 36, 36], labels [N, 2]
    output = PairedCapsNet(config)(images, labels)  # reconstructions [B, 2, 1, 36, 36]
    loss = pair_loss(output, parts, labels)         # margin loss of both + 0.0005 · SSE of each
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .checks import check_class_indices, check_positive_int
from .data import ImageSet, random_shift
from .losses import Loss, capsnet_loss
from .model import CapsNet

__all__ = [
    "DigitPairs",
    "PairOutput",
    "PairedCapsNet",
    "both_right",
    "evaluate_pairs",
    "make_pairs",
    "pair_loss",
]

#: The canvas and the largest shift of each digit, as in the paper.
CANVAS, MAX_SHIFT = 36, 4


@dataclass
class DigitPairs:
    """``N`` MultiMNIST examples, kept as bytes."""

    images: Tensor  #: ``uint8 [N, 1, S, S]``: the two digits overlaid (pixel-wise max)
    parts: Tensor  #: ``uint8 [N, 2, 1, S, S]``: each digit alone, where it was placed
    labels: Tensor  #: ``int64 [N, 2]``: the two classes, always different

    def __len__(self) -> int:
        return self.images.shape[0]

    def batches(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
        """``(images, parts, labels)``, images and parts as floats in ``[0, 1]``, shuffled
        with ``generator`` (in order without it)."""
        check_positive_int("batch_size", batch_size)
        device = self.images.device
        order = (
            torch.arange(len(self), device=device)
            if generator is None
            else torch.randperm(len(self), generator=generator, device=device)
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
    data: ImageSet,
    count: int | None = None,
    seed: int = 0,
    canvas: int = CANVAS,
    max_shift: int = MAX_SHIFT,
) -> DigitPairs:
    """MultiMNIST examples from ``data`` (28×28 digits), drawn with a generator seeded by
    ``seed``: the first digit of example ``n`` is ``data[n]`` when ``count`` is None (one
    example per digit, so every digit appears) and a random digit otherwise; the second
    is a random digit of another class. Each is shifted on its own by up to
    ``max_shift`` pixels in each direction on a ``canvas × canvas`` black image."""
    generator = torch.Generator().manual_seed(seed)
    labels = data.labels.cpu()
    if count is None:
        first = torch.arange(len(data))
    else:
        check_positive_int("count", count)
        first = torch.randint(len(data), (count,), generator=generator)
    second = torch.randint(len(data), first.shape, generator=generator)
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
    predictions: Tensor  #: ``[B, 2]``: the two longest capsules, longest first
    reconstructions: Tensor  #: ``[B, 2, C, H, W]``: one image per digit


class PairedCapsNet(CapsNet):
    """A CapsNet that reads two digits: the same layers, parameters and ``state_dict``,
    and a forward pass whose decoder draws one image per digit — from the capsule of each
    label in training (``labels`` ``[B, 2]``), of each of the two longest capsules
    otherwise."""

    def forward(self, images: Tensor, labels: Tensor | None = None) -> PairOutput:  # type: ignore[override]
        capsules = self.encode(images)
        lengths = torch.linalg.vector_norm(capsules, dim=-1)
        predictions = lengths.topk(2, dim=1).indices
        if labels is not None and (labels.dim() != 2 or labels.shape[1] != 2):
            raise ValueError(f"labels must be [batch, 2], got shape {tuple(labels.shape)}")
        chosen = predictions if labels is None else labels
        # one digit at a time: the decoder sees only the capsule of that digit
        drawn = [self.decoder(capsules, chosen[:, k]).view(images.shape) for k in range(2)]
        return PairOutput(capsules, lengths, predictions, torch.stack(drawn, dim=1))


def pair_loss(
    output: PairOutput, parts: Tensor, labels: Tensor, reconstruction_weight: float = 0.0005
) -> Loss:
    """:func:`~capsnotes.capsnet_loss` for two digits: both classes present in the margin
    loss, each reconstruction compared with its own digit (``parts`` ``[B, 2, C, H, W]``)."""
    classes = output.capsules.shape[1]
    check_class_indices("labels", labels.flatten(), classes)
    presence = F.one_hot(labels, classes).sum(dim=1).clamp(max=1)  # [B, classes]
    return capsnet_loss(output, parts, presence, reconstruction_weight)


def both_right(predictions: Tensor, labels: Tensor) -> Tensor:
    """Per example, whether the two predicted classes are the two labels (in any order)."""
    return (predictions.sort(dim=1).values == labels.sort(dim=1).values).all(dim=1)


@torch.no_grad()
def evaluate_pairs(
    model: PairedCapsNet,
    pairs: DigitPairs,
    batch_size: int = 500,
    reconstruction_weight: float = 0.0005,
) -> dict[str, Any]:
    """The paper's error on ``pairs``: the fraction of examples whose two longest capsules
    are not exactly their two classes; and the mean loss terms of the training objective
    (the decoder drawing each true digit from its capsule). In float32, in evaluation
    mode. The predictions come from the capsules' lengths alone, which the labels do not
    touch."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    wrong = torch.zeros((), dtype=torch.int64, device=device)
    totals: dict[str, Tensor] = {}
    for images, parts, labels in pairs.to(device).batches(batch_size):
        output = model(images, labels)
        wrong += (~both_right(output.predictions, labels)).sum()
        loss = pair_loss(output, parts, labels, reconstruction_weight)
        for name, value in loss.terms.items():
            totals[name] = totals.get(name, 0) + value * labels.shape[0]
    model.train(was_training)
    count = len(pairs)
    return {
        "error": wrong.item() / count,
        "count": count,
        **{name: value.item() / count for name, value in totals.items()},
    }
