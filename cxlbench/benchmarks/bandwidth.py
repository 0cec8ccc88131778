"""Bandwidth: a streaming kernel from the C table on pinned threads released together.

GB/s counts the application bytes the kernel table declares. Kernels whose stores
allocate lines first (write-allocate) also report `bandwidth_memory`: what the memory
moved, with each written line read in as well."""
from __future__ import annotations

import numpy as np

from .. import tuning
from ..errors import CheckError
from ..memory import native
from ..options import Option, pick
from .common import MLP, Measurement, check_placement, measure, place, resolve_cpus

NAME = "bandwidth"
TITLE = "Bandwidth"
DESCRIPTION = "streaming bandwidth of a kernel from the kernel table (GB/s of application bytes)"
MIN_BYTES_PER_REP = 512 << 20
CHUNK = 1 << 24                 # elements per numpy step in fills and checks
MASK = (1 << 64) - 1
REPLICATE = 0x0101010101010101  # a byte times this: the byte in every byte of a word


def _kernels() -> tuple[str, ...]:
    """The table's rows for this benchmark: read at first use, so the option table loads
    without the compiled core (a kernel name is then checked where the suite runs)."""
    return tuple(k.key for k in native.kernels() if k.benchmark == NAME)


def buffer_names() -> tuple[str, ...]:
    """Every stream name of this benchmark's kernels, as the table names them."""
    return tuple(dict.fromkeys(n for k in native.kernels() if k.benchmark == NAME
                               for n in k.buffers))


BUFFERS = buffer_names


def buffers_of(params: dict) -> tuple[str, ...]:
    return native.kernel(params["kernel"]).buffers


OPTIONS = {
    "kernel": Option("kernel", "choice", "read", "kernel from the table", choices=_kernels),
    **pick("size", "threads", "cpus", "mem", "page", "isa", "repeat", "warmup", "tolerance",
           "timeout"),
    "passes": Option("passes", "int", 0, "passes over the buffer per repetition; 0 moves "
                     "at least 512 MiB", min=0),
    "prefetch": Option("prefetch", "int", "auto", "copy, copy_nt: lines a software prefetch "
                       "reads ahead of the loads (0: none, the plain loop's; auto: chosen by "
                       "a short probe on this machine, kept in the cache)", min=0, max=64,
                       words=("auto",)),
    "walk": Option("walk", "int", "auto", "copy, copy_nt, write, write_nt: pages walked side "
                   "by side, four lines of each in turn (1: straight through, the plain "
                   "loop's; auto: chosen by a short probe on this machine, kept in the "
                   "cache)", min=1, max=16, words=("auto",)),
}

# What the probe tries (prefetch=auto, walk=auto), and on which kernels each option acts.
PREFETCHES, WALKS = (0, 4, 8, 16), (1, 2, 4)
TAKES = {"prefetch": ("copy", "copy_nt"), "walk": ("copy", "copy_nt", "write", "write_nt")}
# A probe runs over the buffers' first PROBE_BYTES (past any last-level cache when the
# case is), passes over smaller ones until it has moved PROBE_MOVED, per candidate and round.
PROBE_BYTES, PROBE_MOVED = 256 << 20, 64 << 20


def unused(params: dict) -> dict[str, str]:
    return {name: f"kernel {params['kernel']} takes no {name} (only {', '.join(kernels)} do)"
            for name, kernels in TAKES.items() if params["kernel"] not in kernels}


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
    """The kernel's buffers, filled for its row's check kind (CXB_CHECK_* in
    native/cxlbench.h), and that check of its output after each repetition."""

    def __init__(self, kernel: native.KernelInfo, buffers, cpus, size: int):
        if kernel.check not in CHECKS:
            raise CheckError(f"no independent check for kernel {kernel.key} ({kernel.check})")
        self.k, self.size, self.n = kernel, size, size // 8
        self.words = [b.array(np.uint64) for b in buffers]
        self.doubles = [b.array(np.float64) for b in buffers]
        if kernel.check == "index_sum":
            buffers[0].alloc.fill_index(cpus)
        elif kernel.check == "copy":
            buffers[1].alloc.fill_index(cpus)
            self.words[0].fill(0)
        elif kernel.check == "triad":
            for lo, hi in _chunks(self.n):
                self.doubles[1][lo:hi] = np.arange(lo, hi, dtype=np.float64)
            self.doubles[2].fill(2.0)
            self.doubles[0].fill(0.0)

    def value(self, rep: int) -> int:
        """Differs per repetition, so each one must store anew; a fill is one byte in
        every byte of the word, a pattern memset can store too."""
        v = rep + 2
        return REPLICATE * (v & 0xFF) if self.k.check == "fill" else v

    def check(self, r: native.KernelResult, passes: int, value: int) -> None:
        CHECKS[self.k.check](self, r, passes, value)


def check_index_sum(s: Streams, r: native.KernelResult, passes: int, value: int) -> None:
    """Of each step (at least a line) the bytes_read come first, summed over an index
    fill; the bytes_written after them hold the value."""
    k, lines = s.k, s.size // 64
    unit = max(k.elem_bytes, 64)
    period, reads = unit // 64, k.bytes_read * unit // k.elem_bytes // 64
    want = passes * read_sum(lines, period, reads) & MASK
    if r.checksum != want:
        raise CheckError(f"{k.key} checksum {r.checksum:#x}, expected {want:#x}")
    if k.bytes_written:
        per_line = s.words[0][:lines * 8].reshape(lines, 8)
        for lo, hi in _chunks(lines):
            written = (np.arange(lo, hi) % period) >= reads
            if not (per_line[lo:hi][written] == value).all():
                raise CheckError(f"{k.key} left written lines without the stored value")


