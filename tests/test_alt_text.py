"""Every picture in the built chapters has alternative text that says what it shows.

A figure's ``alt`` is what a screen reader reads aloud in its place. Without one, MyST-NB
writes the image's file path (``_images/<hash>.png``). The chapters give each figure
cell MyST-NB's ``mystnb: image: alt:`` metadata in their source (book/NN_name.md), and
the build reads it from there (book/_ext/committed_outputs.py takes only the outputs
from the committed notebook)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from tests.conftest import REPO

BOOK = REPO / "book"
#: The fewest words that can say what a figure shows.
MIN_WORDS = 5
PATH_LIKE = re.compile(r"\.(png|svg|jpe?g|gif|pdf)$", re.I)


class Images(HTMLParser):
    """The ``<img>`` tags of a page, each as (its attributes, whether it is inside the
    page's article: the chapter's text and outputs, not the theme's header and logos)."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[tuple[dict[str, str | None], bool]] = []
        self._articles = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "article":
            self._articles += 1
        elif tag == "img":
            self.images.append((dict(attrs), self._articles > 0))

    def handle_endtag(self, tag: str) -> None:
        if tag == "article":
            self._articles = max(0, self._articles - 1)


def images(page: str) -> list[tuple[dict[str, str | None], bool]]:
    parser = Images()
    parser.feed(page)
    parser.close()
    return parser.images


def alt_problem(attrs: dict[str, str | None], in_article: bool) -> str | None:
    """Why the image's alt text would not tell a listener what it shows (None if it
    would). Every image needs an alt that is not a file's path or name; a figure in the
    chapter's article needs a description of a few words."""
    alt = attrs.get("alt")
    if alt is None:
        return "no alt attribute"
    alt = " ".join(alt.split())
    src = attrs.get("src") or ""
    if not alt:
        return "an empty alt" if in_article else None  # empty: decorative, skipped
    if "_images/" in alt or PATH_LIKE.search(alt) or alt in {src, Path(src).name}:
        return f"a file path for alt: {alt!r}"
    if in_article and len(alt.split()) < MIN_WORDS:
        return f"an alt of fewer than {MIN_WORDS} words: {alt!r}"
    return None


def chapter_sources() -> list[Path]:
    return sorted(p for p in BOOK.glob("*.md") if p.read_text().startswith("---\njupytext:"))


def pictures_in(source: Path) -> int:
    """How many images the chapter's committed notebook shows (PNG and SVG outputs of the
    cells that the HTML does not leave out)."""
    count = 0
    for cell in nbformat.read(source.with_suffix(".ipynb"), as_version=4).cells:
        if {"remove-output", "remove-cell"} & set(cell.metadata.get("tags", [])):
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            count += "image/png" in data or "image/svg+xml" in data
    return count


def test_the_checker_tells_a_description_from_a_file_path():
    page = """<html><body><header><img src="_static/logo.png" alt="Colab logo"></header>
    <main><article class="bd-article">
      <img src="_images/ab12.png" alt="_images/ab12.png">
      <img src="_images/cd34.svg" alt="cd34.svg">
      <img src="_images/ef56.png">
      <img src="_images/0a.png" alt="a figure">
      <img src="_images/1b.png" alt="">
      <img src="_images/2c.png" alt="A line chart of the loss against the epoch, falling.">
    </article></main>
    <footer><img src="_static/x.svg" alt="_static/x.svg"/></footer></body></html>"""
    found = [(attrs.get("src"), alt_problem(attrs, inside)) for attrs, inside in images(page)]
    problems = dict(found)
    assert [src for src, _ in found] == [
        "_static/logo.png",
        "_images/ab12.png",
        "_images/cd34.svg",
        "_images/ef56.png",
        "_images/0a.png",
        "_images/1b.png",
        "_images/2c.png",
        "_static/x.svg",
    ]
    assert problems["_static/logo.png"] is None  # the theme's logo, outside the article
    assert "file path" in problems["_images/ab12.png"]
    assert "file path" in problems["_images/cd34.svg"]
    assert problems["_images/ef56.png"] == "no alt attribute"
    assert "fewer than" in problems["_images/0a.png"]
    assert problems["_images/1b.png"] == "an empty alt"
    assert problems["_images/2c.png"] is None
    assert "file path" in problems["_static/x.svg"]


@pytest.mark.slow
def test_every_image_in_the_built_chapters_has_a_description(built_book):
    problems, described = [], 0
    for source in chapter_sources():
        found = images((built_book / f"{source.stem}.html").read_text(encoding="utf-8"))
        for attrs, in_article in found:
            problem = alt_problem(attrs, in_article)
            if problem:
                problems.append(f"{source.stem}: {attrs.get('src')}: {problem}")
        figures = sum(inside for _, inside in found)
        # the check sees every figure the committed notebook shows
        assert figures >= pictures_in(source), (source.stem, figures, pictures_in(source))
        described += figures
    assert described > 0
    assert not problems, (
        "images whose alt text does not describe them (give the figure's cell "
        "`mystnb: image: alt:` in its source):\n" + "\n".join(problems)
    )
