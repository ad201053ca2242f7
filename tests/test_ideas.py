"""The idea figures draw what they are handed, computed by the package's own functions:
the bars of squash_idea are the lengths of s and of squash(s); primary_capsule_idea's
strips are the model's primary capsules and its outline the pixels that move them;
margin_idea's curves are the margin loss and its dots the lengths it was given. Their
limits do not move with the data, and bad input is refused."""

from __future__ import annotations

import matplotlib.colors as mcolors
import numpy as np
import pytest
import torch
from matplotlib.patches import Rectangle

from capsbook.ideas import (
    BLUE,
    VERMILLION,
    margin_idea,
    primary_capsule_idea,
    receptive_field,
    squash_idea,
)
from capsnotes import CapsNet, squash
from tests.conftest import TINY


def bars(ax) -> list[Rectangle]:
    return [p for p in ax.patches if isinstance(p, Rectangle)]


def limits(fig) -> list:
    return [(ax.get_xlim(), ax.get_ylim(), tuple(ax.get_xticks())) for ax in fig.axes]


@pytest.fixture
def inputs():
    torch.manual_seed(0)
    s = torch.randn(10, 16) * torch.linspace(0.02, 0.45, 10)[:, None]
    s[3] = 4 * s[3] / s[3].norm()  # one long input, as a present class's
    return torch.rand(28, 28), s


def test_squash_idea_draws_the_lengths_of_s_and_of_squash_s(inputs):
    image, s = inputs
    fig = squash_idea(image, s, label=3)
    _, before, after = fig.axes
    for ax, expected in ((before, s.norm(dim=1)), (after, squash(s).norm(dim=1))):
        widths = torch.tensor([bar.get_width() for bar in bars(ax)], dtype=torch.float32)
        torch.testing.assert_close(widths, expected)
        colours = [mcolors.to_hex(bar.get_facecolor()) for bar in bars(ax)]
        assert colours == [VERMILLION.lower() if k == 3 else BLUE.lower() for k in range(10)]
    assert max(bar.get_width() for bar in bars(after)) < 1
    assert np.array_equal(fig.axes[0].images[0].get_array(), image.numpy())


def test_squash_idea_keeps_its_axes_whatever_the_data(inputs):
    image, s = inputs
    first = limits(squash_idea(image, s, 3))
    assert limits(squash_idea(image, s * (1 + 1e-6), 3)) == first
    assert limits(squash_idea(image, s / 4, 3)) == first


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"label": 10}, ValueError),
        ({"label": True}, ValueError),
        ({"s": torch.ones(10, 16, dtype=torch.long)}, TypeError),
        ({"s": torch.ones(10)}, ValueError),
        ({"s": torch.full((10, 16), 2.0)}, ValueError),  # 8 long: beyond the limit
        ({"limit": 0}, ValueError),
        ({"image": torch.full((28, 28), 2.0)}, ValueError),
        ({"image": torch.rand(2, 28, 28)}, ValueError),
    ],
)
def test_squash_idea_refuses_bad_input(inputs, change, error):
    image, s = inputs
    arguments = {"image": image, "s": s, "label": 3} | change
    with pytest.raises(error):
        squash_idea(**arguments)


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    return CapsNet(TINY).eval()


def test_the_receptive_field_is_the_pixels_that_move_the_capsule(tiny):
    grid = tiny.config.primary_grid
    for row, column in ((0, 0), (1, grid - 1), (grid - 1, 2)):
        top, left, side = receptive_field(tiny, row, column)
        image = torch.rand(1, 1, 28, 28, requires_grad=True)
        capsules = tiny.primary_capsules(image).view(1, TINY.primary_channels, grid, grid, -1)
        capsules[0, :, row, column].sum().backward()
        moved = image.grad[0, 0] != 0
        rows, columns = moved.any(1).nonzero().flatten(), moved.any(0).nonzero().flatten()
        assert (rows.min().item(), rows.max().item()) == (top, top + side - 1)
        assert (columns.min().item(), columns.max().item()) == (left, left + side - 1)


