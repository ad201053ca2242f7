"""The CPU's convolution choice: timed on models it builds itself, faster wins, cached
only where the caller keeps a cache."""

import pytest
import torch

from capsnotes import CapsNetConfig
from capsnotes.kernels import MatmulConv2d
from capsnotes.tuning import choose_cpu_convolution

SMALL = CapsNetConfig(conv_channels=8, primary_channels=2, decoder_hidden=(16, 16))


def test_the_faster_convolution_is_chosen_and_a_cache_is_used(monkeypatch):
    calls = []
    clock = {"now": 0.0}
    real_forward = MatmulConv2d.forward

    def slow_matmul(self, x):  # pretend the matmul path costs more
        clock["now"] += 0.5
        return real_forward(self, x)

    def conv_forward(self, x):
        calls.append(type(self).__name__)
        clock["now"] += 0.2
        return torch.nn.functional.conv2d(x, self.weight, self.bias, self.stride)

    monkeypatch.setattr(MatmulConv2d, "forward", slow_matmul)
    monkeypatch.setattr(torch.nn.Conv2d, "forward", conv_forward)
    monkeypatch.setattr("capsnotes.tuning.time.perf_counter", lambda: clock["now"])
    images, labels = torch.rand(2, 1, 28, 28), torch.tensor([1, 2])
    before = torch.random.get_rng_state()
    cache: dict = {}
    choice = choose_cpu_convolution(SMALL, images, labels, repeats=2, cache=cache)
    assert choice.convolution == "native"
    assert choice.seconds["matmul"] > choice.seconds["native"]
    assert torch.equal(torch.random.get_rng_state(), before)  # caller's random state kept
    assert len(cache) == 1 and next(iter(cache.values())) is choice
    timed = len(calls)
    assert choose_cpu_convolution(SMALL, images, labels, cache=cache) is choice
    assert len(calls) == timed  # from the cache, not timed again
    assert choice.to_dict() == {"convolutions": "native", "step_seconds": choice.seconds}


def test_without_a_cache_every_call_measures():
    images, labels = torch.rand(2, 1, 28, 28), torch.tensor([1, 2])
    first = choose_cpu_convolution(SMALL, images, labels, repeats=1)
    second = choose_cpu_convolution(SMALL, images, labels, repeats=1)
    assert first is not second
    assert set(first.seconds) == {"native", "matmul"} and all(t > 0 for t in first.seconds.values())
    assert first.convolution in ("native", "matmul")


def test_bad_sample_is_refused():
    with pytest.raises(ValueError, match="images must be"):
        choose_cpu_convolution(SMALL, torch.rand(2, 3, 28, 28), torch.tensor([1, 2]))
