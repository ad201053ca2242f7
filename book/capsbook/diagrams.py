"""Pictures of the mechanism, drawn from a model object, so that they cannot drift from
the code: every shape a diagram prints is read from a forward pass of the model it is
given, and every number it shows is computed from that model.

* :func:`architecture` — the whole network (the paper's Figures 1 and 2) with the tensor
  shape after every stage;
* :func:`primary_grouping` — how the primary convolution's channels become capsules;
  :func:`reshaped_grouping` — where the popular reshape puts the same numbers;
* :func:`routing_of_one_child` — one primary capsule's votes and its couplings to the
  parents, iteration by iteration (:func:`most_routed_child` picks a child worth
  watching);
* :func:`decoder_with_mask` — the mask and the decoder, and the image it draws.

Each returns a :class:`Diagram`, which Jupyter, Jupyter Book and Colab show as SVG.
Hand-written with matplotlib: no diagram library reads tensor shapes off a model.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from torch import Tensor, nn

from capsnotes import CapsNet, PrimaryCapsules, dynamic_routing
from capsnotes.experiments.mistakes import ReshapedPrimaryCapsules

#: Colours of the diagrams (those of capsnotes.plots).
BLUE, ORANGE, GREEN, GREY = "#0072B2", "#D55E00", "#009E73", "#777777"
#: What keeps a diagram's SVG the same from one drawing to the next.
SVG_STYLE = {"svg.hashsalt": "capsnotes", "svg.fonttype": "none", "font.size": 9}
#: The width of every diagram, in inches: the book's column, so that text set in 8 or 9
#: points is shown in 8 or 9 points.
WIDTH = 6.5


def shape_text(shape: tuple[int, ...]) -> str:
    """A shape as the diagrams print it, the batch axis as B: ``[B, 1152, 8]``."""
    return "[" + ", ".join(["B", *(str(n) for n in shape[1:])]) + "]"


@dataclass
class Diagram:
    """A drawn figure, the shapes it prints (stage → shape, batch axis included) and the
    numbers it shows. Jupyter displays it as SVG."""

    name: str
    figure: Figure
    shapes: dict[str, tuple[int, ...]]
    numbers: dict[str, Any] = field(default_factory=dict)

    def svg(self) -> str:
        """The figure as SVG text, the same for the same drawing."""
        buffer = io.StringIO()
        with plt.rc_context(SVG_STYLE):
            self.figure.savefig(buffer, format="svg", metadata={"Date": None})
        return buffer.getvalue()

    def _repr_svg_(self) -> str:
        return self.svg()

    def save(self, path: str | Path, dpi: int = 110) -> Path:
        """Write the figure to ``path`` (SVG or, by the suffix, a raster format)."""
        path = Path(path)
        if path.suffix == ".svg":
            path.write_text(self.svg())
        else:
            self.figure.savefig(path, dpi=dpi)
        return path

    def __repr__(self) -> str:
        stages = "; ".join(
            f"{name} {shape_text(shape)}" for name, shape in self.shapes.items()
        )
        return f"Diagram({self.name}: {stages})"


def _figure(width: float, height: float) -> tuple[Figure, Any]:
    with plt.rc_context(SVG_STYLE):
        figure = plt.figure(figsize=(width, height))
        ax = figure.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")
    plt.close(figure)  # shown through Diagram, not by the notebook's backend
    return figure, ax


def _box(
    ax: Any, x: float, y: float, w: float, h: float, text: str, colour: str
) -> None:
    ax.add_patch(
        FancyBboxPatch(
            (x, y),
            w,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            facecolor=colour,
            edgecolor="none",
            alpha=0.15,
        )
    )
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9)


def _arrow(ax: Any, start: tuple[float, float], end: tuple[float, float]) -> None:
    ax.add_patch(
        FancyArrowPatch(
            start, end, arrowstyle="-|>", mutation_scale=10, color=GREY, lw=1
        )
    )


def _check_model(model: object) -> CapsNet:
    if not isinstance(model, CapsNet):
        raise TypeError(
            f"the diagrams draw a capsnotes.CapsNet, got {type(model).__name__}"
        )
    return model


def _linear_layers(model: CapsNet) -> list[nn.Linear]:
    return [layer for layer in model.decoder.layers if isinstance(layer, nn.Linear)]


@torch.no_grad()
def _forward_shapes(model: CapsNet) -> dict[str, tuple[int, ...]]:
    """The shape after every stage, from a forward pass of one blank image."""
    config = model.config
    device = next(model.parameters()).device
    image = torch.zeros(
        1, config.in_channels, config.image_size, config.image_size, device=device
    )
    features = torch.relu(model.conv1(image))
    u = model.primary_capsules(image)
    u_hat = model.digits.votes(u)
    v = model.digits(u)
    lengths = torch.linalg.vector_norm(v, dim=-1)
    label = torch.zeros(1, dtype=torch.long, device=device)
    masked = (v * nn.functional.one_hot(label, config.num_classes)[..., None]).flatten(
        1
    )
    shapes = {
        "image": tuple(image.shape),
        "conv1": tuple(features.shape),
        "primary capsules": tuple(u.shape),
        "votes": tuple(u_hat.shape),
        "digit capsules": tuple(v.shape),
        "lengths": tuple(lengths.shape),
        "masked capsules": tuple(masked.shape),
    }
    hidden = masked
    for index, layer in enumerate(_linear_layers(model), start=1):
        hidden = layer(hidden)
        shapes[f"decoder layer {index}"] = tuple(hidden.shape)
    shapes["reconstruction"] = tuple(model(image, label).reconstructions.shape)
    return shapes


def architecture(model: CapsNet) -> Diagram:
    """The whole network, top to bottom, with the shape after every stage."""
    model = _check_model(model)
    config = model.config
    shapes = _forward_shapes(model)
    conv1, primary = model.conv1, model.primary.conv
    types, dim = model.primary.capsule_channels, model.primary.capsule_dim
    # the square grid
    side = int(round((shapes["primary capsules"][1] // types) ** 0.5))
    sizes = [layer.in_features for layer in _linear_layers(model)]
    sizes.append(_linear_layers(model)[-1].out_features)
    steps = [
        (
            "image",
            f"image, {config.in_channels} channel of "
            f"{config.image_size}×{config.image_size}",
            BLUE,
        ),
        (
            "conv1",
            f"conv1: {conv1.kernel_size[0]}×{conv1.kernel_size[0]}, "
            f"{conv1.out_channels} channels, ReLU",
            BLUE,
        ),
        (
            "primary capsules",
            f"primary capsules: conv {primary.kernel_size[0]}×"
            f"{primary.kernel_size[0]}, stride {primary.stride[0]};\n{types} types × "
            f"{side}×{side} positions of {dim}-D, squashed",
            BLUE,
        ),
        (
            "votes",
            r"votes $\hat{u}_{j|i} = W_{ij}\,u_i$: "
            f"one {model.digits.out_dim}×{dim} matrix\n"
            r"per child $i$ and parent $j$",
            ORANGE,
        ),
        (
            "digit capsules",
            f"routing by agreement, r = {model.digits.iterations} "
            f"iterations:\n{config.num_classes} digit capsules $v_j$ of "
            f"{config.digit_dim}-D",
            ORANGE,
        ),
    ]
    # 6.5 inches wide, the book's column, so that 9-point text stays 9 points
    x, w, h, gap = 0.15, 3.75, 0.6, 0.3
    height = 0.2 + 8 * (h + gap) + 0.05  # five stages, then the decoder's three below
    figure, ax = _figure(WIDTH, height)
    y = height - 0.2 - h
    for key, text, colour in steps:
        _box(ax, x, y, w, h, text, colour)
        ax.text(
            x + w + 0.12,
            y + h / 2,
            shape_text(shapes[key]),
            va="center",
            fontsize=9,
            family="monospace",
        )
        if key != "image":
            _arrow(ax, (x + w / 2, y + h + gap), (x + w / 2, y + h))
        y -= h + gap
    # the two heads: lengths → margin loss; mask → decoder → reconstruction
    left = [
        (
            "lengths",
            r"lengths $\|v_j\|$: separate class" "\nprobabilities → margin loss",
            GREEN,
        ),
    ]
    right = [
        (
            "masked capsules",
            "mask: keep the label's capsule\n(the prediction's at test time)",
            GREEN,
        ),
        (
            f"decoder layer {len(sizes) - 1}",
            "decoder: " + " → ".join(str(s) for s in sizes) + "\nReLU, ReLU, sigmoid",
            GREEN,
        ),
        (
            "reconstruction",
            f"reconstruction\n→ {0.0005:g} × summed squared error",
            GREEN,
        ),
    ]
    top = y + h + gap
    bx, bw = 0.15, 2.55
    key, text, colour = left[0]
    _box(ax, bx, y, bw, h, text, colour)
    ax.text(bx + 0.1, y - 0.2, shape_text(shapes[key]), fontsize=9, family="monospace")
    _arrow(ax, (x + w / 2 - 0.8, top), (bx + bw / 2, y + h))
    rx, rw = 3.0, 3.35
    ry = y
    for index, (key, text, colour) in enumerate(right):
        _box(ax, rx, ry, rw, h, text, colour)
        ax.text(
            rx + 0.1, ry - 0.2, shape_text(shapes[key]), fontsize=9, family="monospace"
        )
        start = (x + w / 2 + 0.8, top) if index == 0 else (rx + rw / 2, ry + h + gap)
        _arrow(ax, start, (rx + rw / 2, ry + h))
        ry -= h + gap
    numbers = {"routing_iterations": model.digits.iterations, "decoder_sizes": sizes}
    return Diagram("architecture", figure, shapes, numbers)


@torch.no_grad()
def primary_grouping(model: CapsNet) -> Diagram:
    """How the primary-capsule convolution's output channels become capsules: channel
    ``c·D + k`` at one grid position is component ``k`` of the capsule of type ``c``."""
    model = _check_model(model)
    config = model.config
    device = next(model.parameters()).device
    features = torch.zeros(
        1, model.conv1.out_channels, *_forward_shapes(model)["conv1"][2:], device=device
    )
    maps = model.primary.conv(features)
    u = model.primary(features)
    channels, rows, cols = maps.shape[1:]
    types, dim = model.primary.capsule_channels, model.primary.capsule_dim
    shapes = {
        "primary convolution": tuple(maps.shape),
        "primary capsules": tuple(u.shape),
    }
    figure, ax = _figure(WIDTH, 3.5)
    # each type: its `dim` maps of rows × cols drawn as a stack; the first two types and
    # the last, and one grid position marked through the stack of each type
    shown_groups = [0, 1, types - 1] if types > 2 else list(range(types))
    side, step = 0.8, 0.06  # a map's size, and the offset between stacked maps
    cell = side / max(rows, cols)
    marked = (rows // 2, cols // 2)
    base = 1.05  # the bottom of the front maps
    x = 0.15
    anchor = (0.0, 0.0)
    for group_index, group in enumerate(shown_groups):
        if group_index == 2 and types > 3:
            ax.text(x + 0.1, base + 0.6, "…", fontsize=14, ha="center", va="center")
            x += 0.4
        colour = [BLUE, ORANGE, GREEN][group_index % 3]
        for k in reversed(range(dim)):  # back to front
            left, bottom = x + k * step, base + k * step
            for fill, alpha in (("white", 1.0), (colour, 0.12)):
                ax.add_patch(
                    FancyBboxPatch(
                        (left, bottom),
                        side,
                        side,
                        boxstyle="square,pad=0",
                        facecolor=fill,
                        edgecolor=colour if fill == "white" else "none",
                        lw=0.8,
                        alpha=alpha,
                    )
                )
            r, c = marked
            ax.add_patch(
                FancyBboxPatch(
                    (left + c * cell, bottom + (rows - 1 - r) * cell),
                    cell,
                    cell,
                    boxstyle="square,pad=0",
                    facecolor=colour,
                    edgecolor="none",
                    alpha=0.6,
                )
            )
        for i in range(1, max(rows, cols)):  # the grid on the front map
            ax.plot([x + i * cell] * 2, [base, base + side], color=colour, lw=0.3)
            ax.plot([x, x + side], [base + i * cell] * 2, color=colour, lw=0.3)
        ax.text(
            x + side / 2 + dim * step / 2,
            base + side + dim * step + 0.1,
            f"type {group}: channels\n{group * dim}–{group * dim + dim - 1}",
            ha="center",
            fontsize=8.5,
        )
        if group_index == len(shown_groups) - 1:  # the capsule pulled out: of the last
            anchor = (
                x + (marked[1] + 0.5) * cell,
                base + (rows - marked[0] - 0.5) * cell,
            )
        x += side + dim * step + 0.25
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
    vector_x = x + 0.15
    width = min(0.17, (WIDTH - 0.1 - vector_x) / dim)
    for k in range(dim):
        ax.add_patch(
            FancyBboxPatch(
                (vector_x + width * k, base + 0.45),
                width * 0.9,
                0.38,
                boxstyle="square,pad=0",
                facecolor=GREEN,
                alpha=0.3 + 0.5 * k / dim,
                edgecolor="white",
            )
        )
    _arrow(ax, anchor, (vector_x - 0.03, base + 0.64))
    ax.text(
        vector_x,
        base + 1.0,
        f"$u_i$: {dim} numbers,\none per map,\nthen squashed",
        fontsize=8.5,
    )
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


@torch.no_grad()
def reshaped_grouping(model: CapsNet, channels: int = 2) -> Diagram:
    """The popular wrong grouping
    (``capsnotes.experiments.mistakes.ReshapedPrimaryCapsules``): the convolution's
    ``[B, C·D, H, W]`` output reshaped straight to ``[B, C·H·W, D]``. The first
    ``channels`` maps, each number labelled with the capsule it lands in, beside where
    the paper's grouping (``model.primary``) puts the same numbers."""
    model = _check_model(model)
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
    figure, ax = _figure(WIDTH, 2.45)
    cell = min(0.2, 2.6 / (channels * cols + channels - 1))
    top = 1.85
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
        ax.text(left, top + 0.4, title, fontsize=9)
        for channel in range(channels):
            x0 = left + channel * (cols + 1) * cell
            ax.text(x0, top + 0.12, f"channel {channel}", fontsize=8.5)
            for r in range(rows):
                for c in range(cols):
                    capsule = int(place[channel, r, c, 0])
                    x, y = x0 + c * cell, top - (r + 1) * cell
                    ax.add_patch(
                        FancyBboxPatch(
                            (x, y),
                            cell,
                            cell,
                            boxstyle="square,pad=0",
                            facecolor=ORANGE if capsule == shown else "#d9d9d9",
                            edgecolor="white",
                            lw=0.8,
                            alpha=0.55 if capsule == shown else 0.45,
                        )
                    )
                    ax.text(
                        x + cell / 2,
                        y + cell / 2,
                        str(capsule),
                        ha="center",
                        va="center",
                        fontsize=8,
                    )
    two = f" (capsule {marked}, orange: of two channels)" if straddling else ""
    ax.text(
        0.15,
        top - rows * cell - 0.2,
        "Each cell is one number of the convolution's output, labelled with the "
        "capsule it joins.\n"
        f"Reshaped, a capsule is {dim} neighbouring positions of one channel{two}.\n"
        f"In capsnotes, it is one position of {dim} channels (capsule 0, orange: "
        f"channels 0–{dim - 1}).",
        fontsize=8.5,
        va="top",
    )
    numbers = {"reshaped": wrong, "paper": right, "straddling": straddling}
    return Diagram("reshaped grouping", figure, shapes, numbers)


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
        v, c = dynamic_routing(u_hat, t, return_coupling=True)
        couplings.append(c[0])
        outputs.append(v[0])
    return u_hat, torch.stack(couplings), torch.stack(outputs)


