"""Page migration between two nodes: move_pages(2) or mbind(2) with MPOL_MF_MOVE, in
batches of pages, timed in C; each move checked (every page on the destination, the data
unchanged) and then undone. `pages` sets what the pages went through just before a move:
rewritten (dirty, in cache and TLB) or left untouched for `rest` ms while other data
filled the caches."""
from __future__ import annotations

import time

from .. import memory
from ..errors import CheckError
from ..memory import Buffer, Placement, native
from ..options import Option, pick
from ..topology import Topology
from ..units import format_list
from .common import Measurement, check_placement, measure, place, resolve_cpus

NAME = "migrate"
TITLE = "Page migration"
BUFFERS = ("pages",)
DESCRIPTION = "move_pages(2) of a buffer from one node to another and back (GB/s migrated)"
OPTIONS = {
    **pick("size", "cpus", "repeat", "warmup", "tolerance", "timeout", size=64 << 20),
    "from": Option("from", "int", 0, "node the buffer starts on; * = each node with memory",
                   min=0, words=("*",), nodes="memory"),
    "to": Option("to", "int", 1, "node the pages move to; * = each node with memory",
                 min=0, words=("*",), nodes="memory"),
    "page": Option("page", "choice", "4k", "page size (hugetlb pages are not moved here)",
                   choices=("4k", "thp")),
    "method": Option("method", "choice", "move_pages", "the system call that moves",
                     choices=("move_pages", "mbind"), expand={"all": ("move_pages", "mbind")}),
    "batch": Option("batch", "int", 0, "pages per call; 0: the whole buffer in one",
                    min=0, expand={"all": (1, 64, 512, 4096)}),
    "pages": Option("pages", "choice", "written", "pages rewritten just before each move, "
                    "or untouched for `rest` ms with their lines evicted",
                    choices=("written", "untouched"), expand={"all": ("written", "untouched")}),
    "rest": Option("rest", "int", 100, "ms untouched pages rest before a move", min=0,
                   max=3_600_000, unit="ms"),
}
# The results' `kernel` for each method (the names of the kernel-table rows they were).
KERNELS = {"move_pages": "move_pages", "mbind": "mbind_move"}


def buffer_params(params: dict) -> dict:
    return {**params, "mem": Placement.bind(params["from"])}


def skip(params: dict, topology) -> str | None:
    """A move needs a second node with memory: on a machine of one, from != to cannot
    run (from = to, the no-move baseline, can). A missing node on a machine with two or
    more is bad input, refused by check."""
    nodes = topology.memory_nodes
    if params["from"] != params["to"] and len(nodes) < 2:
        return (f"moving pages needs two nodes with memory, this machine has one (node "
                f"{format_list(nodes)}); from = to measures the no-move baseline")
    return None


def validate(params: dict, topology) -> None:
    cpu = resolve_cpus({**params, "threads": 1})
    for node in (params["from"], params["to"]):
        check_placement({**params, "mem": Placement.bind(node)}, cpu, topology, BUFFERS)


class Checker:
    """After a move: every page on the node, and the data (an index fill) unchanged."""

    def __init__(self, buf: Buffer, cpu: list[int]):
        self.buf, self.cpu = buf, cpu
        self.pages, n = buf.alloc.map_size // 4096, buf.alloc.size // 8
        self.want = n * (n - 1) // 2 % (1 << 64)
        self.reader = native.kernel("read")

    def __call__(self, node: int, unmoved: int = 0, why: str = "") -> None:
        if unmoved:
            raise CheckError(f"{unmoved} of {self.pages} pages did not move to node {node}"
                             + (f" ({why})" if why else ""))
        there = int((memory.node_map(self.buf) == node).sum())
        if there != self.pages:
            raise CheckError(f"after the move node {node} holds {there} of {self.pages} pages")
        r = native.run_kernel(self.reader, self.reader.best_isa(), [self.buf.addr],
                              self.buf.alloc.size, 1, self.cpu)
        if r.checksum != self.want:
            raise CheckError(f"data changed while moving to node {node}")


def evictor(cpu: list[int]):
    """A function that fills the caches (and the TLB) with other data: a read of a local
    buffer four times the last-level cache, at least 64 MiB."""
    caches = Topology.read(probe_gpus=False).cpu.get("caches", [])
    llc = max((c["size"] for c in caches if c.get("size")), default=32 << 20)
    other = native.Allocation(max(4 * llc, 64 << 20), "4k", "local")
    other.prefault(cpu)
    reader = native.kernel("read")
    return lambda: native.run_kernel(reader, reader.best_isa(), [other.addr], other.size, 1, cpu)


def move(buf: Buffer, node: int, params: dict, check_move: Checker) -> int:
    """Every page of buf to node by the case's method and batch, checked: ns of the calls."""
    r = memory.move(buf, node, method=params["method"], batch=params["batch"])
    check_move(node, len(r.failures), r.reasons())
    return r.ns


# move_pages(2) of 4 KiB pages, for the estimate (tier model's figure where no run says).
MOVE_BPS = 2e9


def estimate(params: dict, figures) -> float:
    """Seconds of the case's work: the buffer placed and filled, then each repetition's
    two moves (there and back) at MOVE_BPS, each after a rewrite or the pages' rest."""
    f = figures.of(Placement.bind(params["from"]) if params["from"] != "*" else "")
    size, reps = params["size"], params["warmup"] + params["repeat"]
    before = params["rest"] / 1000 if params["pages"] == "untouched" else size / f.scan
    return size * (1 / f.touch + 1 / f.scan) + reps * 2 * (size / MOVE_BPS + before)


def run(params: dict) -> Measurement:
    src, dst = params["from"], params["to"]
    cpu = resolve_cpus({**params, "threads": 1})
    (buf,) = place(buffer_params(params), cpu, BUFFERS)
    buf.alloc.fill_index(cpu)
    check_move = Checker(buf, cpu)
    pages, size = check_move.pages, buf.alloc.map_size
    evict = evictor(cpu) if params["pages"] == "untouched" else None

    def prepared_move(node: int) -> int:
        if evict:
            evict()
            time.sleep(params["rest"] / 1000)
        else:
            buf.alloc.fill_index(cpu)       # rewrites the same values: dirty, hot pages
        return move(buf, node, params, check_move)

    def once() -> dict[str, float]:
        there = prepared_move(dst)
        back = prepared_move(src)
        return {"bandwidth": size / there, "return_bandwidth": size / back,
                "pages_per_s": pages / there * 1e9, "page_latency": there / pages / 1000}

    m = Measurement(kernel=KERNELS[params["method"]], isa="scalar", cpus=cpu,
                    units={"bandwidth": "GB/s", "return_bandwidth": "GB/s",
                           "pages_per_s": "pages/s", "page_latency": "us"},
                    info={"pages": pages, "from": src, "to": dst})
    if src == dst:
        # On a one-node machine this is the baseline: the kernel checks and keeps each page.
        m.info["note"] = "source and destination are the same node: a baseline, no page moves"
    return measure(m, buffer_params(params), [buf], once)
