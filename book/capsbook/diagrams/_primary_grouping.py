"""How the primary convolution's output channels become capsules: the maps drawn as one
stack per capsule type, and one capsule pulled out of the last stack."""

from __future__ import annotations

from typing import Any

import torch

from capsbook.diagrams._draw import (
    BLUE,
    GREEN,
    GREY,
    VERMILLION,
    WIDTH,
    Diagram,
    arrow,
    canvas,
    check_model,
    forward_shapes,
    shape_text,
    square,
)
from capsnotes import CapsNet

#: A map's side, and the offset between two stacked maps, in inches.
SIDE, STEP = 0.8, 0.06
#: The bottom of the front maps.
BASE = 1.05


@torch.no_grad()
def primary_grouping(model: CapsNet) -> Diagram:
    """How the primary-capsule convolution's output channels become capsules: channel
    ``c·D + k`` at one grid position is component ``k`` of the capsule of type ``c``."""
    model = check_model(model)
    config = model.config
    device = next(model.parameters()).device
    features = torch.zeros(
        1, model.conv1.out_channels, *forward_shapes(model)["conv1"][2:], device=device
    )
    maps = model.primary.conv(features)
    u = model.primary(features)
    channels, rows, cols = maps.shape[1:]
    types, dim = model.primary.capsule_channels, model.primary.capsule_dim
    shapes = {
        "primary convolution": tuple(maps.shape),
        "primary capsules": tuple(u.shape),
    }
    figure, ax = canvas(WIDTH, 3.5)
    x, anchor = _draw_stacks(ax, types, dim, rows, cols)
    ax.text(
        0.15,
        3.25,
        f"primary convolution output: {channels} maps of {rows}×{cols} "
        f"= {types} types × {dim} maps   {shape_text(tuple(maps.shape))}",
        fontsize=9,
    )
    ax.text(
        0.15,
        0.65,
        f"a stack = the {dim} maps of one type; the marked cell, taken "
        f"through the stack, is one capsule",
        fontsize=8.5,
        color=GREY,
    )
    _draw_capsule(ax, dim, x + 0.15, anchor)
    ax.text(
        0.15,
        0.2,
        f"{types} types × {rows}×{cols} positions = {u.shape[1]:,} capsules "
        f"of {dim}-D   {shape_text(tuple(u.shape))}",
        fontsize=9,
    )
    numbers = {"types": types, "dim": dim, "grid": (rows, cols), "capsules": u.shape[1]}
    if config.primary_channels != types:  # the configuration and the layer must agree
        raise ValueError("the model's primary capsules do not match its configuration")
    return Diagram("primary grouping", figure, shapes, numbers)


def _draw_stacks(
    ax: Any, types: int, dim: int, rows: int, cols: int
) -> tuple[float, tuple[float, float]]:
    """Each type's ``dim`` maps of ``rows`` × ``cols`` drawn as a stack, left to right:
    the first two types and the last, and one grid position marked through the stack
    of each type. Returns the x right of the last stack, and the centre of the last
    stack's marked cell, where its capsule is pulled out."""
    shown_groups = [0, 1, types - 1] if types > 2 else list(range(types))
    cell = SIDE / max(rows, cols)
    marked = (rows // 2, cols // 2)
    x = 0.15
    anchor = (0.0, 0.0)
    for group_index, group in enumerate(shown_groups):
        if group_index == 2 and types > 3:
            ax.text(x + 0.1, BASE + 0.6, "…", fontsize=14, ha="center", va="center")
            x += 0.4
        colour = [BLUE, VERMILLION, GREEN][group_index % 3]
        _draw_stack(ax, x, group, colour, dim, (rows, cols), marked)
        if group_index == len(shown_groups) - 1:  # the capsule pulled out: of the last
            anchor = (
                x + (marked[1] + 0.5) * cell,
                BASE + (rows - marked[0] - 0.5) * cell,
            )
        x += SIDE + dim * STEP + 0.25
    return x, anchor


def _draw_stack(
    ax: Any,
    x: float,
    group: int,
    colour: str,
    dim: int,
    grid: tuple[int, int],
    marked: tuple[int, int],
) -> None:
    """The ``dim`` maps of type ``group``, grid ``(rows, cols)``, stacked back to front
    from ``x``, the cell at ``marked`` (row, column) filled on each map; the grid drawn
    on the front map, and the type's channels named above."""
    rows, cols = grid
    cell = SIDE / max(rows, cols)
    for k in reversed(range(dim)):  # back to front
        left, bottom = x + k * STEP, BASE + k * STEP
        for fill, alpha in (("white", 1.0), (colour, 0.12)):
            square(
                ax,
                left,
                bottom,
                SIDE,
                SIDE,
                facecolor=fill,
                edgecolor=colour if fill == "white" else "none",
                lw=0.8,
                alpha=alpha,
            )
        r, c = marked
        square(
            ax,
            left + c * cell,
            bottom + (rows - 1 - r) * cell,
            cell,
            cell,
            facecolor=colour,
            edgecolor="none",
            alpha=0.6,
        )
    for i in range(1, max(rows, cols)):  # the grid on the front map
        ax.plot([x + i * cell] * 2, [BASE, BASE + SIDE], color=colour, lw=0.3)
        ax.plot([x, x + SIDE], [BASE + i * cell] * 2, color=colour, lw=0.3)
    ax.text(
        x + SIDE / 2 + dim * STEP / 2,
        BASE + SIDE + dim * STEP + 0.1,
        f"type {group}: channels\n{group * dim}–{group * dim + dim - 1}",
        ha="center",
        fontsize=8.5,
    )


def _draw_capsule(
    ax: Any, dim: int, vector_x: float, anchor: tuple[float, float]
) -> None:
    """One capsule ``u_i``: its ``dim`` numbers in a row from ``vector_x``, and an
    arrow from ``anchor``, the cell it was taken from."""
    width = min(0.17, (WIDTH - 0.1 - vector_x) / dim)
    for k in range(dim):
        square(
            ax,
            vector_x + width * k,
            BASE + 0.45,
            width * 0.9,
            0.38,
            facecolor=GREEN,
            alpha=0.3 + 0.5 * k / dim,
            edgecolor="white",
        )
    arrow(ax, anchor, (vector_x - 0.03, BASE + 0.64))
    ax.text(
        vector_x,
        BASE + 1.0,
        f"$u_i$: {dim} numbers,\none per map,\nthen squashed",
        fontsize=8.5,
    )
