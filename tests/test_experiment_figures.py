"""The experiment chapters' figures (book/capsbook/training_plots.py): chapter 10's variants by
seed beside the paper, chapter 11's curves split by model. Each draws what it is given
where it belongs: every seed's marker at its own value in its own variant's row, every
curve in its model's panel and colour, on limits that follow from the data's rounded
range; and refuses input it cannot draw."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.colors import to_hex

from capsbook.plots import COLORS
from capsbook.training_plots import (
    RUN_MARKERS,
    SEED_STYLES,
    accuracy_by_epoch,
    curves_by_model,
    variants_by_seed,
)

ERRORS = {
    "r=1, none": [0.69, 0.61, 0.61],
    "r=3, none": [0.63, 0.56, 0.50],
    "CNN": [0.50, 0.44, 0.43],
}
PAPER = {"r=1, none": (0.34, 0.032), "r=3, none": (0.35, 0.036), "CNN": (0.39, 0.0)}
PAIRS = {"without": (ERRORS["r=1, none"], ERRORS["r=3, none"])}


def _markers(ax):
    """(marker, colour, x, y) of every single-point marker line of ``ax``."""
    found = []
    for line in ax.get_lines():
        x, y = line.get_xdata(), line.get_ydata()
        if line.get_marker() not in ("None", None, "") and len(np.atleast_1d(x)) == 1:
            found.append(
                (
                    line.get_marker(),
                    to_hex(line.get_color()),
                    float(np.atleast_1d(x)[0]),
                    float(np.atleast_1d(y)[0]),
                )
            )
    return found


def test_each_seed_is_drawn_at_its_error_in_its_variant_s_row():
    fig = variants_by_seed(ERRORS, PAPER, PAIRS)
    left, right = fig.axes[:2]
    assert [t.get_text() for t in left.get_yticklabels()] == list(ERRORS)
    markers = _markers(left)
    for row, (name, values) in enumerate(ERRORS.items()):
        for seed, value in enumerate(values):
            marker, colour = SEED_STYLES[seed]
            at = [m for m in markers if m[:2] == (marker, colour.lower()) and abs(m[3] - row) < 0.3]
            assert [m[2] for m in at] == pytest.approx([value]), (name, seed)
        # the mean bar spans the row at the seeds' mean
        bars = [
            line
            for line in left.get_lines()
            if line.get_marker() in ("None", "")
            and len(line.get_xdata()) == 2
            and abs(np.mean(line.get_ydata()) - row) < 0.3
        ]
        assert [b.get_xdata()[0] for b in bars] == pytest.approx([np.mean(values)])
    # the paper's means, hollow vermillion squares below each row
    squares = [m for m in _markers(left) if m[0] == "s"]
    assert sorted(m[2] for m in squares) == sorted(mean for mean, _ in PAPER.values())
    assert {m[1] for m in squares} == {COLORS[1].lower()}
    # right: each seed's r = 1 joined to its r = 3
    joined = [line for line in right.get_lines() if len(line.get_xdata()) == 2]
    got = sorted((float(a), float(b)) for a, b in (line.get_ydata() for line in joined))
    assert got == sorted(zip(*PAIRS["without"]))


def test_the_variants_figure_refuses_a_paper_of_other_variants_and_a_fourth_seed():
    with pytest.raises(ValueError, match="paper must name"):
        variants_by_seed(ERRORS, {"CNN": (0.39, 0.0)}, PAIRS)
    with pytest.raises(ValueError, match="seeds 0 to 2"):
        variants_by_seed({k: [*v, 0.5] for k, v in ERRORS.items()}, PAPER, PAIRS)


CURVES = {
    "CNN": [[73.5, 53.6, 39.6, 24.5], [74.4, 52.8, 39.5, 25.4]],
    "r = 1": [[57.0, 43.3, 37.8, 27.8], [55.1, 45.0, 36.9, 28.5]],
    "r = 3": [[56.5, 42.6, 37.6, 28.2], [55.5, 44.7, 36.7, 28.6]],
}
COLOURS = {"CNN": COLORS[2], "r = 1": COLORS[4], "r = 3": COLORS[0]}


def test_each_model_has_its_panel_its_colour_and_one_shared_axis():
    fig = curves_by_model(CURVES, COLOURS)
    panels, last = fig.axes[: len(CURVES)], fig.axes[len(CURVES)]
    for ax, (name, runs) in zip(panels, CURVES.items()):
        assert ax.get_title() == name
        own = [line for line in ax.get_lines() if to_hex(line.get_color()) == COLOURS[name].lower()]
        assert [list(line.get_ydata()) for line in own] == runs
        assert [line.get_marker() for line in own] == [m for m, _ in SEED_STYLES[:2]]
        # the other models' means in grey behind
        grey = [line for line in ax.get_lines() if line not in own]
        means = sorted(tuple(np.mean(r, axis=0)) for n, r in CURVES.items() if n != name)
        drawn = sorted(tuple(line.get_ydata()) for line in grey)
        assert np.allclose(drawn, means)
        assert ax.get_ylim() == (0, 80)  # 74.4 rounded up to the next ten
    # the last panel: each seed's final values, the models side by side
    finals = [m for m in _markers(last)]
    for x, (name, runs) in enumerate(CURVES.items()):
        at = sorted(m[3] for m in finals if m[2] == x)
        assert at == sorted(run[-1] for run in runs)
        assert {m[1] for m in finals if m[2] == x} == {COLOURS[name].lower()}


def test_the_curves_figure_refuses_colours_of_other_models():
    with pytest.raises(ValueError, match="colours must name"):
        curves_by_model(CURVES, {"CNN": COLORS[2]})


def test_the_last_panel_joins_only_the_paired_models_by_seed():
    """The CNN shares only the data, not the CapsNets' initial weights: with ``joined``
    naming the two CapsNets, each seed's line runs from its r = 1 final to its r = 3
    final, and no line reaches the CNN's column; by default every model is joined."""
    last = curves_by_model(CURVES, COLOURS, joined=["r = 1", "r = 3"]).axes[len(CURVES)]
    lines = [line for line in last.get_lines() if len(line.get_xdata()) > 1]
    assert sorted(tuple(line.get_xdata()) for line in lines) == [(1, 2), (1, 2)]
    got = sorted(tuple(line.get_ydata()) for line in lines)
    assert got == sorted((a[-1], b[-1]) for a, b in zip(CURVES["r = 1"], CURVES["r = 3"]))
    every = curves_by_model(CURVES, COLOURS).axes[len(CURVES)]
    spans = [line.get_xdata() for line in every.get_lines() if len(line.get_xdata()) > 1]
    assert sorted(tuple(x) for x in spans) == [(0, 1, 2), (0, 1, 2)]
    with pytest.raises(ValueError, match="joined must name"):
        curves_by_model(CURVES, COLOURS, joined=["r = 2"])


