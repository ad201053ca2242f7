"""Chapter 1's one-page network is the package's code: its lines are the package's source
lines less docstrings, door checks and the methods it leaves out; run, they compute what
the package computes; every note sits on the one line it names, and a note whose line is
gone, or a part that is not shown, raises."""

from __future__ import annotations
import __future__

import ast
import html
import importlib
import inspect
import re
import textwrap

import pytest
import torch

from capsbook.listing import NOTES, PARTS, Piece, _shown_lines, part, whole_network
from capsnotes import CapsNet, capsnet_loss, squash
from tests.conftest import TINY

#: A check whose value the code keeps, and what the page shows instead: its argument.
KEPT_CHECK = re.compile(r"check_\w+\((\w+)\)")


def source_of(obj) -> list[str]:
    return textwrap.dedent("".join(inspect.getsourcelines(inspect.unwrap(obj))[0]))


def left_out(source: str, methods: tuple[str, ...]) -> set[int]:
    """The source's lines (0-based) that may be missing from the page: blank lines,
    docstrings, statements (and if-blocks) of check calls only, methods not shown."""
    tree = ast.parse(source)
    out = {i for i, line in enumerate(source.splitlines()) if not line.strip()}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and ast.get_docstring(node):
            out.update(range(node.body[0].lineno - 1, node.body[0].end_lineno))
        method = isinstance(node, ast.FunctionDef) and node.col_offset > 0
        if method and methods and node.name not in methods:
            out.update(range(node.lineno - 1, node.end_lineno))
        if isinstance(node, ast.Expr | ast.If):
            text = ast.get_source_segment(source, node)
            statements = text.splitlines()[1:] if isinstance(node, ast.If) else [text]
            if all(s.strip().startswith("check_") for s in statements) and not getattr(
                node, "orelse", None
            ):
                out.update(range(node.lineno - 1, node.end_lineno))
    return out


@pytest.mark.parametrize("piece", PARTS, ids=lambda piece: piece.obj.__qualname__)
def test_the_page_holds_the_package_source_lines_in_order(piece):
    source = source_of(piece.obj)
    lines = source.splitlines()
    shown = part(piece).lines
    matched, cursor = [], 0
    for line in shown:
        while cursor < len(lines) and KEPT_CHECK.sub(r"\1", lines[cursor]) != line:
            cursor += 1
        assert cursor < len(lines), f"not a line of the source, or out of order: {line!r}"
        matched.append(cursor)
        cursor += 1
    missing = set(range(len(lines))) - set(matched)
    assert missing <= left_out(source, piece.methods), [
        lines[i] for i in sorted(missing - left_out(source, piece.methods))
    ]
    assert not any("check_" in line for line in shown)
    assert not any('"""' in line for line in shown)


def run_the_page() -> dict:
    """The page's code executed in the package's own globals, each part replacing the
    package's object of its name: the listed CapsNet builds listed layers."""
    names = {}
    for module in ("squash", "routing", "capsules", "decoder", "losses", "model"):
        names |= vars(importlib.import_module(f"capsnotes.{module}"))
    for piece in whole_network().parts:
        code = compile(
            "\n".join(piece.lines),
            piece.location,
            "exec",
            flags=__future__.annotations.compiler_flag,
            dont_inherit=True,
        )
        exec(code, names)
    return names


def test_the_page_run_computes_what_the_package_computes():
    page = run_the_page()
    assert page["CapsNet"] is not CapsNet and page["squash"] is not squash
    images, labels = torch.rand(3, 1, 28, 28), torch.tensor([1, 7, 3])
    outputs = []
    for model_class, loss in ((CapsNet, capsnet_loss), (page["CapsNet"], page["capsnet_loss"])):
        torch.manual_seed(0)
        model = model_class(TINY)
        output = model(images, labels)
        total = loss(output, images, labels).total
        outputs.append((*output, total))
    for theirs, ours in zip(*outputs):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    s = torch.randn(5, 8)
    torch.testing.assert_close(page["squash"](s), squash(s), rtol=0, atol=0)


