"""A tier's figures and where they came from. Measured: the calibration suite's cases bound
to one node (suites/calibrate.toml; `cxlbench calibrate` runs it once per machine and node
and reuses it): the chase over working sets (each cache level's capacity and latency, then
memory's), random reads of three block sizes over the same working sets (what one access
costs at each reuse distance: caches, TLB reach and memory at once), the embedding
kernel's own prefetched gathers over them on 4 KiB and huge pages (what a lookup costs
where the kernel keeps more misses in flight than a plain read, and the page walks: the
difference), streaming bandwidth per op on one thread and all, memory-level parallelism
and the loaded-latency curve, and the embedding kernel's own work per lookup, per element
type. A node that cannot be measured here (the CXL
node of a one-node host) is the fast node's calibration scaled: by its HMAT figures, else
by a named device profile (profiles.toml, each number with its published source), and
says so in `kind` and `source` wherever it is printed; a calibration run of another machine
(given by path) says whose it is there too.

What the model cannot use is said, never passed over in silence: a damaged or incomplete
calibration run newer than the one used is named with what is wrong (a ResultsWarning, one
line), and a sweep that never left the caches sysfs reports gives no memory figure
(Unusable, with the reason)."""
from __future__ import annotations

import functools
import math
import os
import pathlib
import re
import warnings
from dataclasses import dataclass, field, replace

import numpy as np

try:
    import tomllib
except ModuleNotFoundError:         # Python 3.10
    import tomli as tomllib

from .. import results
from ..atfirstuse import AtFirstUse
from ..errors import CxlbenchError, ResultsWarning, UserError
from ..units import format_size, parse_list
from .policies.base import TierFigures

pd = AtFirstUse("pandas")

SUITE = "calibrate"
GRANULARITIES = (64, 256, 4096)     # random_bw's blocks
ROWS = (64, 256, 1024)              # the prefetched gathers' rows (fp32 of dim 16, 64, 256)
STREAM_OPS = ("read", "write", "write_nt", "copy", "copy_nt")
LEVEL_STEP = 1.8        # a sweep point this much slower than its level's first starts another
SATURATED = 0.8         # all CPUs under this share of one thread's rate times them: memory-bound
PROFILES = pathlib.Path(__file__).with_name("profiles.toml")
# Where a case's worker finds this machine's calibrations: the run's --results-dir (the
# command that starts the run sets it; workers run from the package's folder).
RESULTS_ENV = "CXLBENCH_RESULTS_DIR"
# A folder of <machine>/<run> calibrations kept apart from the results (an emulated guest's,
# kept beside its image: emulate sets it in the guest), looked in after the results folder.
KEPT_ENV = "CXLBENCH_CALIBRATIONS"


def default_results_dir() -> str:
    return os.environ.get(RESULTS_ENV) or "results"


class Unusable(UserError):
    """Calibration runs of the node are here, but none the model can use: the newest is
    damaged and no whole one is left, or its sweep never left the caches. `calibration`:
    what was read (None where nothing was), to show with the reason."""

    def __init__(self, message: str, calibration: "Calibration | None" = None):
        super().__init__(message)
        self.calibration = calibration


