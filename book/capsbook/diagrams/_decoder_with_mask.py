"""The paper's Figure 2 for one image: its digit capsules, the mask, the decoder's
layers with the shape after each, and the image the decoder draws."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from torch import Tensor, nn

from capsbook.diagrams._draw import (
    GREY,
    WIDTH,
    Diagram,
    check_model,
    check_shape,
    decoder_shapes,
    is_index,
    linear_layers,
    shape_text,
)
from capsnotes import CapsNet

#: Where the two grids of capsules (left: all; right: masked) stand, as fractions of
#: the figure's width.
LEFTS = (0.07, 0.3)


@torch.no_grad()
def decoder_with_mask(model: CapsNet, capsules: Tensor, label: int) -> Diagram:
    """The paper's Figure 2 for one image: its digit capsules ``[classes, dim]``, all
    but ``label``'s masked to zero, flattened, the decoder's layers, and the image
    drawn."""
    model = check_model(model)
    config = model.config
    expected = (config.num_classes, config.digit_dim)
    capsules = check_shape(capsules, expected, "capsules must have shape")
    if not is_index(label, expected[0]):
        raise ValueError(f"label must be a class in [0, {expected[0]}), got {label}")
    keep = nn.functional.one_hot(torch.tensor([label]), config.num_classes).to(
        capsules.dtype
    )
    masked = (capsules[None] * keep[..., None]).flatten(1)
    shapes = {"digit capsules": (1, *expected), "masked capsules": tuple(masked.shape)}
    shapes.update(decoder_shapes(model, masked))
    image = model.decoder(capsules[None], torch.tensor([label])).view(
        1, config.in_channels, config.image_size, config.image_size
    )
    shapes["reconstruction"] = tuple(image.shape)
    figure = plt.figure(figsize=(WIDTH, 3.9))
    plt.close(figure)
    _draw_capsules(figure, capsules, label, shapes)
    _draw_layers(figure, model, shapes)
    _draw_image(figure, image, label)
    numbers = {"label": label, "reconstruction": image}
    return Diagram("decoder with mask", figure, shapes, numbers)


def _draw_capsules(
    figure: Figure, capsules: Tensor, label: int, shapes: dict[str, tuple[int, ...]]
) -> None:
    """The digit capsules ``[classes, dim]`` as a grid of their components coloured by
    value, the same with all but ``label``'s masked beside it, and their colour bar."""
    classes, dim = capsules.shape
    values = capsules.T.numpy()  # [dim, classes]
    limit = float(np.abs(values).max())
    colours = plt.get_cmap("RdBu_r").with_extremes(bad="#d9d9d9")  # masked: solid grey
    others = np.broadcast_to(np.arange(classes)[None, :] != label, values.shape)
    panels = (
        (
            values,
            f"digit capsules v\n{shape_text(shapes['digit capsules'])}",
            "all ten",
        ),
        (
            np.ma.masked_where(others, values),
            f"masked\n{shape_text(shapes['masked capsules'])}",
            f"{label}'s kept, the\nothers 0 (grey)",
        ),
    )
    for left, (shown, title, note) in zip(LEFTS, panels):
        grid = figure.add_axes((left, 0.24, 0.16, 0.6))
        drawn = grid.imshow(shown, cmap=colours, vmin=-limit, vmax=limit, aspect="auto")
        grid.set_xticks(range(classes))
        grid.set_xlabel(f"digit capsule:\n{note}", fontsize=8.5)
        if left == LEFTS[0]:
            grid.set_ylabel(f"its {dim} components", fontsize=8.5)
        grid.tick_params(labelsize=8)
        grid.set_yticks([])
        grid.set_title(title, fontsize=8.5)
    bar = figure.colorbar(drawn, cax=figure.add_axes((0.475, 0.24, 0.012, 0.6)))
    bar.set_label("component value", fontsize=8)
    bar.ax.tick_params(labelsize=8)
    figure.text(
        0.265, 0.54, "mask\n→", ha="center", va="center", fontsize=9, color=GREY
    )


def _draw_layers(
    figure: Figure, model: CapsNet, shapes: dict[str, tuple[int, ...]]
) -> None:
    """The decoder's steps top to bottom, each with the shape after it, joined by
    arrows: flatten, every layer, the image."""
    text = figure.add_axes((0.6, 0.4, 0.4, 0.58))
    text.axis("off")
    layers = linear_layers(model)
    lines = [f"flatten: {shapes['masked capsules'][1]}"]
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


def _draw_image(figure: Figure, image: Tensor, label: int) -> None:
    """The image the decoder drew from capsule ``label``."""
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