def test_primary_capsule_idea_shows_the_models_capsule_and_its_field(tiny):
    torch.manual_seed(1)
    images = torch.rand(3, 1, 28, 28)
    fig = primary_capsule_idea(tiny, images, (1, 2), capsule_type=1)
    grid = tiny.config.primary_grid
    with torch.no_grad():
        u = tiny.primary_capsules(images).view(3, TINY.primary_channels, grid, grid, -1)
    image_axes, strip_axes = fig.axes[:3], fig.axes[3:6]
    top, left, side = receptive_field(tiny, 1, 2)
    for n in range(3):
        drawn = strip_axes[n].images[0].get_array()
        np.testing.assert_allclose(drawn[0], u[n, 1, 1, 2].numpy(), rtol=1e-6)
        assert strip_axes[n].images[0].get_clim() == (-1, 1)
        np.testing.assert_array_equal(image_axes[n].images[0].get_array(), images[n, 0])
        (outline,) = bars(image_axes[n])
        assert outline.get_xy() == (left - 0.5, top - 0.5)
        assert (outline.get_width(), outline.get_height()) == (side, side)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"model": "CapsNet"}, TypeError),
        ({"images": torch.rand(3, 1, 20, 20)}, ValueError),
        ({"images": torch.rand(9, 1, 28, 28)}, ValueError),
        ({"images": torch.ones(3, 1, 28, 28, dtype=torch.uint8)}, TypeError),
        ({"position": (6, 0)}, ValueError),
        ({"position": 3}, ValueError),
        ({"capsule_type": 2}, ValueError),  # TINY has 2 types
    ],
)
def test_primary_capsule_idea_refuses_bad_input(tiny, change, error):
    arguments = {
        "model": tiny,
        "images": torch.rand(3, 1, 28, 28),
        "position": (0, 0),
        "capsule_type": 0,
    } | change
    with pytest.raises(error):
        primary_capsule_idea(**arguments)


@pytest.fixture
def lengths():
    torch.manual_seed(0)
    return torch.rand(20, 10) * 0.99, torch.randint(0, 10, (20,))


def test_margin_idea_draws_the_loss_and_the_lengths_on_it(lengths):
    values, labels = lengths
    fig = margin_idea(values, labels)
    ax = fig.axes[0]
    present_curve, present_dots, absent_curve, absent_dots = ax.lines[:4]
    x = torch.as_tensor(present_curve.get_xdata())
    np.testing.assert_allclose(present_curve.get_ydata(), (0.9 - x).clamp(min=0) ** 2)
    np.testing.assert_allclose(absent_curve.get_ydata(), 0.5 * (x - 0.1).clamp(min=0) ** 2)
    on_label = values[torch.arange(20), labels]
    np.testing.assert_allclose(present_dots.get_xdata(), on_label.numpy())
    np.testing.assert_allclose(
        present_dots.get_ydata(), (0.9 - on_label.double()).clamp(min=0) ** 2, rtol=1e-6
    )
    assert len(absent_dots.get_xdata()) == 20 * 9
    assert mcolors.to_hex(present_curve.get_color()) == BLUE.lower()
    assert mcolors.to_hex(absent_curve.get_color()) == VERMILLION.lower()


def test_margin_idea_keeps_its_axes_whatever_the_data(lengths):
    values, labels = lengths
    first = limits(margin_idea(values, labels))
    assert limits(margin_idea(values * (1 - 1e-6), labels)) == first
    assert limits(margin_idea(values / 3, labels.flip(0))) == first


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"lengths": torch.full((20, 10), 1.0)}, ValueError),
        ({"lengths": torch.rand(20)}, ValueError),
        ({"labels": torch.zeros(20)}, TypeError),
        ({"labels": torch.full((20,), 10)}, ValueError),
        ({"labels": torch.zeros(19, dtype=torch.long)}, ValueError),
    ],
)
def test_margin_idea_refuses_bad_input(lengths, change, error):
    values, labels = lengths
    arguments = {"lengths": values, "labels": labels} | change
    with pytest.raises(error):
        margin_idea(**arguments)
