"""The training step: the same update as a hand-written step; the weight average; fp16's
loss scaling; what a CPU can check of the GPU path (no host read, CPU tensor or tensor
made from host data inside what a graph records, autocast's cache off, the T4's float16
format with its scaler and fused Adam, the graphed step's control flow with a stand-in
for CUDA); the CUDA-graph replay against the eager step (on a GPU, and with the stand-in
on this CPU, which fails wherever the GPU test would but for CUDA's numerics)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools

import pytest
import torch
from torch.overrides import TorchFunctionMode

from capsnotes import CapsNet, capsnet_loss, margin_loss, reconstruction_loss, squash
from capsnotes.experiments.convnet import ConvNetConfig
from capsnotes.fast import speed_up
from capsnotes.fast.graphs import CudaGraphs, GraphedStep
from capsnotes.fast.precision import Autocast, loss_scaling
from capsnotes.training.config import ARCHITECTURES, profile
from capsnotes.training.step import TrainingStep, WeightAverage, training_step
from tests.conftest import TINY


def make_optimizer(model, lr, fused=True, capturable=False):
    return torch.optim.Adam(model.parameters(), lr=lr, fused=fused, capturable=capturable)


objective = functools.partial(capsnet_loss, reconstruction_weight=0.0005)


def sixteen_bits(
    model, optimizer, dtype, scaler=None, average=None, loss=objective
) -> TrainingStep:
    """The step as build_run makes it for a 16-bit plan: the forward pass under
    autocast, and with a scaler float16's loss scaling, of ``loss``."""
    step_objective, stepping = loss, optimizer
    if scaler is not None:
        step_objective, stepping = loss_scaling(loss, optimizer, scaler)
    return TrainingStep(Autocast(model, dtype), stepping, step_objective, average)


