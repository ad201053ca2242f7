"""Argument checks for the public functions and modules: the one home of validation.

Each check raises ``TypeError`` (wrong kind of value) or ``ValueError`` (right kind,
wrong shape or range) with a message that names the argument and says what was
expected. The functions and layers the book displays do not call them in their bodies:
they declare what they accept with :func:`checked`, above the ``def``, so that the body
reads as the math::

    @checked(s=FloatTensor(), eps=Positive())
    def squash(s, dim=-1, eps=1e-8): ...

Hand-written rather than taken from a validation library: the checks need to read
tensor shapes and dtypes, and (for class indices) values only where that does not make
an accelerator wait; the libraries that validate arguments from type annotations
(pydantic, beartype, typeguard) check Python types, not these.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from numbers import Real
from typing import Any, TypeVar

import torch
from torch import Tensor

__all__ = [
    "AnyTensor",
    "ClassIndices",
    "ModelImages",
    "ModelLabels",
    "FloatTensor",
    "Int",
    "Positive",
    "checked",
    "check_choice",
    "check_capsule_target",
    "check_iterations",
    "check_margins",
    "check_pixel_counts",
    "check_class_indices",
    "check_float_tensor",
    "check_int",
    "check_positive_int",
    "check_positive_ints",
    "check_positive_number",
    "check_range",
    "check_target",
    "check_tensor",
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
        at_least = "" if minimum is None else f" >= {minimum}"
        raise TypeError(f"{name} must be an int{at_least}, got {type(value).__name__} {value!r}")
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


def check_tensor(name: str, value: object, layout: str, dims: int) -> Tensor:
    """``value`` must be a tensor (of any dtype) with ``dims`` axes, described by
    ``layout`` (e.g. ``"[B, C, H, W]"``) in the message."""
    if not torch.is_tensor(value):
        raise TypeError(f"{name} must be a tensor {layout}, got {type(value).__name__}")
    if value.dim() != dims:
        raise ValueError(f"{name} must be a tensor {layout}, got shape {tuple(value.shape)}")
    return value


def check_iterations(iterations: object) -> int:
    """Routing iterations: a whole number of at least 1 (1: a single pass with uniform
    coupling)."""
    return check_int("routing iterations", iterations, minimum=1)


def check_target(name: str, target: object, num_classes: int, batch: int | None = None) -> None:
    """Class indices ``[batch]`` (see :func:`check_class_indices`), or a presence matrix
    ``[batch, num_classes]`` (several classes per image, as in MultiMNIST)."""
    if not torch.is_tensor(target):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(target).__name__}")
    if target.dim() == 1:
        check_class_indices(name, target, num_classes, batch)
        return
    expected = (batch if batch is not None else target.shape[0], num_classes)
    if target.dim() != 2 or tuple(target.shape) != expected or target.is_complex():
        rows = "batch" if batch is None else batch
        raise ValueError(
            f"{name} must be class indices [{rows}] or presence [{rows}, {num_classes}], "
            f"got shape {tuple(target.shape)}"
        )


def check_capsule_target(v: Tensor, target: object) -> None:
    """``target`` fits the class capsules ``v`` ``[batch, classes, dim]``: class indices
    ``[batch]`` or presence ``[batch, classes]``."""
    check_target("target", target, v.shape[1], v.shape[0])


def check_margins(m_pos: float, m_neg: float, lam: float) -> None:
    """The margin loss's constants: ``0 <= m_neg < m_pos`` and ``lam >= 0``."""
    if not 0 <= m_neg < m_pos:
        raise ValueError(f"margins must satisfy 0 <= m_neg < m_pos, got {m_neg}, {m_pos}")
    if not lam >= 0:
        raise ValueError(f"lam must be >= 0, got {lam}")


def check_pixel_counts(reconstructions: Tensor, images: object) -> None:
    """``reconstructions`` ``[B, ...]`` and ``images`` ``[B, ...]`` hold the same batch
    and as many values per image."""
    check_float_tensor("reconstructions", reconstructions)
    if not torch.is_tensor(images):
        raise TypeError(f"images must be a torch.Tensor, got {type(images).__name__}")
    if reconstructions.shape[0] != images.shape[0]:
        raise ValueError(
            f"batch sizes differ: {reconstructions.shape[0]} reconstructions for "
            f"{images.shape[0]} images"
        )
    if reconstructions[0].numel() != images[0].numel():
        raise ValueError(
            f"each reconstruction must have as many pixels as its image: "
            f"{tuple(reconstructions.shape[1:])} vs {tuple(images.shape[1:])}"
        )


