import math

import pytest
import torch

from capsbook.analysis import (
    PROPERTIES,
    confusion_figure,
    dimension_effects,
    image_moments,
    perturb_dimensions,
    sweep_figure,
)
from capsnotes import CapsNet, dynamic_routing, dynamic_routing_with_couplings
from capsnotes.data import ImageSet
from capsnotes.training.evaluation import routing_statistics
from tests.conftest import TINY


def small_model(seed=0):
    torch.manual_seed(seed)
    model = CapsNet(TINY).eval()
    with torch.no_grad():  # longer votes than at initialisation, so routing moves
        model.digits.weight.mul_(300)
    return model


def tiny_set(count=20):
    generator = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (count, 1, 28, 28), generator=generator, dtype=torch.uint8)
    return ImageSet(images, torch.arange(count) % 10, tuple(str(k) for k in range(10)))


def test_routing_statistics_match_a_direct_computation():
    model, data = small_model(), tiny_set()
    stats = routing_statistics(model, data, iterations=(1, 3), batch_size=7)
    assert stats.count == 20 and sorted(stats.accuracy) == [1, 3]
    assert len(stats.entropy) == len(stats.weighted_entropy) == len(stats.top_coupling) == 3
    # Iteration 1 is uniform coupling: the entropy is exactly log(classes).
    assert stats.entropy[0] == pytest.approx(math.log(10), rel=1e-6)
    assert stats.top_coupling[0] == pytest.approx(0.1, rel=1e-6)
    with torch.no_grad():
        images = data.floats()
        u = model.primary_capsules(images)
        u_hat = model.digits.votes(u)
        for r in (1, 2, 3):
            v, c = dynamic_routing_with_couplings(u_hat, r)
            h = -(c * c.log()).sum(-1)
            w = u.norm(dim=-1)
            assert stats.entropy[r - 1] == pytest.approx(h.mean().item(), rel=1e-5)
            assert stats.weighted_entropy[r - 1] == pytest.approx(
                ((h * w).sum() / w.sum()).item(), rel=1e-5
            )
            assert stats.top_coupling[r - 1] == pytest.approx(c.amax(-1).mean().item(), rel=1e-5)
            assert stats.weighted_top_coupling[r - 1] == pytest.approx(
                ((c.amax(-1) * w).sum() / w.sum()).item(), rel=1e-5
            )
            if r in stats.accuracy:
                lengths = v.norm(dim=-1)
                right = (lengths.argmax(1) == data.labels).float().mean().item()
                assert stats.accuracy[r] == pytest.approx(right)
                assert stats.winner_length[r] == pytest.approx(
                    lengths.amax(1).mean().item(), rel=1e-5
                )
        first = dynamic_routing(u_hat, 1).norm(dim=-1).argmax(1)
        third = dynamic_routing(u_hat, 3).norm(dim=-1).argmax(1)
        assert stats.changed == {1: 0, 3: (first != third).sum().item()}
    assert stats.entropy[2] < stats.entropy[0] - 1e-3  # agreement concentrates the couplings


def test_routing_statistics_bad_iterations():
    with pytest.raises(ValueError, match=">= 1"):
        routing_statistics(small_model(), tiny_set(), iterations=(0, 2))
    with pytest.raises(TypeError, match="sequence of ints"):
        routing_statistics(small_model(), tiny_set(), iterations=())


