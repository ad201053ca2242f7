"""The explorer's data: binary that survives its text form, the shipped decoder's exact
float16 weights, and the measured labels. (The page itself: tests/test_browser.py.)"""

import json
import zlib

import numpy as np
import torch

from capsnotes import CapsNet, CapsNetConfig
from capsnotes.data import ImageSet
from capsnotes.explorer import (
    UNSAFE,
    Binary,
    decode_base128,
    encode_base128,
    explorer_payload,
    to_javascript,
)


def test_base128_round_trips_every_byte_and_avoids_what_a_string_cannot_hold():
    data = (
        bytes(range(256)) * 3
        + np.random.default_rng(0).integers(0, 256, 1001).astype(np.uint8).tobytes()
    )
    text = encode_base128(data)
    assert decode_base128(text, len(data)) == data
    assert len(text) == -(-8 * len(data) // 7)  # 7 bits per character
    assert not set(map(chr, UNSAFE)) & set(text)
    assert all(ord(c) < 0x80 + 0x80 for c in text)


def test_javascript_keeps_binary_raw_and_the_rest_json():
    blob = Binary(encode_base128(bytes(range(256))))
    text = to_javascript({"a": [1, 2.5, "x"], "b": blob})
    assert text.startswith('{"a":[1,2.5,"x"],"b":"') and text.endswith('"}')
    assert blob in text
    assert json.loads(to_javascript({"a": [1, 2.5, "x"]})) == {"a": [1, 2.5, "x"]}


def test_the_payload_carries_the_exact_float16_decoder():
    torch.manual_seed(0)
    config = CapsNetConfig(conv_channels=8, primary_channels=2, decoder_hidden=(16, 32))
    model = CapsNet(config).eval()
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (40, 1, 28, 28), generator=generator, dtype=torch.uint8)
    data = ImageSet(images, torch.arange(40) % 10, tuple("0123456789"))
    payload = explorer_payload(model, data, per_class=1, wrong=2)
    weights = payload["weights"]
    high = zlib.decompress(decode_base128(weights["high"], weights["high_bytes"]))
    low = decode_base128(weights["low"], weights["count"])
    halves = np.frombuffer(bytes(b for pair in zip(low, high, strict=True) for b in pair), "<f2")
    layers = [m for m in model.decoder.layers if isinstance(m, torch.nn.Linear)]
    expected = torch.cat([t.detach().half().flatten() for m in layers for t in (m.weight, m.bias)])
    assert np.array_equal(halves, expected.numpy())
    assert [(la["rows"], la["cols"]) for la in weights["layers"]] == [
        (16, 160),
        (32, 16),
        (784, 32),
    ]
    count = len(payload["digits"])
    vectors = np.frombuffer(decode_base128(payload["capsules"], payload["capsules_bytes"]), "<f4")
    assert vectors.shape == (count * 10 * 16,)
    pictures = zlib.decompress(decode_base128(payload["images"], payload["images_bytes"]))
    indices = [d["index"] for d in payload["digits"]]
    assert pictures == images[indices].numpy().tobytes()
    assert payload["offsets"][0] == -0.25 and payload["offsets"][-1] == 0.25
