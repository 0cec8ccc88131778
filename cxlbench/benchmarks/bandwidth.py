"""Bandwidth: a streaming kernel from the C table on pinned threads released together.

GB/s counts the application bytes the kernel table declares. Kernels whose stores
allocate lines first (write-allocate) also report `bandwidth_memory`: what the memory
moved, with each written line read in as well."""
from __future__ import annotations

import numpy as np

from .. import native
from ..errors import CheckError
from ..options import Option, pick
from .common import (Measurement, check_placement, measure, place, resolve_cpus,
                     resolve_isa)

NAME = "bandwidth"
DESCRIPTION = "streaming bandwidth of a kernel from the kernel table (GB/s of application bytes)"
MIN_BYTES_PER_REP = 512 << 20
CHUNK = 1 << 24                 # elements per numpy step in fills and checks
MASK = (1 << 64) - 1


def _kernels() -> tuple[str, ...]:
    return tuple(k.key for k in native.kernels() if k.benchmark == NAME)


OPTIONS = {
    "kernel": Option("kernel", "choice", "read", "kernel from the table", choices=_kernels()),
    **pick("size", "threads", "cpus", "mem", "page", "isa", "repeat", "warmup", "tolerance",
           "timeout"),
    "passes": Option("passes", "int", 0, "passes over the buffer per repetition; 0 moves "
                     "at least 512 MiB", min=0),
}


def _chunks(n: int):
    for lo in range(0, n, CHUNK):
        yield lo, min(lo + CHUNK, n)


def read_sum(n_lines: int, period: int, reads: int) -> int:
    """Sum of the uint64 index words in lines l with l % period < reads (an index-filled
    buffer of n_lines lines, 8 words each): sum over those lines of 64 l + 28."""
    total = count = 0
    for r in range(reads):
        if r >= n_lines:
            break
        m = (n_lines - 1 - r) // period + 1            # lines r, r + period, ...
        total += period * m * (m - 1) // 2 + r * m
        count += m
    return (64 * total + 28 * count) & MASK


class Streams:
    """The kernel's buffers, filled so that its output can be recomputed independently,
    and the check of that output after each repetition."""

    def __init__(self, kernel: native.KernelInfo, buffers, cpus, size: int):
        self.k, self.size, self.n = kernel, size, size // 8
        self.words = [b.array(np.uint64) for b in buffers]
        self.doubles = [b.array(np.float64) for b in buffers]
        key = kernel.key
        if key == "read" or key.startswith(("rw_", "random_")):
            buffers[0].alloc.fill_index(cpus)
        elif key.startswith("copy"):
            buffers[1].alloc.fill_index(cpus)
            self.words[0].fill(0)
        elif key.startswith("triad"):
            for lo, hi in _chunks(self.n):
                self.doubles[1][lo:hi] = np.arange(lo, hi, dtype=np.float64)
            self.doubles[2].fill(2.0)
            self.doubles[0].fill(0.0)

    def check(self, r: native.RunResult, passes: int, value: int) -> None:
        key, n = self.k.key, self.n
        if key == "read" or key.startswith("random_"):
            # every word read once a pass, sequentially or in random blocks
            want = passes * (n * (n - 1) // 2) & MASK
            if r.checksum != want:
                raise CheckError(f"{key} checksum {r.checksum:#x}, expected {want:#x}")
        elif key.startswith("rw_"):
            reads, writes = (int(x) for x in key.split("_")[1:])
            lines = self.size // 64
            want = passes * read_sum(lines, reads + writes, reads) & MASK
            if r.checksum != want:
                raise CheckError(f"{key} read checksum {r.checksum:#x}, expected {want:#x}")
            per_line = self.words[0][:lines * 8].reshape(lines, 8)
            for lo, hi in _chunks(lines):
                written = (np.arange(lo, hi) % (reads + writes)) >= reads
                if not (per_line[lo:hi][written] == value).all():
                    raise CheckError(f"{key} left written lines without the stored value")
        elif key.startswith("write"):
            if not all((self.doubles[0][lo:hi] == float(value)).all() for lo, hi in _chunks(n)):
                raise CheckError(f"{key} did not store {value} everywhere")
        elif key.startswith("copy"):
            if not all(np.array_equal(self.words[0][lo:hi], self.words[1][lo:hi])
                       for lo, hi in _chunks(n)):
                raise CheckError(f"{key}: the copy differs from its source")
        elif key.startswith("triad"):
            for lo, hi in _chunks(n):
                want = np.arange(lo, hi, dtype=np.float64) + 2.0 * value
                if not np.array_equal(self.doubles[0][lo:hi], want):
                    raise CheckError(f"{key}: a[i] != b[i] + {value} * c[i] from element {lo}")
        else:
            raise CheckError(f"no independent check for kernel {key}")


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
    streams = Streams(kernel, buffers, cpus, size)
    passes = params["passes"] or max(1, -(-MIN_BYTES_PER_REP // size))
    step_count = size // kernel.elem_bytes
    app_bytes = (kernel.bytes_read + kernel.bytes_written) * step_count * passes
    mem_bytes = app_bytes + kernel.bytes_written * step_count * passes
    units = {"bandwidth": "GB/s"}
    if kernel.write_allocate:
        units["bandwidth_memory"] = "GB/s"
    rep = 0

    def once() -> dict[str, float]:
        nonlocal rep
        rep += 1
        value = rep + 2          # differs per repetition, so each one must store anew
        r = native.run_kernel(kernel, isa, [b.addr for b in buffers], size, passes, cpus, value)
        streams.check(r, passes, value)
        out = {"bandwidth": app_bytes / r.ns}      # bytes per ns = GB/s
        if kernel.write_allocate:
            out["bandwidth_memory"] = mem_bytes / r.ns
        return out

    m = Measurement(kernel=kernel.key, isa=isa, cpus=cpus, units=units,
                    info={"passes": passes, "bytes_per_rep": app_bytes,
                          "memory_bytes_per_rep": mem_bytes if kernel.write_allocate else app_bytes,
                          "threads": len(cpus)})
    return measure(m, params, buffers, once)
