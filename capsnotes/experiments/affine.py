"""Affine-warped digits: how well do models trained on shifted MNIST recognise rotated,
sheared and rescaled ones? (Sabour et al. 2017, §5.2: a CapsNet 79%, a CNN 66%, on
affNIST.)

The real affNIST (Tieleman, 2013) places each digit on a 40×40 canvas. Here both models
were trained on the 28×28 canvas with shifts of up to 2 pixels, so the warps keep that
canvas: they draw rotation, shear and scale from the distribution TensorFlow Federated
describes as approximately affNIST's (``tff.simulation.datasets.emnist.get_infinite``),
and limit the translation to the ±2 pixels both models saw in training.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data import ImageSet, checks
from ..fast.scoring import scorer_for


@dataclass(frozen=True)
class AffineRanges:
    """Where random affine parameters are drawn from, each independently per image."""

    rotation_degrees: float = 20.0  #: uniform in ±; positive turns counter-clockwise
    shear: float = 0.2  #: uniform in ±; ``shear · x`` is added to ``y``
    scale: float = 1.25  #: each axis log-uniform in ``[1/scale, scale]``
    translation_pixels: float = 2.0  #: uniform in ± along each axis

    def __post_init__(self) -> None:
        for name, interval, valid in (
            ("rotation_degrees", "[0, 180]", lambda x: 0 <= x <= 180),
            ("shear", "[0, 1)", lambda x: 0 <= x < 1),
            ("scale", "[1, 4]", lambda x: 1 <= x <= 4),
            ("translation_pixels", "[0, 14]", lambda x: 0 <= x <= 14),
        ):
            value = getattr(self, name)
            if not valid(value):
                raise ValueError(f"{name} must lie in {interval}, got {value}")


#: The module docstring's ranges: TFF's affNIST, translation limited to ±2 pixels.
AFFNIST_RANGES = AffineRanges()


@dataclass
class AffineParameters:
    """One affine transformation per image, as tensors ``[N]``: a rotation, then a
    shear, then a scaling, then a translation (the order of TFF's generator)."""

    rotation_degrees: Tensor
    shear: Tensor
    scale_x: Tensor
    scale_y: Tensor
    shift_x: Tensor  #: pixels, rightwards
    shift_y: Tensor  #: pixels, downwards

    def __len__(self) -> int:
        return self.rotation_degrees.shape[0]

    @classmethod
    def identity(cls, count: int) -> AffineParameters:
        zeros, ones = torch.zeros(count), torch.ones(count)
        return cls(zeros, zeros, ones, ones, zeros, zeros)

    def __getitem__(self, index: slice) -> AffineParameters:
        return AffineParameters(**{k: v[index] for k, v in vars(self).items()})

    def replace(self, **values: float) -> AffineParameters:
        """The same transformations with some parameters set to one value for all."""
        fields = vars(self) | {
            k: torch.full((len(self),), float(v)) for k, v in values.items()
        }
        return AffineParameters(**fields)


def random_affine_parameters(
    count: int, ranges: AffineRanges = AFFNIST_RANGES, seed: int = 0
) -> AffineParameters:
    """``count`` transformations drawn from ``ranges``, seeded by ``seed``."""
    checks.integer("count", count, minimum=1)
    generator = torch.Generator().manual_seed(seed)

    def uniform(bound: float) -> Tensor:
        draw = torch.rand(count, generator=generator, dtype=torch.float64)
        return (2 * draw - 1) * bound

    log_scale = math.log(ranges.scale)
    return AffineParameters(
        rotation_degrees=uniform(ranges.rotation_degrees).float(),
        shear=uniform(ranges.shear).float(),
        scale_x=uniform(log_scale).exp().float(),
        scale_y=uniform(log_scale).exp().float(),
        shift_x=uniform(ranges.translation_pixels).float(),
        shift_y=uniform(ranges.translation_pixels).float(),
    )


def affine_matrices(parameters: AffineParameters) -> Tensor:
    """The forward maps ``[N, 2, 3]`` in pixel units about the image centre, with ``x``
    rightwards and ``y`` downwards: a point ``p`` moves to ``A p + t``."""
    angle = torch.deg2rad(parameters.rotation_degrees)
    cos, sin = torch.cos(angle), torch.sin(angle)
    # Counter-clockwise on the screen, where y points down.
    rotation = torch.stack([cos, sin, -sin, cos], -1).unflatten(-1, (2, 2))
    ones, zeros = torch.ones_like(angle), torch.zeros_like(angle)
    shear = torch.stack([ones, zeros, parameters.shear, ones], -1).unflatten(-1, (2, 2))
    scale = torch.diag_embed(torch.stack([parameters.scale_x, parameters.scale_y], -1))
    linear = scale @ shear @ rotation  # rotate first, then shear, then scale
    shift = torch.stack([parameters.shift_x, parameters.shift_y], -1)
    return torch.cat([linear, shift.unsqueeze(-1)], dim=-1)


def warp(images: Tensor, parameters: AffineParameters) -> Tensor:
    """Apply one transformation per image: ``images`` ``[N, C, H, W]`` (square, floats
    in ``[0, 1]``) → the same shape, bilinear, zeros outside the original canvas."""
    count, _, height, width = images.shape
    if height != width or len(parameters) != count:
        raise ValueError(
            f"warp needs square images and one transformation per image, got images "
            f"{tuple(images.shape)} and {len(parameters)} transformations"
        )
    forward = affine_matrices(parameters).to(images.device, torch.float64)
    linear, shift = forward[:, :, :2], forward[:, :, 2]
    # grid_sample asks, for every output pixel, where to read in the input: the inverse
    # map. On a square canvas normalised coordinates scale x and y alike, so only the
    # translation changes units (2 / width per pixel).
    inverse = torch.linalg.inv(linear)
    theta = torch.cat([inverse, -(inverse @ (shift * 2 / width).unsqueeze(-1))], dim=-1)
    grid = F.affine_grid(
        theta.to(images.dtype), list(images.shape), align_corners=False
    )
    return F.grid_sample(
        images, grid, mode="bilinear", padding_mode="zeros", align_corners=False
    )


@torch.no_grad()
def predictions(
    model: nn.Module,
    data: ImageSet,
    parameters: AffineParameters,
    batch_size: int = 500,
) -> Tensor:
    """``model``'s predictions ``[N]`` for ``data`` warped by ``parameters`` (float32's,
    by :func:`~capsnotes.fast.scoring.scorer_for`)."""
    device = next(model.parameters()).device
    model.eval()
    scorer = scorer_for(model, device)
    found, batches = [], data.to(device).batches(batch_size)
    for start, (images, _) in zip(range(0, len(data), batch_size), batches):
        part = parameters[start : start + batch_size]
        found.append(scorer(warp(images, part)).predictions.cpu())
    return torch.cat(found)


def accuracy(
    model: nn.Module,
    data: ImageSet,
    parameters: AffineParameters,
    batch_size: int = 500,
) -> float:
    """The fraction of ``data``'s images, warped, that ``model`` classifies right."""
    right = predictions(model, data, parameters, batch_size) == data.labels.cpu()
    return right.float().mean().item()


def one_factor(factor: str, value: float, count: int) -> AffineParameters:
    """``count`` copies of one transformation that changes a single factor:
    ``rotation_degrees``, ``shear`` or ``scale`` (both axes)."""
    if factor == "scale":
        return AffineParameters.identity(count).replace(scale_x=value, scale_y=value)
    if factor in ("rotation_degrees", "shear"):
        return AffineParameters.identity(count).replace(**{factor: value})
    raise ValueError(
        f"unknown factor {factor!r}; expected rotation_degrees, shear or scale"
    )


#: The values of each one-factor sweep.
SWEEPS: dict[str, tuple[float, ...]] = {
    "rotation_degrees": (-60, -45, -30, -20, -10, 0, 10, 20, 30, 45, 60),
    "shear": (-0.6, -0.4, -0.2, 0.0, 0.2, 0.4, 0.6),
    "scale": (0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.4),
}


def robustness(
    models: Mapping[str, nn.Module],
    data: ImageSet,
    *,
    ranges: AffineRanges = AFFNIST_RANGES,
    seed: int = 0,
    sweeps: Mapping[str, Sequence[float]] = SWEEPS,
    sweep_size: int | None = None,
) -> dict[str, Any]:
    """A JSON-ready record of every model's accuracy on ``data`` as it is, warped by
    random transformations from ``ranges`` (the same for every model), and in one-factor
    sweeps (on the first ``sweep_size`` images, default all)."""
    parameters = random_affine_parameters(len(data), ranges, seed)
    swept = ImageSet(data.images[:sweep_size], data.labels[:sweep_size], data.classes)
    record: dict[str, Any] = {
        "ranges": asdict(ranges),
        "seed": seed,
        "count": len(data),
        "sweep_count": len(swept),
        "models": {},
    }
    plain = AffineParameters.identity(len(data))
    warps = {
        f: [(v, one_factor(f, v, len(swept))) for v in vs] for f, vs in sweeps.items()
    }
    for name, model in models.items():
        curves = {
            factor: [
                {"value": value, "accuracy": accuracy(model, swept, warped)}
                for value, warped in values
            ]
            for factor, values in warps.items()
        }
        record["models"][name] = {
            "plain_accuracy": accuracy(model, data, plain),
            "affine_accuracy": accuracy(model, data, parameters),
            "sweeps": curves,
        }
    return record
