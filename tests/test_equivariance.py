"""capsbook.equivariance: the transformations move pixels where they should, the angles
and the fitted maps are right on cases checked by hand, the standard space gives every
model the same spread, the three held-out predictions and the read-out of the
transformation find what synthetic vectors were made to carry, the readings are those of
the models, and bad inputs are refused with errors that say what was expected."""

from __future__ import annotations

import math

import pytest
import torch
from matplotlib.figure import Figure
from scipy import stats as scipy_stats

from capsbook import stats
from capsbook.equivariance.fit import (
    PREDICTORS,
    amounts,
    fit_linear_map,
    held_out_angles,
    held_out_misses,
    image_r2,
    miss_shares,
    principal_directions,
    read_out,
    standardize,
)
from capsbook.equivariance.measure import (
    Transformation,
    angle_between,
    measure,
    represent,
    rotate_images,
    shift_images,
    transformations,
)
from capsbook.equivariance.report import (
    bootstrap_interval,
    compare_images,
    equivariance_figure,
    miss_table,
    read_out_figure,
    read_out_table,
    summarize,
    summary_table,
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


# --- the standard space, the three predictions and the read-out -------------------


def spread(vectors):
    """The root mean square distance of vectors [N, D] from their mean."""
    return (vectors - vectors.mean(0)).square().sum(1).mean().sqrt()


def test_standardizing_gives_two_models_of_different_spreads_the_same_one():
    """A capsule-like cloud (16 numbers near a point far from the origin, spread 0.1)
    and a CNN-like one (192 numbers, spread 30, read in 16 principal directions): in
    their standard spaces both sit at the origin with spread 1."""
    generator = torch.Generator().manual_seed(7)
    capsules = 0.9 + 0.03 * torch.randn(64, 16, generator=generator)
    features = 27 + 8 * torch.randn(64, 192, generator=generator)
    zero = torch.zeros((), dtype=torch.float64)
    for vectors, dims in ((capsules, None), (features, 16)):
        standard = standardize(vectors, vectors, dims)
        assert standard.dtype == torch.float64 and standard.shape == (64, 16)
        torch.testing.assert_close(standard.mean(0), torch.zeros(16, dtype=torch.float64))
        torch.testing.assert_close(spread(standard), zero + 1)
    # the spread before: 0.03 * 4 = 0.12 against 8 * 4 in the main 16 directions
    assert spread(capsules) < 0.2 < 20 < spread(features @ principal_directions(features, 16))
    # a mere change of origin and unit: distances shrink by the spread, nothing else
    before, after = capsules[:2], capsules[2:4]
    torch.testing.assert_close(
        (standardize(after, capsules) - standardize(before, capsules)).norm(dim=1),
        (after - before).double().norm(dim=1) / spread(capsules.double()),
    )
    # whitened, every direction spreads alike, 1 / sqrt(16) each; the total is still 1
    white = standardize(features, features, 16, whiten=True)
    torch.testing.assert_close(white.square().mean(0), torch.full((16,), 1 / 16).double())


def cloud(count=40, dims=4, seed=8):
    generator = torch.Generator().manual_seed(seed)
    before = 3 + torch.randn(count, dims, dtype=torch.float64, generator=generator)
    return before, generator


def test_a_shared_offset_is_predicted_exactly_by_the_offset_and_the_map():
    before, _ = cloud()
    offset = torch.tensor([0.5, -1.0, 0.0, 2.0], dtype=torch.float64)
    misses = held_out_misses(before, before + offset)
    assert list(misses) == list(PREDICTORS) == ["none", "offset", "map"]
    assert misses["offset"].max() < 1e-10 and misses["map"].max() < 1e-8
    # "none" misses by the whole offset, in spreads of the other 39 originals
    n = 0
    others = before[torch.arange(40) != n]
    torch.testing.assert_close(misses["none"][n], offset.norm() / spread(others))


def test_a_turn_by_a_fixed_matrix_is_predicted_by_the_map_and_not_by_the_offset():
    before, generator = cloud()
    before = before - before.mean(0)  # about the origin: the turn moves each its own way
    turn = torch.linalg.qr(torch.randn(4, 4, dtype=torch.float64, generator=generator)).Q
    misses = held_out_misses(before, before @ turn)
    assert misses["map"].max() < 1e-8
    # the mean movement is about 0: the offset misses about as much as "no movement"
    ratio = misses["offset"].median() / misses["none"].median()
    assert misses["none"].median() > 0.5 and 0.9 < ratio < 1.1


def test_each_rule_is_fitted_without_the_vector_it_predicts():
    before, generator = cloud(count=12, dims=3)
    after = torch.randn(2, 12, 3, dtype=torch.float64, generator=generator)  # T = 2
    misses = held_out_misses(before, after, folds=3)  # rows 1, 4, 7, 10 together
    test = torch.arange(12) % 3 == 1
    x, y = standardize(before, before[~test]), standardize(after, before[~test])
    offset = (y[:, ~test] - x[~test]).mean(1, keepdim=True)
    x1 = torch.cat([x, torch.ones(12, 1, dtype=x.dtype)], 1)
    matrix = fit_linear_map(x1[~test], y[:, ~test])
    expected = {
        "none": (x[test] - y[:, test]).norm(dim=-1),
        "offset": (x[test] + offset - y[:, test]).norm(dim=-1),
        "map": (x1[test] @ matrix - y[:, test]).norm(dim=-1),
    }
    for name, miss in misses.items():
        assert miss.shape == (2, 12)
        torch.testing.assert_close(miss[:, test], expected[name])
    # for long vectors, the rules work in the others' main directions
    wide = torch.randn(30, 40, dtype=torch.float64, generator=generator)
    assert held_out_misses(wide, wide + 1.0, dims=5)["offset"].max() < 1e-10


def test_miss_shares_average_each_images_miss_over_its_movement_across_the_rows():
    misses = {
        "none": torch.tensor([[2.0, 4.0, 0.0], [1.0, 2.0, 3.0], [5.0, 5.0, 5.0]]),
        "offset": torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.5, 3.0], [0.0, 0.0, 0.0]]),
        "map": torch.zeros(3, 3),
    }
    shares = miss_shares(misses, "offset", [0, 1])  # the third row left out
    expected = torch.tensor([0.75, 0.25], dtype=torch.float64)
    torch.testing.assert_close(shares[:2], expected)
    assert math.isnan(shares[2])  # the third image did not move in row 0
    torch.testing.assert_close(miss_shares(misses, "none", [1, 2]), torch.ones(3).double())
    # on held_out_misses: a shared offset leaves no share, a fixed turn nearly all of it
    before, generator = cloud()
    centred = before - before.mean(0)
    turn = torch.linalg.qr(torch.randn(4, 4, dtype=torch.float64, generator=generator)).Q
    shifted = held_out_misses(before, (before + 1.0)[None])  # [1, 40] each
    assert miss_shares(shifted, "offset", [0]).max() < 1e-8
    turned = miss_shares(held_out_misses(centred, (centred @ turn)[None]), "offset", [0])
    assert 0.8 < turned.median() < 1.2
    with pytest.raises(ValueError, match="rule must be one of"):
        miss_shares(misses, "shift", [0])
    with pytest.raises(ValueError, match="rows must be one or more of 0 to 2"):
        miss_shares(misses, "map", [3])
    with pytest.raises(ValueError, match=r"\[T, N\] distances"):
        miss_shares({**misses, "map": torch.zeros(3)}, "map", [0])