def test_each_run_s_accuracy_is_drawn_epoch_by_epoch_beside_the_target():
    runs = {"short": [0.9897, 0.9912, 0.9952], "long": [0.9894, 0.9911, 0.9923, 0.9964]}
    fig = accuracy_by_epoch(runs, 0.9975, "the paper")
    (ax,) = fig.axes
    lines = [line for line in ax.get_lines() if line.get_label() in runs]
    for index, (line, (label, curve)) in enumerate(zip(lines, runs.items(), strict=True)):
        assert line.get_label() == label
        assert list(line.get_xdata()) == list(range(1, len(curve) + 1))
        assert line.get_ydata() == pytest.approx([100 * a for a in curve])
        assert to_hex(line.get_color()) == COLORS[index].lower()
        assert line.get_marker() == RUN_MARKERS[index]
    (target,) = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert target.get_ydata() == pytest.approx([99.75, 99.75])
    assert [t.get_text() for t in ax.texts] == [" the paper"]
    # the values (98.94 to 99.75, rounded out to 98.9 and 99.8) and a tenth on each side
    assert ax.get_ylim() == pytest.approx((98.8, 99.9))


def test_the_accuracy_figure_refuses_no_runs_an_empty_run_and_percentages():
    with pytest.raises(ValueError, match="at least one run"):
        accuracy_by_epoch({}, 0.9975, "the paper")
    with pytest.raises(ValueError, match="one accuracy per epoch"):
        accuracy_by_epoch({"a": []}, 0.9975, "the paper")
    with pytest.raises(ValueError, match=r"fractions in \[0, 1\]"):
        accuracy_by_epoch({"a": [99.1, 99.5]}, 0.9975, "the paper")
