"""Measurements on a trained CapsNet that the chapters report.

* :func:`image_moments` and :func:`dimension_effects` — what each dimension of a digit
  capsule does to the decoder's image, in measured units: ink, width, height, slant
  and position (chapters 7 and 9, the paper's Figure 4).
* :func:`training_flops` — the arithmetic of one training step, counted by torch's
  ``FlopCounterMode`` (chapters 3 and 12, the benchmarks).
* :func:`confusion_figure` and :func:`sweep_figure` — chapter 12's confusion matrix and
  its accuracy against one affine factor at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from matplotlib.figure import Figure
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from capsbook.plots import COLORS, new_figure
from capsnotes import CapsNet, capsnet_loss
from capsnotes.data import checks

#: The properties :func:`image_moments` measures, with their units.
PROPERTIES: dict[str, str] = {
    "ink": "total intensity (pixels' worth)",
    "width": "pixels (√12 × the horizontal standard deviation)",
    "height": "pixels (√12 × the vertical standard deviation)",
    "slant": "pixels of lean over the height (positive: leans right, like /)",
    "x": "pixels (centre of mass, rightwards)",
    "y": "pixels (centre of mass, upwards)",
}


def image_moments(images: Tensor) -> dict[str, Tensor]:
    """Shape measurements of images from their intensity moments.

    ``images`` ``[N, 1, H, W]`` (or ``[N, H, W]``), non-negative → a dict of ``[N]``
    tensors keyed by :data:`PROPERTIES`. Width and height are √12 standard deviations
    of the ink along each axis (the length of an evenly inked bar with that spread);
    slant is how far the ink's regression line of column on row leans over that height.
    """
    if images.dim() == 4:
        if images.shape[1] != 1:
            raise ValueError(
                f"expected one channel, got images of shape {tuple(images.shape)}"
            )
        images = images[:, 0]
    if images.dim() != 3:
        raise ValueError(
            f"expected images [N, 1, H, W] or [N, H, W], got {tuple(images.shape)}"
        )
    p = images.double().clamp_min(0)
    height, width = p.shape[1:]
    rows = torch.arange(height, dtype=p.dtype, device=p.device)[:, None]
    cols = torch.arange(width, dtype=p.dtype, device=p.device)[None, :]
    ink = p.sum(dim=(1, 2)).clamp_min(1e-12)

    def mean(values: Tensor) -> Tensor:
        return (p * values).sum(dim=(1, 2)) / ink

    cx, cy = mean(cols), mean(rows)
    dx = cols - cx[:, None, None]
    dy = rows - cy[:, None, None]
    var_x, var_y, cov = mean(dx**2), mean(dy**2), mean(dx * dy)
    spread_y = math.sqrt(12) * var_y.sqrt()
    # Column on row: x moves by cov/var_y per row down; over the height, leaning right
    # means the top is further right, so the sign flips (rows count downwards).
    slant = -cov / var_y.clamp_min(1e-12) * spread_y
    return {
        "ink": ink,
        "width": math.sqrt(12) * var_x.sqrt(),
        "height": spread_y,
        "slant": slant,
        "x": cx,
        "y": (height - 1) - cy,
    }


@torch.no_grad()
def perturb_dimensions(
    model: CapsNet, capsule: Tensor, digit: int, offsets: Sequence[float]
) -> Tensor:
    """The paper's Figure 4 for one capsule: decode ``capsule`` (``[digit_dim]``, the
    capsule of class ``digit``) with ``offsets[k]`` added to one dimension at a time.

    Returns reconstructions ``[digit_dim, len(offsets), C, H, W]``.
    """
    config = model.config
    if capsule.shape != (config.digit_dim,):
        raise ValueError(
            f"capsule must have shape [{config.digit_dim}], got {tuple(capsule.shape)}"
        )
    if not 0 <= digit < config.num_classes:
        raise ValueError(f"digit must lie in [0, {config.num_classes}), got {digit}")
    steps = torch.as_tensor(offsets, dtype=capsule.dtype, device=capsule.device)
    dims = config.digit_dim
    varied = capsule.repeat(dims, len(steps), 1)  # [dims, steps, dims]
    varied[torch.arange(dims), :, torch.arange(dims)] += steps
    full = capsule.new_zeros(dims * len(steps), config.num_classes, dims)
    full[:, digit] = varied.view(-1, dims)
    classes = torch.full((dims * len(steps),), digit, device=capsule.device)
    pixels = model.decoder(full, classes)
    return pixels.view(
        dims, len(steps), config.in_channels, config.image_size, config.image_size
    )


def dimension_effects(
    model: CapsNet, capsules: Tensor, digits: Tensor, offsets: Sequence[float]
) -> dict[str, Tensor]:
    """How each capsule dimension changes each measured property of the reconstruction.

    For every capsule ``capsules[n]`` (``[N, digit_dim]``, of class ``digits[n]``) and
    every dimension, the reconstructions at ``offsets`` are measured with
    :func:`image_moments`, and a straight line is fitted to each property against the
    offset. Returns, for each property of :data:`PROPERTIES` and for ``"pixels"`` (the
    mean absolute change of a pixel between the first and last offset), a ``[N,
    digit_dim]`` tensor: the slope per unit of offset (``"pixels"``: the change itself).
    """
    if capsules.dim() != 2 or digits.shape != capsules.shape[:1]:
        raise ValueError(
            f"capsules must be [N, dim] with digits [N], got {tuple(capsules.shape)} "
            "and "
            f"{tuple(digits.shape)}"
        )
    steps = torch.as_tensor(offsets, dtype=torch.float64)
    centred = steps - steps.mean()
    results: dict[str, list[Tensor]] = {name: [] for name in (*PROPERTIES, "pixels")}
    for capsule, digit in zip(capsules, digits.tolist(), strict=True):
        # [dims, steps, 1, H, W]
        grid = perturb_dimensions(model, capsule, digit, offsets)
        dims = grid.shape[0]
        moments = image_moments(grid.flatten(0, 1).cpu())
        for name, values in moments.items():
            values = values.view(dims, len(steps))
            slope = (values * centred).sum(dim=1) / (centred**2).sum()
            results[name].append(slope.float())
        change = (grid[:, -1] - grid[:, 0]).abs().mean(dim=(1, 2, 3))
        results["pixels"].append(change.float().cpu())
    return {name: torch.stack(values) for name, values in results.items()}


def confusion_matrix(predictions: Tensor, labels: Tensor, num_classes: int) -> Tensor:
    """Counts ``[num_classes, num_classes]``: row = true class, column = prediction."""
    checks.class_indices("labels", labels, num_classes)
    checks.class_indices("predictions", predictions, num_classes, batch=labels.shape[0])
    flat = labels.long() * num_classes + predictions.long()
    return torch.bincount(flat, minlength=num_classes**2).view(num_classes, num_classes)


def training_flops(
    model: nn.Module,
    batch: Sequence[Tensor],
    objective: Callable[..., Any] = capsnet_loss,
) -> dict[str, int]:
    """Floating-point operations of one forward and backward pass of ``model`` on
    ``batch`` (``(images, labels, ...)``) with ``objective``, per image, by module
    (``"conv1"``, ``"primary"``, ...; ``"total"``), as torch's ``FlopCounterMode``
    counts them: two per multiply-add of every convolution and matrix product, nothing
    for element-wise work."""
    counter = FlopCounterMode(display=False)
    with counter:
        objective(model(batch[0], batch[1]), *batch).total.backward()
    counts = counter.get_flop_counts()
    name = type(model).__name__
    per_module = {
        key.removeprefix(f"{name}."): sum(ops.values())
        for key, ops in counts.items()
        if key.count(".") == 1 and key.startswith(f"{name}.")
    }
    per_module["total"] = sum(counts.get(name, counts.get("Global", {})).values())
    return {key: value // len(batch[0]) for key, value in per_module.items()}


def confusion_figure(confusion: Tensor, classes: Sequence[str]) -> Figure:
    """A confusion matrix ``[K, K]`` (row: true class, column: prediction) with every
    count printed in its cell, the cells off the diagonal shaded blue by their count
    (the diagonal, far larger, left out of the scale)."""
    confusion = torch.as_tensor(confusion)
    count = len(classes)
    if confusion.shape != (count, count):
        raise ValueError(
            f"confusion must be [{count}, {count}] for {count} classes, got "
            f"{tuple(confusion.shape)}"
        )
    off_diagonal = confusion - torch.diag(torch.diag(confusion))
    fig, ax = new_figure(width=6.4, height=5.4, style={"axes.grid": False})
    cells = ax.imshow(off_diagonal.numpy(), cmap="Blues")
    dark = off_diagonal.max().item() * 0.5
    for i in range(count):
        for j in range(count):
            value = confusion[i, j].item()
            colour = "white" if i != j and value > dark else "#222222"
            ax.text(
                j, i, str(value), ha="center", va="center", fontsize=8, color=colour
            )
    ax.set_xticks(range(count), classes, rotation=60, ha="right", fontsize=9)
    ax.set_yticks(range(count), classes, fontsize=9)
    ax.set(xlabel="predicted class", ylabel="true class")
    fig.colorbar(cells, ax=ax, label="test images (off the diagonal)")
    return fig


#: :func:`sweep_figure`'s factors: the axis title of each.
SWEEP_FACTORS = {
    "rotation_degrees": "rotation (degrees,\npositive: counter-clockwise)",
    "shear": "shear factor s\n(y += s·x)",
    "scale": "scale factor\n(both axes)",
}


def sweep_figure(record: dict[str, Any], models: dict[str, str]) -> Figure:
    """Accuracy against one affine factor at a time (a panel per factor of
    :data:`SWEEP_FACTORS`), a line per model of ``models`` (key in the record → name
    shown; a colour each, in order), from the record of ``python -m capsnotes affine``
    (its ``ranges`` and each model's ``sweeps``). Shaded grey: the range the record's
    random warps draw the factor from."""
    ranges = record["ranges"]
    spans = {
        "rotation_degrees": (-ranges["rotation_degrees"], ranges["rotation_degrees"]),
        "shear": (-ranges["shear"], ranges["shear"]),
        "scale": (1 / ranges["scale"], ranges["scale"]),
    }
    fig, axes = new_figure(ncols=3, width=6.5, height=3.0, sharey=True)
    for ax, (factor, label) in zip(axes, SWEEP_FACTORS.items()):
        ax.axvspan(
            *spans[factor],
            color="#e6e6e6",
            zorder=0,
            label="range of the\nrandom warps",
        )
        for color, (key, shown) in zip(COLORS, models.items()):
            curve = record["models"][key]["sweeps"][factor]
            ax.plot(
                [p["value"] for p in curve],
                [100 * p["accuracy"] for p in curve],
                "o-",
                color=color,
                label=shown,
                markersize=3.5,
            )
        ax.set_xlabel(label, fontsize=9)
    axes[0].set_xticks([-60, -30, 0, 30, 60])
    axes[2].set_xticks([0.6, 1.0, 1.4])
    axes[0].set_ylabel("test accuracy (%)")
    axes[2].legend(frameon=False, fontsize=8, loc="lower center")
    return fig