@dataclass(frozen=True)
class Calibration:
    """One node's memory as the model charges it. kind: measured, hmat or profile;
    source: the run, the firmware table or the profile (with its citation)."""
    node: int | None
    kind: str
    source: str
    threads: int                                        # CPUs the all-thread cases used
    sweep: tuple[tuple[float, float], ...]              # (working-set bytes, ns) by size
    gather: dict[int, tuple[tuple[float, float], ...]]  # block -> ((working set, GB/s)...)
    gather_all: dict[int, float]                        # block -> GB/s, all threads, largest
    stream: dict[tuple[str, int], float]                # (op, 1 or threads) -> GB/s of traffic
    chains: tuple[tuple[int, float], ...] = ()          # (chains, ns per load)
    curve: tuple[tuple[float, float], ...] = ()         # loaded latency: (GB/s, ns)
    # the embedding kernel's work a lookup on rows the L1 holds: (dtype, dim, threads) -> ns
    floors: dict[tuple[str, int, int], float] = field(default_factory=dict)
    # Where the sweep's largest working set fits in the last cache sysfs reports: that, in
    # words (its last level is then that cache's, not memory's); "" where it left them.
    in_cache: str = ""
    past_cache: int = 0         # then a working set past that cache (4 times it, rounded)
    # the embedding kernel's prefetched gathers, one thread, fp32 rows:
    # (row B, huge pages?) -> ((working set, ns a lookup), ...)
    prefetched: dict[tuple[int, bool], tuple[tuple[float, float], ...]] = \
        field(default_factory=dict)
    # (row B, huge pages?) -> GB/s of rows, every CPU, at the largest working set
    prefetched_all: dict[tuple[int, bool], float] = field(default_factory=dict)
    # streaming kernels' own work a unit on data the caches hold: (kernel, threads) -> ns
    compute: dict[tuple[str, int], float] = field(default_factory=dict)
    # the prefetched gathers with only a share of their lookups missing (one thread, fp32
    # rows, 4 KiB pages): row B -> ((share missing, how many times a dense stream's cost
    # a miss takes), ...) by share
    sparse: dict[int, tuple[tuple[float, float], ...]] = field(default_factory=dict)

    @property
    def idle_ns(self) -> float:
        return self.sweep[-1][1]

    @property
    def bandwidth(self) -> float:
        """GB/s of reads with every CPU streaming."""
        return self.stream[("read", self.threads)]

    @property
    def mlp(self) -> float:
        """Misses one thread keeps in flight: idle latency over the best ns per load."""
        return self.idle_ns / min((ns for _, ns in self.chains), default=self.idle_ns)

    def tier(self) -> TierFigures:
        return TierFigures(self.idle_ns, self.bandwidth, self.curve)

    def levels(self) -> list[tuple[float, float]]:
        """The cache levels the sweep shows, then memory: (capacity bytes, ns) each, the
        last memory's (its capacity the largest size swept). A level starts where the
        latency jumps by LEVEL_STEP over its first point's; a lone point between two
        levels is the step itself, not a level."""
        groups: list[list[tuple[float, float]]] = []
        for size, ns in self.sweep:
            if not groups or ns > LEVEL_STEP * groups[-1][0][1]:
                groups.append([])
            groups[-1].append((size, ns))
        kept = [g for i, g in enumerate(groups)
                if len(g) > 1 or i in (0, len(groups) - 1)]
        return [(g[-1][0], float(np.median([ns for _, ns in g]))) for g in kept]

    def memory_share(self, working_set: np.ndarray) -> np.ndarray:
        """Of accesses at each working set, the share that reaches memory: 0 within the
        last cache level's latency, 1 at memory's, linear between."""
        levels = self.levels()
        if len(levels) < 2:
            return np.ones_like(working_set, dtype=float)
        cache_ns, memory_ns = levels[-2][1], levels[-1][1]
        sizes, ns = zip(*self.sweep)
        lat = np.interp(np.log(np.maximum(working_set, sizes[0])), np.log(sizes), ns)
        return np.clip((lat - cache_ns) / max(memory_ns - cache_ns, 1e-9), 0.0, 1.0)

    def access_ns(self, block: float, working_set: np.ndarray) -> np.ndarray:
        """One thread's ns for each random access of `block` bytes whose reuse distance
        (bytes of other data touched since) is `working_set` (a block under a cache line
        costs a line): the random reads of the two
        nearest block sizes at that working set, interpolated in log-log; past the
        largest size swept, the largest's; blocks past 4 KiB move toward a stream's rate."""
        ws = np.asarray(working_set, dtype=float)
        block = max(block, GRANULARITIES[0])     # less than a line still moves a line
        logs = []
        for g in GRANULARITIES:
            sizes, gbs = zip(*self.gather[g])
            logs.append(np.interp(np.log(np.maximum(ws, sizes[0])), np.log(sizes),
                                  np.log(gbs)))
        at = float(np.interp(math.log(block), np.log(GRANULARITIES),
                             np.arange(len(GRANULARITIES))))
        i = min(int(at), len(GRANULARITIES) - 2)
        gbs = np.exp(logs[i] * (i + 1 - at) + logs[i + 1] * (at - i)) * self._toward_stream(
            block, self.gather[GRANULARITIES[-1]][-1][1], self.stream[("read", 1)])
        return block / gbs

    def limit(self, one: float, every: float) -> float:
        """What every CPU together cannot pass, given one thread's rate and all CPUs': the
        latter where it shows the memory saturated (under SATURATED of one thread's times
        the CPUs); else none, the CPUs having been the limit (memory's is above it)."""
        return every if every < SATURATED * one * self.threads else math.inf

    def gather_bandwidth(self, block: float) -> float:
        """GB/s every CPU together cannot pass reading random `block`-byte blocks from
        memory (inf: the calibration never reached memory's limit); blocks past 4 KiB move
        toward a stream's rate by 64 KiB, as access_ns's do."""
        def at(rates: list[float], t: int) -> float:
            gbs = np.exp(np.interp(math.log(block), np.log(GRANULARITIES), np.log(rates)))
            return float(gbs * self._toward_stream(block, rates[-1], self.stream[("read", t)]))
        return self.limit(at([self.gather[g][-1][1] for g in GRANULARITIES], 1),
                          at([self.gather_all[g] for g in GRANULARITIES], self.threads))

    @staticmethod
    def _toward_stream(block: float, random_4k: float, stream: float) -> float:
        """The factor a block past 4 KiB gains over 4 KiB random reads: toward the stream's
        rate, all of it by 64 KiB (log-linear)."""
        if block <= GRANULARITIES[-1]:
            return 1.0
        return (stream / random_4k) ** min(1.0, math.log(block / GRANULARITIES[-1]) /
                                           math.log(16))

    def stream_rates(self, read: float, write: float, nt: bool,
                     in_place: bool = False) -> tuple[float, float]:
        """(one thread's GB/s, every CPU's limit) for a stream of `read` and `write` bytes:
        by the share of writes in the traffic, between the read kernel's (none) and the
        write or copy kernels' (their traffic counted with allocating reads); non-temporal,
        between read, copy_nt and write_nt. In place (writes to lines just read, written
        back off the thread's path), one thread waits for its reads only: the read rate,
        of the read bytes."""
        def at(t: int, w: float) -> float:
            if nt:
                points = [(0.0, self.stream[("read", t)]), (0.5, self.stream[("copy_nt", t)]),
                          (1.0, self.stream[("write_nt", t)])]
            else:
                points = [(0.0, self.stream[("read", t)]), (1 / 3, self.stream[("copy", t)]),
                          (0.5, self.stream[("write", t)])]
            xs, ys = zip(*points)
            return float(np.interp(w, xs, ys))
        mix = write / max(read + write, 1e-9)
        one = at(1, 0.0 if in_place else mix)
        return one, self.limit(at(1, mix), at(self.threads, mix))

    def floor_ns(self, row_bytes: int, dtype: str, dim: int, threads: int) -> float:
        """One thread's ns per lookup of the embedding kernel on rows the L1 holds, less
        what those L1 reads cost (the access curve charges them): the kernel's own work.
        From the floor cases of the same thread count (one, or all), else one thread's."""
        l1 = float(self.access_ns(row_bytes, np.array([64.0 * row_bytes]))[0])
        return max(0.0, self._floor(row_bytes, dtype, dim, threads) - l1)

    def _floor(self, row_bytes: float, dtype: str, dim: float, threads: int) -> float:
        """The floor case's whole ns a lookup (interpolated over dims) of the element type,
        at the thread count (one, or all; else one thread's); where the type was not
        measured, fp32's at the same row bytes; 0 where no floor was measured."""
        def have(d: str) -> list[tuple[int, float]]:
            for t in (1 if threads == 1 else self.threads, 1):
                found = sorted((dm, ns) for (dt, dm, th), ns in self.floors.items()
                               if dt == d and th == t)
                if found:
                    return found
            return []
        points = have(dtype)
        if not points:
            dim, points = row_bytes / 4, have("fp32")
        if not points:
            return 0.0
        dims, ns = zip(*points)
        return float(np.interp(dim, dims, ns))

    def compute_ns(self, kernel: str, threads: int) -> float:
        """One thread's ns a unit of a streaming kernel's own work (its warm cases: one
        thread, or all; else one thread's); 0 where not calibrated (or no kernel named)."""
        t = 1 if threads == 1 else self.threads
        return self.compute.get((kernel, t), self.compute.get((kernel, 1), 0.0))

    def lookup_ns(self, row_bytes: int, dtype: str, dim: int, threads: int,
                  working_set: np.ndarray, huge: bool = False,
                  misses: float = 1.0) -> np.ndarray | None:
        """One thread's ns for each lookup of the embedding kernel whose row's reuse
        distance is `working_set`: its prefetched gathers of the nearest row sizes at that
        distance (log-log; past 1 KiB rows, by bytes), on huge pages where `huge` and those
        were measured (4 KiB pages' less their walks); what each costs past a cache hit
        times sparse_excess where only a share `misses` of the kernel's lookups miss; a row
        of another element type as the fp32 row of as many elements, that type's own work
        in place of fp32's. None where the prefetched gathers were not calibrated."""
        if not self.prefetches:
            return None
        # A narrower type's row costs what the fp32 row of as many elements does: the
        # kernel's loads and conversions, not the bytes, set the pace once prefetched (at
        # dim 128, 256 MiB on huge pages: fp32 140, fp16 150, bf16 160, int8 156 M
        # lookups/s; charged by their bytes the model put 16-bit rows 1.4-1.5x too fast).
        like = max(row_bytes, 4 * dim)
        pages = huge and all((r, True) in self.prefetched for r in ROWS)
        ns = self._gathers(like, working_set, pages)
        if pages:       # a walk is never a gain: huge pages cost what 4 KiB ones do at most
            ns = np.minimum(ns, self._gathers(like, working_set))
        excess = self.sparse_excess(like, misses)
        if excess > 1.0:
            hit = float(self._gathers(like, np.zeros(1), pages)[0])
            ns = hit + np.maximum(ns - hit, 0.0) * excess
        # the curves were one thread's fp32 rows: the element type's own work on this
        # many threads in place of theirs (threads sharing a core slow it)
        return np.maximum(ns - self._floor(like, "fp32", like / 4, 1) +
                          self._floor(row_bytes, dtype, dim, threads), 0.0)

    def _gathers(self, row_bytes: float, working_set: np.ndarray,
                 huge: bool = False) -> np.ndarray:
        """The prefetched curve's ns a lookup at each working set, by row size."""
        return np.exp(self._by_row(row_bytes, lambda r: self._curve(
            self.prefetched[(r, huge)], working_set)))

    @property
    def prefetches(self) -> bool:
        """Whether the kernel's prefetched gathers were calibrated (4 KiB pages, every
        row size)."""
        return all((r, False) in self.prefetched for r in ROWS)

    def sparse_excess(self, row_bytes: float, misses: float) -> float:
        """How many times what a miss costs in a dense stream of them the kernel's misses
        cost where only a share `misses` of its lookups miss: fewer are in flight in its
        prefetch window (measured: 64 B rows on a 4 GiB table, 1 in 8 lookups missing,
        5 times; 1 in 32, 9.2 times; AMD EPYC). Interpolated log-log between the shares
        calibrated and 1 at every lookup missing, held below the smallest; 1 where the
        sparse gathers were not calibrated."""
        if misses >= 1.0 or not all(r in self.sparse for r in ROWS):
            return 1.0

        def at(r: int) -> float:
            far, excess = zip(*[p for p in self.sparse[r] if p[0] < 1.0], (1.0, 1.0))
            return float(np.interp(math.log(max(misses, far[0], 1e-12)), np.log(far),
                                   np.log(excess)))
        return float(np.exp(self._by_row(min(row_bytes, ROWS[-1]), at)))

    def miss_depth(self, row_bytes: int, working_set: np.ndarray, top: float) -> np.ndarray:
        """How deep each lookup at `working_set` misses, as a share of the deepest (a
        lookup at `top`, the demand's footprint): its cost past a cache hit over that one's,
        on the kernel's own curve. Their mean is the share of a stream's lookups that miss
        as sparse_excess counts them: 1 where every lookup goes as deep (a uniform table,
        whatever its size), the far share of a hot corner's mix."""
        ends = self._gathers(row_bytes, np.array([0.0, top]))
        return np.clip((self._gathers(row_bytes, working_set) - ends[0]) /
                       max(ends[1] - ends[0], 1e-9), 0.0, 1.0)

    def lookup_share(self, row_bytes: int, working_set: np.ndarray) -> np.ndarray:
        """Of the prefetched lookups at each working set, the share whose rows come from
        memory, as the kernel's own curve says: how far its cost has gone from the smallest
        working set's to the largest's (the chase's levels need not show a cache the
        gathers find, nor the other way round)."""
        return self.miss_depth(row_bytes, working_set, np.inf)

    @staticmethod
    def _curve(curve, working_set: np.ndarray) -> np.ndarray:
        """log ns at each working set of a (working set, ns) curve, log-log, held at its
        ends."""
        sizes, ns = zip(*curve)
        return np.interp(np.log(np.maximum(np.asarray(working_set, dtype=float), sizes[0])),
                         np.log(sizes), np.log(ns))

    @staticmethod
    def _by_row(row_bytes: float, at) -> np.ndarray:
        """at(row) of the two measured rows nearest row_bytes, interpolated in log row size
        (at gives logs); past the largest row, by bytes (its lines stream on)."""
        r = max(row_bytes, ROWS[0])
        if r >= ROWS[-1]:
            return at(ROWS[-1]) + math.log(r / ROWS[-1])
        x = float(np.interp(math.log(r), np.log(ROWS), np.arange(len(ROWS))))
        i = min(int(x), len(ROWS) - 2)
        return at(ROWS[i]) * (i + 1 - x) + at(ROWS[i + 1]) * (x - i)

    def lookup_bandwidth(self, row_bytes: float, huge: bool = False) -> float:
        """GB/s of rows every CPU's prefetched gathers cannot pass from memory, on huge
        pages where `huge` and measured there (inf: they never reached memory's limit; the
        plain gathers' where not calibrated)."""
        huge = huge and all((r, True) in self.prefetched_all and (r, True) in self.prefetched
                            for r in ROWS)
        if not all((r, huge) in self.prefetched_all and (r, huge) in self.prefetched
                   for r in ROWS):
            return self.gather_bandwidth(max(row_bytes, 64))
        r = min(max(row_bytes, ROWS[0]), ROWS[-1])
        def at(values: list[float]) -> float:
            return float(np.exp(np.interp(math.log(r), np.log(ROWS), np.log(values))))
        one = at([b / self.prefetched[(b, huge)][-1][1] for b in ROWS])
        return self.limit(one, at([self.prefetched_all[(b, huge)] for b in ROWS]))

    def scaled(self, kind: str, source: str, node: int | None, latency: float,
               bandwidth: float) -> "Calibration":
        """This node's figures for another behind the same caches, its memory `latency`
        times slower and `bandwidth` times as wide: what reaches memory at each working set
        (memory_share) waits that much longer; one thread's streams and gathers are bound
        by their misses in flight (Little's law), so they fall with the latency, within
        what every CPU together gets, which is `bandwidth` times this node's."""
        def slower(curve):
            sizes = np.array([size for size, _ in curve])
            stretch = 1.0 + self.memory_share(sizes) * (latency - 1.0)
            return tuple((size, value * k) for (size, value), k in zip(curve, stretch))

        every = {(op, t): gbs * bandwidth for (op, t), gbs in self.stream.items()
                 if t == self.threads}
        stream = {(op, t): gbs * bandwidth if t == self.threads else
                  min(gbs / latency, every[(op, self.threads)])
                  for (op, t), gbs in self.stream.items()}
        gather_all = {g: gbs * bandwidth for g, gbs in self.gather_all.items()}
        def gathers(g, curve):
            sizes = np.array([size for size, _ in curve])
            share = self.memory_share(sizes)
            # what reaches memory waits longer, and one thread gets at most every CPU's
            for (size, gbs), part in zip(curve, share):
                yield size, min(gbs / (1.0 + part * (latency - 1.0)),
                                gather_all[g] / max(part, 1e-9))
        gather = {g: tuple(gathers(g, curve)) for g, curve in self.gather.items()}
        prefetched_all = {k: gbs * bandwidth for k, gbs in self.prefetched_all.items()}
        def lookups(key, curve):
            r = key[0]
            sizes = np.array([size for size, _ in curve])
            work = self._floor(r, "fp32", r / 4, 1)     # the kernel's own: no slower
            for (size, ns), part in zip(curve, self.memory_share(sizes)):
                least = part * r / prefetched_all[key] if key in prefetched_all else 0.0
                yield size, work + max((ns - work) * (1.0 + part * (latency - 1.0)), least)
        prefetched = {k: tuple(lookups(k, c)) for k, c in self.prefetched.items()}
        return replace(
            self, node=node, kind=kind, source=source, sweep=slower(self.sweep),
            stream=stream, gather=gather, gather_all=gather_all, prefetched=prefetched,
            prefetched_all=prefetched_all,
            chains=tuple((c, ns * latency) for c, ns in self.chains),
            curve=tuple((g * bandwidth, ns * latency) for g, ns in self.curve))


