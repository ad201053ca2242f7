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
* :func:`summarize` turns a measurement into medians per transformation,
  :func:`summary_table` prints them, and :func:`equivariance_figure` draws them for
  one model or several.

Everything runs on the device and in the dtype of the images and the model; only the
least-squares fits and principal directions are computed in float64.

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
from torch import Tensor, nn

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
      of the turn that the map misses (1: no better than "no movement").

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
    summary["score_before"] = before.score.median().cpu()[None]
    summary["accuracy_before"] = before.correct.float().mean().cpu()[None]
    summary["count"] = torch.tensor([len(before.score)])
    return summary


def summary_table(
    steps: Sequence[Transformation],
    summaries: Mapping[str, Mapping[str, Tensor]],
    shown: Sequence[Transformation] | None = None,
) -> str:
    """:func:`summarize`'s tables for ``steps`` as text, one row per transformation of
    ``shown`` (default: all of ``steps``) after a row for the original images, and
    four columns per model (name → table): median score, how many read right, median
    angle turned, share of it missed."""
    shown = list(steps) if shown is None else list(shown)
    if not set(shown) <= set(steps):
        raise ValueError("shown must be some of steps")
    head = ["transformation".ljust(14)]
    sub = ["".ljust(14)]
    for name in summaries:
        head.append(f"{name[:28]:^28s}")
        sub.append("score  right  turned missed")
    lines = ["   ".join(head).rstrip(), "   ".join(sub)]
    for step in [None, *shown]:
        cells = [(step.name if step else "original").ljust(14)]
        for summary in summaries.values():
            count = int(summary["count"][0])
            if step is None:
                score = float(summary["score_before"][0])
                right = round(float(summary["accuracy_before"][0]) * count)
                cells.append(f"{score:5.3f}  {right:>2d}/{count:<2d}".ljust(28))
                continue
            k = list(steps).index(step)
            score, angle = float(summary["score"][k]), float(summary["angle"][k])
            right = round(float(summary["accuracy"][k]) * count)
            missed = float(summary["missed"][k])
            cells.append(
                f"{score:5.3f}  {right:>2d}/{count:<2d} {angle:6.1f}° {missed:6.0%}"
            )
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines)


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
    ``steps`` (against its amount) and one line per model of ``summaries`` (name →
    table): the true class's median score (row 1), the median angle its vector turned
    (row 2), and ``missed`` in percent (row 3): the median angle by which the held-out
    maps miss over the median angle between original and moved vector, both in the
    maps' space (100%: the maps do no better than "no movement"). ``width`` inches
    wide (the book's column: 6.5), with 8-point text."""
    kinds = list(dict.fromkeys(step.kind for step in steps))
    style = {**STYLE, "font.size": 8, "legend.fontsize": 8}
    fig, axes = new_figure(
        len(kinds), 3, width, 5.2, style, squeeze=False, sharex="col", sharey="row"
    )
    with plt.rc_context(style):
        for index, (name, summary) in enumerate(summaries.items()):
            line = {
                "color": COLORS[index % len(COLORS)],
                "marker": "osD^"[index % 4],
                "markersize": 3.5,
                "linewidth": 1.2,
                "label": name,
            }
            rows = (  # key, value of the untransformed images, scale
                ("score", float(summary["score_before"][0]), 1),
                ("angle", 0.0, 1),
                ("missed", None, 100),  # 0 / 0 for the untransformed images
            )
            for col, kind in enumerate(kinds):
                for row, (key, at_zero, scale) in enumerate(rows):
                    x, y = _curve(steps, kind, summary[key], at_zero)
                    axes[row, col].plot(x, [scale * v for v in y], **line)
        for col, kind in enumerate(kinds):
            axes[-1, col].set_xticks(*_amount_ticks(steps, kind))
            axes[-1, col].set_xlabel(AXIS_TITLES[kind])
            axes[2, col].axhline(100, color="#777777", linewidth=0.8, linestyle="--")
        axes[0, 0].set_ylabel("true class: median\nlength or probability")
        axes[1, 0].set_ylabel("median angle turned\nfrom the original (°)")
        axes[2, 0].set_ylabel("median miss of the maps\nover median move (%)")
        axes[0, 0].set_ylim(top=1.02)
        axes[1, 0].set_ylim(bottom=0)
        axes[2, 0].set_ylim(0, 110)
        handles, labels = axes[0, 0].get_legend_handles_labels()
        fig.legend(
            handles,
            labels,
            loc="outside upper center",
            ncols=len(labels),
            frameon=False,
        )
    return fig
