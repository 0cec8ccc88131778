"""Summary statistics: median with a distribution-free confidence interval, and spread."""
from __future__ import annotations

import statistics

NOISY_CV = 0.05     # a case whose coefficient of variation exceeds this is flagged


def _binom_cdfs(n: int, upto: int) -> list[float]:
    """P(X <= k) for X ~ Binomial(n, 1/2), k = 0..upto: exact integer sums, one pass, so a
    large n (repeat allows 10000) costs O(n) big-integer steps rather than O(n^2) combs."""
    total, term, cum, out = 2 ** n, 1, 0, []
    for i in range(upto + 1):
        cum += term
        out.append(cum / total)           # int / int rounds correctly, however large
        term = term * (n - i) // (i + 1)
    return out


def median_ci(values, confidence: float = 0.95) -> tuple[float, float, float]:
    """The median and the order-statistic interval around it that covers the true median
    with at least `confidence` (no normality assumed). With too few values for that, the
    interval is the full range and the coverage it does reach is returned."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        raise ValueError("no values")
    alpha = 1 - confidence
    cdf = _binom_cdfs(n, n // 2)
    # Largest k with P(X < k) <= alpha/2: [x_(k), x_(n-k+1)] (1-based) covers the median.
    k = 0
    while k + 1 <= n // 2 and cdf[k] <= alpha / 2:
        k += 1
    if k == 0:
        return xs[0], xs[-1], 1 - 2 * cdf[0] if n > 1 else 0.0
    coverage = 1 - 2 * cdf[k - 1]
    return xs[k - 1], xs[n - k], coverage


def summarize(values) -> dict:
    values = list(values)
    lo, hi, coverage = median_ci(values)
    mean = statistics.fmean(values)
    cv = statistics.stdev(values) / mean if len(values) > 1 and mean else 0.0
    return {"median": statistics.median(values), "ci_low": lo, "ci_high": hi,
            "ci_coverage": round(coverage, 4), "cv": cv, "n": len(values),
            "noisy": cv > NOISY_CV}