#: A value computed from the call's arguments (by name; ``"self"`` for a method), e.g.
#: an expected shape that depends on the module.
FromArguments = Callable[[Mapping[str, Any]], Any]


def _resolve(value: Any, arguments: Mapping[str, Any]) -> Any:
    return value(arguments) if callable(value) else value


@dataclasses.dataclass(frozen=True)
class FloatTensor:
    """A floating-point tensor; ``dims`` axes, or ``shape`` (None entries: any size),
    described by ``layout`` in the message. ``shape`` and ``layout`` may be computed from
    the arguments (see :data:`FromArguments`)."""

    layout: str | FromArguments = ""
    dims: int | None = None
    shape: Sequence[int | None] | FromArguments | None = None
    optional: bool = False

    def __call__(self, name: str, value: object, arguments: Mapping[str, Any]) -> None:
        if value is None and self.optional:
            return
        layout, shape = _resolve(self.layout, arguments), _resolve(self.shape, arguments)
        check_float_tensor(name, value, layout, self.dims, shape)


@dataclasses.dataclass(frozen=True)
class ClassIndices:
    """An integer tensor ``[batch]`` of classes in ``[0, num_classes)`` (see
    :func:`check_class_indices`); both may be computed from the arguments."""

    num_classes: int | FromArguments
    batch: int | FromArguments | None = None
    optional: bool = False

    def __call__(self, name: str, value: object, arguments: Mapping[str, Any]) -> None:
        if value is None and self.optional:
            return
        num_classes = _resolve(self.num_classes, arguments)
        check_class_indices(name, value, num_classes, _resolve(self.batch, arguments))


@dataclasses.dataclass(frozen=True)
class AnyTensor:
    """A tensor of any dtype with ``dims`` axes, described by ``layout``."""

    layout: str
    dims: int

    def __call__(self, name: str, value: object, arguments: Mapping[str, Any]) -> None:
        check_tensor(name, value, self.layout, self.dims)


@dataclasses.dataclass(frozen=True)
class ModelImages:
    """Images a model (the method's ``self``, whose ``config`` has ``in_channels`` and
    ``image_size``) can read: floats ``[batch, C, S, S]``."""

    def __call__(self, name: str, value: object, arguments: Mapping[str, Any]) -> None:
        config = arguments["self"].config
        side, channels = config.image_size, config.in_channels
        check_float_tensor(
            name,
            value,
            f"[batch, {channels}, {side}, {side}] (pixels in [0, 1])",
            shape=(None, channels, side, side),
        )


@dataclasses.dataclass(frozen=True)
class ModelLabels:
    """Optional class indices ``[batch]`` for a model's images (the argument ``images``)
    and classes (``self.config.num_classes``)."""

    def __call__(self, name: str, value: object, arguments: Mapping[str, Any]) -> None:
        if value is not None:
            num_classes = arguments["self"].config.num_classes
            check_class_indices(name, value, num_classes, arguments["images"].shape[0])


@dataclasses.dataclass(frozen=True)
class Positive:
    """A real number greater than zero."""

    def __call__(self, name: str, value: object, arguments: Mapping[str, Any]) -> None:
        check_positive_number(name, value)


@dataclasses.dataclass(frozen=True)
class Int:
    """A whole number, at least ``minimum`` if given; ``label`` replaces the argument's
    name in the message."""

    minimum: int | None = None
    label: str | None = None

    def __call__(self, name: str, value: object, arguments: Mapping[str, Any]) -> None:
        check_int(self.label or name, value, self.minimum)


Function = TypeVar("Function", bound=Callable[..., Any])


def checked(
    *relations: Callable[..., None], **arguments: Callable[..., None]
) -> Callable[[Function], Function]:
    """Check a function's arguments before it runs.

    Each keyword names an argument and gives its check, called as ``check(name, value,
    arguments)`` with all the call's arguments by name, defaults filled in (e.g.
    :class:`FloatTensor`). Each positional ``relation`` checks several arguments at once:
    it is called with the arguments its own parameters name (e.g. :func:`check_margins`
    for ``m_pos``, ``m_neg`` and ``lam``). The decorated function is otherwise unchanged
    (``inspect.unwrap`` returns it).
    """

    def decorate(function: Function) -> Function:
        signature = inspect.signature(function)
        needed = [inspect.signature(relation).parameters for relation in relations]
        unknown = (set(arguments) | {n for names in needed for n in names}) - set(
            signature.parameters
        )
        if unknown:
            raise TypeError(f"{function.__qualname__} has no argument {sorted(unknown)}")

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            values = bound.arguments
            for name, check in arguments.items():
                check(name, values[name], values)
            for relation, names in zip(relations, needed, strict=True):
                relation(**{name: values[name] for name in names})
            return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
