"""The built book in a real browser with no network: every page renders its math, loads
its images, logs no error, and links only to files that exist; Colab links open
notebooks that are in the repository."""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from tests.browser import PageWatch, chromium, needs_chromium
from tests.conftest import REPO

pytestmark = [pytest.mark.slow, needs_chromium]

#: The visible text of a page outside code blocks and rendered math.
VISIBLE_TEXT = """() => {
  const copy = document.body.cloneNode(true);
  copy.querySelectorAll('pre, code, script, style, mjx-container, .MathJax').forEach(
      e => e.remove());
  return copy.innerText;
}"""
LINKS = "() => Array.from(document.querySelectorAll('a[href]'), a => a.getAttribute('href'))"
BROKEN_IMAGES = """() => Array.from(document.images)
  .filter(img => !img.complete || img.naturalWidth === 0).map(img => img.src)"""
#: TeX that MathJax should have typeset: a command, display delimiters, inline delimiters.
RAW_TEX = re.compile(r"\\[a-zA-Z]{2,}|\$\$|\\\(|\\\[")
COLAB = re.compile(r"colab\.research\.google\.com/github/[^/]+/[^/]+/blob/[^/]+/(.+\.ipynb)")
SCREENSHOTS = ("02_squash", "05_routing", "09_what_capsules_learned", "12_beyond_mnist")


def test_every_page_reads_offline(built_book: Path, tmp_path: Path):
    pages = sorted(built_book.glob("*.html"))
    assert len(pages) >= 13
    problems: dict[str, list[str]] = {}
    redirects = [p for p in pages if 'http-equiv="Refresh"' in p.read_text()]
    for page in redirects:  # index.html only forwards to the first page
        (target,) = re.findall(r'url=([^"]+)"', page.read_text())
        assert (built_book / target).is_file(), f"{page.name} forwards to a missing {target}"
    pages = [p for p in pages if p not in redirects]
    with chromium() as browser:
        watch = PageWatch(browser)
        for path in pages:
            watch.problems = []
            page = watch.open(path.as_uri())
            found = list(watch.problems)
            text = page.evaluate(VISIBLE_TEXT)
            found += [f"raw TeX: {m.group(0)!r}" for m in RAW_TEX.finditer(text)][:5]
            if page.query_selector("mjx-merror"):
                found.append("MathJax could not typeset an equation")
            found += [f"image did not load: {src}" for src in page.evaluate(BROKEN_IMAGES)]
            for href in page.evaluate(LINKS):
                found += _link_problems(href, path, built_book)
            if path.stem in SCREENSHOTS:
                page.screenshot(path=str(tmp_path / f"{path.stem}.png"), full_page=False)
            page.close()
            if found:
                problems[path.name] = found
    assert problems == {}, "\n".join(f"{k}: {v}" for k, v in problems.items())
    print(f"screenshots in {tmp_path}")


def _link_problems(href: str, page: Path, root: Path) -> list[str]:
    colab = COLAB.search(href)
    if colab:
        notebook = REPO / unquote(colab.group(1))
        return [] if notebook.is_file() else [f"Colab link to a missing notebook: {href}"]
    parsed = urlparse(href)
    if parsed.scheme or href.startswith(("#", "mailto:", "//")):
        return []
    target = (page.parent / unquote(parsed.path)).resolve() if parsed.path else page
    if not target.exists():
        return [f"link to a missing file: {href}"]
    if target.suffix == ".ipynb" and not (REPO / "book" / target.name).is_file():
        return [f"download link to a notebook that is not in the repository: {href}"]
    return []


