"""The book's style, and its figures of images and capsules. Every function draws on a
white figure (readable on the book's light and dark themes alike) and returns the
``matplotlib`` Figure. The figures of training runs and of experiments over seeds are in
:mod:`capsbook.training_plots`.

The figures are plain ``Figure`` objects, not pyplot's: nothing is shown or kept behind
the caller's back, and a notebook shows a figure where a cell returns it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Circle
from torch import Tensor

#: Okabe–Ito colours: distinguishable with the common forms of colour blindness.
COLORS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"]

STYLE: dict[str, Any] = {
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
    "axes.edgecolor": "#333333",
    "axes.labelcolor": "#222222",
    "text.color": "#222222",
    "xtick.color": "#333333",
    "ytick.color": "#333333",
    "axes.grid": True,
    "grid.color": "#dddddd",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": plt.cycler(color=COLORS),
    "font.size": 10,
    "figure.dpi": 110,
}


def new_figure(
    ncols: int = 1,
    nrows: int = 1,
    width: float = 6.4,
    height: float = 3.6,
    style: dict[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[Figure, Any]:
    """A white figure with the book's style, and its axes (``fig.subplots(...)``)."""
    with plt.rc_context({**STYLE, **(style or {})}):
        fig = Figure(figsize=(width, height), layout="constrained")
        axes = fig.subplots(nrows, ncols, **kwargs)
    return fig, axes


def _as_images(images: Tensor) -> np.ndarray:
    """``[N, C, H, W]`` or ``[N, H, W]`` in [0, 1] → ``[N, H, W]`` (first channel)
    numpy."""
    array = images.detach().float().cpu()
    if array.dim() == 4:
        array = array[:, 0] if array.shape[1] == 1 else array.permute(0, 2, 3, 1)
    return array.numpy()


