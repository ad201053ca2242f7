"""Two figures compared as pictures within a tolerance, for `pytest --nbval`
(``nbval_figures.py``, which finds a cell's figures and hands them here): a difference
that float noise makes passes, one that changes what a figure shows fails.

nbval compares a cell's outputs as text. It leaves PNG images out (it compares their bytes
only under ``--nbdime``, and bytes differ with any float noise), and an SVG is one long
string whose coordinates carry float noise too. nbval has no image comparison of its own
(pytest-mpl compares the figures test functions return, not a notebook's outputs), so this
module compares them:

* a PNG is decoded (with Pillow, which matplotlib needs) and must have the committed size
  and an RMS difference from the committed pixels (the measure of
  ``matplotlib.testing.compare.calculate_rms``) of at most :data:`PNG_RMS` levels of 255
  over the whole figure and of at most :data:`TILE_RMS` over any :data:`TILE` ×
  :data:`TILE` pixels: the first catches a change spread over the figure, the second one
  confined to a corner of it (a label, one digit of a grid), which the whole figure's
  mean dilutes;
* an SVG is parsed and must have the committed elements, attributes and texts; every
  number in an attribute (path data, positions, sizes, transforms, widths, opacities)
  may differ from the committed one by at most :data:`SVG_ATOL`, everything between the
  numbers (commands, colours, fonts) must be the same; a PNG embedded in it is compared
  as a PNG; and the ids matplotlib derives from a hash of coordinates or pixels are
  compared by where they are used, not by their digits;
* an HTML output that embeds PNGs (``data:image/png;base64,...``: the frames of an
  animation's player, ``capsbook.animation``) is compared as its text with each image
  replaced by a numbered placeholder, exactly, by nbval as it compares any HTML, and each
  image as a PNG, here; every other HTML output is left to nbval, compared exactly.
"""

from __future__ import annotations

import base64
import io
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from typing import Any

import numpy as np
from PIL import Image

#: The kind of output whose embedded PNGs are compared here (its text by nbval).
HTML = "text/html"

#: The largest RMS differences, in levels of 255 per channel, of a PNG from the committed
#: one, over the figure and over a tile. Float noise changes a few pixels by a level or so
#: (chapter 5's first plot with AVX2 kernels: 23 pixels by 1, RMS 0.005); data off by 1e-5
#: of itself (a lot for float32) moves antialiased edges by a few: RMS 0.13 over a plot,
#: 0.9 over its worst tile; data off by 1e-3 (curves moved by a fifth of a pixel) come
#: near the limits, at 1.3 and 7.4. A figure blanked, re-scaled, re-coloured or darkened,
#: its rows or two digits swapped differs by 6 to 70 over the figure, one glyph changed by
#: 20 over its tile (tests/test_figures.py plants each); moved by one pixel, by 20 to 30.
PNG_RMS = 2.0
TILE_RMS = 8.0
TILE = 32
#: The largest difference of a number in an SVG from the committed one: in points for
#: positions, sizes and widths, in degrees for rotations, as a fraction for opacities.
#: 0.01 of any of them is invisible; float noise is a thousandth of it (chapter 5's routing
#: diagram, drawn from a trained model with AVX2 kernels: 9e-6 at most).
SVG_ATOL = 0.01

#: A number in an attribute: not the digits of a name (patch_3, DejaVuSans-30) or colour.
NUMBER = re.compile(r"(?<![\w#.])(?<!\w-)([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")
#: The ids matplotlib makes from a hash of clip boxes, markers and images.
HASHED_ID = re.compile(r"\b(image|[pm])[0-9a-f]{10}\b")
DEFINED_ID = re.compile(rf'\bid="({HASHED_ID.pattern})"')
EMBEDDED_PNG = "data:image/png;base64,"
#: A PNG embedded in HTML: base64, which matplotlib's player breaks into JavaScript lines
#: that end in a backslash.
HTML_PNG = re.compile(r"data:image/png;base64,((?:[A-Za-z0-9+/=]|\\\n)+)")


def decode_png(data: str | bytes) -> np.ndarray:
    """A PNG, base64 as notebooks store it, as an array of height × width × RGBA."""
    with Image.open(io.BytesIO(base64.b64decode(data))) as image:
        return np.asarray(image.convert("RGBA"))


