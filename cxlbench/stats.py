"""Summary statistics: median with a distribution-free confidence interval, and spread."""
from __future__ import annotations

import math
import statistics

NOISY_CV = 0.05     # a case whose coefficient of variation exceeds this is flagged


def _binom_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n


def median_ci(values, confidence: float = 0.95) -> tuple[float, float, float]:
    """The median and the order-statistic interval around it that covers the true median
    with at least `confidence` (no normality assumed). With too few values for that, the
    interval is the full range and the coverage it does reach is returned."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        raise ValueError("no values")
    alpha = 1 - confidence
    # Largest k with P(X < k) <= alpha/2: [x_(k), x_(n-k+1)] (1-based) covers the median.
    k = 0
    while k + 1 <= n // 2 and _binom_cdf(k, n) <= alpha / 2:
        k += 1
    if k == 0:
        return xs[0], xs[-1], 1 - 2 * _binom_cdf(0, n) if n > 1 else 0.0
    coverage = 1 - 2 * _binom_cdf(k - 1, n)
    return xs[k - 1], xs[n - k], coverage


def summarize(values) -> dict:
    values = list(values)
    lo, hi, coverage = median_ci(values)
    mean = statistics.fmean(values)
    cv = statistics.stdev(values) / mean if len(values) > 1 and mean else 0.0
    return {"median": statistics.median(values), "ci_low": lo, "ci_high": hi,
            "ci_coverage": round(coverage, 4), "cv": cv, "n": len(values),
            "noisy": cv > NOISY_CV}
