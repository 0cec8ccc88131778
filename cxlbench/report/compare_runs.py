"""`cxlbench compare A B`: pair the cases two runs share, and for each metric give the ratio
of medians B/A with a distribution-free confidence interval and a significance test, so a
difference that is only noise reads "not significant" instead of a ratio.

The test is Mann-Whitney's (exact null distribution for small samples, the normal
approximation above); the interval is the Hodges-Lehmann one that goes with it: order
statistics of the pairwise ratios b_j / a_i (differences where values are not all
positive). Neither assumes the repetitions are normally distributed."""
from __future__ import annotations

import json
import math
from functools import lru_cache

import numpy as np
import pandas as pd

from ..paramtext import NOT_MEASURED, value_text
from .runs import LoadedRun, fact_text, facts, hardware

ALPHA = 0.05
EXACT_LIMIT = 2500          # m * n up to this: exact null distribution
PAIRS_LIMIT = 1 << 22       # m * n up to this: the pairwise values are held and sorted


@lru_cache(maxsize=256)
def _null_cdf(m: int, n: int) -> tuple[float, ...]:
    """P(U <= k), k = 0..m*n, for the Mann-Whitney U of samples of m and n without ties:
    counts of U from f(i, j) = f(i-1, j) shifted by j + f(i, j-1)."""
    rows = [np.ones(1)] * (n + 1)                      # f(0, j): one way, U = 0
    for i in range(1, m + 1):
        prev, rows = rows, [np.ones(1)]                # f(i, 0): one way, U = 0
        for j in range(1, n + 1):
            f = np.zeros(i * j + 1)
            f[j:j + len(prev[j])] += prev[j]
            f[:len(rows[j - 1])] += rows[j - 1]
            rows.append(f)
    counts = rows[n]
    return tuple(np.cumsum(counts) / counts.sum())


def mann_whitney(a, b) -> float:
    """Two-sided p-value that a and b come from one distribution."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    m, n = len(a), len(b)
    # U counts the pairs with b above a (ties a half), from sorted A rather than all m * n
    # pairs: repeat allows 10000 a side.
    a_sorted = np.sort(a)
    below, upto = np.searchsorted(a_sorted, b, "left"), np.searchsorted(a_sorted, b, "right")
    u = float(below.sum() + 0.5 * (upto - below).sum())
    if m * n <= EXACT_LIMIT:
        cdf = _null_cdf(m, n)
        lo = cdf[math.floor(u)]                               # P(U <= u)
        hi = 1 - (cdf[math.ceil(u) - 1] if math.ceil(u) >= 1 else 0.0)   # P(U >= u)
        return min(1.0, 2 * min(lo, hi))
    both = np.concatenate([a, b])
    _, ties = np.unique(both, return_counts=True)
    var = m * n / 12 * ((m + n + 1) - (ties ** 3 - ties).sum() / ((m + n) * (m + n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u - m * n / 2) - 0.5) / math.sqrt(var)
    return min(1.0, math.erfc(max(z, 0) / math.sqrt(2)))


def _critical(m: int, n: int, alpha: float) -> int | None:
    """The largest c with P(U <= c) <= alpha/2; None where no c is that unlikely (too few
    repetitions for any difference to be significant)."""
    if m * n <= EXACT_LIMIT:
        cdf = _null_cdf(m, n)
        c = None
        for k, p in enumerate(cdf):
            if p > alpha / 2:
                break
            c = k
        return c
    c = math.floor(m * n / 2 - _z(alpha) * math.sqrt(m * n * (m + n + 1) / 12))
    return c if c >= 0 else None


def _z(alpha: float) -> float:
    """The two-sided normal quantile: erfc(z / sqrt 2) = alpha."""
    lo, hi = 0.0, 10.0
    for _ in range(100):                # bisection on the normal tail
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if math.erfc(mid / math.sqrt(2)) > alpha else (lo, mid)
    return (lo + hi) / 2


def compare_values(a, b, alpha: float = ALPHA) -> dict:
    """Ratio of medians B/A, its (1 - alpha) interval, the p-value and a verdict."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    med_a, med_b = float(np.median(a)), float(np.median(b))
    p = mann_whitney(a, b)
    c = _critical(len(a), len(b), alpha)
    positive = (a > 0).all() and (b > 0).all()
    last = len(a) * len(b) - 1
    lo, hi = _pairwise(a, b, positive, [0, last] if c is None else [c, last - c])
    if not positive:        # differences -> ratios to A's median, where that means anything
        lo, hi = ((med_a + lo) / med_a, (med_a + hi) / med_a) if med_a else (math.nan, math.nan)
    ratio = med_b / med_a if med_a else math.nan
    significant = c is not None and p < alpha and not (lo <= 1 <= hi)
    if significant:
        verdict = f"{(ratio - 1) * 100:+.1f} %"
    elif c is None:
        verdict = f"not significant (n={len(a)} and {len(b)}: too few to tell)"
    else:
        verdict = "not significant"
    return {"median_a": med_a, "median_b": med_b, "ratio": ratio, "ci_low": float(lo),
            "ci_high": float(hi), "p": p, "significant": bool(significant),
            "verdict": verdict}