def from_frame(frame: pd.DataFrame, node: int, source: str,
               caches: object = None) -> Calibration | None:
    """The node's calibration from a run's rows (cases bound to it), or None where the run
    lacks any of the sweep, the gathers or the streams. caches: the CPU's caches as the
    run's topology records them (sysfs's), to tell whether the sweep left them."""
    mem = f"bind:{node}"

    def cases(bench: str, metric: str, page: str = "4k", **where) -> pd.DataFrame:
        """The rows of one benchmark's metric bound to the node, on 4 KiB pages (as the
        workloads' buffers are by default; other page sizes are other curves) or `page`."""
        sel = (frame["benchmark"] == bench) & (frame["metric"] == metric)
        sel &= frame["mem"].astype(str) == mem if "mem" in frame else False
        if "page" in frame:
            sel &= (frame["page"].isna() if page == "4k" else False) | \
                (frame["page"].astype(str) == page)
        elif page != "4k":
            return frame.iloc[:0]
        for column, value in where.items():
            if column not in frame:
                return frame.iloc[:0]
            sel &= _text(frame[column]) == str(value)
        return frame[sel]

    def by_size(rows: pd.DataFrame) -> tuple[tuple[float, float], ...]:
        if rows.empty:
            return ()
        med = rows.groupby("case").agg(size=("size", "first"), value=("value", "median"))
        med["size"] = med["size"].astype(float)
        med = med.groupby("size")["value"].median().sort_index()
        return tuple((float(s), float(v)) for s, v in med.items())

    chase = cases("chase", "latency")
    if "chains" in frame:
        one = chase["chains"].isna() | (_text(chase["chains"]) == "1")
        if "dist" in chase:
            one &= chase["dist"].isna() | (_text(chase["dist"]) == "False")
        sweep = by_size(chase[one])
        many = chase[~one].groupby("chains")["value"].median()
        chains = tuple(sorted((int(float(c)), float(v)) for c, v in many.items()))
    else:
        sweep, chains = by_size(chase), ()
    threads = _threads(cases("bandwidth", "bandwidth"))
    gather, gather_all = {}, {}
    for g in GRANULARITIES:
        rows = cases("random_bw", "bandwidth", granularity=g)
        single = rows[_text(rows["threads"]) == "1"] if "threads" in rows else rows
        gather[g] = by_size(single)
        allc = rows[_text(rows["threads"]) != "1"] if "threads" in rows else rows.iloc[:0]
        if len(allc):
            gather_all[g] = float(allc.groupby("case")["value"].median().max())
        elif gather[g]:
            gather_all[g] = gather[g][-1][1] * threads
    stream = {}
    for op in STREAM_OPS:
        metric = "bandwidth_memory" if op in ("write", "copy") else "bandwidth"
        rows = cases("bandwidth", metric, kernel=op)
        for th, part in rows.groupby(_text(rows["threads"])) if len(rows) else ():
            stream[(op, 1 if th == "1" else threads)] = float(part["value"].median())
    if len(sweep) < 2 or not all(len(gather[g]) >= 2 for g in GRANULARITIES) or \
            any((op, t) not in stream for op in STREAM_OPS for t in (1, threads)):
        return None
    floors = {}
    emb = cases("embedding", "lookups", rows=64)
    dtype = emb["dtype"].fillna("fp32").astype(str) if "dtype" in emb else \
        pd.Series("fp32", index=emb.index)      # (a run from before floors had types)
    for (dt, dim, th), part in emb.groupby([dtype, _text(emb["dim"]),
                                           _text(emb["threads"])]) if len(emb) else ():
        t = 1 if th == "1" else threads         # ns per lookup on each thread
        floors[(dt, int(float(dim)), t)] = 1e3 * t / float(part["value"].median())
    prefetched, prefetched_all, sparse = {}, {}, {}
    for huge, page in ((False, "4k"), (True, "thp")):
        rows = cases("embedding", "lookups", page, dist="uniform")
        if "size" not in rows or "dim" not in rows:
            continue
        rows = rows[rows["size"].notna()]       # (a table given in rows is no sweep point)
        whole = rows["far"].isna() | (rows["far"].astype(float) >= 1.0) if "far" in rows \
            else pd.Series(True, index=rows.index)  # (nor one only some lookups miss)
        rows, mixed = rows[whole], rows[~whole]
        if "dtype" in rows:
            rows = rows[rows["dtype"].isna() | (_text(rows["dtype"]) == "fp32")]
        for (dim, th), part in rows.groupby([_text(rows["dim"]), _text(rows["threads"])]):
            r = int(float(dim)) * 4
            if th == "1":           # ns a lookup, by working set, never less further out
                sizes, rates = zip(*by_size(part))
                prefetched[(r, huge)] = tuple(zip(sizes, rising([1e3 / v for v in rates])))
            else:                   # GB/s of rows, every CPU, at the largest working set
                prefetched_all[(r, huge)] = r / 1e3 * by_size(part)[-1][1]
        if not huge:
            sparse = _sparse(mixed, prefetched)
    compute = {}
    steps = cases("optimizer", "params", cold="False")
    for (kernel, th), part in steps.groupby([steps["kernel"].astype(str),
                                             _text(steps["threads"])]) if len(steps) else ():
        t = 1 if th == "1" else threads         # ns a parameter on each thread
        compute[(kernel, t)] = 1e3 * t / float(part["value"].median())
    return Calibration(node, "measured", source, threads, sweep, gather, gather_all, stream,
                       chains, loaded_curve(frame, node), floors, *in_cache(sweep, caches),
                       prefetched=prefetched, prefetched_all=prefetched_all, compute=compute,
                       sparse=sparse)


