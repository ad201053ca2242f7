"""The book's figures. Every function draws on a white figure (readable on the book's
light and dark themes alike) and returns the ``matplotlib`` Figure.

The figures are plain ``Figure`` objects, not pyplot's: nothing is shown or kept behind
the caller's back, and a notebook shows a figure where a cell returns it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Circle
from matplotlib.ticker import FuncFormatter, LogLocator, MultipleLocator, NullFormatter
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


def coupling_by_class(
    couplings: Sequence[Tensor],
    weights: Tensor,
    true_class: int,
    first_iteration: int = 1,
) -> Figure:
    """For each routing iteration from ``first_iteration`` on, how much more (or less)
    than an even share of the children's votes each parent receives, in percentage
    points: the share is ``Σ_i ‖u_i‖ c_ij / Σ_i ‖u_i‖`` and an even share is ``1 /
    classes``.

    ``couplings``: one ``[in_caps, classes]`` tensor per iteration, from iteration 1;
    ``weights`` ``[in_caps]``. (Iteration 1 is an even split by construction: its bars
    are all zero.)
    """
    couplings = list(couplings)[first_iteration - 1 :]
    shares = torch.stack(
        [(c * weights[:, None]).sum(0) / weights.sum() for c in couplings]
    )
    iterations, classes = shares.shape
    excess = 100 * (shares - 1 / classes)
    fig, ax = new_figure(width=6.4, height=3.2)
    width = 0.8 / iterations
    for t in range(iterations):
        offset = (t - (iterations - 1) / 2) * width
        ax.bar(
            np.arange(classes) + offset,
            excess[t].numpy(),
            width=width,
            label=f"iteration {t + first_iteration}",
            color=COLORS[(t + first_iteration - 1) % len(COLORS)],
        )
    ax.axhline(0, color="#555555", linewidth=0.8)
    ax.set_xticks(range(classes))
    ax.set_xticklabels([f"{k}*" if k == true_class else str(k) for k in range(classes)])
    ax.set_xlabel("parent (digit capsule); * = the true class")
    ax.set_ylabel("share of the votes minus an\neven share (percentage points)")
    ax.legend(frameon=False, ncols=min(iterations, 4), fontsize=8)
    return fig


def coupling_maps(
    image: Tensor,
    maps: Sequence[Tensor],
    titles: Sequence[str],
    vmin: float | None = None,
    vmax: float | None = None,
    label: str = "",
) -> Figure:
    """The digit, then one ``[grid, grid]`` heat map per entry of ``maps``, all on one
    colour scale (by default the range of the maps), whose bar is titled ``label``."""
    values = torch.stack(list(maps))
    vmin = float(values.min()) if vmin is None else vmin
    vmax = float(values.max()) if vmax is None else vmax
    count = len(maps) + 1
    fig, axes = new_figure(count, 1, 1.7 * count, 2.0, style={"axes.grid": False})
    with plt.rc_context(STYLE):
        axes[0].imshow(_as_images(image[None])[0], cmap="gray_r", vmin=0, vmax=1)
        axes[0].set_title("input", fontsize=9)
        last = None
        for ax, grid, title in zip(axes[1:], maps, titles, strict=True):
            last = ax.imshow(grid.numpy(), cmap="viridis", vmin=vmin, vmax=vmax)
            ax.set_title(title, fontsize=9)
        for ax in axes:
            ax.set_xticks([])
            ax.set_yticks([])
        for spine in axes[0].spines.values():
            spine.set_visible(False)
        bar = fig.colorbar(last, ax=axes[-1], fraction=0.08, shrink=0.8)
        bar.set_label(label, fontsize=8)
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


def loss_curves(runs: Mapping[str, dict[str, Any]]) -> Figure:
    """Margin and reconstruction loss of each run in ``runs`` (label → history), one row
    of two panels per run, each on its own epoch axis: every training step (faint), a
    centred moving mean over a quarter of an epoch's steps (one unbroken line from the
    first step to the last), and the test losses at the end of each epoch (open
    circles, which leave the line visible under them)."""
    fig, axes = new_figure(
        ncols=2, nrows=len(runs), width=6.5, height=2.8 * len(runs), squeeze=False
    )
    for row, (index, (label, history)) in zip(
        axes, enumerate(runs.items()), strict=True
    ):
        color = COLORS[index % len(COLORS)]
        epochs = history["epochs"]
        for ax, step_key, test_key, name in (
            (
                row[0],
                "step_margin_loss",
                "test_margin_loss",
                "margin loss",
            ),
            (
                row[1],
                "step_reconstruction_loss",
                "test_reconstruction_loss",
                "reconstruction loss\n(0.0005 × squared error)",
            ),
        ):
            values = np.array([x for e in epochs for x in e[step_key]])
            steps_per_epoch = len(epochs[0][step_key])
            x = np.arange(1, len(values) + 1) / steps_per_epoch
            ax.plot(
                x, values, color=color, alpha=0.18, linewidth=0.6, label="each step"
            )
            ax.plot(
                x,
                moving_mean(values, max(1, steps_per_epoch // 4)),
                color=color,
                linewidth=1.4,
                label="moving mean",
            )
            ax.plot(
                [e["epoch"] for e in epochs],
                [e[test_key] for e in epochs],
                "o",
                markersize=5,
                markerfacecolor="none",
                markeredgecolor="#222222",
                markeredgewidth=1.1,
                zorder=3,
                label="test, end of epoch",
            )
            ax.set_yscale("log")
            _readable_log_ticks(ax)
            # limits from what is stable under float noise (the moving mean and the test
            # losses, not a single step's extreme), on the 1-2-5 grid of the ticks, so
            # that another CPU's rounding moves neither the axes nor their labels
            steady = [*moving_mean(values, max(1, steps_per_epoch // 4))]
            steady += [e[test_key] for e in epochs]
            ax.set_ylim(_grid_below(min(steady) / 1.5), _grid_above(max(steady) * 1.5))
            ax.set_xlabel(f"epoch ({steps_per_epoch} steps each)", fontsize=9)
            ax.set_ylabel(name, fontsize=9)
            ax.tick_params(labelsize=9)
            ax.set_title(label, fontsize=9)
            ax.legend(frameon=False, fontsize=8, loc="upper right")
    return fig


#: The values of a 1-2-5 grid in one decade, as the log axes' ticks label them.
ONE_TWO_FIVE = (1.0, 2.0, 5.0)


def _grid_below(value: float) -> float:
    """The largest value of the 1-2-5 grid (..., 0.1, 0.2, 0.5, 1, 2, ...) at most
    ``value``."""
    decade = 10.0 ** np.floor(np.log10(value))
    return max(decade * m for m in ONE_TWO_FIVE if decade * m <= value * (1 + 1e-9))


def _grid_above(value: float) -> float:
    """The smallest value of the 1-2-5 grid at least ``value``."""
    decade = 10.0 ** np.floor(np.log10(value))
    return min(
        decade * m for m in (*ONE_TWO_FIVE, 10.0) if decade * m >= value * (1 - 1e-9)
    )


def accuracy_curves(runs: Mapping[str, dict[str, Any]]) -> Figure:
    """Error rates of each run in ``runs`` (label → history) against the number of
    training images seen (log scales, so that runs of different lengths compare): on the
    training batches of each epoch (dashed) and on the test set after it (solid)."""
    fig, ax = new_figure(width=6.4, height=3.8)
    for index, (label, history) in enumerate(runs.items()):
        color = COLORS[index % len(COLORS)]
        epochs = history["epochs"]
        size = history["train_config"].get("train_size") or 60_000
        seen = [e["epoch"] * size for e in epochs]
        ax.plot(
            seen,
            [100 * (1 - e["train_accuracy"]) for e in epochs],
            "--",
            color=color,
            label=f"{label}: training batches",
        )
        ax.plot(
            seen,
            [100 * (1 - e["test_accuracy"]) for e in epochs],
            "o-",
            color=color,
            markersize=4,
            label=f"{label}: test set",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    _readable_log_ticks(ax)
    # the images seen as 2k, 5k, 10k, ...: readable where powers of ten are not
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value / 1000:g}k"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("training images seen (after each epoch)")
    ax.set_ylabel("error rate (%)")
    ax.legend(frameon=False, fontsize=8.5)
    return fig


def _readable_log_ticks(ax: Any) -> None:
    """Label a log axis at 1, 2 and 5 times each power of ten, as plain numbers."""
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


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


def moving_mean(values: np.ndarray, window: int) -> np.ndarray:
    """The mean of ``values`` over ``window`` neighbours centred on each one; at the two
    ends the window shrinks to the values there are, so the result is as long as
    ``values`` and has no gap."""
    kernel = np.ones(window)
    sums = np.convolve(values, kernel, mode="same")
    counts = np.convolve(np.ones(len(values)), kernel, mode="same")
    return sums / counts


#: Each seed's marker and colour in the experiment figures (chapters 10 and 11): seed 0
#: a blue circle, seed 1 a green triangle, seed 2 a purple diamond.
SEED_STYLES = (("o", COLORS[0]), ("^", COLORS[2]), ("D", COLORS[3]))


def _seed_style(seed: int) -> tuple[str, str]:
    if not 0 <= seed < len(SEED_STYLES):
        raise ValueError(f"seeds 0 to {len(SEED_STYLES) - 1} have a style, got {seed}")
    return SEED_STYLES[seed]


def variants_by_seed(
    errors: Mapping[str, Sequence[float]],
    paper: Mapping[str, tuple[float, float]],
    pairs: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    pair_labels: tuple[str, str] = ("r=1", "r=3"),
    pair_axis: str = "reconstruction loss",
) -> Figure:
    """A designed experiment's errors (chapter 10's Table 1). Left: each variant of
    ``errors`` (name -> per-seed errors, the names as the axis labels them), a marker
    per seed (:data:`SEED_STYLES`, each seed on its own line so that equal errors stay
    visible) and a black bar at their mean, and below them the paper's mean ± standard
    deviation of ``paper`` (name -> (mean, std); std 0 for none given), a hollow
    vermillion square. Right: ``pairs`` (group -> (first arm's seeds, second arm's)),
    each seed's two errors joined by a line, the arms named by ``pair_labels`` and the
    groups along ``pair_axis``."""
    if set(paper) != set(errors):
        raise ValueError(
            f"paper must name the variants {list(errors)}, got {list(paper)}"
        )
    offsets = (-0.24, -0.1, 0.04)
    fig, (left, right) = new_figure(
        2, 1, width=6.5, height=3.9, gridspec_kw={"width_ratios": [1.35, 1]}
    )
    for y, (name, values) in enumerate(errors.items()):
        left.plot(
            [float(np.mean(values))] * 2,
            [y - 0.32, y + 0.12],
            color="#333333",
            linewidth=2,
            zorder=2,
        )
        for seed, value in enumerate(values):
            marker, colour = _seed_style(seed)
            left.plot(
                value, y + offsets[seed], marker, color=colour, markersize=6, zorder=3
            )
        mean, std = paper[name]
        left.errorbar(
            mean,
            y + 0.3,
            xerr=std,
            fmt="s",
            color=COLORS[1],
            markerfacecolor="white",
            markersize=6,
            capsize=3,
        )
    left.set_yticks(range(len(errors)), list(errors), fontsize=9)
    left.invert_yaxis()
    left.set_xlabel("test error (%)")
    left.xaxis.set_major_locator(MultipleLocator(0.1))
    left.set_title("each variant", fontsize=10)

    ticks = []
    for group, (first, second) in enumerate(pairs.values()):
        x = 2.4 * group
        ticks += [x, x + 1]
        for seed, (a, b) in enumerate(zip(first, second, strict=True)):
            marker, colour = _seed_style(seed)
            shift = 0.15 * (seed - 1)  # side by side, so equal errors stay visible
            right.plot(
                [x + shift, x + 1 + shift],
                [a, b],
                "-",
                marker=marker,
                color=colour,
                markersize=6,
                linewidth=1.5,
            )
        right.text(
            x + 0.5,
            -0.11,
            list(pairs)[group],
            transform=right.get_xaxis_transform(),
            ha="center",
            va="top",
            fontsize=9,
        )
    right.set_xticks(ticks, list(pair_labels) * len(pairs), fontsize=9)
    right.set_xlim(-0.5, ticks[-1] + 0.5)
    right.yaxis.set_major_locator(MultipleLocator(0.05))
    right.set_xlabel(pair_axis, labelpad=20)
    right.set_ylabel("test error (%)")
    right.set_title(f"{pair_labels[0]} against {pair_labels[1]}", fontsize=10)
    seeds = max(len(v) for v in errors.values())
    handles = [
        Line2D([], [], marker=m, linestyle="", color=c, markersize=6, label=f"seed {s}")
        for s, (m, c) in enumerate(SEED_STYLES[:seeds])
    ]
    handles += [
        Line2D([], [], color="#333333", linewidth=2, label="mean of the seeds"),
        Line2D(
            [],
            [],
            marker="s",
            linestyle="",
            color=COLORS[1],
            markerfacecolor="white",
            label="the paper: mean ± std",
        ),
    ]
    fig.legend(
        handles=handles, loc="outside lower center", ncols=3, frameon=False, fontsize=9
    )
    return fig


def curves_by_model(
    curves: Mapping[str, Sequence[Sequence[float]]],
    colours: Mapping[str, str],
    ylabel: str = "test pairs misread (%)",
    final_label: str = "after the last epoch (%)",
    joined: Sequence[str] | None = None,
) -> Figure:
    """Runs of several models over seeds (chapter 11's controls): a panel per model of
    ``curves`` (name -> per seed -> value after each epoch), its seeds in the model's
    colour of ``colours``, each seed with its marker (:data:`SEED_STYLES`), all panels
    on one y-axis from 0 to the next multiple of 10 above the largest value, behind them
    the other models' means over the seeds in light grey; and a last panel with each
    seed's final values, the models side by side (a name's ", " broken into two lines),
    those of ``joined`` (default: every model) joined by seed in grey: models that share
    a seed's initial weights are paired, a model that shares only its data is not."""
    if set(colours) != set(curves):
        raise ValueError(
            f"colours must name the models {list(curves)}, got {list(colours)}"
        )
    joined = list(curves) if joined is None else list(joined)
    if not set(joined) <= set(curves):
        raise ValueError(f"joined must name models of {list(curves)}, got {joined}")
    count = len(curves)
    fig, axes = new_figure(
        count + 1,
        1,
        width=6.5,
        height=3.2,
        gridspec_kw={"width_ratios": [1] * count + [1.25]},
    )
    top = 10 * np.ceil(max(max(max(c) for c in runs) for runs in curves.values()) / 10)
    means = {
        name: np.mean([curve[: min(map(len, runs))] for curve in runs], axis=0)
        for name, runs in curves.items()
    }
    for index, (ax, (name, runs)) in enumerate(zip(axes, curves.items())):
        for other, mean in means.items():
            if other != name:
                ax.plot(
                    range(1, len(mean) + 1),
                    mean,
                    color="#bbbbbb",
                    linewidth=1.2,
                    zorder=1,
                )
        for seed, curve in enumerate(runs):
            marker, _ = _seed_style(seed)
            ax.plot(
                range(1, len(curve) + 1),
                curve,
                "-",
                marker=marker,
                color=colours[name],
                markersize=3.5,
                linewidth=1,
            )
        epochs = max(len(c) for c in runs)
        ax.set_xticks(range(2, epochs + 1, 2))
        ax.set_xlim(0.5, epochs + 0.5)
        ax.set_ylim(0, top)
        ax.set_title(name, fontsize=9, color=colours[name])
        ax.set_xlabel("epoch", fontsize=9)
        ax.tick_params(labelsize=8)
        if index:
            ax.tick_params(labelleft=False)
        else:
            ax.set_ylabel(ylabel, fontsize=9)
    last = axes[-1]
    names = list(curves)
    seeds = max(len(runs) for runs in curves.values())
    for seed in range(seeds):
        marker, _ = _seed_style(seed)
        finals = [curves[name][seed][-1] for name in names]
        paired = [x for x, name in enumerate(names) if name in joined]
        if len(paired) > 1:
            last.plot(
                paired,
                [finals[x] for x in paired],
                "-",
                color="#777777",
                linewidth=1,
                zorder=1,
            )
        for x, name in enumerate(names):
            last.plot(x, finals[x], marker, color=colours[name], markersize=5, zorder=2)
    last.set_xticks(range(count), [n.replace(", ", ",\n") for n in names], fontsize=8)
    last.set_xlim(-0.4, count - 0.6)
    last.set_title(final_label, fontsize=9)
    last.tick_params(labelsize=8)
    handles = [
        Line2D(
            [],
            [],
            marker=m,
            linestyle="-",
            color="#777777",
            markersize=5,
            label=f"seed {s}",
        )
        for s, (m, _) in enumerate(SEED_STYLES[:seeds])
    ]
    handles.append(
        Line2D([], [], color="#bbbbbb", linewidth=1.2, label="the other models' means")
    )
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncols=seeds + 1,
        frameon=False,
        fontsize=9,
    )
    return fig
