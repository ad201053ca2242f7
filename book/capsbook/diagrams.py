"""Pictures of the mechanism, drawn from a model object, so that they cannot drift from
the code: every shape a diagram prints is read from a forward pass of the model it is
given, and every number it shows is computed from that model.

* :func:`architecture` — the whole network (the paper's Figures 1 and 2) with the tensor
  shape after every stage;
* :func:`primary_grouping` — how the primary convolution's channels become capsules;
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

from capsnotes import CapsNet, dynamic_routing

#: Colours of the diagrams (those of capsnotes.plots).
BLUE, ORANGE, GREEN, GREY = "#0072B2", "#D55E00", "#009E73", "#777777"
#: What keeps a diagram's SVG the same from one drawing to the next.
SVG_STYLE = {"svg.hashsalt": "capsnotes", "svg.fonttype": "none", "font.size": 9}


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
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9.5)


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
    x, w, h, gap = 0.3, 4.4, 0.66, 0.38
    height = 0.3 + 8 * (h + gap) + 0.1  # five stages, then the decoder's three below
    figure, ax = _figure(8.2, height)
    y = height - 0.3 - h
    for key, text, colour in steps:
        _box(ax, x, y, w, h, text, colour)
        ax.text(
            x + w + 0.15,
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
            r"lengths $\|v_j\|$: the class probabilities" "\n→ margin loss",
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
    bx, bw = 0.3, 3.3
    key, text, colour = left[0]
    _box(ax, bx, y, bw, h, text, colour)
    ax.text(bx + 0.1, y - 0.22, shape_text(shapes[key]), fontsize=9, family="monospace")
    _arrow(ax, (x + w / 2 - 0.9, top), (bx + bw / 2, y + h))
    rx, rw = 4.1, 3.9
    ry = y
    for index, (key, text, colour) in enumerate(right):
        _box(ax, rx, ry, rw, h, text, colour)
        ax.text(
            rx + 0.1, ry - 0.22, shape_text(shapes[key]), fontsize=9, family="monospace"
        )
        start = (x + w / 2 + 0.9, top) if index == 0 else (rx + rw / 2, ry + h + gap)
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
    figure, ax = _figure(8.6, 4.0)
    # each type: its `dim` maps of rows × cols drawn as a stack; the first two types and
    # the last, and one grid position marked through the stack of one type
    shown_groups = [0, 1, types - 1] if types > 2 else list(range(types))
    side, step = 0.95, 0.07  # a map's size, and the offset between stacked maps
    cell = side / max(rows, cols)
    marked = (rows // 2, cols // 2)
    x = 0.35
    anchor = (0.0, 0.0)
    for group_index, group in enumerate(shown_groups):
        if group_index == 2 and types > 3:
            ax.text(x + 0.1, 1.9, "…", fontsize=14, ha="center", va="center")
            x += 0.5
        colour = [BLUE, ORANGE, GREEN][group_index % 3]
        for k in reversed(range(dim)):  # back to front
            left, bottom = x + k * step, 1.2 + k * step
            ax.add_patch(
                FancyBboxPatch(
                    (left, bottom),
                    side,
                    side,
                    boxstyle="square,pad=0",
                    facecolor="white",
                    edgecolor=colour,
                    lw=0.8,
                )
            )
            ax.add_patch(
                FancyBboxPatch(
                    (left, bottom),
                    side,
                    side,
                    boxstyle="square,pad=0",
                    facecolor=colour,
                    edgecolor="none",
                    alpha=0.12,
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
            ax.plot([x + i * cell] * 2, [1.2, 1.2 + side], color=colour, lw=0.3)
            ax.plot([x, x + side], [1.2 + i * cell] * 2, color=colour, lw=0.3)
        ax.text(
            x + side / 2 + dim * step / 2,
            1.2 + side + dim * step + 0.12,
            f"type {group}: channels\n{group * dim}–{group * dim + dim - 1}",
            ha="center",
            fontsize=8.5,
        )
        # the capsule pulled out: of the last type
        if group_index == len(shown_groups) - 1:
            anchor = (  # the marked cell of the front map
                x + (marked[1] + 0.5) * cell,
                1.2 + (rows - marked[0] - 0.5) * cell,
            )
        x += side + dim * step + 0.35
    ax.text(
        0.35,
        3.65,
        f"primary convolution output: {channels} maps of {rows}×{cols} "
        f"= {types} types × {dim} maps   {shape_text(tuple(maps.shape))}",
        fontsize=9,
    )
    ax.text(
        0.35,
        0.85,
        f"a stack = the {dim} maps of one type; the marked cell, taken "
        f"through the stack, is one capsule",
        fontsize=8.5,
        color=GREY,
    )
    vector_x = x + 0.45
    for k in range(dim):
        ax.add_patch(
            FancyBboxPatch(
                (vector_x + 0.17 * k, 1.75),
                0.15,
                0.38,
                boxstyle="square,pad=0",
                facecolor=GREEN,
                alpha=0.3 + 0.5 * k / dim,
                edgecolor="white",
            )
        )
    _arrow(ax, anchor, (vector_x - 0.05, 1.94))
    ax.text(
        vector_x, 2.3, f"$u_i$: {dim} numbers,\none per map,\nthen squashed", fontsize=8
    )
    ax.text(
        0.35,
        0.3,
        f"{types} types × {rows}×{cols} positions = {u.shape[1]:,} capsules "
        f"of {dim}-D   {shape_text(tuple(u.shape))}",
        fontsize=9,
    )
    numbers = {"types": types, "dim": dim, "grid": (rows, cols), "capsules": u.shape[1]}
    if config.primary_channels != types:  # the configuration and the layer must agree
        raise ValueError("the model's primary capsules do not match its configuration")
    return Diagram("primary grouping", figure, shapes, numbers)


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
        figsize=(1.6 + 2.9 * iterations, 4.1),
        gridspec_kw={"width_ratios": [0.55] + [1] * iterations},
    )
    plt.close(figure)
    bars, panels = axes[0], axes[1:]
    rows = [parents - 1 - j for j in range(parents)]  # parent 0 at the top
    names = [f"{j}{' (label)' if j == label else ''}" for j in range(parents)]
    bars.barh(rows, votes.tolist(), color=ORANGE, alpha=0.7, height=0.6)
    bars.set_yticks(rows, names, fontsize=9)
    bars.set_ylim(-0.8, parents - 0.2)
    bars.set_xlabel("vote length $\\|\\hat{u}_{j|i}\\|$", fontsize=9)
    bars.tick_params(axis="x", labelsize=8)
    bars.set_title("its votes", fontsize=10)
    for side in ("top", "right"):
        bars.spines[side].set_visible(False)
    heaviest = float(mine.max())
    for t, ax in enumerate(panels):
        ax.set_xlim(-0.2, 2.0)
        ax.set_ylim(-0.8, parents - 0.2)
        ax.axis("off")
        middle = (parents - 1) / 2
        for j in range(parents):
            share = float(mine[t, j])
            ax.plot(
                [0, 1],
                [middle, rows[j]],
                color=ORANGE,
                lw=0.3 + 7 * share / heaviest,
                alpha=0.85,
                solid_capstyle="round",
                zorder=1,
            )
            ax.plot(
                1, rows[j], "o", color=GREEN, markersize=3 + 9 * float(lengths[t, j])
            )
            weight = "bold" if j == label else "normal"
            added = round(float(agreement[t, j]), 2) + 0.0  # no "-0.00"
            ax.text(
                1.12,
                rows[j],
                f"{share:.3f}",
                va="center",
                fontsize=8.5,
                fontweight=weight,
            )
            ax.text(
                1.95,
                rows[j],
                f"{added:+.2f}",
                va="center",
                ha="right",
                fontsize=8.5,
                fontweight=weight,
            )
        ax.plot(0, middle, "o", color=BLUE, markersize=10, zorder=2)
        ax.text(1.12, parents - 0.4, "$c_{ij}$", fontsize=9, color=GREY)
        ax.text(1.95, parents - 0.4, "agreement", fontsize=8, color=GREY, ha="right")
        ax.set_title(f"iteration {t + 1}", fontsize=10)
    figure.suptitle(
        f"child {child} (capsule type {kind}, row {row}, column {column} of the "
        f"{grid}×{grid} grid): line width = its coupling $c_{{ij}}$ to parent $j$, dot "
        "size = $\\|v_j\\|$;\nagreement = $\\hat{u}_{j|i}\\cdot v_j$, added to "
        "$b_{ij}$ "
        "after the iteration",
        fontsize=9,
        y=1.0,
    )
    figure.subplots_adjust(left=0.08, right=0.99, bottom=0.13, top=0.82, wspace=0.15)
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
    figure = plt.figure(figsize=(9.6, 3.6))
    plt.close(figure)
    values = capsules.T.numpy()  # [dim, classes]
    limit = float(np.abs(values).max())
    colours = plt.get_cmap("RdBu_r").with_extremes(bad="#d9d9d9")  # masked: solid grey
    others = np.broadcast_to(np.arange(expected[0])[None, :] != label, values.shape)
    panels = (
        (
            0.04,
            values,
            f"digit capsules v {shape_text(shapes['digit capsules'])}",
            "all ten",
        ),
        (
            0.26,
            np.ma.masked_where(others, values),
            f"masked {shape_text(shapes['masked capsules'])}",
            f"{label}'s kept, the others\nset to 0 (grey)",
        ),
    )
    for left, shown, title, note in panels:
        grid = figure.add_axes((left, 0.24, 0.15, 0.6))
        drawn = grid.imshow(shown, cmap=colours, vmin=-limit, vmax=limit, aspect="auto")
        grid.set_xticks(range(expected[0]))
        grid.set_xlabel(f"digit capsule: {note}", fontsize=8.5)
        if left == panels[0][0]:
            grid.set_ylabel(f"its {expected[1]} components", fontsize=8.5)
        grid.tick_params(labelsize=8)
        grid.set_yticks([])
        grid.set_title(title, fontsize=9)
    bar = figure.colorbar(drawn, cax=figure.add_axes((0.41, 0.24, 0.008, 0.6)))
    bar.set_label("component value", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    figure.text(0.22, 0.54, "mask\n→", ha="center", va="center", fontsize=9, color=GREY)
    text = figure.add_axes((0.47, 0.05, 0.33, 0.9))
    text.axis("off")
    layers = _linear_layers(model)
    lines = [f"flatten: {masked.shape[1]}"]
    for index, layer in enumerate(layers, start=1):
        act = "sigmoid" if index == len(layers) else "ReLU"
        lines.append(
            f"Linear {layer.in_features} → {layer.out_features}, {act}   "
            f"{shape_text(shapes[f'decoder layer {index}'])}"
        )
    lines.append(f"as an image   {shape_text(shapes['reconstruction'])}  →")
    for index, line in enumerate(lines):
        text.text(0.02, 0.85 - 0.17 * index, line, fontsize=8.5, family="monospace")
        if index:
            text.annotate(
                "",
                (0.1, 0.85 - 0.17 * index + 0.09),
                (0.1, 0.85 - 0.17 * (index - 1) - 0.03),
                arrowprops={"arrowstyle": "-|>", "color": GREY},
            )
    picture = figure.add_axes((0.81, 0.24, 0.17, 0.6))
    picture.imshow(image[0, 0].numpy(), cmap="gray_r", vmin=0, vmax=1)
    picture.set_xticks([])
    picture.set_yticks([])
    picture.set_title(f"drawn from capsule {label}", fontsize=9)
    numbers = {"label": label, "reconstruction": image}
    return Diagram("decoder with mask", figure, shapes, numbers)