def _batch(count: int, seed: int, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(count, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (count,), generator=generator)
    return images.to(device), labels.to(device)


def test_the_step_makes_the_update_of_a_hand_written_step() -> None:
    torch.manual_seed(0)
    model, reference = CapsNet(TINY), CapsNet(TINY)
    reference.load_state_dict(model.state_dict())
    optimizer = make_optimizer(model, 1e-3, fused=False)
    reference_optimizer = torch.optim.Adam(reference.parameters(), lr=1e-3)
    for seed in range(2):  # the second step starts from the first one's gradients
        images, labels = _batch(8, seed)
        stats = training_step(model, optimizer, objective, (images, labels))

        reference_optimizer.zero_grad()
        out = reference(images, labels)
        margin = margin_loss(out.capsules, labels)
        recon = reconstruction_loss(out.reconstructions, images)
        (margin + recon).backward()
        reference_optimizer.step()
        assert set(stats) == {"margin_loss", "reconstruction_loss", "correct"}
        torch.testing.assert_close(stats["margin_loss"], margin.detach())
        torch.testing.assert_close(stats["reconstruction_loss"], recon.detach())
        assert stats["correct"].item() == (out.predictions == labels).sum().item()
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_training_step_binds_everything_but_the_batch() -> None:
    torch.manual_seed(0)
    model, twin = CapsNet(TINY), CapsNet(TINY)
    twin.load_state_dict(model.state_dict())
    step = TrainingStep(model, make_optimizer(model, 1e-3), objective)
    optimizer = make_optimizer(twin, 1e-3)
    images, labels = _batch(4, seed=3)
    got = step((images, labels))
    want = training_step(twin, optimizer, objective, (images, labels))
    assert got.keys() == want.keys()
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_the_moving_average_follows_the_weights_step_by_step() -> None:
    torch.manual_seed(0)
    model = CapsNet(TINY)
    average = WeightAverage(model, decay=0.75)
    assert average.model is not model
    step = TrainingStep(model, make_optimizer(model, 1e-2), objective, average=average)
    expected = [p.detach().clone() for p in model.parameters()]
    for seed in range(3):
        step(_batch(4, seed))
        # a <- a + (1 - decay) (w - a), after every step
        expected = [
            a + 0.25 * (w.detach() - a) for a, w in zip(expected, model.parameters(), strict=True)
        ]
    for got, want in zip(average.model.parameters(), expected, strict=True):
        torch.testing.assert_close(got, want)
    assert not torch.equal(next(average.model.parameters()), next(model.parameters()))
    assert not any(p.requires_grad for p in average.model.parameters())


def test_float16_scales_the_loss_and_makes_the_same_update() -> None:
    """With a GradScaler the step scales the loss before backward and unscales before
    Adam: in float32 arithmetic the same update as without one; and a scale so large
    that the gradients overflow skips the step and halves the scale."""
    torch.manual_seed(0)
    model, twin = CapsNet(TINY), CapsNet(TINY)
    twin.load_state_dict(model.state_dict())
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    batch = _batch(4, seed=5)
    scaled, stepping = loss_scaling(objective, make_optimizer(model, 1e-3, False), scaler)
    training_step(model, stepping, scaled, batch)
    training_step(twin, make_optimizer(twin, 1e-3, False), objective, batch)
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    assert scaler.get_scale() == 1024.0  # no overflow: the scale stays
    # in float16 (CPU autocast), gradients scaled by 2^40 overflow
    before = [p.detach().clone() for p in model.parameters()]
    overflowing = torch.amp.GradScaler("cpu", init_scale=2.0**40)
    optimizer = make_optimizer(model, 1e-3, False)
    sixteen_bits(model, optimizer, torch.float16, overflowing)(batch)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert overflowing.get_scale() == 2.0**39


def test_graphs_are_refused_off_cuda() -> None:
    model = CapsNet(TINY)
    step = TrainingStep(model, make_optimizer(model, 1e-3), objective)
    with pytest.raises(ValueError, match="CUDA device"):
        GraphedStep(step)


#: The graphed step's tests, each run twice: on this CPU with :class:`StandInGraphs` for
#: CUDA (an Adam marked capturable while the GraphedStep is built), and on a GPU with real
#: CUDA graphs. A CPU run fails wherever the GPU run would, but for CUDA's own numerics.
ON_CPU_AND_GPU = [
    pytest.param("cpu", id="cpu-stand-in"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    ),
]


@contextlib.contextmanager
def marked_capturable(optimizer, device):
    """On a CPU, ``optimizer`` marked capturable while a GraphedStep is built (what it
    checks: a CPU cannot step a capturable Adam); on a GPU, nothing to do."""
    if torch.device(device).type == "cuda":
        yield
        return
    groups = optimizer.param_groups
    for group in groups:
        group["capturable"] = True
    try:
        yield
    finally:
        for group in groups:
            group["capturable"] = False


def capturable_adam(model, device, lr=1e-3):
    """The Adam a graphed run builds: fused, and capturable on a GPU (on a CPU, see
    :func:`marked_capturable`)."""
    return make_optimizer(model, lr, capturable=torch.device(device).type == "cuda")


@pytest.mark.parametrize("device", ON_CPU_AND_GPU)
def test_graph_replay_trains_as_the_eager_step_does(device) -> None:
    """Warm-up, recording, replay, a new recording after the learning rate changes, and
    an eager batch of another size in between: the same weights as eager steps, in bf16
    with the weight average (the paper's model on a GPU, the tiny one here)."""
    torch.manual_seed(0)
    model = functools.partial(CapsNet, TINY) if device == "cpu" else CapsNet  # the paper's
    models = [model().to(device), model().to(device)]
    models[1].load_state_dict(models[0].state_dict())
    optimizers = [capturable_adam(m, device) for m in models]
    averages = [WeightAverage(m, 0.9) for m in models]
    steps = [
        sixteen_bits(m, o, torch.bfloat16, average=a)
        for m, o, a in zip(models, optimizers, averages, strict=True)
    ]
    graphs = StandInGraphs() if device == "cpu" else None
    plain = TrainingStep(models[0], make_optimizer(models[0], 1e-3), objective)
    with pytest.raises(ValueError, match="capturable"):
        GraphedStep(plain, graphs=graphs)
    with marked_capturable(optimizers[0], device):
        graphed = GraphedStep(steps[0], warmup=2, graphs=graphs)
    eager = steps[1]
    # what the graph records: the whole wrapped step (bf16 autocast, Adam, the average)
    assert graphed.step is steps[0] and graphed.optimizer is optimizers[0]
    assert isinstance(graphed.step.model, Autocast) and graphed.step.model.model is models[0]
    assert graphed.step.model.dtype == torch.bfloat16 and graphed.step.average is averages[0]
    # on a CPU the stand-in replays the very step the eager one takes: exactly equal
    tolerance = {"rtol": 0, "atol": 0} if device == "cpu" else {"rtol": 2e-3, "atol": 2e-3}
    sizes = [32, 32, 32, 32, 20, 32, 32]  # the 20 runs eagerly beside the graph
    for index, size in enumerate(sizes):
        if index == 5:
            for optimizer in optimizers:
                optimizer.param_groups[0]["lr"] = 5e-4
        batch = _batch(size, seed=index, device=device)
        got, want = graphed(batch), eager(batch)
        assert got.keys() == want.keys()
        for name in want:
            torch.testing.assert_close(got[name].float(), want[name].float(), **tolerance)
    assert graphed.recordings == 2 and graphed.eager_steps == 3  # the warm-up, the 20
    if graphs is not None:
        assert graphs.side_stream_steps == 2 and graphs.replays == 4
    tolerance = {"rtol": 0, "atol": 0} if device == "cpu" else {"rtol": 1e-3, "atol": 1e-4}
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, **tolerance)
    for a, b in zip(averages[0].model.parameters(), averages[1].model.parameters(), strict=True):
        torch.testing.assert_close(a, b, **tolerance)


