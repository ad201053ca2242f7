"""The book's one standard for a difference (book/capsbook/stats.py): Student's t and the
exact permutation tests against values computed by hand, the detectable difference,
McNemar's exact test, the 2×2 design, and bad input refused."""

from __future__ import annotations

import math

import pytest
import torch

from capsbook import stats

#: Table 1's test errors in points, r = 1 and r = 3 over three seeds, without and with
#: the reconstruction loss (book/results/table1.json, rounded to the digit counts)
R1 = {"none": [0.69, 0.61, 0.61], "reconstruction": [0.70, 0.62, 0.63]}
R3 = {"none": [0.63, 0.56, 0.50], "reconstruction": [0.58, 0.61, 0.50]}


def test_unpaired_arms_against_a_hand_computed_t_test_and_every_relabelling():
    d = stats.unpaired([1, 2, 3], [4, 5, 6])
    assert d.effect == 3 and d.spread == 1 and d.n == 3 and not d.paired
    # t = 3 / (1 * sqrt(2/3)) = 3.674 with 4 degrees of freedom
    t = 3 / math.sqrt(2 / 3)
    assert d.p == pytest.approx(2 * stats.stats.t.sf(t, 4))
    assert d.p == pytest.approx(0.0213, abs=1e-4)
    # 20 ways to split six seeds into two arms of three; only the two extremes differ by 3
    assert d.exact_p == pytest.approx(2 / 20) and d.smallest_p == pytest.approx(2 / 20)
    assert d.is_difference


def test_paired_arms_flip_every_sign():
    pooled_r1 = R1["none"] + R1["reconstruction"]
    pooled_r3 = R3["none"] + R3["reconstruction"]
    d = stats.paired(pooled_r1, pooled_r3)
    # six differences, all negative: -0.06, -0.05, -0.11, -0.12, -0.01, -0.13
    assert d.effect == pytest.approx(-0.08)
    assert d.p == pytest.approx(0.009, abs=5e-4)  # t(5)
    assert d.exact_p == pytest.approx(2 / 64)  # only all-negative and all-positive
    assert d.is_difference
    # seeds far apart, each pair close: the pairing is what finds it
    a, b = [1.0, 2.0, 3.0, 4.0], [1.1, 2.1, 3.2, 4.1]
    assert stats.paired(a, b).is_difference and not stats.unpaired(a, b).is_difference


def test_the_detectable_difference_is_the_t_quantiles_times_the_standard_error():
    # t(0.975, 4) = 2.7764, t(0.80, 4) = 0.9410
    assert stats.detectable(1.0, 4) == pytest.approx(2.7764 + 0.9410, abs=1e-3)
    # at a Bonferroni level (0.05 over 5 tests): t_{0.995, 4} = 4.6041
    assert stats.detectable(1.0, 4, alpha=0.01) == pytest.approx(4.6041 + 0.9410, abs=1e-3)
    with pytest.raises(ValueError, match="alpha must lie between 0 and 1"):
        stats.detectable(1.0, 4, alpha=0.0)
    d = stats.paired([0.0, 0.0, 0.0], [1.0, 2.0, 3.0])
    assert d.detectable == pytest.approx(stats.detectable(1.0 / math.sqrt(3), 2))
    assert d.detectable > d.effect - 2 * d.spread  # a positive, finite difference
    u = stats.unpaired([0.0, 1.0], [2.0, 3.0])
    assert u.detectable == pytest.approx(stats.detectable(math.sqrt(0.5) * 1.0, 2))


def test_mcnemar_is_the_two_sided_binomial_of_the_items_one_model_alone_missed():
    assert stats.mcnemar(0, 0) == 1.0
    assert stats.mcnemar(5, 5) == 1.0
    # 0 of 6: 2 * (1/2)^6
    assert stats.mcnemar(0, 6) == pytest.approx(2 / 64)
    assert stats.mcnemar(320, 361) == pytest.approx(0.125, abs=1e-3)
    assert stats.mcnemar(3, 9) == stats.mcnemar(9, 3)


def test_a_two_by_two_design_gives_each_effect_the_pooled_one_and_the_interaction():
    cells = {
        ("r=1", "none"): R1["none"],
        ("r=1", "reconstruction"): R1["reconstruction"],
        ("r=3", "none"): R3["none"],
        ("r=3", "reconstruction"): R3["reconstruction"],
    }
    design = stats.two_by_two(cells)
    assert design.within["none"].effect == pytest.approx(-0.22 / 3)
    assert design.within["reconstruction"].effect == pytest.approx(-0.26 / 3)
    assert design.pooled.n == 6 and design.pooled.effect == pytest.approx(-0.08)
    # the change of r's effect with the reconstruction loss: -0.06-(-0.06), ...
    assert design.interaction.effect == pytest.approx(-0.04 / 3)
    assert not design.interaction.is_difference


