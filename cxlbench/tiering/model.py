"""The model's arithmetic: a workload's time from what it asks of memory and each tier's
figures, as two limits, the longer of which it takes.

Calibrated (`predict_ns`, the tiers measured here or scaled from measurement: see
calibration.py): every random access pays what a random read of its size costs at its
reuse distance on its page's tier (so a hot row the caches hold pays a cache's cost, a
cold one its tier's memory), the kernel's own work per access on top; streamed bytes pay
one thread's streaming rate per op mix. Those costs add up on each thread (its misses in
flight are shared between the tiers), divided among the threads. Bandwidth: each tier
serves its own memory traffic at its all-CPU rate, the two at once, which is where a share
on a second tier can beat all-fast.

Roofline (`epoch_ns`, where no calibration exists: figures from options, HMAT or ASSUMED):
every access waits its tier's latency, `mlp` in flight a thread; caches left out.

Moves cost their bytes at a migration rate."""
from __future__ import annotations

import functools

import numpy as np

from .. import results
from ..atfirstuse import AtFirstUse
from ..errors import UserError
from ..topology import Topology
from ..workloads.epochs import BASE_PAGE
from .calibration import default_profile, hmat_figures, loaded_curve, profiles
from .policies.base import TierFigures

pd = AtFirstUse("pandas")

# Where no HMAT and no option says: local DDR and a CXL expander. Liu et al., "Exploring
# and Evaluating Real-world CXL" (arXiv 2405.14209), measured three expanders at 2-5x
# local DRAM's latency; 2.5x is taken here, and a quarter of the bandwidth (one x16 device
# against a socket's channels). Results say when these were used.
ASSUMED = (TierFigures(110.0, 100.0), TierFigures(275.0, 25.0))
ASSUMED_MIGRATE = 2.0   # GB/s of move_pages(2) with 4 KiB pages, where no run says


def epoch_ns(counts: np.ndarray, fast: np.ndarray, tiers: tuple[TierFigures, TierFigures],
             access_bytes: float, mlp: float, threads: int = 1,
             waits_per_count: float = 1.0) -> float:
    """counts: per page; access_bytes: bytes per count; waits_per_count: the misses
    waited per count (a row over two pages is one access waited once, counted twice)."""
    on_fast = float(counts[fast].sum())
    on_slow = float(counts.sum()) - on_fast
    waiting = (on_fast * tiers[0].latency_ns + on_slow * tiers[1].latency_ns) * \
        waits_per_count / (mlp * threads)
    streaming = max(on_fast * access_bytes / tiers[0].bandwidth,
                    on_slow * access_bytes / tiers[1].bandwidth)
    return max(waiting, streaming)


def _random_ns(demand, block: int, ws: np.ndarray, tiers, i: int, threads: int,
               misses: float = 1.0) -> tuple[float, float]:
    """Random accesses of `block` bytes at working sets `ws` on tiers[i]: (ns a thread
    waits, ns the tier's memory is busy). The embedding kernel's lookups (demand.floor)
    cost its prefetched gathers where it prefetches and the tier has them calibrated (a
    share `misses` of all its lookups missing), else random reads and the kernel's work
    on top."""
    moved = max(block, 64)      # a line at least
    rows = tiers[i].lookup_ns(block, demand.dtype, demand.dim, threads, ws,
                              demand.page > BASE_PAGE, misses) \
        if demand.floor and demand.prefetch else None
    if rows is not None:        # the kernel's own gathers, its work in them
        return float(rows.sum()), float(tiers[i].lookup_share(block, ws).sum()) * moved / \
            tiers[i].lookup_bandwidth(moved, demand.page > BASE_PAGE)
    conc = float(tiers[i].access_ns(block, ws).sum())
    if demand.floor:
        conc += tiers[0].floor_ns(block, demand.dtype, demand.dim, threads) * len(ws)
    return conc, float(tiers[i].memory_share(ws).sum()) * moved / \
        tiers[i].gather_bandwidth(moved)


