"""Page migration between two nodes: move_pages(2) or mbind(2) with MPOL_MF_MOVE, in
batches of pages, timed in C; each move checked (every page on the destination, the data
unchanged) and then undone."""
from __future__ import annotations

from .. import native
from ..errors import CheckError
from ..options import Option, pick
from .common import Measurement, check_placement, measure, place, resolve_cpus

NAME = "migrate"
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
}
KERNELS = {"move_pages": "move_pages", "mbind": "mbind_move"}


def _buffer_params(params: dict) -> dict:
    return {**params, "mem": f"bind:{params['from']}"}


def check(params: dict, topology) -> None:
    cpu = resolve_cpus({**params, "threads": 1})
    for node in (params["from"], params["to"]):
        check_placement({**params, "mem": f"bind:{node}"}, cpu, topology)


def run(params: dict) -> Measurement:
    src, dst, size = params["from"], params["to"], params["size"]
    cpu = resolve_cpus({**params, "threads": 1})
    (buf,) = place(_buffer_params(params), cpu)
    buf.alloc.fill_index(cpu)
    mover, reader = native.kernel(KERNELS[params["method"]]), native.kernel("read")
    pages, n = buf.alloc.map_size // 4096, size // 8
    want = n * (n - 1) // 2 % (1 << 64)
    maxnode = max(src, dst) + 1

    def move(node: int) -> int:
        r = native.run_kernel(mover, "scalar", [buf.addr], buf.alloc.map_size, node, cpu,
                              params["batch"])
        if r.checksum:
            raise CheckError(f"{r.checksum} of {pages} pages did not move to node {node}")
        counts, _ = buf.alloc.query_nodes(4096, maxnode)
        if counts[node] != pages:
            raise CheckError(f"after the move node {node} holds {counts[node]} of {pages} pages")
        if native.run_kernel(reader, reader.best_isa(), [buf.addr], size, 1, cpu).checksum != want:
            raise CheckError(f"data changed while moving to node {node}")
        return r.ns

    def once() -> dict[str, float]:
        there = move(dst)
        back = move(src)
        return {"bandwidth": buf.alloc.map_size / there,
                "return_bandwidth": buf.alloc.map_size / back,
                "pages_per_s": pages / there * 1e9, "page_latency": there / pages / 1000}

    m = Measurement(kernel=mover.key, isa="scalar", cpus=cpu,
                    units={"bandwidth": "GB/s", "return_bandwidth": "GB/s",
                           "pages_per_s": "pages/s", "page_latency": "us"},
                    info={"pages": pages, "from": src, "to": dst})
    if src == dst:
        # On a one-node machine this is the baseline: the kernel checks and keeps each page.
        m.info["note"] = "source and destination are the same node: a baseline, no page moves"
    return measure(m, _buffer_params(params), [buf], once)