def _sparse(rows: pd.DataFrame, prefetched: dict) -> dict:
    """Each row size's sparse gathers (a share `far` of the lookups over the largest
    table, the rest on the hot corner) as the excess a miss costs over what it costs in a
    dense stream: (c_far - hot) / (dense - hot), where c_far is what the case's time a
    lookup leaves for each far one once the hot ones are paid at a hit's cost (the
    curve's smallest working set), and dense the curve at that table. At least 1, and
    never less where fewer miss."""
    out = {}
    if not len(rows) or "dim" not in rows:
        return out
    rows = rows[_text(rows["threads"]) == "1"] if "threads" in rows else rows
    for dim, part in rows.groupby(_text(rows["dim"])):
        r = int(float(dim)) * 4
        if (r, False) not in prefetched:
            continue
        curve = prefetched[(r, False)]
        hot = curve[0][1]       # a hit, as lookup_ns counts the excess from (the corner's
                                # 128 KiB is one on every CPU)
        points = []
        for far, case in part.groupby(part["far"].astype(float)):
            size = float(case["size"].astype(float).median())
            dense = float(np.exp(Calibration._curve(curve, np.array([size]))[0]))
            lookup = 1e3 / float(case["value"].median())
            per_far = (lookup - (1.0 - far) * hot) / far
            points.append((far, max(1.0, (per_far - hot) / max(dense - hot, 1e-9))))
        points.sort()
        # fewer misses in flight never make each cheaper: non-increasing in the share
        excess = rising([g for _, g in points][::-1])[::-1]
        out[r] = tuple((far, g) for (far, _), g in zip(points, excess))
    return out


