"""The table of contents: every chapter once, numbered as its file name says (the prose
quotes chapters by number), the capsule story first and ending at chapter 13, the
engineering chapters after it as an appendix, the references at the back; and the built
book's sidebar as the table says."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

BOOK = REPO / "book"
#: The chapters on how the trainer runs fast, which the story does not depend on.
ENGINEERING = ["14_training_on_a_gpu", "15_why_the_trainer_is_fast"]
#: The last chapter of the capsule story.
STORY_ENDS = "13_the_whole_story"
REFERENCES = "16_references"


def parts(toc: dict) -> list[dict]:
    return toc["parts"]


def chapter_numbers(toc: dict) -> dict[str, int | None]:
    """Each file's chapter number as Jupyter Book 1 gives it: numbered parts count on
    from one part to the next; an unnumbered part's chapters have none."""
    numbers, count = {}, 0
    for part in parts(toc):
        for chapter in part["chapters"]:
            if part.get("numbered"):
                count += 1
                numbers[chapter["file"]] = count
            else:
                numbers[chapter["file"]] = None
    return numbers


def check_toc(toc: dict) -> list[str]:
    """What is wrong with a table of contents, in words; empty when nothing is."""
    problems = []
    listed = [c["file"] for part in parts(toc) for c in part["chapters"]]
    on_disk = sorted(p.stem for p in BOOK.glob("[0-9][0-9]_*.md"))
    if sorted(listed) != on_disk:
        problems.append(f"chapters listed {sorted(listed)} are not those in book/ {on_disk}")
    if len(set(listed)) != len(listed):
        problems.append("a chapter is listed twice")
    for name, number in chapter_numbers(toc).items():
        if name != REFERENCES and number != int(name[:2]):
            problems.append(f"{name} is numbered {number}, not as its file name says")
    owner = {c["file"]: i for i, part in enumerate(parts(toc)) for c in part["chapters"]}
    if not all(name in owner for name in [*ENGINEERING, STORY_ENDS, REFERENCES]):
        return problems + ["a chapter the test needs is not listed"]
    appendix = {owner[name] for name in ENGINEERING}
    if len(appendix) != 1:
        problems.append("the engineering chapters are not in one part")
    for index in appendix if len(appendix) == 1 else ():
        part = parts(toc)[index]
        if [c["file"] for c in part["chapters"]] != ENGINEERING:
            problems.append(f"the appendix holds {part['chapters']}, not only engineering")
        if "appendix" not in part.get("caption", "").lower():
            problems.append(
                f"the engineering part's caption {part.get('caption')!r} "
                "does not call it an appendix"
            )
        if not owner[STORY_ENDS] < index < owner[REFERENCES]:
            problems.append("the appendix is not between the story's end and the references")
    if owner[REFERENCES] != len(parts(toc)) - 1 or parts(toc)[-1].get("numbered"):
        problems.append("the references are not an unnumbered last part")
    return problems


def test_the_table_of_contents_ends_the_story_at_13_with_an_appendix_after_it():
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    assert check_toc(toc) == []
    assert (BOOK / "_toc.yml").resolve() == (REPO / "_toc.yml").resolve()


@pytest.mark.parametrize(
    "plant",
    [
        "engineering back in the story",
        "appendix unnumbered",
        "references before the appendix",
        "a chapter left out",
        "caption without appendix",
    ],
)
def test_a_table_of_contents_planted_wrong_is_refused(plant: str):
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    where = {c["file"]: part for part in parts(toc) for c in part["chapters"]}
    appendix = where[ENGINEERING[0]]
    if plant == "engineering back in the story":
        where[STORY_ENDS]["chapters"] += appendix["chapters"]
        toc["parts"].remove(appendix)
    elif plant == "appendix unnumbered":
        appendix["numbered"] = False
    elif plant == "references before the appendix":
        references = toc["parts"].pop()
        toc["parts"].insert(toc["parts"].index(appendix), references)
    elif plant == "a chapter left out":
        appendix["chapters"].pop()
    elif plant == "caption without appendix":
        appendix["caption"] = "Speed"
    assert check_toc(toc) != []


def sidebar(page: Path) -> list[tuple[str, str]]:
    """The built page's navigation, in order: ("part", caption) and ("chapter", title)."""
    text = page.read_text()
    nav = text[text.index("bd-sidebar") :]
    nav = nav[: nav.index("</nav>")]
    found = re.finditer(
        r'<p aria-level="2" class="caption"[^>]*>\s*<span[^>]*>(.*?)</span>'
        r'|<li class="toctree-l1[^"]*"><a class="[^"]*reference internal[^"]*"'
        r' href="[^"]+">(.*?)</a>',
        nav,
        re.S,
    )
    return [
        ("part", html.unescape(m.group(1)))
        if m.group(1)
        else ("chapter", html.unescape(re.sub("<[^>]+>", "", m.group(2))).strip())
        for m in found
    ]


@pytest.mark.slow
def test_the_built_sidebar_shows_the_appendix_after_the_story(built_book: Path):
    entries = sidebar(built_book / "01_why_capsules.html")
    captions = [text for kind, text in entries if kind == "part"]
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    assert captions == [part["caption"] for part in parts(toc)]
    appendix = next(c for c in captions if "appendix" in c.lower())
    after = entries[entries.index(("part", appendix)) + 1 :]
    titles = [text for kind, text in after[:2]]
    assert [kind for kind, _ in after[:3]] == ["chapter", "chapter", "part"]
    assert titles[0].startswith("14. ") and titles[1].startswith("15. ")
    assert entries[-1][0] == "chapter" and not re.match(r"\d", entries[-1][1])
    chapters = [text for kind, text in entries if kind == "chapter"]
    assert len(chapters) == len(list(BOOK.glob("[0-9][0-9]_*.md")))