# --- what a CPU can check of the GPU path ---

#: The tiny models of the three architectures the trainer trains, with a batch of each.
TINY_CNN = ConvNetConfig(channels=(4, 4, 4), hidden=(8, 8))


def tiny_runs(device: str) -> dict:
    """For each architecture: its tiny model on ``device``, its objective, a batch of 4."""
    pairs = dataclasses.replace(TINY, image_size=36)
    runs = {}
    for name, model_config, size in (
        ("capsnet", TINY, 28),
        ("cnn", TINY_CNN, 28),
        ("capsnet-pairs", pairs, 36),
    ):
        config = dataclasses.replace(profile("quick"), architecture=name, model=model_config)
        with torch.device(device):
            torch.manual_seed(0)
            model = ARCHITECTURES[name].model(model_config)
            images = torch.rand(4, 1, size, size)
            if name == "capsnet-pairs":
                labels = torch.tensor([[0, 1], [2, 3], [4, 5], [6, 7]])
                batch = (images, labels, torch.rand(4, 2, 1, size, size))
            else:
                batch = (images, torch.tensor([0, 1, 2, 3]))
        runs[name] = (model, config.objective, batch)
    return runs


@pytest.mark.parametrize("architecture", ["capsnet", "cnn", "capsnet-pairs"])
def test_a_step_reads_nothing_on_the_host_and_makes_no_cpu_tensor(architecture):
    """What a CUDA graph records must neither wait for the GPU (a host read) nor mix in a
    CPU tensor. The ``meta`` device has no values at all: reading one raises, and so
    does adding a CPU tensor to a meta one. One training step of each model runs there:
    forward with the labels, the objective, backward, the weight average. (Fused or
    capturable Adam cannot live on ``meta``; the optimizer's part is checked below.)"""
    model, objective, batch = tiny_runs("meta")[architecture]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    average = WeightAverage(model, 0.9)
    stats = TrainingStep(model, optimizer, objective, average)(batch)
    assert {value.device.type for value in stats.values()} == {"meta"}
    with pytest.raises(RuntimeError, match="meta"):
        stats["correct"].item()  # the check would catch a read