def _check_image(model: CapsNet, image: object) -> Tensor:
    config = model.config
    expected = (1, config.in_channels, config.image_size, config.image_size)
    if not torch.is_tensor(image) or tuple(image.shape) != expected:
        got = tuple(image.shape) if torch.is_tensor(image) else type(image).__name__
        raise ValueError(
            f"image must be one image of shape {list(expected)}, got {got}"
        )
    return image


@torch.no_grad()
def most_routed_child(model: CapsNet, image: Tensor) -> int:
    """The primary capsule whose coupling to the predicted class grows most from the
    first routing iteration to the last, weighted by the length of its output."""
    model = _check_model(model)
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
    model = _check_model(model)
    image = _check_image(model, image)
    iterations = iterations or model.digits.iterations
    children = model.config.num_primary_capsules
    if (
        isinstance(child, bool)
        or not isinstance(child, int)
        or not 0 <= child < children
    ):
        raise ValueError(
            f"child must be a primary capsule index in [0, {children}), got {child}"
        )
    u_hat, couplings, outputs = _couplings(model, image, iterations)
    mine = couplings[:, child]  # [t, O]
    votes = u_hat[0, child].norm(dim=-1)  # [O]
    lengths = outputs.norm(dim=-1)  # [t, O]
    # û·v after iteration t: [t, O]
    agreement = (u_hat[0, child][None] * outputs).sum(-1)
    parents = mine.shape[1]
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
    bars, panels = axes[0], axes[1:]
    rows = [parents - 1 - j for j in range(parents)]  # parent 0 at the top
    names = [f"{j}{' (label)' if j == label else ''}" for j in range(parents)]
    bars.barh(rows, votes.tolist(), color=ORANGE, alpha=0.7, height=0.6)
    bars.set_yticks(rows, names, fontsize=8.5)
    bars.set_ylim(-0.8, parents - 0.2)
    bars.set_xlabel("vote length $\\|\\hat{u}_{j|i}\\|$", fontsize=8.5)
    bars.tick_params(axis="x", labelsize=8)
    bars.set_title("its votes", fontsize=9)
    for side in ("top", "right"):
        bars.spines[side].set_visible(False)
    heaviest = float(mine.max())
    for t, ax in enumerate(panels):
        ax.set_xlim(-0.1, 2.45)
        ax.set_ylim(-0.8, parents - 0.2)
        ax.axis("off")
        middle = (parents - 1) / 2
        for j in range(parents):
            share = float(mine[t, j])
            ax.plot(
                [0, 0.8],
                [middle, rows[j]],
                color=ORANGE,
                lw=0.3 + 7 * share / heaviest,
                alpha=0.85,
                solid_capstyle="round",
                zorder=1,
            )
            ax.plot(
                0.8, rows[j], "o", color=GREEN, markersize=3 + 7 * float(lengths[t, j])
            )
            weight = "bold" if j == label else "normal"
            added = round(float(agreement[t, j]), 2) + 0.0  # no "-0.00"
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
        last = t + 1 == len(mine)
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


