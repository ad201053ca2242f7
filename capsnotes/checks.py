"""Argument checks for the public functions and modules.

Each check raises ``TypeError`` (wrong kind of value) or ``ValueError`` (right kind,
wrong shape or range) with a message that names the argument and says what was
expected. They live here so that the functions the book displays begin with one line
of checking and then read as the math.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from numbers import Real
from typing import Any, TypeVar

import torch
from torch import Tensor

__all__ = [
    "check_choice",
    "check_class_indices",
    "check_float_tensor",
    "check_int",
    "check_positive_int",
    "check_positive_ints",
    "check_positive_number",
    "check_range",
    "dataclass_from_dict",
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
    make the host wait for the device (and is not allowed while a CUDA graph records), so
    there the range is left to the device: the one-hot encoding every use of the labels
    goes through (``torch.nn.functional.one_hot``) raises a device-side assertion on an
    out-of-range class.
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
    if value.device.type == "cpu" and value.numel():
        low, high = int(value.min()), int(value.max())
        if low < 0 or high >= num_classes:
            raise ValueError(
                f"{name} must lie in [0, {num_classes}), got values from {low} to {high}"
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


def check_int(name: str, value: object, minimum: int | None = None) -> int:
    """``value`` must be an int (``True`` does not count), at least ``minimum`` if given."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_range(
    name: str,
    value: object,
    low: float,
    high: float,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` must be a real number in the interval from ``low`` to ``high``; the
    ``*_open`` flags leave an end out (``check_range("decay", d, 0, 1, high_open=True)``
    accepts ``[0, 1)``)."""
    interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number in {interval}, got {type(value).__name__}")
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    if not (above and below):
        raise ValueError(f"{name} must lie in {interval}, got {value}")
    return float(value)


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """``value`` must be one of the strings in ``choices``."""
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; expected one of {sorted(choices)}")
    return value  # type: ignore[return-value]


Config = TypeVar("Config")


def dataclass_from_dict(cls: type[Config], values: dict[str, Any]) -> Config:
    """``cls(**values)`` for a configuration dataclass, refusing unknown keys by name."""
    known = [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = set(values) - set(known)
    if unknown:
        raise ValueError(
            f"unknown {cls.__name__} fields: {sorted(unknown)}; expected some of {known}"
        )
    return cls(**values)
