"""Mistakes on the GPU path that only a GPU would show, caught on a CPU: autocast asked
for on another device than the input's (silent float32 on a GPU); the fused routing's
backward run outside the CUDA autocast its forward ran under (a float32-by-bf16 product
that fails on a GPU); an epoch's shuffle drawn with a CPU generator for data on a GPU
(``randperm`` refuses it there); the preflight letting a broken install or a missing
pytest through. Each test fails with the mistake made alone (checked by making it)."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import types

import pytest
import torch
from torch import nn

import capsnotes.fast.routing as fast_routing
import capsnotes.training.train as train
from benchmarks.preflight import MODULES, check_imports
from capsnotes import dynamic_routing
from capsnotes.data import ImageSet
from capsnotes.fast.precision import Autocast
from capsnotes.training.config import profile


class Identity(nn.Module):
    def forward(self, images, *rest):
        return images


def test_autocast_is_asked_for_on_the_input_s_device(monkeypatch):
    """On a GPU, autocast asked for on the CPU leaves the GPU's kernels in float32,
    silently. On ``meta`` (whose device type is not the CPU's, and which autocast does
    not serve), what Autocast asks torch.autocast for is seen: the input's device type,
    its 16-bit format and the cache off."""
    asked = []

    def autocast(device_type, dtype=None, enabled=True, cache_enabled=None):
        asked.append((device_type, dtype, enabled, cache_enabled))
        return contextlib.nullcontext()

    monkeypatch.setattr(torch, "autocast", autocast)
    for dtype in (torch.bfloat16, torch.float16):
        images = torch.empty(2, 1, 28, 28, device="meta")
        assert Autocast(Identity(), dtype)(images) is images
    assert asked == [("meta", torch.bfloat16, True, False), ("meta", torch.float16, True, False)]


def test_the_fused_routing_s_backward_runs_under_the_cuda_autocast_of_its_forward(monkeypatch):
    """On a GPU the fused routing's forward runs under CUDA autocast (bf16 votes, float32
    couplings) and its backward must run under it too, or its products mix float32 and
    bf16 and fail: ``custom_fwd``/``custom_bwd`` with ``device_type="cuda"`` note CUDA's
    autocast state in the forward and enter it again in the backward. CUDA's autocast
    state is a flag that a CPU's kernels ignore; with autocast's check for a CUDA device
    answered yes, it is switched on here (float16: no device is asked about bf16), and
    the backward must find it as the forward did. The gradients are the reference's, in
    float64 (which autocast leaves alone)."""
    monkeypatch.setattr(torch.cuda.amp.common, "amp_definitely_not_available", lambda: False)
    seen = []  # at each squash, in the forward and in the backward: CUDA autocast's state
    squash = fast_routing.squash

    def noting_squash(s, *args, **kwargs):
        seen.append((torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")))
        return squash(s, *args, **kwargs)

    monkeypatch.setattr(fast_routing, "squash", noting_squash)
    generator = torch.Generator().manual_seed(0)
    u_hat = torch.randn(2, 6, 3, 4, dtype=torch.float64, generator=generator)
    u_hat.requires_grad_()
    with torch.autocast("cuda", torch.float16):
        v = fast_routing.FusedRouting.apply(u_hat, 3)
    forward, seen[:] = list(seen), []
    grad_v = torch.randn(v.shape, dtype=torch.float64, generator=generator)
    (grad,) = torch.autograd.grad(v, u_hat, grad_v)  # outside autocast, as a step's is
    assert forward == [(True, torch.float16)] * 3
    assert seen == [(True, torch.float16)] * 3, "the backward left CUDA's autocast"
    want = dynamic_routing(u_hat, 3)
    torch.testing.assert_close(v, want)
    torch.testing.assert_close(grad, torch.autograd.grad(want, u_hat, grad_v)[0])


def test_an_epoch_draws_its_batches_with_a_generator_on_the_data_s_device(monkeypatch):
    """The shuffle and the shifts of an epoch whose data and model are on a GPU draw from
    a generator on that GPU (``randperm`` on CUDA refuses a CPU one). On ``meta``, which
    neither objects to a CPU generator nor has generators of its own, the trainer's
    torch.Generator is watched (torch's own is left alone: torch's Python kernels check
    that name): the epoch asks for one on the model's and the data's device, and its
    batches come on that device."""
    made = []

    class Watched:
        """torch, as the trainer's module sees it, with a watched Generator."""

        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def Generator(device="cpu"):
            made.append(torch.device(device))
            return torch.Generator()  # a CPU one stands in (meta has none)

    with torch.device("meta"):
        model = nn.Linear(2, 2)
        data = ImageSet(
            torch.zeros(10, 1, 28, 28, dtype=torch.uint8),
            torch.zeros(10, dtype=torch.int64),
            tuple("0123456789"),
        )
    drawn = []

    def step(batch):
        drawn.append(tuple(value.device.type for value in batch))
        return {"margin_loss": torch.tensor(0.5), "correct": torch.tensor(len(batch[1]))}

    config = dataclasses.replace(profile("quick"), batch_size=4, max_shift=2, epochs=1)
    run = types.SimpleNamespace(
        config=config,
        model=model,
        optimizer=types.SimpleNamespace(param_groups=[{"lr": 1e-3}]),
        step=step,
    )
    monkeypatch.setattr(train, "torch", Watched())
    record = train._train_epoch(run, data, epoch=1, progress=False)
    assert made == [torch.device("meta")], made
    assert drawn == [("meta", "meta")] * 3
    assert record["train_accuracy"] == 1.0


@pytest.fixture
def broken_module(tmp_path, monkeypatch):
    """``make(error)``: the name of a module, on a temporary sys.path, whose import
    raises ``error`` (a broken install: a missing library, a half-written file)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names = []

    def make(error: str) -> str:
        name = f"capsnotes_broken_{len(names)}"
        (tmp_path / f"{name}.py").write_text(f"raise {error}\n")
        names.append(name)
        return name

    yield make
    for name in names:
        sys.modules.pop(name, None)


@pytest.mark.parametrize(
    "error",
    [
        "ImportError('libcudnn.so.9: cannot open shared object file')",
        "OSError('libtorch_cuda.so: undefined symbol')",
        "RuntimeError('a half-installed package')",
    ],
)
def test_the_preflight_names_a_module_that_is_there_but_broken(broken_module, error):
    """Not only a missing module (ModuleNotFoundError): one that is found and fails at
    import, with ImportError or anything else, is named, with what it raised."""
    name = broken_module(error)
    kind, message = error.split("(", 1)
    with pytest.raises(RuntimeError, match=rf"cannot import {name} \({kind}: ") as raised:
        check_imports(("torch", name))
    assert message.strip("')") in str(raised.value)
    assert "gpu_wheels.sh" in str(raised.value)


def test_the_preflight_checks_pytest_which_the_gpu_stages_run():
    """gpu_session.sh's measure, seeds and campaign run their GPU tests with
    ``python3 -m pytest``: the preflight checks that it imports, in the first seconds."""
    assert "pytest" in MODULES
    assert check_imports(("pytest",)) == {"pytest": pytest.__version__}
