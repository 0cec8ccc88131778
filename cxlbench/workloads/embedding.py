"""The embedding-bag workload, the sparse half of recommendation models (DLRM): tables
stacked in one buffer as FBGEMM keeps them, bags of lookups drawn from a distribution, a
reuse profile or a recorded trace, the tables' values, numpy's pooling of the same bags
that every run is checked against, the training step after a forward, and the epochs the
tiering engines drive. The embedding benchmark and the tiering engines run it."""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

import numpy as np

from .. import tuning
from ..errors import CheckError, UserError
from ..memory import native
from ..options import Option
from . import lookups
from ..placement import PAGE_SIZES
from ..units import format_size
from .epochs import Demand, pages_touched, working_sets
from .lookups import PROFILES

NAME = "embedding"


# CXB_EMB_* and CXB_POOL_* in native/cxlbench.h, in value order (tested against native).
DTYPES = ("fp32", "fp16", "bf16", "int8")
POOLS = ("sum", "mean")
OPTIMIZERS = ("sgd", "adagrad")     # CXB_OPTIM_*, likewise
EPS = 1e-8                  # Adagrad's, FBGEMM's default
ELEM_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}
INT8_TAIL = 8               # an int8 row ends with its fp32 scale and bias
CHUNK_ROWS = 1 << 16        # rows per numpy step when filling a table


# MLPerf DLRM-DCNv2 (Criteo 1TB, multi-hot): rows and pooling of its 26 tables, dim 128,
# from the reference's --num_embeddings_per_feature and --multi_hot_sizes.
PRESETS = {
    "dlrm-dcnv2": {
        "dim": 128,
        "rows": (40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956,
                 405282, 10, 2209, 11938, 155, 4, 976, 14, 40000000, 40000000, 40000000,
                 590152, 12973, 108, 36),
        "pooling": (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10,
                    3, 1, 1),
    },
    # Meta's public 2022 embedding traces (dlrm_datasets, embedding_bag/2022): 788 tables
    # (fbgemm_t788_bs131072_*.pt), 1.405e9 lookups a batch of 131072, so 13.6 a bag on
    # average (14 here, every table: per-table pooling is in the files, not published as
    # figures), indices with the traces' published reuse histogram (lookups.PROFILES).
    # Assumed, as nothing public says: 1 M rows a table (the traces are post-hashed, their
    # tables' sizes unpublished; a table sees about 140 k distinct rows a batch) and dim 128.
    "meta-2022-like": {
        "dim": 128,
        "rows": (1000000,) * 788,
        "pooling": (14,) * 788,
        "dist": "reuse", "profile": "meta-2022",
    },
}


# The workload's own options; the benchmark adds where and how it runs.
OPTIONS = {
    "preset": Option("preset", "choice", "custom", "tables of a real model (rows, dim and "
                     "pooling its own); custom: tables x rows x dim, pooling",
                     choices=("custom", *PRESETS)),
    "scale": Option("scale", "float", 1.0, "a preset's rows times this (at least 1 each), to "
                    "fit the machine", min=1e-9, max=1.0),
    "tables": Option("tables", "int", 1, "tables (custom)", min=1, max=4096),
    "rows": Option("rows", "int", 1 << 20, "rows of each table (custom)", min=1, max=1 << 40),
    "size": Option("size", "size", 0, "bytes of each table (custom), instead of rows: its "
                   "rows are size / row bytes (0: rows sets them)", min=0),
    "dim": Option("dim", "int", 128, "elements per row (custom)", min=1, max=65536),
    "pooling": Option("pooling", "int", 32, "lookups per bag (custom)", min=1, max=65536),
    "dtype": Option("dtype", "choice", "fp32", "row elements: fp32, fp16, bf16, or int8 with "
                    "a row-wise fp32 scale and bias", choices=DTYPES),
    "pool": Option("pool", "choice", "sum", "how a bag's rows are pooled", choices=POOLS),
    "batch": Option("batch", "int", 2048, "bags per table per repetition (samples)", min=1,
                    max=1 << 24),
    "dist": Option("dist", "choice", "zipf", "row popularity: uniform; Zipf(alpha) over rows "
                   "scattered by a hash; or reuse, per-row reuse counts as a profile's",
                   choices=("uniform", "zipf", "reuse")),
    "alpha": Option("alpha", "float", 1.05, "Zipf exponent", min=0.0, max=10.0),
    "far": Option("far", "float", 1.0, "dist=uniform: the share of lookups drawn over the "
                  "whole table, the rest from its first 128 KiB (rows the caches keep): "
                  "how the kernel does when only some lookups miss", min=0.001,
                  max=1.0),
    "profile": Option("profile", "choice", "meta-2022", "reuse profile (dist=reuse): Meta's "
                      "public embedding traces of 2022 or 2021", choices=tuple(PROFILES)),
    "prefetch": Option("prefetch", "int", "auto", "rows prefetched ahead of the lookup, "
                       "across bags (0: none; auto: chosen by a short probe on this "
                       "machine per dtype, row size and distribution, kept in the cache)",
                       min=0, max=256, words=("auto",)),
    "regs": Option("regs", "int", "auto", "most vector registers a pass over a bag's "
                   "columns sums in (avx512: 16 zmm at most; avx2: 16 ymm, 8 unless asked; "
                   "fewer read each row in more passes); auto: chosen by the same probe",
                   min=1, max=16, words=("auto",)),
    "train": Option("train", "choice", "none", "after each forward, one training step on the "
                    "rows looked up (fp32 tables): sgd, or row-wise adagrad with its state",
                    choices=("none", *OPTIMIZERS)),
    "lr": Option("lr", "float", 0.01, "learning rate of the training step", min=0.0, max=1e6),
    "seed": Option("seed", "int", 1, "seed of the indices and the table's values", min=0),
    "trace": Option("trace", "path", "", "recorded bags instead of generated ones: a .npz "
                    "holding indices and offsets (or lengths, tables x bags), or a folder of "
                    "indices.npy and offsets.npy; rows: its highest index + 1 per table "
                    "unless rows is set; batch: its first bags per table"),
}


