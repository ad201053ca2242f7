"""One child's votes, ``û_{j|i} = W_ij u_i``: the primary capsule ``u_i``, its ten
matrices ``W_ij`` and the ten votes they make, each drawn cell by cell in the colour of
its value."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from matplotlib.colors import LinearSegmentedColormap
from torch import Tensor

from capsbook.diagrams._draw import (
    BLUE,
    GREY,
    ORANGE,
    WIDTH,
    Diagram,
    canvas,
    check_model,
    check_shape,
    is_index,
    square,
)
from capsnotes import CapsNet

#: Negative values blue, zero white, positive orange (the book's colours).
DIVERGING = LinearSegmentedColormap.from_list("votes", [BLUE, "#FFFFFF", ORANGE])


def _cells(ax: Any, values: np.ndarray, x: float, top: float, cell: float) -> None:
    """``values`` [rows, columns] as cells of ``cell`` inches, the top left at
    ``(x, top)``, each coloured by its value over the largest magnitude shown."""
    scale = float(np.abs(values).max()) or 1.0
    for (row, column), value in np.ndenumerate(values):
        colour = DIVERGING(0.5 + 0.5 * value / scale)
        square(
            ax,
            x + column * cell,
            top - (row + 1) * cell,
            cell,
            cell,
            facecolor=colour,
            edgecolor="none",
        )
    rows, columns = values.shape
    square(
        ax,
        x,
        top - rows * cell,
        columns * cell,
        cell * rows,
        facecolor="none",
        edgecolor=GREY,
        lw=0.6,
    )


@torch.no_grad()
def votes_of_one_child(model: CapsNet, u: Tensor, child: int) -> Diagram:
    """Child ``child``'s capsule in ``u`` (``[1, children, in_dim]``, one image's
    primary capsules), its matrices ``W_ij`` for every parent ``j`` (``out_dim ×
    in_dim`` each) and its votes ``û_{j|i}``, which the numbers below them measure."""
    model = check_model(model)
    layer = model.digits
    children, parents, out_dim, in_dim = layer.weight.shape
    u = check_shape(u, (1, children, in_dim), "u must be one image's primary capsules")
    if not is_index(child, children):
        raise ValueError(f"child must be an int in [0, {children}), got {child!r}")
    u_hat = layer.votes(u)  # [1, children, parents, out_dim]
    capsule = u[0, child].cpu().numpy()  # u_i
    matrices = layer.weight[child].cpu().numpy()  # W_ij: [parents, out_dim, in_dim]
    votes = u_hat[0, child].cpu().numpy()  # û_{j|i}: [parents, out_dim]
    lengths = np.linalg.norm(votes, axis=-1)
    cell = min(0.05, 2.2 / (out_dim + in_dim))
    figure, ax = canvas(WIDTH, 0.95 + out_dim * cell)
    top = out_dim * cell + 0.55
    # u_i: a column of in_dim cells, at the height of the matrices' columns
    u_top = top - (out_dim - in_dim * 1.6) * cell / 2
    _cells(ax, capsule[:, None], 0.3, u_top, cell * 1.6)
    ax.text(
        0.3 + 0.8 * cell,
        u_top - in_dim * 1.6 * cell - 0.08,
        f"u_i [{in_dim}]\ni = {child}",
        ha="center",
        va="top",
        fontsize=8,
    )
    ax.text(
        0.62,
        top - out_dim * cell / 2,
        "→",
        ha="center",
        va="center",
        fontsize=12,
        color=GREY,
    )
    step = (WIDTH - 0.9) / parents
    for j in range(parents):
        x = 0.85 + j * step
        _cells(ax, matrices[j], x, top, cell)  # W_ij, rows d, columns k
        _cells(ax, votes[j][:, None], x + (in_dim + 0.8) * cell, top, cell)  # û_{j|i}
        ax.text(
            x + (in_dim + 1) * cell / 2, top + 0.12, f"j = {j}", ha="center", fontsize=8
        )
        ax.text(
            x + (in_dim + 1) * cell / 2,
            top - out_dim * cell - 0.14,
            f"{lengths[j]:.2f}",
            ha="center",
            fontsize=8,
        )
    ax.text(
        0.85,
        0.12,
        f"each parent j: W_ij [{out_dim}×{in_dim}] beside its vote "
        f"û_j|i = W_ij u_i [{out_dim}], and the vote's length below",
        fontsize=8,
        color=GREY,
    )
    shapes = {"primary capsules": tuple(u.shape), "votes": tuple(u_hat.shape)}
    numbers = {"child": child, "vote_lengths": lengths.tolist()}
    return Diagram(f"votes of child {child}", figure, shapes, numbers)
