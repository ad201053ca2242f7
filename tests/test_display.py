"""The chapters' helpers: the package's own source, shown without docstring math."""

import pytest

from capsbook.display import PROCEDURE_1, beside_procedure, show_source, without_math_blocks
from capsnotes import dynamic_routing_with_couplings, margin_loss, squash


def test_math_blocks_leave_and_the_words_stay():
    code = '''def f(x):
    r"""Words before.

    .. math:: a = b
              + c

    More words.

    .. math::
        d = e

    Args:
        x: a value.
    """
    return x
'''
    shown = without_math_blocks(code)
    assert ".. math::" not in shown and "a = b" not in shown and "d = e" not in shown
    for kept in ("Words before.", "More words.", "Args:", "x: a value.", "return x"):
        assert kept in shown


def test_shown_source_is_the_package_source_with_its_place():
    for function in (squash, dynamic_routing_with_couplings, margin_loss):
        source = show_source(function)
        assert ".. math::" not in source.code
        assert source.code.startswith(f"def {function.__name__}(")
        assert source.location.startswith("capsnotes/") and ", lines " in source.location
        assert "```python" in source._repr_markdown_()


def test_procedure_1_stands_beside_every_line_of_the_routing_code():
    shown = beside_procedure(dynamic_routing_with_couplings)
    assert [number for number, _, _ in shown.rows] == list(range(1, len(PROCEDURE_1) + 1))
    assert all(code for number, _, code in shown.rows if number > 1)  # each step computed
    code = {number: code for number, _, code in shown.rows}
    assert "softmax(dim=2)" in code[4] and "squash(s)" in code[6] and "einsum" in code[7]
    assert "u_hat.shape" in code[1]  # the procedure's inputs
    # nothing of the body is lost: every code line of the function appears once
    body = show_source(dynamic_routing_with_couplings).code.split('"""')[-1]
    statements = [line.strip() for line in body.splitlines() if line.strip()]
    statements = [line.split("# line")[0].strip() for line in statements]
    shown_lines = [line.strip() for _, _, c in shown.rows for line in c.splitlines()]
    assert [s for s in statements if s and not s.startswith("#")] == [
        s for s in shown_lines if not s.startswith("#")
    ]
    html = shown._repr_html_()
    assert html.count('class="procedure-step"') == len(PROCEDURE_1)
    assert "&lt;" not in PROCEDURE_1[0]
    # each step stands above its code, which has the column to itself: the book's code
    # column shows 88 characters (book/_static/capsnotes.css), and no line is wider
    assert "<table" not in html
    shown_code = [line for _, _, c in shown.rows for line in c.splitlines()]
    assert max(len(line) for line in shown_code) <= 88
    # the procedure's subscripts are set as subscripts in HTML, kept as written in text
    assert "b<sub>ij</sub> ← b<sub>ij</sub> + û<sub>j|i</sub> · v<sub>j</sub>" in html
    assert "b_ij ← b_ij + û_{j|i} · v_j" in repr(shown)
    # what a mark's comment adds to its step is kept, without the step's formula again
    assert shown.notes[7] == "(not after the last pass: never read)"
    assert shown.notes[2].startswith("per example") and 3 not in shown.notes


def test_a_mark_the_procedure_does_not_have_is_refused():
    def marked(x):
        # line 9: nothing
        return x

    with pytest.raises(ValueError, match="marks line 9; the procedure has lines 1 to 8"):
        beside_procedure(marked)
