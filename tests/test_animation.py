"""Chapter 5's animation of routing (capsbook.animation): frame t is iteration t of
capsnotes.dynamic_routing, the frames change from one iteration to the next, the player
page is the same on every run and fetches nothing, and bad input is refused."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from book import figure_compare
from capsbook import animation as animation_module
from capsbook.animation import (
    player_html,
    routing_animation,
    routing_frames,
    shared_limits,
    shown_parents,
    vote_plane,
)
from capsnotes import CapsNet, dynamic_routing_with_couplings
from tests.conftest import TINY


@pytest.fixture(scope="module")
def model():
    """An untrained model whose votes are long enough for routing to move its
    couplings."""
    torch.manual_seed(0)
    model = CapsNet(TINY).eval()
    with torch.no_grad():
        model.digits.weight.mul_(30)
    return model


@pytest.fixture(scope="module")
def image():
    return torch.rand(1, 1, 28, 28, generator=torch.Generator().manual_seed(1))


def test_frame_t_is_routing_with_r_t(model, image):
    frames = routing_frames(model, image, iterations=4)
    with torch.no_grad():
        votes = model.digits.votes(model.primary_capsules(image))
    children, parents = TINY.num_primary_capsules, TINY.num_classes
    assert frames["votes"].shape == (children, parents, TINY.digit_dim)
    assert frames["couplings"].shape == (4, children, parents)
    assert frames["outputs"].shape == (4, parents, TINY.digit_dim)
    torch.testing.assert_close(frames["votes"], votes[0])
    for t in range(1, 5):
        v, c = dynamic_routing_with_couplings(votes, t)
        torch.testing.assert_close(frames["couplings"][t - 1], c[0])
        torch.testing.assert_close(frames["outputs"][t - 1], v[0])
    # iteration 1 splits evenly; the couplings move after it, each child's summing to 1
    torch.testing.assert_close(frames["couplings"][0], torch.full((children, parents), 0.1))
    assert not torch.allclose(frames["couplings"][1], frames["couplings"][0])
    torch.testing.assert_close(frames["couplings"].sum(-1), torch.ones(4, children))


def test_the_plane_is_orthonormal_along_the_direction_and_signed():
    generator = torch.Generator().manual_seed(0)
    votes = torch.randn(50, 16, generator=generator, dtype=torch.float64)
    direction = torch.randn(16, generator=generator, dtype=torch.float64)
    axes = vote_plane(votes, direction)
    torch.testing.assert_close(axes @ axes.T, torch.eye(2, dtype=torch.float64))
    torch.testing.assert_close(axes[0], direction / direction.norm())
    across = (votes @ axes[1]).numpy()
    assert across[np.abs(across).argmax()] > 0  # the same picture whichever sign SVD gives
    # the main direction across: no other unit vector orthogonal to the first spreads
    # the votes more
    centred = votes - votes.mean(0)
    other = torch.randn(16, generator=generator, dtype=torch.float64)
    other -= (other @ axes[0]) * axes[0]
    other /= other.norm()
    assert (centred @ axes[1]).var() >= (centred @ other).var()


def test_the_parents_shown_are_the_label_and_the_runner_up():
    lengths = torch.tensor([[0.1, 0.5, 0.2, 0.3], [0.1, 0.9, 0.2, 0.4]])
    assert shown_parents(lengths, label=2) == [2, 1]
    assert shown_parents(lengths, label=1) == [1, 3]
    assert shown_parents(lengths, label=None) == [1, 3]


def test_the_vote_panels_share_one_scale(model, image, monkeypatch):
    assert shared_limits({7: (-0.3, 1.9), 4: (-1.2, 0.5)}) == {7: (-0.3, 1.9), 4: (-1.2, 1.0)}
    # each panel's own limits planted 2.0 and 1.0 wide: both are drawn 2.0 wide
    own = iter([(-1.0, 1.0), (-0.5, 0.5)])
    monkeypatch.setattr(animation_module, "_limits", lambda *values: next(own))
    votes = routing_animation(model, image, label=3, iterations=2)._fig.axes[:2]
    assert [ax.get_xlim() for ax in votes] == [(-1.0, 1.0), (-0.5, 1.5)]
    assert [ax.get_ylim() for ax in votes] == [(-1.0, 1.0), (-1.0, 1.0)]


def frames_of(page: str) -> list[np.ndarray]:
    _, images = figure_compare.html_images(page)
    return [figure_compare.decode_png(png) for png in images]


def test_the_player_is_the_same_on_every_run_and_fetches_nothing(model, image):
    first = player_html(routing_animation(model, image, label=3, iterations=3, child=5))
    second = player_html(routing_animation(model, image, label=3, iterations=3, child=5))
    assert first == second
    assert not re.search(r"[0-9a-f]{32}", first.replace("\\\n", ""))  # no random id
    assert "animrouting = new Animation(" in first
    assert "font-awesome" not in first and 'class="fa ' not in first and "http" not in first
    frames = frames_of(first)
    assert len(frames) == 3
    # the page shows the first frame before its script runs (its <img>'s own source)
    shown = re.search(r'<img id="_anim_imgrouting" src="data:image/png;base64,([^"]+)"', first)
    np.testing.assert_array_equal(figure_compare.decode_png(shown[1]), frames[0])
    # every iteration changes the picture
    for before, after in zip(frames, frames[1:]):
        assert before.shape == after.shape
        assert (before != after).any(axis=-1).sum() > 50


def test_the_player_is_named_and_its_text_escaped(model, image):
    page = player_html(
        routing_animation(model, image, iterations=2), name="other", alt='a "7" & more'
    )
    assert "animother = new Animation(" in page and "routing" not in page
    assert 'alt="a &quot;7&quot; &amp; more"' in page


def test_bad_input_is_refused(model, image):
    with pytest.raises(TypeError, match="model must be a capsnotes.CapsNet"):
        routing_frames(torch.nn.Linear(2, 2), image)
    with pytest.raises(ValueError, match=r"image must be one image \[1, C, H, W\]"):
        routing_frames(model, image.repeat(2, 1, 1, 1))
    with pytest.raises(ValueError, match="images must be"):
        routing_frames(model, image[..., :20])
    with pytest.raises(ValueError, match="routing iterations must be >= 1"):
        routing_frames(model, image, iterations=0)
    with pytest.raises(TypeError, match="routing iterations must be an int"):
        routing_frames(model, image, iterations=True)
    with pytest.raises(ValueError, match=r"label must be an int in \[0, 10\)"):
        routing_animation(model, image, label=10)
    with pytest.raises(ValueError, match=r"child must be an int in \[0, 72\)"):
        routing_animation(model, image, child=72)
    animation = routing_animation(model, image, iterations=2)
    with pytest.raises(ValueError, match="name must be a JavaScript identifier"):
        player_html(animation, name="two words")
    with pytest.raises(TypeError, match="alt must be a str"):
        player_html(animation, alt=None)
    assert player_html(animation)  # the good call still works
