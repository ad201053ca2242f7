"""The figures of training runs and of the experiments that repeat them over seeds: a
run's losses step by step and runs' test accuracy epoch by epoch (chapter 8), a
designed experiment's errors seed by seed beside the paper's (chapter 10), and several
models' curves over seeds (chapter 11).

They draw with :mod:`capsbook.plots`' style and colours, on a white figure, and return
the ``matplotlib`` Figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, MultipleLocator, NullFormatter

from capsbook.plots import COLORS, new_figure


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
            mean = moving_mean(values, max(1, steps_per_epoch // 4))
            ax.plot(
                x, values, color=color, alpha=0.18, linewidth=0.6, label="each step"
            )
            ax.plot(
                x,
                mean,
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
            steady = [*mean, *(e[test_key] for e in epochs)]
            ax.set_ylim(_grid_below(min(steady) / 1.5), _grid_above(max(steady) * 1.5))
            ax.set_xlabel(f"epoch ({steps_per_epoch} steps each)", fontsize=9)
            ax.set_ylabel(name, fontsize=9)
            ax.tick_params(labelsize=9)
            ax.set_title(label, fontsize=9)
            ax.legend(frameon=False, fontsize=8, loc="upper right")
    return fig


#: Each run's marker in :func:`accuracy_by_epoch`, so that runs that cross stay apart.
RUN_MARKERS = ("o", "s", "^", "D")


def accuracy_by_epoch(
    runs: Mapping[str, Sequence[float]], target: float, target_label: str
) -> Figure:
    """Test accuracy after each epoch of each run in ``runs`` (label -> one fraction per
    epoch, from epoch 1), a line with a marker per epoch in the run's colour of
    :data:`~capsbook.plots.COLORS` and its marker of :data:`RUN_MARKERS`, and ``target``
    (a fraction) as a dashed grey line named ``target_label``; in percent, the y-axis a
    tenth of a point wider on each side than the values and ``target``, rounded out to
    tenths."""
    if not runs:
        raise ValueError("runs must name at least one run")
    values = [float(a) for curve in runs.values() for a in curve]
    if any(len(curve) == 0 for curve in runs.values()) or not all(
        0 <= a <= 1 for a in [*values, target]
    ):
        raise ValueError(
            "each run needs one accuracy per epoch and the target one, fractions in "
            f"[0, 1]; got {[len(c) for c in runs.values()]} epochs and target {target}"
        )
    fig, ax = new_figure(width=6.5, height=3.2)
    for index, (label, curve) in enumerate(runs.items()):
        epochs = np.arange(1, len(curve) + 1)
        ax.plot(
            epochs,
            100 * np.asarray(curve, dtype=float),
            "-",
            marker=RUN_MARKERS[index % len(RUN_MARKERS)],
            color=COLORS[index % len(COLORS)],
            markersize=3,
            linewidth=1.1,
            label=label,
        )
    ax.axhline(100 * target, color="#555555", linestyle="--", linewidth=1.1)
    ax.text(1, 100 * target, f" {target_label}", va="bottom", ha="left", fontsize=8.5)
    low = np.floor(1000 * min(values)) / 10
    high = np.ceil(1000 * max(*values, target)) / 10
    ax.set_ylim(low - 0.1, high + 0.1)
    ax.set_xlim(0, max(len(c) for c in runs.values()) + 1)
    ax.set_xlabel("epoch", fontsize=9)
    ax.set_ylabel("test accuracy (%)", fontsize=9)
    ax.yaxis.set_major_locator(MultipleLocator(0.1 if high - low <= 1.2 else 0.5))
    ax.tick_params(labelsize=9)
    ax.legend(frameon=False, fontsize=8.5, loc="lower right")
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


def _readable_log_ticks(ax: Any) -> None:
    """Label a log axis at 1, 2 and 5 times each power of ten, as plain numbers."""
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


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


def _seed_handles(seeds: int, **style: Any) -> list[Line2D]:
    """The legend's entries of the first ``seeds`` seeds: each seed's marker, in its
    colour unless ``style`` gives one."""
    return [
        Line2D([], [], marker=m, **({"color": c} | style), label=f"seed {s}")
        for s, (m, c) in enumerate(SEED_STYLES[:seeds])
    ]


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
    handles = _seed_handles(seeds, linestyle="", markersize=6)
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
    handles = _seed_handles(seeds, linestyle="-", color="#777777", markersize=5)
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