def png_measure(committed: str | bytes, drawn: str | bytes) -> dict[str, float] | str:
    """How far a PNG is from the committed one: the RMS difference over the figure
    (``rms``) and over its worst tile (``tile``, whose corner is ``x``, ``y``), or, when
    the sizes differ, a sentence saying both."""
    old, new = decode_png(committed), decode_png(drawn)
    if old.shape != new.shape:
        return (
            f"{new.shape[1]}×{new.shape[0]} pixels, "
            f"the committed figure {old.shape[1]}×{old.shape[0]}"
        )
    # alpha counts only where a figure is transparent somewhere (as matplotlib's compare)
    channels = 4 if (old[..., 3] < 255).any() or (new[..., 3] < 255).any() else 3
    squared = ((old[..., :channels].astype(float) - new[..., :channels]) ** 2).mean(axis=-1)
    # the mean of each tile (those at the right and bottom edges may be smaller)
    rows, columns = np.arange(0, squared.shape[0], TILE), np.arange(0, squared.shape[1], TILE)
    sums = np.add.reduceat(np.add.reduceat(squared, rows, axis=0), columns, axis=1)
    sizes = np.outer(np.diff([*rows, squared.shape[0]]), np.diff([*columns, squared.shape[1]]))
    row, column = np.unravel_index(np.argmax(sums / sizes), sums.shape)
    return {
        "rms": float(np.sqrt(squared.mean())),
        "tile": float(np.sqrt(sums[row, column] / sizes[row, column])),
        "x": int(columns[column]),
        "y": int(rows[row]),
    }


def png_difference(committed: str | bytes, drawn: str | bytes) -> str | None:
    """What differs between two PNGs beyond float noise, or None."""
    if committed == drawn:
        return None
    measured = png_measure(committed, drawn)
    if isinstance(measured, str):
        return measured
    rms, worst = measured["rms"], measured["tile"]
    if rms > PNG_RMS:
        return f"RMS {rms:.2f} > {PNG_RMS}"
    if worst > TILE_RMS:
        return (
            f"RMS {rms:.2f} over the figure, but {worst:.2f} > {TILE_RMS} in the "
            f"{TILE}×{TILE} pixels at x {measured['x']}, y {measured['y']}"
        )
    return None


def canonical_ids(svg: str) -> str:
    """The SVG with each hashed id renamed by the order of its definition (``id="..."``):
    a clip box or marker used where the committed figure uses another still differs."""
    names: dict[str, str] = {}
    for match in DEFINED_ID.finditer(svg):
        names.setdefault(match[1], f"{match[2]}-{len(names)}")
    return HASHED_ID.sub(lambda used: names.setdefault(used[0], f"{used[1]}-{len(names)}"), svg)


def _shorten(text: str, width: int = 60) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= width else text[: width - 1] + "…")


class Measured:
    """The largest differences an SVG comparison saw, within its tolerances or not: of a
    number (``number``) and of an embedded PNG (``rms``, ``tile``). The noise record
    (tools/measure_noise.py) keeps them."""

    def __init__(self) -> None:
        self.number = self.rms = self.tile = 0.0

    def as_dict(self) -> dict[str, float]:
        return {"number": self.number, "rms": self.rms, "tile": self.tile}

    def png(self, committed: str | bytes, drawn: str | bytes) -> str | None:
        """:func:`png_difference` of two PNGs that differ, keeping their RMS differences."""
        seen = png_measure(committed, drawn)
        if not isinstance(seen, str):
            self.rms, self.tile = max(self.rms, seen["rms"]), max(self.tile, seen["tile"])
        return png_difference(committed, drawn)


def attribute_difference(
    committed: str, drawn: str, measured: Measured | None = None
) -> str | None:
    """What differs between two attribute values, the numbers in them within
    :data:`SVG_ATOL`; ``measured`` keeps the largest differences seen."""
    if committed == drawn:
        return None
    measured = measured or Measured()
    if committed.startswith(EMBEDDED_PNG) and drawn.startswith(EMBEDDED_PNG):
        problem = measured.png(committed[len(EMBEDDED_PNG) :], drawn[len(EMBEDDED_PNG) :])
        return problem and f"embedded image/png: {problem}"
    # NUMBER's group makes split alternate: text, number, text, ..., text
    old, new = NUMBER.split(committed), NUMBER.split(drawn)
    if len(old) != len(new) or old[::2] != new[::2]:
        return f"{_shorten(drawn)}, committed {_shorten(committed)}"
    differences = [abs(float(a) - float(b)) for a, b in zip(old[1::2], new[1::2])]
    measured.number = max([measured.number, *differences])
    for a, b, difference in zip(old[1::2], new[1::2], differences):
        if difference > SVG_ATOL:
            return f"{b}, committed {a}: differs by {difference:.4g} > {SVG_ATOL}"
    return None


def _name(element: ElementTree.Element) -> str:
    tag = element.tag.rsplit("}", 1)[-1]
    return f"{tag}#{element.get('id')}" if element.get("id") else tag