def _pairwise(a, b, positive: bool, ranks: list[int]) -> list[float]:
    """The values of the given ranks (0-based, ascending) among the pairwise b_j / a_i
    (positive) or b_j - a_i. Up to PAIRS_LIMIT pairs they are sorted; beyond, each is found
    by bisection on how many pairs lie at or below a value (from sorted B, O(m log n) per
    step), without holding m * n values, and snapped to the pair value it closed in on."""
    if len(a) * len(b) <= PAIRS_LIMIT:
        pairs = np.sort((b[None, :] / a[:, None] if positive else b[None, :] - a[:, None])
                        .ravel())
        return [float(pairs[r]) for r in ranks]
    a_sorted, b_sorted = np.sort(a), np.sort(b)

    def at_or_below(t: float) -> int:
        edge = a_sorted * t if positive else a_sorted + t
        return int(np.searchsorted(b_sorted, edge, "right").sum())
    if positive:
        span = (b_sorted[0] / a_sorted[-1], b_sorted[-1] / a_sorted[0])
    else:
        span = (b_sorted[0] - a_sorted[-1], b_sorted[-1] - a_sorted[0])
    out = []
    for r in ranks:                     # the smallest t with more than r pairs <= t
        lo, hi = span
        while hi - lo > 1e-12 * max(abs(lo), abs(hi), 1e-300):
            mid = (lo + hi) / 2
            if mid in (lo, hi):
                break
            lo, hi = (lo, mid) if at_or_below(mid) > r else (mid, hi)
        out.append(_largest_pair_at_or_below(a_sorted, b_sorted, hi, positive))
    return out


def _largest_pair_at_or_below(a_sorted, b_sorted, t: float, positive: bool) -> float:
    """The pairwise value itself that bisection closed in on: per a_i the largest b_j
    with b_j / a_i (or b_j - a_i) at most t, then the largest of those."""
    edge = a_sorted * t if positive else a_sorted + t
    j = np.searchsorted(b_sorted, edge, "right") - 1
    has = j >= 0
    values = (b_sorted[j[has]] / a_sorted[has] if positive
              else b_sorted[j[has]] - a_sorted[has])
    return float(values[values <= t].max(initial=values.min(initial=t)))


def _key(row) -> str:
    params = {k: v for k, v in row["params"].items() if k not in NOT_MEASURED}
    return json.dumps([row["benchmark"], params], sort_keys=True, default=str)


def _why_unpaired(case: str, params: dict, other: pd.DataFrame, side: str) -> str:
    same_id = other[other["case"] == case]
    if len(same_id):
        theirs = same_id.iloc[0]["params"]
        diff = [f"{k}={value_text(k, params.get(k))} vs {value_text(k, theirs.get(k))}"
                for k in sorted(set(params) | set(theirs))
                if k not in NOT_MEASURED and params.get(k) != theirs.get(k)]
        return f"parameters differ from {side}'s {case}: " + ", ".join(diff)
    job = case.rsplit("/", 1)[0]
    if (other["job"] == job).any():
        return f"{side}'s job {job} has no case with these parameters"
    return f"{side} has no job {job}"


