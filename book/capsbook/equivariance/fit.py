"""Did the vector move the same way for every digit? The held-out fits of chapter 9.

:func:`held_out_angles` says whether a vector turned by one linear map for every digit
(:func:`fit_linear_map`, fitted on the other digits), for long vectors within their
:func:`principal_directions`. In each model's standard space (:func:`standardize`),
:func:`held_out_misses` measures how far three ever richer rules miss each moved vector
(:func:`miss_shares`: each image's miss as a share of its movement), and
:func:`read_out` whether the change of a vector tells, linearly, how its image was
moved (:func:`image_r2`: each image's share of its R²).

scikit-learn does the statistics: least squares (``LinearRegression``, ``Ridge``), the
principal directions and whitening (``PCA``), the folds (``PredefinedSplit``). Written
here is what it leaves open: which rows are held out together, in which space each fit
works, how far each prediction misses. The fits run in float64 on the CPU, on one BLAS
thread (:data:`_one_thread`): the matrices are tiny, and a pool of BLAS threads made
them 11 times slower on a 2-core AMD EPYC Zen 5, and 100 times slower while another
process trained beside them (0.67 s against 0.06 s for chapter 9's misses; 8.6 against
0.07 with a training process beside it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import torch
from sklearn.decomposition import PCA
from sklearn.linear_model import LinearRegression, Ridge
from sklearn.model_selection import PredefinedSplit
from threadpoolctl import threadpool_limits
from torch import Tensor

from capsbook.equivariance.measure import KINDS, Transformation, angle_between
from capsnotes.data import checks

#: Every public fit runs on one BLAS thread (see the module's docstring).
_one_thread = threadpool_limits.wrap(limits=1)


def _vectors(name: str, value: object) -> Tensor:
    return checks.float_tensor(name, value, "[N, D]", (None, None))


def _numpy(values: Tensor) -> np.ndarray:
    return values.detach().double().cpu().numpy()


def _predict(
    model: LinearRegression | Ridge, x: Tensor, y: Tensor, new: Tensor
) -> Tensor:
    """``model`` fitted to predict ``y`` ``[..., N, E]`` from ``x`` ``[N, D]``, then its
    predictions for ``new`` ``[n, D]``: ``[..., n, E]`` (float64, on ``new``'s device).
    Each set of ``y`` gets a map of its own: scikit-learn fits every column alone."""
    model.fit(_numpy(x), _numpy(y.movedim(-2, 0).flatten(1)))  # [N, (...)·E]
    predicted = torch.from_numpy(model.predict(_numpy(new)))  # [n, (...)·E]
    shape = (len(new), *y.shape[:-2], y.shape[-1])
    return predicted.reshape(shape).movedim(0, -2).to(new.device)


def _held_out(
    before: Tensor, after: object, folds: int | None, stacked: bool = False
) -> list[tuple[Tensor, Tensor]]:
    """The door of every held-out fit: ``before`` ``[N, D]`` and ``after``, the same
    vectors after a transformation, ``[N, D]`` or ``[T, N, D]`` (``stacked``: ``[T, N,
    D]`` only). Returns the folds, ``(rows fitted on, rows predicted)`` as indices on
    ``before``'s device: row ``n`` predicted in fold ``n % folds`` (``folds=None``:
    each row on its own, leave one out)."""
    _vectors("before", before)
    shape = "[T, N, D]" if stacked else "[N, D] or [T, N, D]"
    if (
        not torch.is_tensor(after)
        or after.shape[-2:] != before.shape
        or (stacked and after.dim() != 3)
    ):
        raise ValueError(
            f"after must be {shape} with [N, D] = {list(before.shape)}, got "
            f"{tuple(getattr(after, 'shape', ())) or type(after).__name__}"
        )
    count = len(before)
    folds = count if folds is None else checks.integer("folds", folds, minimum=2)
    split = PredefinedSplit(np.arange(count) % folds).split()
    return [
        (
            torch.as_tensor(fit, device=before.device),
            torch.as_tensor(test, device=before.device),
        )
        for fit, test in split
    ]


@_one_thread
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
    # M's rows are what the fitted map predicts for the unit vectors: I @ M, exactly
    regression = LinearRegression(fit_intercept=False)
    unit = torch.eye(dims, dtype=torch.float64, device=before.device)
    return _predict(regression, before, after, unit).to(before.dtype)


def _pca(vectors: Tensor, count: int, whiten: bool = False) -> PCA:
    """scikit-learn's PCA of ``vectors`` ``[N, D]`` with ``count`` components, fitted in
    float64 by a full SVD (exact, as every solver it might pick otherwise is not)."""
    _vectors("vectors", vectors)
    checks.integer("count", count, minimum=1)
    if count > min(vectors.shape):
        raise ValueError(
            f"count must be at most min(N, D) = {min(vectors.shape)}, got {count}"
        )
    return PCA(count, whiten=whiten, svd_solver="full").fit(_numpy(vectors))


@_one_thread
def principal_directions(vectors: Tensor, count: int) -> Tensor:
    """The ``count`` directions ``[D, count]`` (orthonormal columns) along which
    ``vectors`` ``[N, D]`` spread most about their mean: their first principal
    components (each one's sign is arbitrary)."""
    directions = torch.from_numpy(_pca(vectors, count).components_.T.copy())
    return directions.to(vectors.device, vectors.dtype)


@_one_thread
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
    split = _held_out(before, after, folds)
    map_angle = after.new_empty(after.shape[:-1])
    kept_angle = after.new_empty(after.shape[:-1])
    for fit, test in split:
        x, y = before, after
        if dims is not None:
            basis = principal_directions(before[fit], dims)  # [D, dims]
            x, y = before @ basis, after @ basis
        matrix = fit_linear_map(x[fit], y[..., fit, :])  # [(T,) D, D]
        predicted = x[test] @ matrix  # [(T,) n, D]
        map_angle[..., test] = angle_between(predicted, y[..., test, :])
        kept_angle[..., test] = angle_between(
            x[test].expand_as(predicted), y[..., test, :]
        )
    return map_angle, kept_angle


@_one_thread
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
    if dims is None and not whiten:  # every coordinate kept as it is: centred only
        mean = originals.double().mean(dim=0)
        spread = (originals.double() - mean).square().mean(dim=0).sum()
        return (vectors.double() - mean) / spread.sqrt()
    pca = _pca(originals, dims or originals.shape[1], whiten)
    projected = pca.transform(_numpy(vectors.reshape(-1, vectors.shape[-1])))
    projected = torch.from_numpy(projected).reshape(*vectors.shape[:-1], -1)
    # the spread is a mean square over the N originals; PCA's variances divide by N − 1
    count = len(originals)
    if whiten:  # PCA's unit variance in every direction, to 1 / dims of the spread
        scale = math.sqrt(count / ((count - 1) * pca.n_components_))
    else:
        scale = 1 / math.sqrt(pca.explained_variance_.sum() * (count - 1) / count)
    return (projected * scale).to(vectors.device)


#: The predictions of a moved vector that :func:`held_out_misses` compares, from the
#: simplest: the name of each.
PREDICTORS: dict[str, str] = {
    "none": "no movement",
    "offset": "shared offset",
    "map": "linear map",
}


@_one_thread
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
    split = _held_out(before, after, folds)
    misses = {
        name: torch.empty(after.shape[:-1], dtype=torch.float64, device=after.device)
        for name in PREDICTORS
    }
    for fit, test in split:
        x = standardize(before, before[fit], dims, whiten)  # [N, d]
        y = standardize(after, before[fit], dims, whiten)  # [(T,) N, d]
        offset = (y[..., fit, :] - x[fit]).mean(dim=-2, keepdim=True)
        moved = y[..., test, :]
        predictions = {
            "none": x[test].expand_as(moved),
            "offset": x[test] + offset,
            "map": _predict(LinearRegression(), x[fit], y[..., fit, :], x[test]),
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


@_one_thread
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
    split = _held_out(before, after, folds, stacked=True)
    if len(steps) != len(after):
        raise ValueError(
            f"steps must be one per row of after: {len(after)}, got {len(steps)}"
        )
    if isinstance(ridge, bool) or not isinstance(ridge, (int, float)) or ridge < 0:
        raise ValueError(f"ridge must be a number >= 0, got {ridge!r}")
    # an SVD solves the penalized least squares as exactly as the plain one
    linear = Ridge(alpha=ridge, solver="svd") if ridge else LinearRegression()
    truth = amounts(steps).to(before.device)[:, None].expand(-1, len(before), -1)
    predicted = torch.empty_like(truth)  # [T, N, 3]
    for fit, test in split:
        change = standardize(after, before[fit], dims) - standardize(
            before, before[fit], dims
        )  # [T, N, d]
        x, y = change[:, fit].flatten(0, 1), truth[:, fit].flatten(0, 1)
        guess = _predict(linear, x, y, change[:, test].flatten(0, 1))  # [T·n, 3]
        predicted[:, test] = guess.unflatten(0, (len(after), len(test)))
    error = (predicted - truth).flatten(0, 1)
    deviation = truth.flatten(0, 1) - truth.mean(dim=(0, 1))
    r2 = 1 - error.square().sum(dim=0) / deviation.square().sum(dim=0)
    return ReadOut(predicted, r2.cpu(), error.square().mean(dim=0).sqrt().cpu())


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
