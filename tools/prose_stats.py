"""How much running prose the book's chapters hold, and how long its sentences are.

    python tools/prose_stats.py            # every chapter, and the book
    python tools/prose_stats.py --long     # also every sentence over 45 words

Counted is the MyST source (``book/*.md``) outside code cells, math (``$...$``,
``$$...$$``), directives' option lines, HTML blocks, tables, headings and collapsed boxes
(``:class: dropdown``, ``{admonition}`` with ``dropdown``, and the ``{toggle}``
directive); and, in a column of their own and in the total, the figures' captions and
alternative texts, which a code cell keeps in its metadata (``mystnb: figure: caption``
and ``mystnb: image: alt``): a reader reads them, and a screen reader reads the alt.
Roles count as their visible text (a citation as one word). A sentence ends at ``.``,
``?`` or ``!`` followed by a space and a capital, a digit, a quote or a bracket, or at
the end of a paragraph.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tyro
import yaml

BOOK = Path(__file__).resolve().parents[1] / "book"

FENCE = re.compile(r"^(`{3,}|:{3,})(.*)$")
ROLE = re.compile(r"\{[a-z:]+\}`([^`]*)`")
SENTENCE_END = re.compile(r"(?<=[.?!])\s+(?=[A-Z0-9(\"'“*_`\[])")


def prose_paragraphs(text: str) -> list[str]:
    """The running prose of a MyST chapter, paragraph by paragraph."""
    if text.startswith("---\n"):
        text = text[text.index("\n---\n", 4) + 5 :]
    lines = text.splitlines()
    kept: list[str] = []
    fences: list[str] = []  # open fences: the marker of each, innermost last
    skipping_depth = None  # depth at which a skipped block opened
    in_math = False
    for line in lines:
        stripped = line.strip()
        fence = FENCE.match(stripped)
        if fence:
            marker, rest = fence.groups()
            if fences and marker == fences[-1] and not rest.strip():
                fences.pop()
                if skipping_depth is not None and len(fences) < skipping_depth:
                    skipping_depth = None
                kept.append("")
                continue
            fences.append(marker)
            name = rest.strip()
            prose_block = name.startswith(("{note}", "{tip}", "{important}", "{warning}"))
            if skipping_depth is None and not prose_block:
                skipping_depth = len(fences)
            kept.append("")
            continue
        if skipping_depth is not None:
            continue
        if fences and stripped.startswith(":") and re.match(r"^:[\w-]+:", stripped):
            if "dropdown" in stripped:
                skipping_depth = len(fences)
            continue
        if in_math or stripped.startswith("$$"):
            # display math: its closing $$ may end a line of the equation
            if stripped.count("$$") % 2:
                in_math = not in_math
            kept.append("")
            continue
        label = re.fullmatch(r"\([\w-]+\)=", stripped)  # a MyST target, (name)=
        if label or stripped.startswith(("#", "<", "|", "+++")):
            kept.append("")
            continue
        kept.append(line)
    paragraphs = "\n".join(kept).split("\n\n")
    cleaned = []
    for paragraph in paragraphs:
        paragraph = re.sub(r"\$[^$]+\$", "x", paragraph)  # inline math: one word
        paragraph = ROLE.sub(lambda m: m.group(1).split("<")[0] or "x", paragraph)
        paragraph = " ".join(paragraph.split())
        if paragraph:
            cleaned.append(paragraph)
    return cleaned


CELL_OPTIONS = re.compile(r"^```\{code-cell\}[^\n]*\n---\n(.*?)\n---\n", re.M | re.S)


def figure_texts(text: str) -> list[str]:
    """The captions and alternative texts of a MyST chapter's figures (its code cells'
    ``mystnb`` options), each as one paragraph."""
    found = []
    for block in CELL_OPTIONS.findall(text):
        options = (yaml.safe_load(block) or {}).get("mystnb", {})
        for section, key in (("figure", "caption"), ("image", "alt")):
            value = options.get(section, {}).get(key)
            if value:
                found.append(" ".join(str(value).split()))
    return found


def sentences(paragraph: str) -> list[str]:
    return [s for s in SENTENCE_END.split(paragraph) if s.strip()]


def words(text: str) -> int:
    return len(re.findall(r"[\w’'%.,-]+", text))


@dataclass(frozen=True)
class Options:
    """Count each chapter's running prose and the length of its sentences."""

    long: bool = False
    """also print every sentence over 45 words"""


def main(argv: Sequence[str] | None = None) -> int:
    options = tyro.cli(
        Options,
        args=argv,
        prog="python tools/prose_stats.py",
        config=(tyro.conf.FlagCreatePairsOff,),
    )
    total_words, all_sentences = 0, []
    print(
        f"{'chapter':32s} {'prose':>6s} {'figures':>7s} {'words':>6s} {'sentences':>9s} "
        f"{'mean':>5s} {'>45':>4s}"
    )
    for path in sorted(BOOK.glob("*.md")):
        text = path.read_text()
        prose = [s for p in prose_paragraphs(text) for s in sentences(p)]
        figures = [s for p in figure_texts(text) for s in sentences(p)]
        found = prose + figures
        lengths = [words(s) for s in found]
        count = sum(lengths)
        long = [s for s, n in zip(found, lengths) if n > 45]
        mean = count / len(found) if found else 0.0
        in_figures = sum(words(s) for s in figures)
        print(
            f"{path.stem:32s} {count - in_figures:6d} {in_figures:7d} {count:6d} "
            f"{len(found):9d} {mean:5.1f} {len(long):4d}"
        )
        if options.long:
            for sentence in long:
                print(f"    ({words(sentence)}) {sentence}")
        total_words += count
        all_sentences += lengths
    mean = total_words / len(all_sentences)
    over = sum(n > 45 for n in all_sentences)
    print(
        f"{'the book':32s} {'':6s} {'':7s} {total_words:6d} {len(all_sentences):9d} "
        f"{mean:5.1f} {over:4d}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
