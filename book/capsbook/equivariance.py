"""Does a capsule turn with its digit while its length holds? (chapter 9)

Chapter 1 says a capsule's length is the probability that its entity is present, the
same wherever the entity sits (*invariant*), while its direction is the entity's pose
and turns when the entity moves (*equivariant*). This module measures that on a trained
model, for the capsule of each digit's true class:

* :func:`shift_images` and :func:`rotate_images` move digits by whole pixels or turn
  them about the image's centre; :class:`Transformation` names one of them and
  :func:`transformations` lists a sweep of them.
* :func:`represent` reads what a model says about each image's true class: for a
  :class:`~capsnotes.CapsNet` the capsule's length and its 16-D pose, for a
  :class:`~capsnotes.experiments.convnet.ConvNet` the softmax probability and the
  features of its last hidden layer. :func:`measure` does it for every transformation.
* :func:`angle_between` says how far a pose turned; :func:`fit_linear_map` and
  :func:`held_out_angles` say whether it turned the same way for every digit (a map
  fitted on the other digits predicting each one), for long vectors within their
  :func:`principal_directions`.
* :func:`standardize` puts the vectors of different models in spaces of the same
  spread; there :func:`held_out_misses` measures how far three ever richer rules miss
  each moved vector (no movement, one offset shared by all, a linear map), and
  :func:`read_out` whether the change of a vector tells, linearly, how its image was
  moved; :func:`miss_shares` gives each image's miss as a share of its movement.
* :func:`image_r2` splits a read-out's R² into one share per image, so that
  :func:`bootstrap_interval` gives it an interval over the digits and
  :func:`compare_images` states two read-outs' difference as the book states every
  difference (:mod:`capsbook.stats`); :func:`read_out_figure` draws the R² with their
  intervals.
* :func:`summarize` turns a measurement into medians per transformation,
  :func:`summary_table` and :func:`miss_table` print them, :func:`read_out_table`
  prints read-outs, and :func:`equivariance_figure` draws the medians for one model
  or several.

Everything runs on the device; the readings keep the dtype of the images and the
model, the least-squares fits, principal directions and standard spaces are computed
in float64.

::

    steps = transformations(shifts=(-3, -2, -1, 1, 2, 3), angles=(-30, 30))
    before, after = measure(model, images, labels, steps)  # after: one per step
    table = summarize(before, after)  # medians per step: score, angle, ...
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from torch import Tensor, nn

from capsbook import stats
from capsbook.plots import COLORS, STYLE, new_figure
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


def _vectors(name: str, value: object) -> Tensor:
    return checks.float_tensor(name, value, "[N, D]", (None, None))


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


def fit_linear_map(before: Tensor, after: Tensor) -> Tensor:
    """The matrix ``M`` ``[D, E]`` that best predicts ``after`` ``[N, E]`` as
    ``before @ M`` from ``before`` ``[N, D]``, in least squares (computed in float64,
    returned in ``before``'s dtype). Needs ``N ≥ D`` vectors, so that ``M`` is
    determined by the data rather than by the solver. ``after`` may hold several sets
    of vectors, ``[..., N, E]``: one map each, ``[..., D, E]``."""
    _vectors("before", before)
    if not torch.is_tensor(after) or after.dim() < 2 or not after.is_floating_point():
        raise ValueError(
            f"after must be a float tensor [..., N, E], got "
            f"{tuple(getattr(after, 'shape', ())) or type(after).__name__}"
        )
    count, dims = before.shape
    if after.shape[-2] != count:
        raise ValueError(
            f"before and after must hold the same N vectors, got {count} and "
            f"{after.shape[-2]}"
        )
    if count < dims:
        raise ValueError(
            f"fitting a map from {dims} dimensions needs at least {dims} vectors, "
            f"got {count}"
        )
    design = before.double().expand(*after.shape[:-2], count, dims)
    solution = torch.linalg.lstsq(design, after.double()).solution
    return solution.to(before.dtype)


def principal_directions(vectors: Tensor, count: int) -> Tensor:
    """The ``count`` directions ``[D, count]`` (orthonormal columns) along which
    ``vectors`` ``[N, D]`` spread most about their mean: their first principal
    components."""
    _vectors("vectors", vectors)
    checks.integer("count", count, minimum=1)
    if count > min(vectors.shape):
        raise ValueError(
            f"count must be at most min(N, D) = {min(vectors.shape)}, got {count}"
        )
    centred = vectors - vectors.mean(dim=0)
    _, _, directions = torch.linalg.svd(centred.double(), full_matrices=False)
    return directions[:count].T.to(vectors.dtype)


def held_out_angles(
    before: Tensor, after: Tensor, folds: int | None = None, dims: int | None = None
) -> tuple[Tensor, Tensor]:
    """Does every vector move by the same linear map, ``after ≈ before @ M``?

    ``before`` ``[N, D]`` and ``after`` ``[N, D]`` are the same images before and
    after a transformation (or ``after`` ``[T, N, D]``, after each of ``T``; one map
    each). Each row is predicted by a map fitted (:func:`fit_linear_map`) on the other
    rows only, so that no vector is predicted by a map that has seen it: with
    ``folds=None`` on all the others (leave one out), else on the other groups of
    ``folds`` (row ``n`` in group ``n % folds``). With ``dims``, the vectors are first
    projected on the ``dims`` :func:`principal_directions` of the fitting rows of
    ``before``: a ``dims × dims`` map, for vectors too long to fit a ``D × D`` one.

    Returns ``(map_angle, kept_angle)``, each of ``after``'s shape less its last axis,
    in radians: the angle between each ``after`` and the map's prediction of it, and
    the angle between ``after`` and ``before`` (the prediction "no movement"), both in
    the space the map works in."""
    _vectors("before", before)
    if not torch.is_tensor(after) or after.shape[-2:] != before.shape:
        raise ValueError(
            f"after must be [N, D] or [T, N, D] with [N, D] = {list(before.shape)}, "
            f"got {tuple(getattr(after, 'shape', ())) or type(after).__name__}"
        )
    count = before.shape[0]
    folds = count if folds is None else checks.integer("folds", folds, minimum=2)
    group = torch.arange(count, device=before.device) % folds
    map_angle = after.new_empty(after.shape[:-1])
    kept_angle = after.new_empty(after.shape[:-1])
    for k in range(min(folds, count)):
        test = group == k
        x, y = before, after
        if dims is not None:
            basis = principal_directions(before[~test], dims)  # [D, dims]
            x, y = before @ basis, after @ basis
        matrix = fit_linear_map(x[~test], y[..., ~test, :])  # [(T,) D, D]
        predicted = x[test] @ matrix  # [(T,) n, D]
        map_angle[..., test] = angle_between(predicted, y[..., test, :])
        kept_angle[..., test] = angle_between(
            x[test].expand_as(predicted), y[..., test, :]
        )
    return map_angle, kept_angle


def standardize(
    vectors: Tensor,
    originals: Tensor,
    dims: int | None = None,
    whiten: bool = False,
) -> Tensor:
    """``vectors`` ``[..., D]`` in the *standard space* of ``originals`` ``[N, D]``
    (float64): centred on the originals' mean, projected on their ``dims`` principal
    directions (default: all ``D`` coordinates kept), and divided by their spread, the
    root mean square distance from that mean. There the originals have mean 0 and
    spread 1.

    Why: two models' spaces differ in scale and in where their vectors lie. A model
    whose vectors lie far from the origin compared with how much they differ turns
    less for the same movement than one whose vectors lie near it, and a distance in
    one model's units means nothing in the other's. Centring and one scale per model
    put every model's originals at the same place with the same spread, so that a
    distance there is a movement against how much the digits differ, whichever the
    model. The rule keeps the shape of each model's own distances, those in which the
    capsule's length and the CNN's next layer read the vector.

    ``whiten=True`` divides each principal direction by its own spread instead (all
    ``D`` of them without ``dims``), so that the originals spread alike in every
    direction, ``1 / √dims`` each. It is not the default: the directions in which the
    digits barely differ then weigh as much as the main ones, and they are the ones a
    few dozen digits estimate worst. It serves to check that a comparison does not
    hang on the scale."""
    _vectors("originals", originals)
    mean = originals.double().mean(dim=0)
    centred, originals = vectors.double() - mean, originals.double() - mean
    if dims is not None or whiten:
        directions = principal_directions(originals, dims or originals.shape[1])
        centred, originals = centred @ directions, originals @ directions
    spread = originals.square().mean(dim=0)  # [d]: along each coordinate
    if whiten:
        return centred / (spread * len(spread)).sqrt()
    return centred / spread.sum().sqrt()


#: The predictions of a moved vector that :func:`held_out_misses` compares, from the
#: simplest: the name of each.
PREDICTORS: dict[str, str] = {
    "none": "no movement",
    "offset": "shared offset",
    "map": "linear map",
}


def held_out_misses(
    before: Tensor,
    after: Tensor,
    folds: int | None = None,
    dims: int | None = None,
    whiten: bool = False,
) -> dict[str, Tensor]:
    """How far does each of three rules, from the simplest, miss the moved vectors?

    ``before`` and ``after`` as for :func:`held_out_angles` (``after`` ``[N, D]`` or
    ``[T, N, D]``); each row is predicted, as there, by rules fitted on the other rows
    only (``folds``), and in the standard space of their ``before`` (:func:`standardize`
    with ``dims`` and ``whiten``):

    * ``"none"`` — no movement: ``after ≈ before``;
    * ``"offset"`` — one offset shared by every vector, the others' mean movement
      ``d``: ``after ≈ before + d``. Any vectors show it where the transformation adds
      the same to each;
    * ``"map"`` — a linear map with an offset, ``after ≈ before @ M + d``, by least
      squares. It holds both others (``M = I``), so it misses less than the offset only
      where the vectors move differently, in a way that each one's values predict.

    Returns, for each rule of :data:`PREDICTORS`, the distance (``after``'s shape less
    its last axis) from each ``after`` to its prediction, in units of the others'
    spread; that of ``"none"`` is how far the vector moved. Distances, not angles: the
    standard space's origin is the originals' mean, and an offset that carries every
    moved vector far from it turns them all towards one direction, so that an angle
    there would shrink every miss by the offset's length."""
    _vectors("before", before)
    if not torch.is_tensor(after) or after.shape[-2:] != before.shape:
        raise ValueError(
            f"after must be [N, D] or [T, N, D] with [N, D] = {list(before.shape)}, "
            f"got {tuple(getattr(after, 'shape', ())) or type(after).__name__}"
        )
    count = before.shape[0]
    folds = count if folds is None else checks.integer("folds", folds, minimum=2)
    group = torch.arange(count, device=before.device) % folds
    misses = {
        name: torch.empty(after.shape[:-1], dtype=torch.float64, device=after.device)
        for name in PREDICTORS
    }
    for k in range(min(folds, count)):
        test = group == k
        x = standardize(before, before[~test], dims, whiten)  # [N, d]
        y = standardize(after, before[~test], dims, whiten)  # [(T,) N, d]
        offset = (y[..., ~test, :] - x[~test]).mean(dim=-2, keepdim=True)
        x1 = torch.cat([x, x.new_ones(count, 1)], dim=1)  # a 1 to carry the offset
        matrix = fit_linear_map(x1[~test], y[..., ~test, :])  # [(T,) d + 1, d]
        moved = y[..., test, :]
        predictions = {
            "none": x[test].expand_as(moved),
            "offset": x[test] + offset,
            "map": x1[test] @ matrix,
        }
        for name, predicted in predictions.items():
            misses[name][..., test] = (predicted - moved).norm(dim=-1)
    return misses


def miss_shares(misses: Mapping[str, Tensor], rule: str, rows: Sequence[int]) -> Tensor:
    """Each image's miss by ``rule`` (one of :data:`PREDICTORS`) as a share of how far
    its vector moved (the miss of ``"none"``), averaged over the transformations
    ``rows`` of :func:`held_out_misses`'s ``[T, N]`` distances: ``[N]`` (float64, on
    the CPU), one value per image, so that two models can be compared image by image
    (:func:`compare_images`). An image that did not move has no share: NaN."""
    if rule not in PREDICTORS:
        raise ValueError(f"rule must be one of {list(PREDICTORS)}, got {rule!r}")
    moved, missed = misses["none"], misses[rule]
    if moved.dim() != 2 or missed.shape != moved.shape:
        raise ValueError(
            f"misses must hold [T, N] distances for every rule, got "
            f"{tuple(moved.shape)} and {tuple(missed.shape)}"
        )
    rows = list(rows)
    if not rows or not all(
        isinstance(r, int) and not isinstance(r, bool) and 0 <= r < len(moved)
        for r in rows
    ):
        raise ValueError(f"rows must be one or more of 0 to {len(moved) - 1}: {rows}")
    moved = moved[rows].double().cpu()
    share = missed[rows].double().cpu() / torch.where(moved > 0, moved, math.nan)
    return share.mean(dim=0)


#: What :func:`read_out` recovers of a transformation, with its unit.
AMOUNTS: dict[str, str] = {"dx": "px", "dy": "px", "angle": "°"}


def amounts(steps: Sequence[Transformation]) -> Tensor:
    """``[T, 3]`` (float64): for each of ``steps`` the shift right and down in pixels
    and the rotation in degrees counter-clockwise (:data:`AMOUNTS`), 0 for the two it
    does not do."""
    table = torch.zeros(len(steps), len(KINDS), dtype=torch.float64)
    for t, step in enumerate(steps):
        table[t, list(KINDS).index(step.kind)] = step.amount
    return table


class ReadOut(NamedTuple):
    """What :func:`read_out` recovered of the transformations of ``N`` images."""

    predicted: Tensor  #: ``[T, N, 3]``: dx, dy and angle read from each held-out change
    r2: Tensor  #: ``[3]``: 1 − squared error / variance of the true amount (1: exact)
    rms: Tensor  #: ``[3]``: root mean square error, in pixels and degrees


def read_out(
    before: Tensor,
    after: Tensor,
    steps: Sequence[Transformation],
    folds: int | None = None,
    dims: int | None = None,
    ridge: float = 0.0,
) -> ReadOut:
    """Does the change of the vector say, linearly, how its image was moved?

    ``before`` ``[N, D]`` are the vectors of ``N`` images, ``after`` ``[T, N, D]``
    those after each of ``steps``. For every step and image, the change ``after −
    before`` in the standard space (:func:`standardize` with ``dims``) is read by a
    linear map with an intercept into the step's :func:`amounts` (dx, dy, angle),
    fitted by least squares on the other images: every step of an image is held out
    together (row ``n`` in group ``n % folds``; ``folds=None``: one image at a time),
    and the standard space is the others' too. ``ridge`` adds ``ridge × ‖W‖²`` to the
    squared error (the intercept is free): for more dimensions than the fit can
    determine.

    With ``ridge=0`` the fit does not depend on the standard space's scale or
    rotation: any invertible linear change of the ``dims`` coordinates gives the same
    predictions. Only ``dims`` (which directions are read) matters."""
    _vectors("before", before)
    if not torch.is_tensor(after) or after.shape[1:] != before.shape:
        raise ValueError(
            f"after must be [T, N, D] with [N, D] = {list(before.shape)}, got "
            f"{tuple(getattr(after, 'shape', ())) or type(after).__name__}"
        )
    if len(steps) != len(after):
        raise ValueError(
            f"steps must be one per row of after: {len(after)}, got {len(steps)}"
        )
    if isinstance(ridge, bool) or not isinstance(ridge, (int, float)) or ridge < 0:
        raise ValueError(f"ridge must be a number >= 0, got {ridge!r}")
    count = before.shape[0]
    folds = count if folds is None else checks.integer("folds", folds, minimum=2)
    group = torch.arange(count, device=before.device) % folds
    truth = amounts(steps).to(before.device)[:, None].expand(-1, count, -1)  # [T, N, 3]
    predicted = torch.empty_like(truth)
    for k in range(min(folds, count)):
        test = group == k
        change = standardize(after, before[~test], dims) - standardize(
            before, before[~test], dims
        )  # [T, N, d]
        x, y = change[:, ~test].flatten(0, 1), truth[:, ~test].flatten(0, 1)
        x_mean, y_mean = x.mean(dim=0), y.mean(dim=0)
        x, y = x - x_mean, y - y_mean  # the means carry the intercept
        if ridge:
            x = torch.cat([x, math.sqrt(ridge) * torch.eye(x.shape[1]).to(x)])
            y = torch.cat([y, y.new_zeros(x.shape[1], y.shape[1])])
        weights = torch.linalg.lstsq(x, y).solution  # [d, 3]
        predicted[:, test] = (change[:, test] - x_mean) @ weights + y_mean
    error = (predicted - truth).flatten(0, 1)
    deviation = truth.flatten(0, 1) - truth.mean(dim=(0, 1))
    r2 = 1 - error.square().sum(dim=0) / deviation.square().sum(dim=0)
    return ReadOut(predicted, r2.cpu(), error.square().mean(dim=0).sqrt().cpu())


def summarize(
    before: Reading,
    after: Sequence[Reading],
    folds: int | None = None,
    dims: int | None = None,
) -> dict[str, Tensor]:
    """Medians per transformation (``[T]`` each, for the ``T`` readings in ``after``)
    over the ``N`` images of ``before``:

    * ``score`` — the true class's capsule length or probability; ``accuracy``;
    * ``angle`` — degrees between each vector and the untransformed one;
    * ``map_angle`` and ``kept_angle`` — degrees between each vector and a linear map's
      prediction of it, and the prediction "no movement" (:func:`held_out_angles`
      with ``folds`` and ``dims``); ``missed`` — ``map_angle / kept_angle``, the share
      of the turn that the map misses (1: no better than "no movement");
    * ``miss_none``, ``miss_offset``, ``miss_map`` — the distance by which each rule
      of :data:`PREDICTORS` misses, in spreads of the original vectors in the standard
      space (:func:`held_out_misses` with ``folds`` and ``dims``); ``miss_none`` is
      how far the vectors moved there.

    Also ``score_before`` and ``accuracy_before`` (one value each), of the
    untransformed images, and ``count`` (``N``). A median of an even count is the
    lower of the two middle values (``torch.median``): one of the measured values."""
    if not after or any(r.vector.shape != before.vector.shape for r in after):
        raise ValueError(
            "after must hold readings of the images of before, one or more"
        )
    scores = torch.stack([reading.score for reading in after])  # [T, N]
    correct = torch.stack([reading.correct for reading in after])  # [T, N]
    vectors = torch.stack([reading.vector for reading in after])  # [T, N, D]
    turned = angle_between(vectors, before.vector.expand_as(vectors))  # [T, N]
    map_angle, kept_angle = held_out_angles(before.vector, vectors, folds, dims)

    def median(values: Tensor) -> Tensor:  # [T, N] -> [T]
        return values.median(dim=1).values.cpu()

    summary = {
        "score": median(scores),
        "accuracy": correct.float().mean(dim=1).cpu(),
        "angle": median(turned).rad2deg(),
        "map_angle": median(map_angle).rad2deg(),
        "kept_angle": median(kept_angle).rad2deg(),
    }
    summary["missed"] = summary["map_angle"] / summary["kept_angle"]
    misses = held_out_misses(before.vector, vectors, folds, dims)
    for name, miss in misses.items():
        summary[f"miss_{name}"] = median(miss)
    summary["score_before"] = before.score.median().cpu()[None]
    summary["accuracy_before"] = before.correct.float().mean().cpu()[None]
    summary["count"] = torch.tensor([len(before.score)])
    return summary


def _rows(
    steps: Sequence[Transformation], shown: Sequence[Transformation] | None
) -> list[Transformation]:
    """``shown`` (default: all of ``steps``), checked to be some of ``steps``."""
    shown = list(steps) if shown is None else list(shown)
    if not set(shown) <= set(steps):
        raise ValueError("shown must be some of steps")
    return shown


def _lines(head: list[str], sub: list[str], rows: list[list[str]]) -> str:
    """A text table: two header lines, then ``rows``, cells joined by 3 spaces."""
    lines = [head, sub, *rows]
    return "\n".join("   ".join(cells).rstrip() for cells in lines)


def summary_table(
    steps: Sequence[Transformation],
    summaries: Mapping[str, Mapping[str, Tensor]],
    shown: Sequence[Transformation] | None = None,
) -> str:
    """:func:`summarize`'s tables for ``steps`` as text, one row per transformation of
    ``shown`` (default: all of ``steps``) after a row for the original images, and
    three columns per model (name → table): median score, how many read right, median
    angle turned in the model's own space."""
    head, sub = ["transformation".ljust(14)], ["".ljust(14)]
    for name in summaries:
        head.append(f"{name[:20]:^20s}")
        sub.append("score  right  turned")
    rows = []
    for step in [None, *_rows(steps, shown)]:
        cells = [(step.name if step else "original").ljust(14)]
        for summary in summaries.values():
            count = int(summary["count"][0])
            if step is None:
                score = float(summary["score_before"][0])
                right = round(float(summary["accuracy_before"][0]) * count)
                cells.append(f"{score:5.3f}  {right:>2d}/{count:<2d}".ljust(20))
                continue
            k = list(steps).index(step)
            score, angle = float(summary["score"][k]), float(summary["angle"][k])
            right = round(float(summary["accuracy"][k]) * count)
            cells.append(f"{score:5.3f}  {right:>2d}/{count:<2d} {angle:6.1f}°")
        rows.append(cells)
    return _lines(head, sub, rows)


def miss_table(
    steps: Sequence[Transformation],
    summaries: Mapping[str, Mapping[str, Tensor]],
    shown: Sequence[Transformation] | None = None,
) -> str:
    """The misses of :func:`summarize`'s tables as text, one row per transformation of
    ``shown`` (default: all of ``steps``) and, per model (name → table), the median
    distance by which each rule of :data:`PREDICTORS` misses, in spreads of the
    original vectors: "no movement" (how far the vectors moved), then "shared offset"
    and "linear map", each also in percent of the first."""
    head, sub = ["".ljust(14)], ["transformation".ljust(14)]
    for name in summaries:
        head.append(f"{name[:29]:^29s}")
        sub.append(f"{'none':>5s}  {'offset':^10s}  {'map':^10s}")
    rows = []
    for step in _rows(steps, shown):
        cells = [step.name.ljust(14)]
        k = list(steps).index(step)
        for summary in summaries.values():
            none, offset, fitted = (
                float(summary[f"miss_{name}"][k]) for name in PREDICTORS
            )
            share = [f"{m / none:4.0%}" if none else "   –" for m in (offset, fitted)]
            cells.append(
                f"{none:5.2f}  {offset:5.2f} {share[0]}  {fitted:5.2f} {share[1]}"
            )
        rows.append(cells)
    return _lines(head, sub, rows)


def read_out_table(results: Mapping[str, ReadOut]) -> str:
    """:func:`read_out`'s results (name → result) as text, a row each: R² and the root
    mean square error of each amount of :data:`AMOUNTS`."""
    head = ["".ljust(20), f"{'R²':^18s}", f"{'RMS error':^24s}"]
    sub = ["".ljust(20), "   ".join(f"{a:>4s}" for a in AMOUNTS)]
    sub.append(" ".join(f"{a:>7s}" for a in AMOUNTS))
    rows = []
    for name, result in results.items():
        errors = [
            f"{error:.2f} px" if unit == "px" else f"{error:.1f}{unit}"
            for error, unit in zip(result.rms.tolist(), AMOUNTS.values())
        ]
        r2 = "   ".join(f"{float(r):4.2f}" for r in result.r2)
        rows.append([name[:20].ljust(20), r2, " ".join(e.rjust(7) for e in errors)])
    return _lines(head, sub, rows)


def image_r2(result: ReadOut, steps: Sequence[Transformation]) -> Tensor:
    """Each image's share of :func:`read_out`'s R²: ``[N, 3]`` (float64, on the CPU),
    ``1 − (the image's squared errors over the steps) / (the steps' squared deviations
    from their mean amount)`` for each amount of :data:`AMOUNTS`.

    Every image undergoes the same ``steps``, so R² is the mean of these over the
    images: a mean over digits, which can be resampled or tested digit by digit
    (:func:`bootstrap_interval`, :func:`compare_images`). An amount that no step
    changes has no variance to explain: its column is NaN."""
    truth = amounts(steps)  # [T, 3]
    predicted = result.predicted.detach().double().cpu()
    if predicted.dim() != 3 or predicted.shape[0] != len(steps):
        raise ValueError(
            f"result.predicted must be [T, N, 3] with T = {len(steps)} steps, got "
            f"{tuple(predicted.shape)}"
        )
    deviation = (truth - truth.mean(dim=0)).square().sum(dim=0)  # [3]
    error = (predicted - truth[:, None]).square().sum(dim=0)  # [N, 3]
    deviation = torch.where(deviation > 0, deviation, math.nan)
    return 1 - error / deviation


def _per_image(name: str, values: object) -> Tensor:
    if not torch.is_tensor(values) or values.dim() < 1 or len(values) < 2:
        raise ValueError(
            f"{name} must be a tensor [N, ...] of N >= 2 images, got "
            f"{tuple(getattr(values, 'shape', ())) or type(values).__name__}"
        )
    return values.detach().double().cpu()


def bootstrap_interval(
    values: Tensor, draws: int = 4000, level: float = 0.95, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """The percentile bootstrap interval of the mean of ``values`` ``[N, ...]`` over
    its ``N`` images: ``draws`` resamples of the images with replacement (a seeded
    generator: the same draws on every machine), and the ``(1 − level) / 2`` and
    ``(1 + level) / 2`` quantiles of their means, ``(low, high)``, each ``[...]``.

    It says how much the mean would move had other digits of the same kind been
    measured; not how much another training run of the model would move it."""
    values = _per_image("values", values)
    checks.integer("draws", draws, minimum=100)
    if isinstance(level, bool) or not isinstance(level, float) or not 0 < level < 1:
        raise ValueError(f"level must be a float between 0 and 1, got {level!r}")
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randint(len(values), (draws, len(values)), generator=generator)
    means = values[picks].mean(dim=1)  # [draws, ...]
    tails = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    low, high = torch.quantile(means, tails, dim=0)
    return low, high


@dataclass(frozen=True)
class ImageDifference:
    """``b − a`` of a mean over the same ``n`` images, stated as the book states every
    difference (:mod:`capsbook.stats`): the effect, the images' spread (the standard
    deviation of the per-image differences), Student's paired t-test's two-sided p, the
    difference the design detects at :data:`capsbook.stats.ALPHA` with
    :data:`capsbook.stats.POWER`, and a bootstrap interval of the effect
    (:func:`bootstrap_interval`) at ``level``."""

    effect: float
    spread: float
    n: int
    p: float
    detectable: float
    low: float
    high: float
    level: float

    @property
    def is_difference(self) -> bool:
        """The book's standard (:attr:`capsbook.stats.Difference.is_difference`):
        Student's t-test, two-sided, p below :data:`capsbook.stats.ALPHA`."""
        return self.p < stats.ALPHA


def compare_images(
    a: Tensor, b: Tensor, draws: int = 4000, level: float = 0.95, seed: int = 0
) -> ImageDifference:
    """``b − a`` for two measurements ``[N]`` of the same ``N`` images (two models'
    :func:`image_r2` for one amount, say), paired image by image: Student's t on the
    ``N`` differences (the book's test; its exact permutation test would enumerate
    ``2^N`` sign flips) and their bootstrap interval.

    Each image is one unit: the interval and the test say how far the comparison could
    move with other digits, not with other training runs of either model."""
    a, b = _per_image("a", a), _per_image("b", b)
    if a.shape != b.shape or a.dim() != 1:
        raise ValueError(
            f"a and b must be [N] over the same N images, got {tuple(a.shape)} and "
            f"{tuple(b.shape)}"
        )
    differences = b - a
    if differences.std().item() == 0:
        raise ValueError("differences that are all equal have no spread to test")
    tested = stats.paired(a.tolist(), b.tolist())
    low, high = bootstrap_interval(differences, draws, level, seed)
    return ImageDifference(
        effect=tested.effect,
        spread=tested.spread,
        n=tested.n,
        p=tested.p,
        detectable=tested.detectable,
        low=low.item(),
        high=high.item(),
        level=level,
    )


#: The axis labels of :func:`read_out_figure`, by amount.
AMOUNT_TITLES = {"dx": "shift right (dx)", "dy": "shift down (dy)", "angle": "rotation"}


def read_out_figure(
    results: Mapping[str, ReadOut],
    steps: Sequence[Transformation],
    draws: int = 4000,
    level: float = 0.95,
    width: float = 6.5,
) -> Figure:
    """:func:`read_out`'s R² for each amount of :data:`AMOUNTS` (a group each) and each
    read-out of ``results`` (name → result; a colour and marker each, in order), with
    its :func:`bootstrap_interval` over the images at ``level`` as a bar. The axis runs
    from 0 (no better than the mean amount) to 1 (exact), whatever the values."""
    names = list(results)
    per_image = {name: image_r2(result, steps) for name, result in results.items()}
    style = {**STYLE, "font.size": 8, "legend.fontsize": 8}
    fig, ax = new_figure(1, 1, width, 2.6, style)
    spacing = 0.8 / max(len(names), 1)
    with plt.rc_context(style):
        for index, name in enumerate(names):
            values = per_image[name]
            low, high = bootstrap_interval(values, draws, level)
            middle = values.mean(dim=0)
            x = [k + (index - (len(names) - 1) / 2) * spacing for k in range(3)]
            ax.errorbar(
                x,
                middle.tolist(),
                yerr=[(middle - low).tolist(), (high - middle).tolist()],
                color=COLORS[index % len(COLORS)],
                marker="osD^"[index % 4],
                markersize=5,
                linestyle="none",
                capsize=3,
                elinewidth=1.2,
                label=name,
            )
        ax.set_xticks(range(3), [AMOUNT_TITLES[a] for a in AMOUNTS])
        ax.set_xlim(-0.6, 2.6)
        ax.set_ylim(0, 1)
        ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
        ax.set_ylabel("R² of the held-out read-out")
        ax.grid(axis="x", visible=False)
        fig.legend(loc="outside upper center", ncols=len(names), frameon=False)
    return fig


#: Axis titles of the figure's columns, by kind.
AXIS_TITLES = {
    "shift_x": "shift right (pixels)",
    "shift_y": "shift down (pixels)",
    "rotation": "rotation (°, counter-clockwise)",
}


def _curve(
    steps: Sequence[Transformation], kind: str, values: Tensor, at_zero: float | None
) -> tuple[list[float], list[float]]:
    """The points ``(amount, value)`` of one kind, in order of amount, with the
    untransformed point ``(0, at_zero)``; ``at_zero=None`` puts NaN there, which
    breaks the line (a value that does not exist)."""
    points = [
        (float(s.amount), float(v)) for s, v in zip(steps, values) if s.kind == kind
    ]
    points.append((0.0, math.nan if at_zero is None else at_zero))
    points.sort(key=lambda point: point[0])
    return [a for a, _ in points], [v for _, v in points]


def _amount_ticks(steps: Sequence[Transformation], kind: str) -> tuple[list, list]:
    """Ticks at every amount of ``kind`` and at 0; labels at all of them where they
    are short ("−3"), else at the two ends and 0 only ("−30", "0", "30")."""
    amounts = sorted({0.0, *(float(s.amount) for s in steps if s.kind == kind)})
    labels = [f"{a:g}".replace("-", "−") for a in amounts]
    if max(map(len, labels)) > 2:
        ends = (amounts[0], 0.0, amounts[-1])
        labels = [text if a in ends else "" for a, text in zip(amounts, labels)]
    return amounts, labels


def equivariance_figure(
    steps: Sequence[Transformation],
    summaries: Mapping[str, Mapping[str, Tensor]],
    width: float = 6.5,
) -> Figure:
    """What :func:`summarize` measured, one column per kind of transformation in
    ``steps`` (against its amount) and one colour per model of ``summaries`` (name →
    table): the true class's median score (row 1); how far its vector moved in the
    standard space, in spreads of the original vectors (row 2); and how far the
    held-out rules of :func:`held_out_misses` miss, in percent of how far the vector
    moved (row 3): the shared offset dashed with open markers, the linear map solid
    (100%, grey: no better than "no movement"). ``width`` inches wide (the book's
    column: 6.5), with 8-point text."""
    kinds = list(dict.fromkeys(step.kind for step in steps))
    style = {**STYLE, "font.size": 8, "legend.fontsize": 8}
    fig, axes = new_figure(
        len(kinds), 3, width, 5.4, style, squeeze=False, sharex="col", sharey="row"
    )
    highest = 100.0
    with plt.rc_context(style):
        for index, (name, summary) in enumerate(summaries.items()):
            line = {
                "color": COLORS[index % len(COLORS)],
                "marker": "osD^"[index % 4],
                "markersize": 3.5,
                "linewidth": 1.2,
            }
            moved = summary["miss_none"]
            moved = torch.where(moved > 0, moved, math.nan)  # nothing to miss: no value
            offset = {"linestyle": "--", "markerfacecolor": "white"}
            score_before = float(summary["score_before"][0])
            curves = (  # row, values, value of the untransformed images, style
                (0, summary["score"], score_before, {"label": name}),
                (1, summary["miss_none"], 0.0, {}),
                (2, 100 * summary["miss_offset"] / moved, None, offset),  # 0 / 0 at 0
                (2, 100 * summary["miss_map"] / moved, None, {}),
            )
            for col, kind in enumerate(kinds):
                for row, values, at_zero, extra in curves:
                    x, y = _curve(steps, kind, values, at_zero)
                    axes[row, col].plot(x, y, **line, **extra)
                    if row == 2:
                        highest = max([highest, *(v for v in y if math.isfinite(v))])
        for col, kind in enumerate(kinds):
            axes[-1, col].set_xticks(*_amount_ticks(steps, kind))
            axes[-1, col].set_xlabel(AXIS_TITLES[kind])
            axes[2, col].axhline(100, color="#555555", linewidth=1.0, linestyle=":")
        axes[0, 0].set_ylabel("true class: median\nlength or probability")
        axes[1, 0].set_ylabel("median distance moved\n(spreads of the originals)")
        axes[2, 0].set_ylabel("median miss over\nmedian move (%)")
        axes[0, 0].set_ylim(top=1.02)
        axes[1, 0].set_ylim(bottom=0)
        axes[2, 0].set_ylim(0, 5 * math.ceil(highest / 5) + 5)
        handles, labels = axes[0, 0].get_legend_handles_labels()
        grey = {"color": "#777777", "linewidth": 1.2, "markersize": 3.5}
        handles += [
            Line2D([], [], marker="o", linestyle="--", markerfacecolor="white", **grey),
            Line2D([], [], marker="o", **grey),
            Line2D([], [], linestyle=":", color="#555555", linewidth=1.0),
        ]
        labels += [PREDICTORS["offset"], PREDICTORS["map"], PREDICTORS["none"]]
        fig.legend(
            handles,
            labels,
            loc="outside upper center",
            ncols=len(labels),
            frameon=False,
        )
    return fig
