"""Bandwidth: a streaming kernel on pinned threads released together at a start line."""
from __future__ import annotations

from .. import native
from ..errors import CheckError
from ..options import Option, pick
from .common import (Measurement, check_placement, measure, place, resolve_cpus,
                     resolve_isa)

NAME = "bandwidth"
DESCRIPTION = "streaming bandwidth of a kernel from the kernel table (GB/s of application bytes)"
MIN_BYTES_PER_REP = 512 << 20


def _kernels() -> tuple[str, ...]:
    return tuple(k.key for k in native.kernels() if k.benchmark == NAME)


OPTIONS = {
    "kernel": Option("kernel", "choice", "read", "kernel from the table", choices=_kernels()),
    **pick("size", "threads", "cpus", "mem", "page", "isa", "repeat", "warmup", "tolerance",
           "timeout"),
    "passes": Option("passes", "int", 0, "passes over the buffer per repetition; 0 moves "
                     "at least 512 MiB", min=0),
}


def expected_checksum(key: str, n: int, passes: int) -> int:
    """The value a kernel must return over n uint64 elements filled with their index."""
    if key == "read":
        return passes * (n * (n - 1) // 2) % (1 << 64)
    raise KeyError(f"no independent check for kernel {key}")


def check(params: dict, topology) -> None:
    kernel = native.kernel(params["kernel"])
    resolve_isa(kernel, params["isa"])
    check_placement(params, resolve_cpus(params), topology, kernel.streams)


def run(params: dict) -> Measurement:
    kernel = native.kernel(params["kernel"])
    isa = resolve_isa(kernel, params["isa"])
    cpus = resolve_cpus(params)
    buffers = place(params, cpus, count=kernel.streams)
    size = params["size"]
    for b in buffers:
        b.alloc.fill_index(cpus)
    passes = params["passes"] or max(1, -(-MIN_BYTES_PER_REP // size))
    moved = (kernel.bytes_read + kernel.bytes_written) * (size // kernel.elem_bytes) * passes
    want = expected_checksum(kernel.key, size // 8, passes)

    def once() -> dict[str, float]:
        r = native.run_kernel(kernel, isa, [b.addr for b in buffers], size, passes, cpus)
        if r.checksum != want:
            raise CheckError(f"{kernel.key}/{isa} checksum {r.checksum:#x}, expected {want:#x}")
        return {"bandwidth": moved / r.ns}          # bytes per ns = GB/s

    m = Measurement(kernel=kernel.key, isa=isa, cpus=cpus, units={"bandwidth": "GB/s"},
                    info={"passes": passes, "bytes_per_rep": moved, "threads": len(cpus)})
    return measure(m, params, buffers, once)
