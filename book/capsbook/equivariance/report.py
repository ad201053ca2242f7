"""What chapter 9 shows of the measurements: medians, intervals, tables and figures.

:func:`summarize` turns a measurement into medians per transformation;
:func:`summary_table` and :func:`miss_table` print them and :func:`equivariance_figure`
draws them for one model or several. :func:`read_out_table` prints read-outs;
:func:`bootstrap_interval` gives a mean over the digits an interval and
:func:`compare_images` states two read-outs' difference as the book states every
difference (:mod:`capsbook.stats`); :func:`read_out_figure` draws the R² with their
intervals.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from torch import Tensor

from capsbook import stats
from capsbook.equivariance.fit import (
    AMOUNTS,
    PREDICTORS,
    ReadOut,
    held_out_angles,
    held_out_misses,
    image_r2,
)
from capsbook.equivariance.measure import Reading, Transformation, angle_between
from capsbook.plots import COLORS, STYLE, new_figure
from capsnotes.data import checks


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
    summary |= {f"miss_{name}": median(miss) for name, miss in misses.items()}
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
    return torch.quantile(means, tails, dim=0).unbind()


@dataclass(frozen=True)
class ImageDifference(stats.Difference):
    """``b − a`` of a mean over the same ``n`` images, stated as the book states every
    difference (:class:`capsbook.stats.Difference`: the effect, the images' spread,
    Student's paired t-test's two-sided p, the difference the design detects), with a
    bootstrap interval of the effect (:func:`bootstrap_interval`) at ``level``."""

    low: float
    high: float
    level: float


def compare_images(
    a: Tensor, b: Tensor, draws: int = 4000, level: float = 0.95, seed: int = 0
) -> ImageDifference:
    """``b − a`` for two measurements ``[N]`` of the same ``N`` images (two models'
    :func:`image_r2` for one amount, say), paired image by image
    (:func:`capsbook.stats.paired`: Student's t on the ``N`` differences), with their
    bootstrap interval. Each image is one unit: the interval and the test say how far
    the comparison could move with other digits, not with other training runs."""
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
        **vars(tested), low=low.item(), high=high.item(), level=level
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
