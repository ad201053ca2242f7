"""Routing by agreement on a real digit, as an animation that plays in the notebook.

One frame per routing iteration: for a few parents, every child's vote for that parent
(a dot, drawn in the plane of the parent's last output and the votes' main direction
across it), its size the coupling the child gives that parent in this iteration, and the
parent's output ``v_j`` as an arrow; below, the length of every parent's output. Frame
``t`` is iteration ``t`` of Procedure 1 (the first ``t`` iterations do not depend on how
many follow, so it is the last iteration of ``capsnotes.dynamic_routing`` with ``r =
t``).

matplotlib's ``FuncAnimation`` draws the frames and its ``to_jshtml`` embeds them, as
PNGs, in a small HTML page with a player; that page plays where a notebook's HTML output
does: Jupyter, Colab and the built book. matplotlib names the player's elements with a
random id; :func:`player_html` replaces it with a fixed one, so that the page is the
same on every run but for its pictures, which ``book/nbval_figures.py`` compares as it
compares any PNG.
"""

from __future__ import annotations

import re
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.animation import FuncAnimation
from matplotlib.figure import Figure
from matplotlib.patches import Circle
from torch import Tensor

from capsbook.plots import COLORS, STYLE
from capsnotes import CapsNet, dynamic_routing

#: A dot's area, in points², for a coupling of 1 (an even split over ten parents: 0.1).
AREA_PER_COUPLING = 120.0


@torch.no_grad()
def routing_frames(
    model: CapsNet, image: Tensor, iterations: int = 5
) -> dict[str, Tensor]:
    """What each frame shows, from ``model`` on ``image`` ``[1, C, H, W]``: the votes
    ``[child, parent, dim]``, and per iteration ``t = 1..iterations`` the couplings
    ``[t, child, parent]`` and the parents' outputs ``[t, parent, dim]``."""
    if (
        not isinstance(iterations, int)
        or isinstance(iterations, bool)
        or iterations < 1
    ):
        raise ValueError(f"iterations must be an int >= 1, got {iterations!r}")
    if image.dim() != 4 or len(image) != 1:
        raise ValueError(
            f"image must be one image [1, C, H, W], got {tuple(image.shape)}"
        )
    votes = model.digits.votes(model.primary_capsules(image))  # [1, child, parent, dim]
    couplings, outputs = [], []
    for t in range(1, iterations + 1):
        v, c = dynamic_routing(votes, t, return_coupling=True)
        couplings.append(c[0])
        outputs.append(v[0])
    return {
        "votes": votes[0],
        "couplings": torch.stack(couplings),
        "outputs": torch.stack(outputs),
    }


def _plane(votes: Tensor, direction: Tensor) -> Tensor:
    """Two orthonormal axes ``[2, dim]``: ``direction`` and the main direction of the
    votes across it (their first principal axis once ``direction`` is taken out)."""
    first = direction / direction.norm()
    across = votes - (votes @ first)[:, None] * first
    _, _, right = torch.linalg.svd(across - across.mean(0), full_matrices=False)
    return torch.stack([first, right[0]])


