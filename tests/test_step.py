"""TrainingStep: the eager step on any device, and the CUDA-graph replay against it."""

from __future__ import annotations

import pytest
import torch

from capsnotes import CapsNet
from capsnotes.losses import margin_loss, reconstruction_loss
from capsnotes.step import TrainingStep
from capsnotes.train import make_optimizer

SMALL = dict(conv_channels=16, primary_channels=4, decoder_hidden=(32, 64))


def _batch(count: int, seed: int, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(count, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (count,), generator=generator)
    return images.to(device), labels.to(device)


def test_eager_step_returns_the_losses_and_updates_like_a_hand_written_step() -> None:
    torch.manual_seed(0)
    model, reference = CapsNet(**SMALL), CapsNet(**SMALL)
    reference.load_state_dict(model.state_dict())
    step = TrainingStep(model, make_optimizer(model, 1e-3, fused=False), mixed_precision=False)
    optimizer = torch.optim.Adam(reference.parameters(), lr=1e-3)
    images, labels = _batch(8, seed=1)

    stats = step(images, labels)

    out = reference(images, labels)
    margin = margin_loss(out.capsules, labels)
    recon = reconstruction_loss(out.reconstructions, images)
    (margin + recon).backward()
    optimizer.step()
    assert stats.shape == (3,) and stats.dtype == torch.float32
    torch.testing.assert_close(stats[0], margin.detach())
    torch.testing.assert_close(stats[1], recon.detach())
    assert stats[2].item() == (out.predictions == labels).sum().item()
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_the_moving_average_follows_the_weights_step_by_step() -> None:
    torch.manual_seed(0)
    model, averaged = CapsNet(**SMALL), CapsNet(**SMALL)
    averaged.load_state_dict(model.state_dict())
    step = TrainingStep(
        model, make_optimizer(model, 1e-2), mixed_precision=False, averaged=averaged, decay=0.75
    )
    expected = [p.detach().clone() for p in model.parameters()]
    for seed in range(3):
        step(*_batch(4, seed))
        # a <- a + (1 - decay) (w - a), after every step
        expected = [
            a + 0.25 * (w.detach() - a) for a, w in zip(expected, model.parameters(), strict=True)
        ]
    for got, want in zip(averaged.parameters(), expected, strict=True):
        torch.testing.assert_close(got, want)
    assert not torch.equal(next(averaged.parameters()), next(model.parameters()))
    with pytest.raises(ValueError, match="decay must lie in"):
        TrainingStep(model, make_optimizer(model, 1e-2), averaged=averaged, decay=1.0)
    with pytest.raises(ValueError, match="copy of model"):
        TrainingStep(model, make_optimizer(model, 1e-2), averaged=CapsNet(conv_channels=8))


def test_graphs_are_refused_off_cuda_and_without_a_capturable_optimizer() -> None:
    model = CapsNet(**SMALL)
    with pytest.raises(ValueError, match="CUDA device"):
        TrainingStep(model, make_optimizer(model, 1e-3), graphed=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_graph_replay_trains_as_the_eager_step_does() -> None:
    """Warm-up, recording, replay, a new recording after the learning rate changes, and
    an eager batch of another size in between: the same weights as eager steps."""
    torch.manual_seed(0)
    models = [CapsNet().cuda(), CapsNet().cuda()]
    models[1].load_state_dict(models[0].state_dict())
    averages = [CapsNet().cuda(), CapsNet().cuda()]
    for average in averages:
        average.load_state_dict(models[0].state_dict())
    optimizers = [make_optimizer(m, 1e-3, capturable=True) for m in models]
    with pytest.raises(ValueError, match="warmup"):
        TrainingStep(models[0], optimizers[0], graphed=True, warmup=0)
    graphed = TrainingStep(
        models[0], optimizers[0], graphed=True, warmup=2, averaged=averages[0], decay=0.9
    )
    eager = TrainingStep(models[1], optimizers[1], averaged=averages[1], decay=0.9)
    sizes = [32, 32, 32, 32, 20, 32, 32]  # the 20 runs eagerly beside the graph
    for index, size in enumerate(sizes):
        if index == 5:
            for optimizer in optimizers:
                optimizer.param_groups[0]["lr"] = 5e-4
        images, labels = _batch(size, seed=index, device="cuda")
        got, want = graphed(images, labels), eager(images, labels)
        torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
    assert graphed.recordings == 2
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)
    for a, b in zip(averages[0].parameters(), averages[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)
