"""The speed wing (capsnotes.fast) computes what the paper's code computes: values and
gradients in float64, under autocast, in a whole model sped up; the CPU's timed choice;
devices (the plan is tests/test_plan.py)."""

import pytest
import torch
import torch.nn.functional as F

from capsnotes import (
    CapsNet,
    CapsNetConfig,
    DigitCapsules,
    capsnet_loss,
    dynamic_routing,
    dynamic_routing_with_couplings,
)
from capsnotes.fast import speed_up
from capsnotes.fast.convolution import MatmulConv2d, conv2d_as_matmul, patches
from capsnotes.fast.cpu import (
    MatmulRates,
    choose_cpu_implementation,
    cpu_matmul_rates,
)
from capsnotes.fast.plan import BF16_SPEEDUP, plan_for
from capsnotes.fast.precision import device_name, resolve_device
from capsnotes.fast.routing import (
    ChildVotes,
    FusedDigitCapsules,
    fused_dynamic_routing,
    permuted_copy,
    route_parents_first,
)
from capsnotes.training.config import TrainConfig, build_model
from tests.conftest import TINY


@pytest.mark.parametrize("input_gradient", ["matmul", "native"])
@pytest.mark.parametrize(
    ("channels", "kernel", "stride", "size"),
    [(1, 9, 1, 28), (5, 3, 2, 13), (4, 9, 2, 20), (3, 4, 3, 17), (7, 2, 1, 5)],
)
def test_conv_as_matmul_matches_conv2d(channels, kernel, stride, size, input_gradient):
    x = torch.randn(3, channels, size, size, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, channels, kernel, kernel, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, requires_grad=True)
    out = conv2d_as_matmul(x, w, b, stride, input_gradient)
    ref = F.conv2d(x, w, b, stride=stride)
    torch.testing.assert_close(out, ref)
    grad = torch.randn_like(ref)
    for mine, theirs in zip(
        torch.autograd.grad(out, (x, w, b), grad),
        torch.autograd.grad(ref, (x, w, b), grad),
        strict=True,
    ):
        torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize("input_gradient", ["matmul", "native"])
