"""MultiMNIST: pairs of different classes, overlaid; two reconstructions; the paper's
way of counting errors; the one objective, reused."""

import dataclasses
import functools

import pytest
import torch

from capsnotes import CapsNet, capsnet_loss
from capsnotes.data import ImageSet
from capsnotes.experiments.multimnist import PairedCapsNet, both_right, make_pairs, pair_loss
from capsnotes.training.evaluation import evaluate
from tests.conftest import TINY

TINY_PAIRS = dataclasses.replace(TINY, image_size=36)


def _digits(count: int = 40) -> ImageSet:
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (count, 1, 28, 28), generator=generator, dtype=torch.uint8)
    return ImageSet(images, torch.arange(count) % 10, tuple("0123456789"))


def test_pairs_overlay_two_digits_of_different_classes():
    pairs = make_pairs(_digits(), 64, seed=1)
    assert pairs.images.shape == (64, 1, 36, 36) and pairs.parts.shape == (64, 2, 1, 36, 36)
    assert (pairs.labels[:, 0] != pairs.labels[:, 1]).all()
    assert torch.equal(pairs.images, pairs.parts.amax(dim=1))
    again = make_pairs(_digits(), 64, seed=1)
    assert torch.equal(again.images, pairs.images)
    # every part is a whole digit: its ink is the original digit's ink
    assert pairs.parts[:, 0].sum() > 0


def test_the_paired_model_draws_each_label_and_trains_on_the_one_objective():
    torch.manual_seed(0)
    model = PairedCapsNet(TINY_PAIRS)
    pairs = make_pairs(_digits(), 4, seed=2)
    images, labels, parts = next(pairs.batches(4))
    out = model(images, labels)
    assert out.reconstructions.shape == (4, 2, 1, 36, 36) and out.predictions.shape == (4, 2)
    first = model.decoder(out.capsules, labels[:, 0]).view(4, 1, 36, 36)
    torch.testing.assert_close(out.reconstructions[:, 0], first)
    loss = pair_loss(out, images, labels, parts)
    presence = torch.zeros(4, 10)
    presence[torch.arange(4)[:, None], labels] = 1
    expected = capsnet_loss(out, parts, presence)
    torch.testing.assert_close(loss.total, expected.total)
    loss.total.backward()
    assert model.decoder.layers[0].weight.grad is not None
    with pytest.raises(ValueError, match=r"labels must be \[batch, 2\]"):
        model(images, labels[:, 0])


def test_both_right_ignores_the_order():
    predictions = torch.tensor([[3, 5], [5, 3], [1, 2]])
    labels = torch.tensor([[5, 3], [5, 3], [1, 4]])
    assert both_right(predictions, labels).tolist() == [True, True, False]


def test_one_pair_per_digit_when_no_count_is_given():
    digits = _digits(30)
    pairs = make_pairs(digits, seed=3)
    assert len(pairs) == 30
    # every digit is in a pair of its own, shifted by at most 4 pixels: the same ink
    mine = pairs.labels == digits.labels[:, None]  # [30, 2]: which part is digit n
    assert torch.equal(mine.sum(1), torch.ones(30, dtype=torch.int64))
    ink = pairs.parts.flatten(2).sum(2)[mine]
    assert torch.equal(ink, digits.images.flatten(1).sum(1))


def test_the_paired_model_is_a_capsnet_with_the_same_weights():
    torch.manual_seed(0)
    paired = PairedCapsNet(TINY_PAIRS)
    plain = CapsNet(TINY_PAIRS)
    plain.load_state_dict(paired.state_dict())  # the same parameters, the same names
    images = torch.rand(3, 1, 36, 36)
    torch.testing.assert_close(paired.encode(images), plain.encode(images))


def test_evaluate_counts_a_pair_right_only_when_both_digits_are_found():
    torch.manual_seed(0)
    model = PairedCapsNet(TINY_PAIRS)
    pairs = make_pairs(_digits(), 50, seed=4)
    objective = functools.partial(pair_loss, reconstruction_weight=0.0005)
    scores = evaluate(model, pairs, objective, batch_size=16)
    with torch.no_grad():
        predictions = model(pairs.images.float() / 255).predictions
    expected = both_right(predictions, pairs.labels).float().mean().item()
    assert scores["count"] == 50 and scores["accuracy"] == pytest.approx(expected)
    assert set(scores) == {"accuracy", "count", "margin_loss", "reconstruction_loss"}
    assert model.training  # left as it was


def test_pairs_keep_the_smaller_class_first_with_its_digit():
    digits = _digits(30)
    pairs = make_pairs(digits, 20, seed=5)
    assert (pairs.labels[:, 0] < pairs.labels[:, 1]).all()
    for n in range(20):  # the digit drawn first carries the first label's ink
        first = digits.images[digits.labels == pairs.labels[n, 0]].flatten(1).sum(1)
        assert pairs.parts[n, 0].sum() in first