def test_bad_input_is_refused_naming_what_was_expected():
    with pytest.raises(ValueError, match="at least 2 seeds"):
        stats.unpaired([1.0], [2.0])
    with pytest.raises(ValueError, match="as many seeds"):
        stats.paired([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="no spread"):
        stats.paired([1.0, 2.0], [2.0, 3.0])
    with pytest.raises(ValueError, match="count"):
        stats.mcnemar(-1, 3)
    with pytest.raises(ValueError, match="four cells"):
        stats.two_by_two({("a", "x"): [1, 2], ("b", "x"): [1, 3]})


def test_a_table_states_each_difference_by_the_book_s_standard():
    found = stats.paired(R1["none"] + R1["reconstruction"], R3["none"] + R3["reconstruction"])
    not_found = stats.unpaired([1.0, 2.0, 3.0], [1.5, 2.5, 2.0])
    lines = stats.table({"r = 3 - r = 1": found, "noise": not_found}, digits=3).splitlines()
    assert len(lines) == 4  # a header, its rule, a row per difference
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    assert cells[0][:4] == ["r = 3 - r = 1", "-0.080", f"{found.spread:.3f}", "6 pairs"]
    assert cells[0][4:] == ["0.009", "0.031", f"{found.detectable:.3f}", "yes"]
    assert cells[1][3] == "3 + 3" and cells[1][-1] == "no"
    assert not not_found.is_difference
    # scaled: fractions as points
    scaled = stats.table({"x": stats.paired([0.01, 0.02, 0.03], [0.02, 0.04, 0.05])}, 100)
    assert "| +1.67 |" in scaled
    assert "< 0.001" in stats.table({"far": stats.unpaired([0, 0.1, 0], [9, 9.1, 9])})
    with pytest.raises(ValueError, match="at least one"):
        stats.table({})


def test_disagreement_counts_each_models_own_errors_and_tests_them_by_mcnemar():
    """1,000 items: 30 only the first model misreads, 10 only the second, 5 both. The
    effect is the second's error rate minus the first's; p is McNemar's; the detectable
    difference comes from the standard error √40 / 1000; swapping the models flips the
    effect and keeps p."""
    wrong_a = torch.zeros(1000, dtype=torch.bool)
    wrong_b = torch.zeros(1000, dtype=torch.bool)
    wrong_a[:30] = True
    wrong_b[30:40] = True
    wrong_a[500:505] = wrong_b[500:505] = True
    found = stats.disagreement(wrong_a, wrong_b)
    assert (found.count, found.only_a, found.only_b, found.both) == (1000, 30, 10, 5)
    assert found.effect == pytest.approx(-0.02)
    assert found.p == pytest.approx(stats.mcnemar(30, 10)) and found.is_difference
    assert found.detectable == pytest.approx(stats.detectable(math.sqrt(40) / 1000, 39))
    swapped = stats.disagreement(wrong_b, wrong_a)
    assert swapped.effect == pytest.approx(0.02) and swapped.p == pytest.approx(found.p)
    even = wrong_b.clone()
    even[40:60] = True  # 30 against 30: no difference
    assert stats.disagreement(wrong_a, even).p == 1.0
    assert not stats.disagreement(wrong_a, even).is_difference
    with pytest.raises(ValueError, match="bool tensor"):
        stats.disagreement(wrong_a.int(), wrong_b)
    with pytest.raises(ValueError, match="the same N"):
        stats.disagreement(wrong_a, wrong_b[:10])
    with pytest.raises(ValueError, match="too few to test"):
        stats.disagreement(wrong_a, wrong_a)


def test_a_large_paired_design_gets_student_s_t_only():
    """2^20 sign flips are more than an exact test enumerates: Student's t alone."""
    a = [float(i) for i in range(20)]
    b = [x + 0.5 + 0.1 * (i % 3) for i, x in enumerate(a)]
    d = stats.paired(a, b)
    assert d.exact_p is None and d.smallest_p is None
    assert d.p < 1e-6 and d.is_difference
    assert "exact p = –" in d.row()
    assert stats.paired(a[:16], b[:16]).exact_p == pytest.approx(2 / 2**16)
