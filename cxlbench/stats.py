"""Summary statistics: median with a distribution-free confidence interval, and spread."""
from __future__ import annotations

import functools
import statistics

import numpy as np

from .atfirstuse import AtFirstUse

pd = AtFirstUse("pandas")     # only summarize_groups needs it: every CLI command imports this

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


@functools.lru_cache(maxsize=None)
def ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int, float]:
    """For n values: the 0-based ranks of median_ci's interval ends and its coverage."""
    alpha, cdf = 1 - confidence, _binom_cdfs(n, n // 2)
    k = 0
    while k + 1 <= n // 2 and cdf[k] <= alpha / 2:
        k += 1
    if k == 0:
        return 0, n - 1, (1 - 2 * cdf[0] if n > 1 else 0.0)
    return k - 1, n - k, 1 - 2 * cdf[k - 1]


def summarize_groups(values: np.ndarray, groups: np.ndarray) -> pd.DataFrame:
    """summarize() of every group at once, without a Python step per group: `groups` holds
    each value's group as an integer 0..G-1; the result has a row per group in that order
    (median, ci_low, ci_high, ci_coverage, cv, n, noisy). The ranks and order statistics
    are the same as summarize's; means and deviations agree with it to rounding."""
    values = np.asarray(values, dtype=float)
    groups = np.asarray(groups, dtype=np.int64)
    order = np.lexsort((values, groups))         # by group, then value
    xs, gs = values[order], groups[order]
    n = np.bincount(gs)
    start = np.concatenate(([0], np.cumsum(n)[:-1]))
    lo_hi = np.array([ci_ranks(int(k))[:2] if k else (0, 0) for k in range(n.max() + 1)])
    cover = np.array([round(ci_ranks(int(k))[2], 4) if k else 0.0 for k in range(n.max() + 1)])
    median = (xs[start + (n - 1) // 2] + xs[start + n // 2]) / 2
    mean = np.bincount(gs, weights=xs) / n
    dev = xs - mean[gs]
    var = np.bincount(gs, weights=dev * dev) / np.maximum(n - 1, 1)
    spread = xs[start + n - 1] > xs[start]      # equal values: no spread, not rounding's
    with np.errstate(divide="ignore", invalid="ignore"):
        cv = np.where((n > 1) & (mean != 0) & spread, np.sqrt(var) / mean, 0.0)
    return pd.DataFrame({"median": median, "ci_low": xs[start + lo_hi[n, 0]],
                         "ci_high": xs[start + lo_hi[n, 1]], "ci_coverage": cover[n],
                         "cv": cv, "n": n, "noisy": cv > NOISY_CV})