STEPS = transformations(shifts=(-2, -1, 1, 2), angles=(-20, -10, 10, 20))


def test_amounts_give_each_step_its_shift_or_angle():
    table = amounts(STEPS)
    assert table.shape == (12, 3)
    assert table[0].tolist() == [-2, 0, 0] and table[5].tolist() == [0, -1, 0]
    assert table[-1].tolist() == [0, 0, 20]


def test_the_read_out_recovers_a_linear_encoding_and_nothing_from_noise():
    """Vectors that move by a fixed linear code of (dx, dy, angle), plus a little noise:
    read held out, R² is about 1; vectors that move at random: about 0 (or below)."""
    before, generator = cloud(count=30, dims=8)
    code = torch.randn(3, 8, dtype=torch.float64, generator=generator)
    noise = 0.01 * torch.randn(12, 30, 8, dtype=torch.float64, generator=generator)
    encoded = before + amounts(STEPS)[:, None] @ code + noise  # [12, 30, 8]
    result = read_out(before, encoded, STEPS)
    assert result.predicted.shape == (12, 30, 3)
    assert (result.r2 > 0.999).all() and (result.rms < torch.tensor([0.05, 0.05, 0.5])).all()
    torch.testing.assert_close(
        result.predicted, amounts(STEPS)[:, None].expand(-1, 30, -1), atol=0.5, rtol=0
    )
    random = before + torch.randn(12, 30, 8, dtype=torch.float64, generator=generator)
    assert (read_out(before, random, STEPS, folds=5).r2 < 0.1).all()
    # without a ridge, the read-out ignores how the space is scaled or rotated
    mix = torch.randn(8, 8, dtype=torch.float64, generator=generator)
    torch.testing.assert_close(
        read_out(before @ mix, random @ mix, STEPS, folds=5).predicted,
        read_out(before, random, STEPS, folds=5).predicted,
    )
    # a small ridge barely changes an exact read-out; a huge one reads the mean
    assert (read_out(before, encoded, STEPS, ridge=1e-3).r2 > 0.99).all()
    assert (read_out(before, encoded, STEPS, ridge=1e9).r2.abs() < 0.01).all()


