"""The explorer's data (capsbook.explorer): the shipped decoder's exact float16 weights,
images and capsules that come back from their base64 form, a data file and a page output
that hold plain JSON, and the book's build writing the data file without torch, byte for
byte as from the model loaded in PyTorch; and the notebook's explorer, whose controls
decode what they show. (The page itself: tests/test_browser.py.)"""

import base64
import json
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch

from capsbook.explorer import (
    FORMAT,
    digits_html,
    model_arrays,
    weights_payload,
    weights_script,
)
from capsbook.explorer_widget import CapsuleExplorer
from capsnotes import CapsNet, CapsNetConfig
from capsnotes.data import ImageSet
from capsnotes.training.pretrained import load_pretrained
from tests.conftest import REPO


@pytest.fixture(scope="module")
def made():
    """A small untrained CapsNet, 40 random images and the payload made from them."""
    torch.manual_seed(0)
    config = CapsNetConfig(conv_channels=8, primary_channels=2, decoder_hidden=(16, 32))
    model = CapsNet(config).eval()
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (40, 1, 28, 28), generator=generator, dtype=torch.uint8)
    data = ImageSet(images, torch.arange(40) % 10, tuple("0123456789"))
    digits = digits_html(model, data, per_class=1, wrong=2).payload
    return model, data, weights_payload(*model_arrays(model)) | digits


def test_the_payload_carries_the_exact_float16_decoder(made):
    model, _, payload = made
    weights = payload["weights"]
    high = zlib.decompress(base64.b64decode(weights["high"], validate=True))
    low = base64.b64decode(weights["low"], validate=True)
    assert len(high) == len(low) == weights["count"]
    pairs = np.stack([np.frombuffer(low, np.uint8), np.frombuffer(high, np.uint8)], axis=1)
    halves = np.frombuffer(pairs.tobytes(), "<f2")
    layers = [m for m in model.decoder.layers if isinstance(m, torch.nn.Linear)]
    expected = torch.cat([t.detach().half().flatten() for m in layers for t in (m.weight, m.bias)])
    assert np.array_equal(halves, expected.numpy())
    assert [(la["rows"], la["cols"]) for la in weights["layers"]] == [
        (16, 160),
        (32, 16),
        (784, 32),
    ]
    assert weights["activations"] == ["relu", "relu", "sigmoid"]


def test_the_digits_images_and_capsules_come_back_exactly(made):
    model, data, payload = made
    indices = [d["index"] for d in payload["digits"]]
    assert len(indices) == len(set(indices)) > 0
    pictures = zlib.decompress(base64.b64decode(payload["images"], validate=True))
    assert pictures == data.images[indices].numpy().tobytes()
    vectors = np.frombuffer(base64.b64decode(payload["capsules"], validate=True), "<f4")
    with torch.no_grad():
        capsules = model.encode(data.images[indices].float() / 255)  # [digits, 10, 16]
    assert vectors.shape == (len(indices) * 10 * 16,)
    assert torch.allclose(torch.from_numpy(vectors.copy()).view(-1, 10, 16), capsules, atol=1e-5)
    assert payload["format"] == FORMAT == 2
    assert payload["offsets"][0] == -0.25 and payload["offsets"][-1] == 0.25


def test_the_data_file_and_the_page_output_each_assign_plain_json(made):
    model, data, payload = made
    text = weights_script(*model_arrays(model))
    prefix = "window.CAPSNOTES_EXPLORER_DATA = "
    assert text.startswith(prefix) and text.endswith(";\n")
    assert text.isascii() and "\n" not in text[:-1]
    assert json.loads(text[len(prefix) : -2]) == weights_payload(*model_arrays(model))
    output = digits_html(model, data, per_class=1, wrong=2)
    page = output._repr_html_()
    prefix = "<script>window.CAPSNOTES_EXPLORER_DIGITS = "
    assert page.startswith(prefix) and page.endswith(";</script>")
    assert json.loads(page[len(prefix) : -len(";</script>")]) == output.payload
    assert repr(output) == f"explorer data: {len(output.payload['digits'])} test digits"


def test_the_digits_can_reuse_the_outputs_already_computed(made):
    """Chapter 9 hands over the outputs of its own evaluation: the same payload."""
    from capsnotes.training.evaluation import evaluate

    model, data, _ = made
    outputs = evaluate(model, data, return_outputs=True)
    again = digits_html(model, data, per_class=1, wrong=2, outputs=outputs).payload
    assert again == digits_html(model, data, per_class=1, wrong=2).payload


#: What the book's build runs to write the data file, in a Python where torch cannot be
#: imported: its extensions (book/_ext), then the data of the shipped model.
BUILD_WITHOUT_TORCH = f"""
import sys
sys.modules["torch"] = None  # importing torch raises ImportError
sys.path.insert(0, {str(REPO / "book" / "_ext")!r})
import capsnotes_html, committed_outputs
from capsbook.explorer import shipped_arrays, weights_script
sys.stdout.write(weights_script(*shipped_arrays("mnist")))
imported = [m for m in sys.modules if m.split(".")[0] in ("torch", "capsnotes")]
assert imported == ["torch"], imported
"""


def test_the_build_writes_the_data_file_without_torch_as_pytorch_would(tmp_path):
    """The build (book/requirements.txt) installs neither torch nor capsnotes: it reads
    the shipped weights with safetensors' numpy API. The file it writes is the one the
    shipped model, loaded in PyTorch, gives: the same bytes."""
    built = subprocess.run(
        [sys.executable, "-c", BUILD_WITHOUT_TORCH],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    model, history = load_pretrained("mnist")
    assert built.stdout == weights_script(*model_arrays(model), history)
    payload = json.loads(built.stdout.removeprefix("window.CAPSNOTES_EXPLORER_DATA = ")[:-2])
    assert payload["source"] == {"pretrained": "mnist", "sha256": history["shipped"]["sha256"]}


def test_the_notebook_explorer_decodes_the_capsule_its_controls_show(made):
    """The digits are the page's; a digit starts at the capsule of its prediction, at
    its own values, ±0.25 around them; the decoded image is the decoder's on the
    sliders' capsule; moving one slider changes it, and another class resets them."""
    model, data, payload = made
    explorer = CapsuleExplorer(model, data, per_class=1, wrong=2)
    shown = [k for _, k in explorer.picker.options]
    assert shown == [digit["index"] for digit in payload["digits"]]
    k = shown[1]
    explorer.picker.value = k
    capsules = model.encode(data.floats(slice(k, k + 1)))  # [1, classes, dim]
    predicted = int(capsules.norm(dim=-1).argmax())
    assert explorer.fed.value == predicted
    own = capsules[0, predicted]
    values = torch.tensor([slider.value for slider in explorer.sliders])
    torch.testing.assert_close(values, own, atol=1e-6, rtol=0)
    assert all(s.max - s.min == pytest.approx(0.5) for s in explorer.sliders)
    before = explorer.decoded()
    full = torch.zeros(1, 10, 16)
    full[0, predicted] = values
    with torch.no_grad():
        expected = model.decoder(full, torch.tensor([predicted])).view(1, 1, 28, 28)
    torch.testing.assert_close(before, expected)
    explorer.sliders[3].value = explorer.sliders[3].max
    assert not torch.equal(explorer.decoded(), before)
    other = (predicted + 1) % 10
    explorer.fed.value = other
    values = torch.tensor([slider.value for slider in explorer.sliders])
    torch.testing.assert_close(values, capsules[0, other], atol=1e-6, rtol=0)
