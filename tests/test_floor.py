"""benchmarks/floor.py: the products a step runs, found by the profiler and counted, their
FLOPs by hand, and each replayed alone with the shapes and dtype it ran with."""

from __future__ import annotations

import pytest
import torch

from benchmarks.floor import Product, fastest_layout, products_of, summarize, time_layouts


def test_the_flops_of_each_kind_of_product_by_hand():
    assert Product("aten::mm", ((3, 4), (4, 5)), "float", ()).flops() == 2 * 3 * 4 * 5
    addmm = Product("aten::addmm", ((5,), (3, 4), (4, 5)), "float", ())
    assert addmm.flops() == 2 * 3 * 4 * 5
    assert Product("aten::bmm", ((2, 3, 4), (2, 4, 5)), "float", ()).flops() == 240
    # a 9x9 convolution, stride 2, of a 20x20 map: 6x6 outputs
    conv = Product(
        "aten::mkldnn_convolution",
        ((1, 2, 20, 20), (3, 2, 9, 9), (3,)),
        "float",
        (None, None, None, (0, 0), (2, 2), (1, 1), 1),
    )
    assert conv.flops() == 2 * 3 * 36 * 2 * 81
    backward = Product(
        "aten::convolution_backward",
        ((1, 3, 6, 6), (1, 2, 20, 20), (3, 2, 9, 9)),
        "float",
        (None, None, None, (3,), (2, 2), (0, 0), (1, 1), False, (0, 0), 1, (True, True, False)),
    )
    assert backward.flops() == 2 * conv.flops()  # the input's gradient and the weight's


def test_a_step_s_products_are_found_counted_and_replayed():
    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 4)
    x = torch.randn(5, 8)

    def step(batch):
        (x,) = batch
        (layer(x).sum() + (x @ x.t()).sum()).backward()

    found = products_of(step, (x,))
    kinds = {(p.name, p.shapes[:3]) for p in found}
    assert ("aten::addmm", ((4,), (5, 8), (8, 4))) in kinds  # the layer forward
    assert ("aten::mm", ((5, 8), (8, 5))) in kinds  # x @ x.T
    assert all(p.dtype == "float" for p in found)
    for product in found:
        timed = time_layouts(product, threads=1, min_run_time=0.01)
        assert set(timed) == set(product.layouts()) and all(t > 0 for t in timed.values())


def test_a_matrix_product_is_replayed_with_either_factor_stored_column_major():
    product = Product("aten::addmm", ((4,), (5, 8), (8, 4)), "float", ())
    assert len(product.layouts()) == 4
    _, scope = product.runner("second column-major")
    bias, first, second = scope["args"]
    assert first.is_contiguous() and second.mT.is_contiguous()
    assert second.shape == (8, 4) and not second.is_contiguous()
    _, scope = product.runner("both column-major")
    assert all(t.mT.is_contiguous() for t in scope["args"][1:])
    conv = Product("aten::mkldnn_convolution", ((1, 2, 5, 5), (3, 2, 3, 3)), "float", ())
    assert conv.layouts() == ("contiguous", "channels_last")
    _, scope = conv.runner("channels_last")
    assert scope["args"][0].is_contiguous(memory_format=torch.channels_last)


def test_the_step_and_floor_are_medians_over_rounds_and_each_round_is_kept():
    rounds = [
        {"step_seconds": 1.3, "floor_seconds": 1.0},
        {"step_seconds": 2.6, "floor_seconds": 2.0},  # everything twice as slow
        {"step_seconds": 1.1, "floor_seconds": 1.0},
    ]
    summary = summarize(rounds)
    assert summary["step_seconds"] == 1.3 and summary["floor_seconds"] == 1.0
    assert summary["step_over_floor"] == pytest.approx(1.3)
    assert summary["step_over_floor_range"] == pytest.approx([1.1, 1.3])
    ratios = [one["step_over_floor"] for one in summary["rounds"]]
    assert ratios == pytest.approx([1.3, 1.3, 1.1])
    with pytest.raises(ValueError, match="at least one round"):
        summarize([])


def test_the_layout_counted_is_the_fastest_over_all_rounds_not_in_one():
    timings = [
        {"contiguous": 1.0, "channels_last": 0.5},  # one fast outlier
        {"contiguous": 1.0, "channels_last": 1.2},
        {"contiguous": 1.1, "channels_last": 1.3},
    ]
    assert fastest_layout(timings) == "contiguous"
    assert fastest_layout(timings[:1]) == "channels_last"
