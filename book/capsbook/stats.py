"""The book's one standard for "a difference", in one place.

Every experiment chapter compares arms trained over a few seeds, and states each
difference the same way (:class:`Difference`): the effect, the seeds' spread, the
two-sided p-value of Student's t-test, the exact p of the permutation test, and the
smallest difference the design detects at :data:`ALPHA` with :data:`POWER`, side by
side. A difference is called a difference when its t-test's p is below ALPHA; the
detectable difference says how large an effect the design could have missed.

Two models scored on the same test items are compared by McNemar's exact test
(:func:`disagreement`), with the difference of error rates it detects beside it.

Student's t and the binomial distribution come from SciPy; the permutation tests are
enumerated here because SciPy's ``permutation_test`` samples or enumerates with a
statistic of its own choosing, while the book's are small and exact by construction (at
most a few hundred arrangements).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scipy import stats

#: The most arrangements an exact permutation test enumerates (16 pairs, or 8 + 8
#: seeds); a larger design gets Student's t only.
EXACT_LIMIT = 2**16

#: The test's level (two-sided) and the power at which a design's detectable difference
#: is quoted.
ALPHA = 0.05
POWER = 0.80


def detectable(standard_error: float, df: int, alpha: float = ALPHA) -> float:
    """The true difference a two-sided t-test at level ``alpha`` (default
    :data:`ALPHA`; a Bonferroni level where several are tested) with ``df`` degrees of
    freedom detects with probability :data:`POWER`, given the difference's standard
    error (the usual approximation: ``(t_{1-α/2} + t_{power}) × SE``)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie between 0 and 1, got {alpha!r}")
    return float(
        (stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(POWER, df)) * standard_error
    )


@dataclass(frozen=True)
class Difference:
    """``b - a`` between two arms, as the book states every difference."""

    effect: (
        float  #: mean of ``b`` minus mean of ``a`` (or mean of the paired differences)
    )
    spread: (
        float  #: the seeds' standard deviation (pooled over the arms, or of the pairs)
    )
    n: int  #: seeds per arm (pairs, if paired)
    p: float  #: two-sided p of Student's t-test
    #: two-sided p of the exact permutation test (None: more than EXACT_LIMIT
    #: arrangements, as for hundreds of paired test digits, where Student's t is exact
    #: enough)
    exact_p: float | None
    smallest_p: float | None  #: the smallest exact p this design can reach at all
    detectable: float  #: the difference the design detects at ALPHA with POWER
    paired: bool

    @property
    def is_difference(self) -> bool:
        """The book's standard: Student's t-test, two-sided, at :data:`ALPHA`."""
        return self.p < ALPHA

    def row(self, scale: float = 1.0, unit: str = "") -> str:
        """One line: effect, spread, p, exact p and detectable difference, the numbers
        multiplied by ``scale`` (100: fractions as points)."""
        return (
            f"{scale * self.effect:+.3f}{unit} (spread {scale * self.spread:.3f}, "
            f"p = {self.p:.3f}, exact p = {_p_text(self.exact_p)}; "
            f"detects {scale * self.detectable:.3f}{unit})"
        )


def _check(a: Sequence[float], b: Sequence[float], paired: bool) -> tuple[list, list]:
    a, b = [float(x) for x in a], [float(x) for x in b]
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"each arm needs at least 2 seeds, got {len(a)} and {len(b)}")
    if len(a) != len(b):
        raise ValueError(f"the arms must have as many seeds, got {len(a)} and {len(b)}")
    if paired and len(set(x - y for x, y in zip(a, b))) == 1:
        raise ValueError("paired differences that are all equal have no spread to test")
    return a, b


