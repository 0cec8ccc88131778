"""Index streams for lookup workloads: which rows of a table a stream of lookups
names. Uniform; Zipf(alpha); and reuse profiles, streams whose histogram of per-row reuse
counts follows a published one. Pure numpy, no Python loop per lookup."""
from __future__ import annotations

import functools
import hashlib
import math
import os
from dataclasses import dataclass

import numpy as np

from ..errors import UserError


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
# Meta's public embedding lookup traces (github.com/facebookresearch/dlrm_datasets,
# embedding_bag/2022/locality_stats.txt and embedding_bag/locality_stats.txt): for each
# trace file, the share of distinct rows ("cols") and of lookups whose per-row count falls
# in (0,1], (1,2], (2,4] ... (32768, inf), and the mean count ("Avg col size"). The buckets
# here merge those bins at the points the issue cites; the mean reuse is the published one,
# which fixes the once-used rows' share of lookups (each serves exactly one).
PROFILES = {
    # fbgemm_t788_bs131072_*.pt (788 tables, batch 131072, 1.405e9 lookups, 1.103e8
    # distinct rows, mean count 12.7): 34.2 % of rows used once; 11.4 % reused over 16
    # times serve 73.8 %; 1.8 % reused over 64 times serve 51.9 %.
    "meta-2022": Profile("Meta embedding lookup traces, 2022", (
        Bucket(1, 1, 0.34, 0.34 / 12.7), Bucket(2, 16, 0.546, 0.26 - 0.34 / 12.7),
        Bucket(17, 64, 0.096, 0.22), Bucket(65, TOP, 0.018, 0.52))),
    # fbgemm_t856_bs65536.pt (856 tables, batch 65536, 8.87e8 lookups, mean count 6.9):
    # 47.3 % of rows used once; 0.8 % reused over 64 times serve 42 %.
    "meta-2021": Profile("Meta embedding lookup traces, 2021", (
        Bucket(1, 1, 0.47, 0.47 / 6.9), Bucket(2, 64, 0.522, 0.58 - 0.47 / 6.9),
        Bucket(65, TOP, 0.008, 0.42))),
}


def uniform(rows: int, count: int, rng: np.random.Generator, far: float = 1.0,
            corner: int = 1) -> np.ndarray:
    """Rows drawn uniformly; where far < 1, only that share of them, the rest from the
    first `corner` rows (a hot corner the caches keep: misses spaced out, not dense)."""
    picked = rng.integers(0, rows, count)
    if far < 1.0:
        near = rng.random(count) >= far
        picked[near] = rng.integers(0, max(1, min(rows, corner)), int(near.sum()))
    return picked


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


# ---- recorded traces -------------------------------------------------------------------
TRACE_ARRAYS = ("indices", "offsets", "lengths")


