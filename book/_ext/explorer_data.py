"""Data for the capsule explorer of the HTML book (chapter 9): the shipped model's decoder
and a few dozen test digits, written as one JavaScript file that the page loads.

The book's build writes it (``capsnotes_html.py`` beside this file calls
:func:`write_explorer_data` when the HTML is built); it is no part of the ``capsnotes``
package, only a reader of it.

The page redraws the reconstruction in the browser every time the reader moves one of a
capsule's 16 numbers, so it needs the decoder's weights. They are the shipped model's
float16 weights, exactly: any rounding coarser than float16 moved some pixels of the
reconstruction by more than 2e-3 when it was measured (int8 with a scale per row: up to
0.16; float16 without its last two mantissa bits: up to 4.5e-3). To keep the file small
the weights travel as two planes of bytes — the high bytes (sign, exponent, two mantissa
bits), which compress somewhat and are deflated, and the low bytes, which do not and go
as they are. The test digits' images (mostly black) are deflated too.

The file is ``window.CAPSNOTES_EXPLORER_DATA = {...};`` with plain JSON inside; binary
data is in standard base64 (RFC 4648), which the page reads with the browser's ``atob``
and inflates with its ``DecompressionStream("deflate")`` (zlib format).
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from capsnotes.analysis import PROPERTIES, dimension_effects
from capsnotes.data import ImageSet, load_dataset
from capsnotes.evaluation import evaluate
from capsnotes.files import atomic_write_bytes
from capsnotes.model import CapsNet
from capsnotes.pretrained import load_pretrained
from capsnotes.version import __version__

__all__ = [
    "DATA_FILE",
    "FORMAT",
    "OFFSETS",
    "data_script",
    "explorer_payload",
    "write_explorer_data",
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
    """The decoder's float16 weights and biases, layer by layer (each weight [rows, cols]
    row-major, then its bias [rows]): ``count`` numbers, as ``high``, the deflated plane
    of their high bytes, and ``low``, the raw plane of their low bytes (both base64)."""
    layers, halves = [], []
    for layer in _linear_layers(model):
        for tensor in (layer.weight, layer.bias):
            halves.append(tensor.detach().cpu().half().contiguous().view(-1))
        layers.append({"rows": layer.out_features, "cols": layer.in_features})
    raw = np.frombuffer(torch.cat(halves).numpy().tobytes(), dtype=np.uint8).reshape(-1, 2)
    high = zlib.compress(raw[:, 1].tobytes(), 9)  # little-endian: byte 1 is the high one
    return {
        "layers": layers,
        "activations": ["relu"] * (len(layers) - 1) + ["sigmoid"],
        "count": raw.shape[0],
        "high": _base64(high),
        "low": _base64(raw[:, 0].tobytes()),
    }


def _choose_digits(
    model: CapsNet, data: ImageSet, per_class: int, wrong: int, scanned: int = 2000
) -> tuple[list[int], Tensor, Tensor]:
    """The first ``per_class`` correctly read test digits of each class and the first
    ``wrong`` misread ones (in test-set order), with the predictions [scanned] and
    capsules [scanned, classes, dim] of the first ``scanned`` test digits."""
    first = ImageSet(data.images[:scanned], data.labels[:scanned], data.classes)
    scores = evaluate(model, first, return_outputs=True)
    predictions, labels = scores["predictions"], first.labels
    found: list[int] = []
    for digit in range(model.config.num_classes):
        right = ((labels == digit) & (predictions == labels)).nonzero().flatten()
        found += right[:per_class].tolist()
    found += (predictions != labels).nonzero().flatten()[:wrong].tolist()
    return found, predictions, scores["capsules"]


def _dimension_labels(
    model: CapsNet, data: ImageSet, predictions: Tensor, capsules: Tensor, count: int = 100
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


def explorer_payload(
    model: CapsNet | None = None,
    data: ImageSet | None = None,
    *,
    history: dict[str, Any] | None = None,
    per_class: int = 3,
    wrong: int = 6,
    data_root: str | Path | None = None,
) -> dict[str, Any]:
    """Everything the page needs, JSON-ready: the decoder's weights (:func:`_weights`),
    the chosen test digits (``digits``: index, label, prediction), their images
    (``images``: deflated uint8 [digits, size, size], base64), all ten capsules of each
    (``capsules``: little-endian float32 [digits, classes, dim], base64; the page computes
    the lengths) and the measured dimension labels. Defaults: the shipped ``mnist`` model
    and the MNIST test set. ``history``, the record :func:`~capsnotes.load_pretrained`
    returned with ``model``, names its weights in the file."""
    if model is None:
        model, history = load_pretrained("mnist")
    if history is None:
        source: dict[str, Any] = {"pretrained": None}
    else:
        shipped = history["shipped"]
        source = {"pretrained": shipped["name"], "sha256": shipped["sha256"]}
    model = model.cpu().eval()
    data = load_dataset("mnist", train=False, root=data_root) if data is None else data
    chosen, predictions, capsules = _choose_digits(model, data, per_class, wrong)
    digits = [
        {"index": i, "label": int(data.labels[i]), "prediction": int(predictions[i])}
        for i in chosen
    ]
    images = zlib.compress(data.images[chosen].numpy().tobytes(), 9)
    vectors = capsules[chosen].float().numpy().astype("<f4").tobytes()
    return {
        "format": FORMAT,
        "capsnotes": __version__,
        "source": source,
        "size": model.config.image_size,
        "classes": model.config.num_classes,
        "dim": model.config.digit_dim,
        "offsets": OFFSETS,
        "weights": _weights(model),
        "digits": digits,
        "images": _base64(images),
        "capsules": _base64(vectors),
        "dimension_labels": _dimension_labels(model, data, predictions, capsules),
    }


def data_script(payload: dict[str, Any]) -> str:
    """The data file's text: ``payload`` as compact JSON, assigned to
    ``window.CAPSNOTES_EXPLORER_DATA``."""
    return f"window.CAPSNOTES_EXPLORER_DATA = {json.dumps(payload, separators=(',', ':'))};\n"


def write_explorer_data(
    folder: str | Path, *, cache: str | Path | None = None, data_root: str | Path | None = None
) -> Path:
    """Write ``folder/capsnotes-explorer-data.js`` for the shipped model. With ``cache``
    (a folder), reuse a file made earlier for the same weights, capsnotes version and
    :data:`FORMAT`."""
    target = Path(folder) / DATA_FILE
    model, history = load_pretrained("mnist")
    made_for = f"{history['shipped']['sha256']}|{__version__}|{FORMAT}"
    key = hashlib.sha256(made_for.encode()).hexdigest()[:16]
    cached = Path(cache) / f"explorer-{key}.js" if cache is not None else None
    if cached is not None and cached.is_file():
        atomic_write_bytes(target, cached.read_bytes())
        return target
    payload = explorer_payload(model, history=history, data_root=data_root)
    text = data_script(payload).encode("utf-8")
    atomic_write_bytes(target, text)
    if cached is not None:
        atomic_write_bytes(cached, text)  # makes the folder
    return target
