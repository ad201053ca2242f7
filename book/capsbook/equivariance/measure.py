"""Move digits and read what a model says about them (chapter 9's measurements).

:func:`shift_images` and :func:`rotate_images` move digits by whole pixels or turn them
about the image's centre; a :class:`Transformation` names one such move and
:func:`transformations` lists a sweep of them. :func:`represent` reads what a model says
about each image's true class: for a :class:`~capsnotes.CapsNet` the capsule's length
and its 16-D pose, for a :class:`~capsnotes.experiments.convnet.ConvNet` the softmax
probability and the features of its last hidden layer; :func:`measure` does it for
every transformation, on the device of the images, in their dtype.
:func:`angle_between` says how far a vector turned.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from capsnotes import CapsNet
from capsnotes.data import checks
from capsnotes.experiments.affine import AffineParameters, warp
from capsnotes.experiments.convnet import ConvNet

#: The three kinds of transformation, with the unit of their amount.
KINDS: dict[str, str] = {
    "shift_x": "pixels, rightwards",
    "shift_y": "pixels, downwards",
    "rotation": "degrees, counter-clockwise",
}


def _images(images: object) -> Tensor:
    """``images`` checked to be a float tensor ``[B, C, H, W]``."""
    return checks.float_tensor(
        "images", images, "[batch, channels, height, width]", (None, None, None, None)
    )


def shift_images(images: Tensor, dx: int, dy: int) -> Tensor:
    """``images`` ``[B, C, H, W]`` moved ``dx`` whole pixels right and ``dy`` down
    (negative: left, up); what moves off one edge is lost, the other edge fills with
    zeros (blank paper). Exact: no pixel value is interpolated."""
    _images(images)
    for name, value in (("dx", dx), ("dy", dy)):
        checks.integer(name, value, kind="an int (whole pixels)")
    height, width = images.shape[-2:]
    shifted = torch.zeros_like(images)
    if abs(dx) >= width or abs(dy) >= height:
        return shifted
    # source rows/columns [a, b) land at [a + d, b + d)
    rows = slice(max(0, -dy), height - max(0, dy))
    cols = slice(max(0, -dx), width - max(0, dx))
    target_rows = slice(max(0, dy), height - max(0, -dy))
    target_cols = slice(max(0, dx), width - max(0, -dx))
    shifted[..., target_rows, target_cols] = images[..., rows, cols]
    return shifted


def rotate_images(images: Tensor, degrees: float) -> Tensor:
    """``images`` ``[B, C, H, W]`` (square) turned ``degrees`` counter-clockwise about
    their centre by :func:`capsnotes.experiments.affine.warp` (bilinear, zeros where the
    turned image has no pixel). A whole number of turns (0°, 360°) returns the images
    unchanged: interpolating at the pixel centres themselves would only add rounding."""
    _images(images)
    if isinstance(degrees, bool) or not isinstance(degrees, (int, float)):
        raise TypeError(f"degrees must be a number, got {type(degrees).__name__}")
    if degrees % 360 == 0:
        return images.clone()
    turn = AffineParameters.identity(len(images)).replace(rotation_degrees=degrees)
    return warp(images, turn)


@dataclass(frozen=True)
class Transformation:
    """One transformation of the input: ``kind`` (one of :data:`KINDS`) by
    ``amount`` (whole pixels for a shift, degrees for a rotation)."""

    kind: str
    amount: float

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {list(KINDS)}, got {self.kind!r}")
        number = isinstance(self.amount, (int, float)) and not isinstance(
            self.amount, bool
        )
        if not number or not math.isfinite(self.amount):
            raise TypeError(f"amount must be a finite number, got {self.amount!r}")
        if self.kind != "rotation" and self.amount != int(self.amount):
            raise ValueError(f"a shift moves whole pixels, got {self.amount}")

    @property
    def name(self) -> str:
        """A short name: ``"3 px left"``, ``"1 px down"``, ``"+30°"`` (positive:
        counter-clockwise)."""
        if self.kind == "rotation":
            return f"{self.amount:+g}°".replace("-", "−")
        ways = ("right", "left") if self.kind == "shift_x" else ("down", "up")
        return f"{abs(int(self.amount))} px {ways[self.amount < 0]}"

    def __call__(self, images: Tensor) -> Tensor:
        """The transformed ``images`` ``[B, C, H, W]``."""
        if self.kind == "rotation":
            return rotate_images(images, float(self.amount))
        step = int(self.amount)
        dx, dy = (step, 0) if self.kind == "shift_x" else (0, step)
        return shift_images(images, dx, dy)


def transformations(
    shifts: Iterable[int] = (-3, -2, -1, 1, 2, 3),
    angles: Iterable[float] = (-30, -20, -10, 10, 20, 30),
) -> list[Transformation]:
    """Every shift in ``shifts`` along x, then along y, then every rotation by
    ``angles`` (leave 0 out: :func:`measure` reads the untransformed images anyway)."""
    return [
        *(Transformation("shift_x", int(s)) for s in shifts),
        *(Transformation("shift_y", int(s)) for s in shifts),
        *(Transformation("rotation", float(a)) for a in angles),
    ]


class Reading(NamedTuple):
    """What a model says about the true class of ``N`` images."""

    score: Tensor  #: ``[N]``: the capsule's length, or the CNN's softmax probability
    vector: Tensor  #: ``[N, D]``: the capsule's pose (D = 16), or the CNN's features
    correct: Tensor  #: ``[N]`` bool: the model's prediction is the label


@torch.no_grad()
def represent(model: nn.Module, images: Tensor, labels: Tensor) -> Reading:
    """Read the true class ``labels`` ``[N]`` of ``images`` ``[N, C, H, W]``.

    A :class:`~capsnotes.CapsNet`: the digit capsule ``v`` of the label, its length
    ``‖v‖`` and whether it is the longest. A
    :class:`~capsnotes.experiments.convnet.ConvNet` (in evaluation mode, so that dropout
    keeps every feature): the output of its last hidden layer (after the ReLU), the
    softmax probability of the label, and whether
    its score is the highest."""
    _images(images)
    rows = torch.arange(len(images), device=images.device)
    labels = labels.to(images.device) if torch.is_tensor(labels) else labels
    if isinstance(model, CapsNet):
        checks.class_indices("labels", labels, model.config.num_classes, len(images))
        capsules = model.encode(images)  # [N, classes, D]
        lengths = torch.linalg.vector_norm(capsules, dim=-1)  # [N, classes]
        correct = lengths.argmax(1) == labels
        return Reading(lengths[rows, labels], capsules[rows, labels], correct)
    if isinstance(model, ConvNet):
        checks.class_indices("labels", labels, model.config.num_classes, len(images))
        if model.training:
            raise ValueError("call model.eval() first: dropout would drop features")
        # the classifier ends with its output layer; all before it is the hidden part
        features = model.classifier[:-1](model.features(images))  # [N, hidden]
        logits = model.classifier[-1](features)  # [N, classes]
        probability = logits.softmax(dim=1)[rows, labels]
        return Reading(probability, features, logits.argmax(1) == labels)
    raise TypeError(
        f"model must be a capsnotes CapsNet or ConvNet, got {type(model).__name__}"
    )


def measure(
    model: nn.Module,
    images: Tensor,
    labels: Tensor,
    steps: Sequence[Transformation],
    batch_size: int = 100,
) -> tuple[Reading, list[Reading]]:
    """:func:`represent` on the untransformed ``images`` ``[N, C, H, W]`` and on each
    of ``steps`` applied to them, ``batch_size`` images at a time: ``(before,
    [after for each step])``, on the device of ``images``."""
    _images(images)
    if not torch.is_tensor(labels) or labels.shape != (len(images),):
        raise ValueError(
            f"labels must be a tensor [{len(images)}] (one class per image), got "
            f"{tuple(getattr(labels, 'shape', ())) or type(labels).__name__}"
        )
    checks.integer("batch_size", batch_size, minimum=1)
    if not all(isinstance(step, Transformation) for step in steps):
        raise TypeError("steps must be a sequence of Transformation")

    def read(transform) -> Reading:
        parts = [
            represent(
                model, transform(images[k : k + batch_size]), labels[k : k + batch_size]
            )
            for k in range(0, len(images), batch_size)
        ]
        return Reading(*(torch.cat(field) for field in zip(*parts)))

    return read(lambda x: x), [read(step) for step in steps]


def angle_between(a: Tensor, b: Tensor) -> Tensor:
    """The angle in radians, in ``[0, π]``, between the vectors ``a`` and ``b``
    ``[..., D]`` → ``[...]``.

    As ``2 atan2(‖â − b̂‖, ‖â + b̂‖)`` of the unit vectors, which is accurate at every
    angle (``acos`` of the cosine loses half the digits near 0 and π): exactly 0 for a
    vector and itself, exactly π for a vector and its negative. (A zero vector, which
    has no direction, comes out at π/2 from any other.)"""
    if a.shape != b.shape or not (a.is_floating_point() and b.is_floating_point()):
        raise ValueError(
            f"a and b must be float tensors of the same shape [..., D], got "
            f"{tuple(a.shape)} {a.dtype} and {tuple(b.shape)} {b.dtype}"
        )
    a_hat, b_hat = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
    return 2 * torch.atan2((a_hat - b_hat).norm(dim=-1), (a_hat + b_hat).norm(dim=-1))