@dataclass(frozen=True)
class Trace:
    """Bags of lookups read from a file, laid out as FBGEMM's table-batched embeddings take
    them (and as Meta's dlrm_datasets traces hold them): `tables` x `batch` bags, table
    after table; `offsets` (tables * batch + 1, from 0) cut `indices` into bags; each
    table's indices count from its own row 0."""
    name: str                   # the file's name, as results record it
    sha256: str                 # of the file's bytes (of each .npy, in name order, for a folder)
    indices: np.ndarray         # int64
    offsets: np.ndarray         # int64
    tables: int
    batch: int                  # bags per table
    rows: tuple[int, ...]       # per table: its highest row looked up + 1 (or the rows given)

    def table_bags(self, t: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """Table t's first `batch` bags: their indices and offsets counted from 0."""
        off = self.offsets[t * self.batch:t * self.batch + batch + 1]
        return self.indices[off[0]:off[-1]], off - off[0]


def _sha256(paths) -> str:
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def _read_arrays(path: str) -> tuple[dict, list[str]]:
    """The trace's arrays by name, and the files they came from: a .npz, or a folder of
    indices.npy and offsets.npy or lengths.npy (read memory-mapped)."""
    if os.path.isdir(path):
        files = {n: os.path.join(path, n + ".npy") for n in TRACE_ARRAYS}
        files = {n: f for n, f in files.items() if os.path.isfile(f)}
        return {n: np.load(f, mmap_mode="r", allow_pickle=False) for n, f in files.items()}, \
            sorted(files.values())
    if path.endswith(".npy"):
        raise ValueError("a .npy file holds one array: give a .npz holding indices and "
                         "offsets (or lengths), or a folder of indices.npy and offsets.npy")
    with np.load(path, allow_pickle=False) as z:
        if not hasattr(z, "files"):
            raise ValueError("not a .npz archive")
        # only the trace's arrays: an archive may hold more (dense features, labels)
        return {n: z[n] if n in TRACE_ARRAYS else None for n in z.files}, [path]


def load_trace(path: str, tables: int | None = None, rows: int | None = None) -> Trace:
    """Read and check a trace. `tables` splits 1-D offsets or lengths into that many tables
    (2-D lengths, (tables, batch) as the dlrm_datasets files hold them, say it themselves);
    `rows` gives every table that many rows instead of its highest index + 1. Whatever is
    wrong with the file is one UserError line naming it."""
    name = os.path.basename(path.rstrip(os.sep)) or path

    def bad(why: str) -> UserError:
        return UserError(f"trace {name}: {why}")
    try:
        arrays, files = _read_arrays(path)
    except FileNotFoundError:
        raise bad("no such file") from None
    except Exception as e:          # zipfile, pickle, format and OS errors alike
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise bad(f"cannot be read as a trace ({first})") from None
    held = ", ".join(sorted(arrays)) or "nothing"
    arrays = {n: a for n, a in arrays.items() if n in TRACE_ARRAYS}
    if "indices" not in arrays or not ({"offsets", "lengths"} & set(arrays)):
        raise bad(f"needs arrays 'indices' and 'offsets' (or 'lengths'); it holds {held}")
    for n, a in arrays.items():
        if a.dtype.kind not in "iu":
            raise bad(f"'{n}' holds {a.dtype}, not integers")
    indices = np.ascontiguousarray(arrays["indices"], dtype=np.int64).reshape(-1)
    if not indices.size:
        raise bad("'indices' is empty")
    lengths = arrays.get("lengths")
    if lengths is not None:
        if lengths.ndim > 2:
            raise bad(f"'lengths' has {lengths.ndim} dimensions: 1 (bags) or 2 (tables, bags)")
        if lengths.ndim == 2:
            if tables not in (None, lengths.shape[0]):
                raise bad(f"'lengths' is {lengths.shape[0]} tables x {lengths.shape[1]} bags, "
                          f"not {tables} tables")
            tables = lengths.shape[0]
        lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
        if (lengths < 0).any():
            b = int(np.flatnonzero(lengths < 0)[0])
            raise bad(f"'lengths' has a negative bag size ({int(lengths[b])} at bag {b})")
        from_lengths = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    offsets = arrays.get("offsets")
    if offsets is None:
        offsets = from_lengths
    else:
        offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1)
        if offsets.size < 2 or offsets[0] != 0:
            raise bad("'offsets' must start at 0 and hold one more entry than there are bags")
        step = np.diff(offsets)
        if (step < 0).any():
            b = int(np.flatnonzero(step < 0)[0])
            raise bad(f"'offsets' are not monotone: bag {b} runs from {int(offsets[b])} to "
                      f"{int(offsets[b + 1])}")
        if lengths is not None and (offsets.size != from_lengths.size
                                    or (offsets != from_lengths).any()):
            raise bad("'offsets' and 'lengths' disagree (offsets must be 0 and the running "
                      "sum of lengths)")
    if offsets[-1] != indices.size:
        raise bad(f"the bags cover {int(offsets[-1])} lookups but 'indices' holds "
                  f"{indices.size}")
    bags = offsets.size - 1
    tables = tables or 1
    if bags % tables:
        raise bad(f"{bags} bags do not split into {tables} tables of equal batch")
    batch = bags // tables
    if indices.min() < 0:
        i = int(np.argmin(indices))
        raise bad(f"'indices' has a negative row ({int(indices[i])} at lookup {i})")
    starts, ends = offsets[:-1:batch], offsets[batch::batch]
    top = np.full(tables, -1, dtype=np.int64)
    full = ends > starts        # a table with no lookups at all has 1 row
    # Between two tables with lookups lie only empty ones: each segment is one table's.
    top[full] = np.maximum.reduceat(indices, starts[full])
    if rows is not None and top.max() >= rows:
        t = int(np.argmax(top >= rows))
        raise bad(f"indices out of range: table {t} looks up row {int(top[t])}, but rows="
                  f"{rows}")
    per_table = ((rows,) * tables if rows is not None else
                 tuple(int(r) + 1 for r in np.maximum(top, 0)))
    return Trace(name, _sha256(files), indices, offsets, tables, batch, per_table)

