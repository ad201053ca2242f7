import dataclasses

import pytest
import torch

from capsnotes import CapsNet, CapsNetConfig, CapsNetOutput, margin_loss, reconstruction_loss
from tests.conftest import TINY

# A small model with the same structure, for tests that need many forward passes.


def count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_paper_model_has_8215568_parameters():
    model = CapsNet()
    assert count(model) == 8_215_568
    assert count(model) - count(model.decoder) == 6_804_224
    assert count(model.conv1) == 20_992
    assert count(model.primary) == 5_308_672
    assert count(model.digits) == 1_474_560


def test_forward_shapes_and_types():
    model = CapsNet()
    out = model(torch.rand(3, 1, 28, 28), torch.tensor([1, 5, 9]))
    assert isinstance(out, CapsNetOutput)
    assert out.capsules.shape == (3, 10, 16)
    assert out.lengths.shape == (3, 10)
    assert out.predictions.shape == (3,) and out.predictions.dtype == torch.int64
    assert out.reconstructions.shape == (3, 1, 28, 28)
    torch.testing.assert_close(out.lengths, out.capsules.norm(dim=-1))
    assert torch.equal(out.predictions, out.lengths.argmax(dim=1))
    assert (out.lengths < 1).all()


def test_decoder_uses_label_when_given_else_prediction():
    torch.manual_seed(0)
    model = CapsNet(TINY)
    images = torch.rand(4, 1, 28, 28)
    free = model(images)
    torch.testing.assert_close(
        free.reconstructions, model.decoder(free.capsules, free.predictions).view_as(images)
    )
    other = (free.predictions + 1) % 10
    by_other = model(images, other)
    torch.testing.assert_close(
        by_other.reconstructions, model.decoder(free.capsules, other).view_as(images)
    )
    assert not torch.equal(by_other.reconstructions, free.reconstructions)
    torch.testing.assert_close(by_other.capsules, free.capsules)  # labels don't change v
    assert torch.equal(by_other.predictions, free.predictions)


def test_one_example_does_not_depend_on_the_batch():
    torch.manual_seed(0)
    model = CapsNet(TINY).double()
    images = torch.rand(5, 1, 28, 28, dtype=torch.float64)
    together = model(images)
    alone = model(images[2:3])
    torch.testing.assert_close(together.capsules[2:3], alone.capsules)
    torch.testing.assert_close(together.reconstructions[2:3], alone.reconstructions)


def test_float64_and_gradients_reach_every_parameter():
    model = CapsNet(TINY).double()
    images = torch.rand(2, 1, 28, 28, dtype=torch.float64)
    labels = torch.tensor([3, 4])
    out = model(images, labels)
    assert out.capsules.dtype == torch.float64
    loss = margin_loss(out.capsules, labels) + reconstruction_loss(out.reconstructions, images)
    loss.backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and torch.isfinite(parameter.grad).all(), name
        assert parameter.grad.abs().sum() > 0, name


@pytest.mark.parametrize(
    ("overrides", "primary", "pixels"),
    [
        ({}, 1152, (1, 28, 28)),
        ({"image_size": 36}, 32 * 10 * 10, (1, 36, 36)),  # MultiMNIST
        ({"in_channels": 3, "image_size": 32}, 32 * 8 * 8, (3, 32, 32)),
        ({"num_classes": 5, "routing_iterations": 1}, 1152, (1, 28, 28)),
    ],
)
def test_configurable_sizes(overrides, primary, pixels):
    config = dataclasses.replace(TINY, primary_channels=32, **overrides)
    assert config.num_primary_capsules == primary
    model = CapsNet(config)
    out = model(torch.rand(2, *pixels))
    assert out.capsules.shape == (2, config.num_classes, config.digit_dim)
    assert out.reconstructions.shape == (2, *pixels)


def test_overrides_and_config_round_trip():
    model = CapsNet(image_size=36, routing_iterations=2)
    assert model.config.image_size == 36 and model.digits.iterations == 2
    config = CapsNetConfig(**dataclasses.asdict(CapsNetConfig()))
    assert config == CapsNetConfig()
    with pytest.raises(TypeError, match="image_sise"):
        CapsNetConfig(**{"image_sise": 28})


def test_bad_config():
    with pytest.raises(ValueError, match="routing_iterations"):
        CapsNetConfig(routing_iterations=0)
    with pytest.raises(ValueError, match="at least 9 pixels"):
        CapsNetConfig(image_size=12)
    with pytest.raises(ValueError, match="num_classes"):
        CapsNetConfig(num_classes=1)
    with pytest.raises(ValueError, match="primary_stride must be a positive int"):
        CapsNetConfig(primary_stride=0)
    with pytest.raises(TypeError, match="digit_dim must be a positive int, got float 2.5"):
        CapsNetConfig(digit_dim=2.5)
    with pytest.raises(ValueError, match=r"decoder_hidden\[1\] must be a positive int"):
        CapsNetConfig(decoder_hidden=(16, 0))


def test_bad_images():
    model = CapsNet(TINY)
    with pytest.raises(ValueError, match=r"\[batch, 1, 28, 28\]"):
        model(torch.rand(1, 28, 28))
    with pytest.raises(ValueError, match=r"\[batch, 1, 28, 28\]"):
        model(torch.rand(2, 3, 28, 28))
    with pytest.raises(ValueError, match=r"\[batch, 1, 28, 28\]"):
        model(torch.rand(2, 1, 32, 32))
    with pytest.raises(TypeError, match="floating-point"):
        model(torch.zeros(2, 1, 28, 28, dtype=torch.uint8))
    with pytest.raises(TypeError, match="torch.Tensor"):
        model([[0.0]])


def test_bad_labels():
    model = CapsNet(TINY)
    images = torch.rand(3, 1, 28, 28)
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        model(images, torch.tensor([0, 1, 10]))
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        model(images, torch.tensor([0, -1, 2]))
    with pytest.raises(ValueError, match=r"shape \[3\]"):
        model(images, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"shape \[3\]"):
        model(images, torch.tensor([[0, 1, 2]]))
    with pytest.raises(TypeError, match="integer"):
        model(images, torch.tensor([0.0, 1.0, 2.0]))
