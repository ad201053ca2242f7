"""The chapters' helpers: the package's own source, shown without docstring math."""

from capsnotes import dynamic_routing, margin_loss, squash
from capsnotes.notebook import show_source, without_math_blocks


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
    for function in (squash, dynamic_routing, margin_loss):
        source = show_source(function)
        assert ".. math::" not in source.code
        # what the function accepts is declared above it, and then comes the math
        assert source.code.startswith("@checked(")
        assert f"\ndef {function.__name__}(" in source.code
        assert source.location.startswith("capsnotes/") and ", lines " in source.location
        assert "```python" in source._repr_markdown_()
