"""Where the popular reshape puts the primary convolution's numbers, beside where the
paper's grouping puts them: two panels of the first maps, each number labelled with the
capsule it joins."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from capsbook.diagrams._draw import (
    VERMILLION,
    WIDTH,
    Diagram,
    canvas,
    check_model,
    shape_text,
    square,
)
from capsnotes import CapsNet, PrimaryCapsules
from capsnotes.experiments.mistakes import ReshapedPrimaryCapsules

#: The top of the maps, in inches.
TOP = 1.85


@torch.no_grad()
def reshaped_grouping(model: CapsNet, channels: int = 2) -> Diagram:
    """The popular wrong grouping
    (``capsnotes.experiments.mistakes.ReshapedPrimaryCapsules``): the convolution's
    ``[B, C·D, H, W]`` output reshaped straight to ``[B, C·H·W, D]``. The first
    ``channels`` maps, each number labelled with the capsule it lands in, beside where
    the paper's grouping (``model.primary``) puts the same numbers."""
    model = check_model(model)
    types, dim = model.primary.capsule_channels, model.primary.capsule_dim
    rows = cols = model.config.primary_grid
    if not 1 <= channels <= types * dim:
        raise ValueError(f"channels must be in [1, {types * dim}], got {channels}")
    wrong = _grouping(ReshapedPrimaryCapsules, model, channels)
    right = _grouping(PrimaryCapsules, model, channels)
    shapes = {
        "primary convolution": (1, types * dim, rows, cols),
        "primary capsules": (1, types * rows * cols, dim),
    }
    straddling = [  # reshaped capsules with numbers from two channels
        n
        for n in range(channels * rows * cols // dim)
        if n * dim // (rows * cols) != ((n + 1) * dim - 1) // (rows * cols)
    ]
    # one capsule of each grouping is coloured, the others grey: where its numbers lie
    marked = straddling[0] if straddling else 0
    figure, ax = canvas(WIDTH, 2.45)
    cell = min(0.2, 2.6 / (channels * cols + channels - 1))
    panels = (
        (
            0.15,
            wrong,
            "reshaped straight to " + shape_text(shapes["primary capsules"]),
            marked,
        ),
        (3.35, right, f"capsnotes: {dim} channels at one position", 0),
    )
    for left, place, title, shown in panels:
        _draw_panel(ax, left, place, title, shown, cell)
    two = f", or of two (capsule {marked}, vermillion)" if straddling else ""
    ax.text(
        0.15,
        TOP - rows * cell - 0.2,
        "Each cell is one number of the convolution's output, labelled with the "
        "capsule it joins.\n"
        f"Reshaped, a capsule is {dim} neighbouring positions of one channel{two}.\n"
        f"In capsnotes, it is one position of {dim} channels (capsule 0, vermillion: "
        f"channels 0–{dim - 1}).",
        fontsize=8.5,
        va="top",
    )
    numbers = {"reshaped": wrong, "paper": right, "straddling": straddling}
    return Diagram("reshaped grouping", figure, shapes, numbers)


@torch.no_grad()
def _grouping(
    layer_class: type[PrimaryCapsules], model: CapsNet, channels: int
) -> Tensor:
    """Where ``layer_class`` (``PrimaryCapsules`` or a subclass with another grouping,
    sized like ``model.primary``) puts each number of the first ``channels`` maps of
    the convolution's output: ``[channels, rows, cols, 2]``, (capsule, component). Read
    from the layer's own forward pass: its convolution made the identity, one number
    of the maps set to 1 at a time."""
    types, dim = model.primary.capsule_channels, model.primary.capsule_dim
    rows = cols = model.config.primary_grid
    layer = layer_class(types * dim, types, dim, kernel_size=1, stride=1)
    layer.conv.weight.copy_(torch.eye(types * dim)[..., None, None])
    layer.conv.bias.zero_()
    count = channels * rows * cols
    ones = torch.zeros(count, types * dim * rows * cols)
    ones[torch.arange(count), torch.arange(count)] = 1  # the first `count` numbers
    u = layer(ones.view(count, types * dim, rows, cols))  # [count, capsules, dim]
    where = u.flatten(1).abs().argmax(dim=1)
    place = torch.stack([where // dim, where % dim], dim=1)
    return place.view(channels, rows, cols, 2)


def _draw_panel(
    ax: Any, left: float, place: Tensor, title: str, shown: int, cell: float
) -> None:
    """One grouping from x = ``left``: its maps side by side, one cell of side ``cell``
    a number labelled with the capsule ``place`` (``[channels, rows, cols, 2]``) puts
    it in, the numbers of capsule ``shown`` in vermillion and the others grey."""
    channels, rows, cols = place.shape[:3]
    ax.text(left, TOP + 0.4, title, fontsize=9)
    for channel in range(channels):
        x0 = left + channel * (cols + 1) * cell
        ax.text(x0, TOP + 0.12, f"channel {channel}", fontsize=8.5)
        for r in range(rows):
            for c in range(cols):
                capsule = int(place[channel, r, c, 0])
                x, y = x0 + c * cell, TOP - (r + 1) * cell
                square(
                    ax,
                    x,
                    y,
                    cell,
                    cell,
                    facecolor=VERMILLION if capsule == shown else "#d9d9d9",
                    edgecolor="white",
                    lw=0.8,
                    alpha=0.55 if capsule == shown else 0.45,
                )
                ax.text(
                    x + cell / 2,
                    y + cell / 2,
                    str(capsule),
                    ha="center",
                    va="center",
                    fontsize=8,
                )