def test_the_capsule_explorer_decodes_like_pytorch(built_book: Path, tmp_path: Path):
    """Chapter 9's explorer, opened from disk: the decoder in the page agrees with the
    shipped model's PyTorch decoder, a slider redraws the reconstruction within 50 ms,
    and the page's added files stay under 3 MB to download (gzipped, as GitHub Pages
    serves them: base64 text takes a third more room than its bytes, gzip gives it back)."""
    import torch

    from capsnotes.training.pretrained import load_pretrained

    added = [
        built_book / "_static" / name
        for name in ("capsnotes-explorer.js", "capsnotes-explorer-data.js")
    ]
    assert sum(len(gzip.compress(path.read_bytes())) for path in added) < 3_000_000
    model, _ = load_pretrained("mnist")
    generator = torch.Generator().manual_seed(0)
    with chromium() as browser:
        watch = PageWatch(browser)
        page = watch.open((built_book / "09_what_capsules_learned.html").as_uri())
        page.evaluate("() => capsnotesExplorer.ready.then(() => true)")
        for trial in range(12):
            digit = trial % 10
            vector = (torch.rand(16, generator=generator) - 0.5) * (0.6 if trial < 6 else 2.0)
            got = torch.tensor(
                page.evaluate(
                    "([d, v]) => capsnotesExplorer.decode(d, v)", [digit, vector.tolist()]
                )
            )
            full = torch.zeros(1, 10, 16)
            full[0, digit] = vector
            with torch.no_grad():
                want = model.decoder(full, torch.tensor([digit]))[0]
            assert got.shape == (784,)
            assert (got - want).abs().max() < 2e-3, (digit, (got - want).abs().max())
        before = page.evaluate("() => document.querySelector('.cx-output').toDataURL()")
        slider = page.locator(".cx-slider input").nth(7)
        slider.evaluate("s => { s.value = s.max; s.dispatchEvent(new Event('input')); }")
        after = page.evaluate("() => document.querySelector('.cx-output').toDataURL()")
        assert after != before, "moving a slider did not redraw the reconstruction"
        assert page.evaluate("() => capsnotesExplorer.state.lastMilliseconds") < 50
        page.locator("select").first.select_option(index=5)
        page.get_by_role("button", name="reset").click()
        page.screenshot(path=str(tmp_path / "explorer.png"), full_page=False)
        assert watch.problems == []


#: What the routing playground shows now: its votes, r, and each iteration's numbers.
PLAYGROUND_NOW = "() => capsnotesPlayground.current()"


def _assert_routes_like_dynamic_routing(result: dict, votes: list, r: int) -> None:
    """The page's routing of ``votes`` with ``r`` iterations (couplings, s, v and the
    agreement of every iteration) against capsnotes.dynamic_routing in float64."""
    import torch

    from capsbook.playground import route_by_iteration

    expected = route_by_iteration(votes, r)
    assert len(result["iterations"]) == r
    for t, (got, want) in enumerate(zip(result["iterations"], expected["iterations"]), 1):
        assert got["added"] == (t < r), "the last pass's agreement is never added"
        for key in ("c", "s", "v", "agreement"):
            page = torch.tensor(got[key], dtype=torch.float64)
            gap = (page - want[key]).abs().max().item()
            assert gap <= 1e-9, f"{key} of iteration {t} of r = {r}: {gap:.3g} apart"
    for key in ("c", "v"):
        gap = (torch.tensor(result[key], dtype=torch.float64) - expected[key]).abs().max()
        assert gap.item() <= 1e-9, key


