"""capsbook.equivariance: the transformations move pixels where they should, the angles
and the fitted maps are right on cases checked by hand, the readings are those of the
models, and bad inputs are refused with errors that say what was expected."""

from __future__ import annotations

import math

import pytest
import torch
from matplotlib.figure import Figure

from capsbook.equivariance import (
    Transformation,
    angle_between,
    equivariance_figure,
    fit_linear_map,
    held_out_angles,
    measure,
    principal_directions,
    represent,
    rotate_images,
    shift_images,
    summarize,
    summary_table,
    transformations,
)
from capsnotes import CapsNet
from capsnotes.experiments.convnet import ConvNet, ConvNetConfig
from tests.conftest import TINY

SMALL_CNN = ConvNetConfig(channels=(4, 4), pool_after=(1, 2), hidden=(8,))


def digits(count=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(count, 1, 28, 28, generator=generator)


def tiny_capsnet():
    torch.manual_seed(0)
    return CapsNet(TINY).eval()


def tiny_cnn():
    torch.manual_seed(0)
    return ConvNet(SMALL_CNN).eval()


# --- the transformations ------------------------------------------------------------


def test_a_shift_by_zero_and_a_rotation_by_zero_change_nothing():
    images = digits()
    assert torch.equal(shift_images(images, 0, 0), images)
    assert torch.equal(rotate_images(images, 0.0), images)
    assert torch.equal(rotate_images(images, -360), images)
    # a turn by a hair interpolates a hair away from the pixel centres
    torch.testing.assert_close(rotate_images(images, 1e-4), images, atol=1e-4, rtol=0)


@pytest.mark.parametrize("dx, dy", [(1, 0), (0, 1), (-2, 0), (0, -3), (2, -1)])
def test_a_shift_moves_every_pixel_by_whole_pixels_and_fills_with_zeros(dx, dy):
    images = digits()
    shifted = shift_images(images, dx, dy)
    for row in range(28):
        for col in range(28):
            source_row, source_col = row - dy, col - dx  # where this pixel came from
            inside = 0 <= source_row < 28 and 0 <= source_col < 28
            expected = images[..., source_row, source_col] if inside else 0
            assert torch.equal(shifted[..., row, col], expected + images[..., 0, 0] * 0)


def test_a_shift_by_one_moves_a_single_pixel_one_step_right_or_down():
    image = torch.zeros(1, 1, 5, 5)
    image[0, 0, 2, 2] = 1.0
    assert shift_images(image, 1, 0)[0, 0, 2, 3] == 1 and shift_images(image, 1, 0).sum() == 1
    assert shift_images(image, 0, 1)[0, 0, 3, 2] == 1 and shift_images(image, 0, 1).sum() == 1
    assert shift_images(image, 9, 0).sum() == 0  # off the canvas altogether


def test_a_quarter_turn_is_counter_clockwise_and_exact_on_an_even_canvas():
    """On a square canvas of even side, a quarter turn sends pixel centres to pixel
    centres: it must equal torch.rot90 (rows turned towards columns: counter-clockwise
    on the screen, where rows run down)."""
    images = digits()
    torch.testing.assert_close(
        rotate_images(images, 90.0), torch.rot90(images, 1, dims=(-2, -1)), atol=1e-5, rtol=0
    )
    image = torch.zeros(1, 1, 8, 8)
    image[0, 0, 3, 7] = 1.0  # right of the centre (3.5, 3.5), in row 3
    turned = rotate_images(image, 90.0)[0, 0]
    assert turned.argmax().item() == 0 * 8 + 3  # above the centre: row 0, column 3


def test_transformations_list_each_kind_and_name_themselves():
    steps = transformations(shifts=(-1, 2), angles=(-30, 10))
    assert [(s.kind, s.amount) for s in steps] == [
        ("shift_x", -1),
        ("shift_x", 2),
        ("shift_y", -1),
        ("shift_y", 2),
        ("rotation", -30.0),
        ("rotation", 10.0),
    ]
    assert [s.name for s in steps] == [
        "1 px left",
        "2 px right",
        "1 px up",
        "2 px down",
        "−30°",
        "+10°",
    ]
    images = digits(2)
    assert torch.equal(steps[1](images), shift_images(images, 2, 0))
    assert torch.equal(steps[2](images), shift_images(images, 0, -1))
    assert torch.equal(steps[4](images), rotate_images(images, -30.0))


# --- angles and maps ----------------------------------------------------------------


def test_the_angle_to_itself_is_zero_to_its_negative_pi_and_known_angles_hold():
    a = torch.randn(5, 16, dtype=torch.float64)
    assert torch.equal(angle_between(a, a), torch.zeros(5, dtype=torch.float64))
    assert torch.equal(angle_between(a, -a), torch.full((5,), math.pi, dtype=torch.float64))
    assert angle_between(a, 3 * a).abs().max() < 1e-7  # the length plays no part
    x, diagonal, y = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]]).unbind()
    assert angle_between(x, diagonal).item() == pytest.approx(math.pi / 4, abs=1e-7)
    assert angle_between(x, y).item() == pytest.approx(math.pi / 2, abs=1e-7)