def test_the_read_out_holds_out_every_step_of_a_digit_together():
    """The amounts of digits 1, 5 and 9 (group 1 of 4) are read by a least-squares map
    fitted on the other digits' changes, every step of them, in their standard space."""
    before, generator = cloud(count=12, dims=3)
    after = before + torch.randn(12, 12, 3, dtype=torch.float64, generator=generator)
    result = read_out(before, after, STEPS, folds=4)
    test = torch.arange(12) % 4 == 1
    change = standardize(after, before[~test]) - standardize(before, before[~test])
    design = torch.cat([change, torch.ones(12, 12, 1, dtype=torch.float64)], dim=2)
    truth = amounts(STEPS)[:, None].expand(-1, 12, -1)
    weights = torch.linalg.lstsq(design[:, ~test].flatten(0, 1), truth[:, ~test].flatten(0, 1))
    torch.testing.assert_close(result.predicted[:, test], design[:, test] @ weights.solution)
    # R² and the RMS error are those of the held-out predictions of every step and digit
    error = (result.predicted - truth).flatten(0, 1)
    variance = (truth.flatten(0, 1) - truth.flatten(0, 1).mean(0)).square().sum(0)
    torch.testing.assert_close(result.r2, 1 - error.square().sum(0) / variance)
    torch.testing.assert_close(result.rms, error.square().mean(0).sqrt())


def test_the_images_shares_of_r2_average_to_the_read_outs_r2():
    """R² splits into one share per digit (every digit undergoes the same steps): their
    mean is the read-out's R², an exact read-out gives each digit 1, and a digit read
    worse than the others gets a smaller share."""
    before, generator = cloud(count=20, dims=6)
    after = before + torch.randn(12, 20, 6, dtype=torch.float64, generator=generator)
    result = read_out(before, after, STEPS, folds=5)
    shares = image_r2(result, STEPS)
    assert shares.shape == (20, 3)
    torch.testing.assert_close(shares.mean(dim=0), result.r2.double())
    truth = amounts(STEPS)[:, None].expand(-1, 20, -1)
    exact = result._replace(predicted=truth.clone())
    assert (image_r2(exact, STEPS) == 1).all()
    worse = truth.clone()
    worse[:, 7, 0] += 1.0  # digit 7's dx is read a pixel off at every step
    shares = image_r2(exact._replace(predicted=worse), STEPS)
    assert shares[7, 0] < 1 and (shares[torch.arange(20) != 7] == 1).all()
    # an amount no step changes has nothing to explain
    shifts_only = transformations(shifts=(-1, 1), angles=())
    flat = read_out(before, after[:4], shifts_only, folds=5)
    assert image_r2(flat, shifts_only)[:, 2].isnan().all()


def test_the_bootstrap_interval_is_seeded_and_covers_the_mean_at_its_width():
    """400 values of spread 1 about 3: the 95% interval of their mean holds it and is
    about 2 × 1.96 / 20 wide; the same seed draws the same interval; values that do not
    vary have an interval of width 0; a column each for [N, K] values."""
    generator = torch.Generator().manual_seed(1)
    values = 3 + torch.randn(400, dtype=torch.float64, generator=generator)
    low, high = bootstrap_interval(values, draws=2000)
    assert low < values.mean() < high
    assert abs((high - low).item() - 2 * 1.96 * values.std().item() / 20) < 0.03
    again = bootstrap_interval(values, draws=2000)
    assert again[0] == low and again[1] == high
    other = bootstrap_interval(values, draws=2000, seed=5)
    assert other[0] != low
    flat = torch.full((50,), 0.25, dtype=torch.float64)
    assert bootstrap_interval(flat)[0] == bootstrap_interval(flat)[1] == 0.25
    both = bootstrap_interval(torch.stack([values, 10 * values], dim=1), draws=2000)
    assert both[0].shape == (2,) and both[1][1] - both[0][1] > 9 * (high - low)


def test_compare_images_states_a_planted_difference_and_finds_none_where_none_is():
    """Paired over the images: Student's paired t as SciPy computes it, the detectable
    difference as capsbook.stats computes it from the standard error, and the book's
    standard (p < 0.05) met by a planted shift of 0.3 and not by noise alone."""
    generator = torch.Generator().manual_seed(2)
    a = torch.randn(64, dtype=torch.float64, generator=generator)
    noise = 0.5 * torch.randn(64, dtype=torch.float64, generator=generator)
    found = compare_images(a, a + 0.3 + noise)
    differences = (0.3 + noise).numpy()
    assert found.n == 64 and found.effect == pytest.approx(differences.mean())
    assert found.spread == pytest.approx(differences.std(ddof=1))
    assert found.p == pytest.approx(scipy_stats.ttest_rel(a + 0.3 + noise, a).pvalue)
    assert found.detectable == pytest.approx(stats.detectable(differences.std(ddof=1) / 8, 63))
    assert found.is_difference and found.low < found.effect < found.high
    assert found.low > 0  # the interval leaves out no difference
    none = compare_images(a, a + noise - noise.mean())  # mean difference exactly 0
    assert not none.is_difference and none.p > 0.99 and none.low < 0 < none.high
    assert compare_images(a + 0.3 + noise, a).effect == pytest.approx(-found.effect)