def test_image_moments_hand_computed():
    images = torch.zeros(3, 1, 28, 28)
    images[0, 0, 4:24, 10:12] = 1.0  # a vertical bar, 2 pixels wide, 20 tall
    images[1, 0, 4:24, 15:17] = 1.0  # the same bar, 5 pixels to the right
    for row in range(4, 24):  # a line leaning right: one pixel per two rows
        images[2, 0, row, 10 + (23 - row) // 2] = 1.0
    m = image_moments(images)
    assert set(m) == set(PROPERTIES)
    assert m["ink"].tolist() == pytest.approx([40, 40, 20])
    assert m["x"].tolist() == pytest.approx([10.5, 15.5, 14.5])
    assert m["y"][0].item() == pytest.approx(27 - 13.5)
    # an evenly inked bar of 20 rows has variance (20² - 1) / 12
    assert m["height"][0].item() == pytest.approx(math.sqrt(12 * (400 - 1) / 12))
    assert m["width"][0].item() == pytest.approx(math.sqrt(12 * 0.25))
    assert m["slant"][:2].tolist() == pytest.approx([0, 0], abs=1e-9)
    assert m["slant"][2].item() > 8  # about 10 pixels of lean over 20 rows
    assert image_moments(images.flip(-1))["slant"][2].item() == pytest.approx(-m["slant"][2])
    with pytest.raises(ValueError, match="one channel"):
        image_moments(torch.zeros(2, 3, 28, 28))


def test_perturb_dimensions_is_the_loop_it_replaces():
    model = small_model()
    capsule = torch.randn(4) * 0.2
    offsets = [-0.25, 0.0, 0.25]
    grid = perturb_dimensions(model, capsule, 7, offsets)
    assert grid.shape == (4, 3, 1, 28, 28)
    with torch.no_grad():
        for d in range(4):
            for k, offset in enumerate(offsets):
                full = torch.zeros(1, 10, 4)
                full[0, 7] = capsule
                full[0, 7, d] += offset
                expected = model.decoder(full, torch.tensor([7])).view(1, 28, 28)
                torch.testing.assert_close(grid[d, k], expected)
    torch.testing.assert_close(grid[0, 1], grid[3, 1])  # offset 0 leaves the capsule alone
    with pytest.raises(ValueError, match=r"shape \[4\]"):
        perturb_dimensions(model, torch.zeros(16), 7, offsets)
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        perturb_dimensions(model, capsule, 10, offsets)


def test_dimension_effects_are_least_squares_slopes():
    model = small_model()
    capsules = torch.randn(2, 4) * 0.2
    digits = torch.tensor([3, 8])
    offsets = [-0.2, -0.1, 0.0, 0.1, 0.2]
    effects = dimension_effects(model, capsules, digits, offsets)
    assert set(effects) == {*PROPERTIES, "pixels"}
    assert all(v.shape == (2, 4) for v in effects.values())
    grid = perturb_dimensions(model, capsules[1], 8, offsets)
    design = torch.stack([torch.ones(5), torch.tensor(offsets)], dim=1).double()
    for name in PROPERTIES:
        values = image_moments(grid.flatten(0, 1))[name].view(4, 5)
        for d in range(4):
            fit = torch.linalg.lstsq(design, values[d][:, None]).solution
            assert effects[name][1, d].item() == pytest.approx(fit[1, 0].item(), rel=1e-4, abs=1e-6)
    change = (grid[:, -1] - grid[:, 0]).abs().mean(dim=(1, 2, 3))
    torch.testing.assert_close(effects["pixels"][1], change)
    with pytest.raises(ValueError, match="capsules must be"):
        dimension_effects(model, capsules, digits[:1], offsets)


def test_confusion_matrix_counts_true_against_predicted():
    from capsbook.analysis import confusion_matrix

    labels = torch.tensor([0, 0, 1, 2, 2, 2])
    predictions = torch.tensor([0, 1, 1, 2, 0, 2])
    matrix = confusion_matrix(predictions, labels, 3)
    assert matrix.tolist() == [[1, 1, 0], [0, 1, 0], [1, 0, 2]]
    assert matrix.sum() == 6 and matrix.trace() == 4
    with pytest.raises(ValueError, match="predictions must have shape"):
        confusion_matrix(predictions[:3], labels, 3)


def test_the_confusion_figure_prints_every_count_and_shades_only_the_errors():
    confusion = torch.tensor([[50, 3, 0], [7, 40, 1], [0, 2, 60]])
    fig = confusion_figure(confusion, ["a", "b", "c"])
    ax = fig.axes[0]
    printed = [int(t.get_text()) for t in ax.texts]
    assert printed == confusion.flatten().tolist()
    shaded = ax.images[0].get_array()
    assert shaded.max() == 7 and all(shaded[k, k] == 0 for k in range(3))
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    with pytest.raises(ValueError, match=r"confusion must be \[2, 2\]"):
        confusion_figure(confusion, ["a", "b"])


def test_the_sweep_figure_draws_each_models_accuracy_against_each_factor():
    sweeps = {
        factor: [{"value": v, "accuracy": a} for v, a in points]
        for factor, points in (
            ("rotation_degrees", ((-30, 0.5), (0, 0.99), (30, 0.6))),
            ("shear", ((-0.4, 0.8), (0, 0.99), (0.4, 0.7))),
            ("scale", ((0.6, 0.9), (1.0, 0.99), (1.4, 0.95))),
        )
    }
    other = {f: [{**p, "accuracy": p["accuracy"] / 2} for p in c] for f, c in sweeps.items()}
    record = {
        "ranges": {"rotation_degrees": 20.0, "shear": 0.2, "scale": 1.25},
        "models": {"capsnet": {"sweeps": sweeps}, "cnn": {"sweeps": other}},
    }
    fig = sweep_figure(record, {"capsnet": "CapsNet", "cnn": "CNN"})
    assert len(fig.axes) == 3
    for ax, factor in zip(fig.axes, ("rotation_degrees", "shear", "scale")):
        first, second = ax.lines
        assert list(first.get_xdata()) == [p["value"] for p in sweeps[factor]]
        assert list(first.get_ydata()) == [100 * p["accuracy"] for p in sweeps[factor]]
        assert list(second.get_ydata()) == [100 * p["accuracy"] for p in other[factor]]
        assert first.get_label() == "CapsNet" and second.get_label() == "CNN"
    shaded = fig.axes[2].patches[0].get_path().get_extents()
    # the random warps' scale range, 1 / 1.25 to 1.25, in data coordinates
    assert fig.axes[2].patches[0].get_transform() is not None
    corners = (
        fig.axes[2].patches[0].get_patch_transform().transform([[shaded.x0, 0], [shaded.x1, 0]])
    )
    assert [x for x, _ in corners] == pytest.approx([0.8, 1.25])