def rising(values: list[float]) -> list[float]:
    """The least-squares non-decreasing fit of values (pool adjacent violators): a cost
    by working set as the memory hierarchy has it, the noise of single points pooled with
    their neighbours' (one case's unlucky probe, a busy host's moment)."""
    blocks: list[list[float]] = []      # [sum, count] of each run pooled
    for v in values:
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] * blocks[-1][1] > blocks[-1][0] * blocks[-2][1]:
            total, n = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += n
    return [total / n for total, n in blocks for _ in range(int(n))]


def last_level(caches: object) -> tuple[str, int] | None:
    """The largest data cache a run's topology records (topology.cpu.caches, from sysfs):
    its name (L3) and bytes; None where none is recorded. Read defensively: a run.json is
    anyone's to edit."""
    best = None
    for c in caches if isinstance(caches, list) else ():
        if not isinstance(c, dict) or c.get("type") == "Instruction":
            continue
        size, level = c.get("size"), c.get("level")
        if type(size) is int and size > 0 and (best is None or size > best[1]):
            best = (f"L{level}" if type(level) is int else "last-level cache", size)
    return best


def in_cache(sweep: tuple[tuple[float, float], ...], caches: object) -> tuple[str, int]:
    """Where the sweep's largest working set fits in the last cache (the sweep then never
    measured memory): that, in words, and a working set past it to sweep to instead (four
    times the cache, a power of two); ("", 0) where it left them, or no cache is recorded."""
    llc = last_level(caches)
    if not sweep or llc is None or sweep[-1][0] > llc[1]:
        return "", 0
    return (f"the largest working set swept, {format_size(int(sweep[-1][0]), exact=False)}, "
            f"fits in the {format_size(llc[1], exact=False)} {llc[0]} sysfs reports",
            1 << (4 * llc[1] - 1).bit_length())


