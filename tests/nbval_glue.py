"""A pytest plugin (``-p tests.nbval_glue`` in ``pyproject.toml``): nbval compares a glued
float within a relative tolerance instead of digit for digit.

nbval compares every output of a chapter's cells exactly, and that includes the values a
chapter glues for its prose: MyST-NB keeps each as an ``application/papermill.record/``
output holding the value's ``repr``. What a chapter prints is rounded to the digits the
text shows, so it compares exactly on any CPU; a glued float is kept whole, for the prose
to format, and its last digits carry the rounding of the machine's order of summation
(two threads or one, another vector width): chapter 7's ratio of the summed to the mean
reconstruction loss, 784 by construction, was stored as 784.0000499514215 and recomputed
as 783.9999871919442 by the same CPU on one thread. Here two glued floats match when they
agree to ``RELATIVE_TOLERANCE``, far below the four or five significant digits the prose
shows; any other output, and any glued value that is not a float, compares exactly.

Hand-written because nbval has no tolerance for one kind of output (its sanitizers are
regular expressions over every output alike); it wraps ``IPyNbCell.compare_outputs``.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from myst_nb.ext.glue import GLUE_PREFIX
from nbval.plugin import IPyNbCell

RELATIVE_TOLERANCE = 1e-5


def _as_float(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def glued_floats_within_tolerance(test: list, reference: list) -> list:
    """A copy of the outputs ``test`` in which each glued float that agrees with the
    reference's to ``RELATIVE_TOLERANCE`` is replaced by the reference's text."""
    test = copy.deepcopy(test)
    if len(test) != len(reference):
        return test  # nbval reports the difference itself
    for ours, theirs in zip(test, reference, strict=True):
        data, reference_data = ours.get("data", {}), theirs.get("data", {})
        for key, value in data.items():
            if not key.startswith(GLUE_PREFIX) or key not in reference_data:
                continue
            a, b = _as_float(value), _as_float(reference_data[key])
            if a is not None and b is not None and math.isclose(a, b, rel_tol=RELATIVE_TOLERANCE):
                data[key] = reference_data[key]
    return test


_compare_outputs = IPyNbCell.compare_outputs


def _compare_with_tolerance(self: IPyNbCell, test: list, ref: list, skip_compare=None) -> bool:  # noqa: ANN001
    return _compare_outputs(self, glued_floats_within_tolerance(test, ref), ref, skip_compare)


IPyNbCell.compare_outputs = _compare_with_tolerance
