"""The doors: plain checks of what a user hands a public function of the paper.

Each public function and layer of the paper calls its door in one line at its top. A
door raises a ``TypeError`` (the wrong kind of thing, or the wrong dtype) or a
``ValueError`` (the wrong shape, size or range) that names the argument, what was
expected, in the paper's layout (``[batch, child, parent, dim]``), and what it got.

The layers check again what the model's door let in: cheap Python on shapes and dtypes.
The only values read are class indices on the CPU, never a GPU's (the host would wait)
nor a ``meta`` tensor's (it has none).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Real
from typing import Any

import torch
from torch import Tensor, nn


def float_tensor(
    name: str,
    value: object,
    layout: str = "",
    shape: Sequence[int | None] | None = None,
    min_dims: int = 0,
) -> Tensor:
    """``value`` if it is a floating-point tensor of at least ``min_dims`` axes, of
    ``shape`` if given (None: any size on that axis), as ``layout`` describes it."""
    expected = f"a floating-point torch.Tensor {layout}".rstrip()
    if not torch.is_tensor(value):
        raise TypeError(f"{name} must be {expected}, got {type(value).__name__}")
    if not value.is_floating_point():
        raise TypeError(f"{name} must be {expected}, got dtype {value.dtype}")
    got = tuple(value.shape)
    fits = shape is None or (
        len(got) == len(shape) and all(n in (None, m) for m, n in zip(got, shape))
    )
    if len(got) < min_dims or not fits:
        raise ValueError(f"{name} must be {expected}, got shape {got}")
    return value


def _real(name: str, value: object, non_negative: bool = False) -> None:
    """A finite real number (``True`` does not count), at least 0 if asked."""
    kind = "a non-negative real number" if non_negative else "a real number"
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be {kind}, got {type(value).__name__} {value!r}")
    if not -math.inf < value < math.inf or (non_negative and value < 0):
        raise ValueError(f"{name} must be {kind}, got {value!r}")


def integer(
    name: str, value: object, minimum: int | None = None, kind: str = ""
) -> int:
    """``value`` if it is an ``int`` (``True`` does not count), at least ``minimum`` if
    given; ``kind`` says what was expected (default ``"an int >= minimum"``)."""
    kind = kind or "an int" + ("" if minimum is None else f" >= {minimum}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be {kind}, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be {kind.removeprefix('an int ')}, got {value}")
    return value


def check_sizes(**sizes: int | Sequence[int]) -> None:
    """Each keyword a positive ``int``, or a sequence of them (named ``hidden[1]``)."""
    for name, value in sizes.items():
        many = isinstance(value, Sequence) and not isinstance(value, str)
        for index, size in enumerate(value) if many else [(None, value)]:
            label = name if index is None else f"{name}[{index}]"
            integer(label, size, minimum=1, kind="a positive int")


def check_images(images: object, config: Any) -> None:
    """The model's door: ``images`` must be floats ``[B, C, S, S]`` of its config (a
    CapsNet's or the CNN's: ``in_channels``, ``image_size``)."""
    side, channels = config.image_size, config.in_channels
    layout = f"[batch, {channels}, {side}, {side}] (pixels in [0, 1])"
    float_tensor("images", images, layout, (None, channels, side, side))


def check_labels(
    labels: object, batch: int | None, num_classes: int, name: str = "labels"
) -> None:
    """The labels' door: integers ``[batch]`` (any length if None) in ``[0,
    num_classes)``; the range is read on the CPU only (on a GPU, ``one_hot`` asserts it
    without making the host wait)."""
    shape = f"[{'batch' if batch is None else batch}]"
    integers = torch.is_tensor(labels) and not labels.is_floating_point()
    if not integers or labels.dtype == torch.bool:
        got = getattr(labels, "dtype", type(labels).__name__)
        raise TypeError(
            f"{name} must be an integer tensor {shape} of classes, got {got}"
        )
    if labels.dim() != 1 or batch not in (None, len(labels)):
        raise ValueError(
            f"{name} must have shape {shape} (one class per image), got "
            f"{tuple(labels.shape)}"
        )
    if labels.device.type == "cpu" and labels.numel():
        low, high = int(labels.min()), int(labels.max())
        if low < 0 or high >= num_classes:
            raise ValueError(
                f"{name} must lie in [0, {num_classes}), got values {low} to {high}"
            )


def check_iterations(iterations: object) -> int:
    """``iterations`` if it is a number of routing iterations: an int, at least 1."""
    return integer("routing iterations", iterations, minimum=1)


def check_squash_options(dim: object, eps: object) -> None:
    """``squash``'s options: ``dim`` an int, ``eps`` a non-negative real number."""
    integer("dim", dim)
    _real("eps", eps, non_negative=True)