def _element_differences(
    old: ElementTree.Element, new: ElementTree.Element, where: str, measured: Measured
) -> Iterator[str]:
    where = f"{where}/{_name(new)}"
    if old.tag != new.tag:
        yield f"{where}: the committed figure has {_name(old)} here"
        return
    if set(old.attrib) != set(new.attrib):
        yield f"{where}: attributes {sorted(new.attrib)}, committed {sorted(old.attrib)}"
        return
    for key in old.attrib:
        problem = attribute_difference(old.attrib[key], new.attrib[key], measured)
        if problem:
            yield f"{where} {key.rsplit('}', 1)[-1]}: {problem}"
    for part in ("text", "tail"):  # the text shown, exactly; indentation aside
        a, b = (getattr(old, part) or "").strip(), (getattr(new, part) or "").strip()
        if a != b:
            yield f"{where} {part}: {_shorten(b)}, committed {_shorten(a)}"
    if len(old) != len(new):
        yield f"{where}: {len(new)} elements inside, committed {len(old)}"
        return
    for a, b in zip(old, new):
        yield from _element_differences(a, b, where, measured)


def svg_difference(committed: str, drawn: str, measured: Measured | None = None) -> str | None:
    """The first difference between two SVGs beyond float noise (and how many there are),
    or None; ``measured`` keeps the largest differences seen, within the tolerances or
    not."""
    if committed == drawn:
        return None
    try:
        old = ElementTree.fromstring(canonical_ids(committed))
        new = ElementTree.fromstring(canonical_ids(drawn))
    except ElementTree.ParseError as error:  # not XML: the same text or a difference
        return f"differs, and is not XML to compare within a tolerance ({error})"
    problems = list(_element_differences(old, new, "", measured or Measured()))
    if not problems:
        return None
    more = f" (and {len(problems) - 1} more differences)" if len(problems) > 1 else ""
    return f"at {problems[0].lstrip('/')}{more}"


def html_images(html: str | list[str]) -> tuple[str, list[str]]:
    """An HTML output's text with each embedded PNG replaced by a numbered placeholder
    (``data:image/png;base64,<image 1>``, ...), and the PNGs, base64 without the line
    breaks."""
    html = "".join(html) if isinstance(html, list) else html
    images: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        images.append(match[1].replace("\\\n", ""))
        return f"{EMBEDDED_PNG}<image {len(images)}>"

    return HTML_PNG.sub(placeholder, html), images


def has_images(html: str | list[str]) -> bool:
    """Whether an HTML output embeds a PNG (and so is compared here as well)."""
    return EMBEDDED_PNG in ("".join(html) if isinstance(html, list) else html)


def html_difference(committed: str, drawn: str, measured: Measured | None = None) -> str | None:
    """What differs between two HTML outputs that embed PNGs: their text outside the
    images, exactly, then each image as a PNG (the first that differs, named by its place:
    an animation's frame); ``measured`` keeps the largest differences seen."""
    measured = measured or Measured()
    old_text, old_images = html_images(committed)
    new_text, new_images = html_images(drawn)
    if len(old_images) != len(new_images):
        return f"embeds {len(new_images)} image/png, the committed output {len(old_images)}"
    if old_text != new_text:
        at = next(
            (k for k, (a, b) in enumerate(zip(old_text, new_text)) if a != b),
            min(len(old_text), len(new_text)),
        )
        return (
            f"the text outside its images differs at character {at}: "
            f"{_shorten(new_text[at : at + 40])}, committed {_shorten(old_text[at : at + 40])}"
        )
    problems = []
    for number, (a, b) in enumerate(zip(old_images, new_images), 1):
        if a == b:
            continue
        try:
            problem = measured.png(a, b)
        except (ValueError, OSError) as error:  # not a PNG that Pillow decodes
            problems.append(f"image {number} of {len(old_images)} is no PNG to compare ({error})")
            continue
        if problem:
            problems.append(f"image {number} of {len(old_images)} (image/png): {problem}")
    if not problems:
        return None
    more = f" (and {len(problems) - 1} more images)" if len(problems) > 1 else ""
    return problems[0] + more


def figure_measure(mime: str, committed: str, drawn: str) -> dict[str, Any]:
    """How far a figure is from the committed one, for the noise record: a PNG's RMS over
    the figure and its worst tile; an SVG's largest number difference (and its embedded
    PNGs'); an HTML output's embedded PNGs' (its ``number`` 0: it has no geometry);
    ``problem``, what the comparison reports (None: it passes)."""
    if mime == "image/png":
        seen = png_measure(committed, drawn)
        numbers = {} if isinstance(seen, str) else {k: seen[k] for k in ("rms", "tile")}
        return numbers | {"problem": png_difference(committed, drawn)}
    measured = Measured()
    compare = html_difference if mime == HTML else svg_difference
    problem = compare(committed, drawn, measured)
    return measured.as_dict() | {"problem": problem}
