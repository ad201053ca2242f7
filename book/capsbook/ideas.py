"""The idea of each mechanism, drawn from real data before its equation.

* :func:`squash_idea` — what squash does to a capsule's length: the ten digit capsules
  of one image, the length of each one's input and of its squashed output;
* :func:`primary_capsule_idea` — what a primary capsule is: the patch of the image one
  capsule sees, in several images, and the 8 numbers it makes of each;
* :func:`margin_idea` — what the margin loss asks of a capsule's length: the loss of a
  present and of an absent class against the length, with the lengths a trained network
  gives real test digits on the curves.

Each computes what it draws with the package's own functions (``squash``, the model's
layers, ``margin_loss``), on white, with the book's colours
(:data:`capsbook.plots.COLORS`) and axis limits fixed in advance, so that float noise
moves no limit, tick or label.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.colors import LinearSegmentedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from torch import Tensor

from capsbook.plots import COLORS, new_figure
from capsnotes import CapsNet, margin_loss, squash

BLUE, VERMILLION, ORANGE = COLORS[0], COLORS[1], COLORS[4]
GREY = "#888888"
#: Negative components blue, positive vermillion, zero white.
DIVERGING = LinearSegmentedColormap.from_list("capsbook", [BLUE, "#ffffff", VERMILLION])


def _float_tensor(name: str, value: object, dims: int) -> Tensor:
    if not torch.is_tensor(value) or not value.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {value!r:.60}")
    if value.dim() != dims or 0 in value.shape:
        raise ValueError(
            f"{name} must have {dims} non-empty dimensions, got {tuple(value.shape)}"
        )
    return value.detach().float().cpu()


def _index(name: str, value: object, count: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count:
        raise ValueError(f"{name} must be an int in [0, {count}), got {value!r}")
    return value


def _picture(name: str, image: object) -> np.ndarray:
    """A grey image ``[1, H, W]`` or ``[H, W]`` in [0, 1], as numpy ``[H, W]``."""
    if torch.is_tensor(image) and image.dim() == 3 and image.shape[0] == 1:
        image = image[0]
    picture = _float_tensor(name, image, 2)
    if picture.min() < 0 or picture.max() > 1:
        raise ValueError(f"{name} must hold pixels in [0, 1]")
    return picture.numpy()


def squash_idea(image: Tensor, s: Tensor, label: int, limit: float = 5.0) -> Figure:
    """One image (``[1, H, W]`` or ``[H, W]``), the total inputs ``s`` ``[classes,
    dim]`` of its digit capsules, and ``label``: the length of each capsule's input
    (left, on ``[0, limit]``) and of ``squash(s)``, its output (right, on ``[0, 1]``,
    the dashed line at 1 that no output reaches). The label's capsule is vermillion, the
    others blue. Raises if an input is longer than ``limit``."""
    picture = _picture("image", image)
    s = _float_tensor("s", s, 2)
    classes = len(s)
    label = _index("label", label, classes)
    if isinstance(limit, bool) or not isinstance(limit, int | float) or limit <= 0:
        raise ValueError(f"limit must be a positive number, got {limit!r}")
    before = torch.linalg.vector_norm(s, dim=1)
    after = torch.linalg.vector_norm(squash(s), dim=1)
    if before.max() > limit:
        raise ValueError(
            f"an input is {before.max():.3g} long, beyond the axis's limit {limit}"
        )
    colours = [VERMILLION if k == label else BLUE for k in range(classes)]
    fig, (left, middle, right) = new_figure(
        ncols=3, width=6.5, height=2.7, gridspec_kw={"width_ratios": [1.1, 2, 2]}
    )
    left.imshow(picture, cmap="gray_r", vmin=0, vmax=1)
    left.set(xticks=[], yticks=[])
    left.set_title(f"label {label}", fontsize=10)
    left.grid(False)
    for spine in left.spines.values():
        spine.set_visible(False)
    rows = np.arange(classes)
    for ax, lengths, top, title in (
        (middle, before, float(limit), "before squash: input ‖s‖"),
        (right, after, 1.0, "after squash: output ‖v‖"),
    ):
        ax.barh(rows, lengths.numpy(), color=colours, height=0.7)
        ax.set_yticks(rows, [str(k) for k in rows])
        ax.set_ylim(classes - 0.5, -0.5)
        ax.set_xlim(0, top * 1.05)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("digit capsule")
        ax.grid(axis="y", visible=False)
    middle.set_xticks(np.arange(0, math.floor(limit) + 1))
    middle.set_xlabel("length")
    right.set_xticks([0, 0.5, 1])
    right.axvline(1.0, color=GREY, linestyle="--", linewidth=1)
    right.set_xlabel("length (always below 1)")
    for tick in (*middle.get_yticklabels(), *right.get_yticklabels()):
        if tick.get_text() == str(label):
            tick.set_color(VERMILLION)
            tick.set_fontweight("bold")
    return fig


def receptive_field(model: CapsNet, row: int, column: int) -> tuple[int, int, int]:
    """The square of image pixels that the primary capsules at grid position ``(row,
    column)`` see: ``(top, left, side)``, from the model's two convolutions (unpadded:
    conv1 with stride 1, the primary convolution with its stride)."""
    config = model.config
    grid = config.primary_grid
    _index("row", row, grid)
    _index("column", column, grid)
    stride = config.primary_stride
    side = config.conv_kernel + config.primary_kernel - 1
    return row * stride, column * stride, side


@torch.no_grad()
def primary_capsule_idea(
    model: CapsNet,
    images: Tensor,
    position: tuple[int, int],
    capsule_type: int,
) -> Figure:
    """One primary capsule (of ``capsule_type``, at grid ``position`` ``(row,
    column)``) in each of ``images`` ``[N, 1, H, W]``: the image with the patch the
    capsule sees outlined in orange (top), and the capsule's components, numbered from
    0, from ``model.primary_capsules``, coloured from blue (-1) through white (0) to
    vermillion (+1) (bottom)."""
    if not isinstance(model, CapsNet):
        raise TypeError(
            f"model must be a capsnotes CapsNet, got {type(model).__name__}"
        )
    config = model.config
    images = _float_tensor("images", images, 4)
    expected = (config.in_channels, config.image_size, config.image_size)
    if tuple(images.shape[1:]) != expected or not 1 <= len(images) <= 8:
        raise ValueError(
            f"images must be 1 to 8 images [N, {', '.join(map(str, expected))}], got "
            f"{tuple(images.shape)}"
        )
    if not isinstance(position, Sequence) or len(position) != 2:
        raise ValueError(f"position must be (row, column), got {position!r}")
    row, column = position
    top, left, side = receptive_field(model, row, column)
    capsule_type = _index("capsule_type", capsule_type, config.primary_channels)
    grid = config.primary_grid
    was_training = model.training
    model.eval()
    u = model.primary_capsules(images.to(next(model.parameters()).device)).cpu()
    model.train(was_training)
    capsules = u.view(len(images), config.primary_channels, grid, grid, -1)
    chosen = capsules[:, capsule_type, row, column].float()  # [N, dim]
    count, dim = chosen.shape
    fig, axes = new_figure(
        ncols=count,
        nrows=2,
        width=1.25 * count + 0.7,
        height=2.2,
        style={"axes.grid": False},
        squeeze=False,
        gridspec_kw={"height_ratios": [4, 1]},
    )
    for n in range(count):
        image_ax, strip_ax = axes[0, n], axes[1, n]
        image_ax.imshow(images[n, 0].numpy(), cmap="gray_r", vmin=0, vmax=1)
        image_ax.add_patch(
            Rectangle(
                (left - 0.5, top - 0.5),
                side,
                side,
                fill=False,
                edgecolor=ORANGE,
                linewidth=2,
            )
        )
        image_ax.set(xticks=[], yticks=[])
        for spine in image_ax.spines.values():
            spine.set(visible=True, color="#cccccc")
        strip_ax.imshow(
            chosen[n][None].numpy(), cmap=DIVERGING, vmin=-1, vmax=1, aspect="auto"
        )
        strip_ax.set_xticks(range(dim), [str(k) for k in range(dim)], fontsize=7)
        strip_ax.set_yticks([])
        strip_ax.tick_params(length=0)
    axes[0, 0].set_ylabel("the patch\nit sees", rotation=0, ha="right", va="center")
    axes[1, 0].set_ylabel("its 8\nnumbers", rotation=0, ha="right", va="center")
    return fig


def _class_loss(lengths: Tensor, present: bool, **margins: float) -> Tensor:
    """``margin_loss`` of one class whose capsule has each of these lengths (a 1-D
    capsule: its length is the number itself)."""
    target = torch.full((1, 1), float(present), dtype=torch.float64)
    return torch.stack(
        [
            margin_loss(x.view(1, 1, 1).double(), target, **margins)
            for x in lengths.double()
        ]
    )


def margin_idea(
    lengths: Tensor,
    labels: Tensor,
    m_pos: float = 0.9,
    m_neg: float = 0.1,
    lam: float = 0.5,
) -> Figure:
    """The margin loss of one class against its capsule's length, when the class is
    present (blue) and absent (vermillion), computed by ``capsnotes.margin_loss``; on
    the curves, the lengths ``lengths`` ``[N, classes]`` of real images: each image's
    label's capsule on the present curve, every other capsule on the absent one. The
    margins are dotted lines; the axes run over [0, 1] and the loss's full range."""
    lengths = _float_tensor("lengths", lengths, 2)
    if lengths.min() < 0 or lengths.max() >= 1:
        raise ValueError("lengths must be capsule lengths, in [0, 1)")
    if not torch.is_tensor(labels) or labels.dtype != torch.long or labels.dim() != 1:
        raise TypeError(f"labels must be an int64 tensor [N], got {labels!r:.60}")
    count, classes = lengths.shape
    if len(labels) != count or labels.min() < 0 or labels.max() >= classes:
        raise ValueError(
            f"labels must be {count} classes in [0, {classes}), got {labels.tolist()}"
        )
    margins = {"m_pos": m_pos, "m_neg": m_neg, "lam": lam}
    present = torch.nn.functional.one_hot(labels, classes).bool()
    x = torch.linspace(0, 1, 401, dtype=torch.float64)
    fig, (ax, strip) = new_figure(
        nrows=2,
        width=6.5,
        height=3.6,
        sharex=True,
        gridspec_kw={"height_ratios": [3, 1]},
    )
    top = max(m_pos**2, lam * (1 - m_neg) ** 2)
    groups = (
        (True, BLUE, "the label's capsule"),
        (False, VERMILLION, "every other capsule"),
    )
    for row, (is_present, colour, _) in enumerate(groups):
        kind = "present" if is_present else "absent"
        ax.plot(
            x,
            _class_loss(x, is_present, **margins),
            color=colour,
            linewidth=2,
            label=f"class {kind} (T = {int(is_present)})",
        )
        chosen = lengths[present if is_present else ~present]
        ax.plot(
            chosen.numpy(),
            _class_loss(chosen, is_present, **margins).numpy(),
            "o",
            color=colour,
            markersize=5,
            alpha=0.4,
            markeredgewidth=0,
        )
        strip.plot(
            chosen.numpy(),
            np.full(len(chosen), row),
            "|",
            color=colour,
            markersize=12,
            alpha=0.4,
        )
    for margin, text, side in ((m_neg, "m⁻", "left"), (m_pos, "m⁺", "right")):
        for axis in (ax, strip):
            axis.axvline(margin, color=GREY, linestyle=":", linewidth=1.2)
        shift = 0.01 if side == "left" else -0.01
        ax.text(margin + shift, top * 1.1, f"{text} = {margin:g}", ha=side, fontsize=9)
    ax.set(xlim=(0, 1), ylim=(-0.02 * top, top * 1.2), ylabel="loss of the class")
    ax.legend(loc="upper left", bbox_to_anchor=(0.42, 0.98), frameon=False, fontsize=8)
    strip.set_yticks([0, 1], [who for _, _, who in groups], fontsize=8)
    strip.set_ylim(1.6, -0.6)
    strip.grid(axis="y", visible=False)
    strip.set_xticks(np.linspace(0, 1, 11))
    strip.set_xlabel("length of the class's capsule ‖v‖")
    return fig
