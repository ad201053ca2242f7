"""Affine warps: exact where the answer is known, reproducible from the seed, drawn
from the stated ranges, and the same images for every model."""

import math

import pytest
import torch

from capsnotes.data import ImageSet
from capsnotes.experiments.affine import (
    AFFNIST_RANGES,
    AffineParameters,
    AffineRanges,
    accuracy,
    affine_matrices,
    one_factor,
    random_affine_parameters,
    robustness,
    warp,
)
from capsnotes.experiments.convnet import ConvNet


def _images(count: int = 3, size: int = 28) -> torch.Tensor:
    return torch.rand(count, 1, size, size, generator=torch.Generator().manual_seed(0))


def test_the_identity_and_quarter_turns_are_exact():
    images = _images()
    torch.testing.assert_close(warp(images, AffineParameters.identity(3)), images)
    turned = warp(images, one_factor("rotation_degrees", 90, 3))
    # counter-clockwise on the screen: torch.rot90 from the row axis to the column axis
    torch.testing.assert_close(turned, torch.rot90(images, 1, dims=(2, 3)), atol=1e-5, rtol=0)


def test_a_whole_pixel_shift_moves_the_image():
    images = _images(2)
    shifted = warp(images, AffineParameters.identity(2).replace(shift_x=3, shift_y=-2))
    torch.testing.assert_close(shifted[:, :, :-2, 3:], images[:, :, 2:, :-3], atol=1e-5, rtol=0)
    assert shifted[:, :, :, :3].abs().max() < 1e-6  # uncovered pixels are black


def test_the_matrix_composes_rotation_shear_scale_and_shift():
    parameters = AffineParameters(
        torch.tensor([30.0]),
        torch.tensor([0.1]),
        torch.tensor([1.2]),
        torch.tensor([0.9]),
        torch.tensor([1.0]),
        torch.tensor([-2.0]),
    )
    (matrix,) = affine_matrices(parameters)
    c, s = math.cos(math.radians(30)), math.sin(math.radians(30))
    rotation = torch.tensor([[c, s], [-s, c]])
    shear = torch.tensor([[1.0, 0.0], [0.1, 1.0]])
    scale = torch.diag(torch.tensor([1.2, 0.9]))
    torch.testing.assert_close(matrix[:, :2], scale @ shear @ rotation)
    torch.testing.assert_close(matrix[:, 2], torch.tensor([1.0, -2.0]))


def test_random_parameters_are_reproducible_and_within_the_ranges():
    a = random_affine_parameters(5000, AFFNIST_RANGES, seed=3)
    b = random_affine_parameters(5000, AFFNIST_RANGES, seed=3)
    for name, value in vars(a).items():
        assert torch.equal(value, getattr(b, name)), name
    assert a.rotation_degrees.abs().max() <= 20 and a.rotation_degrees.abs().max() > 19
    assert a.shear.abs().max() <= 0.2
    for scale in (a.scale_x, a.scale_y):
        assert scale.min() >= 0.8 - 1e-6 and scale.max() <= 1.25 + 1e-6
        assert abs(scale.log().mean()) < 0.02  # log-uniform: centred on 1 in log space
    assert a.shift_x.abs().max() <= 2
    assert not torch.equal(
        a.rotation_degrees, random_affine_parameters(5000, seed=4).rotation_degrees
    )


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="one transformation per image"):
        warp(_images(3), AffineParameters.identity(2))
    with pytest.raises(ValueError, match="square"):
        warp(torch.rand(1, 1, 28, 20), AffineParameters.identity(1))
    with pytest.raises(ValueError, match="unknown factor 'zoom'"):
        one_factor("zoom", 1.0, 2)
    with pytest.raises(ValueError, match="rotation_degrees must lie in"):
        AffineRanges(rotation_degrees=-1)


def test_robustness_scores_every_model_on_the_same_images():
    torch.manual_seed(0)
    data = ImageSet((255 * _images(12)).to(torch.uint8), torch.arange(12) % 10, tuple("0123456789"))
    model = ConvNet(channels=(4,), pool_after=(1,), hidden=(8,)).eval()
    record = robustness(
        {"a": model, "b": model}, data, seed=1, sweeps={"shear": (0.0, 0.3)}, sweep_size=6
    )
    assert record["models"]["a"] == record["models"]["b"]
    assert record["count"] == 12 and record["sweep_count"] == 6 and record["seed"] == 1
    assert record["ranges"]["rotation_degrees"] == 20.0
    shear = record["models"]["a"]["sweeps"]["shear"]
    assert [point["value"] for point in shear] == [0.0, 0.3]
    plain = accuracy(model, data, AffineParameters.identity(12))
    assert record["models"]["a"]["plain_accuracy"] == plain
