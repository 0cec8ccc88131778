"""Loaded latency: one thread chases pointers while the others load memory with a pause
after every 8 lines. Sweeping the pause from idle to none gives the bandwidth-latency
curve (Mess); the mix sets the read share of the load."""
from __future__ import annotations

import numpy as np

from ..errors import CheckError, UserError
from ..memory import PAGE_SIZES, Buffer, native
from ..options import Option, pick
from . import chase
from .chase import Walker
from .common import Measurement, check_placement, measure, place, resolve_cpus

NAME = "loaded_latency"
TITLE = "Loaded latency"
BUFFERS = ("chain", "load")         # the chased cycle; what the generators stream over
DESCRIPTION = "chase latency under load from generator threads (ns, and the load's GB/s)"
DELAYS = ("idle", 1000, 200, 50, 20, 10, 5, 3, 2, 1, 0)   # a pause is ~10-150 cycles
# CXB_LOAD_* in native/cxlbench.h, in value order (tested against native.LOAD_MODES): the
# option table needs them where the core is not built.
MIXES = ("read", "rw_3_1", "rw_2_1", "rw_1_1", "write", "write_nt")
OPTIONS = {
    **pick("size", "mem", "page", "cpus", "repeat", "warmup", "tolerance", "timeout",
           size=256 << 20),
    "window": chase.OPTIONS["window"],
    "load_size": Option("load_size", "size", 1 << 30, "bytes the generators stream over",
                        "bytes", min=64 << 10, multiple=4096),
    "threads": Option("threads", "int", "all", "generator threads (CPUs after the chase's "
                      "one); or all", min=1, words=("all",)),
    "mix": Option("mix", "choice", "read", "what the generators do: read, the read:write "
                  "mixes, write or write_nt", choices=MIXES,
                  expand={"all": MIXES}),
    "delay": Option("delay", "int", "sweep", "pauses after each 8 lines: idle (no load) to 0 "
                    "(full load); sweep runs them all", min=0, max=(1 << 32) - 1,  # uint32_t in C
                    words=("idle",),
                    expand={"sweep": DELAYS}),
    "loads": Option("loads", "int", 1 << 20, "chase loads per repetition", min=1000),
    "dist": chase.OPTIONS["dist"],
    "batch": chase.OPTIONS["batch"],
}


def buffers_of(params: dict) -> tuple[str, ...]:
    return BUFFERS[:1] if params["delay"] == "idle" else BUFFERS     # idle: no load


def _cpus(params: dict) -> list[int]:
    """The chase's CPU first, then the generators'."""
    if params["delay"] == "idle":
        return resolve_cpus({**params, "threads": 1})
    want = params["threads"]
    cpus = resolve_cpus({**params, "threads": "all"})
    if len(cpus) < 2:
        raise UserError("loaded_latency needs 2 CPUs or more (one chases, the rest load); "
                        "use delay=idle for idle latency")
    gens = cpus[1:] if want == "all" else cpus[1:1 + want]
    if want != "all" and len(gens) < want:
        raise UserError(f"loaded_latency: threads={want} needs {want + 1} CPUs, "
                        f"{len(cpus)} given")
    return [cpus[0]] + gens


def validate(params: dict, topology) -> None:
    cpus = _cpus(params)
    claimed: dict = {}          # chain and load side by side where they share a node
    check_placement(params, cpus[:1], topology, BUFFERS[:1], claimed)
    if len(cpus) > 1:
        check_placement({**params, "size": params["load_size"]}, cpus[1:], topology,
                        BUFFERS[1:], claimed)


def estimate(params: dict, figures) -> float:
    """Seconds of the case's work at the node's figures: the chase's buffer placed and its
    cycle built, the generators' placed and filled, and every repetition's loads at the
    idle latency, twice that under load (the knee's rise), and the load's check."""
    f = figures.of(params["mem"])
    size, load = params["size"], params["load_size"]
    idle = params["delay"] == "idle"
    reps = params["warmup"] + params["repeat"]
    per_load = f.latency_ns(size) * 1e-9 * (1 if idle else 2)
    setup = size / f.touch + size // 64 * chase.CYCLE_S + \
        (0 if idle else load * (1 / f.touch + 1 / f.scan))
    return setup + reps * (params["loads"] * per_load + (0 if idle else load / f.scan))


