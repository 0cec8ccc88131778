"""The model engine's arithmetic: an epoch's time from its per-page access counts, the
placement, and each tier's latency and bandwidth, as a roofline of two limits. Latency:
every access waits its tier's latency, `mlp` misses in flight on each thread (Little's
law: the sum of the latencies over mlp x threads). Bandwidth: each tier streams its own
bytes, the two at once. The epoch takes the longer. Moves cost their bytes at a migration
rate. Caches are left out: it is a model of memory, and the real engine, where it runs,
says by how much it errs."""
from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from .. import results
from ..errors import UserError
from ..topology import Topology
from .policies.base import TierFigures

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


def hmat_tier(topology: Topology, node: int) -> TierFigures | None:
    """The node's HMAT read latency and bandwidth from its best initiators, if the
    firmware gave them."""
    n = next((n for n in topology.nodes if n.id == node), None)
    values = (n.hmat.get("access0") or n.hmat.get("access1") or {}) if n else {}
    lat, bw = values.get("read_latency"), values.get("read_bandwidth")
    return TierFigures(float(lat), bw / 1000.0) if lat and bw else None


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
    per = per.dropna(subset=["latency", "bandwidth"]).sort_values("bandwidth")
    if per.empty or per["bandwidth"].iloc[-1] <= 0:     # idle cases only: no curve
        return ()
    rising = np.maximum.accumulate(per["latency"].to_numpy())
    return tuple((float(g), float(n)) for g, n in zip(per["bandwidth"], rising))


@functools.lru_cache(maxsize=2)     # every case of a suite checks the same run
def _frame(path: str) -> pd.DataFrame:
    return results.load(path)


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
        if found is None and topology is not None and node is not None:
            found, kind = hmat_tier(topology, node), f"HMAT of node {node}"
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
