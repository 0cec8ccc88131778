"""Idle latency: one thread chases pointers around a random cycle, one pointer per line."""
from __future__ import annotations

from .. import native
from ..errors import CheckError
from ..memory import PAGE_SIZES
from ..options import Option, pick
from .common import Measurement, check_placement, measure, place, resolve_cpus

NAME = "chase"
DESCRIPTION = "idle load-to-use latency: dependent loads around a random cycle (ns per load)"
OPTIONS = {
    **pick("size", "mem", "page", "cpus", "repeat", "warmup", "tolerance", "timeout",
           size=256 << 20),
    "loads": Option("loads", "int", 0, "loads per repetition; 0 picks max(lines, 2^20) "
                    "capped at 2^22", min=0),
    "seed": Option("seed", "int", 1, "seed of the random cycle", min=0),
}


def check(params: dict, topology) -> None:
    check_placement(params, resolve_cpus({**params, "threads": 1}), topology)


def run(params: dict) -> Measurement:
    kernel = native.kernel("chase")
    cpu = resolve_cpus({**params, "threads": 1})
    (buf,) = place(params, cpu)
    size = params["size"]
    lines = size // 64
    # Shuffle page by page: one TLB entry serves a page's lines, so page size is the knob.
    order = native.chase_build(buf.alloc, size, min(PAGE_SIZES[params["page"]], size),
                               params["seed"])
    loads = params["loads"] or min(max(lines, 1 << 20), 1 << 22)
    pos = 0

    def once() -> dict[str, float]:
        nonlocal pos
        start = buf.addr + int(order[pos]) * 64
        r = native.run_kernel(kernel, "scalar", [start], 64, loads, cpu)
        pos = (pos + loads) % lines
        # The cycle's order was recorded when it was built: the walk must end where the
        # order says, or loads were skipped or the links are wrong.
        if r.end != buf.addr + int(order[pos]) * 64:
            raise CheckError(f"chase ended at line {(r.end - buf.addr) // 64}, expected "
                             f"line {int(order[pos])} after {loads} loads")
        return {"latency": r.ns / loads}

    m = Measurement(kernel="chase", isa="scalar", cpus=cpu, units={"latency": "ns"},
                    info={"loads": loads, "lines": lines})
    return measure(m, params, [buf], once)