class NoTensorsFromHostData(TorchFunctionMode):
    """Record every tensor made from host data while the mode is on; ``made`` lists them.

    A CUDA graph records kernels: a factory that only takes a shape and Python numbers
    (``torch.zeros``, ``torch.full``, ``torch.arange``, ``torch.scalar_tensor``) and an
    in-place fill with a Python number (``fill_``, ``x * 0.5``) launch a kernel whose
    number is one of its arguments, so they are recorded and are allowed (the number is
    fixed in the graph: one that changes from step to step must live in a tensor). What
    cannot be recorded is a copy out of host memory: a tensor made from Python or NumPy
    data (``torch.tensor``, ``torch.as_tensor``, ``torch.asarray``, ``Tensor.new_tensor``,
    ``torch.from_numpy``, ``torch.frombuffer``; whatever device it is made on: on a GPU
    it means a host-to-device copy), and a CPU
    tensor moved to another device (``.to``, ``.cuda``, ``copy_``; on this CPU only a
    step on ``meta`` can show one). A torch function mode (``torch.overrides``) sees
    every torch function and tensor method called from Python; ``from_numpy`` and
    ``frombuffer`` take no tensor and bypass it, so they are wrapped while the mode is
    on. Host reads (``.item()``, ...) are the ``meta`` test's and ``no_host_reads``'s."""

    FROM_DATA = (torch.tensor, torch.as_tensor, torch.asarray, torch.Tensor.new_tensor)
    MOVES = (torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.copy_)

    def __init__(self) -> None:
        super().__init__()
        self.made: list[str] = []
        self._saved: dict = {}

    def __enter__(self):
        for name in ("from_numpy", "frombuffer"):
            self._saved[name] = function = getattr(torch, name)
            setattr(torch, name, self._recording(name, function))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, function in self._saved.items():
            setattr(torch, name, function)
        return super().__exit__(*exc)

    def _recording(self, name, function):
        def made_from_host_data(*args, **kwargs):
            self.made.append(f"torch.{name}")
            return function(*args, **kwargs)

        return made_from_host_data

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        name = getattr(func, "__name__", repr(func))
        if func in self.FROM_DATA:
            data = args[1] if func is torch.Tensor.new_tensor else args[0]
            if not torch.is_tensor(data):  # Python numbers or lists, a NumPy array
                self.made.append(f"{name}({data!r})")
        elif func in self.MOVES:
            source = args[1] if func is torch.Tensor.copy_ else args[0]
            target = args[0] if func is torch.Tensor.copy_ else result
            if source.device.type == "cpu" and target.device.type != "cpu":
                self.made.append(f"{name}: a CPU tensor to {target.device}")
        return result


def test_the_host_data_check_sees_what_a_graph_cannot_record():
    """What :class:`NoTensorsFromHostData` allows and rejects (its docstring says why)."""
    import numpy  # here, so that collecting this file needs no NumPy

    x, elsewhere = torch.ones(2), torch.empty(2, device="meta")
    with NoTensorsFromHostData() as mode:
        torch.zeros(1, device=x.device).fill_(3.0), torch.full((2,), 0.5), x * 2.0
        torch.arange(3), torch.scalar_tensor(1.0), torch.as_tensor(x), x.to(torch.float16)
        x.new_zeros(3), x.to("cpu"), elsewhere.to(torch.float16), elsewhere.copy_(elsewhere)
    assert mode.made == []
    with NoTensorsFromHostData() as mode:
        torch.tensor(0, device=x.device), torch.as_tensor([1.0]), torch.asarray(2)
        x.new_tensor([1.0]), torch.from_numpy(numpy.zeros(2))
        torch.frombuffer(bytearray(4), dtype=torch.float32)
        x.to(elsewhere.device), x.to("meta"), elsewhere.copy_(x)
    assert len(mode.made) == 9, mode.made
    assert torch.from_numpy.__name__ == "from_numpy"  # put back


