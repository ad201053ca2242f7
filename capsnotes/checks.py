"""Plain checks of what a user hands over: each raises a ``TypeError`` (wrong kind of
value) or ``ValueError`` (wrong shape or range) that names the argument and what was
expected, and returns the value. The layers call them once, at their entrance."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def float_tensor(
    name: str,
    value: object,
    layout: str = "",
    shape: Sequence[int | None] | None = None,
) -> Tensor:
    """A floating-point tensor; with ``shape``, of that shape (None entries: any size,
    the first named "batch")."""
    if shape is not None and not layout:
        axes = [
            "batch" if k == 0 else "any" if n is None else str(n)
            for k, n in enumerate(shape)
        ]
        layout = f"of shape [{', '.join(axes)}]"
    expected = f"a floating-point torch.Tensor {layout}".rstrip()
    if not torch.is_tensor(value):
        raise TypeError(f"{name} must be {expected}, got {type(value).__name__}")
    if not value.is_floating_point():
        raise TypeError(f"{name} must be {expected}, got dtype {value.dtype}")
    wrong = shape is not None and (
        value.dim() != len(shape)
        or any(n not in (None, m) for m, n in zip(value.shape, shape))
    )
    if wrong:
        raise ValueError(f"{name} must be {expected}, got shape {tuple(value.shape)}")
    return value


def class_indices(
    name: str, value: object, classes: int, batch: int | None = None
) -> Tensor:
    """An integer tensor ``[batch]`` of classes in ``[0, classes)``. The range is
    checked on the CPU only: reading values from an accelerator would make the host wait
    for it (there, ``one_hot`` asserts the range on the device)."""
    shape = f"[{'batch' if batch is None else batch}]"
    if (
        not torch.is_tensor(value)
        or value.is_floating_point()
        or value.dtype == torch.bool
    ):
        got = value.dtype if torch.is_tensor(value) else type(value).__name__
        raise TypeError(
            f"{name} must be an integer tensor {shape} of class indices, got {got}"
        )
    if value.dim() != 1 or (batch is not None and len(value) != batch):
        raise ValueError(
            f"{name} must have shape {shape} (one class per image), got "
            f"{tuple(value.shape)}"
        )
    if value.device.type == "cpu" and value.numel():
        low, high = int(value.min()), int(value.max())
        if low < 0 or high >= classes:
            raise ValueError(
                f"{name} must lie in [0, {classes}), got values from {low} to {high}"
            )
    return value


def integer(name: str, value: object, minimum: int | None = None) -> int:
    """An ``int`` (``True`` does not count), at least ``minimum`` if given."""
    if isinstance(value, bool) or not isinstance(value, int):
        at_least = "" if minimum is None else f" >= {minimum}"
        raise TypeError(
            f"{name} must be an int{at_least}, got {type(value).__name__} {value!r}"
        )
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def positive_ints(**values: int | Sequence[int]) -> None:
    """Each keyword an ``int`` of at least 1, or a sequence of them (``hidden=(512, 0)``
    fails as ``hidden[1]``)."""
    for name, value in values.items():
        items = enumerate(value) if isinstance(value, Sequence) else [(None, value)]
        for index, item in items:
            label = name if index is None else f"{name}[{index}]"
            if isinstance(item, bool) or not isinstance(item, int):
                raise TypeError(
                    f"{label} must be a positive int, got {type(item).__name__} "
                    f"{item!r}"
                )
            if item < 1:
                raise ValueError(f"{label} must be a positive int, got {item}")