@torch.no_grad()
def decoder_with_mask(model: CapsNet, capsules: Tensor, label: int) -> Diagram:
    """The paper's Figure 2 for one image: its digit capsules ``[classes, dim]``, all
    but ``label``'s masked to zero, flattened, the decoder's layers, and the image
    drawn."""
    model = _check_model(model)
    config = model.config
    expected = (config.num_classes, config.digit_dim)
    if not torch.is_tensor(capsules) or tuple(capsules.shape) != expected:
        got = (
            tuple(capsules.shape)
            if torch.is_tensor(capsules)
            else type(capsules).__name__
        )
        raise ValueError(f"capsules must have shape {list(expected)}, got {got}")
    if (
        isinstance(label, bool)
        or not isinstance(label, int)
        or not 0 <= label < expected[0]
    ):
        raise ValueError(f"label must be a class in [0, {expected[0]}), got {label}")
    keep = nn.functional.one_hot(torch.tensor([label]), config.num_classes).to(
        capsules.dtype
    )
    masked = (capsules[None] * keep[..., None]).flatten(1)
    shapes = {"digit capsules": (1, *expected), "masked capsules": tuple(masked.shape)}
    hidden = masked
    for index, layer in enumerate(_linear_layers(model), start=1):
        hidden = layer(hidden)
        shapes[f"decoder layer {index}"] = tuple(hidden.shape)
    image = model.decoder(capsules[None], torch.tensor([label])).view(
        1, config.in_channels, config.image_size, config.image_size
    )
    shapes["reconstruction"] = tuple(image.shape)
    figure = plt.figure(figsize=(WIDTH, 3.9))
    plt.close(figure)
    values = capsules.T.numpy()  # [dim, classes]
    limit = float(np.abs(values).max())
    colours = plt.get_cmap("RdBu_r").with_extremes(bad="#d9d9d9")  # masked: solid grey
    others = np.broadcast_to(np.arange(expected[0])[None, :] != label, values.shape)
    panels = (
        (
            0.07,
            values,
            f"digit capsules v\n{shape_text(shapes['digit capsules'])}",
            "all ten",
        ),
        (
            0.3,
            np.ma.masked_where(others, values),
            f"masked\n{shape_text(shapes['masked capsules'])}",
            f"{label}'s kept, the\nothers 0 (grey)",
        ),
    )
    for left, shown, title, note in panels:
        grid = figure.add_axes((left, 0.24, 0.16, 0.6))
        drawn = grid.imshow(shown, cmap=colours, vmin=-limit, vmax=limit, aspect="auto")
        grid.set_xticks(range(expected[0]))
        grid.set_xlabel(f"digit capsule:\n{note}", fontsize=8.5)
        if left == panels[0][0]:
            grid.set_ylabel(f"its {expected[1]} components", fontsize=8.5)
        grid.tick_params(labelsize=8)
        grid.set_yticks([])
        grid.set_title(title, fontsize=8.5)
    bar = figure.colorbar(drawn, cax=figure.add_axes((0.475, 0.24, 0.012, 0.6)))
    bar.set_label("component value", fontsize=8)
    bar.ax.tick_params(labelsize=8)
    figure.text(
        0.265, 0.54, "mask\n→", ha="center", va="center", fontsize=9, color=GREY
    )
    text = figure.add_axes((0.6, 0.4, 0.4, 0.58))
    text.axis("off")
    layers = _linear_layers(model)
    lines = [f"flatten: {masked.shape[1]}"]
    for index, layer in enumerate(layers, start=1):
        act = "sigmoid" if index == len(layers) else "ReLU"
        lines.append(
            f"Linear {layer.in_features} → {layer.out_features}, {act}  "
            f"{shape_text(shapes[f'decoder layer {index}'])}"
        )
    lines.append(f"as an image  {shape_text(shapes['reconstruction'])}  ↓")
    step = 0.9 / len(lines)
    for index, line in enumerate(lines):
        text.text(0.0, 0.92 - step * index, line, fontsize=8, family="monospace")
        if index:
            text.annotate(
                "",
                (0.08, 0.92 - step * index + 0.07),
                (0.08, 0.92 - step * (index - 1) - 0.02),
                arrowprops={"arrowstyle": "-|>", "color": GREY},
            )
    picture = figure.add_axes((0.79, 0.03, 0.2, 0.33))
    picture.imshow(image[0, 0].numpy(), cmap="gray_r", vmin=0, vmax=1)
    picture.set_xticks([])
    picture.set_yticks([])
    figure.text(
        0.77,
        0.2,
        f"drawn from\ncapsule {label} →",
        ha="right",
        va="center",
        fontsize=8.5,
    )
    numbers = {"label": label, "reconstruction": image}
    return Diagram("decoder with mask", figure, shapes, numbers)