def _tiles(count: int, ncols: int, size: float, aspect: float) -> tuple[Figure, Any]:
    """A figure of ``count`` tiles, ``ncols`` a row, each ``size`` inches wide and
    ``size * aspect`` high, and its axes ``[rows, ncols]``: without ticks, each tile
    framed in grey. The axes past the last tile, unframed, are left to the caller."""
    nrows = -(-count // ncols)
    fig, axes = new_figure(
        ncols,
        nrows,
        ncols * size,
        nrows * size * aspect,
        {"axes.grid": False},
        squeeze=False,
    )
    with plt.rc_context(STYLE):
        for index, ax in enumerate(axes.flat):
            ax.set_xticks([])
            ax.set_yticks([])
            for spine in ax.spines.values():
                spine.set_visible(index < count)
                spine.set_color("#999999")
    return fig, axes


def image_grid(
    images: Tensor,
    titles: Sequence[str] | None = None,
    ncols: int = 8,
    size: float = 1.1,
    cmap: str = "gray_r",
    title_color: Sequence[str] | None = None,
    row_labels: Sequence[str] | None = None,
    vmin: float = 0.0,
    vmax: float = 1.0,
) -> Figure:
    """Images ``[N, C, H, W]`` (or ``[N, H, W]``), shown on the scale ``[vmin, vmax]``
    (pixels in [0, 1] by default), ``ncols`` per row."""
    pictures = _as_images(images)
    count = len(pictures)
    fig, axes = _tiles(count, ncols, size, 1.15 if titles is not None else 1.0)
    with plt.rc_context(STYLE):
        for index, ax in enumerate(axes.flat):
            if index >= count:
                ax.axis("off")
                continue
            ax.imshow(pictures[index], cmap=cmap, vmin=vmin, vmax=vmax)
            if titles is not None:
                color = title_color[index] if title_color is not None else "#222222"
                ax.set_title(titles[index], fontsize=8, color=color, pad=2)
        if row_labels is not None:
            for row, label in enumerate(row_labels):
                axes[row, 0].set_ylabel(
                    label, fontsize=8, rotation=0, ha="right", va="center"
                )
    return fig


def capsule_arrows(vectors: Tensor, labels: Sequence[str]) -> Figure:
    """2-D capsule vectors drawn as arrows inside the unit circle (labelled "length 1"),
    each labelled with its name and length; a short arrow gets a dot at its tip and its
    label farther out, so that it stays visible."""
    fig, ax = new_figure(width=4.4, height=4.2)
    circle = Circle((0, 0), 1.0, fill=False, linestyle="--", color="#888888")
    ax.add_patch(circle)
    ax.text(0.72, -0.78, "length 1", color="#666666", fontsize=8, rotation=45)
    for index, (vector, label) in enumerate(zip(vectors.tolist(), labels, strict=True)):
        color = COLORS[index % len(COLORS)]
        length = float(np.hypot(*vector))
        # The head is scaled down with the arrow (and nothing is trimmed off either
        # end), so that a short arrow still points from the origin to its tip.
        arrow = {
            "arrowstyle": "-|>",
            "color": color,
            "lw": 2,
            "shrinkA": 0,
            "shrinkB": 0,
        }
        arrow["mutation_scale"] = 12 * min(1.0, length / 0.3)
        ax.annotate("", xy=vector, xytext=(0, 0), arrowprops=arrow)
        ax.plot(*vector, "o", color=color, markersize=4)
        reach = 1.08 if length >= 0.3 else 0.3 / max(length, 1e-6)
        ax.text(
            vector[0] * reach,
            vector[1] * reach + 0.04,
            f"{label}\n(length {length:.2f})",
            color=color,
            fontsize=8,
            ha="center",
        )
    ax.set_xlim(-1.15, 1.15)
    ax.set_ylim(-1.15, 1.15)
    ax.set_aspect("equal")
    ax.set_xlabel("capsule component 1")
    ax.set_ylabel("capsule component 2")
    return fig


def length_bars(
    images: Tensor, lengths: Tensor, labels: Sequence[int], per_row: int = 4
) -> Figure:
    """Each image above a bar chart of its capsule lengths ``[N, classes]``, ``per_row``
    images to a row; the bar of the true class is coloured, and the dotted lines mark
    the margins 0.9 and 0.1."""
    count, classes = lengths.shape
    pictures = _as_images(images)
    ncols = min(count, per_row)
    rows = -(-count // ncols)
    fig, axes = new_figure(
        ncols,
        2 * rows,
        1.6 * ncols,
        2.8 * rows,
        {"axes.grid": False},
        squeeze=False,
        gridspec_kw={"height_ratios": [1, 1.1] * rows},
    )
    with plt.rc_context(STYLE):
        for k in range(rows * ncols):
            top, bottom = (
                axes[2 * (k // ncols), k % ncols],
                axes[2 * (k // ncols) + 1, k % ncols],
            )
            if k >= count:
                top.set_axis_off()
                bottom.set_axis_off()
                continue
            top.imshow(pictures[k], cmap="gray_r", vmin=0, vmax=1)
            top.set_axis_off()
            top.set_title(f"label {labels[k]}", fontsize=9)
            colors = [
                COLORS[1] if j == labels[k] else "#9a9a9a" for j in range(classes)
            ]
            bottom.bar(range(classes), lengths[k].numpy(), color=colors, width=0.8)
            for margin in (0.9, 0.1):
                bottom.axhline(margin, color="#555555", linestyle=":", linewidth=0.8)
            bottom.set_ylim(0, 1)
            bottom.set_xticks(range(classes))
            bottom.set_xticklabels([str(j) for j in range(classes)], fontsize=8)
            bottom.tick_params(axis="y", labelsize=8)
            bottom.set_xlabel("digit capsule", fontsize=8)
            if k % ncols:
                bottom.set_yticklabels([])
            else:
                bottom.set_ylabel("capsule length", fontsize=9)
    return fig


def perturbation_grid(
    reconstructions: Tensor, offsets: Sequence[float], width: float = 6.5
) -> Figure:
    """``[dims, steps, C, H, W]`` reconstructions: one row per capsule dimension, one
    column per offset added to it (the paper's Figure 4), ``width`` inches wide with
    8-point text, so that it reads at the book's column width."""
    dims, steps = reconstructions.shape[:2]
    pictures = _as_images(
        reconstructions.reshape(dims * steps, *reconstructions.shape[2:])
    )
    tile = (width - 0.5) / steps  # room on the left for the row labels
    fig, axes = new_figure(
        steps, dims, width, dims * tile + 0.4, {"axes.grid": False}, squeeze=False
    )
    with plt.rc_context(STYLE):
        for index, ax in enumerate(axes.flat):
            ax.imshow(pictures[index], cmap="gray_r", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            for spine in ax.spines.values():
                spine.set_visible(False)
        for col, offset in enumerate(offsets):
            axes[0, col].set_title(f"{offset:+.2f}", fontsize=8)
        for row in range(dims):
            axes[row, 0].set_ylabel(
                f"{row}", fontsize=8, rotation=0, ha="right", va="center"
            )
        fig.supxlabel("offset added to the dimension", y=1.0, va="bottom", fontsize=9)
        fig.supylabel("capsule dimension", fontsize=9)
    return fig


def routing_summary(stats: Any) -> Figure:
    """Two panels from a :class:`capsnotes.training.evaluation.RoutingStatistics`: the
    test errors with ``r`` routing iterations at inference, and how far the mean entropy
    of the coupling coefficients of each iteration lies below a uniform split's."""
    fig, (left, right) = new_figure(ncols=2, width=6.5, height=2.8)
    iterations = list(stats.accuracy)
    errors = [round((1 - stats.accuracy[r]) * stats.count) for r in iterations]
    left.bar([str(r) for r in iterations], errors, color=COLORS[0], width=0.6)
    for x, value in enumerate(errors):
        left.text(x, value, str(value), ha="center", va="bottom", fontsize=8)
    left.set(
        xlabel="routing iterations r at inference", ylabel=f"errors of {stats.count:,}"
    )
    steps = np.arange(1, len(stats.entropy) + 1)
    uniform = stats.uniform_entropy
    drop = [uniform - h for h in stats.entropy]
    right.plot(steps, drop, "o-", color=COLORS[0])
    for t, value in zip(steps, drop, strict=True):
        shown = 0.0 if abs(value) < 5e-5 else value  # no "-0.0000" for an even split
        right.text(t, value, f" {shown:.4f}", va="bottom", fontsize=8)
    right.set(
        xlabel="iteration t",
        ylabel=f"log {stats.classes} − mean entropy of $c_i$ (nats)",
        xticks=steps,
    )
    return fig


def two_colour_overlays(
    images: Tensor,
    reconstructions: Tensor,
    labels: Tensor,
    predictions: Tensor,
    ncols: int = 6,
    size: float = 1.05,
    threshold: float = 0.35,
) -> Figure:
    """The paper's Figure 5: each input ``[N, 1, H, W]`` in grey, and over it where its
    two reconstructions ``[N, 2, 1, H, W]`` draw (above ``threshold``), the first in
    translucent orange and the second in translucent blue (Okabe–Ito's pair, told apart
    with the common forms of colour blindness; where both draw, the two overlap into a
    darker tone; strokes neither draws stay grey); titled with the labels ``[N, 2]``
    (L) and the classes read ``[N, 2]`` (R), a wrong reading in vermillion."""
    count = len(images)
    fig, axes = _tiles(count, ncols, size, 1.4)
    with plt.rc_context(STYLE):
        for index, ax in enumerate(axes.flat):
            if index >= count:
                ax.set_visible(False)
                continue
            ax.imshow(
                1 - 0.5 * images[index, 0].clamp(0, 1).numpy(),
                cmap="gray",
                vmin=0,
                vmax=1,
            )
            for k, colour in ((0, COLORS[4]), (1, COLORS[0])):
                drawn = reconstructions[index, k, 0].clamp(0, 1).numpy()
                ax.contourf(
                    drawn, levels=[threshold, 1.01], colors=[colour], alpha=0.55
                )
            wanted = sorted(labels[index].tolist())
            read = predictions[index].tolist()
            colour = "#222222" if sorted(read) == wanted else COLORS[1]
            ax.set_title(
                f"L {wanted[0]},{wanted[1]}\nR {read[0]},{read[1]}",
                fontsize=8,
                color=colour,
                pad=2,
            )
    return fig