def test_the_page_keeps_no_check_and_shows_a_kept_one_as_its_argument():
    source = textwrap.dedent(
        '''
        class Layer:
            """A docstring."""

            def __init__(self, size, depth=None):
                """Another."""
                check_sizes(size=size)
                if depth is not None:
                    check_depth(depth)
                self.size = check_size(size)
                self.depth = depth

            def extra_repr(self):
                return "size"
        '''
    ).strip()
    assert _shown_lines(source) == [
        "class Layer:",
        "    def __init__(self, size, depth=None):",
        "        self.size = size",
        "        self.depth = depth",
        "",
        "    def extra_repr(self):",
        '        return "size"',
    ]
    assert _shown_lines(source, ("__init__",))[-1] == "        self.depth = depth"
    with pytest.raises(LookupError, match="no method"):
        _shown_lines(source, ("forward",))
    with pytest.raises(TypeError, match="only from a class"):
        _shown_lines("def f(x):\n    return x", ("f",))


def test_every_note_sits_on_the_one_line_it_names():
    listing = whole_network()
    assert listing.note_count == len(NOTES)
    by_object = {id(piece.obj): shown for piece, shown in zip(PARTS, listing.parts)}
    for owner, anchor, note in NOTES:
        shown = by_object[id(owner)]
        (line,) = [i for i, text in enumerate(shown.lines) if anchor in text]
        assert shown.notes[line] == note


def stand_in_squash(s):
    return s * 2


def test_a_note_whose_line_is_gone_raises():
    note = ((stand_in_squash, "scale = squared_length", "a note"),)
    with pytest.raises(LookupError, match="found 0"):
        whole_network((Piece(stand_in_squash, "02_squash"),), note)
    twice = ((stand_in_squash, "s", "a note"),)  # on every line of it
    with pytest.raises(LookupError, match="found 2"):
        whole_network((Piece(stand_in_squash, "02_squash"),), twice)
    with pytest.raises(ValueError, match="does not show"):
        whole_network((Piece(squash, "02_squash"),), note)


def test_the_html_table_has_every_line_once_and_every_note_beside_it():
    listing = whole_network()
    page = listing._repr_html_()
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", page, flags=re.S)
    code_rows = [row for row in rows if "<pre" in row]
    assert len(code_rows) == listing.line_count
    # each part's note column covers its lines exactly once: the rowspans add up
    spans = [int(n) for n in re.findall(r'rowspan="(\d+)"', page)]
    assert sum(spans) == listing.line_count
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    for _, _, note in NOTES:
        assert text.count(note) == 1
    for shown in listing.parts:
        assert shown.location in text
    code = [re.search(r"<pre[^>]*>(.*?)</pre>", row, flags=re.S)[1] for row in code_rows]
    code = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in code]
    lines = [line for shown in listing.parts for line in shown.lines]
    assert code == [line or " " for line in lines]


class WithAHelper:
    def forward(self, x):
        return x

    def helper(self):
        return 1


@pytest.mark.parametrize("piece", PARTS, ids=lambda piece: piece.obj.__qualname__)
def test_a_header_names_the_methods_its_part_leaves_out(piece):
    tree = ast.parse(source_of(piece.obj)).body[0]
    methods = [n.name for n in getattr(tree, "body", []) if isinstance(n, ast.FunctionDef)]
    left = [name for name in methods if piece.methods and name not in piece.methods]
    location = part(piece).location
    if left:
        assert location.endswith(f", without {', '.join(left)}")
    else:
        assert "without" not in location


def test_a_header_names_a_method_left_out_of_a_planted_class():
    assert part(Piece(WithAHelper, "01_why_capsules", ("forward",))).location.endswith(
        ", without helper"
    )
    assert "without" not in part(Piece(WithAHelper, "01_why_capsules")).location
