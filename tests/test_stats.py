import pytest

from cxlbench.stats import median_ci, summarize


def test_median_ci_order_statistics():
    # n = 20: the 95 % interval runs from the 6th to the 15th value (binomial(20, 1/2)).
    assert median_ci(range(20))[:2] == (5, 14)
    lo, hi, coverage = median_ci([3, 1, 2, 5, 4])
    assert (lo, hi) == (1, 5) and coverage == 0.9375     # too few values for 95 %


def test_summarize_flags_noise():
    quiet = summarize([100, 101, 99, 100, 100])
    assert quiet["median"] == 100 and not quiet["noisy"] and quiet["n"] == 5
    assert summarize([100, 150, 60, 100, 100])["noisy"]


def test_pairwise_interval_without_all_pairs_matches_the_sorted_one(monkeypatch):
    """Beyond PAIRS_LIMIT the Hodges-Lehmann bounds come from bisection, not from m * n
    values in memory (repeat allows 10000 a side): they must be the same pair values."""
    import numpy as np
    from cxlbench.report import compare_runs

    rng = np.random.default_rng(7)
    for trial in range(60):
        m, n = rng.integers(3, 50, 2)
        a, b = rng.lognormal(0, 0.3, m), rng.lognormal(0.05, 0.3, n)
        if trial % 2:
            a, b = a - 1.1, b - 1.1                  # not all positive: differences
        if trial % 3 == 0:
            a, b = np.round(a, 2), np.round(b, 2)    # ties
        sorted_way = compare_runs.compare_values(a, b)
        monkeypatch.setattr(compare_runs, "PAIRS_LIMIT", 0)
        bisected = compare_runs.compare_values(a, b)
        monkeypatch.undo()
        for key in ("ci_low", "ci_high"):
            assert bisected[key] == pytest.approx(sorted_way[key], rel=1e-12, abs=1e-12,
                                                  nan_ok=True)     # nan: A's median is 0


def test_compare_at_the_largest_repeat():
    import numpy as np
    from cxlbench.report.compare_runs import compare_values

    rng = np.random.default_rng(3)
    r = compare_values(rng.normal(100, 5, 10000), rng.normal(101, 5, 10000))
    assert r["significant"] and r["ci_low"] < 1.01 < r["ci_high"]


def test_summarize_groups_is_summarize_of_each_group():
    """The vectorised summary (reports at fleet scale) against summarize() group by group:
    the same medians, interval ends, coverages, counts and noise flags, the CV to rounding;
    groups of 1 to 100 values, interleaved, equal values among them."""
    import numpy as np
    from cxlbench import stats
    rng = np.random.default_rng(1)
    sizes = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 17, 30, 100] * 7
    values, groups = [], []
    for g, n in enumerate(sizes):
        v = np.full(n, 0.1) if g % 5 == 0 else rng.lognormal(3, 0.3, n) * (-1 if g % 3 == 0 else 1)
        values += list(v)
        groups += [g] * n
    perm = rng.permutation(len(values))
    values, groups = np.array(values)[perm], np.array(groups)[perm]
    got = stats.summarize_groups(values, groups)
    assert len(got) == len(sizes)
    for g in range(len(sizes)):
        want = stats.summarize(values[groups == g].tolist())
        row = got.iloc[g]
        for key in ("median", "ci_low", "ci_high", "ci_coverage", "n", "noisy"):
            assert row[key] == want[key], (g, key)
        assert row["cv"] == pytest.approx(want["cv"], rel=1e-12, abs=0)
