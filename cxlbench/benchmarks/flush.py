"""Flush and persistence costs: clflush, clflushopt, clwb (then sfence) of clean or dirty
lines, non-temporal stores, and `write=true` for write-then-flush of a range (the path a
checkpoint to CXL or persistent memory takes). An instruction the CPU lacks is reported
as unsupported, never replaced by another."""
from __future__ import annotations

from .. import native
from ..options import Option, pick
from .common import Measurement, check_placement, measure, place, resolve_cpus

NAME = "flush"
DESCRIPTION = "cache-line flush and write-back costs, per line (ns) and per range (GB/s)"
OPTIONS = {
    "flush": Option("flush", "choice", "clflushopt", "the instruction",
                    choices=native.FLUSH_KINDS, expand={"all": native.FLUSH_KINDS}),
    "state": Option("state", "choice", "dirty", "lines written (dirty) or only cached "
                    "(clean) before the flush", choices=("clean", "dirty"),
                    expand={"all": ("clean", "dirty")}),
    "write": Option("write", "bool", False, "time the writes with the flushes"),
    **pick("size", "mem", "page", "cpus", "repeat", "warmup", "tolerance", "timeout",
           size=1 << 20),
}


def check(params: dict, topology) -> None:
    check_placement(params, resolve_cpus({**params, "threads": 1}), topology)


def run(params: dict) -> Measurement:
    cpu = resolve_cpus({**params, "threads": 1})
    kind = params["flush"]
    m = Measurement(kernel=kind, isa="scalar", cpus=cpu,
                    units={"latency": "ns", "bandwidth": "GB/s"},
                    info={"lines": params["size"] // 64})
    if not native.flush_supported(kind):
        m.status, m.error = "unsupported", f"{kind} is not supported by this CPU"
        return m
    (buf,) = place(params, cpu)
    lines, rep = params["size"] // 64, 0

    def once() -> dict[str, float]:
        nonlocal rep
        rep += 1
        ns = native.flush(buf.addr, params["size"], kind, params["state"] == "dirty",
                          params["write"], rep)
        return {"latency": ns / lines, "bandwidth": params["size"] / ns}

    return measure(m, params, [buf], once)
