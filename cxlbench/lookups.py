"""Index streams for lookup workloads (embedding bags now, KV blocks and tiering later):
which rows of a table a stream of lookups names. Uniform; Zipf(alpha); and reuse profiles,
streams whose histogram of per-row reuse counts follows a published one. Pure numpy, no
Python loop per lookup."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from .errors import UserError


@dataclass(frozen=True)
class Bucket:
    lo: int                 # reuse counts lo..hi (lookups of one row in the stream)
    hi: int
    rows: float             # share of the distinct rows looked up whose count is here
    lookups: float          # share of all lookups those rows serve


@dataclass(frozen=True)
class Profile:
    source: str
    buckets: tuple[Bucket, ...]

    @property
    def mean_reuse(self) -> float:
        """Lookups per distinct row: the once-used rows' share of rows over their share of
        lookups (each serves exactly one)."""
        once = self.buckets[0]
        return once.rows / once.lookups

    def mean(self, b: Bucket) -> float:
        """The mean reuse count of a bucket's rows."""
        return b.lookups * self.mean_reuse / b.rows


TOP = 1 << 20               # the highest reuse count drawn
# Meta's public embedding lookup traces (dlrm_datasets, 2021 and 2022). What is published
# is a few points; the buckets between them are filled so that every bucket's mean count
# lies inside it, with the mean reuse (lookups per distinct row) chosen where noted.
PROFILES = {
    # 1.8 % of rows reused over 64 times serve 52 % of lookups, 11.4 % reused over 16 times
    # serve 74 %, 34 % are used once. Mean reuse 14.4: the 17..64 rows' mean count is 33.
    "meta-2022": Profile("Meta embedding lookup traces, 2022", (
        Bucket(1, 1, 0.34, 0.34 / 14.4), Bucket(2, 16, 0.546, 0.26 - 0.34 / 14.4),
        Bucket(17, 64, 0.096, 0.22), Bucket(65, TOP, 0.018, 0.52))),
    # 0.8 % of rows reused over 64 times serve 42 % of lookups, 47 % are used once. Mean
    # reuse 6: the 2..64 rows' mean count is 5.8, the top rows' 315.
    "meta-2021": Profile("Meta embedding lookup traces, 2021", (
        Bucket(1, 1, 0.47, 0.47 / 6), Bucket(2, 64, 0.522, 0.58 - 0.47 / 6),
        Bucket(65, TOP, 0.008, 0.42))),
}


def uniform(rows: int, count: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, rows, count)


def scatter(ranks: np.ndarray, rows: int, rng: np.random.Generator) -> np.ndarray:
    """Ranks 0..rows-1 to rows by an affine map mod rows that is a bijection, so popular
    rows lie apart, as a hashed feature's do."""
    # rank * mult stays below 2^63: the map is a bijection for tables of any size
    top = max(2, min(rows + 1, (1 << 63) // rows - rows))
    mult = int(rng.integers(1, top)) | 1
    while math.gcd(mult, rows) != 1:
        mult += 2
    return (ranks * mult % rows + int(rng.integers(0, rows))) % rows


def zipf(rows: int, count: int, alpha: float, rng: np.random.Generator) -> np.ndarray:
    """Rank k (from 1) drawn with weight k^-alpha, by the inverse CDF of the continuous
    power law over [1, rows + 1), then scattered."""
    u = rng.random(count)
    n1 = rows + 1.0
    if abs(alpha - 1.0) < 1e-9:
        x = np.power(n1, u)
    else:
        e = 1.0 - alpha
        x = np.power((n1 ** e - 1.0) * u + 1.0, 1.0 / e)
    return scatter(np.minimum(x.astype(np.int64) - 1, rows - 1), rows, rng)


@functools.lru_cache(maxsize=64)
def _power_law(lo: int, hi: int, mean: float) -> np.ndarray:
    """Probabilities of counts lo..hi proportional to c^-s, s found by bisection so that
    the mean count is `mean` (the mean falls as s grows)."""
    c = np.arange(lo, hi + 1, dtype=np.float64)
    if lo == hi:
        return np.ones(1)

    def probs(s):
        w = np.exp(-s * (np.log(c) - math.log(lo)))
        return w / w.sum()
    low, high = -5.0, 20.0
    for _ in range(60):
        mid = (low + high) / 2
        if (probs(mid) * c).sum() > mean:
            low = mid
        else:
            high = mid
    return probs((low + high) / 2)


def reuse(rows: int, count: int, profile: str, rng: np.random.Generator) -> np.ndarray:
    """`count` lookups whose per-row reuse counts follow the profile's buckets: as many
    distinct rows as the profile's mean reuse gives (at most the table's), each bucket's
    share of them drawing counts from a power law with the bucket's mean, the lookups
    shuffled, cut or repeated to `count`."""
    p = PROFILES.get(profile)
    if p is None:
        raise UserError(f"unknown reuse profile {profile!r}: use one of {', '.join(PROFILES)}")
    distinct = max(1, min(rows, round(count / p.mean_reuse)))
    sizes = [round(b.rows * distinct) for b in p.buckets]
    sizes[1] += distinct - sum(sizes)       # rounding lands in the widest bucket
    drawn = [rng.choice(np.arange(b.lo, min(b.hi, count) + 1), size=n,
                        p=_power_law(b.lo, min(b.hi, count), min(p.mean(b), count)))
             for b, n in zip(p.buckets, sizes)]
    top, lo = drawn[-1], p.buckets[-1].lo
    # The top bucket's heavy tail makes the total wander: its rows absorb the difference
    # in proportion to their counts, so no row leaves its bucket for it.
    if top.size and top.sum() + count - sum(int(d.sum()) for d in drawn) >= lo * top.size:
        want = top.sum() + count - sum(int(d.sum()) for d in drawn)
        scaled = np.maximum(lo, np.floor(top * want / top.sum()).astype(np.int64))
        scaled[np.argmax(scaled)] += want - scaled.sum()
        drawn[-1] = scaled
    ids = scatter(rng.permutation(distinct), rows, rng)
    stream = np.repeat(ids, np.concatenate(drawn))
    rng.shuffle(stream)
    return np.resize(stream, count)     # exact already, unless the table was too small


def reuse_histogram(indices: np.ndarray, buckets) -> list[tuple[float, float]]:
    """(share of distinct rows, share of lookups) of each bucket in a stream: what the
    profiles are checked against."""
    counts = np.bincount(indices)
    counts = counts[counts > 0]
    out = []
    for b in buckets:
        sel = (counts >= b.lo) & (counts <= b.hi)
        out.append((sel.sum() / counts.size, counts[sel].sum() / counts.sum()))
    return out
