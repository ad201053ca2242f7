"""Data for the capsule explorer of the HTML book (chapter 9): the shipped model's decoder
and a few dozen test digits, written as one JavaScript file that the page loads.

The page redraws the reconstruction in the browser every time the reader moves one of a
capsule's 16 numbers, so it needs the decoder's weights. They are the shipped model's
float16 weights, exactly: any rounding coarser than float16 moved some pixels of the
reconstruction by more than 2e-3 when it was measured (int8 with a scale per row: up to
0.16; float16 without its last two mantissa bits: up to 4.5e-3). To keep the file small
the weights travel as two planes of bytes — the high bytes (sign, exponent, two mantissa
bits), which compress well and are deflated, and the low bytes, which do not — and the
binary data as text with 7 bits per character (:func:`encode_base128`), where base64
would carry 6.

``python -m capsnotes explorer --out DIR`` writes the file; the book's build calls
:func:`write_explorer_data` itself (``book/_ext/capsnotes_html.py``).
"""

from __future__ import annotations

import hashlib
import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .analysis import PROPERTIES, dimension_effects
from .data import ImageSet, load_dataset
from .evaluation import evaluate
from .files import atomic_write_bytes
from .model import CapsNet
from .pretrained import load_pretrained
from .version import __version__

__all__ = [
    "DATA_FILE",
    "Binary",
    "OFFSETS",
    "decode_base128",
    "encode_base128",
    "explorer_payload",
    "to_javascript",
    "write_explorer_data",
]

#: The file the page loads from ``_static/``.
DATA_FILE = "capsnotes-explorer-data.js"
#: The offsets of chapter 9 (and the paper's Figure 4): −0.25 to +0.25 in steps of 0.05.
OFFSETS = [round(0.05 * k, 2) for k in range(-5, 6)]
#: Values 0-127 that may not stand for themselves in a JavaScript string literal (NUL,
#: line feed, carriage return, the quote and the backslash); each is written as the
#: character 0x80 + value instead.
UNSAFE = (0x00, 0x0A, 0x0D, 0x22, 0x5C)


def encode_base128(data: bytes) -> str:
    """``data`` as text with 7 bits per character, safe inside a double-quoted JavaScript
    string: characters 0-127 stand for their value, except :data:`UNSAFE`, which are
    written as 0x80 + value. The last character is padded with zero bits."""
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8))
    bits = np.concatenate([bits, np.zeros(-len(bits) % 7, dtype=np.uint8)])
    values = bits.reshape(-1, 7) @ (1 << np.arange(6, -1, -1))
    codes = np.where(np.isin(values, UNSAFE), values + 0x80, values)
    return "".join(map(chr, codes.tolist()))


def decode_base128(text: str, length: int) -> bytes:
    """The inverse of :func:`encode_base128`; ``length`` bytes."""
    codes = np.fromiter(map(ord, text), dtype=np.int64, count=len(text))
    values = np.where(codes >= 0x80, codes - 0x80, codes).astype(np.uint8)
    bits = np.unpackbits(values[:, None], axis=1)[:, 1:].reshape(-1)
    return np.packbits(bits[: 8 * length]).tobytes()


def _linear_layers(model: CapsNet) -> list[nn.Linear]:
    return [layer for layer in model.decoder.layers if isinstance(layer, nn.Linear)]


def _weights(model: CapsNet) -> dict[str, Any]:
    """The decoder's float16 weights and biases, as a deflated high-byte plane and a raw
    low-byte plane, with the layout the page reads them back in."""
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
        "high": Binary(encode_base128(high)),
        "high_bytes": len(high),
        "low": Binary(encode_base128(raw[:, 0].tobytes())),
    }


def _choose_digits(
    model: CapsNet, data: ImageSet, per_class: int, wrong: int, scanned: int = 2000
) -> tuple[list[int], Tensor, Tensor]:
    """The first ``per_class`` correctly read test digits of each class and the first
    ``wrong`` misread ones (in test-set order), with the predictions and capsules of the
    first ``scanned`` test digits."""
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
    """Everything the page needs, JSON-ready: the decoder's weights, the chosen test
    digits (image, label, prediction, all ten capsules) and the measured dimension
    labels. Defaults: the shipped ``mnist`` model and the MNIST test set. ``history``, the
    record :func:`~capsnotes.load_pretrained` returned with ``model``, names its weights
    in the file."""
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
    # the digits' images as deflated bytes (mostly black: they compress well), and all
    # their capsules as little-endian float32 [digits, classes, dim]; the page computes
    # the lengths
    images = zlib.compress(data.images[chosen].numpy().tobytes(), 9)
    vectors = capsules[chosen].float().numpy().tobytes()
    return {
        "format": 1,
        "capsnotes": __version__,
        "source": source,
        "size": model.config.image_size,
        "classes": model.config.num_classes,
        "dim": model.config.digit_dim,
        "offsets": OFFSETS,
        "weights": _weights(model),
        "digits": digits,
        "images": Binary(encode_base128(images)),
        "images_bytes": len(images),
        "capsules": Binary(encode_base128(vectors)),
        "capsules_bytes": len(vectors),
        "dimension_labels": _dimension_labels(model, data, predictions, capsules),
        "unsafe": list(UNSAFE),
    }


class Binary(str):
    """A string made by :func:`encode_base128`: written into the JavaScript file as it
    is, where JSON would escape its control characters into six bytes each."""


def to_javascript(value: Any) -> str:
    """``value`` as a JavaScript expression: JSON, except that :class:`Binary` strings are
    written raw between double quotes (they hold no quote, backslash or line break)."""
    raw: list[str] = []

    def placeholders(item: Any) -> Any:
        if isinstance(item, Binary):
            raw.append(item)
            return f"\u0000binary{len(raw) - 1}\u0000"
        if isinstance(item, dict):
            return {k: placeholders(v) for k, v in item.items()}
        if isinstance(item, list):
            return [placeholders(v) for v in item]
        return item

    text = json.dumps(placeholders(value), separators=(",", ":"))
    for index, blob in enumerate(raw):
        text = text.replace(f'"\\u0000binary{index}\\u0000"', f'"{blob}"', 1)
    return text


def write_explorer_data(
    folder: str | Path, *, cache: str | Path | None = None, data_root: str | Path | None = None
) -> Path:
    """Write ``folder/capsnotes-explorer-data.js`` for the shipped model. With ``cache``
    (a folder), reuse a file made earlier for the same weights and capsnotes version."""
    target = Path(folder) / DATA_FILE
    model, history = load_pretrained("mnist")
    key = hashlib.sha256(f"{history['shipped']['sha256']}|{__version__}".encode()).hexdigest()[:16]
    cached = Path(cache) / f"explorer-{key}.js" if cache is not None else None
    if cached is not None and cached.is_file():
        atomic_write_bytes(target, cached.read_bytes())
        return target
    payload = explorer_payload(model, history=history, data_root=data_root)
    text = f"window.CAPSNOTES_EXPLORER_DATA = {to_javascript(payload)};\n"
    atomic_write_bytes(target, text.encode("utf-8"))
    if cached is not None:
        atomic_write_bytes(cached, text.encode("utf-8"))  # makes the folder
    return target