def loaded_curve(frame: pd.DataFrame, node: int) -> tuple[tuple[float, float], ...]:
    """The node's loaded-latency curve from the run's loaded_latency cases with both the
    chase and a read load bound to it: each case's median load (GB/s) and latency (ns),
    by rising load, each latency at least the one before (noise would otherwise make a
    tier faster under more load). Empty where the run has no such cases, or only idle
    ones."""
    sel = frame["benchmark"] == "loaded_latency"
    for column, value in (("mem", f"bind:{node}"), ("mix", "read")):
        sel &= frame[column].astype(str) == value if column in frame else False
    for column in ("mem.chain", "mem.load"):        # a buffer placed elsewhere by its own
        if column in frame:
            sel &= frame[column].isna() | (frame[column].astype(str) == f"bind:{node}")
    if not sel.any():
        return ()
    per = frame[sel].groupby(["case", "metric"])["value"].median().unstack()
    if not {"latency", "bandwidth"} <= set(per.columns):
        return ()
    # The idle case reports no bandwidth (no load): its point is the curve's 0 GB/s.
    per["bandwidth"] = per["bandwidth"].fillna(0.0)
    per = per.dropna(subset=["latency"]).sort_values("bandwidth")
    if per.empty or per["bandwidth"].iloc[-1] <= 0:     # idle cases only: no curve
        return ()
    rising = np.maximum.accumulate(per["latency"].to_numpy())
    return tuple((float(g), float(n)) for g, n in zip(per["bandwidth"], rising))


def _text(column: pd.Series) -> pd.Series:
    """A column as the text of its values, whole floats without their .0 (a column shared
    with other benchmarks holds 64 as 64.0)."""
    return column.astype(str).str.replace(r"\.0$", "", regex=True)


def _threads(frame: pd.DataFrame) -> int:
    """The CPUs the all-thread streams used (of the frame given: the node's rows)."""
    if "cpus_used" not in frame:
        return 1
    every = frame[_text(frame["threads"]) == "all"] if "threads" in frame else frame
    counts = [len(parse_list(c)) for c in every["cpus_used"].dropna().astype(str).unique()
              if c]
    return max(counts, default=1)


@functools.lru_cache(maxsize=1)
def profiles() -> dict[str, dict]:
    """The named slow-tier profiles (profiles.toml), the default first."""
    with open(PROFILES, "rb") as f:
        return tomllib.load(f)


def default_profile() -> str:
    """The profile a slower tier takes where nothing names one: the file's first."""
    return next(iter(profiles()))


def profile_tier(fast: Calibration, name: str, node: int | None) -> Calibration:
    table = profiles()
    if name not in table:
        raise UserError(f"no slow-tier profile {name!r}; the profiles are {', '.join(table)}")
    p = table[name]
    return fast.scaled("profile", f"assumed: profile {name} ({p['description']}; "
                       f"{p['latency']:g}x latency, {p['bandwidth']:g}x bandwidth)",
                       node, p["latency"], p["bandwidth"])


def hmat_figures(topology, node: int) -> TierFigures | None:
    """The node's HMAT read latency (ns) and bandwidth (GB/s) from its best initiators,
    where the firmware gave both."""
    found = next((n for n in topology.nodes if n.id == node), None)
    values = (found.hmat.get("access0") or found.hmat.get("access1") or {}) if found else {}
    lat, bw = values.get("read_latency"), values.get("read_bandwidth")
    return TierFigures(float(lat), bw / 1000.0) if lat and bw else None


def hmat_tier(fast: Calibration, topology, node: int, fast_node: int) -> Calibration | None:
    """The node scaled from the fast one by their HMAT read latencies and bandwidths, where
    the firmware gave both nodes'."""
    f, s = hmat_figures(topology, fast_node), hmat_figures(topology, node)
    if f is None or s is None:
        return None
    return fast.scaled("hmat", f"firmware: HMAT of nodes {fast_node} and {node} "
                       f"({s.latency_ns:g} ns / {f.latency_ns:g} ns, {s.bandwidth:g} / "
                       f"{f.bandwidth:g} GB/s)", node, s.latency_ns / f.latency_ns,
                       s.bandwidth / f.bandwidth)


def find_runs(results_dir: str | pathlib.Path, machine: str) -> list[str]:
    """This machine's calibration runs under results_dir that can be read, newest first
    (a damaged or foreign folder is not a calibration)."""
    return [path for path, why in _candidates(results_dir, machine) if not why]


def _candidates(results_dir: str | pathlib.Path, machine: str) -> list[tuple[str, str]]:
    """This machine's calibration runs under results_dir (and $CXLBENCH_CALIBRATIONS; a run
    in both, the results folder's), newest first, each with what
    makes it unreadable ("": nothing). A folder whose run.json cannot be read counts where
    its text still names the calibration suite: it was one, and is named as damaged."""
    found = []
    metas: dict[str, pathlib.Path] = {}         # the results folder's own first
    for root in (results_dir, os.environ.get(KEPT_ENV)):
        for meta in (pathlib.Path(root) / machine).glob("*/run.json") if root else ():
            metas.setdefault(meta.parent.name, meta)
    for meta in (metas[name] for name in sorted(metas, reverse=True)):
        try:
            run = results.Run.open(meta.parent)
        except CxlbenchError as e:
            if _names_suite(meta.parent):
                found.append((str(meta.parent), _without(str(e), meta.parent)))
            continue
        if _suite_name(run.meta) == SUITE:
            found.append((str(meta.parent), ""))
    return found


def _suite_name(meta: dict) -> object:
    return (meta.get("suite") or {}).get("name")