def unpaired(a: Sequence[float], b: Sequence[float]) -> Difference:
    """Two arms of independent seeds: Student's t with the pooled variance, and the
    exact test over every way of relabelling the seeds of both arms."""
    a, b = _check(a, b, paired=False)
    n = len(a)
    effect = statistics.fmean(b) - statistics.fmean(a)
    spread = math.sqrt((statistics.variance(a) + statistics.variance(b)) / 2)
    p = float(stats.ttest_ind(b, a).pvalue) if spread else (0.0 if effect else 1.0)
    pooled, exact_p, smallest_p = a + b, None, None
    if math.comb(2 * n, n) <= EXACT_LIMIT:
        splits = list(itertools.combinations(range(2 * n), n))
        extreme = 0
        for chosen in splits:
            first = [pooled[i] for i in chosen]
            second = [pooled[i] for i in range(2 * n) if i not in chosen]
            gap = abs(statistics.fmean(second) - statistics.fmean(first))
            extreme += gap >= abs(effect) - 1e-12
        exact_p, smallest_p = extreme / len(splits), 2 / len(splits)
    return Difference(
        effect=effect,
        spread=spread,
        n=n,
        p=p,
        exact_p=exact_p,
        smallest_p=smallest_p,
        detectable=detectable(spread * math.sqrt(2 / n), 2 * n - 2),
        paired=False,
    )


def paired(a: Sequence[float], b: Sequence[float]) -> Difference:
    """Two arms paired seed by seed (the same initial weights and batches): Student's t
    on the differences, and the exact test over every way of flipping their signs."""
    a, b = _check(a, b, paired=True)
    differences = [y - x for x, y in zip(a, b)]
    n = len(differences)
    effect, spread = statistics.fmean(differences), statistics.stdev(differences)
    p = float(stats.ttest_1samp(differences, 0.0).pvalue)
    exact_p = smallest_p = None
    if 2**n <= EXACT_LIMIT:
        flips = list(itertools.product((1, -1), repeat=n))
        extreme = sum(
            abs(statistics.fmean(s * d for s, d in zip(signs, differences)))
            >= abs(effect) - 1e-12
            for signs in flips
        )
        exact_p, smallest_p = extreme / len(flips), 2 / len(flips)
    return Difference(
        effect=effect,
        spread=spread,
        n=n,
        p=p,
        exact_p=exact_p,
        smallest_p=smallest_p,
        detectable=detectable(spread / math.sqrt(n), n - 1),
        paired=True,
    )


def mcnemar(only_a: int, only_b: int) -> float:
    """McNemar's exact test of two models on the same test items: ``only_a`` items only
    the first got wrong, ``only_b`` only the second. Under no difference each such item
    is equally likely to be either's, so the p-value is the two-sided binomial test of
    ``only_a`` out of ``only_a + only_b`` at one half."""
    for name, count in (("only_a", only_a), ("only_b", only_b)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"{name} must be a count (an int >= 0), got {count!r}")
    if only_a + only_b == 0:
        return 1.0
    return float(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue)


@dataclass(frozen=True)
class TwoByTwo:
    """A 2×2 design (factor A at two levels × factor B at two levels), seeds paired
    across all four cells: A's effect within each level of B, A's effect pooled over
    both levels (every seed's two differences taken as independent, which assumes that
    A's effect is the same at both levels of B: :attr:`interaction` tests that), and the
    interaction (A's effect at B's second level minus at its first, paired by seed)."""

    within: dict[str, Difference]  #: B's level -> A's effect there
    pooled: Difference  #: A's effect over both of B's levels (2n pairs)
    interaction: (
        Difference  #: how much A's effect changes from B's first level to its second
    )


def two_by_two(cells: Mapping[tuple[str, str], Sequence[float]]) -> TwoByTwo:
    """``cells[(a_level, b_level)]``: the per-seed values of each of the four cells,
    seeds in the same order in every cell. A's first level is the baseline of its
    effect (the effect is second minus first); B's first level the baseline of the
    interaction."""
    a_levels = list(dict.fromkeys(key[0] for key in cells))
    b_levels = list(dict.fromkeys(key[1] for key in cells))
    if len(a_levels) != 2 or len(b_levels) != 2 or len(cells) != 4:
        raise ValueError(
            f"a 2×2 design needs four cells of two levels each, got {list(cells)}"
        )
    low, high = a_levels
    within = {b: paired(cells[(low, b)], cells[(high, b)]) for b in b_levels}
    both = [
        [float(x) for b in b_levels for x in cells[(level, b)]] for level in (low, high)
    ]
    changes = {
        b: [y - x for x, y in zip(cells[(low, b)], cells[(high, b)])] for b in b_levels
    }
    return TwoByTwo(
        within=within,
        pooled=paired(*both),
        interaction=paired(changes[b_levels[0]], changes[b_levels[1]]),
    )


