"""Node matrices (MLC's latency and bandwidth matrices): threads on the initiator node's
CPUs, memory bound to the target node, CPU-less targets included. One case per pair;
`cxlbench run` prints the cases as one initiator x target table."""
from __future__ import annotations

from ..errors import UserError
from ..options import Option, pick
from ..placement import Placement
from ..topology import Topology
from ..units import format_list
from . import bandwidth, chase
from .common import as_case_of, cases_of_another, estimate_of_another

NAME = "matrix"
TITLE = "Node matrices"
BUFFERS = ("chain", "src")          # its cells', placed by the cell (no mem.<buffer>)
DESCRIPTION = "initiator node x target node: idle latency (ns) or read bandwidth (GB/s)"
OPTIONS = {
    # Named as interleave_sweep's: "metric" is the results' column of what was measured.
    "measure": Option("measure", "choice", "latency", "what each cell measures",
                      choices=("latency", "bandwidth"), expand={"all": ("latency", "bandwidth")}),
    "initiator": Option("initiator", "int", "*", "node whose CPUs run the threads; * = every "
                        "node with CPUs", min=0, words=("*",), nodes="cpu"),
    "target": Option("target", "int", "*", "node the memory is bound to; * = every node "
                     "with memory", min=0, words=("*",), nodes="memory"),
    **pick("size", "page", "threads", "repeat", "warmup", "tolerance", "timeout",
           size=256 << 20, page="thp", threads="all"),
    "window": chase.OPTIONS["window"],      # of the latency cells' chase
}


def _delegate(params: dict, topology: Topology | None = None):
    """The chase or bandwidth case this cell is."""
    topology = topology or Topology.read(probe_gpus=False)
    try:
        node = topology.node(params["initiator"])
    except KeyError:
        raise UserError(f"matrix: initiator node {params['initiator']} does not exist") from None
    if not node.cpus:
        raise UserError(f"matrix: initiator node {node.id} has no CPUs")
    fixed = {"cpus": format_list(node.cpus), "mem": Placement.bind(params["target"])}
    if params["measure"] == "latency":
        return chase, as_case_of(chase, params, **fixed)
    return bandwidth, as_case_of(bandwidth, params, kernel="read", **fixed)


estimate = estimate_of_another(_delegate)
validate, run = cases_of_another(_delegate, lambda params, p: {
    "cell": {"initiator": params["initiator"], "target": params["target"]}})
