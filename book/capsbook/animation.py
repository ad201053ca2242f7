"""Routing by agreement on a real digit, as an animation that plays in the notebook.

One frame per routing iteration. For two parents (the label's and the runner-up's, or
the two whose last outputs are longest), every child's vote for that parent is a dot in
a plane of that parent's 16 dimensions: along the parent's last output ``v_j`` and
across it (the votes' main direction once ``v_j``'s is taken out). The votes stay where
they are from frame to frame, since routing does not change them; a dot's area is the
coupling ``c_ij`` the child gives that parent in the iteration, and the arrow is the
parent's output ``v_j``, both panels drawn to one scale. Beside them, the length of
every parent's output, the first iteration's outlined. Frame ``t`` is iteration ``t``
of Procedure 1: the first ``t`` iterations do not depend on how many follow, so it is
the last iteration of ``capsnotes.dynamic_routing`` with ``r = t``.

matplotlib's ``FuncAnimation`` draws the frames and its ``to_jshtml`` embeds them, as
PNGs, in a small HTML page with a player. That page plays where a notebook's HTML output
does: Jupyter, Colab and the built book. :func:`player_html` makes it the same on every
run but for its pictures (matplotlib names the player's elements with a random id; here
a fixed one), and self-contained (matplotlib's buttons draw icons from a font fetched
from the web; here characters); its first frame is the ``<img>``'s own source, so a
viewer that runs no script (an untrusted notebook, GitHub) still shows iteration 1.
``book/nbval_figures.py`` compares the page's text exactly and each frame as a PNG.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.animation import FuncAnimation
from matplotlib.figure import Figure
from torch import Tensor

from capsbook.plots import COLORS, STYLE
from capsnotes import CapsNet, dynamic_routing_with_couplings
from capsnotes.checks import check_images, check_iterations

#: A dot's area, in points², for a coupling of 1 (an even split over ten parents: 0.1).
AREA_PER_COUPLING = 100.0
#: The frames' size in inches and their resolution: 640 × 320 pixels, the book's column.
FIGSIZE = (6.4, 3.2)
DPI = 100
#: Milliseconds a frame stays when the player plays.
INTERVAL = 1000
#: The dots' opacity.
ALPHA = 0.5
#: The colours: the label's parent (vermillion) and any other (blue).
LABEL_COLOUR, OTHER_COLOUR = COLORS[1], COLORS[0]


@torch.no_grad()
def routing_frames(
    model: CapsNet, image: Tensor, iterations: int = 5
) -> dict[str, Tensor]:
    """What each frame shows, from ``model`` on ``image`` ``[1, C, H, W]``: the votes
    ``[child, parent, dim]``, and per iteration ``t = 1..iterations`` (index ``t - 1``)
    the couplings ``[iterations, child, parent]`` that iteration uses and the parents'
    outputs ``[iterations, parent, dim]`` it ends with."""
    if not isinstance(model, CapsNet):
        raise TypeError(
            f"model must be a capsnotes.CapsNet, got {type(model).__name__}"
        )
    check_images(image, model.config)
    if len(image) != 1:
        raise ValueError(
            f"image must be one image [1, C, H, W], got {tuple(image.shape)}"
        )
    check_iterations(iterations)
    votes = model.digits.votes(model.primary_capsules(image))  # [1, child, parent, dim]
    couplings, outputs = [], []
    for t in range(1, iterations + 1):
        v, c = dynamic_routing_with_couplings(votes, t)
        couplings.append(c[0])
        outputs.append(v[0])
    return {
        "votes": votes[0],
        "couplings": torch.stack(couplings),
        "outputs": torch.stack(outputs),
    }


def vote_plane(votes: Tensor, direction: Tensor) -> Tensor:
    """Two orthonormal axes ``[2, dim]``: ``direction`` and the main direction of the
    ``votes`` ``[n, dim]`` across it (their first principal axis once ``direction``'s
    component is taken out), signed so that the vote farthest across lies on its
    positive side (the same picture on any CPU: an SVD may return either sign)."""
    first = direction / direction.norm()
    across = votes - (votes @ first)[:, None] * first
    _, _, right = torch.linalg.svd(across - across.mean(0), full_matrices=False)
    second = right[0]
    farthest = (across @ second).abs().argmax()
    if (across[farthest] @ second) < 0:
        second = -second
    return torch.stack([first, second])


def _limits(*values: np.ndarray) -> tuple[float, float]:
    """A panel's limits along an axis: the smallest and largest value shown (and 0),
    widened by 0.1 and rounded out to 0.1 (limits that float noise does not move)."""
    low = min(0.0, *(float(v.min()) for v in values)) - 0.1
    high = max(0.0, *(float(v.max()) for v in values)) + 0.1
    return math.floor(10 * low) / 10, math.ceil(10 * high) / 10


def shared_limits(
    limits: dict[int, tuple[float, float]],
) -> dict[int, tuple[float, float]]:
    """The panels' limits along their first axis, widened to one width, the widest's
    (each keeps its lower limit), so that every panel is drawn to one scale."""
    width = max(high - low for low, high in limits.values())
    return {j: (low, round(low + width, 1)) for j, (low, _) in limits.items()}


def shown_parents(lengths: Tensor, label: int | None) -> list[int]:
    """The two parents drawn: ``label`` and the parent whose last output is longest
    among the others, or the two longest without a label."""
    order = lengths[-1].argsort(descending=True).tolist()
    first = label if label is not None else order[0]
    return [first, next(j for j in order if j != first)]


def routing_animation(
    model: CapsNet,
    image: Tensor,
    label: int | None = None,
    iterations: int = 5,
    child: int | None = None,
) -> FuncAnimation:
    """The animation (see the module's docstring) of routing ``image`` through
    ``model``: ``iterations`` frames, the parents of :func:`shown_parents`; a black ring
    marks the votes of ``child``, if given."""
    frames = routing_frames(model, image, iterations)
    votes, couplings, outputs = (
        frames[k].double() for k in ("votes", "couplings", "outputs")
    )
    children, parents = votes.shape[:2]
    for name, value, count in (("label", label, parents), ("child", child, children)):
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not 0 <= value < count
        ):
            raise ValueError(f"{name} must be an int in [0, {count}), got {value!r}")
    lengths = outputs.norm(dim=-1)  # [t, parent]
    shown = shown_parents(lengths, label)
    planes = [vote_plane(votes[:, j], outputs[-1, j]) for j in shown]
    points = [(votes[:, j] @ plane.T).numpy() for j, plane in zip(shown, planes)]
    arrows = [(outputs[:, j] @ plane.T).numpy() for j, plane in zip(shown, planes)]
    limits = shared_limits(
        {j: _limits(xy[:, 0], path[:, 0]) for j, xy, path in zip(shown, points, arrows)}
    )
    with plt.rc_context(STYLE):
        fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
        axes = fig.subplots(1, 3, width_ratios=[1, 1, 1.25])
    dots, lines, titles = [], [], []
    with plt.rc_context(STYLE):
        for ax, j, xy, path in zip(axes, shown, points, arrows):
            colour = LABEL_COLOUR if j == label else OTHER_COLOUR
            dots.append(
                ax.scatter(xy[:, 0], xy[:, 1], s=1, color=colour, alpha=ALPHA, lw=0)
            )
            if child is not None:
                ax.scatter(*xy[child], s=140, facecolor="none", edgecolor="black", lw=1)
            lines.append(
                ax.annotate(
                    "",
                    xy=(path[0, 0], path[0, 1]),
                    xytext=(0, 0),
                    arrowprops={"arrowstyle": "-|>", "color": "black", "lw": 2},
                    zorder=4,
                )
            )
            low, high = limits[j]
            ax.set_xlim(low, high)
            ax.set_ylim(-(high - low) / 2, (high - low) / 2)
            ax.set_aspect("equal")
            ax.grid(False)
            ax.tick_params(labelsize=8)
            ax.set_xlabel(f"along v{j}", fontsize=9)
            titles.append(ax.set_title("", fontsize=9, color=colour))
        axes[0].set_ylabel("across v", fontsize=9)
        bars_ax = axes[2]
        colours = [LABEL_COLOUR if j == label else "#999999" for j in range(parents)]
        bars = bars_ax.bar(range(parents), lengths[0].numpy(), color=colours, width=0.7)
        bars_ax.bar(
            range(parents),
            lengths[0].numpy(),
            fill=False,
            edgecolor="black",
            linewidth=0.8,
            width=0.7,
            zorder=3,
        )
        bars_ax.set_ylim(0, 1)
        bars_ax.grid(axis="x", visible=False)
        bars_ax.set_xticks(range(parents))
        bars_ax.tick_params(labelsize=8)
        bars_ax.set_xlabel("parent j", fontsize=9)
        bars_ax.set_title(
            "each parent's output length\n(outlined: iteration 1)", fontsize=9
        )
        heading = fig.suptitle("", fontsize=10, fontweight="bold")

    def draw(t: int) -> list[Any]:
        for dot, line, title, j, path in zip(dots, lines, titles, shown, arrows):
            dot.set_sizes(AREA_PER_COUPLING * couplings[t, :, j].numpy())
            line.xy = (path[t, 0], path[t, 1])
            name = f"parent {j}" + (" (label)" if j == label else "")
            title.set_text(f"votes for {name}\n|v{j}| = {lengths[t, j]:.2f}")
        for bar, height in zip(bars, lengths[t].tolist()):
            bar.set_height(height)
        heading.set_text(
            f"Routing iteration {t + 1} of {iterations}: "
            "dot area = coupling to the parent"
        )
        return [*dots, *lines, *titles, *bars, heading]

    draw(0)
    return FuncAnimation(fig, draw, frames=iterations, interval=INTERVAL, blit=False)


#: The id matplotlib draws at random for a player's elements (32 hex digits).
RANDOM_ID = re.compile(r"[0-9a-f]{32}")
#: matplotlib's buttons' icons (a web font's classes) and the characters shown instead.
ICONS = {
    "fa fa-minus": "\u2212",
    "fa fa-fast-backward": "|\u25c0\ufe0e\u25c0\ufe0e",
    "fa fa-step-backward": "|\u25c0\ufe0e",
    "fa fa-play fa-flip-horizontal": "\u25c0\ufe0e",
    "fa fa-pause": "\u275a\u275a",
    "fa fa-play": "\u25b6\ufe0e",
    "fa fa-step-forward": "\u25b6\ufe0e|",
    "fa fa-fast-forward": "\u25b6\ufe0e\u25b6\ufe0e|",
    "fa fa-plus": "+",
}
#: The web font's stylesheet that matplotlib's page loads.
FONT_LINK = re.compile(r'<link rel="stylesheet"\s+href="[^"]*font-awesome[^"]*">\s*')


def player_html(animation: FuncAnimation, name: str = "routing", alt: str = "") -> str:
    """The animation as an HTML page with a player (``to_jshtml``), its frames as PNGs,
    its elements named ``name`` instead of a random id, its buttons labelled with
    characters, its first frame the picture's source (with ``alt`` as its text)."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"name must be a JavaScript identifier, got {name!r}")
    if not isinstance(alt, str):
        raise TypeError(f"alt must be a str, got {type(alt).__name__}")
    page = animation.to_jshtml(default_mode="once")
    found = set(RANDOM_ID.findall(page.split("data:image/png;base64,")[0]))
    if len(found) != 1:
        raise RuntimeError(
            f"expected one random id in matplotlib's player, found {found}"
        )
    page = page.replace(found.pop(), name)
    page, links = FONT_LINK.subn("", page)
    for icon, characters in ICONS.items():
        page, count = re.subn(rf'<i class="{icon}"></i>', characters, page)
        if count != 1:
            raise RuntimeError(f"expected one {icon!r} button in matplotlib's player")
    first = re.search(r'frames\[0\] = "(data:image/png;base64,(?:[^"\\]|\\\n)*)"', page)
    image = f'<img id="_anim_img{name}">'
    if links != 1 or first is None or image not in page:
        raise RuntimeError(
            "matplotlib's player is not laid out as this function expects"
        )
    source = first[1].replace("\\\n", "")
    page = page.replace(first[0], "frames[0] = document.getElementById(img_id).src")
    return page.replace(
        image, f'<img id="_anim_img{name}" src="{source}" alt="{html.escape(alt)}">'
    )