def test_the_read_out_figure_draws_each_read_out_with_its_interval_on_a_fixed_axis():
    before, generator = cloud(count=20, dims=6)
    code = torch.randn(3, 6, dtype=torch.float64, generator=generator)
    noise = torch.randn(12, 20, 6, dtype=torch.float64, generator=generator)
    results = {
        "exact-ish": read_out(before, before + amounts(STEPS)[:, None] @ code, STEPS),
        "noisy": read_out(before, before + amounts(STEPS)[:, None] @ code + noise, STEPS),
    }
    fig = read_out_figure(results, STEPS, draws=200)
    assert isinstance(fig, Figure)
    [ax] = fig.axes
    assert ax.get_ylim() == (0.0, 1.0)
    points = [line for line in ax.lines if line.get_marker() in ("o", "s")]
    assert len(points) == 2  # a marker per amount for each read-out
    for line, result in zip(points, results.values()):
        assert list(line.get_ydata()) == pytest.approx(result.r2.tolist())
    assert [t.get_text() for t in fig.legends[0].get_texts()] == list(results)


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
    assert summary["miss_none"][0] < 1e-9 and summary["miss_none"][1] > 0
    for key in ("score", "accuracy", "angle", "map_angle", "kept_angle", "missed"):
        assert summary[key].shape == (2,)
    for name in PREDICTORS:
        assert summary[f"miss_{name}"].shape == (2,)
    assert int(summary["count"][0]) == 20
    table = summary_table(steps, {"tiny": summary}, shown=steps[1:])
    lines = table.splitlines()
    assert len(lines) == 4 and lines[2].startswith("original") and "+20°" in lines[3]
    lines = miss_table(steps, {"tiny": summary, "again": summary}).splitlines()
    assert len(lines) == 4 and "offset" in lines[1] and lines[3].startswith("+20°")
    moved, offset, fitted = (float(summary[f"miss_{name}"][1]) for name in PREDICTORS)
    assert f"{moved:5.2f}  {offset:5.2f} {offset / moved:4.0%}" in lines[3]
    assert f"{fitted:5.2f} {fitted / moved:4.0%}" in lines[3]
    fig = equivariance_figure(steps, {"tiny": summary})
    assert isinstance(fig, Figure) and len(fig.axes) == 6  # 3 rows x 2 kinds
    assert [t.get_text() for t in fig.legends[0].texts] == [
        "tiny",
        "shared offset",
        "linear map",
        "no movement",
    ]
    vectors = torch.stack([reading.vector for reading in after])
    result = read_out(before.vector, vectors, steps, folds=4)
    lines = read_out_table({"tiny": result}).splitlines()
    assert len(lines) == 3 and "R²" in lines[0] and lines[2].startswith("tiny")


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
    with pytest.raises(ValueError, match=r"after must be \[N, D\] or \[T, N, D\]"):
        held_out_misses(torch.randn(20, 4), torch.randn(20, 5))
    with pytest.raises(ValueError, match="count must be at most"):
        standardize(torch.randn(5, 40), torch.randn(5, 40), whiten=True)  # 40 > 5
    steps = transformations(shifts=(1,), angles=())
    with pytest.raises(ValueError, match=r"after must be \[T, N, D\]"):
        read_out(torch.randn(20, 4), torch.randn(20, 4), steps)
    with pytest.raises(ValueError, match="one per row of after: 3, got 2"):
        read_out(torch.randn(20, 4), torch.randn(3, 20, 4), steps)
    with pytest.raises(ValueError, match="ridge must be a number >= 0"):
        read_out(torch.randn(20, 4), torch.randn(2, 20, 4), steps, ridge=-1.0)
    with pytest.raises(ValueError, match=r"a and b must be \[N\] over the same N"):
        compare_images(torch.randn(5), torch.randn(6))
    with pytest.raises(ValueError, match="no spread to test"):
        compare_images(torch.zeros(5), torch.ones(5))
    with pytest.raises(ValueError, match="N >= 2 images"):
        bootstrap_interval(torch.ones(1))
    with pytest.raises(ValueError, match="level must be a float between 0 and 1"):
        bootstrap_interval(torch.ones(5), level=95)
    with pytest.raises(ValueError, match=r"result.predicted must be \[T, N, 3\]"):
        image_r2(read_out(torch.randn(20, 4), torch.randn(1, 20, 4), steps[:1]), steps)