def _p_text(p: float | None) -> str:
    if p is None:
        return "–"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def table(
    differences: Mapping[str, Difference], scale: float = 1.0, digits: int = 2
) -> str:
    """``differences`` (name -> :class:`Difference`) as a Markdown table, a row each,
    the book's columns side by side: the effect, the seeds' spread, the seeds (or
    pairs), Student's p, the exact p, the difference the design detects, and whether it
    is a difference by the book's standard. Effects, spreads and detectable differences
    are multiplied by ``scale`` (100: fractions as points) and shown with ``digits``
    decimals."""
    if not differences:
        raise ValueError("a table needs at least one difference")
    lines = [
        "| comparison | effect | seeds' spread | seeds | p (Student's t) | exact p "
        "| the design detects | a difference? |",
        "|---|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for name, d in differences.items():
        seeds = f"{d.n} pairs" if d.paired else f"{d.n} + {d.n}"
        effect, spread, detects = (
            f"{scale * x:{sign}.{digits}f}"
            for x, sign in ((d.effect, "+"), (d.spread, ""), (d.detectable, ""))
        )
        verdict = "yes" if d.is_difference else "no"
        lines.append(
            f"| {name} | {effect} | {spread} | {seeds} | {_p_text(d.p)} "
            f"| {_p_text(d.exact_p)} | {detects} | {verdict} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class Disagreement:
    """Two models scored on the same ``count`` items: ``only_a`` items only the first
    gets wrong, ``only_b`` only the second, ``both`` both. ``effect`` is the second's
    error rate minus the first's; ``p`` McNemar's exact test
    (:func:`mcnemar`); ``detectable`` the difference of error rates the
    test detects at :data:`ALPHA` with :data:`POWER`,
    from the standard error of the effect under no difference, ``√(only_a + only_b) /
    count``. One model each: it says whether these two models differ on these items,
    not how far other training runs would land."""

    count: int
    only_a: int
    only_b: int
    both: int
    effect: float
    p: float
    detectable: float

    @property
    def is_difference(self) -> bool:
        """The book's standard: p below :data:`ALPHA`."""
        return self.p < ALPHA


def disagreement(wrong_a: Any, wrong_b: Any) -> Disagreement:
    """:class:`Disagreement` of two models from their errors on the same items,
    ``wrong_a`` and ``wrong_b`` (one bool each, a bool tensor ``[N]`` or a sequence:
    the item is misread)."""
    flags = []
    for name, wrong in (("wrong_a", wrong_a), ("wrong_b", wrong_b)):
        values = wrong.tolist() if hasattr(wrong, "tolist") else wrong
        if (
            isinstance(values, (str, bytes))
            or not isinstance(values, Sequence)
            or not all(isinstance(v, bool) for v in values)
        ):
            raise ValueError(f"{name} must be a bool tensor [N], got {wrong!r:.60}")
        flags.append(values)
    if len(flags[0]) != len(flags[1]) or not flags[0]:
        raise ValueError(
            f"wrong_a and wrong_b must score the same N >= 1 items, got "
            f"{len(flags[0])} and {len(flags[1])}"
        )
    count = len(flags[0])
    pairs = list(zip(*flags))
    only_a = sum(a and not b for a, b in pairs)
    only_b = sum(b and not a for a, b in pairs)
    discordant = only_a + only_b
    if discordant < 2:
        raise ValueError(
            f"the models disagree on {discordant} item(s): too few to test"
        )
    error = math.sqrt(discordant) / count
    return Disagreement(
        count=count,
        only_a=only_a,
        only_b=only_b,
        both=sum(a and b for a, b in pairs),
        effect=(only_b - only_a) / count,
        p=mcnemar(only_a, only_b),
        detectable=detectable(error, discordant - 1),
    )