def run(params: dict) -> Measurement:
    cpus = _cpus(params)
    (buf,) = place(params, cpus[:1], BUFFERS[:1])
    gens = len(cpus) - 1
    load = None
    if gens:
        (load,) = place({**params, "size": params["load_size"]}, cpus[1:], BUFFERS[1:],
                        buf.topology)
        load.alloc.fill_index(cpus[1:])
        verify = LoadCheck(load, params["load_size"], gens, params["mix"])
    order = native.chase_build(buf.alloc, params["size"], params["window"],
                               PAGE_SIZES[buf.page], 1)
    walker, pos, rep = Walker(buf.addr, order), 0, 0
    delay = 0 if params["delay"] == "idle" else params["delay"]
    info = {"generators": gens, "window": min(params["window"] or params["size"],
                                              params["size"])}
    dist = chase.Distribution(params["loads"], params["batch"], info, params["warmup"]) \
        if params["dist"] else None
    loads = dist.loads if dist else params["loads"]
    info["loads"] = loads

    def once() -> dict[str, float]:
        nonlocal pos, rep
        rep += 1
        value = rep << 32           # differs per repetition, so each one must store anew
        r = native.loaded_latency(walker.addr(pos), loads, load.addr if load else 0,
                                  params["load_size"] if load else 0, gens, params["mix"],
                                  delay, cpus, value, ticks=dist.addr if dist else 0,
                                  batch=params["batch"])
        pos = walker.expect(r.end, pos, loads)
        out = dist.summarise(r.chase_ns) if dist else {"latency": r.chase_ns / loads}
        if load:
            verify.check(r, value)
            out["bandwidth"] = r.moved / r.gen_ns if r.gen_ns else 0.0
        return out

    # Idle (no generators): no load, so no bandwidth of it to report.
    units = {**(dist.units if dist else {"latency": "ns"}),
             **({"bandwidth": "GB/s"} if load else {})}
    m = Measurement(kernel="chase+" + params["mix"], isa="scalar", cpus=cpus, units=units,
                    info=info)
    return measure(m, params, [buf] + ([load] if load else []), once)


MASK = (1 << 64) - 1


class LoadCheck:
    """What the generators read and wrote, recomputed from the batches each one moved.
    The load buffer is index-filled; generator g streams over its slice of `lines` lines
    8 at a time from line 0, wrapping, after one first batch at line 0 (native/loaded.c).
    It sums what it reads and stores value + line index where it writes."""

    def __init__(self, load: Buffer, load_size: int, gens: int, mix: str):
        lines, self.batch = load_size // 64 // gens, native.LOAD_BATCH_LINES
        self.lines = lines - lines % self.batch
        self.words = load.array(np.uint64)
        rel = np.arange(self.lines, dtype=np.uint64)
        if mix == "read":
            self.read = np.ones(self.lines, dtype=bool)
        elif mix.startswith("rw_"):
            reads = int(mix.split("_")[1])          # R of every R + 1 lines
            self.read = rel % np.uint64(reads + 1) < np.uint64(reads)
        else:
            self.read = np.zeros(self.lines, dtype=bool)
        self.rel, self.gens = rel, gens
        # per generator, the sum of what one batch at each position reads (wrapping)
        self.per_batch = []
        for g in range(gens):
            line_sum = (np.uint64(64) * (np.uint64(g * self.lines) + rel) + np.uint64(28))
            self.per_batch.append((line_sum * self.read).reshape(-1, self.batch)
                                  .sum(axis=1, dtype=np.uint64))

    def check(self, r: native.LoadedResult, value: int) -> None:
        positions = self.lines // self.batch
        for g, (batches, got) in enumerate(zip(r.batches, r.sums)):
            per = self.per_batch[g]
            rounds, rest = divmod(batches - 1, positions)
            want = (rounds * int(per.sum(dtype=np.uint64)) + int(per[:rest].sum(dtype=np.uint64))
                    + int(per[0])) & MASK
            if got != want:
                raise CheckError(f"loaded_latency generator {g} read sum {got:#x}, expected "
                                 f"{want:#x} after {batches} batches")
            # the lines this repetition wrote hold its value
            seen = positions if rounds else max(rest, 1)
            n = seen * self.batch
            written = ~self.read[:n]
            lines = self.words[g * self.lines * 8:(g * self.lines + n) * 8].reshape(n, 8)
            want_rows = (np.uint64(value) + self.rel[:n])[written]
            if not (lines[written] == want_rows[:, None]).all():
                raise CheckError(f"loaded_latency generator {g} left written lines without "
                                 f"this repetition's value")
