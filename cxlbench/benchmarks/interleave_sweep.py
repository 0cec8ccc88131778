"""Interleave sweeps: read bandwidth, triad bandwidth, idle latency and loaded latency for
weighted-interleave ratios between two nodes, from all on the first to all on the second.
Each ratio's verified page shares go into the results with its figures."""
from __future__ import annotations

import re

from ..errors import UserError
from ..options import Option, pick
from ..placement import Placement
from ..topology import Topology
from ..units import parse_list
from . import bandwidth, chase, loaded_latency
from .common import as_case_of, cases_of_another, estimate_of_another

NAME = "interleave_sweep"
TITLE = "Weighted interleave"
BUFFERS = ("src", "a", "b", "c", "chain", "load")   # its points', placed by the point
DESCRIPTION = "weighted-interleave ratios between two nodes: bandwidth and (loaded) latency"
RATIOS = ("1:0", "9:1", "4:1", "3:1", "2:1", "1:1", "1:2", "0:1")
MEASURES = ("read", "triad", "latency", "loaded")
OPTIONS = {
    "nodes": Option("nodes", "cpus", "", "the two nodes (e.g. 0,1); default: the first two "
                    "nodes with memory (or the only one)"),
    "ratio": Option("ratio", "choice", "all", "pages on the first node : on the second",
                    choices=RATIOS + ("all",), expand={"all": RATIOS}),
    "measure": Option("measure", "choice", "all", "read or triad bandwidth, idle or loaded "
                      "latency", choices=MEASURES + ("all",), expand={"all": MEASURES}),
    **pick("size", "page", "cpus", "threads", "repeat", "warmup", "tolerance", "timeout",
           size=256 << 20, page="thp", threads="all"),
    "window": chase.OPTIONS["window"],      # of the latency cells' chase
}


def placement(ratio: str, first: int, second: int) -> Placement:
    """'3:1' between nodes 0 and 2 -> weighted:0=3,2=1; one-sided ratios bind."""
    a, b = (int(x) for x in re.fullmatch(r"(\d+):(\d+)", ratio).groups())
    if b == 0 or first == second:
        return Placement.bind(first)
    if a == 0:
        return Placement.bind(second)
    return Placement("weighted", (first, second), (a, b))


def _nodes(params: dict, topology: Topology) -> tuple[int, int]:
    nodes = parse_list(params["nodes"]) if params["nodes"] else topology.memory_nodes[:2]
    if not nodes or len(nodes) > 2:
        raise UserError(f"interleave_sweep: nodes names {len(nodes)} nodes; give two (or one)")
    return nodes[0], nodes[-1]


def _delegate(params: dict, topology: Topology | None = None):
    topology = topology or Topology.read(probe_gpus=False)
    first, second = _nodes(params, topology)
    measure, mem = params["measure"], placement(params["ratio"], first, second)
    if measure in ("read", "triad"):
        return bandwidth, as_case_of(bandwidth, params, mem=mem, kernel=measure)
    if measure == "latency":
        return chase, as_case_of(chase, params, mem=mem)
    return loaded_latency, as_case_of(loaded_latency, params, mem=mem, delay=0,
                                      load_size=params["size"])


estimate = estimate_of_another(_delegate)
validate, run = cases_of_another(_delegate, lambda params, p: {"placement": str(p["mem"])})