def test_conv_as_matmul_gradcheck_float64(input_gradient):
    x = torch.randn(2, 3, 9, 9, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)

    def conv(x, w, b=None, stride=1):
        return conv2d_as_matmul(x, w, b, stride, input_gradient)

    assert torch.autograd.gradcheck(lambda x, w, b: conv(x, w, b, 2), (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w: conv(x, w), (x, w))
    # more output channels than columns: the weight's gradient is the other product
    w = torch.randn(12, 3, 2, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: conv(x, w, None, 2), (x, w))


def test_the_input_gradient_is_named_or_refused():
    x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
    with pytest.raises(ValueError, match=r"input_gradient must be one of \('matmul', 'native'\)"):
        conv2d_as_matmul(x, w, None, 1, "oneDNN")
    with pytest.raises(ValueError, match="input_gradient must be one of"):
        MatmulConv2d(2, 3, 3, input_gradient="fast")
    layer = MatmulConv2d.like(torch.nn.Conv2d(2, 3, 3), input_gradient="native")
    assert layer.input_gradient == "native" and "input_gradient='native'" in repr(layer)


@pytest.mark.parametrize("input_gradient", ["matmul", "native"])
def test_matmul_conv_follows_cpu_autocast_like_conv2d(input_gradient):
    """Under bf16 autocast the matrix products run in bf16, as nn.Conv2d's would: the
    output is bf16, the gradients reach the float32 parameters and input as float32, and
    they agree with the native convolution's under the same autocast."""
    torch.manual_seed(0)
    native = torch.nn.Conv2d(4, 6, 3, stride=2)
    fast = MatmulConv2d(4, 6, 3, stride=2, input_gradient=input_gradient)
    fast.load_state_dict(native.state_dict())
    x = torch.rand(2, 4, 13, 13)
    results = []
    for layer in (fast, native):
        layer.zero_grad()
        inputs = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = layer(inputs)
        assert out.dtype == torch.bfloat16
        out.float().pow(2).sum().backward()
        assert layer.weight.grad.dtype == torch.float32 and inputs.grad.dtype == torch.float32
        results.append((out.float(), layer.weight.grad, layer.bias.grad, inputs.grad))
    for mine, theirs in zip(*results, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0.03, atol=0.03)


def test_patches_rows_are_windows():
    x = torch.randn(2, 7, 7, 3)
    cols = patches(x, 3, 2)  # 3x3 output positions
    assert cols.shape == (2 * 9, 27)
    torch.testing.assert_close(cols[4], x[0, 2:5, 2:5, :].reshape(-1))
    with pytest.raises(ValueError, match="contiguous"):
        patches(x.permute(0, 3, 1, 2).permute(0, 2, 1, 3), 3, 2)


def test_matmul_conv_has_the_parameters_of_conv2d_and_rejects_padding():
    conv = torch.nn.Conv2d(4, 8, 3, stride=2)
    fast = MatmulConv2d(4, 8, 3, stride=2)
    assert isinstance(fast, torch.nn.Conv2d)
    fast.load_state_dict(conv.state_dict())  # the same state_dict, both ways
    conv.load_state_dict(fast.state_dict())
    x = torch.randn(2, 4, 11, 11)
    torch.testing.assert_close(fast(x), conv(x))
    with torch.no_grad():
        torch.testing.assert_close(fast(x), conv(x))
    with pytest.raises(ValueError, match="unpadded"):
        MatmulConv2d(4, 8, 3, padding=1)


def test_a_model_sped_up_agrees_with_the_reference():
    """Values and gradients in float64, the same parameters, and weights that load both
    ways."""
    torch.manual_seed(0)
    config = CapsNetConfig(conv_channels=16, primary_channels=8, decoder_hidden=(64, 128))
    reference = CapsNet(config).double()
    fast = CapsNet(config).double()
    fast.load_state_dict(reference.state_dict())
    parameters = {name: p.data_ptr() for name, p in fast.named_parameters()}
    fast = speed_up(fast, routing="fused", convolution="matmul-native-input")
    assert {name: p.data_ptr() for name, p in fast.named_parameters()} == parameters
    assert isinstance(fast.primary.conv, MatmulConv2d) and isinstance(fast.conv1, MatmulConv2d)
    assert fast.primary.conv.input_gradient == "native" == fast.conv1.input_gradient
    assert type(reference.primary.conv) is torch.nn.Conv2d
    assert isinstance(fast.digits, FusedDigitCapsules) and type(reference.digits) is DigitCapsules
    assert fast.state_dict().keys() == reference.state_dict().keys()
    reference.load_state_dict(fast.state_dict())
    with pytest.raises(ValueError, match="unknown routing"):
        speed_up(CapsNet(TINY), routing="magic")
    images = torch.rand(4, 1, 28, 28, dtype=torch.float64)
    labels = torch.tensor([0, 3, 7, 9])
    results = []
    for model in (reference, fast):
        out = model(images, labels)
        loss = capsnet_loss(out, images, labels).total
        results.append((out.capsules, torch.autograd.grad(loss, list(model.parameters()))))
    torch.testing.assert_close(results[0][0], results[1][0])
    for mine, theirs in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize("iterations", [1, 2, 3, 5])
def test_fused_routing_matches_reference_values_and_gradients(iterations):
    torch.manual_seed(iterations)
    u_hat = torch.randn(3, 11, 4, 5, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(3, 4, 5, dtype=torch.float64)
    fused = fused_dynamic_routing(u_hat, iterations)
    reference = dynamic_routing(u_hat, iterations)
    torch.testing.assert_close(fused, reference)
    (grad_fused,) = torch.autograd.grad(fused, u_hat, upstream)
    (grad_reference,) = torch.autograd.grad(reference, u_hat, upstream)
    torch.testing.assert_close(grad_fused, grad_reference)


def test_fused_routing_gradcheck_float64():
    u_hat = torch.randn(2, 6, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda u: fused_dynamic_routing(u, 3), (u_hat,))


def test_fused_digit_capsules_vote_as_the_paper_s_layer_does():
    """One batched product over the children gives the einsum's votes (float64), and
    the layer's door refuses what the paper's refuses."""
    torch.manual_seed(0)
    reference = DigitCapsules(in_caps=6, in_dim=4, out_caps=3, out_dim=5).double()
    fused = FusedDigitCapsules.like(reference)
    u = torch.randn(2, 6, 4, dtype=torch.float64)
    torch.testing.assert_close(fused.votes(u), reference.votes(u), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match=r"\[batch, 6, 4\]"):
        fused(torch.randn(2, 5, 4))


@pytest.mark.parametrize(
    "dtype, last", [(torch.bfloat16, 16), (torch.float32, 6), (torch.bfloat16, 3)]
)
def test_a_permuted_copy_is_the_permutation_bit_for_bit(dtype, last):
    """As 8-byte words where the last dimension allows (16 bf16, 6 float32 values) and
    value by value where it does not (3 bf16): the same bits, contiguous."""
    x = torch.randn(3, 4, 5, last).to(dtype)
    copied = permuted_copy(x, (2, 0, 1, 3))
    assert copied.is_contiguous() and torch.equal(copied, x.permute(2, 0, 1, 3))
    view = torch.randn(4, 3, 5, last).to(dtype).transpose(0, 1)  # a strided input
    assert torch.equal(permuted_copy(view, (0, 2, 1, 3)), view.permute(0, 2, 1, 3))


def test_a_permuted_copy_refuses_a_permutation_that_moves_the_last_dimension():
    x = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match="keeps the last last"):
        permuted_copy(x, (0, 2, 1))
    with pytest.raises(ValueError, match="permutation of 3 dimensions"):
        permuted_copy(x, (0, 0, 2))


def test_child_votes_gradcheck_float64():
    u = torch.randn(5, 3, 4, dtype=torch.float64, requires_grad=True)  # [I, B, in]
    weight = torch.randn(5, 6, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ChildVotes.apply, (u, weight))


def test_child_votes_hand_the_weight_its_gradient_in_its_own_layout():
    """Under bf16 autocast the product runs in bf16, and the gradients come back in the
    inputs' dtype, the weight's contiguous like the weight, close to float64's."""
    torch.manual_seed(0)
    u = torch.randn(3, 5, 4).transpose(0, 1).requires_grad_()  # [I, B, in], strided
    weight = torch.randn(5, 6, 4, requires_grad=True)
    upstream = torch.randn(5, 3, 6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        votes = ChildVotes.apply(u, weight)
    assert votes.dtype == torch.bfloat16
    grad_u, grad_w = torch.autograd.grad(votes.float(), (u, weight), upstream)
    assert grad_u.dtype == grad_w.dtype == torch.float32 and grad_w.is_contiguous()
    exact = torch.bmm(u.double(), weight.double().transpose(1, 2))
    expected = torch.autograd.grad(exact, (u, weight), upstream.double())
    for mine, theirs in zip((grad_u, grad_w), expected, strict=True):
        torch.testing.assert_close(mine, theirs, atol=5e-2, rtol=2e-2)


def test_fused_digit_capsules_train_as_the_paper_s_layer_does():
    """Values and gradients of the layer (the votes through ChildVotes, routing by
    FusedRouting) equal the paper's layer's in float64."""
    torch.manual_seed(0)
    reference = DigitCapsules(in_caps=6, in_dim=4, out_caps=3, out_dim=5).double()
    fused = FusedDigitCapsules.like(reference)
    u = torch.randn(2, 6, 4, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(2, 3, 5, dtype=torch.float64)
    grads = []
    for layer in (fused, reference):
        out = layer(u)
        grads.append((out, *torch.autograd.grad(out, (u, layer.weight), upstream)))
    for mine, theirs in zip(*grads, strict=True):
        torch.testing.assert_close(mine, theirs)


def test_routing_reads_either_layout_of_the_votes():
    """route_parents_first with the votes also laid out [B, parent, D, child] gives
    the same iterations as with the votes alone (float64)."""
    votes = torch.randn(3, 4, 9, 5, dtype=torch.float64)
    v, passes = route_parents_first(votes, 3)
    v_t, passes_t = route_parents_first(votes, 3, votes.transpose(2, 3).contiguous())
    torch.testing.assert_close(v_t, v)
    for one, other in zip(passes, passes_t, strict=True):
        for a, b in zip(one, other, strict=True):
            torch.testing.assert_close(a, b)


def test_fused_digit_capsules_take_the_couplings_from_the_reference():
    layer = FusedDigitCapsules(in_caps=6, in_dim=4, out_caps=3, out_dim=5, iterations=2)
    u = torch.randn(2, 6, 4)
    v, c = layer.forward_with_couplings(u)
    torch.testing.assert_close(c.sum(-1), torch.ones(2, 6))
    torch.testing.assert_close(v, layer(u))


def test_routing_parents_first_gives_every_iteration_of_the_paper_s():
    u_hat = torch.randn(3, 9, 4, 5, dtype=torch.float64)
    _, passes = route_parents_first(u_hat.transpose(1, 2).contiguous(), 4)
    for r, (coupling, _, v) in enumerate(passes, start=1):
        reference, c = dynamic_routing_with_couplings(u_hat, r)
        torch.testing.assert_close(v, reference)
        torch.testing.assert_close(coupling.transpose(1, 2), c)


def test_fused_routing_handles_mixed_precision_like_the_reference():
    # bf16 votes under autocast: values and gradients close to the reference's
    torch.manual_seed(0)
    u_hat = (0.1 * torch.randn(2, 40, 5, 8)).bfloat16().requires_grad_()
    upstream = torch.randn(2, 5, 8)
    results = []
    for routing in (fused_dynamic_routing, dynamic_routing):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            v = routing(u_hat, 3)
        (grad,) = torch.autograd.grad(v.float(), u_hat, upstream)
        assert grad.dtype == u_hat.dtype and torch.isfinite(grad).all()
        results.append((v.float(), grad.float()))
    torch.testing.assert_close(results[0][0], results[1][0], atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(results[0][1], results[1][1], atol=2e-2, rtol=5e-2)


# --- the CPU's choice ---

BATCH = (torch.rand(2, 1, 28, 28), torch.tensor([1, 2]))


def choose(**kwargs):
    return choose_cpu_implementation(lambda: CapsNet(TINY), capsnet_loss, BATCH, **kwargs)


def fake_clock(
    monkeypatch,
    native: float,
    matmul: float,
    bf16_factor: float,
    native_input: float | None = None,
) -> list[str]:
    """Make each convolution forward advance a fake clock: ``native`` or ``matmul``
    seconds (``native_input`` for products with the native input gradient; default:
    ``matmul`` plus 0.05), times ``bf16_factor`` under bf16 autocast. Returns the list
    of calls."""
    native_input = matmul + 0.05 if native_input is None else native_input
    calls: list[str] = []
    clock = {"now": 0.0}

    def cost(seconds: float) -> None:
        bf16 = torch.is_autocast_enabled("cpu")
        clock["now"] += seconds * (bf16_factor if bf16 else 1.0)

    def matmul_forward(self, x):
        calls.append("matmul")
        cost(native_input if self.input_gradient == "native" else matmul)
        return torch.nn.functional.conv2d(x, self.weight, self.bias, self.stride)

    def native_forward(self, x):
        calls.append("native")
        cost(native)
        return torch.nn.functional.conv2d(x, self.weight, self.bias, self.stride)

    monkeypatch.setattr(MatmulConv2d, "forward", matmul_forward)
    monkeypatch.setattr(torch.nn.Conv2d, "forward", native_forward)
    monkeypatch.setattr("capsnotes.fast.cpu.perf_counter", lambda: clock["now"])
    return calls


def bf16_rates(monkeypatch, speedup: float) -> None:
    rates = MatmulRates((1024,), 200.0, 200.0 * speedup)
    monkeypatch.setattr("capsnotes.fast.cpu.cpu_matmul_rates", lambda: rates)


def refuse_probe(monkeypatch) -> None:
    def refuse():
        raise AssertionError("the bf16 probe ran although it was not needed")

    monkeypatch.setattr("capsnotes.fast.cpu.cpu_matmul_rates", refuse)


def timed_plan(**choices):
    """The plan of a tiny CapsNet's run on the CPU, its open choices timed on BATCH."""
    config = TrainConfig(model=TINY, **choices.pop("config", {}))
    trial = {"sample": lambda: BATCH, "make_model": lambda: build_model(config)}
    return plan_for(config, "cpu", **trial, **choices)


def test_the_fastest_of_the_candidates_is_chosen(monkeypatch):
    fake_clock(monkeypatch, native=0.2, matmul=0.3, bf16_factor=0.5)
    before = torch.random.get_rng_state()
    choice = choose(precisions=["float32", "bfloat16"], repeats=2)
    assert (choice.convolution, choice.precision) == ("native", "bfloat16")
    assert set(choice.seconds) == {
        f"{convolution}, {precision}"
        for convolution in ("native", "matmul", "matmul-native-input")
        for precision in ("float32", "bfloat16")
    }
    # two convolutions per pass, each at its fake cost
    assert choice.seconds["native, bfloat16"] == pytest.approx(0.2)
    assert choice.seconds["matmul, float32"] == pytest.approx(0.6)
    assert choice.seconds["matmul-native-input, float32"] == pytest.approx(0.7)
    assert torch.equal(torch.random.get_rng_state(), before)  # caller's random state kept


def test_products_with_the_native_input_gradient_are_chosen_where_fastest(monkeypatch):
    fake_clock(monkeypatch, native=0.3, matmul=0.25, native_input=0.2, bf16_factor=1.0)
    choice = choose(repeats=1)
    assert (choice.convolution, choice.precision) == ("matmul-native-input", "float32")
    assert choice.seconds["matmul-native-input, float32"] == pytest.approx(0.4)


def test_with_bf16_units_the_plan_times_six_candidates_and_keeps_the_rates(monkeypatch):
    fake_clock(monkeypatch, native=0.2, matmul=0.3, bf16_factor=0.5)
    bf16_rates(monkeypatch, speedup=4.0)
    plan = timed_plan()
    assert (plan.convolution, plan.precision, plan.timed) == ("native", "bfloat16", ())
    assert len(plan.timings["step_seconds"]) == 6
    rates = {"sizes": (1024,), "float32": 200.0, "bfloat16": 800.0}
    assert plan.timings["matmul_gflops"] == rates
    assert plan.to_dict()["matmul_gflops"] == rates  # what the history records


def test_a_cpu_without_bf16_units_chooses_among_float32_only(monkeypatch):
    """On such a CPU nothing changes: the same candidates as before bf16 existed."""
    calls = fake_clock(monkeypatch, native=0.3, matmul=0.2, bf16_factor=0.1)
    bf16_rates(monkeypatch, speedup=BF16_SPEEDUP * 0.9)
    plan = timed_plan()
    assert (plan.convolution, plan.precision) == ("matmul", "float32")
    assert set(plan.timings["step_seconds"]) == {
        "native, float32",
        "matmul, float32",
        "matmul-native-input, float32",
    }
    assert len(calls) == 3 * 3 * 2  # 3 candidates x (warm-up + 2 repeats) x 2 convolutions


def test_without_mixed_precision_bf16_is_not_even_measured(monkeypatch):
    fake_clock(monkeypatch, native=0.2, matmul=0.3, bf16_factor=0.1)
    refuse_probe(monkeypatch)
    plan = timed_plan(config={"mixed_precision": False})
    assert plan.precision == "float32" and "matmul_gflops" not in plan.timings


def test_a_choice_given_is_not_timed(monkeypatch):
    """The plan times only what it has not been given: with the precision given, no
    probe and one precision; with both given, nothing."""
    fake_clock(monkeypatch, native=0.2, matmul=0.3, bf16_factor=0.5)
    refuse_probe(monkeypatch)
    plan = timed_plan(precision="bfloat16")
    assert set(plan.timings["step_seconds"]) == {
        "native, bfloat16",
        "matmul, bfloat16",
        "matmul-native-input, bfloat16",
    }
    assert (plan.convolution, plan.precision) == ("native", "bfloat16")
    plan = timed_plan(convolution="matmul", precision="float32")
    assert plan.timings is None and plan.timed == ()


def test_the_probe_reports_the_fastest_of_its_repeats(monkeypatch):
    """Rates are 2·n³ FLOP over the fastest repeat of each dtype, after a warm-up; a
    larger size is measured only where bf16 kept up with float32."""
    durations = iter(
        [9.0, 0.5, 0.4, 0.2]  # float32 at 8: warm-up, then 3 repeats
        + [9.0, 0.25, 0.1, 0.3]  # bf16 at 8
        + [9.0, 1.0, 1.0, 1.0]  # float32 at 16
        + [9.0, 8.0, 8.0, 8.0]  # bf16 at 16: no size after it would be measured
    )
    ticks = {"now": 0.0, "started": True}

    def clock():
        if ticks["started"]:
            ticks["started"] = False
            return ticks["now"]
        ticks["now"] += next(durations)
        ticks["started"] = True
        return ticks["now"]

    monkeypatch.setattr("capsnotes.fast.cpu.perf_counter", clock)
    rates = cpu_matmul_rates(sizes=(8, 16, 32), repeats=3)  # 32 is never reached
    assert rates.sizes == (8, 16)
    assert rates.float32 == pytest.approx(2 * 16**3 / 1e9 / 1.0)  # the best: at 16
    assert rates.bfloat16 == pytest.approx(2 * 8**3 / 1e9 / 0.1)  # the best: at 8


# --- devices and precision ---


def test_a_cuda_run_is_planned_from_the_capability_its_own_card_reports(monkeypatch):
    """plan_for asks the device it is given for its compute capability and plans from
    it: on a machine (faked here) whose cuda:0 is a T4 (7.5) and cuda:1 an H100 (9.0),
    a run on cuda:0 trains in float16 with its loss scaler and no graph, one on cuda:1
    in bf16, graphed; a run on the CPU asks no card."""
    cards = {0: (7, 5), 1: (9, 0)}
    asked = []

    def capability(device=None):
        index = torch.cuda.current_device() if device is None else torch.device(device).index
        asked.append(index)
        return cards[index]

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", capability)
    config = TrainConfig(model=TINY)
    t4, h100 = plan_for(config, "cuda:0"), plan_for(config, "cuda:1")
    assert asked == [0, 1]
    assert (t4.capability, t4.precision, t4.loss_scaling, t4.cuda_graph) == (
        (7, 5),
        "float16",
        True,
        False,
    )
    assert (h100.capability, h100.precision, h100.loss_scaling, h100.cuda_graph) == (
        (9, 0),
        "bfloat16",
        False,
        True,
    )
    cpu = plan_for(config, "cpu")
    assert cpu.capability is None and asked == [0, 1]


def test_devices_are_resolved_and_described(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    assert device_name("cpu").startswith("CPU: ")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert device_name("cpu").endswith(", 1 thread")
        torch.set_num_threads(2)
        assert device_name("cpu").endswith(", 2 threads")
    finally:
        torch.set_num_threads(threads)
    with pytest.raises(ValueError, match="device must be"):
        resolve_device("tpu")
    # what PyTorch sees decides, on any machine: with no GPU "auto" is the CPU and
    # "cuda" is refused; with one, both are the GPU (resolve_device reads it per call)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(None) == resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match="PyTorch sees no CUDA GPU"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device(None).type == resolve_device("auto").type == "cuda"
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
