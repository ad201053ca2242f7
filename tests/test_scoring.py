"""Scoring fast and exactly (capsnotes.fast.scoring): the bf16 pass computes the
network's lengths, near ties go back to the float32 model, and evaluate's counts are the
float32 model's on the real test digits."""

import pytest
import torch

from capsnotes import CapsNet, CapsNetConfig, capsnet_loss
from capsnotes.data import ImageSet, load_dataset
from capsnotes.experiments.multimnist import PairedCapsNet
from capsnotes.fast import scoring, speed_up
from capsnotes.fast.cpu import MatmulRates, bf16_is_fast
from capsnotes.fast.scoring import ExactPredictions
from capsnotes.training.evaluation import evaluate
from capsnotes.training.pretrained import load_pretrained
from tests.conftest import TINY


@pytest.mark.parametrize(
    "config",
    [
        TINY,
        CapsNetConfig(
            image_size=20,
            in_channels=3,
            conv_channels=12,
            conv_kernel=5,
            primary_channels=4,
            primary_dim=6,
            primary_kernel=3,
            primary_stride=1,
            digit_dim=5,
            num_classes=7,
            routing_iterations=2,
            decoder_hidden=(8,),
        ),
    ],
)
def test_the_bf16_pass_computes_the_models_lengths(config):
    """Any CapsNet's sizes, channels, strides and iterations, in any chunks."""
    torch.manual_seed(0)
    model = CapsNet(config).eval()
    images = torch.rand(9, config.in_channels, config.image_size, config.image_size)
    with torch.no_grad():
        reference = model(images).lengths
    for chunk in (1, 4, 16):
        lengths = ExactPredictions(model, chunk=chunk).lengths(images)
        assert lengths.dtype == torch.float32 and lengths.shape == reference.shape
        torch.testing.assert_close(lengths, reference, atol=0.02, rtol=0.02)


def test_near_ties_are_decided_by_the_float32_model(monkeypatch):
    """A bf16 pass that swaps the two longest capsules of an image is overruled where
    they lie within the margin, and believed where they do not."""
    torch.manual_seed(0)
    model = CapsNet(TINY).eval()
    images = torch.rand(6, 1, 28, 28)
    with torch.no_grad():
        true = model(images).lengths
    wrong = true.clone()
    order = true.argsort(dim=1, descending=True)
    rows = torch.arange(6)
    first, second = order[:, 0], order[:, 1]
    wrong[rows, first], wrong[rows, second] = true[rows, second], true[rows, first]
    wrong[rows[:3], second[:3]] += 0.2  # far from a tie: beyond the margin
    scorer = ExactPredictions(model, margin=0.1)
    monkeypatch.setattr(scorer, "lengths", lambda x: wrong)
    gap = true.topk(2, dim=1).values.diff(dim=1).abs().squeeze(1)
    predictions, rescored = scorer(images)
    near = gap < 0.1
    assert rescored[3:].equal(near[3:]) and not rescored[:3].any()
    assert predictions[3:][near[3:]].equal(first[3:][near[3:]])
    assert predictions[:3].equal(second[:3])  # believed: bf16 was wrong by 0.2
    assert ExactPredictions(model, margin=0)(images).rescored.sum() == 0
    everything = ExactPredictions(model, margin=1.0)(images)
    assert everything.rescored.all() and everything.predictions.equal(true.argmax(1))


def test_bad_scorers_and_images_are_refused():
    model = CapsNet(TINY)
    with pytest.raises(TypeError, match="model must be a CapsNet, got PairedCapsNet"):
        ExactPredictions(PairedCapsNet(TINY))
    with pytest.raises(TypeError, match="model must be a CapsNet, got Linear"):
        ExactPredictions(torch.nn.Linear(2, 2))
    for margin in (-0.1, float("nan"), "0.1", True):
        with pytest.raises(ValueError, match="margin must be a length difference >= 0"):
            ExactPredictions(model, margin=margin)
    with pytest.raises(ValueError, match="chunk must be >= 1, got 0"):
        ExactPredictions(model, chunk=0)
    with pytest.raises(ValueError, match=r"\[batch, 1, 28, 28\]"):
        ExactPredictions(model)(torch.rand(2, 1, 27, 27))


def test_evaluate_scores_alone_with_the_bf16_pass_only_where_it_is_fast(monkeypatch):
    torch.manual_seed(0)
    model = speed_up(CapsNet(TINY))  # the fast layers hold the same weights
    images = torch.randint(0, 256, (20, 1, 28, 28), dtype=torch.uint8)
    data = ImageSet(images, torch.randint(0, 10, (20,)), tuple("0123456789"))
    used = []
    original = ExactPredictions.forward
    monkeypatch.setattr(
        ExactPredictions, "forward", lambda self, x: used.append(len(x)) or original(self, x)
    )
    for fast_cpu in (False, True):
        monkeypatch.setattr(scoring, "bf16_is_fast", lambda fast=fast_cpu: fast)
        plain = evaluate(model, data, fast=False, batch_size=8)
        default = evaluate(model, data, batch_size=8)
        assert default == plain
        assert used == ([8, 8, 4] if fast_cpu else [])
    evaluate(model, data, return_outputs=True)
    evaluate(model, data, lambda output, images, labels: capsnet_loss(output, images, labels))
    subclass = type("Subclass", (CapsNet,), {})(TINY)  # might predict otherwise
    evaluate(subclass, data)
    assert used == [8, 8, 4]  # outputs, losses and other models: the model itself


def test_bf16_is_judged_fast_by_one_small_product(monkeypatch):
    calls, bf16 = [], {}

    def rates(sizes, repeats=3):
        calls.append(sizes)
        return MatmulRates(sizes, 100.0, bf16["rate"])

    monkeypatch.setattr("capsnotes.fast.cpu.cpu_matmul_rates", rates)
    for rate, fast in ((400.0, True), (1.0, False)):
        bf16["rate"] = rate
        bf16_is_fast.cache_clear()
        assert bf16_is_fast() is fast and bf16_is_fast() is fast
    assert calls == [(256,), (256,)]  # once per process
    bf16_is_fast.cache_clear()


def test_evaluate_counts_what_the_float32_model_counts_on_real_digits(mnist_root):
    """The shipped model on 2,000 real test digits, by the CPU's own choice."""
    model, _ = load_pretrained("mnist")
    data = load_dataset("mnist", False, mnist_root).subset(2000)
    assert evaluate(model, data) == evaluate(model, data, fast=False)
    scorer = ExactPredictions(model)
    images = data.images[:500].float().div(255)
    with torch.no_grad():
        torch.testing.assert_close(scorer.lengths(images), model(images).lengths, atol=0.02, rtol=0)