def _names_suite(folder: pathlib.Path) -> bool:
    """Whether an unreadable run was a calibration: its run.json read, or else its text
    (the start of it, where the suite is) naming the calibration suite."""
    try:
        return _suite_name(results.read_meta(folder)) == SUITE
    except CxlbenchError:
        pass
    where = folder / "run.json"
    if not where.is_file():         # (a folder or a FIFO there holds no text to read)
        return False
    try:
        with open(where, "rb") as f:
            text = f.read(1 << 20).decode("utf-8", errors="replace")
    except OSError:
        return False
    return re.search(r'"suite"\s*:\s*\{\s*"name"\s*:\s*"' + SUITE + '"', text) is not None


def _without(text: str, folder: pathlib.Path) -> str:
    """A message about a run's files, its folder left out (the note names the run)."""
    return text.replace(f"{folder}{os.sep}", "").replace(f"{folder}: ", "").replace(
        str(folder), "the run").replace(" is damaged: ", ": ")


@dataclass
class _Read:
    """One calibration run as the model reads it."""
    frame: pd.DataFrame
    whole: set[tuple[str, str]]         # (job, mem) whose every case finished ok
    broken: dict[tuple[str, str], str]  # (job, mem) not whole -> its first case's fault
    damage: str                         # what is wrong with its files ("": nothing)
    meta: dict


def _read(run: str, unreadable: str = "") -> _Read:
    """A run's rows and its whole jobs: a job cut short (interrupted, failed) is no
    calibration. Nothing from a run that cannot be read, and why. What results leaves out
    of a damaged table (a row cut short) is said here, as this run's damage, not apart."""
    if unreadable:
        return _Read(pd.DataFrame(), set(), {}, unreadable, {})
    with warnings.catch_warnings(record=True) as left_out:
        warnings.simplefilter("always", ResultsWarning)
        try:
            opened, frame = results.Run.open(run), results.rows(run)
            done = opened.finished()
        except CxlbenchError as e:
            return _Read(pd.DataFrame(), set(), {}, _without(str(e), pathlib.Path(run)), {})
    notes = [str(w.message).removeprefix(f"{run}: ").removeprefix("left out ")
             for w in left_out if issubclass(w.category, ResultsWarning)]
    # (rows of cases that did not finish: the cases, named below, are what is wrong)
    damage = ", ".join(dict.fromkeys(n for n in notes
                                     if not n.endswith("rows of cases that did not finish")))
    if not {"job", "mem"} <= set(frame.columns):    # (no case of it placed: no node's)
        return _Read(pd.DataFrame(), set(), {}, damage, opened.meta)
    cases: dict[tuple[str, str], list[str]] = {}
    for c in opened.meta["cases"]:
        cases.setdefault((c["job"], str(c["params"].get("mem"))), []).append(c["id"])
    whole, broken = set(), {}
    for key, ids in cases.items():
        bad = next((i for i in ids if done.get(i, {}).get("status") != "ok"), None)
        if bad is None:
            whole.add(key)
        else:
            broken[key] = _fault(bad, done.get(bad))
    return _Read(frame, whole, broken, damage, opened.meta)


def _fault(case: str, entry: dict | None) -> str:
    if entry is None:
        return f"{case} did not finish"
    error = str(entry.get("error") or "").strip().splitlines()
    return f"{case} {entry['status']}" + (f": {error[0][:120]}" if error else "")


