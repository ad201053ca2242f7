"""`pytest --nbval` compares the chapters' figures (book/nbval_figures.py, which hands
them to book/figure_compare.py): a committed figure blanked, re-scaled, re-coloured, its
rows swapped or its geometry moved fails, and float noise passes; a notebook whose figure
differs from what its code draws fails under `pytest --nbval`, naming the notebook, the
cell and the difference."""

from __future__ import annotations

import base64
import io
import os
import re
import shlex
import subprocess
import sys

import nbformat
import numpy as np
import pytest
from PIL import Image

from book import figure_compare, nbval_figures
from book.figure_compare import html_difference, png_difference, svg_difference
from book.nbval_figures import figure_differences
from tests.conftest import REPO


def committed(chapter: str, mime: str) -> list[str]:
    """The figures of one kind in a committed chapter, in order."""
    notebook = nbformat.read(REPO / "book" / f"{chapter}.ipynb", as_version=4)
    outputs = [output for cell in notebook.cells for output in cell.get("outputs", [])]
    return nbval_figures.figures(outputs, mime)


def pixels(png: str) -> np.ndarray:
    return figure_compare.decode_png(png).copy()


def png(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


# the plots of the squash (curves on axes) and of the decoder (a grid of digits)
CURVES = committed("02_squash", "image/png")[0]
DIGITS = committed("07_decoder", "image/png")[0]


def blank(image: np.ndarray) -> np.ndarray:
    return np.full_like(image, 255)


def rows_swapped(image: np.ndarray) -> np.ndarray:
    """The middle and bottom thirds swapped (the decoder's rows of digits)."""
    third = len(image) // 3
    swapped = image.copy()
    swapped[third : 2 * third] = image[2 * third : 3 * third]
    swapped[2 * third : 3 * third] = image[third : 2 * third]
    return swapped


def re_scaled(image: np.ndarray) -> np.ndarray:
    """The drawing 95% as large, on a canvas of the same size."""
    height, width = image.shape[:2]
    smaller = Image.fromarray(image).resize((width * 95 // 100, height * 95 // 100))
    scaled = np.full_like(image, 255)
    scaled[: smaller.height, : smaller.width] = np.asarray(smaller)
    return scaled


def re_coloured(image: np.ndarray) -> np.ndarray:
    """Another colour map: the ink of each channel faded differently (black and grey ink
    turn blue, the blue curves pale)."""
    ink = 255 - image[..., :3].astype(float)
    tinted = image.copy()
    tinted[..., :3] = (255 - ink * (0.2, 0.5, 1.0)).round()
    return tinted


def darker(image: np.ndarray) -> np.ndarray:
    """The ink 25% darker: greys from a changed intensity scale."""
    ink = 255 - image[..., :3].astype(float)
    scaled = image.copy()
    scaled[..., :3] = np.clip(255 - ink * 1.25, 0, 255).round()
    return scaled


def one_digit_swapped(image: np.ndarray) -> np.ndarray:
    """Two neighbouring digits of the middle row exchanged (an eighth of the width each)."""
    height, width = image.shape[:2]
    rows, panel = slice(height // 3, 2 * height // 3), width // 8
    swapped = image.copy()
    swapped[rows, 3 * panel : 4 * panel] = image[rows, 4 * panel : 5 * panel]
    swapped[rows, 4 * panel : 5 * panel] = image[rows, 3 * panel : 4 * panel]
    return swapped


def one_glyph_changed(image: np.ndarray) -> np.ndarray:
    """6 × 6 pixels (a digit of a tick label) half inverted, too few to move the whole
    figure's RMS past its tolerance."""
    changed = image.copy()
    changed[100:106, 100:106, :3] = 255 - image[100:106, 100:106, :3] // 2
    return changed


@pytest.mark.parametrize("figure", [CURVES, DIGITS], ids=["curves", "digits"])
@pytest.mark.parametrize(
    "change",
    [blank, rows_swapped, re_scaled, re_coloured, darker, one_digit_swapped, one_glyph_changed],
)
def test_a_changed_png_fails(figure, change):
    changed = change(pixels(figure))
    problem = png_difference(figure, png(changed))
    assert problem and problem.startswith("RMS "), change.__name__
    rms = float(problem.split()[1])
    assert rms > figure_compare.PNG_RMS or "but" in problem


def test_a_png_of_another_size_fails_saying_both_sizes():
    image = pixels(CURVES)
    problem = png_difference(CURVES, png(image[:-10]))
    assert problem == f"{image.shape[1]}×{image.shape[0] - 10} pixels, the committed figure " + (
        f"{image.shape[1]}×{image.shape[0]}"
    )


def test_a_small_change_fails_by_its_tile_and_says_where():
    problem = png_difference(CURVES, png(one_glyph_changed(pixels(CURVES))))
    found = re.fullmatch(
        r"RMS ([\d.]+) over the figure, but [\d.]+ > 8\.0 in the 32×32 pixels at x 96, y 96",
        problem,
    )
    assert found and float(found[1]) <= figure_compare.PNG_RMS, problem


@pytest.mark.parametrize("figure", [CURVES, DIGITS], ids=["curves", "digits"])
def test_float_noise_in_a_png_passes(figure):
    image = pixels(figure)
    generator = np.random.default_rng(0)
    # ±1 in a hundred pixels, and ±1 everywhere: RMS 1, no tile above it
    few = image.copy()
    y, x = generator.integers(0, image.shape[0], 100), generator.integers(0, image.shape[1], 100)
    few[y, x, :3] = np.clip(few[y, x, :3].astype(int) + generator.choice([-1, 1], (100, 3)), 0, 255)
    everywhere = np.clip(
        image.astype(int) + generator.choice([-1, 1], image.shape) * [1, 1, 1, 0], 0, 255
    ).astype(np.uint8)
    assert png_difference(figure, png(few)) is None
    assert png_difference(figure, png(everywhere)) is None
    assert png_difference(figure, figure) is None


# the diagrams: the primary capsules (paths, opacities, text), chapter 5's idea of routing
# (arrows, an embedded digit, lines and markers), the decoder (with the digits it draws
# embedded as PNGs)
GROUPING = committed("03_primary_capsules", "image/svg+xml")[0]
ROUTING = committed("05_routing", "image/svg+xml")[0]
DECODER = committed("07_decoder", "image/svg+xml")[0]
DIAGRAMS = [GROUPING, ROUTING, DECODER]
NAMES = ["grouping", "routing", "decoder"]
NUMBER = figure_compare.NUMBER


#: Attributes whose numbers are no geometry: XML's and SVG's versions, namespaces.
NOT_GEOMETRY = ("version", "encoding", "standalone", "xmlns")


def numbers_changed(svg: str, change, only: str = r"[\w:-]+") -> str:
    """Every number in the attributes (those named ``only``, if given) changed."""

    def attribute(match: re.Match[str]) -> str:
        name, value = match[2], match[3]
        if not (name.startswith(NOT_GEOMETRY) or value.startswith("data:")):
            value = NUMBER.sub(lambda number: repr(change(float(number[0]))), value)
        return f"{match[1]}{value}"

    return re.sub(rf'(\s({only})=")([^"]*)', attribute, svg)


def hashes_changed(svg: str) -> str:
    """matplotlib's hashed ids as another salt or other coordinates give them."""
    return figure_compare.HASHED_ID.sub(lambda m: m[1] + m[0][-10:][::-1], svg)


@pytest.mark.parametrize("svg", DIAGRAMS, ids=NAMES)
def test_float_noise_in_an_svg_passes(svg):
    generator = np.random.default_rng(0)
    noisy = numbers_changed(svg, lambda x: x + generator.uniform(-1e-6, 1e-6) * max(1, abs(x)))
    assert noisy != svg
    assert svg_difference(svg, noisy) is None
    assert svg_difference(svg, hashes_changed(noisy)) is None
    assert svg_difference(svg, svg) is None


@pytest.mark.parametrize("svg", DIAGRAMS, ids=NAMES)
def test_a_re_scaled_svg_fails(svg):
    problem = svg_difference(svg, numbers_changed(svg, lambda x: x * 1.1, only="d"))
    assert re.match(
        r"at svg/g#figure_1/.* d: \S+, committed \S+: differs by [\d.e-]+ > 0\.01 "
        r"\(and \d+ more differences\)",
        problem,
    ), problem


def test_each_kind_of_change_to_a_diagram_fails_naming_where():
    # a box moved by a point
    moved = GROUPING.replace("M 41.04 146.16", "M 42.04 146.16", 1)
    assert svg_difference(GROUPING, moved).startswith(
        "at svg/g#figure_1/g#axes_1/g#patch_2/path d: 42.04, committed 41.04: differs by 1 > 0.01"
    )
    # a line thinner, a fill more opaque
    thinner = GROUPING.replace("stroke-width: 0.8", "stroke-width: 0.7", 1)
    assert "patch_2/path style: 0.7, committed 0.8" in svg_difference(GROUPING, thinner)
    paler = GROUPING.replace("opacity: 0.12", "opacity: 0.2", 1)
    assert "patch_3/path style: 0.2, committed 0.12" in svg_difference(GROUPING, paler)
    # re-coloured: colours are compared exactly
    recoloured = GROUPING.replace("fill: #0072b2", "fill: #d55e00", 1)
    assert "style: 'fill: #d55e00; opacity: 0.12', committed 'fill: #0072b2; opacity: 0.12'" in (
        svg_difference(GROUPING, recoloured)
    )
    # a text shown: its words and digits exactly
    relabelled = ROUTING.replace(">agreement 0.95<", ">agreement 0.96<", 1)
    assert relabelled != ROUTING
    assert "text: 'agreement 0.96', committed 'agreement 0.95'" in (
        svg_difference(ROUTING, relabelled)
    )
    # a shape left out
    dropped = re.sub(r'<g id="patch_4">.*?</g>', "", GROUPING, count=1, flags=re.S)
    assert "g#axes_1: " in svg_difference(GROUPING, dropped)
    assert "elements inside, committed" in svg_difference(GROUPING, dropped)


def test_hashed_ids_are_compared_by_where_they_are_used():
    clips = list(dict.fromkeys(re.findall(r"url\(#(p[0-9a-f]{10})\)", ROUTING)))
    assert len(clips) > 1
    # one path clipped by another axes' box: the ids differ by use, not by their digits
    elsewhere = ROUTING.replace(f"url(#{clips[0]})", f"url(#{clips[1]})", 1)
    assert re.match(
        r"at svg/g#figure_1/g#axes_1/\S+ clip-path: 'url\(#p-\d+\)', committed "
        r"'url\(#p-\d+\)'$",
        svg_difference(ROUTING, elsewhere),
    )


def test_a_png_embedded_in_an_svg_is_compared_as_a_png():
    embedded = re.search(r"data:image/png;base64,([^\"]+)", DECODER)[1]
    image = pixels(embedded)
    noise = image.copy()
    noise[0, 0, :3] = np.clip(noise[0, 0, :3].astype(int) + 1, 0, 255)
    assert svg_difference(DECODER, DECODER.replace(embedded, png(noise))) is None
    problem = svg_difference(DECODER, DECODER.replace(embedded, png(blank(image))))
    assert re.search(r"image#image-\d+ href: embedded image/png: RMS [\d.]+ > 2\.0", problem)


def test_a_cell_with_a_figure_more_or_less_fails():
    one = [{"output_type": "display_data", "data": {"image/png": CURVES}}]
    assert figure_differences(one, one) == []
    assert figure_differences(one, one * 2) == [
        "drew 2 image/png figure(s), the committed cell has 1"
    ]
    assert figure_differences(one * 2, one + [{"data": {"image/png": DIGITS}}]) == [
        "image/png 2 of 2 differs from the committed figure: " + png_difference(CURVES, DIGITS)
    ]


# chapter 5's player of routing's iterations: an HTML page whose frames are embedded PNGs
PLAYER = committed("05_routing", "text/html")[0]
PLAYER_TEXT, FRAMES = figure_compare.html_images(PLAYER)


def frame_changed(page: str, number: int, change) -> str:
    """The page with frame ``number`` (from 1) replaced by ``change`` of its pixels."""
    match = list(figure_compare.HTML_PNG.finditer(page))[number - 1]
    changed = png(change(pixels(FRAMES[number - 1])))
    return page[: match.start(1)] + changed + page[match.end(1) :]


def test_the_player_s_frames_are_its_embedded_pngs():
    assert len(FRAMES) >= 3
    assert "data:image/png;base64" not in PLAYER_TEXT.replace("base64,<image", "")
    assert all(f"<image {k}>" in PLAYER_TEXT for k in range(1, len(FRAMES) + 1))
    shapes = {pixels(frame).shape for frame in FRAMES}
    assert len(shapes) == 1  # every frame the same size


@pytest.mark.parametrize("number", [1, 3])
def test_a_planted_change_to_one_frame_fails_naming_it(number):
    changed = frame_changed(PLAYER, number, one_glyph_changed)
    assert figure_compare.html_images(changed)[0] == PLAYER_TEXT  # only the frame moved
    problem = html_difference(PLAYER, changed)
    assert problem.startswith(f"image {number} of {len(FRAMES)} (image/png): RMS "), problem
    assert figure_differences(
        [{"data": {"text/html": PLAYER}}], [{"data": {"text/html": changed}}]
    ) == [f"text/html differs from the committed figure: {problem}"]
    swapped = frame_changed(PLAYER, number, lambda _: pixels(FRAMES[number % len(FRAMES)]))
    assert html_difference(PLAYER, swapped).startswith(f"image {number} of ")


def test_float_noise_in_a_frame_passes():
    generator = np.random.default_rng(0)
    image = pixels(FRAMES[1])
    noisy = np.clip(
        image.astype(int) + generator.choice([-1, 1], image.shape) * [1, 1, 1, 0], 0, 255
    ).astype(np.uint8)
    page = frame_changed(PLAYER, 2, lambda _: noisy)
    assert page != PLAYER
    assert html_difference(PLAYER, page) is None
    assert (
        figure_differences([{"data": {"text/html": PLAYER}}], [{"data": {"text/html": page}}]) == []
    )
    measured = figure_compare.figure_measure("text/html", PLAYER, page)
    assert measured["problem"] is None and 0 < measured["rms"] <= figure_compare.PNG_RMS
    assert measured["number"] == 0  # no geometry: what the noise record reads of an SVG


def test_a_changed_player_text_fails():
    slower = PLAYER.replace(
        "new Animation(frames, img_id, slider_id, 1000",
        "new Animation(frames, img_id, slider_id, 900",
        1,
    )
    assert slower != PLAYER
    problem = html_difference(PLAYER, slower)
    assert problem.startswith("the text outside its images differs at character "), problem
    # nbval compares the same text: the images out, the rest as it is
    ours = nbval_figures.images_as_placeholders([{"data": {"text/html": slower}}])
    assert ours[0]["data"]["text/html"] != PLAYER_TEXT
    last = list(figure_compare.HTML_PNG.finditer(PLAYER))[-1]
    fewer = PLAYER[: last.start()] + PLAYER[last.end() :]
    assert html_difference(PLAYER, fewer) == (
        f"embeds {len(FRAMES) - 1} image/png, the committed output {len(FRAMES)}"
    )
    assert "the committed cell has" not in " ".join(
        figure_differences([{"data": {"text/html": PLAYER}}], [{"data": {"text/html": slower}}])
    )


def test_an_ordinary_html_output_is_left_to_nbval_whole():
    ordinary = [{"output_type": "display_data", "data": {"text/html": "<b>r = 3</b>"}}]
    # not compared here, and handed to nbval untouched, so it is compared exactly
    assert nbval_figures.figures(ordinary, "text/html") == []
    assert nbval_figures.images_as_placeholders(ordinary) == ordinary
    assert figure_differences(ordinary, [{"data": {"text/html": "<b>r = 1</b>"}}]) == []
    # and the player handed to nbval keeps its text, its images numbered
    player = [{"data": {"text/html": PLAYER, "text/plain": "<IPython.core.display.HTML object>"}}]
    handed = nbval_figures.images_as_placeholders(player)
    assert handed[0]["data"]["text/html"] == PLAYER_TEXT
    assert handed[0]["data"]["text/plain"] == player[0]["data"]["text/plain"]
    assert player[0]["data"]["text/html"] == PLAYER  # the outputs nbval reports stay whole


#: The case tests/test_environment.py made for the sanitizer this comparison replaces.
FRAGMENT = (
    '<svg xmlns:xlink="http://www.w3.org/1999/xlink"><g id="patch_3">'
    '<path d="M 46.8 73.688604 L {x} 73.688604 z" clip-path="url(#p{clip})" '
    'style="fill: #d55e00; opacity: {alpha}"/></g>'
    '<text x="{x}" y="80.5" style="font-size: 9px">{label}</text>'
    '<use xlink:href="#m{clip}" x="{x}" y="3"/><clipPath id="p{clip}"/><path id="m{clip}"/></svg>'
)


def test_a_diagram_s_float_noise_passes_and_what_it_shows_does_not():
    one = FRAGMENT.format(x="51.335346", clip="cdca8b8c59", alpha="0.7", label="r = 3")
    noisy = FRAGMENT.format(x="51.335345", clip="0123456789", alpha="0.700001", label="r = 3")
    relabelled = FRAGMENT.format(x="51.335346", clip="cdca8b8c59", alpha="0.7", label="r = 2")
    assert svg_difference(one, noisy) is None
    assert svg_difference(one, relabelled) == "at svg/text text: 'r = 2', committed 'r = 3'"
    assert "'fill: #0072b2; opacity: 0.7', committed 'fill: #d55e00; opacity: 0.7'" in (
        svg_difference(one, one.replace("#d55e00", "#0072b2"))
    )


def run_pytest(arguments: str, cwd, **environment: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", *shlex.split(arguments)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **environment},
    )


@pytest.mark.slow
def test_the_readme_command_collects_the_figure_comparing_cells():
    """`pytest --nbval` (book/conftest.py registers the plugin) collects its cells."""
    collected = run_pytest("--nbval --collect-only -n 0 book/02_squash.ipynb", cwd=REPO)
    assert "<FigureNotebook 02_squash.ipynb>" in collected.stdout, collected.stdout
    assert "<FigureCell Cell 0>" in collected.stdout
    assert "<IPyNbCell" not in collected.stdout


#: What the synthetic notebook's cells draw: the same function in this process (for the
#: committed outputs) and in the kernel.
DRAW = """\
import base64, io
from matplotlib.figure import Figure

def draw(slope, format):
    figure = Figure(figsize=(2, 1.5), dpi=50)
    axes = figure.add_subplot()
    axes.plot([0, 1, 2], [0, slope, 2 * slope], color="#0072B2")
    axes.set_ylim(0, 2)
    buffer = io.BytesIO()
    figure.savefig(buffer, format=format, metadata={"Date": None} if format == "svg" else {})
    if format == "svg":
        return buffer.getvalue().decode()
    return base64.b64encode(buffer.getvalue()).decode()


def page(slope, text, png=None):
    # a player's page: text, and the PNG in a script, broken into lines ending in a
    # backslash as matplotlib's player breaks its frames
    data = png or draw(slope, "png")
    lines = "\\\\\\n".join(data[k : k + 76] for k in range(0, len(data), 76))
    return f'<p>{text}</p><script>var frame = "data:image/png;base64,{lines}";</script>'
"""


def cell(source: str, number: int, figure: tuple[str, str] | None = None):
    outputs = []
    if figure:
        outputs.append(nbformat.v4.new_output("display_data", data=dict([figure])))
    return nbformat.v4.new_code_cell(source, execution_count=number, outputs=outputs)


@pytest.mark.slow
def test_a_notebook_whose_figure_differs_from_what_it_draws_fails(tmp_path):
    scope: dict = {}
    exec(DRAW, scope)
    draw = scope["draw"]
    noisy_png = pixels(draw(1.0, "png"))
    noisy_png[5, 5, :3] = np.clip(noisy_png[5, 5, :3].astype(int) - 1, 0, 255)
    noisy_svg = numbers_changed(draw(1.0, "svg"), lambda x: x + 1e-6)
    show_png = 'display({"image/png": draw(1.0, "png")}, raw=True)'
    show_svg = 'display({"image/svg+xml": draw(1.0, "svg")}, raw=True)'
    show_page = 'display({"text/html": page(1.0, "iteration 1")}, raw=True)'
    show_html = 'display({"text/html": "<b>r = 3</b>"}, raw=True)'
    page = scope["page"]
    notebook = nbformat.v4.new_notebook(
        cells=[
            cell(DRAW, 1),
            cell(show_png, 2, ("image/png", png(noisy_png))),  # float noise: passes
            cell(show_png, 3, ("image/png", draw(0.8, "png"))),  # another slope: fails
            cell(show_svg, 4, ("image/svg+xml", noisy_svg)),  # (and another hash salt)
            cell(show_svg, 5, ("image/svg+xml", draw(0.8, "svg"))),
            # a page with an embedded PNG: its frame's noise passes, another frame or
            # another text fails; an ordinary HTML output is compared exactly
            cell(show_page, 6, ("text/html", page(1.0, "iteration 1", png(noisy_png)))),
            cell(show_page, 7, ("text/html", page(0.8, "iteration 1"))),
            cell(show_page, 8, ("text/html", page(1.0, "iteration 2"))),
            cell(show_html, 9, ("text/html", "<b>r = 1</b>")),
            cell(show_html, 10, ("text/html", "<b>r = 3</b>")),
        ]
    )
    nbformat.write(notebook, tmp_path / "drawn.ipynb")
    run = run_pytest(
        "-p no:cacheprovider -o addopts= -p book.nbval_figures --nbval --nbval-current-env "
        "--color=no -q drawn.ipynb",
        cwd=tmp_path,
        PYTHONPATH=str(REPO),
        COLUMNS="300",  # the summary's lines whole
    )
    report = run.stdout + run.stderr
    assert run.returncode == 1, report
    assert "5 failed, 5 passed" in report, report
    assert re.search(
        r"FAILED drawn.ipynb::Cell 2 - drawn.ipynb cell 2: image/png differs "
        r"from the committed figure: RMS [\d.]+ > 2\.0",
        report,
    ), report
    assert re.search(
        r"FAILED drawn.ipynb::Cell 4 - drawn.ipynb cell 4: image/svg\+xml "
        r"differs from the committed figure: at svg/g#figure_1/g#axes_1/"
        r"g#line2d_\d+/path d: [\d.]+, committed [\d.]+",
        report,
    ), report
    assert re.search(
        r"FAILED drawn.ipynb::Cell 6 - drawn.ipynb cell 6: text/html differs from the "
        r"committed figure: image 1 of 1 \(image/png\): RMS [\d.]+ > 2\.0",
        report,
    ), report
    assert re.search(
        r"FAILED drawn.ipynb::Cell 7 - drawn.ipynb cell 7: text/html differs from the "
        r"committed figure: the text outside its images differs at character 13",
        report,
    ), report
    # nbval's own comparison of an ordinary HTML output, exact
    assert "FAILED drawn.ipynb::Cell 8" in report, report
    assert "'<b>r = 1</b>' == '<b>r = 3</b>'" in report, report
