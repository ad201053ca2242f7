"""The routing playground's Python side (capsbook.playground): the presets the page
reads, the numbers it must show (from dynamic_routing), the script that carries the
presets into the page, and the static figure. The page itself is tested in a browser
(tests/test_browser.py)."""

from __future__ import annotations

import json
import re

import pytest
import torch
from matplotlib.figure import Figure

from capsbook import playground
from capsbook.playground import (
    CHILDREN,
    DEFAULT,
    PARENTS,
    PRESETS,
    figure,
    presets_html,
    presets_payload,
    route_by_iteration,
    votes_tensor,
)
from capsnotes import squash


def test_every_preset_is_one_the_page_can_load():
    """The page looks a preset up by its name (the default too) and draws between
    CHILDREN and PARENTS of them: every preset is within those limits with one 2-D vote
    per parent, the names are distinct, and the default is one of them."""
    names = [p.name for p in PRESETS]
    assert len(set(names)) == len(names) and DEFAULT in PRESETS
    for preset in PRESETS:
        assert CHILDREN[0] <= preset.children <= CHILDREN[1]
        assert PARENTS[0] <= preset.parents <= PARENTS[1]
        assert all(len(child) == preset.parents for child in preset.votes)
        assert votes_tensor(preset).shape == (1, preset.children, preset.parents, 2)


def explicit_routing(u_hat: torch.Tensor, r: int) -> list[dict[str, torch.Tensor]]:
    """Procedure 1 for one example [child, parent, 2] with loops, in float64."""
    children, parents, _ = u_hat.shape
    b = torch.zeros(children, parents, dtype=torch.float64)
    steps = []
    for t in range(r):
        c = torch.stack([torch.softmax(b[i], dim=0) for i in range(children)])
        s = torch.stack(
            [sum(c[i, j] * u_hat[i, j] for i in range(children)) for j in range(parents)]
        )
        v = squash(s)
        a = torch.tensor(
            [[float(u_hat[i, j] @ v[j]) for j in range(parents)] for i in range(children)],
            dtype=torch.float64,
        )
        steps.append({"c": c, "s": s, "v": v, "agreement": a})
        if t + 1 < r:
            b = b + a
    return steps


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
@pytest.mark.parametrize("r", [1, 2, 3, 5])
def test_each_iteration_is_procedure_1(preset, r):
    routed = route_by_iteration(preset, r)
    expected = explicit_routing(votes_tensor(preset)[0], r)
    assert len(routed["iterations"]) == r
    for got, want in zip(routed["iterations"], expected, strict=True):
        for key in ("c", "s", "v", "agreement"):
            assert got[key].dtype == torch.float64
            torch.testing.assert_close(got[key], want[key], rtol=0, atol=1e-12)
    torch.testing.assert_close(routed["v"], expected[-1]["v"], rtol=0, atol=1e-12)
    first = routed["iterations"][0]["c"]
    torch.testing.assert_close(first, torch.full_like(first, 1 / preset.parents))


def test_each_preset_does_what_its_name_says():
    """After the paper's three iterations: the two clusters go to their parents, the
    disagreeing votes stay near an even split, the long outlier takes its parent."""
    clusters = route_by_iteration(PRESETS[0], 3)["c"]
    assert clusters.argmax(dim=1).tolist() == [0, 0, 0, 1, 1, 1]
    scattered = route_by_iteration(PRESETS[1], 3)["c"]
    assert (scattered - 1 / 3).abs().max() < 0.02
    outlier = route_by_iteration(PRESETS[2], 3)["c"]
    assert outlier[4, 1] > 0.95
    # longer votes move the couplings further (the page's scale control)
    for preset in PRESETS:
        moved = [
            (route_by_iteration(votes_tensor(preset) * k, 3)["c"] - 1 / preset.parents).abs().max()
            for k in (0.25, 1.0, 3.0)
        ]
        assert moved[0] < moved[1] < moved[2]


def test_the_page_gets_the_presets_as_a_script():
    html = presets_html()._repr_html_()
    match = re.fullmatch(r"<script>window\.CAPSNOTES_PLAYGROUND_PRESETS = (.*);</script>", html)
    assert match, html[:200]
    payload = json.loads(match.group(1))
    assert payload == json.loads(json.dumps(presets_payload()))
    assert payload["format"] == playground.FORMAT and payload["default"] == DEFAULT.name
    assert payload["presets"][0]["votes"] == [[list(v) for v in c] for c in DEFAULT.votes]
    assert repr(presets_html()).startswith("playground presets: two clusters agree (6 ")


def test_votes_must_be_two_dimensional():
    with pytest.raises(ValueError, match=r"\[child\]\[parent\]\[2\]"):
        votes_tensor([[[1.0, 0.0, 0.0]]])


def test_the_static_figure_draws_the_default_preset():
    fig = figure()
    assert isinstance(fig, Figure)
    axes = fig.get_axes()
    assert len(axes) == DEFAULT.parents + 1
    titles = [ax.get_title() for ax in axes[: DEFAULT.parents]]
    last = route_by_iteration(DEFAULT, 3)["iterations"][-1]
    assert titles[0].startswith(
        f"parent 0\n|s| {last['s'][0].norm():.2f}, |v| {last['v'][0].norm():.2f}\nshown ±"
    )
    # each panel on its own scale: its longest vote (or s) fills 1/1.2 of the half-width
    votes = votes_tensor(DEFAULT)[0]
    for j, ax in enumerate(axes[: DEFAULT.parents]):
        longest = max(votes[:, j].norm(dim=-1).max().item(), last["s"][j].norm().item())
        assert ax.get_xlim()[1] == pytest.approx(1.2 * longest)
    lines = axes[-1].get_lines()
    assert len([line for line in lines if line.get_label().startswith("child ")]) == 6


def test_colab_gets_a_note_where_the_page_has_the_playground():
    import sys

    from tests.conftest import REPO

    sys.path.insert(0, str(REPO / "tools"))
    from colab import PLAYGROUND_NOTE, References, chapters, colab_markdown

    book = chapters()
    text = (
        "Before.\n\n"
        '<div id="capsnotes-playground"><p>The playground needs JavaScript.</p></div>\n'
        '<script src="_static/capsnotes-playground.js"></script>\n\nAfter.'
    )
    shown = colab_markdown(text, book["05_routing"], book, References(), {})
    assert shown == f"Before.\n\n{PLAYGROUND_NOTE}\n\nAfter."
    assert "05_routing.html" in PLAYGROUND_NOTE