def pair(frame_a: pd.DataFrame, frame_b: pd.DataFrame, alpha: float = ALPHA):
    """(compared rows, unpaired cases with why). Cases pair when benchmark and every
    parameter that changes the measurement are equal; then each shared metric is compared."""
    a_cases = frame_a.drop_duplicates("case")
    b_cases = frame_b.drop_duplicates("case")
    b_by_key: dict[str, str] = {}
    for _, r in b_cases.iterrows():
        b_by_key.setdefault(_key(r), r["case"])
    matched: dict[str, str] = {}
    unpaired = []
    for _, r in a_cases.iterrows():
        partner = b_by_key.pop(_key(r), None)
        if partner is None:
            unpaired.append({"side": "A", "case": r["case"],
                             "why": _why_unpaired(r["case"], r["params"], b_cases, "B")})
        else:
            matched[r["case"]] = partner
    for key, case in b_by_key.items():
        params = b_cases[b_cases["case"] == case].iloc[0]["params"]
        unpaired.append({"side": "B", "case": case,
                         "why": _why_unpaired(case, params, a_cases, "A")})
    rows = []
    b_metrics = {(r["case"], r["metric"]): r for _, r in frame_b.iterrows()}
    for _, ra in frame_a.iterrows():
        rb = b_metrics.get((matched.get(ra["case"]), ra["metric"]))
        if rb is None:
            continue
        rows.append({"case_a": ra["case"], "case_b": rb["case"], "benchmark": ra["benchmark"],
                     "params": ra["params"], "metric": ra["metric"], "unit": ra["unit"],
                     "predicted": ra["predicted"],
                     "n_a": len(ra["values"]), "n_b": len(rb["values"]),
                     **compare_values(ra["values"], rb["values"], alpha)})
        if ra["predicted"]:     # the model's figures, not samples: no test, no change
            rows[-1].update(significant=False, verdict=f"predicted: B/A {rows[-1]['ratio']:.3f}")
    table = pd.DataFrame(rows)
    if len(table):
        size = np.abs(np.log(table["ratio"].where(table["ratio"] > 0)))
        table = table.assign(_sig=~table["significant"], _size=-size.fillna(0)) \
                     .sort_values(["_sig", "_size"]).drop(columns=["_sig", "_size"]) \
                     .reset_index(drop=True)
    return table, unpaired


def across_machines(a: LoadedRun, b: LoadedRun) -> str | None:
    """Why A and B ran on different machines, from what they recorded (machine ids, then
    the hardware), not from the folders they sit in; None where it is one machine."""
    if a.machine != b.machine:
        return f"A on {a.machine}, B on {b.machine}"
    fa, fb = hardware(a.meta), hardware(b.meta)
    differ = [k for k in fa if fa[k] is not None and fb[k] is not None and fa[k] != fb[k]]
    if differ:
        return f"A and B ran on hosts both named {a.machine} whose {', '.join(differ)} differ"
    return None


# A measured rate moves a little between two runs on one machine: it differs only beyond
# this relative tolerance. The current CPU frequency is one sample of a governor's choice
# at the start (idle or busy), so it is shown in reports and not compared.
TOLERANCE = {"TSC GHz": 0.01}
NOT_COMPARED = ("cpu_mhz",)


def _same(name: str, a, b) -> bool:
    if name in TOLERANCE and isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= TOLERANCE[name] * max(abs(a), abs(b))
    return a == b


def _merged_order(first: list[str], second: list[str]) -> list[str]:
    """first's names, with each name only second has placed after the one it follows
    there (settings of a newer run keep their place among the others)."""
    out = list(first)
    for i, name in enumerate(second):
        if name not in out:
            out.insert(out.index(second[i - 1]) + 1 if i else 0, name)
    return out


def setting_differences(a: LoadedRun, b: LoadedRun) -> tuple[list[tuple[str, str, str]],
                                                         dict[str, list[str]]]:
    """As pyperf compares metadata: every recorded fact (kernel, CPU and ISAs, THP, NUMA
    balancing, governor, SMT, cxlbench version, compiler, emulation...) that differs,
    as (name, A's, B's); and, by side, the facts only the other side recorded."""
    fa, fb = facts(a.meta), facts(b.meta)
    diffs, missing = [], {"A": [], "B": []}
    for name in _merged_order(list(fa), list(fb)):
        if name in NOT_COMPARED:
            continue
        va, vb = fa.get(name), fb.get(name)
        if va is None or vb is None:
            if va is not None or vb is not None:
                missing["A" if va is None else "B"].append(name)
        elif not _same(name, va, vb):
            diffs.append((name, fact_text(va), fact_text(vb)))
    return diffs, missing