@dataclass(frozen=True)
class Layout:
    rows: tuple[int, ...]       # per table
    pooling: tuple[int, ...]    # per table
    dim: int
    dtype: str
    batch: int
    train: str = "none"
    table_lookups: tuple[int, ...] = ()     # a trace's, per table (its bags vary in size)

    @property
    def row_bytes(self) -> int:
        return self.dim * ELEM_BYTES[self.dtype] + (INT8_TAIL if self.dtype == "int8" else 0)

    @property
    def lookups(self) -> int:
        return sum(self.table_lookups) if self.table_lookups else self.batch * sum(self.pooling)

    @property
    def bags(self) -> int:
        return self.batch * len(self.rows)

    def sizes(self) -> dict[str, int]:
        """Bytes of each buffer: the stacked tables; the indices and offsets (and in
        training the lookups grouped by row: the rows, where each starts, their bags); the
        pooled fp32 vectors; Adagrad's state of one float per row."""
        grouped = 3 * self.lookups + 1 if self.train != "none" else 0
        return {"table": sum(self.rows) * self.row_bytes,
                "indices": (self.lookups + self.bags + 1 + grouped) * 8,
                "out": self.bags * self.dim * 4,
                **({"state": sum(self.rows) * 4} if self.train == "adagrad" else {})}


def trace_of(params: dict) -> lookups.Trace | None:
    """The case's trace, read and checked (once per process), or None."""
    if not params.get("trace"):
        return None
    rows = params["rows"] if params["rows"] != OPTIONS["rows"].default else None
    tables = params["tables"] if params["tables"] != OPTIONS["tables"].default else None
    path = params["trace"]
    try:
        st = os.stat(path)
        stamp = (st.st_size, st.st_mtime_ns)
    except OSError:
        stamp = None
    return _load_trace(path, stamp, tables, rows)


@functools.lru_cache(maxsize=1)      # check and run of one case read it once
def _load_trace(path, stamp, tables, rows) -> lookups.Trace:
    return lookups.load_trace(path, tables, rows)