@pytest.mark.parametrize(
    ("architecture", "routing"),
    [
        ("capsnet", "reference"),
        ("capsnet", "fused"),
        ("cnn", None),
        ("capsnet-pairs", "reference"),
        ("capsnet-pairs", "fused"),
    ],
)
def test_a_step_makes_no_tensor_from_host_data(architecture, routing):
    """A real training step of each tiny model on this CPU, as a graphed GPU run takes
    it (fused Adam, bf16 autocast, the weight average; the paper's layers and the fast
    routing), twice (Adam makes its state on the first step), makes no tensor from host
    data: on a GPU each would be a host-to-device copy, which a CUDA graph cannot
    record. Also on ``meta``, where a CPU tensor moved to the device would show."""
    model, objective, batch = tiny_runs("cpu")[architecture]
    if routing == "fused":
        model = speed_up(model, routing)
    optimizer = make_optimizer(model, 1e-3, fused=True)
    average = WeightAverage(model, 0.9)
    step = sixteen_bits(model, optimizer, torch.bfloat16, average=average, loss=objective)
    before = [p.detach().clone() for p in model.parameters()]
    with NoTensorsFromHostData() as mode:
        for _ in range(2):
            stats = step(batch)
    assert mode.made == []
    assert all(torch.isfinite(value).all() for value in stats.values())
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    model, objective, batch = tiny_runs("meta")[architecture]
    if routing == "fused":
        model = speed_up(model, routing)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with NoTensorsFromHostData() as mode:
        TrainingStep(model, optimizer, objective, WeightAverage(model, 0.9))(batch)
    assert mode.made == []


def test_the_forward_pass_runs_with_autocast_s_cache_off():
    """PyTorch's CUDA-graph notes: autocast's cache must be off while a graph is
    recorded (the casts it caches are freed when autocast exits, and the graph would
    still read them). The step's forward pass, in a 16-bit precision, runs under
    autocast with the cache off."""
    model = CapsNet(TINY)
    seen = []

    def look(module, args, output):
        seen.append((torch.is_autocast_enabled("cpu"), torch.is_autocast_cache_enabled()))

    model.register_forward_hook(look)
    step = sixteen_bits(model, make_optimizer(model, 1e-3), torch.bfloat16)
    assert torch.is_autocast_cache_enabled()  # torch's default, outside autocast
    step(_batch(4, seed=0))
    assert seen == [(True, False)]


@contextlib.contextmanager
def no_host_reads():
    """Raise on any read of a tensor's value into Python (``.item()``, ``bool()``, ...),
    the reads that make the host wait for the GPU."""
    names = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__")
    saved = {name: getattr(torch.Tensor, name) for name in names}

    def refuse(self, *args, **kwargs):
        raise AssertionError("a host read of a tensor")

    try:
        for name in names:
            setattr(torch.Tensor, name, refuse)
        yield
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


def scaled_backward(model, scaler, batch) -> None:
    """What a float16 step does before the scaler's step and update (the part under
    test, which the caller runs): forward in float16, then the scaled backward."""
    output = Autocast(model, torch.float16)(*batch[:2])
    scaler.scale(objective(output, *batch).total).backward()


def test_with_fused_adam_the_loss_scaler_reads_nothing_on_the_host():
    """Why a float16 step could be graphed (capsnotes.fast.graphs): with fused Adam,
    ``GradScaler.step`` passes the scale and the overflow flag to Adam as tensors and
    ``GradScaler.update`` changes the scale in place; with unfused Adam the scaler reads
    the overflow flag on the host (``.item()``) to decide whether to step."""
    for fused in (True, False):
        torch.manual_seed(0)
        model = CapsNet(TINY)
        optimizer = make_optimizer(model, 1e-3, fused=fused)
        scaler = torch.amp.GradScaler("cpu")
        scaled_backward(model, scaler, _batch(4, seed=0))
        reads = contextlib.nullcontext() if fused else pytest.raises(AssertionError)
        with reads, no_host_reads():
            scaler.step(optimizer)
            scaler.update()


