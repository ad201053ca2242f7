"""The diagrams print the shapes the model produces, show the numbers routing computes,
draw the same SVG twice, and name what they expected when given something else."""

import dataclasses
import re

import pytest
import torch

from capsbook.diagrams import (
    architecture,
    decoder_with_mask,
    most_routed_child,
    primary_grouping,
    reshaped_grouping,
    routing_idea,
    routing_of_one_child,
    shape_text,
    votes_add_up,
)
from capsnotes import CapsNet, dynamic_routing_with_couplings
from tests.conftest import TINY


@pytest.fixture(params=[28, 36], ids=["28x28", "36x36"])
def model(request):
    torch.manual_seed(0)
    return CapsNet(dataclasses.replace(TINY, image_size=request.param)).eval()


def expected_shapes(model):
    """Every stage's shape, computed from the model directly."""
    config = model.config
    image = torch.rand(1, 1, config.image_size, config.image_size)
    with torch.no_grad():
        u = model.primary_capsules(image)
        output = model(image)
    layers = [m for m in model.decoder.layers if isinstance(m, torch.nn.Linear)]
    shapes = {
        "image": image.shape,
        "conv1": torch.relu(model.conv1(image)).shape,
        "primary capsules": u.shape,
        "votes": model.digits.votes(u).shape,
        "digit capsules": output.capsules.shape,
        "lengths": output.lengths.shape,
        "masked capsules": (1, config.num_classes * config.digit_dim),
        "reconstruction": output.reconstructions.shape,
    }
    for index, layer in enumerate(layers, start=1):
        shapes[f"decoder layer {index}"] = (1, layer.out_features)
    return {name: tuple(shape) for name, shape in shapes.items()}


def svg_text(diagram) -> str:
    """The text of the SVG, its characters unescaped."""
    return re.sub(r"&#x([0-9a-f]+);", lambda m: chr(int(m.group(1), 16)), diagram.svg())


def test_the_architecture_prints_every_shape_the_model_produces(model):
    diagram = architecture(model)
    assert diagram.shapes == expected_shapes(model)
    text = svg_text(diagram)
    for name, shape in diagram.shapes.items():
        if (
            name.startswith("decoder layer")
            and name != f"decoder layer {len(TINY.decoder_hidden) + 1}"
        ):
            continue  # the hidden layers are named by their sizes in the decoder's box
        assert shape_text(shape) in text, (name, shape_text(shape))
    assert f"r = {model.config.routing_iterations} iterations" in text


def test_the_grouping_counts_the_model_s_capsules(model):
    diagram = primary_grouping(model)
    expected = expected_shapes(model)
    assert diagram.shapes["primary capsules"] == expected["primary capsules"]
    maps = diagram.shapes["primary convolution"]
    assert maps[1] == TINY.primary_channels * TINY.primary_dim
    assert maps[2] * maps[3] * TINY.primary_channels == expected["primary capsules"][1]
    text = svg_text(diagram)
    assert f"{expected['primary capsules'][1]:,} capsules" in text
    assert shape_text(maps) in text


