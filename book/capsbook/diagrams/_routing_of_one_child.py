"""One primary capsule's votes and its couplings to the parents, iteration by
iteration, and the child worth watching."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import torch
from torch import Tensor

from capsbook.diagrams._draw import (
    BLUE,
    GREEN,
    GREY,
    VERMILLION,
    Diagram,
    check_model,
    check_shape,
    is_index,
)
from capsnotes import CapsNet, dynamic_routing_with_couplings


@torch.no_grad()
def most_routed_child(model: CapsNet, image: Tensor) -> int:
    """The primary capsule whose coupling to the predicted class grows most from the
    first routing iteration to the last, weighted by the length of its output."""
    model = check_model(model)
    image = _check_image(model, image)
    lengths = model.primary_capsules(image)[0].norm(dim=-1)
    _, couplings, outputs = _couplings(model, image, model.digits.iterations)
    predicted = outputs[-1].norm(dim=-1).argmax()
    growth = (couplings[-1, :, predicted] - couplings[0, :, predicted]) * lengths
    return int(growth.argmax())


@torch.no_grad()
def routing_of_one_child(
    model: CapsNet,
    image: Tensor,
    child: int,
    iterations: int | None = None,
    label: int | None = None,
) -> Diagram:
    """Primary capsule ``child`` of ``image`` (``[1, C, H, W]``): the length of its vote
    for each parent, and in each routing iteration 1..r (the model's r unless
    ``iterations`` is given) its couplings to the parents, drawn as lines whose width is
    the coupling, and the agreement ``û_{j|i}·v_j`` that the iteration adds to its
    logits. ``label`` (optional) marks the true class. ``numbers["couplings"]`` and
    ``numbers["agreement"]`` are ``[iterations, parents]``."""
    model = check_model(model)
    image = _check_image(model, image)
    iterations = iterations or model.digits.iterations
    children = model.config.num_primary_capsules
    if not is_index(child, children):
        raise ValueError(
            f"child must be a primary capsule index in [0, {children}), got {child}"
        )
    u_hat, couplings, outputs = _couplings(model, image, iterations)
    mine = couplings[:, child]  # [t, O]
    votes = u_hat[0, child].norm(dim=-1)  # [O]
    lengths = outputs.norm(dim=-1)  # [t, O]
    # û·v after iteration t: [t, O]
    agreement = (u_hat[0, child][None] * outputs).sum(-1)
    grid = model.config.primary_grid
    kind, row, column = child // grid**2, child % grid**2 // grid, child % grid
    shapes = {"votes": tuple(u_hat.shape), "couplings": tuple(couplings[:1].shape)}
    figure, axes = plt.subplots(
        1,
        iterations + 1,
        figsize=(1.25 + 1.75 * iterations, 4.2),  # 6.5 inches for r = 3
        gridspec_kw={"width_ratios": [0.55] + [1] * iterations},
    )
    plt.close(figure)
    _draw_votes(axes[0], votes, label)
    heaviest = float(mine.max())
    for t, ax in enumerate(axes[1:]):
        last = t + 1 == len(mine)
        _draw_iteration(ax, t, mine[t], lengths[t], agreement[t], heaviest, label, last)
    figure.suptitle(
        f"child {child} (capsule type {kind}, row {row}, column {column} of the "
        f"{grid}×{grid} grid). Line width: its coupling $c_{{ij}}$ to parent $j$;\n"
        "dot size: $\\|v_j\\|$; agreement: $\\hat{u}_{j|i}\\cdot v_j$, added to "
        "$b_{ij}$ after every iteration but the last",
        fontsize=8.5,
        y=1.0,
    )
    figure.subplots_adjust(left=0.1, right=0.99, bottom=0.12, top=0.83, wspace=0.12)
    numbers = {
        "couplings": mine,
        "vote_lengths": votes,
        "agreement": agreement,
        "parent_lengths": lengths,
        "position": (kind, row, column),
    }
    return Diagram("routing of one child", figure, shapes, numbers)


def _check_image(model: CapsNet, image: object) -> Tensor:
    config = model.config
    expected = (1, config.in_channels, config.image_size, config.image_size)
    return check_shape(image, expected, "image must be one image of shape")


@torch.no_grad()
def _couplings(
    model: CapsNet, image: Tensor, iterations: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Votes ``[1, I, O, D]`` of ``image``, and for t = 1..iterations the couplings
    ``[t, I, O]`` and the outputs ``[t, O, D]`` routing uses and makes in iteration
    t."""
    u = model.primary_capsules(image)
    u_hat = model.digits.votes(u)
    couplings, outputs = [], []
    for t in range(1, iterations + 1):
        v, c = dynamic_routing_with_couplings(u_hat, t)
        couplings.append(c[0])
        outputs.append(v[0])
    return u_hat, torch.stack(couplings), torch.stack(outputs)