def predict_ns(demand, tiers, threads: int, fast: np.ndarray | None = None) -> float:
    """ns of one run of the demand (workloads.epochs.Demand) on two calibrated tiers, its
    tiered pages on tiers[0] where `fast` says (all of them, and every untiered byte,
    where fast is None)."""
    conc, busy = 0.0, [0.0, 0.0]    # ns summed over the threads; ns each tier's memory is busy
    if demand.block and demand.reuse is not None and len(demand.reuse):
        on_fast = np.ones(len(demand.reuse), dtype=bool) if fast is None or \
            demand.pages is None else fast[demand.pages]
        blocks = np.full(len(demand.reuse), demand.block) if demand.blocks is None else \
            demand.blocks
        parts = [(i, int(block), where & (blocks == block))
                 for i, where in enumerate((on_fast, ~on_fast))
                 for block in (np.unique(blocks[where]) if where.any() else ())]
        # the share of all the lookups that miss, on either tier: what the kernel's
        # prefetch window holds of them (a tier's misses are as sparse as all of them).
        # Not on huge pages: charged the sparse excess, the ml suite's 512 MiB tables on
        # them were put 1.5-2x too slow (their misses walk no page tables: shorter, covered)
        sparse = demand.floor and demand.prefetch and demand.page <= BASE_PAGE and \
            all(t.prefetches for t in tiers) and any(t.sparse for t in tiers)
        top = float(demand.reuse.max())
        misses = sum(float(tiers[i].miss_depth(block, demand.reuse[sel], top).sum())
                     for i, block, sel in parts) / len(demand.reuse) if sparse else 1.0
        for i, block, sel in parts:
            c, b = _random_ns(demand, block, demand.reuse[sel], tiers, i, threads, misses)
            conc, busy[i] = conc + c, busy[i] + b
    streamed = demand.read + demand.write
    if streamed:
        # stream_pages: bytes per tiered page; what no tiered page holds is on the fast node
        share = demand.stream_pages
        part_fast = 1.0 if fast is None or share is None else \
            float((share[fast].sum() + streamed - share.sum()) / streamed)
        waited = demand.read if demand.in_place else streamed     # what a thread waits for
        streaming = 0.0
        for i, part in enumerate((part_fast, 1.0 - part_fast)):
            if part > 0:
                one, limit = tiers[i].stream_rates(demand.read, demand.write, demand.nt,
                                                   demand.in_place)
                streaming += waited * part / one
                busy[i] += streamed * part / limit
        # the streams overlap the kernel's own work (the prefetchers run ahead of it)
        conc += max(streaming, tiers[0].compute_ns(demand.kernel, threads) * demand.units)
    return max(conc / max(threads, 1), *busy)


def migrate_rate(params: dict, fast: int | None = None,
                 slow: int | None = None) -> tuple[float, str]:
    """GB/s pages move at, and where that came from: the option, else the median of the
    migrate cases in `tiers_from` that moved 4 KiB pages with move_pages between the two
    nodes (either way; a no-move baseline, THP or mbind moves are not the engine's),
    else ASSUMED_MIGRATE."""
    if params.get("migrate_gbs"):
        return params["migrate_gbs"], "options"
    if params.get("tiers_from"):
        f = _frame(params["tiers_from"])
        sel = (f["benchmark"] == "migrate") & (f["metric"] == "bandwidth")
        for column, want in (("method", "move_pages"), ("page", "4k")):
            sel &= f[column].astype(str) == want if column in f else False
        if {"from", "to"} <= set(f.columns):     # floats in a frame with other benchmarks
            a, b = (pd.to_numeric(f[c], errors="coerce") for c in ("from", "to"))
            sel &= ((a == fast) & (b == slow)) | ((a == slow) & (b == fast))
        if sel.any():
            return float(f[sel].groupby("case")["value"].median().median()), \
                params["tiers_from"]
    return ASSUMED_MIGRATE, "assumed"