def merged(runs: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """The rows of the calibration runs given newest first, each job's (per node) from
    the newest run where that job is whole (a later calibrate run measures only the jobs
    missing), and the runs that gave any."""
    frame, used, _, _ = _merge([(r, "") for r in runs], None)
    return frame, used


def _merge(runs: list[tuple[str, str]], node: int | None
           ) -> tuple[pd.DataFrame, list[str], list[str], list[dict]]:
    """merged(), of runs given with what makes each unreadable; then, for the node, a
    line for each run that is damaged or incomplete where it would have counted (no newer
    run has its jobs whole), saying what is wrong and which run is used instead; and the
    run.json of each run used."""
    frames, seen, used, metas = [], set(), [], []
    faults = []             # (run, "damaged" or "incomplete", why, its keys or None: all)
    supplier: dict[tuple[str, str], str] = {}
    mem = f"bind:{node}"
    for run, unreadable in runs:
        part = _read(run, unreadable)
        mine = {k: why for k, why in part.broken.items() if k[1] == mem and k not in seen}
        if not part.meta:       # unreadable: which jobs it held is not known
            faults.append((run, "damaged", part.damage, None))
        elif mine:      # (a case the damage names already is not named twice)
            said = [why for why in mine.values()
                    if not why.endswith(" did not finish") or why.split()[0] + " " not in
                    part.damage]
            faults.append((run, "damaged" if part.damage else "incomplete",
                           ", ".join(filter(None, [*said, part.damage])), set(mine)))
        if part.frame.empty:
            continue
        keys = pd.Series(list(zip(part.frame["job"].astype(str),
                                  part.frame["mem"].astype(str))), index=part.frame.index)
        new = part.whole - seen
        take = keys.isin(new)
        seen |= part.whole
        supplier.update({k: run for k in new})
        if take.any():
            frames.append(part.frame[take])
            used.append(run)
            metas.append(part.meta)
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    notes = [] if node is None else _notes(faults, supplier, runs, node)
    return frame, used, notes, metas


def _notes(faults, supplier: dict[tuple[str, str], str], runs: list[tuple[str, str]],
           node: int) -> list[str]:
    """A line for each damaged or incomplete run whose jobs the node's calibration would
    have taken: what is wrong, and the run used instead (the newest whole one), or that
    there is none."""
    order = [r for r, _ in runs]
    mem = f"bind:{node}"
    mine = {k: r for k, r in supplier.items() if k[1] == mem}
    out = []
    for run, state, why, keys in faults:
        older = order[order.index(run) + 1:]
        if keys is None:    # unreadable: it counted where a run older than it is used
            instead, missing = sorted({r for r in mine.values() if r in older},
                                      key=order.index), []
            if mine and not instead:
                continue    # newer runs give every job: it would not have counted
        else:
            instead = sorted({mine[k] for k in keys if k in mine}, key=order.index)
            missing = sorted({job for job, _ in keys if (job, mem) not in mine})
        text = f"calibration {run} is {state} ({why})"
        if instead:
            text += (f"; using {', '.join(instead)}, the newest whole "
                     f"one{'s' if len(instead) > 1 else ''}")
        if missing or not instead:
            what = ", ".join(missing) if missing else "calibration"
            text += (f"; no whole {what} of node {node} here: cxlbench calibrate measures "
                     f"{'them' if len(missing) > 1 else 'it'} anew")
        out.append(text)
    return out


def _source(used: list[str], metas: list[dict]) -> str:
    """Where a measured calibration came from: its runs, and whose machine they were
    where that is not this one (run.json's machine_id)."""
    here = results.machine_id()
    others = sorted({m for m in (meta.get("machine_id") for meta in metas)
                     if isinstance(m, str) and m != here})
    whose = f"measured on {', '.join(others)}, not this machine" if others else "measured"
    return f"{whose}: {', '.join(used)}"


def _caches(metas: list[dict]) -> list:
    """The CPU caches the runs' topologies record, all of them (one machine's, as a rule)."""
    out = []
    for meta in metas:
        cpu = (meta.get("topology") or {}).get("cpu")
        caches = cpu.get("caches") if isinstance(cpu, dict) else None
        out += caches if isinstance(caches, list) else []
    return out


def load(path: str, node: int) -> Calibration | None:
    """The node's calibration from the whole jobs of the run at path (None where it has
    no cases of it); ResultsError where the run cannot be read."""
    return _load(path, node)[0]


@functools.lru_cache(maxsize=8)
def _load(path: str, node: int) -> tuple[Calibration | None, str]:
    """load(), and what is wrong with the run's jobs of the node ("": nothing)."""
    results.Run.open(path)          # a run that cannot be read is refused, naming its file
    frame, used, notes, metas = _merge([(str(path), "")], node)
    if not used:
        return None, "; ".join(notes)
    return from_frame(frame, node, _source(used, metas), _caches(metas)), "; ".join(notes)


def jobs_of(runs: list[str], node: int, cases=()) -> set[str]:
    """The calibration jobs these runs measured whole on the node (a job with a failed or
    missing case is measured again), each of the `cases` (suite.Case) the suite now makes
    of the job among a run's (a job the suite changed is measured again; options added
    since, absent from the record, do not count)."""
    want: dict[str, list[dict]] = {}
    for c in cases:
        want.setdefault(c.job, []).append({k: str(v) for k, v in c.params.items()})
    out = set()
    for run in runs:
        part = _read(run)
        had: dict[str, list[dict]] = {}
        for c in part.meta.get("cases", []):
            had.setdefault(c["job"], []).append(c["params"])
        out |= {job for job, mem in part.whole if mem == f"bind:{node}" and all(
            any(all(str(p[k]) == v for k, v in w.items() if k in p) for p in had.get(job, ()))
            for w in want.get(job, ()))}
    return out


def measured(node: int, results_dir: str | pathlib.Path | None = None,
             machine: str | None = None, path: str = "") -> Calibration | None:
    """The node's calibration from the run at `path`, else from this machine's
    calibration runs under results_dir (each job from the newest run that has it whole;
    a damaged or incomplete run newer than it named in a ResultsWarning). Unusable where
    the calibration's sweep never left the caches, or where only damaged runs are here."""
    if path:
        found, why = _load(str(path), node)
        if found is None:
            raise UserError(f"{path}: no calibration of node {node} there (the chase sweep, "
                            f"random reads and streams bound to it: cxlbench calibrate "
                            f"--node {node})" + (f"; {why}" if why else ""))
        return _usable(found)
    runs = _candidates(results_dir or default_results_dir(), machine or results.machine_id())
    found, notes = _measured_from(tuple(runs), node) if runs else (None, ())
    if found is None and notes:
        raise Unusable("; ".join(notes))
    for note in notes:
        _say(note)
    return _usable(found) if found is not None else None


def _say(note: str) -> None:
    """A note about the calibrations read, once a process (from this one line, the same
    text is said once)."""
    warnings.warn(note, ResultsWarning, stacklevel=1)


def _usable(cal: Calibration) -> Calibration:
    """The calibration, where its sweep left the caches: else Unusable, saying so (the
    sweep's last level a cache's, its latency no memory's figure)."""
    if not cal.in_cache:
        return cal
    raise Unusable(
        f"{cal.source.partition(': ')[2]}: no memory figure for node {cal.node}: "
        f"{cal.in_cache}, so its {cal.idle_ns:.4g} ns is that cache's latency, not memory's; "
        f"the model does not use it (cxlbench calibrate --node {cal.node} --again --var "
        f"largest={format_size(cal.past_cache)} sweeps past the cache)", cal)


@functools.lru_cache(maxsize=8)
def _measured_from(runs: tuple[tuple[str, str], ...], node: int
                   ) -> tuple[Calibration | None, tuple[str, ...]]:
    frame, used, notes, metas = _merge(list(runs), node)
    found = from_frame(frame, node, _source(used, metas), _caches(metas)) if used else None
    return found, tuple(notes)


def tiers(fast_node: int, slow_node: int | None, topology, *, path: str = "",
          profile: str = "", results_dir: str | pathlib.Path | None = None
          ) -> tuple[Calibration, Calibration] | None:
    """(fast, slow) calibrations: the fast node measured; the slow node measured where a
    run has it, unless a profile is asked for; else its HMAT; else the profile (the
    default's where none is asked for). None where the fast node has no calibration the
    model can use (why, said in a ResultsWarning; a run named by path that cannot be
    used is refused)."""
    try:
        fast = measured(fast_node, results_dir, path=path)
    except Unusable as e:
        if path:
            raise
        _say(str(e))
        return None
    if fast is None:
        return None
    slow = None
    if slow_node is not None and not profile:
        try:
            slow = measured(slow_node, results_dir) if not path else \
                _usable(found) if (found := load(str(path), slow_node)) else None
        except Unusable as e:       # its figures then come from HMAT or the profile
            _say(str(e))
        if slow is None and topology is not None:
            slow = hmat_tier(fast, topology, slow_node, fast_node)
    if slow is None:
        slow = profile_tier(fast, profile or default_profile(), slow_node)
    return fast, slow
