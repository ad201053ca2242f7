"""The whole network (the paper's Figures 1 and 2) with the tensor shape after every
stage: the encoder's five stages down the left, then its two heads side by side."""

from __future__ import annotations

from typing import Any

from capsbook.diagrams._draw import (
    BLUE,
    GREEN,
    VERMILLION,
    WIDTH,
    Diagram,
    arrow,
    box,
    canvas,
    check_model,
    forward_shapes,
    linear_layers,
    shape_text,
)
from capsnotes import CapsNet

#: A stage: the key of its shape, the text of its box and the box's colour.
Stage = tuple[str, str, str]

#: The encoder's column: its left edge and width, the height of a box and the gap
#: between two boxes, in inches.
X, W, H, GAP = 0.15, 3.75, 0.6, 0.3
#: The space above the first box.
TOP = 0.2


def architecture(model: CapsNet) -> Diagram:
    """The whole network, top to bottom, with the shape after every stage."""
    model = check_model(model)
    shapes = forward_shapes(model)
    sizes = [layer.in_features for layer in linear_layers(model)]
    sizes.append(linear_layers(model)[-1].out_features)
    # 6.5 inches wide, the book's column, so that 9-point text stays 9 points
    height = TOP + 8 * (H + GAP) + 0.05  # five stages, then the decoder's three below
    figure, ax = canvas(WIDTH, height)
    y = _draw_encoder(ax, _encoder_stages(model, shapes), shapes, height - TOP - H)
    _draw_heads(ax, _lengths_stage(), _decoder_stages(sizes), shapes, y)
    numbers = {"routing_iterations": model.digits.iterations, "decoder_sizes": sizes}
    return Diagram("architecture", figure, shapes, numbers)


def _encoder_stages(model: CapsNet, shapes: dict[str, tuple[int, ...]]) -> list[Stage]:
    """The image, the convolutions, the votes and routing, as the model sets them."""
    config = model.config
    conv1, primary = model.conv1, model.primary.conv
    types, dim = model.primary.capsule_channels, model.primary.capsule_dim
    # the square grid
    side = int(round((shapes["primary capsules"][1] // types) ** 0.5))
    return [
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
            VERMILLION,
        ),
        (
            "digit capsules",
            f"routing by agreement, r = {model.digits.iterations} "
            f"iterations:\n{config.num_classes} digit capsules $v_j$ of "
            f"{config.digit_dim}-D",
            VERMILLION,
        ),
    ]


def _lengths_stage() -> Stage:
    """The left head: the lengths and the margin loss."""
    return (
        "lengths",
        r"lengths $\|v_j\|$: separate class" "\nprobabilities → margin loss",
        GREEN,
    )


def _decoder_stages(sizes: list[int]) -> list[Stage]:
    """The right head: the mask, the decoder of layers ``sizes`` and the
    reconstruction."""
    return [
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


def _draw_encoder(
    ax: Any, stages: list[Stage], shapes: dict[str, tuple[int, ...]], y: float
) -> float:
    """The stages down the encoder's column, the first box's bottom at ``y``: each
    with its shape on its right and an arrow from the box above. Returns where the
    box below the last one would stand."""
    for key, text, colour in stages:
        box(ax, X, y, W, H, text, colour)
        ax.text(
            X + W + 0.12,
            y + H / 2,
            shape_text(shapes[key]),
            va="center",
            fontsize=9,
            family="monospace",
        )
        if key != "image":
            arrow(ax, (X + W / 2, y + H + GAP), (X + W / 2, y + H))
        y -= H + GAP
    return y


def _draw_heads(
    ax: Any,
    left: Stage,
    right: list[Stage],
    shapes: dict[str, tuple[int, ...]],
    y: float,
) -> None:
    """The two heads below the encoder, their first boxes' bottom at ``y``: ``left``
    in one box, ``right`` in a column of boxes, each box with its shape under it and
    an arrow from the encoder's last box or the box above."""
    top = y + H + GAP
    bx, bw = 0.15, 2.55
    key, text, colour = left
    box(ax, bx, y, bw, H, text, colour)
    ax.text(bx + 0.1, y - 0.2, shape_text(shapes[key]), fontsize=9, family="monospace")
    arrow(ax, (X + W / 2 - 0.8, top), (bx + bw / 2, y + H))
    rx, rw = 3.0, 3.35
    ry = y
    for index, (key, text, colour) in enumerate(right):
        box(ax, rx, ry, rw, H, text, colour)
        ax.text(
            rx + 0.1, ry - 0.2, shape_text(shapes[key]), fontsize=9, family="monospace"
        )
        start = (X + W / 2 + 0.8, top) if index == 0 else (rx + rw / 2, ry + H + GAP)
        arrow(ax, start, (rx + rw / 2, ry + H))
        ry -= H + GAP