def _parent_rows(parents: int) -> list[int]:
    """The y of each parent's row: parent 0 at the top."""
    return [parents - 1 - j for j in range(parents)]


def _draw_votes(bars: Any, votes: Tensor, label: int | None) -> None:
    """The length of the child's vote ``votes`` (``[O]``) for each parent, as bars."""
    parents = len(votes)
    rows = _parent_rows(parents)
    names = [f"{j}{' (label)' if j == label else ''}" for j in range(parents)]
    bars.barh(rows, votes.tolist(), color=VERMILLION, alpha=0.7, height=0.6)
    bars.set_yticks(rows, names, fontsize=8.5)
    bars.set_ylim(-0.8, parents - 0.2)
    bars.set_xlabel("vote length $\\|\\hat{u}_{j|i}\\|$", fontsize=8.5)
    bars.tick_params(axis="x", labelsize=8)
    bars.set_title("its votes", fontsize=9)
    for side in ("top", "right"):
        bars.spines[side].set_visible(False)


def _draw_iteration(
    ax: Any,
    t: int,
    couplings: Tensor,
    lengths: Tensor,
    agreement: Tensor,
    heaviest: float,
    label: int | None,
    last: bool,
) -> None:
    """Iteration ``t + 1`` (``last`` if it is the last): a line from the child to each
    parent as wide as its coupling (``couplings``, ``[O]``; the widest for
    ``heaviest``), each parent a dot as large as its output's length (``lengths``),
    and beside it the coupling and the ``agreement``."""
    parents = len(couplings)
    rows = _parent_rows(parents)
    ax.set_xlim(-0.1, 2.45)
    ax.set_ylim(-0.8, parents - 0.2)
    ax.axis("off")
    middle = (parents - 1) / 2
    for j in range(parents):
        share = float(couplings[j])
        ax.plot(
            [0, 0.8],
            [middle, rows[j]],
            color=VERMILLION,
            lw=0.3 + 7 * share / heaviest,
            alpha=0.85,
            solid_capstyle="round",
            zorder=1,
        )
        ax.plot(0.8, rows[j], "o", color=GREEN, markersize=3 + 7 * float(lengths[j]))
        weight = "bold" if j == label else "normal"
        added = round(float(agreement[j]), 2) + 0.0  # no "-0.00"
        ax.text(
            1.0,
            rows[j],
            f"{share:.3f}",
            va="center",
            fontsize=8,
            fontweight=weight,
        )
        ax.text(
            2.45,
            rows[j],
            f"{added:+.2f}",
            va="center",
            ha="right",
            fontsize=8,
            fontweight=weight,
        )
    ax.plot(0, middle, "o", color=BLUE, markersize=10, zorder=2)
    ax.text(1.0, parents - 0.4, "$c_{ij}$", fontsize=8.5, color=GREY)
    heading = "agreement\n(not added)" if last else "agreement"
    ax.text(
        2.45,
        parents - 0.4,
        heading,
        fontsize=8,
        color=GREY,
        ha="right",
        va="bottom",
    )
    ax.set_title(f"iteration {t + 1}", fontsize=9, pad=16)
