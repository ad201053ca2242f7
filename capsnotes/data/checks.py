"""Plain checks of what a user hands over: each raises a ``TypeError`` (wrong kind) or
``ValueError`` (wrong shape or range) that names the argument and what was expected."""

from __future__ import annotations

from torch import Tensor

from ..checks import check_labels, float_tensor, integer
from ..checks import check_sizes as positive_ints

__all__ = ["class_indices", "float_tensor", "integer", "positive_ints"]


def class_indices(
    name: str, value: object, classes: int, batch: int | None = None
) -> Tensor:
    """An integer tensor ``[batch]`` of classes in ``[0, classes)``, checked as the
    model checks its labels."""
    check_labels(value, batch, classes, name)
    return value
