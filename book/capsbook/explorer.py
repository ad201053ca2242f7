"""Data for the capsule explorer of the HTML book (chapter 9): the shipped model's
decoder and a few dozen test digits, which the page's script
(``book/_ext/capsnotes-explorer.js``) reads from two globals.

* ``window.CAPSNOTES_EXPLORER_DATA`` — the decoder: written by the book's build into
  ``_static/capsnotes-explorer-data.js`` (:func:`weights_script`) from the weights
  shipped in the package (:func:`shipped_arrays`), so the build needs no dataset.
* ``window.CAPSNOTES_EXPLORER_DIGITS`` — the test digits, their capsules and the
  measured names of the dimensions: an output of chapter 9 (:func:`digits_html`), which
  the build renders from the committed notebook like every other output.

In Jupyter and Colab, where the page's script does not run,
:class:`capsbook.explorer_widget.CapsuleExplorer` builds a simpler explorer of the same
digits (:func:`choose_digits`) with ipywidgets.

The page redraws the reconstruction in the browser every time the reader moves one of a
capsule's 16 numbers, so it needs the decoder's weights. They are the shipped model's
float16 weights, exactly: any rounding coarser than float16 moved some pixels of the
reconstruction by more than 2e-3 when it was measured (int8 with a scale per row: up to
0.16; float16 without its last two mantissa bits: up to 4.5e-3). To keep the file small
the weights travel as two planes of bytes — the high bytes (sign, exponent, two mantissa
bits), which compress somewhat and are deflated, and the low bytes, which do not and go
as they are. The test digits' images (mostly black) are deflated too.

Both globals hold plain JSON; binary data is in standard base64 (RFC 4648), which the
page reads with the browser's ``atob`` and inflates with its
``DecompressionStream("deflate")`` (zlib format).

The decoder's data is made from numpy arrays, so that the book's build, which installs
neither PyTorch nor ``capsnotes`` (``book/requirements.txt``), can write it: importing
this module needs numpy and safetensors alone, and :func:`shipped_arrays` reads the
shipped weights file with safetensors' numpy API. A model in memory gives the same
arrays through :func:`model_arrays`. The digits need the model itself, and the functions
that make them import torch and ``capsnotes`` when called.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import importlib.util
import json
import re
import zlib
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from safetensors.numpy import load as load_safetensors

if TYPE_CHECKING:
    from torch import Tensor

    from capsnotes import CapsNet
    from capsnotes.data import ImageSet

__all__ = [
    "DATA_FILE",
    "FORMAT",
    "OFFSETS",
    "choose_digits",
    "digits_html",
    "digits_payload",
    "model_arrays",
    "shipped_arrays",
    "weights_payload",
    "weights_script",
]

#: The file the page loads from ``_static/``.
DATA_FILE = "capsnotes-explorer-data.js"
#: The payload's layout; ``capsnotes-explorer.js`` reads this one (2: base64 binary).
FORMAT = 2
#: The offsets of chapter 9 (and the paper's Figure 4): −0.25 to +0.25 in steps of 0.05.
OFFSETS = [round(0.05 * k, 2) for k in range(-5, 6)]

#: A decoder layer's weight in a model's state: ``decoder.layers.<index>.weight``.
_DECODER_WEIGHT = re.compile(r"decoder\.layers\.(\d+)\.weight")


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _package() -> Path:
    """The folder of the ``capsnotes`` package, found without importing it (importing
    it imports torch): installed, or the checkout's on ``sys.path``."""
    spec = importlib.util.find_spec("capsnotes")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(
            "capsnotes is neither installed nor on sys.path: the explorer's data needs "
            "its version and its shipped weights"
        )
    return Path(spec.origin).parent


def _capsnotes_version() -> str:
    """``capsnotes.__version__``, read from the package's ``__init__.py`` without
    running it, as setuptools reads it for the package's metadata."""
    init = _package() / "__init__.py"
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__version__"
            for target in node.targets
        ):
            return str(ast.literal_eval(node.value))
    raise ValueError(f"{init} sets no __version__")


def model_arrays(model: CapsNet) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """What :func:`weights_payload` reads of a CapsNet in memory: its decoder's tensors
    as numpy arrays, named as in the model's ``state_dict()``, and its configuration as
    a dict."""
    state = model.decoder.state_dict(prefix="decoder.")
    arrays = {name: tensor.detach().cpu().numpy() for name, tensor in state.items()}
    return arrays, asdict(model.config)