def test_the_routing_playground_routes_like_dynamic_routing(built_book: Path, tmp_path: Path):
    """Chapter 5's playground, opened from disk with no network: for the three presets and
    three random configurations, r = 1..5, its routing (the API, and what the page shows)
    agrees with capsnotes.dynamic_routing in float64 to 1e-9; so do the votes after a real
    drag with the mouse and after arrow keys; its tables print the numbers it routed;
    nothing logs an error. Screenshots in light and dark mode go to tmp_path."""
    import torch

    from capsbook.playground import PRESETS

    generator = torch.Generator().manual_seed(0)
    configurations = [[[list(u) for u in child] for child in p.votes] for p in PRESETS]
    for children, parents, scale in ((4, 2, 1.0), (8, 3, 0.5), (7, 3, 2.0)):
        votes = torch.randn(children, parents, 2, generator=generator, dtype=torch.float64)
        configurations.append((scale * votes).tolist())
    page_html = (built_book / "05_routing.html").as_uri()
    with chromium() as browser:
        watch = PageWatch(browser)
        page = watch.open(page_html)
        assert page.evaluate("() => capsnotesPlayground.current().preset") == PRESETS[0].name
        for votes in configurations:
            for r in range(1, 6):
                routed = page.evaluate("([u, r]) => capsnotesPlayground.route(u, r)", [votes, r])
                _assert_routes_like_dynamic_routing(routed, votes, r)
                page.evaluate(
                    "([u, r]) => { capsnotesPlayground.setVotes(u);"
                    " capsnotesPlayground.setIterations(r); }",
                    [votes, r],
                )
                shown = page.evaluate(PLAYGROUND_NOW)
                assert shown["votes"] == votes and shown["iterations"] == r
                _assert_routes_like_dynamic_routing(shown["result"], votes, r)
        # the table under parent 1 prints the couplings the page routed (last iteration)
        cells = page.locator(".pg-card").nth(1).locator("tbody tr td:nth-child(2)")
        last = shown["result"]["c"]
        assert cells.all_inner_texts() == [f"{row[1]:.3f}" for row in last]

        # a real drag: child 3's vote for parent 0 in "two clusters agree", r = 3
        page.get_by_role("button", name="reset").click()
        before = page.evaluate(PLAYGROUND_NOW)["votes"]
        handle = page.locator(".pg-card").nth(0).locator(".pg-handle").nth(3)
        box = handle.bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.move(x, y)
        page.mouse.down()
        page.mouse.move(x + 30, y - 20, steps=5)
        page.mouse.move(x + 60, y - 40, steps=5)
        page.mouse.up()
        dragged = page.evaluate(PLAYGROUND_NOW)
        moved = [
            (i, j)
            for i, child in enumerate(dragged["votes"])
            for j, vote in enumerate(child)
            if vote != before[i][j]
        ]
        assert moved == [(3, 0)], moved
        new, old = dragged["votes"][3][0], before[3][0]
        assert new[0] > old[0] + 0.2 and new[1] > old[1] + 0.1  # right and up, as dragged
        _assert_routes_like_dynamic_routing(dragged["result"], dragged["votes"], 3)

        # the keyboard: child 0's vote for parent 1, two steps right and one up
        key_handle = page.locator(".pg-card").nth(1).locator(".pg-handle").nth(0)
        key_handle.focus()
        for key in ("ArrowRight", "ArrowRight", "ArrowUp"):
            page.keyboard.press(key)
        keyed = page.evaluate(PLAYGROUND_NOW)
        start = dragged["votes"][0][1]
        assert keyed["votes"][0][1] == pytest.approx([start[0] + 0.1, start[1] + 0.05])
        _assert_routes_like_dynamic_routing(keyed["result"], keyed["votes"], 3)
        summary = page.locator(".pg-summary")
        assert summary.get_attribute("aria-live") == "polite"
        assert "Iteration 3 of r = 3" in summary.inner_text()

        # the scale control lengthens every vote the page routes
        page.evaluate("() => capsnotesPlayground.setScale(3)")
        scaled = page.evaluate(PLAYGROUND_NOW)
        assert scaled["votes"][0][1] == pytest.approx([3 * v for v in keyed["votes"][0][1]])
        _assert_routes_like_dynamic_routing(scaled["result"], scaled["votes"], 3)
        page.get_by_role("button", name="reset").click()
        light = tmp_path / "playground-light.png"
        page.locator("#capsnotes-playground").screenshot(path=str(light))
        assert watch.problems == []

        dark = PageWatch(browser)
        dark.context.add_init_script("localStorage.setItem('mode', 'dark');")
        page = dark.open(page_html)
        assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
        page.locator("#capsnotes-playground").screenshot(path=str(tmp_path / "playground-dark.png"))
        assert dark.problems == []
    print(f"screenshots in {tmp_path}")
