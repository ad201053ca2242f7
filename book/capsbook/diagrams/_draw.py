"""What the diagrams share: their colours and style, the :class:`Diagram` they return,
the boxes, arrows and squares they draw, and what they read off a model (the checks of
their arguments, the decoder's layers, the shape after every stage)."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from torch import Tensor, nn

from capsnotes import CapsNet

#: Colours of the diagrams (those of capsnotes.plots).
BLUE, VERMILLION, GREEN, GREY = "#0072B2", "#D55E00", "#009E73", "#777777"
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


# The drawing: one blank canvas measured in inches, and the marks on it.


def canvas(width: float, height: float) -> tuple[Figure, Any]:
    """A figure of ``width`` × ``height`` inches and one axes without axis lines that
    fills it, its coordinates in inches from the bottom left corner."""
    with plt.rc_context(SVG_STYLE):
        figure = plt.figure(figsize=(width, height))
        ax = figure.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")
    plt.close(figure)  # shown through Diagram, not by the notebook's backend
    return figure, ax


def box(
    ax: Any, x: float, y: float, w: float, h: float, text: str, colour: str
) -> None:
    """A pale rounded box of ``colour``, ``text`` centred in it."""
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


def arrow(ax: Any, start: tuple[float, float], end: tuple[float, float]) -> None:
    """A grey arrow from ``start`` to ``end``."""
    ax.add_patch(
        FancyArrowPatch(
            start, end, arrowstyle="-|>", mutation_scale=10, color=GREY, lw=1
        )
    )


def square(ax: Any, x: float, y: float, w: float, h: float, **style: Any) -> None:
    """A rectangle with square corners, its bottom left at ``(x, y)``, drawn in
    ``style`` (the patch's properties: facecolor, edgecolor, lw, alpha)."""
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="square,pad=0", **style))


# What the diagrams read off a model, and the checks of what they are given.


def check_model(model: object) -> CapsNet:
    """``model``, if it is a CapsNet."""
    if not isinstance(model, CapsNet):
        raise TypeError(
            f"the diagrams draw a capsnotes.CapsNet, got {type(model).__name__}"
        )
    return model


def check_shape(value: object, expected: tuple[int, ...], what: str) -> Tensor:
    """``value``, if it is a tensor of shape ``expected``; otherwise a ValueError whose
    message starts with ``what`` and ends with the shape expected and the one got."""
    if not torch.is_tensor(value) or tuple(value.shape) != expected:
        got = tuple(value.shape) if torch.is_tensor(value) else type(value).__name__
        raise ValueError(f"{what} {list(expected)}, got {got}")
    return value


def is_index(value: object, count: int) -> bool:
    """Whether ``value`` is an int (not a bool) in ``[0, count)``."""
    return not isinstance(value, bool) and isinstance(value, int) and 0 <= value < count


def linear_layers(model: CapsNet) -> list[nn.Linear]:
    """The decoder's fully connected layers, in order."""
    return [layer for layer in model.decoder.layers if isinstance(layer, nn.Linear)]


@torch.no_grad()
def decoder_shapes(model: CapsNet, masked: Tensor) -> dict[str, tuple[int, ...]]:
    """The shape after each of the decoder's layers (``decoder layer 1``, …), given
    the masked and flattened capsules ``masked``."""
    shapes = {}
    hidden = masked
    for index, layer in enumerate(linear_layers(model), start=1):
        hidden = layer(hidden)
        shapes[f"decoder layer {index}"] = tuple(hidden.shape)
    return shapes


@torch.no_grad()
def forward_shapes(model: CapsNet) -> dict[str, tuple[int, ...]]:
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
        **decoder_shapes(model, masked),
    }
    shapes["reconstruction"] = tuple(model(image, label).reconstructions.shape)
    return shapes