def shipped_arrays(
    name: str = "mnist",
) -> tuple[dict[str, np.ndarray], dict[str, Any], dict[str, Any]]:
    """What :func:`weights_payload` reads of the shipped model ``name``
    (``capsnotes/training/weights/<name>.safetensors`` and its record ``<name>.json``),
    read with numpy alone, no torch: the model's tensors as numpy arrays (the
    checkpoint's ``model.<param>``, named ``<param>``; float16, as stored), its
    configuration and the record, as
    :func:`~capsnotes.training.pretrained.load_pretrained` returns it with the model.
    Raises ``ValueError`` if the weights file is not the one its record names (its
    SHA-256 differs), as :func:`~capsnotes.training.pretrained.load_pretrained` does."""
    folder = _package() / "training" / "weights"
    weights, record = folder / f"{name}.safetensors", folder / f"{name}.json"
    history = json.loads(record.read_text(encoding="utf-8"))
    data = weights.read_bytes()
    if hashlib.sha256(data).hexdigest() != history["shipped"]["sha256"]:
        raise ValueError(
            f"{weights} does not match its record {record.name} (SHA-256 differs): the "
            "file is damaged or comes from another run"
        )
    arrays = {
        key.removeprefix("model."): array
        for key, array in load_safetensors(data).items()
        if key.startswith("model.")
    }
    return arrays, history["train_config"]["model"], history


def _weights(state: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The decoder's float16 weights and biases, layer by layer (each weight [rows,
    cols] row-major, then its bias [rows]): ``count`` numbers, as ``high``, the deflated
    plane of their high bytes, and ``low``, the raw plane of their low bytes (both
    base64). ``state``: the model's tensors as numpy arrays, of which the decoder's
    linear layers (``decoder.layers.<index>.weight`` and ``.bias``) are read."""
    indices = sorted(
        int(found.group(1))
        for found in map(_DECODER_WEIGHT.fullmatch, state)
        if found is not None
    )
    layers, halves = [], []
    for index in indices:
        weight = np.asarray(state[f"decoder.layers.{index}.weight"])
        bias = np.asarray(state[f"decoder.layers.{index}.bias"])
        for array in (weight, bias):
            halves.append(array.astype("<f2").reshape(-1))
        rows, cols = weight.shape
        layers.append({"rows": rows, "cols": cols})
    raw = np.concatenate(halves).view(np.uint8).reshape(-1, 2)
    # little-endian: byte 1 is the high one
    high = zlib.compress(raw[:, 1].tobytes(), 9)
    return {
        "layers": layers,
        "activations": ["relu"] * (len(layers) - 1) + ["sigmoid"],
        "count": raw.shape[0],
        "high": _base64(high),
        "low": _base64(raw[:, 0].tobytes()),
    }


def choose_digits(
    model: CapsNet,
    data: ImageSet,
    per_class: int,
    wrong: int,
    outputs: dict[str, Any] | None = None,
    scanned: int = 2000,
) -> tuple[list[int], Tensor, Tensor]:
    """The first ``per_class`` correctly read test digits of each class and the first
    ``wrong`` misread ones (in test-set order), with the predictions [scanned] and
    capsules [scanned, classes, dim] of the first ``scanned`` test digits (from
    ``outputs`` where given: :func:`~capsnotes.training.evaluation.evaluate`'s outputs
    on ``data``)."""
    from capsnotes.data import ImageSet
    from capsnotes.training.evaluation import evaluate

    if outputs is None:
        first = ImageSet(data.images[:scanned], data.labels[:scanned], data.classes)
        outputs = evaluate(model, first, return_outputs=True)
    predictions = outputs["predictions"][:scanned]
    capsules = outputs["capsules"][:scanned]
    labels = data.labels[: len(predictions)]
    found: list[int] = []
    for digit in range(model.config.num_classes):
        right = ((labels == digit) & (predictions == labels)).nonzero().flatten()
        found += right[:per_class].tolist()
    found += (predictions != labels).nonzero().flatten()[:wrong].tolist()
    return found, predictions, capsules


def _dimension_labels(
    model: CapsNet,
    data: ImageSet,
    predictions: Tensor,
    capsules: Tensor,
    count: int = 100,
) -> dict[str, dict[str, str]]:
    """For each class, the dimensions whose measured effect is clear: chapter 9's
    measurement (:func:`~capsnotes.analysis.dimension_effects` over the first ``count``
    correctly read test digits of the class, change per step of 0.05), kept where the
    dimension moves a property most of all 16 and in the same direction for at least 90%
    of the digits."""
    import torch

    from capsbook.analysis import PROPERTIES, dimension_effects

    labels: dict[str, dict[str, str]] = {}
    right = (predictions == data.labels[: len(predictions)]).nonzero().flatten()
    for digit in range(model.config.num_classes):
        chosen = right[predictions[right] == digit][:count]
        if len(chosen) == 0:
            continue
        digits = torch.full((len(chosen),), digit)
        effects = dimension_effects(model, capsules[chosen, digit], digits, OFFSETS)
        named: dict[int, list[str]] = {}
        for name in PROPERTIES:
            per_step = 0.05 * effects[name]  # [N, 16]
            mean = per_step.mean(0)
            dim = int(mean.abs().argmax())
            agree = (per_step[:, dim].sign() == mean[dim].sign()).float().mean().item()
            if agree >= 0.9:
                named.setdefault(dim, []).append(f"{name} {mean[dim].item():+.2f} px")
        labels[str(digit)] = {str(d): ", ".join(v) for d, v in sorted(named.items())}
    return labels


def weights_payload(
    state: Mapping[str, np.ndarray],
    config: Mapping[str, Any],
    history: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The decoder for the page, JSON-ready: its float16 weights (:func:`_weights`) and
    the sizes the page needs. ``state`` and ``config``: the model's tensors as numpy
    arrays and its configuration (a dict of :class:`~capsnotes.CapsNetConfig`'s fields),
    from :func:`model_arrays` or :func:`shipped_arrays`. ``history``, the record
    :func:`shipped_arrays` (or :func:`~capsnotes.load_pretrained`) returned with them,
    names its weights."""
    source: dict[str, Any] = {"pretrained": None}
    if history is not None:
        source = {
            "pretrained": history["shipped"]["name"],
            "sha256": history["shipped"]["sha256"],
        }
    return {
        "format": FORMAT,
        "capsnotes": _capsnotes_version(),
        "source": source,
        "size": config["image_size"],
        "classes": config["num_classes"],
        "dim": config["digit_dim"],
        "offsets": OFFSETS,
        "weights": _weights(state),
    }


