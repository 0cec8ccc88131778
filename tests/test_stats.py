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
