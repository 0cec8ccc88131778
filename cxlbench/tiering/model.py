"""The model engine's arithmetic: an epoch's time from its per-page access counts, the
placement, and each tier's latency and bandwidth. One access costs the longer of its
latency shared among the misses a core keeps in flight (mlp) and its bytes at the tier's
bandwidth; accesses to the two tiers add up (one thread walks both). Caches are left out:
it is a model of memory, and the real engine, where it runs, says by how much it errs."""
from __future__ import annotations

import numpy as np

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


def tiers_for(params: dict, topology: Topology | None, fast: int | None,
              slow: int | None) -> tuple[tuple[Tier, Tier], str]:
    """(fast, slow) tiers and where their figures came from: the options where set,
    else the nodes' HMAT, else ASSUMED."""
    out, sources = [], []
    for i, (name, node) in enumerate((("fast", fast), ("slow", slow))):
        lat, bw = params[f"{name}_latency"], params[f"{name}_bandwidth"]
        if lat and bw:
            out.append(Tier(lat, bw))
            sources.append(f"{name}: options")
            continue
        hmat = hmat_tier(topology, node) if topology is not None and node is not None \
            else None
        tier = hmat or ASSUMED[i]
        out.append(Tier(lat or tier.latency_ns, bw or tier.bandwidth))
        sources.append(f"{name}: {'HMAT of node %d' % node if hmat else 'assumed'}"
                       + (" with options" if lat or bw else ""))
    return (out[0], out[1]), ", ".join(sources)
