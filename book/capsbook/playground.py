"""The routing playground of chapter 5: a few children voting 2-D vectors for two or
three parents, routed by Procedure 1.

In the HTML book the reader drags the votes and the page's script
(``book/_ext/capsnotes-playground.js``) routes them in the browser. Its starting points,
the presets, live here only: chapter 5 emits them into its page as a script that sets
``window.CAPSNOTES_PLAYGROUND_PRESETS`` (:func:`presets_html`), which the page script
reads, and where no page runs that script (Jupyter, Colab, nbval) the chapter shows
:func:`figure`, the default preset routed by :func:`capsnotes.dynamic_routing`.

:func:`route_by_iteration` is what the page computes, from the package's routing: for
each iteration the couplings, ``s_j``, ``v_j`` and the agreement ``û_{j|i}·v_j`` (added
to the logits after every iteration but the last). The browser test holds the page's
numbers to it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from torch import Tensor

from capsbook.plots import COLORS, STYLE
from capsnotes import dynamic_routing_with_couplings

__all__ = [
    "DEFAULT",
    "FORMAT",
    "PRESETS",
    "Preset",
    "PresetsForThePage",
    "figure",
    "presets_html",
    "presets_payload",
    "route_by_iteration",
    "votes_tensor",
]

#: The payload's layout; ``capsnotes-playground.js`` reads this one.
FORMAT = 1
#: The children's colours, as the page draws them in its light theme: Okabe-Ito, without
#: the black that marks the parents' outputs, and grey for the eighth.
CHILD_COLORS = [*COLORS[:6], "#F0E442", "#999999"]
#: The page's limits: children and parents a configuration may have, iterations r.
CHILDREN = (4, 8)
PARENTS = (2, 3)
ITERATIONS = (1, 5)


def _polar(degrees: float, length: float) -> tuple[float, float]:
    """A 2-D vote of ``length`` at ``degrees`` from the x axis, to two decimals."""
    angle = math.radians(degrees)
    return (round(length * math.cos(angle), 2), round(length * math.sin(angle), 2))


@dataclass(frozen=True)
class Preset:
    """A configuration of the playground: ``votes[i][j]`` is child ``i``'s 2-D vote
    ``û_{j|i}`` for parent ``j``."""

    name: str
    description: str
    votes: tuple[tuple[tuple[float, float], ...], ...]

    @property
    def children(self) -> int:
        return len(self.votes)

    @property
    def parents(self) -> int:
        return len(self.votes[0])


def _preset(
    name: str, description: str, polar: list[list[tuple[float, float]]]
) -> Preset:
    votes = tuple(tuple(_polar(a, n) for a, n in child) for child in polar)
    return Preset(name, description, votes)


#: The presets, in the order of the page's buttons; the first is the default.
PRESETS: tuple[Preset, ...] = (
    _preset(
        "two clusters agree",
        "children 0-2 agree about parent 0, children 3-5 about parent 1; "
        "parent 2 gets scattered votes",
        [
            [(35, 1.0), (200, 0.6), (300, 0.5)],
            [(45, 0.9), (110, 0.5), (250, 0.6)],
            [(28, 1.1), (330, 0.6), (160, 0.5)],
            [(250, 0.5), (120, 1.0), (20, 0.6)],
            [(80, 0.6), (130, 0.9), (290, 0.5)],
            [(180, 0.5), (112, 1.1), (60, 0.6)],
        ],
    ),
    _preset(
        "all disagree",
        "every parent gets votes in six different directions",
        [
            [(10, 0.9), (100, 0.8), (220, 0.9)],
            [(75, 0.8), (190, 0.9), (300, 0.8)],
            [(140, 1.0), (280, 0.8), (20, 0.9)],
            [(200, 0.8), (350, 1.0), (95, 0.8)],
            [(265, 0.9), (40, 0.8), (160, 1.0)],
            [(320, 0.9), (230, 0.9), (340, 0.8)],
        ],
    ),
    _preset(
        "one long outlier",
        "children 0-3 agree about parent 0 with short votes; child 4 votes alone, "
        "and long, for parent 1",
        [
            [(60, 0.5), (200, 0.4)],
            [(70, 0.5), (330, 0.4)],
            [(50, 0.5), (100, 0.4)],
            [(65, 0.5), (260, 0.4)],
            [(240, 0.4), (0, 2.5)],
        ],
    ),
)
#: The preset the page starts from, and the one :func:`figure` draws.
DEFAULT = PRESETS[0]
#: The page's starting number of iterations: the paper's r.
DEFAULT_ITERATIONS = 3


def votes_tensor(votes: Preset | Any) -> Tensor:
    """A preset's votes (or nested lists ``[child][parent][2]``) as the float64 tensor
    ``[1, child, parent, 2]`` that :func:`capsnotes.dynamic_routing` routes."""
    if isinstance(votes, Preset):
        votes = votes.votes
    tensor = torch.as_tensor(votes, dtype=torch.float64)
    if tensor.dim() == 3:
        tensor = tensor[None]
    if tensor.dim() != 4 or tensor.shape[0] != 1 or tensor.shape[3] != 2:
        raise ValueError(
            f"votes must be [child][parent][2] (2-D votes), got {list(tensor.shape)}"
        )
    return tensor


def route_by_iteration(votes: Preset | Any, iterations: int) -> dict[str, Any]:
    """What the playground shows for ``votes`` routed with ``r = iterations``, for each
    iteration ``t = 1..r``: the couplings ``c [child, parent]`` it uses, ``s [parent,
    2]``, ``v [parent, 2]``, and the agreement ``û_{j|i}·v_j [child, parent]`` (added
    to the logits when ``t < r``; routing skips it after the last pass). Iteration
    ``t`` of a run is a run with ``r = t`` (routing is deterministic), so each is
    computed by :func:`capsnotes.dynamic_routing` itself. Float64 tensors."""
    u_hat = votes_tensor(votes)
    steps = []
    for t in range(1, iterations + 1):
        v, c = dynamic_routing_with_couplings(u_hat, t)
        s = torch.einsum("bij,bijd->bjd", c, u_hat)
        agreement = torch.einsum("bijd,bjd->bij", u_hat, v)
        steps.append({"c": c[0], "s": s[0], "v": v[0], "agreement": agreement[0]})
    return {
        "iterations": steps,
        "c": steps[-1]["c"],
        "v": steps[-1]["v"],
    }


def presets_payload() -> dict[str, Any]:
    """The presets as the page reads them: plain JSON."""
    return {
        "format": FORMAT,
        "default": DEFAULT.name,
        "iterations": DEFAULT_ITERATIONS,
        "limits": {"children": CHILDREN, "parents": PARENTS, "iterations": ITERATIONS},
        "presets": [
            {
                "name": p.name,
                "description": p.description,
                "votes": [[list(vote) for vote in child] for child in p.votes],
            }
            for p in PRESETS
        ],
    }


class PresetsForThePage:
    """Chapter 5's output that carries the presets into the HTML page: a script that
    sets ``window.CAPSNOTES_PLAYGROUND_PRESETS``. Where no page loads the playground
    (Jupyter, Colab) it shows a one-line summary."""

    def __init__(self, payload: dict[str, Any]) -> None:
        self.payload = payload

    def _repr_html_(self) -> str:
        text = json.dumps(self.payload, separators=(",", ":"))
        return f"<script>window.CAPSNOTES_PLAYGROUND_PRESETS = {text};</script>"

    def __repr__(self) -> str:
        shown = "; ".join(
            f"{p['name']} ({len(p['votes'])} children, {len(p['votes'][0])} parents)"
            for p in self.payload["presets"]
        )
        return f"playground presets: {shown}"


def presets_html() -> PresetsForThePage:
    """:func:`presets_payload` as an output that a notebook shows and the page runs."""
    return PresetsForThePage(presets_payload())


def _arrow(ax: Any, vector: Tensor, **style: Any) -> None:
    x, y = (float(a) for a in vector)
    if math.hypot(x, y) > 1e-9:
        ax.annotate(
            "",
            (x, y),
            (0, 0),
            arrowprops={
                "arrowstyle": "-|>",
                "mutation_scale": 10,
                "shrinkA": 0,
                "shrinkB": 0,
                **style,
            },
        )


#: Line widths of the votes, in points: a coupling of 1 would draw 6 points wide.
VOTE_WIDTH_PER_COUPLING = 6.0
#: The markers that tell the children apart in the coupling plot, beside their colours.
CHILD_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def figure(preset: Preset = DEFAULT, iterations: int = DEFAULT_ITERATIONS) -> Figure:
    """The playground's picture of ``preset`` routed with ``r = iterations`` (from
    :func:`route_by_iteration`). Top, one panel per parent: every child's vote (an
    arrow in the child's colour, numbered at its tip, as wide as its coupling in the
    last iteration: :data:`VOTE_WIDTH_PER_COUPLING`), ``s_j`` (dashed), ``v_j`` (black)
    and the unit circle that ``v_j`` stays inside, each panel on its own scale (its
    half-width under its title), so that a parent with short votes is as legible as the
    others. Below: each child's coupling to the parent it favours at the end, iteration
    by iteration."""
    routed = route_by_iteration(preset, iterations)
    last = routed["iterations"][-1]
    u_hat = votes_tensor(preset)[0]
    parents, children = preset.parents, preset.children
    names = [f"parent {j}" for j in range(parents)]
    with plt.rc_context({**STYLE, "axes.grid": False, "font.size": 8}):
        fig = Figure(figsize=(6.5, 4.8), layout="constrained")
        panels = fig.subplot_mosaic(
            [names, ["couplings"] * parents], height_ratios=[2.0, 1]
        )
        circle = np.linspace(0, 2 * np.pi, 200)
        for j, name in enumerate(names):
            ax = panels[name]
            # this parent's votes, s_j and v_j inside the panel
            longest = max(
                float(u_hat[:, j].norm(dim=-1).max()), float(last["s"][j].norm())
            )
            extent = 1.2 * max(longest, 0.05)
            ax.plot(np.cos(circle), np.sin(circle), color="#999999", lw=0.7, ls=":")
            ax.axhline(0, color="#dddddd", lw=0.6, zorder=0)
            ax.axvline(0, color="#dddddd", lw=0.6, zorder=0)
            # the widest votes first, so that a narrow one is not hidden under them
            for i in sorted(range(children), key=lambda i: -float(last["c"][i, j])):
                share = float(last["c"][i, j])
                width = VOTE_WIDTH_PER_COUPLING * share
                _arrow(ax, u_hat[i, j], color=CHILD_COLORS[i], lw=width, alpha=0.85)
                tip = u_hat[i, j] * (
                    1 + 0.12 * extent / max(float(u_hat[i, j].norm()), 1e-9)
                )
                ax.text(
                    *(float(a) for a in tip),
                    str(i),
                    color=CHILD_COLORS[i],
                    ha="center",
                    va="center",
                    fontsize=7,
                    fontweight="bold",
                )
            _arrow(ax, last["s"][j], color="#555555", lw=1.0, ls="--")
            _arrow(ax, last["v"][j], color="#000000", lw=2.4)
            ax.set_xlim(-extent, extent)
            ax.set_ylim(-extent, extent)
            ax.set_aspect("equal")
            ax.set_xticks([])
            ax.set_yticks([])
            for side in ax.spines.values():
                side.set_visible(False)
            length_s, length_v = (float(last[k][j].norm()) for k in ("s", "v"))
            ax.set_title(
                f"{name}\n|s| {length_s:.2f}, |v| {length_v:.2f}\nshown ±{extent:.2f}"
            )
        ax = panels["couplings"]
        couplings = torch.stack([step["c"] for step in routed["iterations"]])
        favourite = last["c"].argmax(dim=1)
        steps = np.arange(1, iterations + 1)
        for i in range(children):
            j = int(favourite[i])
            # each child's points a little to one side, so that equal couplings still
            # show every child's line
            ax.plot(
                steps + 0.04 * (i - (children - 1) / 2),
                couplings[:, i, j].numpy(),
                "-",
                marker=CHILD_MARKERS[i],
                color=CHILD_COLORS[i],
                lw=1.4,
                markersize=4.5,
                label=f"child {i} → parent {j}",
            )
        ax.axhline(1 / parents, color="#999999", lw=0.7, ls=":")
        ax.text(
            iterations + 0.15,
            1 / parents + 0.02,
            "even split",
            va="bottom",
            color="#666666",
        )
        ax.set_xticks(steps, [f"iteration {t}" for t in steps])
        ax.set_xlim(0.8, iterations + 0.6)
        ax.set_ylim(0, 1)
        ax.set_ylabel("coupling $c_{ij}$")
        ax.grid(True, axis="y", color="#e5e5e5")
        fig.legend(
            *ax.get_legend_handles_labels(),
            loc="outside lower center",
            ncol=min(children, 3),
            frameon=False,
        )
    return fig
