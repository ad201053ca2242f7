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

    from capsnotes import load_pretrained

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