def measured_tier(frame: pd.DataFrame, node: int, home: int | None = None) -> TierFigures | None:
    """A node's figures from a catalogue run's rows: the chase latency at the largest size
    bound to it (else the matrix latency to it from `home`'s CPUs), and the best median of
    the read kernel bound to it (else the matrix bandwidth to it from `home`); None unless
    the run has both."""
    def medians(bench: str, metric: str, **where) -> pd.Series:
        sel = (frame["benchmark"] == bench) & (frame["metric"] == metric)
        for column, value in where.items():
            if column not in frame:
                return pd.Series(dtype=float)
            sel &= frame[column].astype(str) == str(value)
        return frame[sel].groupby("case")["value"].median()

    lat = pd.Series(dtype=float)
    if "size" in frame:
        chase = frame[(frame["benchmark"] == "chase") & (frame.get("mem") == f"bind:{node}")]
        if len(chase):
            lat = medians("chase", "latency", mem=f"bind:{node}",
                          size=chase["size"].max())
    mine = {} if home is None else {"initiator": home}
    if lat.empty:
        lat = medians("matrix", "latency", target=node, **mine)
    bw = medians("bandwidth", "bandwidth", kernel="read", mem=f"bind:{node}")
    if bw.empty:
        bw = medians("matrix", "bandwidth", target=node, **mine)
    if lat.empty or bw.empty:
        return None
    return TierFigures(float(lat.median()), float(bw.max()), loaded_curve(frame, node))


@functools.lru_cache(maxsize=2)     # every case of a suite checks the same run
def _frame(path: str) -> pd.DataFrame:
    return results.rows(path)


def tiers_for(params: dict, topology: Topology | None, fast: int | None,
              slow: int | None) -> tuple[tuple[TierFigures, TierFigures], str]:
    """(fast, slow) tiers and where their figures came from: the options where set,
    else the catalogue run `tiers_from` names, else the nodes' HMAT, else ASSUMED. A tier
    measured beside one assumed would compare two machines: then both are assumed (the
    options still set what they set)."""
    frame = _frame(params["tiers_from"]) if params.get("tiers_from") else None
    base, kinds = [], []
    for i, node in enumerate((fast, slow)):
        found, kind = None, "assumed"
        if frame is not None and node is not None:
            found, kind = measured_tier(frame, node, fast), \
                f"node {node} in {params['tiers_from']}"
            if found is None:
                raise UserError(f"tiers_from={params['tiers_from']}: no chase latency and "
                                f"read bandwidth (nor node matrix) bound to node {node} there")
        elif frame is not None and i == 1 and kinds[0] != "assumed":
            # One memory node: the slow tier is the measured fast one under a profile,
            # so the run's own figures are used rather than two assumed tiers.
            name = params.get("slow_tier") or "auto"
            name = default_profile() if name == "auto" else name
            p = profiles()[name]
            found = TierFigures(base[0].latency_ns * p["latency"],
                                base[0].bandwidth * p["bandwidth"])
            kind = (f"assumed: profile {name} on {kinds[0]} ({p['latency']:g}x latency, "
                    f"{p['bandwidth']:g}x bandwidth)")
        if found is None and topology is not None and node is not None:
            found, kind = hmat_figures(topology, node), f"HMAT of node {node}"
        if found is None:
            found, kind = ASSUMED[i], "assumed"
        base.append(found)
        kinds.append(kind)
    whole = [bool(params[f"{name}_latency"] and params[f"{name}_bandwidth"])
             for name in ("fast", "slow")]
    mixed = "assumed" in [k for k, w in zip(kinds, whole) if not w] and \
        any(k != "assumed" for k, w in zip(kinds, whole) if not w)
    if mixed:
        base = list(ASSUMED)
        kinds = ["assumed (the other tier had no figures of the same kind)"] * 2
    out, sources = [], []
    for i, name in enumerate(("fast", "slow")):
        lat, bw = params[f"{name}_latency"], params[f"{name}_bandwidth"]
        # A figure set by hand leaves the measured curve out: it would contradict it.
        curve = () if lat or bw else base[i].curve
        out.append(TierFigures(lat or base[i].latency_ns, bw or base[i].bandwidth, curve))
        sources.append(f"{name}: " + ("options" if whole[i] else kinds[i]
                                      + (" with options" if lat or bw else "")
                                      + (f", its loaded-latency curve ({len(curve)} points)"
                                         if curve else "")))
    return (out[0], out[1]), ", ".join(sources)