def test_least_squares_recovers_a_known_linear_map():
    generator = torch.Generator().manual_seed(3)
    before = torch.randn(40, 16, dtype=torch.float64, generator=generator)
    matrix = torch.randn(16, 16, dtype=torch.float64, generator=generator)
    torch.testing.assert_close(fit_linear_map(before, before @ matrix), matrix, rtol=0, atol=1e-10)
    # float32 in, float32 out; a map to another number of dimensions
    wide = torch.randn(16, 5, generator=generator)
    fitted = fit_linear_map(before.float(), before.float() @ wide)
    assert fitted.dtype == torch.float32 and fitted.shape == (16, 5)
    torch.testing.assert_close(fitted, wide, rtol=0, atol=1e-4)
    # several sets of vectors after, one map each
    maps = torch.stack([matrix, -matrix.T])
    torch.testing.assert_close(fit_linear_map(before, before @ maps), maps, rtol=0, atol=1e-10)


def test_held_out_angles_are_zero_for_a_shared_map_and_not_for_unrelated_vectors():
    generator = torch.Generator().manual_seed(4)
    before = torch.randn(30, 4, dtype=torch.float64, generator=generator)
    turn = torch.linalg.qr(torch.randn(4, 4, dtype=torch.float64, generator=generator)).Q
    after = before @ turn
    map_angle, kept_angle = held_out_angles(before, after)
    assert map_angle.max() < 1e-6  # every vector predicted by the others' map
    torch.testing.assert_close(kept_angle, angle_between(before, after))
    # leave-one-out is folds = N
    for a, b in zip(held_out_angles(before, after, folds=30), (map_angle, kept_angle)):
        torch.testing.assert_close(a, b)
    # several transformations at once, [T, N, D]: one map each, the same angles
    both = torch.stack([after, before.flip(1)])
    stacked = held_out_angles(before, both, folds=3)
    for t, moved in enumerate(both):
        for a, b in zip(stacked, held_out_angles(before, moved, folds=3)):
            torch.testing.assert_close(a[t], b)
    # vectors that move at random: a map fitted on the others predicts nothing
    unrelated = torch.randn(30, 4, dtype=torch.float64, generator=generator)
    map_angle, _ = held_out_angles(before, unrelated, folds=5)
    assert map_angle.median() > 0.5


def test_each_vector_is_predicted_by_a_map_fitted_without_it():
    generator = torch.Generator().manual_seed(6)
    before = torch.randn(12, 3, dtype=torch.float64, generator=generator)
    after = torch.randn(12, 3, dtype=torch.float64, generator=generator)
    map_angle, _ = held_out_angles(before, after)
    for n in (0, 5, 11):
        others = torch.arange(12) != n
        matrix = fit_linear_map(before[others], after[others])
        torch.testing.assert_close(map_angle[n], angle_between(before[n] @ matrix, after[n]))
    map_angle, _ = held_out_angles(before, after, folds=3)  # rows 1, 4, 7, 10 together
    group = torch.arange(12) % 3 == 1
    matrix = fit_linear_map(before[~group], after[~group])
    torch.testing.assert_close(
        map_angle[group], angle_between(before[group] @ matrix, after[group])
    )


def test_held_out_angles_fit_a_small_map_in_the_main_directions_of_long_vectors():
    """Vectors of 40 numbers that vary in 3 directions only, moved by a map within
    them: a 3 x 3 map in the principal directions predicts every one of them."""
    generator = torch.Generator().manual_seed(5)
    latent = torch.randn(20, 3, dtype=torch.float64, generator=generator)
    spread = torch.randn(3, 40, dtype=torch.float64, generator=generator)
    move = torch.randn(3, 3, dtype=torch.float64, generator=generator)
    before, after = latent @ spread, latent @ move @ spread
    map_angle, _ = held_out_angles(before, after, dims=3)
    assert map_angle.max() < 1e-6
    directions = principal_directions(before, 3)
    torch.testing.assert_close(directions.T @ directions, torch.eye(3, dtype=torch.float64))


# --- the models' readings -----------------------------------------------------------


