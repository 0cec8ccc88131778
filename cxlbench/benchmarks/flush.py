"""Flush and persistence costs: clflush, clflushopt, clwb (then sfence) of clean or dirty
lines, non-temporal stores, and `write=true` for write-then-flush of a range (the path a
checkpoint to CXL or persistent memory takes). An instruction the CPU lacks is reported
as unsupported, never replaced by another."""
from __future__ import annotations

import numpy as np

from ..errors import CheckError
from ..memory import native
from ..options import Option, pick
from .common import MLP, Measurement, check_placement, measure, place, resolve_cpus

NAME = "flush"
TITLE = "Flush and persistence"
BUFFERS = ("lines",)
# CXB_FLUSH_* in native/cxlbench.h, in value order (tested against native.FLUSH_KINDS).
KINDS = ("clflush", "clflushopt", "clwb", "nt")
DESCRIPTION = "cache-line flush and write-back costs, per line (ns) and per range (GB/s)"
OPTIONS = {
    "flush": Option("flush", "choice", "clflushopt", "the instruction",
                    choices=KINDS, expand={"all": KINDS}),
    "state": Option("state", "choice", "dirty", "lines written (dirty) or only cached "
                    "(clean) before the flush", choices=("clean", "dirty"),
                    expand={"all": ("clean", "dirty")}),
    "write": Option("write", "bool", False, "time the writes with the flushes"),
    **pick("size", "mem", "page", "cpus", "repeat", "warmup", "tolerance", "timeout",
           size=1 << 20),
}


def validate(params: dict, topology) -> None:
    check_placement(params, resolve_cpus({**params, "threads": 1}), topology, BUFFERS)


def estimate(params: dict, figures) -> float:
    """Seconds of the case's work at the node's figures: the buffer placed and filled,
    then each repetition's lines flushed (a write-back a line at the node's latency, MLP
    in flight) and checked."""
    f = figures.of(params["mem"])
    size, reps = params["size"], params["warmup"] + params["repeat"]
    per = size / 64 * f.latency_ns(1 << 30) * 1e-9 / MLP + 2 * size / f.scan
    return size * (1 / f.touch + 1 / f.scan) + reps * per


def run(params: dict) -> Measurement:
    cpu = resolve_cpus({**params, "threads": 1})
    kind = params["flush"]
    m = Measurement(kernel=kind, isa="scalar", cpus=cpu,
                    units={"latency": "ns", "bandwidth": "GB/s"},
                    info={"lines": params["size"] // 64})
    if not native.flush_supported(kind):
        m.status, m.error = "unsupported", f"{kind} is not supported by this CPU"
        return m
    (buf,) = place(params, cpu, BUFFERS)
    lines, rep = params["size"] // 64, 0
    buf.alloc.fill_index(cpu)
    words = buf.array(np.uint64)[:lines * 8].reshape(lines, 8)

    def once() -> dict[str, float]:
        nonlocal rep
        rep += 1
        value = rep << 32           # differs per repetition, so each one must store anew
        ns = native.flush(buf.addr, params["size"], kind, params["state"] == "dirty",
                          params["write"], value)
        check_lines(words, kind, params["state"], params["write"], value)
        return {"latency": ns / lines, "bandwidth": params["size"] / ns}

    return measure(m, params, [buf], once)


def check_lines(words: np.ndarray, kind: str, state: str, write: bool, value: int) -> None:
    """Read the lines back: NT stores and write-then-flush leave value + line index in
    every word, a dirty flush in the first word (written before the timed flush), and a
    clean flush leaves the index fill as it was."""
    lines = np.arange(len(words), dtype=np.uint64)
    if kind == "nt" or write:
        got, want, what = words, (np.uint64(value) + lines)[:, None], "stored"
    elif state == "dirty":
        got, want, what = words[:, 0], np.uint64(value) + lines, "written"
    else:
        got, want, what = words, lines[:, None] * np.uint64(8) + np.arange(8, dtype=np.uint64), \
            "left unchanged"
    ok = got == want
    bad = np.flatnonzero(~(ok.all(axis=1) if ok.ndim == 2 else ok))
    if bad.size:
        raise CheckError(f"flush {kind}: line {int(bad[0])} does not hold what it {what} "
                         f"({bad.size} of {len(words)} lines differ)")
