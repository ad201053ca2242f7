"""Data for the capsule explorer of the HTML book (chapter 9): the shipped model's
decoder and a few dozen test digits, which the page's script
(``book/_ext/capsnotes-explorer.js``) reads from two globals.

* ``window.CAPSNOTES_EXPLORER_DATA`` — the decoder: written by the book's build into
  ``_static/capsnotes-explorer-data.js`` (:func:`weights_script`) from the weights
  shipped in the package, so the build needs no dataset.
* ``window.CAPSNOTES_EXPLORER_DIGITS`` — the test digits, their capsules and the
  measured names of the dimensions: an output of chapter 9 (:func:`digits_html`), which
  the build renders from the committed notebook like every other output.

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
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from capsbook.analysis import PROPERTIES, dimension_effects
from capsnotes import CapsNet, __version__
from capsnotes.data import ImageSet
from capsnotes.training.evaluation import evaluate

__all__ = [
    "DATA_FILE",
    "FORMAT",
    "OFFSETS",
    "digits_html",
    "digits_payload",
    "weights_payload",
    "weights_script",
]

#: The file the page loads from ``_static/``.
DATA_FILE = "capsnotes-explorer-data.js"
#: The payload's layout; ``capsnotes-explorer.js`` reads this one (2: base64 binary).
FORMAT = 2
#: The offsets of chapter 9 (and the paper's Figure 4): −0.25 to +0.25 in steps of 0.05.
OFFSETS = [round(0.05 * k, 2) for k in range(-5, 6)]


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _linear_layers(model: CapsNet) -> list[nn.Linear]:
    return [layer for layer in model.decoder.layers if isinstance(layer, nn.Linear)]


def _weights(model: CapsNet) -> dict[str, Any]:
    """The decoder's float16 weights and biases, layer by layer (each weight [rows,
    cols] row-major, then its bias [rows]): ``count`` numbers, as ``high``, the deflated
    plane of their high bytes, and ``low``, the raw plane of their low bytes (both
    base64)."""
    layers, halves = [], []
    for layer in _linear_layers(model):
        for tensor in (layer.weight, layer.bias):
            halves.append(tensor.detach().cpu().half().contiguous().view(-1))
        layers.append({"rows": layer.out_features, "cols": layer.in_features})
    raw = np.frombuffer(torch.cat(halves).numpy().tobytes(), dtype=np.uint8).reshape(
        -1, 2
    )
    # little-endian: byte 1 is the high one
    high = zlib.compress(raw[:, 1].tobytes(), 9)
    return {
        "layers": layers,
        "activations": ["relu"] * (len(layers) - 1) + ["sigmoid"],
        "count": raw.shape[0],
        "high": _base64(high),
        "low": _base64(raw[:, 0].tobytes()),
    }


def _choose_digits(
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
    model: CapsNet, history: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The decoder for the page, JSON-ready: its float16 weights (:func:`_weights`) and
    the sizes the page needs. ``history``, the record :func:`~capsnotes.load_pretrained`
    returned with ``model``, names its weights."""
    source: dict[str, Any] = {"pretrained": None}
    if history is not None:
        source = {
            "pretrained": history["shipped"]["name"],
            "sha256": history["shipped"]["sha256"],
        }
    return {
        "format": FORMAT,
        "capsnotes": __version__,
        "source": source,
        "size": model.config.image_size,
        "classes": model.config.num_classes,
        "dim": model.config.digit_dim,
        "offsets": OFFSETS,
        "weights": _weights(model),
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
    label, prediction; :func:`_choose_digits`), their images (``images``: deflated uint8
    [digits, size, size], base64), all ten capsules of each (``capsules``: little-endian
    float32 [digits, classes, dim], base64; the page computes the lengths) and the
    measured dimension labels. ``outputs``: the model's outputs on ``data`` as
    ``evaluate(model, data, return_outputs=True)`` returns them, if already computed
    (the predictions and capsules of its first 2,000 digits are read)."""
    model = model.cpu().eval()
    chosen, predictions, capsules = _choose_digits(
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


def weights_script(model: CapsNet, history: dict[str, Any] | None = None) -> str:
    """The text of ``_static/capsnotes-explorer-data.js``: :func:`weights_payload` as
    compact JSON, assigned to ``window.CAPSNOTES_EXPLORER_DATA``."""
    return (
        _assignment("CAPSNOTES_EXPLORER_DATA", weights_payload(model, history)) + "\n"
    )


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
