"""The noise record's measurement (tools/measure_noise.py) on a small case: a notebook
that trains a small CapsNet for a few dozen steps and draws its loss curves as chapter 8
does, its outputs made with the generic kernels as the refresh makes them, is compared
under another CPU's kernels and under the one-ulp nudge of every parameter. The nudge
reaches the kernel (the figure moves), the outputs stay within the tolerances, and a
figure planted in place of the committed one fails there."""

from __future__ import annotations

import base64
import io
import os

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient
from PIL import Image

from tools import measure_noise

#: A short training of the unit tests' small CapsNet on seeded random digits (so that no
#: dataset is needed), recorded as chapter 8's loop records it, then drawn by chapter
#: 8's loss_curves and summarised in rounded numbers.
TRAIN = """\
import torch
from capsnotes import CapsNet, CapsNetConfig
from capsnotes.training.config import profile
from capsnotes.training.step import training_step

torch.manual_seed(0)
config = CapsNetConfig(conv_channels=16, primary_channels=4, primary_dim=4, digit_dim=8,
                       decoder_hidden=(32, 64))
model = CapsNet(config)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
images, labels = torch.rand(240, 1, 28, 28), torch.arange(240) % 10
images[torch.arange(240), 0, 4 + 2 * labels, 4:24] = 1.0  # a bar whose height is the class
epochs = []
for epoch in range(2):
    steps = [training_step(model, optimizer, profile("quick").objective,
                           (images[i:i + 8], labels[i:i + 8])) for i in range(0, 240, 8)]
    with torch.no_grad():
        test = profile("quick").objective(model(images[:64]), images[:64], labels[:64])
    epochs.append({
        "epoch": epoch + 1,
        "step_margin_loss": [s["margin_loss"].item() for s in steps],
        "step_reconstruction_loss": [s["reconstruction_loss"].item() for s in steps],
        "test_margin_loss": test.terms["margin_loss"].item(),
        "test_reconstruction_loss": test.terms["reconstruction_loss"].item(),
    })
"""
SHOW = "print(f\"test margin loss after two epochs: {epochs[-1]['test_margin_loss']:.1f}\")"
DRAW = """\
from capsbook.training_plots import loss_curves

loss_curves({"a small CapsNet": {"epochs": epochs}})
"""


def executed(tmp_path):
    """The notebook, executed as tools/refresh_notebooks.py executes a chapter."""
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(s) for s in ("%matplotlib inline", TRAIN, SHOW, DRAW)]
    )
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    NotebookClient(notebook, timeout=300, kernel_name="python3").execute(
        cwd=str(tmp_path), env=os.environ | {"ATEN_CPU_CAPABILITY": "default"}
    )
    return notebook


@pytest.mark.slow
def test_the_noise_is_measured_within_the_tolerances_and_a_plant_fails(tmp_path):
    notebook = executed(tmp_path)
    path = tmp_path / "small.ipynb"
    nbformat.write(notebook, path)
    distance = {}
    for setting in ("default-1", "ulp-1", "avx2-1"):
        result = measure_noise.measure(path, setting, cwd=tmp_path)
        assert result["cells"] == 4 and result["failed"] == [], (setting, result)
        (figure,) = result["figures"]
        assert figure["problem"] is None
        assert figure["rms"] <= measure_noise.tolerances()["png_rms"]
        distance[setting] = figure["rms"]
    # the kernels that made the outputs draw them again exactly; the nudge reached the
    # model, and the curves moved
    assert distance["default-1"] == 0 and distance["ulp-1"] > 0, distance
    # the committed figure replaced by its mirror image: the comparison fails there
    output = notebook.cells[3].outputs[-1]
    with Image.open(io.BytesIO(base64.b64decode(output.data["image/png"]))) as image:
        mirrored = Image.fromarray(np.asarray(image)[:, ::-1].copy())
    buffer = io.BytesIO()
    mirrored.save(buffer, format="PNG")
    output.data["image/png"] = base64.b64encode(buffer.getvalue()).decode()
    nbformat.write(notebook, path)
    result = measure_noise.measure(path, "default-1", cwd=tmp_path)
    (failed,) = result["failed"]
    assert failed["cell"] == "Cell 3" and "image/png differs" in failed["message"], result
    assert result["figures"][0]["rms"] > measure_noise.tolerances()["png_rms"]


def test_the_summary_keeps_the_largest_distance_and_the_margin_over_it():
    runs = {
        "own-1 @ a": {
            "failed": [],
            "figures": [
                {"mime": "image/png", "rms": 0.5, "tile": 2.0},
                {"mime": "image/svg+xml", "number": 1e-4, "rms": 0.0, "tile": 0.0},
            ],
        },
        "ulp-1 @ a": {
            "failed": [{"cell": "Cell 3", "message": "differs"}],
            "figures": [
                {"mime": "image/png", "rms": 0.25, "tile": 4.0},
            ],
        },
    }
    summary = measure_noise.summarise({"runs": runs})
    assert summary["largest"] == {"png_rms": 0.5, "png_tile": 4.0, "svg_number": 1e-4}
    limits = measure_noise.tolerances()
    assert summary["margin"]["png_rms"] == round(limits["png_rms"] / 0.5, 1)
    assert summary["margin"]["svg_number"] == round(limits["svg_number"] / 1e-4, 1)
    assert summary["failed"] == ["ulp-1 @ a: cell Cell 3: differs"]


def test_each_setting_runs_with_its_kernels_threads_and_nudge():
    ulp = measure_noise.environment("ulp-1")
    assert ulp["PYTHONPATH"].split(os.pathsep)[0] == str(measure_noise.ULP)
    assert ulp["OMP_NUM_THREADS"] == "1" and "ATEN_CPU_CAPABILITY" not in ulp
    avx2 = measure_noise.environment("avx2-1")
    assert avx2["ATEN_CPU_CAPABILITY"] == "avx2" and avx2["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert str(measure_noise.ULP) not in avx2["PYTHONPATH"]
    assert measure_noise.environment("default-2")["OMP_NUM_THREADS"] == "2"
