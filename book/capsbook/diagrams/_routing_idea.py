"""The idea of routing by agreement, drawn on one real digit before any equation: a part
(one primary capsule, where it looks), the longest votes for the label's parent pointing
one way while those for the runner-up point every way, and the part's couplings moving
to the parent its vote agrees with, away from the others."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.patches import Rectangle
from torch import Tensor

from capsbook.diagrams._draw import (
    BLUE,
    GREY,
    VERMILLION,
    WIDTH,
    Diagram,
    check_model,
    check_shape,
    is_index,
)
from capsbook.diagrams._routing_of_one_child import most_routed_child
from capsnotes import CapsNet, dynamic_routing_with_couplings


def agreement(votes: Tensor) -> float:
    """How well ``votes`` ``[n, dim]`` line up: the length of their sum over the sum of
    their lengths (1 when all point one way)."""
    return float(votes.sum(0).norm() / votes.norm(dim=-1).sum())


def plane(votes: Tensor) -> Tensor:
    """Two orthonormal axes ``[2, dim]`` to draw ``votes`` ``[n, dim]`` on: the
    direction of their sum, and their main direction across it, signed so that the vote
    farthest across lies on its positive side (an SVD may return either sign)."""
    total = votes.sum(0)
    first = total / total.norm()
    across = votes - (votes @ first)[:, None] * first
    _, _, right = torch.linalg.svd(across, full_matrices=False)
    second = right[0]
    if across[(across @ second).abs().argmax()] @ second < 0:
        second = -second
    return torch.stack([first, second])


def receptive_field(model: CapsNet, child: int) -> tuple[int, int, int]:
    """The pixels a primary capsule sees: its field's top row, left column and side."""
    grid = model.config.primary_grid
    row, column = child % grid**2 // grid, child % grid
    first, second = model.conv1, model.primary.conv
    step = first.stride[0] * second.stride[0]
    side = first.kernel_size[0] + (second.kernel_size[0] - 1) * first.stride[0]
    return row * step, column * step, side


@torch.no_grad()
def routing_idea(model: CapsNet, image: Tensor, label: int, shown: int = 24) -> Diagram:
    """The idea of routing on ``image`` ``[1, C, H, W]`` whose class is ``label``: the
    child whose coupling to the predicted class grows most (:func:`most_routed_child`)
    and its field of view; the ``shown`` longest votes for ``label``'s parent and for
    the runner-up's (the other parent whose output is longest after the model's ``r``
    iterations), each set drawn in the plane of its sum, on one scale, the child's vote
    in black; and the child's couplings in iterations 1 to ``r``."""
    model = check_model(model)
    config = model.config
    expected = (1, config.in_channels, config.image_size, config.image_size)
    image = check_shape(image, expected, "image must be one image of shape")
    if not is_index(label, config.num_classes):
        raise ValueError(
            f"label must be a class in [0, {config.num_classes}), got {label!r}"
        )
    children = config.num_primary_capsules
    if not (is_index(shown, children + 1) and shown >= 2):
        raise ValueError(f"shown must be an int in [2, {children}], got {shown!r}")
    iterations = model.digits.iterations
    votes = model.digits.votes(model.primary_capsules(image))[0].double()  # [I, O, D]
    couplings, outputs = [], []
    for t in range(1, iterations + 1):
        v, c = dynamic_routing_with_couplings(votes[None], t)
        couplings.append(c[0])
        outputs.append(v[0])
    lengths = outputs[-1].norm(dim=-1)
    rival = next(j for j in lengths.argsort(descending=True).tolist() if j != label)
    child = most_routed_child(model, image)
    lengths_of = votes.norm(dim=-1)  # [I, O]
    longest = {
        j: lengths_of[:, j].argsort(descending=True)[:shown] for j in (label, rival)
    }
    with_child = {
        j: torch.cat([idx[idx != child], torch.tensor([child])])
        for j, idx in longest.items()
    }
    drawn = {
        j: votes[idx, j] @ plane(votes[longest[j], j]).T
        for j, idx in with_child.items()
    }
    figure, axes = plt.subplots(
        1, 4, figsize=(WIDTH, 2.45), gridspec_kw={"width_ratios": [0.85, 1, 1, 1.1]}
    )
    plt.close(figure)
    _draw_part(axes[0], model, image, child)
    agreements = {j: agreement(votes[longest[j], j]) for j in (label, rival)}
    for ax, j, colour in ((axes[1], label, VERMILLION), (axes[2], rival, BLUE)):
        _draw_votes(ax, drawn[j], colour)
        kind = "label" if j == label else "runner-up"
        ax.set_title(
            f"votes for {j} ({kind})\nagreement {agreements[j]:.2f}",
            fontsize=8.5,
            color=colour,
        )
    mine = torch.stack([c[child] for c in couplings])  # [t, O]
    _draw_couplings(axes[3], mine, label, rival)
    figure.subplots_adjust(left=0.02, right=0.97, bottom=0.13, top=0.82, wspace=0.25)
    shapes = {
        "votes": (1, *votes.shape),
        "couplings": (1, children, config.num_classes),
    }
    numbers = {
        "child": child,
        "rival": rival,
        "longest": {j: idx.tolist() for j, idx in longest.items()},
        "agreement": agreements,
        "couplings": mine,
        "field": receptive_field(model, child),
    }
    return Diagram("the idea of routing", figure, shapes, numbers)