def digits_payload(
    model: CapsNet,
    data: ImageSet,
    *,
    per_class: int = 3,
    wrong: int = 6,
    outputs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The test digits for the page, JSON-ready: the chosen digits (``digits``: index,
    label, prediction; :func:`choose_digits`), their images (``images``: deflated uint8
    [digits, size, size], base64), all ten capsules of each (``capsules``: little-endian
    float32 [digits, classes, dim], base64; the page computes the lengths) and the
    measured dimension labels. ``outputs``: the model's outputs on ``data`` as
    ``evaluate(model, data, return_outputs=True)`` returns them, if already computed
    (the predictions and capsules of its first 2,000 digits are read)."""
    model = model.cpu().eval()
    chosen, predictions, capsules = choose_digits(
        model, data, per_class, wrong, outputs
    )
    digits = [
        {"index": i, "label": int(data.labels[i]), "prediction": int(predictions[i])}
        for i in chosen
    ]
    images = zlib.compress(data.images[chosen].numpy().tobytes(), 9)
    vectors = capsules[chosen].float().numpy().astype("<f4").tobytes()
    return {
        "format": FORMAT,
        "digits": digits,
        "images": _base64(images),
        "capsules": _base64(vectors),
        "dimension_labels": _dimension_labels(model, data, predictions, capsules),
    }


def _assignment(name: str, payload: dict[str, Any]) -> str:
    return f"window.{name} = {json.dumps(payload, separators=(',', ':'))};"


def weights_script(
    state: Mapping[str, np.ndarray],
    config: Mapping[str, Any],
    history: Mapping[str, Any] | None = None,
) -> str:
    """The text of ``_static/capsnotes-explorer-data.js``: :func:`weights_payload` as
    compact JSON, assigned to ``window.CAPSNOTES_EXPLORER_DATA``."""
    payload = weights_payload(state, config, history)
    return _assignment("CAPSNOTES_EXPLORER_DATA", payload) + "\n"


class DigitsForThePage:
    """Chapter 9's output that carries the explorer's digits into the HTML page: a
    script that sets ``window.CAPSNOTES_EXPLORER_DIGITS``. Where no page loads the
    explorer (Jupyter, Colab) it shows a one-line summary."""

    def __init__(self, payload: dict[str, Any]) -> None:
        self.payload = payload

    def _repr_html_(self) -> str:
        return (
            f"<script>{_assignment('CAPSNOTES_EXPLORER_DIGITS', self.payload)}</script>"
        )

    def __repr__(self) -> str:
        return f"explorer data: {len(self.payload['digits'])} test digits"


def digits_html(model: CapsNet, data: ImageSet, **kwargs: Any) -> DigitsForThePage:
    """:func:`digits_payload` as an output that a notebook shows and the HTML page
    runs."""
    return DigitsForThePage(digits_payload(model, data, **kwargs))