def routing_animation(
    model: CapsNet,
    image: Tensor,
    label: int | None = None,
    iterations: int = 5,
    parents: int = 3,
) -> FuncAnimation:
    """The animation (see the module's docstring) of routing ``image`` through
    ``model``, ``iterations`` frames, the ``parents`` parents whose last outputs are
    longest (the true ``label`` among them, if given)."""
    frames = routing_frames(model, image, iterations)
    votes, couplings, outputs = (
        frames[k].double() for k in ("votes", "couplings", "outputs")
    )
    lengths = outputs.norm(dim=-1)  # [t, parent]
    order = lengths[-1].argsort(descending=True).tolist()
    shown = ([label] if label is not None else []) + [j for j in order if j != label]
    shown = shown[:parents]
    planes = [_plane(votes[:, j], outputs[-1, j]) for j in shown]
    points = [(votes[:, j] @ plane.T).numpy() for j, plane in zip(shown, planes)]
    arrows = [(outputs[:, j] @ plane.T).numpy() for j, plane in zip(shown, planes)]
    with plt.rc_context(STYLE):
        fig = Figure(figsize=(6.5, 4.6), dpi=80, layout="constrained")
        mosaic = [list(range(parents)), ["bars"] * parents]
        named = fig.subplot_mosaic(mosaic, height_ratios=[2.2, 1])
    top, bars_axis = [named[k] for k in range(parents)], named["bars"]
    with plt.rc_context(STYLE):
        dots, lines = [], []
        for ax, j, xy, path in zip(top, shown, points, arrows):
            colour = COLORS[1] if j == label else COLORS[0]
            dots.append(
                ax.scatter(
                    xy[:, 0], xy[:, 1], s=1, color=colour, alpha=0.35, linewidths=0
                )
            )
            (line,) = ax.plot(
                [0, path[0, 0]],
                [0, path[0, 1]],
                color="#222222",
                linewidth=2.4,
                solid_capstyle="round",
                zorder=4,
            )
            lines.append(line)
            # each panel on its own scale: the unit circle (v's longest) and nearly
            # every vote in view
            reach = max(1.05, 1.1 * float(np.quantile(np.abs(xy), 0.99)))
            ax.add_patch(
                Circle((0, 0), 1.0, fill=False, linestyle=":", color="#777777")
            )
            ax.set_xlim(-reach, reach)
            ax.set_ylim(-reach, reach)
            ax.set_aspect("equal")
            ax.axhline(0, color="#bbbbbb", linewidth=0.6)
            ax.axvline(0, color="#bbbbbb", linewidth=0.6)
            ax.set_title(
                f"parent {j}" + (" (the label)" if j == label else ""), fontsize=9
            )
            ax.tick_params(labelsize=7)
        top[0].set_ylabel("votes, across v", fontsize=8)
        top[len(top) // 2].set_xlabel(
            "votes along the parent's last output v", fontsize=8
        )
        colours = [
            COLORS[1] if j == label else "#999999" for j in range(lengths.shape[1])
        ]
        bars = bars_axis.bar(range(lengths.shape[1]), lengths[0].numpy(), color=colours)
        bars_axis.set_ylim(0, 1)
        bars_axis.set_xticks(range(lengths.shape[1]))
        bars_axis.set_xlabel("parent (digit capsule)", fontsize=8)
        bars_axis.set_ylabel("length of v", fontsize=8)
        bars_axis.tick_params(labelsize=7)
        title = fig.suptitle("", fontsize=10)

    def draw(t: int) -> list[Any]:
        for dot, line, j, path in zip(dots, lines, shown, arrows):
            dot.set_sizes(AREA_PER_COUPLING * couplings[t, :, j].numpy())
            line.set_data([0, path[t, 0]], [0, path[t, 1]])
        for bar, height in zip(bars, lengths[t].tolist()):
            bar.set_height(height)
        title.set_text(
            f"routing iteration {t + 1} of {iterations}: dots sized by coupling"
        )
        return [*dots, *lines, *bars, title]

    draw(0)
    return FuncAnimation(fig, draw, frames=iterations, interval=900, blit=False)


#: The id matplotlib draws at random for a player's elements (32 hex digits).
RANDOM_ID = re.compile(r"[0-9a-f]{32}")


def player_html(animation: FuncAnimation, name: str = "routing") -> str:
    """The animation as an HTML page with a player (``to_jshtml``), its frames as PNGs,
    its elements named ``name`` instead of a random id."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"name must be a JavaScript identifier, got {name!r}")
    page = animation.to_jshtml(default_mode="once")
    found = set(RANDOM_ID.findall(page.split("data:image/png;base64,")[0]))
    if len(found) != 1:
        raise RuntimeError(
            f"expected one random id in matplotlib's player, found {found}"
        )
    return page.replace(found.pop(), name)