def test_the_reshaped_grouping_reads_each_layer_s_own_forward(model):
    """Each number of the first maps lands where the layer's own forward puts it: in the
    paper's grouping channel k at one position is component k of that position's
    capsule; reshaped, a capsule is dim consecutive numbers of the flattened maps."""
    diagram = reshaped_grouping(model, channels=3)
    types, dim = TINY.primary_channels, TINY.primary_dim
    grid = model.config.primary_grid
    flat = torch.arange(3 * grid * grid).view(3, grid, grid)
    torch.testing.assert_close(diagram.numbers["reshaped"][..., 0], flat // dim)
    torch.testing.assert_close(diagram.numbers["reshaped"][..., 1], flat % dim)
    position = torch.arange(grid * grid).view(grid, grid)
    for k in range(3):
        torch.testing.assert_close(diagram.numbers["paper"][k, ..., 0], position)
        assert (diagram.numbers["paper"][k, ..., 1] == k).all()
    assert diagram.shapes["primary capsules"] == (1, types * grid * grid, dim)


def test_one_child_s_couplings_are_routing_s_and_split_its_vote():
    torch.manual_seed(0)
    model = CapsNet(TINY).eval()
    image = torch.rand(1, 1, 28, 28)
    child = most_routed_child(model, image)
    diagram = routing_of_one_child(model, image, child, iterations=4)
    couplings = diagram.numbers["couplings"]
    assert couplings.shape == (4, TINY.num_classes)
    torch.testing.assert_close(couplings.sum(dim=1), torch.ones(4))
    with torch.no_grad():
        u_hat = model.digits.votes(model.primary_capsules(image))
    for t in range(1, 5):
        v, c = dynamic_routing_with_couplings(u_hat, t)
        torch.testing.assert_close(couplings[t - 1], c[0, child])
        # the agreement the iteration adds to the child's logits: û_{j|i}·v_j
        torch.testing.assert_close(
            diagram.numbers["agreement"][t - 1], (u_hat[0, child] * v[0]).sum(-1)
        )
    grid = TINY.primary_grid
    assert diagram.numbers["position"] == (child // grid**2, child % grid**2 // grid, child % grid)
    assert f"child {child}" in svg_text(diagram)


def test_the_votes_diagram_shows_how_the_layer_s_votes_add_up(model):
    """The agreement and the chance level are those of W_ij u_i computed here by hand,
    and each walk ends as far from its start as its votes' sum is long."""
    side = model.config.image_size
    image = torch.rand(1, 1, side, side, generator=torch.Generator().manual_seed(0))
    diagram = votes_add_up(model, image, 3)
    with torch.no_grad():
        u = model.primary_capsules(image)[0]
    weight = model.digits.weight.double()
    by_hand = torch.einsum("ijdk,ik->ijd", weight, u.double())  # [children, parents, dim]
    lengths = by_hand.norm(dim=-1)
    torch.testing.assert_close(diagram.numbers["sum_of_lengths"], lengths.sum(0))
    torch.testing.assert_close(diagram.numbers["length_of_sum"], by_hand.sum(0).norm(dim=-1))
    torch.testing.assert_close(
        diagram.numbers["agreement"], by_hand.sum(0).norm(dim=-1) / lengths.sum(0)
    )
    torch.testing.assert_close(
        diagram.numbers["chance"], lengths.square().sum(0).sqrt() / lengths.sum(0)
    )
    ends = diagram.numbers["ends"]  # [parents, 2]: on the axis, at the sum's length
    torch.testing.assert_close(ends[:, 0], by_hand.sum(0).norm(dim=-1))
    torch.testing.assert_close(ends[:, 1], torch.zeros_like(ends[:, 1]), atol=1e-9, rtol=0)
    assert diagram.shapes["votes"] == expected_shapes(model)["votes"]
    assert f"{u.shape[0]:,} votes for each parent" in svg_text(diagram)
    assert votes_add_up(model, image, 3).svg() == diagram.svg()


def test_the_idea_of_routing_shows_routing_s_numbers():
    """The child is the one whose coupling to the prediction grows most; its couplings
    are routing's; the votes drawn are the longest for the label and the runner-up,
    whose agreement is computed here by hand; the part's field is the pixels that move
    its capsule."""
    torch.manual_seed(0)
    model = CapsNet(TINY).eval()
    with torch.no_grad():
        model.digits.weight.mul_(30)  # votes long enough to move the couplings
    image = torch.rand(1, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    diagram = routing_idea(model, image, label=2, shown=6)
    numbers = diagram.numbers
    child = numbers["child"]
    assert child == most_routed_child(model, image)
    with torch.no_grad():
        u_hat = model.digits.votes(model.primary_capsules(image)).double()
    r = model.digits.iterations
    v, _ = dynamic_routing_with_couplings(u_hat, r)
    lengths = v[0].norm(dim=-1)
    assert numbers["rival"] == max((j for j in range(10) if j != 2), key=lambda j: lengths[j])
    for t in range(1, r + 1):
        _, c = dynamic_routing_with_couplings(u_hat, t)
        torch.testing.assert_close(numbers["couplings"][t - 1], c[0, child])
    for j in (2, numbers["rival"]):
        longest = u_hat[0, :, j].norm(dim=-1).topk(6).indices
        assert sorted(numbers["longest"][j]) == sorted(longest.tolist())
        chosen = u_hat[0, longest, j]
        expected = chosen.sum(0).norm() / chosen.norm(dim=-1).sum()
        assert numbers["agreement"][j] == pytest.approx(expected.item())
    # the field: exactly the pixels whose change moves the child's capsule
    top, left, side = numbers["field"]
    pixels = image.clone().requires_grad_()
    model.primary_capsules(pixels)[0, child].square().sum().backward()
    moved = pixels.grad[0, 0].abs() > 0
    rows, columns = moved.any(dim=1).nonzero(), moved.any(dim=0).nonzero()
    assert (int(rows.min()), int(columns.min())) == (top, left)
    assert (int(rows.max()) - top + 1, int(columns.max()) - left + 1) == (side, side)
    assert f"a part: child {child}" in svg_text(diagram)
    assert routing_idea(model, image, label=2, shown=6).svg() == diagram.svg()


def test_the_decoder_diagram_draws_what_the_decoder_draws():
    torch.manual_seed(0)
    model = CapsNet(TINY).eval()
    image = torch.rand(1, 1, 28, 28)
    with torch.no_grad():
        capsules = model.encode(image)[0]
        drawn = model.decoder(capsules[None], torch.tensor([3])).view(1, 1, 28, 28)
    diagram = decoder_with_mask(model, capsules, 3)
    torch.testing.assert_close(diagram.numbers["reconstruction"], drawn)
    expected = expected_shapes(model)
    for name in ("masked capsules", "decoder layer 1", "reconstruction"):
        assert diagram.shapes[name] == expected[name]
        assert shape_text(expected[name]) in svg_text(diagram)


def test_the_same_diagram_draws_the_same_svg():
    torch.manual_seed(0)
    model = CapsNet(TINY)
    assert architecture(model).svg() == architecture(model).svg()
    assert "<svg" in architecture(model)._repr_svg_()


def test_bad_arguments_are_named():
    torch.manual_seed(0)
    model = CapsNet(TINY)
    image = torch.rand(1, 1, 28, 28)
    with pytest.raises(ValueError, match=r"child must be a primary capsule index in \[0, 72\)"):
        routing_of_one_child(model, image, 72)
    with pytest.raises(ValueError, match=r"image must be one image of shape \[1, 1, 28, 28\]"):
        routing_of_one_child(model, torch.rand(2, 1, 28, 28), 0)
    with pytest.raises(ValueError, match=r"label must be a class in \[0, 10\)"):
        decoder_with_mask(model, torch.rand(10, 4), 10)
    with pytest.raises(ValueError, match=r"capsules must have shape \[10, 4\]"):
        decoder_with_mask(model, torch.rand(10, 16), 1)
    with pytest.raises(TypeError, match="the diagrams draw a capsnotes.CapsNet"):
        architecture(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"label must be a class in \[0, 10\)"):
        votes_add_up(model, image, 10)
    with pytest.raises(ValueError, match=r"image must be one image of shape \[1, 1, 28, 28\]"):
        votes_add_up(model, image[..., :27], 1)
    with pytest.raises(ValueError, match=r"label must be a class in \[0, 10\)"):
        routing_idea(model, image, label=-1)
    with pytest.raises(ValueError, match=r"shown must be an int in \[2, 72\]"):
        routing_idea(model, image, label=1, shown=1)
    with pytest.raises(ValueError, match=r"image must be one image of shape"):
        routing_idea(model, torch.rand(2, 1, 28, 28), label=1)