def test_a_capsnet_reads_the_capsule_of_the_label_and_batches_change_nothing():
    model, images, labels = tiny_capsnet(), digits(5), torch.tensor([3, 1, 4, 1, 5])
    reading = represent(model, images, labels)
    with torch.no_grad():
        capsules = model.encode(images)
    torch.testing.assert_close(reading.vector, capsules[torch.arange(5), labels])
    torch.testing.assert_close(reading.score, reading.vector.norm(dim=-1))
    assert torch.equal(reading.correct, capsules.norm(dim=-1).argmax(1) == labels)
    identity = Transformation("shift_x", 0)
    before, (after,) = measure(model, images, labels, [identity], batch_size=2)
    torch.testing.assert_close(before.vector, reading.vector)
    torch.testing.assert_close(after.vector, before.vector)


def test_a_cnn_reads_its_last_hidden_layer_and_the_labels_probability():
    model, images, labels = tiny_cnn(), digits(4), torch.tensor([0, 9, 2, 2])
    reading = represent(model, images, labels)
    assert reading.vector.shape == (4, 8) and (reading.vector >= 0).all()  # after a ReLU
    with torch.no_grad():
        logits = model(images).logits
    torch.testing.assert_close(reading.score, logits.softmax(1)[torch.arange(4), labels])
    torch.testing.assert_close(model.classifier[-1](reading.vector), logits)
    with pytest.raises(ValueError, match="model.eval"):
        represent(model.train(), images, labels)


def test_summarize_measures_no_turn_for_the_identity_and_reports_every_step():
    model, images = tiny_capsnet(), digits(20)
    labels = torch.arange(20) % 10
    steps = [Transformation("shift_x", 0), Transformation("rotation", 20.0)]
    before, after = measure(model, images, labels, steps)
    summary = summarize(before, after, folds=4)
    assert summary["angle"][0] == 0 and summary["map_angle"][0] < 1e-3
    assert summary["score"][0] == before.score.median()
    assert summary["angle"][1] > 0
    for key in ("score", "accuracy", "angle", "map_angle", "kept_angle", "missed"):
        assert summary[key].shape == (2,)
    assert int(summary["count"][0]) == 20
    table = summary_table(steps, {"tiny": summary}, shown=steps[1:])
    lines = table.splitlines()
    assert len(lines) == 4 and lines[2].startswith("original") and "+20°" in lines[3]
    fig = equivariance_figure(steps, {"tiny": summary})
    assert isinstance(fig, Figure) and len(fig.axes) == 6  # 3 rows x 2 kinds


# --- bad inputs ---------------------------------------------------------------------


def test_bad_inputs_are_refused_with_errors_that_say_what_was_expected():
    images = digits(2)
    with pytest.raises(TypeError, match="dx must be an int"):
        shift_images(images, 1.5, 0)
    with pytest.raises(ValueError, match=r"images must be .*\[batch, channels, height"):
        shift_images(images[0], 1, 0)
    with pytest.raises(TypeError, match="images must be a floating-point"):
        rotate_images((images * 255).to(torch.uint8), 10.0)
    with pytest.raises(TypeError, match="degrees must be a number"):
        rotate_images(images, "10")
    with pytest.raises(ValueError, match="kind must be one of"):
        Transformation("scale", 2)
    with pytest.raises(ValueError, match="whole pixels"):
        Transformation("shift_y", 1.5)
    with pytest.raises(TypeError, match="finite number"):
        Transformation("rotation", math.nan)
    with pytest.raises(ValueError, match="same shape"):
        angle_between(torch.ones(3, 4), torch.ones(3, 5))
    with pytest.raises(ValueError, match="at least 16 vectors"):
        fit_linear_map(torch.randn(10, 16), torch.randn(10, 16))
    with pytest.raises(ValueError, match="same N vectors"):
        fit_linear_map(torch.randn(20, 4), torch.randn(19, 4))
    with pytest.raises(ValueError, match=r"after must be \[N, D\] or \[T, N, D\]"):
        held_out_angles(torch.randn(20, 4), torch.randn(20, 5))
    with pytest.raises(ValueError, match="folds must be >= 2"):
        held_out_angles(torch.randn(20, 4), torch.randn(20, 4), folds=1)
    with pytest.raises(ValueError, match="count must be at most"):
        principal_directions(torch.randn(5, 40), 6)
    with pytest.raises(TypeError, match="CapsNet or ConvNet"):
        represent(torch.nn.Linear(2, 2), images, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"labels must be a tensor \[2\]"):
        measure(tiny_capsnet(), images, torch.tensor([0, 1, 2]), [])
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 10\)"):
        represent(tiny_capsnet(), images, torch.tensor([0, 10]))
    with pytest.raises(ValueError, match="one or more"):
        summarize(represent(tiny_capsnet(), images, torch.tensor([0, 1])), [])
    with pytest.raises(TypeError, match="sequence of Transformation"):
        measure(tiny_capsnet(), images, torch.tensor([0, 1]), [("shift_x", 1)])