def layout(params: dict) -> Layout:
    trace = trace_of(params)
    if trace is not None:
        batch = min(params["batch"], trace.batch)
        counts = tuple(int(trace.offsets[t * trace.batch + batch] - trace.offsets[t * trace.batch])
                       for t in range(trace.tables))
        pooling = tuple(max(1, round(c / batch)) for c in counts)      # for the record only
        return Layout(trace.rows, pooling, params["dim"], params["dtype"], batch,
                      params["train"], counts)
    preset = PRESETS.get(params["preset"])
    if preset is None:
        row_bytes = Layout((), (), params["dim"], params["dtype"], 0).row_bytes
        each = max(1, params["size"] // row_bytes) if params.get("size") else params["rows"]
        rows = (each,) * params["tables"]
        pooling, dim = (params["pooling"],) * params["tables"], params["dim"]
    else:
        rows = tuple(max(1, math.ceil(r * params["scale"])) for r in preset["rows"])
        pooling, dim = preset["pooling"], preset["dim"]
    return Layout(rows, pooling, dim, params["dtype"], params["batch"], params["train"])


def make_indices(lay: Layout, params: dict) -> tuple[np.ndarray, np.ndarray]:
    """The lookups (params' dist, alpha, profile, seed), table after table (each table's
    rows offset by the tables before it), and the bag offsets (bags + 1), as FBGEMM's
    table-batched embeddings take them."""
    trace = trace_of(params)
    if trace is not None:
        return trace_indices(trace, lay)
    rng = np.random.default_rng(params["seed"])
    dist, profile = index_source(params)
    parts, base = [], 0
    for rows, pooling in zip(lay.rows, lay.pooling):
        count = lay.batch * pooling
        picked = (lookups.uniform(rows, count, rng, params.get("far", 1.0),
                                  HOT_CORNER // lay.row_bytes) if dist == "uniform" else
                  lookups.zipf(rows, count, params["alpha"], rng) if dist == "zipf" else
                  lookups.reuse(rows, count, profile, rng))
        parts.append(picked + base)
        base += rows
    sizes = np.repeat(np.asarray(lay.pooling, dtype=np.int64), lay.batch)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    return np.concatenate(parts).astype(np.int64), offsets


def index_source(params: dict) -> tuple[str, str]:
    """(dist, profile) of the generated indices: a preset's own, else the options'."""
    preset = PRESETS.get(params.get("preset", "custom")) or {}
    return (preset.get("dist", params["dist"]),
            preset.get("profile", params.get("profile", OPTIONS["profile"].default)))


def trace_indices(trace: lookups.Trace, lay: Layout) -> tuple[np.ndarray, np.ndarray]:
    """The trace's first lay.batch bags of each table, stacked as make_indices stacks
    generated ones: each table's rows offset by the tables before it."""
    parts, sizes, base = [], [], 0
    for t, rows in enumerate(lay.rows):
        idx, off = trace.table_bags(t, lay.batch)
        parts.append(idx + base)
        sizes.append(np.diff(off))
        base += rows
    offsets = np.concatenate(([0], np.cumsum(np.concatenate(sizes)))).astype(np.int64)
    return np.concatenate(parts).astype(np.int64), offsets


def fill_table(raw: np.ndarray, lay: Layout, seed: int) -> None:
    """Random rows: floats in [-1, 1) (fp16 and bf16 rounded from them), int8 rows with a
    scale and bias of their own."""
    rng = np.random.default_rng(seed + 1)
    total = sum(lay.rows)
    rows = raw[:total * lay.row_bytes].reshape(total, lay.row_bytes)
    for lo in range(0, total, CHUNK_ROWS):
        hi = min(lo + CHUNK_ROWS, total)
        if lay.dtype == "int8":
            rows[lo:hi, :lay.dim] = rng.integers(0, 256, (hi - lo, lay.dim), dtype=np.uint8)
            tail = rng.random((hi - lo, 2), dtype=np.float32) * np.float32(0.02)
            rows[lo:hi, lay.dim:] = tail.view(np.uint8)
            continue
        values = rng.random((hi - lo, lay.dim), dtype=np.float32) * 2 - 1
        if lay.dtype == "fp16":
            values = values.astype(np.float16)
        elif lay.dtype == "bf16":
            values = (values.view(np.uint32) >> 16).astype(np.uint16)
        rows[lo:hi] = values.view(np.uint8).reshape(hi - lo, -1)


def as_float32(raw_rows: np.ndarray, lay: Layout) -> np.ndarray:
    """Rows (uint8, row_bytes each) as fp32, exactly as the kernel reads them."""
    body = np.ascontiguousarray(raw_rows[:, :lay.dim * ELEM_BYTES[lay.dtype]])
    if lay.dtype == "fp32":
        return body.view(np.float32)
    if lay.dtype == "fp16":
        return body.view(np.float16).astype(np.float32)
    if lay.dtype == "bf16":
        return (body.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    tail = np.ascontiguousarray(raw_rows[:, lay.dim:lay.dim + INT8_TAIL]).view(np.float32)
    return body.astype(np.float32) * tail[:, :1] + tail[:, 1:2]


def reference(raw: np.ndarray, lay: Layout, indices: np.ndarray, pool: str,
              offsets: np.ndarray | None = None) -> np.ndarray:
    """numpy's pooling of the same bags: each bag's rows added in index order in fp32 (the
    kernel's order, so fp32, fp16 and bf16 agree to the bit), then divided for a mean.
    Bags of any size (a trace's) need their offsets."""
    rows = raw[:sum(lay.rows) * lay.row_bytes].reshape(-1, lay.row_bytes)
    if lay.table_lookups:
        return _reference_bags(rows, lay, indices, offsets, pool)
    out, start = [], 0
    chunk = max(1, (16 << 20) // (lay.dim * 4))        # bags a step: 16 MiB of fp32 rows
    for pooling in lay.pooling:
        for lo in range(0, lay.batch, chunk):
            hi = min(lo + chunk, lay.batch)
            idx = indices[start + lo * pooling:start + hi * pooling].reshape(hi - lo, pooling)
            acc = as_float32(rows[idx[:, 0]], lay).copy()
            for p in range(1, pooling):
                acc += as_float32(rows[idx[:, p]], lay)
            if pool == "mean":
                acc /= np.float32(pooling)
            out.append(acc)
        start += lay.batch * pooling
    return np.concatenate(out)


def _reference_bags(rows: np.ndarray, lay: Layout, indices: np.ndarray, offsets, pool: str):
    """reference() for bags of any size: in chunks of bags, the bags of each size pooled
    together, row after row as the kernel adds them; an empty bag is zeros."""
    out = np.zeros((len(offsets) - 1, lay.dim), dtype=np.float32)
    budget = max(1, (16 << 20) // (lay.dim * 4))        # lookups a step: 16 MiB of fp32 rows
    lo = 0
    while lo < len(out):
        hi = max(lo + 1, int(np.searchsorted(offsets, offsets[lo] + budget, "right")) - 1)
        hi = min(hi, len(out))
        sizes = np.diff(offsets[lo:hi + 1])
        for size in np.unique(sizes[sizes > 0]).tolist():
            bags = np.flatnonzero(sizes == size) + lo
            idx = indices[offsets[bags][:, None] + np.arange(size)]
            acc = as_float32(rows[idx[:, 0]], lay).copy()
            for p in range(1, size):
                acc += as_float32(rows[idx[:, p]], lay)
            if pool == "mean":
                acc /= np.float32(size)
            out[bags] = acc
        lo = hi
    return out


def check_output(out: np.ndarray, want: np.ndarray, lay: Layout, bad: int) -> None:
    if bad:
        raise CheckError(f"embedding: {bad} lookups named no row of the table")
    if lay.dtype == "int8":     # q * scale + bias may be one fused rounding in the kernel
        ok = np.allclose(out, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max(initial=1)))
    else:
        ok = np.array_equal(out, want)
    if not ok:
        wrong = int(np.flatnonzero((out != want).any(axis=1))[0])
        raise CheckError(f"embedding: bag {wrong} differs from numpy's pooling of the same "
                         f"rows ({out[wrong, :3]} against {want[wrong, :3]})")


HOT_CORNER = 128 << 10          # far < 1: the bytes of a table's first rows the rest hit
CUSTOM = ("tables", "rows", "size", "dim", "pooling")     # what a preset sets itself
GENERATED = ("dist", "alpha", "far", "profile")   # what a preset with a dist or a trace sets


def group_by_row(indices: np.ndarray, offsets: np.ndarray) -> tuple:
    """The lookups grouped by row, as the training step takes them: the distinct rows, where
    each row's lookups start (and the end), and the bag of each lookup, in bag order."""
    k = len(indices)
    bag_of = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
    if k and int(indices.max()) < (2**63 - 1) // k:
        # row x k + position: one plain sort of int64 (numpy's SIMD one) orders the lookups
        # by row, each row's in bag order, 4x faster than a stable argsort here
        keys = indices * k + np.arange(k)
        keys.sort()
        by_row, order = np.divmod(keys, k)
        starts = np.flatnonzero(np.diff(by_row, prepend=-1))
        return by_row[starts], np.append(starts, k).astype(np.int64), bag_of[order]
    order = np.argsort(indices, kind="stable")
    rows, starts = np.unique(indices[order], return_index=True)
    return rows, np.append(starts, k).astype(np.int64), bag_of[order]


class Trainer:
    """The training step after each forward: the lookups grouped by row (untimed, once:
    FBGEMM sorts them in every backward), the C step timed, and numpy's step on the same
    rows from their values before it checked against it."""

    def __init__(self, lay: Layout, params: dict, table, indices, offsets, out, space,
                 state):
        self.lay, self.params, self.table, self.out, self.offsets = lay, params, table, out, offsets
        rows, starts, bag_of = group_by_row(indices, offsets)
        lengths = np.diff(offsets)
        n, k = len(rows), len(indices)
        space[:n], space[n:2 * n + 1], space[2 * n + 1:2 * n + 1 + k] = rows, starts, bag_of
        self.rows, self.starts, self.bag_of = space[:n], space[n:2 * n + 1], space[2 * n + 1:2 * n + 1 + k]
        self.lengths = lengths.astype(np.float32)
        self.weights = table.array(np.float32)[:sum(lay.rows) * lay.dim].reshape(-1, lay.dim)
        self.state = None if state is None else state.array(np.float32)[:sum(lay.rows)]
        if self.state is not None:
            self.state.fill(0)

    def step(self, cpus) -> int:
        """One step, checked; the ns of the C step."""
        before = self.weights[self.rows]
        s_before = None if self.state is None else self.state[self.rows]
        ns = native.embedding_update(self.table.addr, self.lay.row_bytes, self.lay.dim,
                                     self.params["train"], self.params["pool"], self.rows,
                                     self.starts, self.bag_of, self.offsets, self.out,
                                     self.state, self.params["lr"], EPS, cpus)
        grads = self.out[self.bag_of]
        if self.params["pool"] == "mean":
            grads = grads / self.lengths[self.bag_of][:, None]
        g = np.add.reduceat(grads, self.starts[:-1], axis=0)    # in bag order, per row
        lr = np.float32(self.params["lr"])
        if s_before is None:
            want = before - lr * g
        else:
            s = s_before + (g * g).sum(axis=1) / np.float32(self.lay.dim)
            want = before - (lr / (np.sqrt(s) + np.float32(EPS)))[:, None] * g
            if not np.allclose(self.state[self.rows], s, rtol=1e-5, atol=1e-30):
                raise CheckError("embedding: Adagrad's state differs from numpy's step")
        if not np.allclose(self.weights[self.rows], want, rtol=1e-5,
                           atol=1e-6 * float(np.abs(want).max(initial=1))):
            raise CheckError("embedding: the updated rows differ from numpy's "
                             f"{self.params['train']} step on them")
        return ns


def demand(params: dict) -> Demand | None:
    """What one timed pass of the benchmark's lookups asks of memory: every lookup a random
    read of a row at its reuse distance within the pass (the pass before it is taken as
    gone from the caches: measured so, a rep's second, per-bag pass between), prefetched
    unless params' prefetch is 0, and the kernel's own work per row. prefetch=auto stays
    auto: the calibration's gathers ran the probe's choices too (a sparse mix's probe picks
    0, and charged as random reads the Zipf 1.2 lookups of a 4 GiB table were put 2.8x too
    fast). None for a training step, which the model does not cover."""
    if params.get("train", "none") != "none":
        return None
    lay = layout(params)
    indices, _ = make_indices(lay, params)
    page = PAGE_SIZES[params.get("page.table") or params.get("page", "4k")]
    return Demand(units=lay.lookups, block=lay.row_bytes, floor=True, dtype=lay.dtype,
                  dim=lay.dim, page=page,
                  prefetch=prefetch_rows(params.get("prefetch", "auto"), lay.row_bytes),
                  reuse=working_sets(indices, sum(lay.rows), lay.row_bytes, page,
                                     lay.sizes()["table"]))


# The prefetch a probe lists first (and where none runs: the tiering engines' epochs):
# LINES_AHEAD lines' worth of rows, within PREFETCH_ROWS. Measured by
# peers/sweep_embedding.py (AMD EPYC, AVX-512) over dims 32-256, fp32/fp16/bf16, pooling
# 1-128, uniform and Zipf 0.6-1.2: within 10 % of the best distance in 12 of 14 shapes
# (the other two's best moved from run to run); a fixed 64 rows lost 28 % at dim 32,
# FBGEMM's fixed 16 lost 10-60 % on skewed tables. Other CPUs differ: the probe asks.
LINES_AHEAD, PREFETCH_ROWS = 512, (16, 128)
PROBE_PREFETCH = (0, 8, 16, 32, 64, 128)    # rows ahead the probe tries
PROBE_LOOKUPS = 1 << 18                     # a candidate's lookups in each round
# Registers a pass may sum in, the default (all there are to spare) first: an AVX2 fp32
# row of dim 128 summed in all 16 ymm ran 13 % faster than in 8 on an AMD EPYC (Zen 5),
# a bf16 one 10 % faster in 4 (its conversions need registers too).
REGS = {"avx512": (16, 8, 4), "avx2": (8, 16, 12, 4)}


def prefetch_rows(asked, row_bytes: int) -> int:
    """The prefetch option's rows for rows of row_bytes, where no probe runs (auto: the
    table above)."""
    if asked != "auto":
        return int(asked)
    lo, hi = PREFETCH_ROWS
    return min(hi, max(lo, LINES_AHEAD // -(-row_bytes // 64)))


def bag_candidates(params: dict, isa: str, row_bytes: int) -> list[dict]:
    """What prefetch=auto and regs=auto try, the fixed table's choice with every register
    first (a tie keeps it); a value set is the one. The scalar variant sums in no vector
    registers: regs 0."""
    kinds = REGS.get(isa, ())
    pf = [int(params["prefetch"])] if params["prefetch"] != "auto" else \
        list(dict.fromkeys([prefetch_rows("auto", row_bytes), *PROBE_PREFETCH]))
    regs = [0] if not kinds else [min(int(params["regs"]), max(kinds))] \
        if params.get("regs", "auto") != "auto" else list(kinds)
    return [{"prefetch": p, "regs": r} for r in regs for p in pf]


def tune_bags(params: dict, lay: Layout, isa: str, cpus, table: int, where: str, indices,
              offsets, out, between=None):
    """The fastest prefetch distance and pass width on this case's own table, bags and
    threads (tuning.choose: kept per CPU, dtype, row size, pooling, distribution, table
    size class and placement): the first bags up to PROBE_LOOKUPS lookups pooled, each
    time followed by an untimed pass over all of `between` (the other draw the measured
    passes alternate with), so the probed bags find the caches as the measured ones do.
    Timed back to back instead, a skewed table's rows stayed cached, every distance looked
    alike, and a 16 MiB Zipf 1.2 table's probe chose prefetch=0: 190 M lookups/s where 64
    ran 270-390 (AMD EPYC)."""
    n = max(1, int(np.searchsorted(offsets, PROBE_LOOKUPS, side="right")) - 1)
    n = min(n, len(offsets) - 1)
    looked = int(offsets[n] - offsets[0])

    def pool(ix, offs, c: dict):
        return native.embedding_bag(table, sum(lay.rows), lay.row_bytes, lay.dim, lay.dtype,
                                    params["pool"], ix, offs, out[:len(offs) - 1], isa, cpus,
                                    c["prefetch"], None, 0, c["regs"])

    def rate(c: dict) -> float:
        r = pool(indices, offsets[:n + 1], c)
        if between is not None:
            pool(between, offsets, c)
        return looked / r.ns * 1e3          # M lookups/s
    dist = params["dist"] + (f"({params['alpha']:g})" if params["dist"] == "zipf" else
                             f"(far {params['far']:g})" if params.get("far", 1.0) < 1 else "")
    key = {"dtype": lay.dtype, "row_bytes": lay.row_bytes, "pool": params["pool"],
           "isa": isa, "threads": len(cpus), "dist": dist,
           "table_class": tuning.size_class(lay.sizes()["table"]), "table": where,
           "probe": "another draw between" if between is not None else "back to back"}
    return tuning.choose("embedding_bag", key, bag_candidates(params, isa, lay.row_bytes),
                         rate, "M/s")


def resolve_bag_isa(wanted: str) -> str:
    """The bag loop's variant: its avx2 and avx512 builds need FMA and F16C as well."""
    entry = native.driver("embedding_bag")
    runs = [i for i in entry.isas if native.embedding_isa_supported(i)]
    if wanted == "auto":
        return runs[-1]
    if wanted not in runs:
        raise UserError(f"embedding: this CPU cannot run the {wanted} variant (runs: "
                        f"{', '.join(runs)}; avx2 and avx512 need FMA and F16C too)")
    return wanted


def unused(params: dict) -> dict[str, str]:
    """The options this case ignores, each with why (the registry refuses them set)."""
    out = {}
    if params["trace"]:
        name = os.path.basename(params["trace"])
        out.update(dict.fromkeys(("preset", "scale", "pooling", "size", *GENERATED),
                                 f"trace={name} gives the bags and the rows they name"))
    elif params["preset"] != "custom":
        preset = PRESETS[params["preset"]]
        if "dist" in preset:
            out.update(dict.fromkeys(CUSTOM + GENERATED, (
                f"preset={params['preset']} has tables, rows, dim, pooling and indices "
                f"(dist={preset['dist']}, profile={preset['profile']}) of its own")))
        else:
            out.update(dict.fromkeys(CUSTOM, f"preset={params['preset']} has tables, rows, "
                                             "dim and pooling of its own (scale shrinks it)"))
    else:
        out["scale"] = "scale shrinks a preset's tables; custom tables take rows"
        if params.get("size"):
            out["rows"] = f"size={format_size(params['size'])} sets the rows"
    if not params["trace"]:
        dist, _ = index_source(params)
        if dist != "zipf":
            out.setdefault("alpha", f"dist={dist} (alpha is Zipf's)")
        if dist != "uniform":
            out.setdefault("far", f"dist={dist} (far is uniform's)")
        if dist != "reuse":
            out.setdefault("profile", f"dist={dist} (a profile is dist=reuse's)")
    if params["train"] == "none":
        out["lr"] = "train=none takes no step"
    return out


def reuse_note(lay: Layout, params: dict) -> str | None:
    """A reuse profile fits a table only if it has the distinct rows the profile draws for
    a batch: in smaller ones each row is reused more than the profile says."""
    dist, profile = index_source(params)
    if params["trace"] or dist != "reuse":
        return None
    mean = PROFILES[profile].mean_reuse
    small = [r for r, p in zip(lay.rows, lay.pooling) if r < lay.batch * p / mean]
    if not small:
        return None
    need = math.ceil(lay.batch * max(lay.pooling) / mean)
    return (f"{len(small)} of {len(lay.rows)} tables have fewer rows (the smallest "
            f"{min(small)}) than the distinct rows the {profile} profile draws from a table "
            f"for a batch of {lay.batch} (up to {need}): their rows are reused more than the "
            "profile says; lower batch or raise scale")


def trace_info(params: dict) -> dict:
    """What results record of the case's index source: the trace's file name and hash, or
    the generator (a preset's own where it has one)."""
    trace = trace_of(params)
    if trace is not None:
        return {"trace": trace.name, "trace_sha256": trace.sha256,
                "trace_bags": trace.tables * trace.batch}
    dist, profile = index_source(params)
    return {"indices": dist if dist != "reuse" else f"reuse:{profile}"}


class Epochs:
    """Embedding-bag lookups as the tiering engines drive them: the stacked tables are the
    tiered buffer; the indices and the pooled output stay on the fast node. One stream of
    bags is drawn for the whole run and cut into epochs, so row popularity holds across
    them (the generators scatter hot rows by a seeded hash); with phase=shift the second
    half's rows are each table's turned by half its rows, so the hot set moves to other
    pages."""
    TIERED = "table"
    BUFFERS = ("table", "indices", "out")
    UNIT = "lookups"
    RATE = ("M/s", 1e6)         # what throughput is reported in: unit, units a second each
    # The options a tiering case takes, as embedding.<name>: 128 MiB of rows, and epochs of
    # 2 M lookups, long enough that the moves between them (an eighth of the fast tier at
    # most, by default) cost a fraction of an epoch.
    OPTIONS = {
        **{name: OPTIONS[name] for name in ("preset", "scale", "tables", "dim", "pooling",
                                            "dtype", "pool", "dist", "alpha", "profile")},
        # no probe here: an epoch's time is the engines' measure, not the kernel's best
        "prefetch": OPTIONS["prefetch"].but(help="rows prefetched ahead of the lookup, "
                                            "across bags (0: none; auto: 512 lines' worth, "
                                            "16 to 128 rows)"),
        "rows": OPTIONS["rows"].but(default=1 << 18),
        "batch": OPTIONS["batch"].but(default=1 << 16, help="bags per table in an epoch"),
    }

    def __init__(self, own: dict, seed: int, epochs: int, phase: str):
        self.params = {**{name: opt.default for name, opt in OPTIONS.items()},
                       **{name: opt.default for name, opt in self.OPTIONS.items()}, **own,
                       "seed": seed, "train": "none", "trace": ""}
        self.epochs, self.phase = epochs, phase
        self.lay = lay = layout(self.params)
        self._offsets = np.concatenate(([0], np.cumsum(np.repeat(
            np.asarray(lay.pooling, dtype=np.int64), lay.batch)))).astype(np.int64)

    @classmethod
    def unused(cls, own: dict) -> dict[str, str]:
        defaults = {name: opt.default for name, opt in OPTIONS.items()}
        return {k: v for k, v in unused({**defaults, **own, "trace": "", "train": "none"}).items()
                if k in cls.OPTIONS}

    @functools.cached_property
    def _streams(self) -> list[np.ndarray]:
        """Each epoch's lookups, drawn at first use (sizes() and a check need none)."""
        lay = self.lay
        whole = Layout(lay.rows, lay.pooling, lay.dim, lay.dtype, lay.batch * self.epochs)
        indices, _ = make_indices(whole, self.params)
        streams = self._cut(indices, whole)
        if self.phase == "shift":
            bases = np.cumsum((0, *lay.rows[:-1]))
            table_of = np.repeat(np.arange(len(lay.rows)), np.asarray(lay.pooling) * lay.batch)
            rows, base = np.asarray(lay.rows)[table_of], bases[table_of]
            for e in range(self.epochs // 2, self.epochs):
                streams[e] = base + (streams[e] - base + rows // 2) % rows
        return streams

    def _cut(self, indices: np.ndarray, whole: Layout) -> list[np.ndarray]:
        """The whole run's stream (table after table, batch x epochs bags each) as one
        stream per epoch in the layout the kernel takes (table after table, batch bags)."""
        lay, out, start = self.lay, [[] for _ in range(self.epochs)], 0
        for pooling in lay.pooling:
            per = lay.batch * pooling
            for e in range(self.epochs):
                out[e].append(indices[start + e * per:start + (e + 1) * per])
            start += whole.batch * pooling
        return [np.concatenate(parts) for parts in out]

    def sizes(self) -> dict[str, int]:
        return self.lay.sizes()

    def epoch_bytes(self) -> int:
        """Bytes of rows one epoch reads."""
        return self.lay.lookups * self.lay.row_bytes

    def units(self) -> int:
        """Lookups an epoch does."""
        return self.lay.lookups

    def waits(self, counts: np.ndarray) -> int:
        """Misses waited: one a lookup (a row over two pages is waited once)."""
        return self.units()

    def counts(self, epoch: int, pages: int, page: int) -> np.ndarray:
        """Each page's accesses in the epoch: the lookups of rows on it (a row over a
        page boundary counts on both)."""
        first = self._streams[epoch] * self.lay.row_bytes
        return np.bincount(pages_touched(first, self.lay.row_bytes, page), minlength=pages)

    @functools.lru_cache(maxsize=2)
    def _reuse(self, page: int) -> list[np.ndarray]:
        """Each epoch's working sets over the whole run's stream (bytes)."""
        whole = working_sets(np.concatenate(self._streams), sum(self.lay.rows),
                             self.lay.row_bytes, page, self.lay.sizes()["table"])
        return np.split(whole, np.cumsum([len(s) for s in self._streams])[:-1])

    def demand(self, epoch: int, page: int) -> Demand:
        """The epoch's lookups as the calibrated model charges them: each a row read at its
        working set, on the page its row starts on, and the kernel's own work."""
        stream = self._streams[epoch]
        return Demand(units=len(stream), block=self.lay.row_bytes, reuse=self._reuse(page)[epoch],
                      pages=stream * self.lay.row_bytes // page, floor=True,
                      dtype=self.lay.dtype, dim=self.lay.dim, page=page,
                      prefetch=prefetch_rows(self.params["prefetch"], self.lay.row_bytes))

    def choose_isa(self, asked: str) -> str:
        return resolve_bag_isa(asked)

    def prepare(self, buffers, isa: str, cpus: list[int]) -> None:
        """Fill the table (pages first touched in address order) and keep the buffers."""
        self.table, self.idx_buf, self.out_buf = buffers
        self.isa, self.cpus = isa, cpus
        self.raw = self.table.array(np.uint8)
        fill_table(self.raw, self.lay, self.params["seed"])
        lay = self.lay
        self.out = self.out_buf.array(np.float32)[:lay.bags * lay.dim].reshape(lay.bags, lay.dim)

    def run(self, epoch: int) -> int:
        """The epoch's lookups by the C kernel, timed there, checked against numpy: ns."""
        lay, p = self.lay, self.params
        space = self.idx_buf.array(np.int64)
        k, b = len(self._streams[epoch]), len(self._offsets)
        space[:k], space[k:k + b] = self._streams[epoch], self._offsets
        indices, offsets = space[:k], space[k:k + b]
        self.out.fill(np.nan)
        r = native.embedding_bag(self.table.addr, sum(lay.rows), lay.row_bytes, lay.dim,
                                 lay.dtype, p["pool"], indices, offsets, self.out, self.isa,
                                 self.cpus, prefetch_rows(p["prefetch"], lay.row_bytes))
        check_output(self.out, reference(self.raw, lay, indices, p["pool"], offsets), lay, r.bad)
        return r.ns
