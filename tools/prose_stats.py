"""How much running prose the book's chapters hold, and how long its sentences are.

    python tools/prose_stats.py            # every chapter, and the book
    python tools/prose_stats.py --long     # also every sentence over 45 words

Counted is the MyST source (``book/*.md``) outside code cells, math (``$...$``,
``$$...$$``), directives' option lines, figure captions kept in cell metadata, HTML
blocks, tables, headings and collapsed boxes (``:class: dropdown``, ``{admonition}`` with
``dropdown``, and the ``{toggle}`` directive). Roles count as their visible text (a
citation as one word). A sentence ends at ``.``, ``?`` or ``!`` followed by a space and
a capital, a digit, a quote or a bracket, or at the end of a paragraph.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

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


def sentences(paragraph: str) -> list[str]:
    return [s for s in SENTENCE_END.split(paragraph) if s.strip()]


def words(text: str) -> int:
    return len(re.findall(r"[\w’'%.,-]+", text))


def main(argv: list[str]) -> int:
    show_long = "--long" in argv
    total_words, all_sentences = 0, []
    print(f"{'chapter':32s} {'words':>6s} {'sentences':>9s} {'mean':>5s} {'>45':>4s}")
    for path in sorted(BOOK.glob("*.md")):
        found = [s for p in prose_paragraphs(path.read_text()) for s in sentences(p)]
        lengths = [words(s) for s in found]
        count = sum(lengths)
        long = [s for s, n in zip(found, lengths) if n > 45]
        mean = count / len(found) if found else 0.0
        print(f"{path.stem:32s} {count:6d} {len(found):9d} {mean:5.1f} {len(long):4d}")
        if show_long:
            for sentence in long:
                print(f"    ({words(sentence)}) {sentence}")
        total_words += count
        all_sentences += lengths
    mean = total_words / len(all_sentences)
    over = sum(n > 45 for n in all_sentences)
    print(f"{'the book':32s} {total_words:6d} {len(all_sentences):9d} {mean:5.1f} {over:4d}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