def test_the_t4_format_trains_on_a_cpu_and_skips_an_overflowing_step():
    """float16 autocast, GradScaler and fused Adam, as on a T4 (the CPU computes the
    same format): a few steps train; a step whose scaled gradients overflow changes
    neither the weights nor Adam's state, and halves the scale."""
    torch.manual_seed(0)
    model = CapsNet(TINY)
    optimizer = make_optimizer(model, 1e-2)
    scaler = torch.amp.GradScaler("cpu")
    step = sixteen_bits(model, optimizer, torch.float16, scaler)
    before = [p.detach().clone() for p in model.parameters()]
    losses = [step(_batch(8, seed=0))["margin_loss"].item() for _ in range(4)]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert scaler.get_scale() == 2.0**16  # no overflow yet
    state = {
        name: [value.clone() for value in optimizer.state[p].values()]
        for name, p in model.named_parameters()
    }
    weights = [p.detach().clone() for p in model.parameters()]
    scaler.update(2.0**127)  # a scale at which the scaled loss overflows float32
    step(_batch(8, seed=1))
    for a, b in zip(weights, model.parameters(), strict=True):
        assert torch.equal(a, b)
    for name, p in model.named_parameters():
        for saved, now in zip(state[name], optimizer.state[p].values(), strict=True):
            assert torch.equal(saved, now), name  # exp_avg, exp_avg_sq and step
    assert scaler.get_scale() == 2.0**126
    scaler.update(2.0**16)
    step(_batch(8, seed=2))  # at a usable scale, the next step trains again
    assert not all(torch.equal(a, b) for a, b in zip(weights, model.parameters()))


def test_squash_gives_no_nan_for_short_vectors_in_float16():
    """Chapter 2's promise (squash(0) = 0, with a finite gradient) in float16, where the
    default eps of 1e-8 rounds to 0."""
    assert torch.tensor(1e-8, dtype=torch.float16).item() == 0
    for length in (0.0, 1e-5, 1e-3, 1e-1):
        s = torch.full((3, 16), length / 4, dtype=torch.float16, requires_grad=True)
        v = squash(s)
        v.float().sum().backward()
        assert torch.isfinite(v).all() and torch.isfinite(s.grad).all(), length
        assert v.dtype == torch.float16


class StandInGraphs:
    """CUDA's part of GraphedStep on a CPU. A "recording" runs the step once (a real
    recording runs nothing, and its first replay does the step: here the first replay
    after a recording does nothing instead); a replay runs the recorded step again on
    the same input buffers and writes its results into the recorded outputs, as a graph
    does."""

    def __init__(self) -> None:
        self.recordings = self.replays = self.side_stream_steps = 0
        self.device_entered = 0

    @contextlib.contextmanager
    def on_device(self):
        self.device_entered += 1
        yield

    @contextlib.contextmanager
    def side_stream(self):
        self.side_stream_steps += 1
        yield

    def record(self, function):
        self.recordings += 1
        outputs = function()
        graphs = self

        class Graph:
            fresh = True

            def replay(self) -> None:
                graphs.replays += 1
                if self.fresh:  # the recording's own step
                    self.fresh = False
                    return
                for name, value in function().items():
                    outputs[name].copy_(value)

        return Graph(), outputs


