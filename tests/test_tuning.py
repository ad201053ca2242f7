"""The CPU's choice of convolution and precision: timed on models it builds itself, the
fastest wins, bf16 is a candidate only where the CPU multiplies bf16 natively, and a
cache is used only where the caller keeps one."""

import pytest
import torch

from capsnotes import dynamic_routing
from capsnotes.kernels import MatmulConv2d, fused_dynamic_routing
from capsnotes.tuning import (
    BF16_SPEEDUP_THRESHOLD,
    MatmulRates,
    choose_cpu_implementation,
    cpu_bf16_speedup,
    implementations,
)
from tests.conftest import TINY

IMAGES, LABELS = torch.rand(2, 1, 28, 28), torch.tensor([1, 2])


def fake_clock(monkeypatch, native: float, matmul: float, bf16_factor: float) -> list[str]:
    """Make each convolution forward advance a fake clock: ``native`` or ``matmul``
    seconds, times ``bf16_factor`` under bf16 autocast. Returns the list of calls."""
    calls: list[str] = []
    clock = {"now": 0.0}

    def cost(seconds: float) -> None:
        bf16 = torch.is_autocast_enabled("cpu")
        clock["now"] += seconds * (bf16_factor if bf16 else 1.0)

    def matmul_forward(self, x):
        calls.append("matmul")
        cost(matmul)
        return torch.nn.functional.conv2d(x, self.weight, self.bias, self.stride)

    def native_forward(self, x):
        calls.append("native")
        cost(native)
        return torch.nn.functional.conv2d(x, self.weight, self.bias, self.stride)

    monkeypatch.setattr(MatmulConv2d, "forward", matmul_forward)
    monkeypatch.setattr(torch.nn.Conv2d, "forward", native_forward)
    monkeypatch.setattr("capsnotes.tuning.perf_counter", lambda: clock["now"])
    return calls


def bf16_rates(monkeypatch, speedup: float) -> None:
    rates = MatmulRates(1024, 200.0, 200.0 * speedup)
    monkeypatch.setattr("capsnotes.tuning.cpu_bf16_speedup", lambda: rates)


def test_with_bf16_units_the_fastest_of_four_candidates_is_chosen(monkeypatch):
    fake_clock(monkeypatch, native=0.2, matmul=0.3, bf16_factor=0.5)
    bf16_rates(monkeypatch, speedup=4.0)
    before = torch.random.get_rng_state()
    choice = choose_cpu_implementation(TINY, IMAGES, LABELS, repeats=2)
    assert (choice.convolution, choice.precision) == ("native", "bfloat16")
    assert set(choice.seconds) == {
        "native, float32",
        "matmul, float32",
        "native, bfloat16",
        "matmul, bfloat16",
    }
    # two convolutions per pass, each at its fake cost
    assert choice.seconds["native, bfloat16"] == pytest.approx(0.2)
    assert choice.seconds["matmul, float32"] == pytest.approx(0.6)
    assert torch.equal(torch.random.get_rng_state(), before)  # caller's random state kept
    assert choice.to_dict()["matmul_gflops"] == {"size": 1024, "float32": 200.0, "bfloat16": 800.0}


def test_a_cpu_without_bf16_units_chooses_among_float32_only(monkeypatch):
    """On such a CPU nothing changes: the same two candidates as before bf16 existed."""
    calls = fake_clock(monkeypatch, native=0.3, matmul=0.2, bf16_factor=0.1)
    bf16_rates(monkeypatch, speedup=BF16_SPEEDUP_THRESHOLD * 0.9)
    choice = choose_cpu_implementation(TINY, IMAGES, LABELS, repeats=1)
    assert (choice.convolution, choice.precision) == ("matmul", "float32")
    assert set(choice.seconds) == {"native, float32", "matmul, float32"}
    assert len(calls) == 2 * 2 * 2  # 2 candidates x (warm-up + 1 repeat) x 2 convolutions


def test_without_mixed_precision_bf16_is_not_even_measured(monkeypatch):
    fake_clock(monkeypatch, native=0.2, matmul=0.3, bf16_factor=0.1)

    def refuse():
        raise AssertionError("the bf16 probe ran although mixed precision is off")

    monkeypatch.setattr("capsnotes.tuning.cpu_bf16_speedup", refuse)
    choice = choose_cpu_implementation(TINY, IMAGES, LABELS, mixed_precision=False)
    assert choice.precision == "float32" and choice.matmul is None
    assert "matmul_gflops" not in choice.to_dict()


def test_a_cache_given_by_the_caller_is_used(monkeypatch):
    calls = fake_clock(monkeypatch, native=0.2, matmul=0.3, bf16_factor=0.5)
    bf16_rates(monkeypatch, speedup=4.0)
    cache: dict = {}
    choice = choose_cpu_implementation(TINY, IMAGES, LABELS, cache=cache)
    assert len(cache) == 1 and next(iter(cache.values())) is choice
    timed = len(calls)
    assert choose_cpu_implementation(TINY, IMAGES, LABELS, cache=cache) is choice
    assert len(calls) == timed  # from the cache, not timed again
    # another precision setting is another question
    other = choose_cpu_implementation(TINY, IMAGES, LABELS, cache=cache, mixed_precision=False)
    assert other is not choice and len(cache) == 2


def test_the_probe_reports_the_fastest_of_its_repeats(monkeypatch):
    """Rates are 2·n³ FLOP over the fastest repeat of each dtype, after a warm-up."""
    durations = iter([9.0, 9.0, 0.5, 0.25, 0.4, 0.1, 0.2, 0.3])  # warm-up pair, then 3 pairs
    ticks = {"now": 0.0, "started": True}

    def clock():
        if ticks["started"]:
            ticks["started"] = False
            return ticks["now"]
        ticks["now"] += next(durations)
        ticks["started"] = True
        return ticks["now"]

    monkeypatch.setattr("capsnotes.tuning.perf_counter", clock)
    rates = cpu_bf16_speedup(size=8, repeats=3)
    flop = 2 * 8**3 / 1e9
    assert rates.float32 == pytest.approx(flop / 0.2)  # min of 0.5, 0.4, 0.2
    assert rates.bfloat16 == pytest.approx(flop / 0.1)  # min of 0.25, 0.1, 0.3
    assert rates.speedup == pytest.approx(2.0)


def test_bad_sample_is_refused():
    with pytest.raises(ValueError, match="images must be"):
        choose_cpu_implementation(TINY, torch.rand(2, 3, 28, 28), torch.tensor([1, 2]))


def test_the_names_the_configurations_use_map_to_the_implementations():
    assert implementations(routing="fused", convolution="matmul") == {
        "routing": fused_dynamic_routing,
        "convolution": MatmulConv2d,
    }
    assert implementations(routing="reference", convolution="native") == {
        "routing": dynamic_routing,
        "convolution": torch.nn.Conv2d,
    }
    with pytest.raises(ValueError, match="unknown convolution implementation 'fft'"):
        implementations(convolution="fft")
    with pytest.raises(ValueError, match="no implementation choice 'pooling'"):
        implementations(pooling="max")