def _draw_part(ax: Any, model: CapsNet, image: Tensor, child: int) -> None:
    """The digit, and the square of pixels child ``child`` sees."""
    top, left, side = receptive_field(model, child)
    ax.imshow(image[0, 0].cpu().numpy(), cmap="gray_r", vmin=0, vmax=1)
    ax.add_patch(
        Rectangle(
            (left - 0.5, top - 0.5), side, side, fill=False, edgecolor="black", lw=1.5
        )
    )
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(f"a part: child {child}\nand what it sees", fontsize=8.5)


def _draw_votes(ax: Any, xy: Tensor, colour: str) -> None:
    """Votes as arrows from the origin, the last (the child's) in black on top; the
    panel fits them, and a bar of length 0.5 gives its scale."""
    points = xy.numpy()
    for k, (x, y) in enumerate(points):
        last = k == len(points) - 1
        ax.annotate(
            "",
            xy=(x, y),
            xytext=(0, 0),
            arrowprops={
                "arrowstyle": "-|>",
                "color": "black" if last else colour,
                "lw": 1.6 if last else 0.8,
                "alpha": 1.0 if last else 0.75,
                "shrinkA": 0,
                "shrinkB": 0,
                "mutation_scale": 7,
            },
            zorder=3 if last else 2,
        )
    ax.plot(0, 0, "o", color=GREY, markersize=2.5, zorder=4)
    low = np.minimum(points.min(0), 0)
    high = np.maximum(points.max(0), 0)
    middle, half = (low + high) / 2, 0.6 * float((high - low).max())
    ax.set_xlim(middle[0] - half, middle[0] + half)
    ax.set_ylim(middle[1] - half, middle[1] + half)
    ax.set_aspect("equal")
    left, bottom = middle[0] - 0.92 * half, middle[1] - 0.9 * half
    ax.plot([left, left + 0.5], [bottom, bottom], color=GREY, lw=1.5)
    ax.text(left, bottom + 0.06 * half, "0.5", color=GREY, fontsize=7, va="bottom")
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_color("#bbbbbb")


def _draw_couplings(ax: Any, mine: Tensor, label: int, rival: int) -> None:
    """The child's coupling to each parent (``mine`` ``[t, O]``) over the iterations:
    the label's and the rival's in colour, the others dashed grey on top (they may run
    under the rival's)."""
    steps = np.arange(1, len(mine) + 1)
    ax.plot(steps, mine[:, rival].numpy(), color=BLUE, lw=1.6, marker="o", markersize=3)
    others = [j for j in range(mine.shape[1]) if j not in (label, rival)]
    for j in others:
        ax.plot(steps, mine[:, j].numpy(), color=GREY, lw=0.8, linestyle=(0, (2, 2)))
    ax.plot(
        steps,
        mine[:, label].numpy(),
        color=VERMILLION,
        lw=1.6,
        marker="o",
        markersize=3,
    )
    for j, colour in ((label, VERMILLION), (rival, BLUE)):
        end = float(mine[-1, j])
        ax.text(steps[-1] + 0.1, end, str(j), color=colour, va="center", fontsize=8.5)
    ax.text(
        1.0,
        0.8,
        f"grey dashes: the other {len(others)},\nunder the {rival}'s line",
        color=GREY,
        va="center",
        fontsize=7,
    )
    ax.set_xticks(steps, [str(t) for t in steps], fontsize=7.5)
    ax.set_xlabel("iteration", fontsize=8, labelpad=1)
    ax.set_xlim(0.8, len(mine) + 0.4)
    ax.set_ylim(0, 1)
    ax.set_yticks([0, 0.5, 1], ["0", "0.5", "1"], fontsize=7.5)
    ax.set_title("the part's coupling\nto each parent", fontsize=8.5)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