def test_the_graphed_step_warms_up_records_per_learning_rate_and_runs_odd_batches_eagerly():
    """GraphedStep's control flow on a CPU: two eager warm-up steps on the side stream,
    one recording, replays that copy each batch into the recorded buffers, a smaller
    batch run eagerly beside the graph, a new recording when the learning rate changes;
    everything on the model's device. The weights follow the eager step's exactly."""
    torch.manual_seed(0)
    models = [CapsNet(TINY), CapsNet(TINY)]
    models[1].load_state_dict(models[0].state_dict())
    optimizers = [make_optimizer(m, 1e-3, fused=False) for m in models]
    for group in optimizers[0].param_groups:
        group["capturable"] = True  # what GraphedStep checks (a CPU cannot step it)
    graphs = StandInGraphs()
    graphed = GraphedStep(TrainingStep(models[0], optimizers[0], objective), None, 2, graphs)
    for group in optimizers[0].param_groups:
        group["capturable"] = False
    eager = TrainingStep(models[1], optimizers[1], objective)
    sizes = [8, 8, 8, 8, 5, 8, 8, 8]
    for index, size in enumerate(sizes):
        if index == 6:  # a new epoch's learning rate
            for optimizer in optimizers:
                optimizer.param_groups[0]["lr"] = 5e-4
        batch = _batch(size, seed=index)
        got, want = graphed(batch), eager(batch)
        for name in want:
            assert torch.equal(got[name], want[name]), (index, name)
    assert graphs.side_stream_steps == 2 and graphs.recordings == graphed.recordings == 2
    assert graphed.eager_steps == 3  # two warm-up steps and the batch of 5
    assert graphs.replays == 5 and graphs.device_entered == len(sizes)
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        assert torch.equal(a, b)


def test_the_graph_is_recorded_on_a_full_batch():
    """An epoch of no more steps than the warm-up and one: the warm-up takes the full
    batches, the epoch's last, smaller batch runs eagerly instead of being recorded, and
    the next epoch's first full batch is recorded, so that every full batch replays."""
    torch.manual_seed(0)
    model = CapsNet(TINY)
    optimizer = make_optimizer(model, 1e-3, fused=False)
    optimizer.param_groups[0]["capturable"] = True  # what GraphedStep checks
    graphs = StandInGraphs()
    graphed = GraphedStep(TrainingStep(model, optimizer, objective), 8, 3, graphs)
    optimizer.param_groups[0]["capturable"] = False
    for index, size in enumerate([8, 8, 8, 5, 8, 8, 8, 5]):
        graphed(_batch(size, seed=index))
    assert graphs.recordings == 1 and len(graphed._inputs[0]) == 8
    assert graphed.eager_steps == 5  # three warm-up steps and the two batches of 5
    assert graphs.replays == 3


def test_a_graphed_step_refuses_what_it_cannot_record():
    model = CapsNet(TINY)
    plain = TrainingStep(model, make_optimizer(model, 1e-3), objective)
    with pytest.raises(ValueError, match="capturable"):
        GraphedStep(plain, graphs=StandInGraphs())
    optimizer = make_optimizer(model, 1e-3, fused=False)
    optimizer.param_groups[0]["capturable"] = True
    scaled = sixteen_bits(model, optimizer, torch.float16, torch.amp.GradScaler("cpu"))
    with pytest.raises(ValueError, match="loss scaler has not been run on a GPU"):
        GraphedStep(scaled, graphs=StandInGraphs())


def test_a_graphed_step_refuses_to_record_without_a_warm_up():
    """Adam makes its state, and cuBLAS its handles, on a first step: a graph that
    recorded their making would fail or replay them. The step before a refactor refused
    a warm-up below 1; GraphedStep does too."""
    model = CapsNet(TINY)
    optimizer = make_optimizer(model, 1e-3, fused=False)
    step = TrainingStep(model, optimizer, objective)
    with marked_capturable(optimizer, "cpu"):
        for warmup in (0, -1, 1.5, True):
            with pytest.raises(ValueError, match=r"warmup >= 1 eager steps .*Adam's state"):
                GraphedStep(step, warmup=warmup, graphs=StandInGraphs())
        assert GraphedStep(step, warmup=1, graphs=StandInGraphs()).warmup == 1


