"""The model engine's arithmetic: an epoch's time from its per-page access counts, the
placement, and each tier's latency and bandwidth. One access costs the longer of its
latency shared among the misses a core keeps in flight (mlp) and its bytes at the tier's
bandwidth; accesses to the two tiers add up (one thread walks both). Caches are left out:
it is a model of memory, and the real engine, where it runs, says by how much it errs."""
from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from .. import results
from ..topology import Topology
from .policies.base import Tier

# Where no HMAT and no option says: local DDR and a CXL expander. Liu et al., "Exploring
# and Evaluating Real-world CXL" (arXiv 2405.14209), measured three expanders at 2-5x
# local DRAM's latency; 2.5x is taken here, and a quarter of the bandwidth (one x16 device
# against a socket's channels). Results say when these were used.
ASSUMED = (Tier(110.0, 100.0), Tier(275.0, 25.0))


def access_ns(tier: Tier, access_bytes: float, mlp: float) -> float:
    return max(tier.latency_ns / mlp, access_bytes / tier.bandwidth)


def epoch_ns(counts: np.ndarray, fast: np.ndarray, tiers: tuple[Tier, Tier],
             access_bytes: float, mlp: float) -> float:
    on_fast = float(counts[fast].sum())
    on_slow = float(counts.sum()) - on_fast
    return on_fast * access_ns(tiers[0], access_bytes, mlp) + \
        on_slow * access_ns(tiers[1], access_bytes, mlp)


def hmat_tier(topology: Topology, node: int) -> Tier | None:
    """The node's HMAT read latency and bandwidth from its best initiators, if the
    firmware gave them."""
    n = next((n for n in topology.nodes if n.id == node), None)
    values = (n.hmat.get("access0") or n.hmat.get("access1") or {}) if n else {}
    lat, bw = values.get("read_latency"), values.get("read_bandwidth")
    return Tier(float(lat), bw / 1000.0) if lat and bw else None


def measured_tier(frame: pd.DataFrame, node: int) -> Tier | None:
    """A node's figures from a catalogue run's rows: the chase latency at the largest size
    bound to it (else the matrix latency to it), and the best median of the read kernel
    bound to it (else the matrix bandwidth to it); None unless the run has both."""
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
    if lat.empty:
        lat = medians("matrix", "latency", target=node)
    bw = medians("bandwidth", "bandwidth", kernel="read", mem=f"bind:{node}")
    if bw.empty:
        bw = medians("matrix", "bandwidth", target=node)
    if lat.empty or bw.empty:
        return None
    return Tier(float(lat.median()), float(bw.max()))


@functools.lru_cache(maxsize=2)     # every case of a suite checks the same run
def _frame(path: str) -> pd.DataFrame:
    return results.load(path)


def tiers_for(params: dict, topology: Topology | None, fast: int | None,
              slow: int | None) -> tuple[tuple[Tier, Tier], str]:
    """(fast, slow) tiers and where their figures came from: the options where set,
    else the catalogue run `tiers_from` names, else the nodes' HMAT, else ASSUMED."""
    frame = _frame(params["tiers_from"]) if params.get("tiers_from") else None
    out, sources = [], []
    for i, (name, node) in enumerate((("fast", fast), ("slow", slow))):
        lat, bw = params[f"{name}_latency"], params[f"{name}_bandwidth"]
        if lat and bw:
            out.append(Tier(lat, bw))
            sources.append(f"{name}: options")
            continue
        found, where = None, "assumed"
        if frame is not None and node is not None:
            found, where = measured_tier(frame, node), f"node {node} in {params['tiers_from']}"
        if found is None and topology is not None and node is not None:
            found, where = hmat_tier(topology, node), f"HMAT of node {node}"
        if found is None:
            found, where = ASSUMED[i], "assumed"
        out.append(Tier(lat or found.latency_ns, bw or found.bandwidth))
        sources.append(f"{name}: {where}" + (" with options" if lat or bw else ""))
    return (out[0], out[1]), ", ".join(sources)