def check_squash(s: object, dim: object, eps: object) -> None:
    """``squash``'s door: ``s`` floats with at least one axis, ``dim`` one of them."""
    s = float_tensor("s", s, "with at least one dimension", min_dims=1)
    check_squash_options(dim, eps)
    if not -s.dim() <= dim < s.dim():
        raise ValueError(
            f"dim must be an int in [{-s.dim()}, {s.dim()}) for s of shape "
            f"{tuple(s.shape)}, got {dim}"
        )


def check_votes(u_hat: object, iterations: object = 3) -> None:
    """Routing's door: votes ``[batch, child, parent, dim]`` and ``r ≥ 1``."""
    float_tensor("u_hat", u_hat, "[batch, child, parent, dim]", (None,) * 4)
    check_iterations(iterations)


def check_features(features: object, conv: nn.Conv2d) -> None:
    """The primary capsules' door: a feature map ``[batch, in_channels, height,
    width]`` of ``conv``'s input channels, at least as large as its kernel."""
    channels, (high, wide) = conv.in_channels, conv.kernel_size
    layout = (
        f"[batch, {channels}, height, width] (height x width at least the kernel, "
        f"{high}x{wide})"
    )
    maps = float_tensor("features", features, layout, (None, channels, None, None))
    if maps.shape[2] < high or maps.shape[3] < wide:
        raise ValueError(
            f"features must be a floating-point torch.Tensor {layout}, got shape "
            f"{tuple(maps.shape)}"
        )


def check_capsules(name: str, capsules: object, count: int, dim: int) -> None:
    """A layer of capsules ``[batch, count, dim]`` (the digit capsules' input ``u``)."""
    float_tensor(name, capsules, f"[batch, {count}, {dim}]", (None, count, dim))


def check_masking(
    capsules: object,
    classes: object,
    num_classes: int | None = None,
    dim: int | None = None,
) -> None:
    """The mask's and the decoder's door: capsules ``[batch, classes, dim]`` (of
    ``num_classes`` and ``dim`` if given) and one class of them per example."""
    layout = (
        f"[batch, {'classes' if num_classes is None else num_classes}, "
        f"{'dim' if dim is None else dim}]"
    )
    capsules = float_tensor("capsules", capsules, layout, (None, num_classes, dim))
    check_labels(classes, capsules.shape[0], capsules.shape[1], "classes")


def check_margin_loss(
    v: object, target: object, m_pos: object, m_neg: object, lam: object
) -> None:
    """The margin loss's door: capsules ``[batch, classes, dim]``; class indices
    ``[batch]`` or a presence matrix ``[batch, classes]``; three real numbers."""
    v = float_tensor("v", v, "[batch, classes, dim]", (None, None, None))
    batch, classes = v.shape[:2]
    expected = (
        f"class indices [{batch}] or a presence matrix [{batch}, {classes}] "
        f"(v has shape {tuple(v.shape)})"
    )
    if not torch.is_tensor(target):
        raise TypeError(f"target must be {expected}, got {type(target).__name__}")
    if target.dim() == 1:
        check_labels(target, batch, classes, "target")
    elif target.shape != (batch, classes):
        raise ValueError(f"target must be {expected}, got shape {tuple(target.shape)}")
    for name, value in (("m_pos", m_pos), ("m_neg", m_neg), ("lam", lam)):
        _real(name, value)


def check_reconstruction_loss(
    reconstructions: object, images: object, weight: object
) -> None:
    """The reconstruction loss's door: ``[batch, ...]`` reconstructions, and images
    of as many examples and as many values per example; a non-negative weight."""
    layout = "[batch, ...] (at least 2 dimensions)"
    reconstructions = float_tensor(
        "reconstructions", reconstructions, layout, min_dims=2
    )
    shape = tuple(reconstructions.shape)
    values = math.prod(shape[1:])
    expected = (
        f"a torch.Tensor [batch, ...] of {shape[0]} examples of {values} values each "
        f"(reconstructions have shape {shape})"
    )
    if not torch.is_tensor(images):
        raise TypeError(f"images must be {expected}, got {type(images).__name__}")
    got = tuple(images.shape)
    if len(got) < 2 or got[0] != shape[0] or math.prod(got[1:]) != values:
        raise ValueError(f"images must be {expected}, got shape {got}")
    _real("weight", weight, non_negative=True)


def check_capsule_output(output: object) -> None:
    """``capsnet_loss``'s door (its two terms check the rest): what a CapsNet returned,
    with floating-point ``capsules`` and ``reconstructions``."""
    for name, layout in (
        ("capsules", "[batch, classes, dim]"),
        ("reconstructions", "[batch, ...]"),
    ):
        if not hasattr(output, name):
            raise TypeError(
                f"output must be what a CapsNet returns, with the tensors capsules "
                f"and reconstructions, got {type(output).__name__}"
            )
        float_tensor(f"output.{name}", getattr(output, name), layout)