class AnotherDeviceCurrent(StandInGraphs):
    """:class:`StandInGraphs` for a model on a device that is not the current one (GPU 1
    while GPU 0 is current): ``on_device`` makes the model's device current and gives the
    other back afterwards, as ``torch.cuda.device`` does; the side stream's steps, the
    recording and every replay note which device was current."""

    def __init__(self, device, current) -> None:
        super().__init__()
        self.device, self.current = torch.device(device), torch.device(current)
        self.noted: list[tuple[str, torch.device]] = []

    @contextlib.contextmanager
    def on_device(self):
        previous, self.current = self.current, self.device
        try:
            with super().on_device():
                yield
        finally:
            self.current = previous

    @contextlib.contextmanager
    def side_stream(self):
        self.noted.append(("side stream", self.current))
        with super().side_stream():
            yield

    def record(self, function):
        self.noted.append(("record", self.current))
        graph, outputs = super().record(function)
        replay = graph.replay

        def noting_replay() -> None:
            self.noted.append(("replay", self.current))
            replay()

        graph.replay = noting_replay
        return graph, outputs


@pytest.mark.parametrize(
    "device",
    [
        pytest.param("cpu", id="cpu-stand-in"),
        pytest.param(
            "cuda:1",
            id="cuda",
            marks=pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs"),
        ),
    ],
)
def test_a_graph_records_on_the_model_s_gpu_when_it_is_not_the_current_one(device) -> None:
    """--device cuda:1: the step warms up, records and replays on GPU 1 while GPU 0 stays
    current, runs a batch of another size there too, and trains as the eager step on GPU 1
    does. On a CPU, with a stand-in whose current device is another one (``meta``)."""
    torch.manual_seed(0)
    models = [CapsNet(TINY).to(device), CapsNet(TINY).to(device)]
    models[1].load_state_dict(models[0].state_dict())
    optimizers = [capturable_adam(m, device) for m in models]
    if device == "cpu":
        graphs = AnotherDeviceCurrent(device, current="meta")

        def current() -> torch.device:
            return graphs.current
    else:
        graphs = None
        torch.cuda.set_device(0)

        def current() -> torch.device:
            return torch.device("cuda", torch.cuda.current_device())

    other = current()
    seen = []  # the current device at each forward pass that runs Python (not a replay)
    models[0].register_forward_hook(lambda *args: seen.append(current()))
    with marked_capturable(optimizers[0], device):
        step = TrainingStep(models[0], optimizers[0], objective)
        graphed = GraphedStep(step, warmup=1, graphs=graphs)
    eager = TrainingStep(models[1], optimizers[1], objective)
    for seed, size in enumerate([8, 8, 8, 5, 8]):  # warm-up, record, replay, eager, replay
        batch = _batch(size, seed, device=device)
        graphed(batch), eager(batch)
        assert current() == other, seed
    assert graphed.recordings == 1 and graphed.eager_steps == 2
    assert len(seen) >= 3 and set(seen) == {torch.device(device)}, seen
    if graphs is not None:
        kinds = [kind for kind, _ in graphs.noted]
        assert kinds == ["side stream", "record", "replay", "replay", "replay"], kinds
        assert {where for _, where in graphs.noted} == {torch.device(device)}, graphs.noted
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_the_cuda_graphs_of_a_step_make_the_model_s_gpu_current(monkeypatch) -> None:
    """What CudaGraphs.on_device enters: the device it was made for (GPU 1), not the
    current one. Checked without entering it (this CPU has no GPU to make current)."""
    monkeypatch.setattr(torch.cuda, "Stream", lambda device: None)  # no CUDA here
    graphs = CudaGraphs(torch.device("cuda:1"))
    entering = graphs.on_device()
    assert isinstance(entering, torch.cuda.device) and entering.idx == 1
