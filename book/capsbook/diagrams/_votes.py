"""How one image's votes ``û_{j|i} = W_ij u_i`` add up for each parent: laid head to
tail, votes that point one way go far and votes that point every way cancel. The length
of their sum over the sum of their lengths is the agreement that chapter 4 measures."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor

from capsbook.diagrams._draw import (
    BLUE,
    VERMILLION,
    WIDTH,
    Diagram,
    check_model,
    check_shape,
    is_index,
)
from capsnotes import CapsNet

#: Every how many votes a walk's drawn path has a point (its end is always drawn).
STRIDE = 8


def walk_plane(walk: Tensor) -> Tensor:
    """Two orthonormal axes ``[2, dim]`` to draw a walk ``[n, dim]`` (the running sums
    of the votes) on: the direction of its end, and its main direction across that,
    signed so that the point farthest across lies on its positive side."""
    first = walk[-1] / walk[-1].norm()
    across = walk - (walk @ first)[:, None] * first
    _, _, right = torch.linalg.svd(across, full_matrices=False)
    second = right[0]
    if across[(across @ second).abs().argmax()] @ second < 0:
        second = -second
    return torch.stack([first, second])


@torch.no_grad()
def votes_add_up(model: CapsNet, image: Tensor, label: int) -> Diagram:
    """The votes of ``image`` ``[1, C, H, W]`` (its class ``label``) for each parent.
    Left: each parent's votes laid head to tail in the order of the children's index,
    drawn along their sum and across it, in the direction the walk strays farthest (so
    each walk ends on the axis, its end as far from the start as their sum is long).
    Right: the agreement ``‖Σ_i û_j|i‖ / Σ_i ‖û_j|i‖`` of each parent's votes, and (a
    black tick) what votes of the same lengths in random directions give,
    ``√(Σ_i ‖û_j|i‖²) / Σ_i ‖û_j|i‖``."""
    model = check_model(model)
    config = model.config
    expected = (1, config.in_channels, config.image_size, config.image_size)
    image = check_shape(image, expected, "image must be one image of shape")
    if not is_index(label, config.num_classes):
        raise ValueError(
            f"label must be a class in [0, {config.num_classes}), got {label!r}"
        )
    u = model.primary_capsules(image)
    votes = model.digits.votes(u)[0].double()  # [children, parents, dim]
    lengths = votes.norm(dim=-1)  # [children, parents]
    total = lengths.sum(0)
    sum_length = votes.sum(0).norm(dim=-1)
    agreement = sum_length / total
    chance = lengths.square().sum(0).sqrt() / total
    children, parents = lengths.shape
    figure, (walks, bars) = plt.subplots(
        1, 2, figsize=(WIDTH, 3.0), gridspec_kw={"width_ratios": [1.9, 1]}
    )
    plt.close(figure)
    kept = [*range(STRIDE - 1, children - 1, STRIDE), children - 1]
    ends = []
    for j in [*(k for k in range(parents) if k != label), label]:  # the label's on top
        walk = votes[:, j].cumsum(0)
        path = torch.cat([walk.new_zeros(1, 2), walk[kept] @ walk_plane(walk).T])
        ends.append((j, path[-1]))
        mine = j == label
        walks.plot(
            *path.numpy().T,
            color=VERMILLION if mine else BLUE,
            lw=1.4 if mine else 0.7,
            alpha=1.0 if mine else 0.6,
            zorder=3 if mine else 2,
        )
    _label_ends(walks, ends, label)
    _draw_digit(walks, image)
    walks.set_aspect("equal")
    walks.set_xlabel("along each parent's sum of votes", fontsize=8.5)
    walks.set_ylabel("across it, where the path strays most", fontsize=8)
    walks.set_title(f"the {children:,} votes for each parent, head to tail", fontsize=9)
    walks.tick_params(labelsize=7.5)
    _draw_agreement(bars, agreement, chance, label)
    figure.subplots_adjust(left=0.08, right=0.98, bottom=0.2, top=0.9, wspace=0.25)
    shapes = {"primary capsules": tuple(u.shape), "votes": (1, *votes.shape)}
    numbers = {
        "sum_of_lengths": total,
        "length_of_sum": sum_length,
        "agreement": agreement,
        "chance": chance,
        "ends": torch.stack([end for _, end in sorted(ends, key=lambda e: e[0])]),
    }
    return Diagram("how the votes add up", figure, shapes, numbers)


def _label_ends(ax: Any, ends: list[tuple[int, Tensor]], label: int) -> None:
    """The label's walk: its end, the straight line to it (the length of the sum) and
    its name; and a name for the others."""
    mine = next(end for j, end in ends if j == label)
    x = float(mine[0])
    ax.plot([0, x], [0, 0], color=VERMILLION, lw=0.8, linestyle="--", zorder=4)
    ax.plot(x, 0, "o", color=VERMILLION, markersize=4, zorder=4)
    ax.text(
        0.3 * x,
        -0.5,
        f"parent {label}: sum {x:.1f} long",
        color=VERMILLION,
        fontsize=8,
        va="top",
    )
    ax.text(
        0.02,
        0.03,
        f"blue: the other {len(ends) - 1} parents",
        color=BLUE,
        fontsize=8,
        transform=ax.transAxes,
    )


def _draw_digit(ax: Any, image: Tensor) -> None:
    """The digit, small, in the walks' top left corner."""
    inset = ax.inset_axes((0.82, 0.0, 0.18, 0.38))
    inset.imshow(image[0, 0].cpu().numpy(), cmap="gray_r", vmin=0, vmax=1)
    inset.set_xticks([])
    inset.set_yticks([])


def _draw_agreement(ax: Any, agreement: Tensor, chance: Tensor, label: int) -> None:
    """The agreement of each parent's votes as bars, the label's vermillion, each with
    its chance level as a black tick."""
    parents = len(agreement)
    rows = np.arange(parents)[::-1]  # parent 0 at the top
    colours = [VERMILLION if j == label else BLUE for j in range(parents)]
    ax.barh(rows, agreement.numpy(), color=colours, height=0.65)
    ax.scatter(chance.numpy(), rows, marker="|", s=90, color="black", lw=1.5, zorder=3)
    ax.text(
        float(agreement[label]) + 0.004,
        rows[label],
        f"{float(agreement[label]):.3f}",
        va="center",
        fontsize=7.5,
        color=VERMILLION,
    )
    ax.set_yticks(rows, [str(j) for j in range(parents)], fontsize=7.5)
    ax.set_ylabel("parent j", fontsize=8.5)
    ax.set_xlim(0, 0.2)
    ax.set_xticks([0, 0.05, 0.1, 0.15, 0.2], ["0", "0.05", "0.1", "0.15", "0.2"])
    ax.tick_params(labelsize=7.5)
    ax.set_xlabel("|sum| / sum of lengths\n(tick: random directions)", fontsize=8.5)
    ax.set_title("agreement", fontsize=9)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.tick_params(axis="y", length=0)
