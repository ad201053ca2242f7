"""The training step: the same update as a hand-written step; the weight average; fp16's
loss scaling; the CUDA-graph replay against the eager step (on a GPU); every step class
has what its callers read."""

from __future__ import annotations

import functools

import pytest
import torch

from capsnotes import CapsNet, capsnet_loss, margin_loss, reconstruction_loss
from capsnotes.fast.graphs import GraphedStep
from capsnotes.step import TrainingStep, WeightAverage, training_step
from tests.conftest import REPO, TINY


def make_optimizer(model, lr, fused=True, capturable=False):
    return torch.optim.Adam(model.parameters(), lr=lr, fused=fused, capturable=capturable)


objective = functools.partial(capsnet_loss, reconstruction_weight=0.0005)


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
    Adam: in float32 arithmetic the same update as without one."""
    torch.manual_seed(0)
    model, twin = CapsNet(TINY), CapsNet(TINY)
    twin.load_state_dict(model.state_dict())
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    batch = _batch(4, seed=5)
    training_step(model, make_optimizer(model, 1e-3, False), objective, batch, scaler=scaler)
    training_step(twin, make_optimizer(twin, 1e-3, False), objective, batch)
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    assert scaler.get_scale() == 1024.0  # no overflow: the scale stays


def test_every_step_class_has_what_callers_read() -> None:
    """Every attribute the repository's code reads from a run's step (``run.step.X``)
    exists on the eager step, and the graphed step is an eager step whose constructor
    passes all of them on."""
    import ast

    read = set()
    for path in [*REPO.glob("capsnotes/**/*.py"), *REPO.glob("benchmarks/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "step"
            ):
                read.add(node.attr)
    model = CapsNet(TINY)
    step = TrainingStep(model, make_optimizer(model, 1e-3), objective)
    assert read <= set(dir(step)), read - set(dir(step))
    assert issubclass(GraphedStep, TrainingStep)
    assert {"model", "optimizer", "objective", "precision", "scaler", "average"} <= vars(
        step
    ).keys()


def test_graphs_are_refused_off_cuda() -> None:
    model = CapsNet(TINY)
    step = TrainingStep(model, make_optimizer(model, 1e-3), objective)
    with pytest.raises(ValueError, match="CUDA device"):
        GraphedStep(step)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_graph_replay_trains_as_the_eager_step_does() -> None:
    """Warm-up, recording, replay, a new recording after the learning rate changes, and
    an eager batch of another size in between: the same weights as eager steps."""
    torch.manual_seed(0)
    models = [CapsNet().cuda(), CapsNet().cuda()]
    models[1].load_state_dict(models[0].state_dict())
    optimizers = [make_optimizer(m, 1e-3, capturable=True) for m in models]
    averages = [WeightAverage(m, 0.9) for m in models]
    precision = torch.bfloat16
    steps = [
        TrainingStep(m, o, objective, precision, average=a)
        for m, o, a in zip(models, optimizers, averages, strict=True)
    ]
    with pytest.raises(ValueError, match="capturable"):
        GraphedStep(TrainingStep(models[0], make_optimizer(models[0], 1e-3), objective))
    graphed, eager = GraphedStep(steps[0], warmup=2), steps[1]
    sizes = [32, 32, 32, 32, 20, 32, 32]  # the 20 runs eagerly beside the graph
    for index, size in enumerate(sizes):
        if index == 5:
            for optimizer in optimizers:
                optimizer.param_groups[0]["lr"] = 5e-4
        batch = _batch(size, seed=index, device="cuda")
        got, want = graphed(batch), eager(batch)
        for name in want:
            torch.testing.assert_close(got[name].float(), want[name].float(), rtol=2e-3, atol=2e-3)
    assert graphed.recordings == 2
    assert {"model", "optimizer", "objective", "precision", "scaler", "average"} <= vars(
        graphed
    ).keys()
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)
    for a, b in zip(averages[0].model.parameters(), averages[1].model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)
