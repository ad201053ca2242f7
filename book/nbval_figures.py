"""The figures of `pytest --nbval`, compared as pictures within a tolerance
(``figure_compare.py`` says how and why), in the same run as nbval's own comparison of
every other output.

How it hooks nbval: :func:`pytest_collect_file` wraps nbval's own and swaps each notebook
it collects for a :class:`FigureNotebook`, whose cells are :class:`FigureCell`\\ s: nbval's
cell, which runs the code and compares every output as nbval does except the figures,
then compares the figures (:func:`figure_differences`). ``book/conftest.py`` registers
this module; a run outside book/ names it with ``-p book.nbval_figures``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from nbval.plugin import IPyNbCell, IPyNbFile

from book.figure_compare import (
    HTML,
    figure_measure,
    has_images,
    html_difference,
    html_images,
    png_difference,
    svg_difference,
)

#: The kinds of output nbval leaves to this module, whole.
FIGURES = ("image/png", "image/svg+xml")
#: The kinds compared here, and how: the HTML outputs among them only where they embed
#: PNGs (:func:`figures`).
COMPARE = {"image/png": png_difference, "image/svg+xml": svg_difference, HTML: html_difference}


def figures(outputs: Iterable[dict], mime: str) -> list[str]:
    """The outputs of kind ``mime``, in order; of HTML, only those that embed a PNG."""
    found = [output["data"][mime] for output in outputs if mime in output.get("data", {})]
    if mime == HTML:
        return [
            "".join(html) if isinstance(html, list) else html for html in found if has_images(html)
        ]
    return found


def images_as_placeholders(outputs: Sequence[dict]) -> list[dict]:
    """The outputs, each HTML output that embeds PNGs with its images replaced by
    numbered placeholders (:func:`html_images`), for nbval to compare the rest exactly."""
    replaced = []
    for output in outputs:
        data = output.get("data", {})
        if HTML in data and has_images(data[HTML]):
            output = type(output)(output)  # a shallow copy: nbval's own stays whole
            output["data"] = type(data)(data)
            output["data"][HTML] = html_images(data[HTML])[0]
        replaced.append(output)
    return replaced


def figure_differences(committed: Sequence[dict], drawn: Sequence[dict]) -> list[str]:
    """What differs between the figures of a cell's committed outputs and those it drew,
    one line each, paired in order for each kind of figure."""
    problems = []
    for mime, compare in COMPARE.items():
        old, new = figures(committed, mime), figures(drawn, mime)
        if len(old) != len(new):
            kind = f"{mime} output(s) with images" if mime == HTML else f"{mime} figure(s)"
            problems.append(f"drew {len(new)} {kind}, the committed cell has {len(old)}")
            continue
        for number, (a, b) in enumerate(zip(old, new), 1):
            problem = compare(a, b)
            if problem:
                which = f"{mime} {number} of {len(old)}" if len(old) > 1 else mime
                problems.append(f"{which} differs from the committed figure: {problem}")
    return problems


def figure_measures(committed: Sequence[dict], drawn: Sequence[dict]) -> list[dict[str, Any]]:
    """:func:`figure_measure` of each pair of a cell's figures, paired in order for each
    kind, with the kind and the figure's place among them."""
    return [
        {"mime": mime, "figure": number} | figure_measure(mime, a, b)
        for mime in COMPARE
        for number, (a, b) in enumerate(zip(figures(committed, mime), figures(drawn, mime)), 1)
    ]


class FigureCell(IPyNbCell):
    """nbval's cell, whose figures are compared by :func:`figure_differences`; with
    ``--figure-log FILE`` each figure's distance from the committed one is appended to
    FILE as a line of JSON (the noise record's measurements, tools/measure_noise.py)."""

    figure_problems: Sequence[str] = ()

    def compare_outputs(self, test, ref, skip_compare=None):
        # nbval compares the other outputs (through the sanitizer); a figure more or less
        # than committed is counted here, where nbval no longer sees figures
        skip = tuple(skip_compare or self.parent.skip_compare) + FIGURES
        # an HTML output's embedded PNGs likewise: nbval compares its text around them
        same = super().compare_outputs(
            images_as_placeholders(test), images_as_placeholders(ref), skip_compare=skip
        )
        where = f"{self.nodeid.split('::')[0]} cell {self.cell_num}"
        self.figure_problems = [f"{where}: {p}" for p in figure_differences(ref, test)]
        log = self.config.getoption("figure_log", default=None)
        if log:
            with open(log, "a") as lines:
                for measure in figure_measures(ref, test):
                    entry = {"notebook": self.nodeid.split("::")[0], "cell": self.cell_num}
                    lines.write(json.dumps(entry | measure) + "\n")
        return same and not self.figure_problems

    def repr_failure(self, excinfo):
        """The figures' differences, then nbval's report (its input, and how the other
        outputs differ, if they do): the first line is the one pytest's summary shows."""
        return "\n".join([*self.figure_problems, super().repr_failure(excinfo)])


class FigureNotebook(IPyNbFile):
    """nbval's notebook, whose cells are :class:`FigureCell`\\ s."""

    def collect(self):
        for cell in super().collect():
            yield FigureCell.from_parent(
                self, name=cell.name, cell_num=cell.cell_num, cell=cell.cell, options=cell.options
            )


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path, parent):
    """nbval's notebooks, as :class:`FigureNotebook`\\ s (nbval's hook makes an
    ``IPyNbFile`` of each ``.ipynb`` under ``--nbval``; this one wraps it)."""
    collected = yield
    return [
        FigureNotebook.from_parent(parent, path=file_path) if type(node) is IPyNbFile else node
        for node in collected
    ]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--figure-log",
        default=None,
        help="append each compared figure's distance from the committed one to this "
        "file, a line of JSON each (tools/measure_noise.py reads it)",
    )
