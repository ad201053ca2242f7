"""Argument checks for the public functions and modules.

Each check raises ``TypeError`` (wrong kind of value) or ``ValueError`` (right kind,
wrong shape or range) with a message that names the argument and says what was
expected. They live here so that the functions the book displays begin with one line
of checking and then read as the math.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Real

import torch
from torch import Tensor

__all__ = [
    "check_class_indices",
    "check_float_tensor",
    "check_positive_int",
    "check_positive_ints",
    "check_positive_number",
]


def check_float_tensor(
    name: str,
    value: object,
    layout: str = "",
    dims: int | None = None,
    shape: Sequence[int | None] | None = None,
) -> Tensor:
    """``value`` must be a floating-point tensor; with ``dims``, of that many axes; with
    ``shape``, of that shape where an entry is not None. ``layout`` describes the
    expected axes in the message, e.g. ``"[batch, classes, dim]"``."""
    if not layout and shape is not None:
        axes = ["batch" if k == 0 else "any" if n is None else str(n) for k, n in enumerate(shape)]
        layout = f"of shape [{', '.join(axes)}]"
    expected = f"a floating-point torch.Tensor{' ' + layout if layout else ''}"
    if not torch.is_tensor(value):
        raise TypeError(f"{name} must be {expected}, got {type(value).__name__}")
    if not value.is_floating_point():
        raise TypeError(f"{name} must be {expected}, got dtype {value.dtype}")
    if shape is not None:
        dims = len(shape)
    wrong = dims is not None and value.dim() != dims
    if not wrong and shape is not None:
        wrong = any(want not in (None, got) for got, want in zip(value.shape, shape, strict=True))
    if wrong:
        raise ValueError(f"{name} must be {expected}, got shape {tuple(value.shape)}")
    return value


def check_class_indices(
    name: str, value: object, num_classes: int, batch: int | None = None
) -> Tensor:
    """``value`` must be an integer tensor ``[batch]`` of classes in ``[0, num_classes)``.

    On a CPU the range is checked at once. On an accelerator reading the values would
    make the host wait for the device, so there the check is queued as an asynchronous
    device-side assertion instead.
    """
    shape = f"[{'batch' if batch is None else batch}]"
    if (
        not torch.is_tensor(value)
        or value.dtype.is_floating_point
        or value.dtype.is_complex
        or value.dtype == torch.bool
    ):
        got = value.dtype if torch.is_tensor(value) else type(value).__name__
        raise TypeError(f"{name} must be an integer tensor {shape} of class indices, got {got}")
    if value.dim() != 1 or (batch is not None and value.shape[0] != batch):
        raise ValueError(
            f"{name} must have shape {shape} (one class per image), got {tuple(value.shape)}"
        )
    if value.device.type == "cpu":
        if value.numel() and (int(value.min()) < 0 or int(value.max()) >= num_classes):
            raise ValueError(
                f"{name} must lie in [0, {num_classes}), got values from {int(value.min())} "
                f"to {int(value.max())}"
            )
    else:
        torch._assert_async(
            ((value >= 0) & (value < num_classes)).all(), f"{name} must lie in [0, {num_classes})"
        )
    return value


def check_positive_number(name: str, value: object) -> float:
    """``value`` must be a real number greater than zero."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a positive number, got {type(value).__name__}")
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return float(value)


def check_positive_int(name: str, value: object) -> int:
    """``value`` must be an int of at least 1 (``True`` does not count)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a positive int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be a positive int, got {value}")
    return value


def check_positive_ints(**values: object) -> None:
    """:func:`check_positive_int` for each keyword, e.g. ``check_positive_ints(size=n)``;
    a sequence value (such as hidden-layer sizes) must hold positive ints only."""
    for name, value in values.items():
        if isinstance(value, Sequence) and not isinstance(value, str):
            for index, item in enumerate(value):
                check_positive_int(f"{name}[{index}]", item)
        else:
            check_positive_int(name, value)
