"""Plain checks of what a user hands over: each raises a ``TypeError`` (wrong kind) or
``ValueError`` (wrong shape or range) that names the argument and what was expected."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..checks import check_labels


def float_tensor(
    name: str,
    value: object,
    layout: str = "",
    shape: Sequence[int | None] | None = None,
) -> Tensor:
    """A floating-point tensor; with ``shape``, of that shape (None: any size), as
    ``layout`` describes it."""
    expected = f"a floating-point torch.Tensor {layout}".rstrip()
    if not torch.is_tensor(value):
        raise TypeError(f"{name} must be {expected}, got {type(value).__name__}")
    if not value.is_floating_point():
        raise TypeError(f"{name} must be {expected}, got dtype {value.dtype}")
    if shape is not None and (
        value.dim() != len(shape)
        or any(n not in (None, m) for m, n in zip(value.shape, shape))
    ):
        raise ValueError(f"{name} must be {expected}, got shape {tuple(value.shape)}")
    return value


def class_indices(
    name: str, value: object, classes: int, batch: int | None = None
) -> Tensor:
    """An integer tensor ``[batch]`` of classes in ``[0, classes)``, checked as the
    model checks its labels."""
    check_labels(value, batch, classes, name)
    return value


def integer(
    name: str, value: object, minimum: int | None = None, kind: str = ""
) -> int:
    """An ``int`` (``True`` does not count), at least ``minimum`` if given; ``kind``
    says what was expected (default ``"an int >= minimum"``)."""
    kind = kind or "an int" + ("" if minimum is None else f" >= {minimum}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be {kind}, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be {kind.removeprefix('an int ')}, got {value}")
    return value


def positive_ints(**values: int | Sequence[int]) -> None:
    """Each keyword an ``int`` of at least 1, or a sequence of them (``hidden[1]``)."""
    for name, value in values.items():
        items = enumerate(value) if isinstance(value, Sequence) else [(None, value)]
        for index, item in items:
            label = name if index is None else f"{name}[{index}]"
            integer(label, item, 1, "a positive int")