def check_fill(s: Streams, r: native.KernelResult, passes: int, value: int) -> None:
    if not all((s.words[0][lo:hi] == value).all() for lo, hi in _chunks(s.n)):
        raise CheckError(f"{s.k.key} did not store {value:#x} everywhere")


def check_copy(s: Streams, r: native.KernelResult, passes: int, value: int) -> None:
    if not all(np.array_equal(s.words[0][lo:hi], s.words[1][lo:hi]) for lo, hi in _chunks(s.n)):
        raise CheckError(f"{s.k.key}: the copy differs from its source")


def check_triad(s: Streams, r: native.KernelResult, passes: int, value: int) -> None:
    for lo, hi in _chunks(s.n):
        want = np.arange(lo, hi, dtype=np.float64) + 2.0 * value
        if not np.array_equal(s.doubles[0][lo:hi], want):
            raise CheckError(f"{s.k.key}: a[i] != b[i] + {value} * c[i] from element {lo}")


CHECKS = {"index_sum": check_index_sum, "fill": check_fill, "copy": check_copy,
          "triad": check_triad}


def skip(params: dict, topology) -> str | None:
    """copy_rep and write_rep exist on x86-64 only: elsewhere their cases are skipped."""
    kernel = native.kernel(params["kernel"])
    return None if kernel.isas else \
        f"kernel {kernel.key} is not built on this architecture (it needs {kernel.needs})"


def validate(params: dict, topology) -> None:
    kernel = native.kernel(params["kernel"])
    kernel.choose_isa(params["isa"])
    check_placement(params, resolve_cpus(params), topology, kernel.buffers)


def estimate(params: dict, figures) -> float:
    """Seconds of the case's work at the node's figures: each buffer placed and filled,
    every repetition's passes at one thread's or all threads' read rate, and its check
    (a scan of the buffers)."""
    f = figures.of(params["mem"])
    size, nbuf = params["size"], len(native.kernel(params["kernel"]).buffers)
    passes = params["passes"] or max(1, -(-MIN_BYTES_PER_REP // size))
    rate = f.read_1 if params["threads"] == 1 else f.read_all
    if params["kernel"].startswith("random_"):      # a block a miss, MLP of them in flight
        block = int(params["kernel"].split("_")[1])
        per_thread = block / (f.latency_ns(size) * 1e-9 / MLP)
        rate = min(rate, per_thread * rate / f.read_1)
    reps = params["warmup"] + params["repeat"]
    n = len(candidates(params))
    probe = 0.0 if n == 1 else \
        n * tuning.ROUNDS * max(min(size, PROBE_BYTES), PROBE_MOVED) * nbuf / rate
    return nbuf * size * (1 / f.touch + 1 / f.scan) + probe + \
        reps * (passes * nbuf * size / rate + nbuf * size / f.scan)


def candidates(params: dict) -> list[dict]:
    """The settings the probe tries, of the options the kernel takes (TAKES): those set
    stay as set; a kernel that takes neither has the one empty candidate."""
    out = [{}]
    for name, tried in (("prefetch", PREFETCHES), ("walk", WALKS)):
        if params["kernel"] in TAKES[name]:
            value = params.get(name, "auto")
            out = [{**c, name: v} for c in out for v in ([value] if value != "auto" else tried)]
    return out


def tune(params: dict, kernel, isa: str, buffers, cpus) -> tuning.Choice:
    """The fastest of the candidates on this case's own buffers, threads and ISA (kept per
    CPU, kernel, ISA, threads, placement and size class): a copy's best prefetch and walk
    differ from vendor to vendor, and glibc's own copy changes method with size."""
    size = params["size"]
    n = min(size, PROBE_BYTES)          # both whole steps: PROBE_BYTES is a power of two
    passes = -(-PROBE_MOVED // n)
    step_bytes = (kernel.bytes_read + kernel.bytes_written) * (n // kernel.elem_bytes)

    def rate(c: dict) -> float:
        r = native.run_kernel(kernel, isa, [b.addr for b in buffers], n, passes, cpus, 1,
                              c.get("prefetch", 0), c.get("walk", 1))
        return step_bytes * passes / r.ns
    key = {"kernel": kernel.key, "isa": isa, "threads": len(cpus),
           "size_class": tuning.size_class(size), "buffers": tuning.placed(buffers)}
    return tuning.choose("bandwidth", key, candidates(params), rate, "GB/s")


def run(params: dict) -> Measurement:
    kernel = native.kernel(params["kernel"])
    isa = kernel.choose_isa(params["isa"])
    cpus = resolve_cpus(params)
    buffers = place(params, cpus, kernel.buffers)
    size = params["size"]
    streams = Streams(kernel, buffers, cpus, size)
    passes = params["passes"] or max(1, -(-MIN_BYTES_PER_REP // size))
    choice = tune(params, kernel, isa, buffers, cpus)
    prefetch, walk = choice.settings.get("prefetch", 0), choice.settings.get("walk", 1)
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
        value = streams.value(rep)
        r = native.run_kernel(kernel, isa, [b.addr for b in buffers], size, passes, cpus, value,
                              prefetch, walk)
        streams.check(r, passes, value)
        out = {"bandwidth": app_bytes / r.ns}      # bytes per ns = GB/s
        if kernel.write_allocate:
            out["bandwidth_memory"] = mem_bytes / r.ns
        return out

    m = Measurement(kernel=kernel.key, isa=isa, cpus=cpus, units=units,
                    info={"passes": passes, "bytes_per_rep": app_bytes,
                          "memory_bytes_per_rep": mem_bytes if kernel.write_allocate else app_bytes,
                          "threads": len(cpus), "prefetch": prefetch, "walk": walk,
                          **({"tuned": choice.record()} if choice.figures else {})})
    return measure(m, params, buffers, once)
