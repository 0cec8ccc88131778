"""Cross-tier interference: what traffic to one node (the aggressor's, mem.load) costs
another (the victim's, mem). One thread measures the victim node's latency distribution
(a timed chase) and its read bandwidth (one pass over the same buffer) while `threads`
others stream to the aggressor's node flat out, and the same with the aggressors idle,
side by side in every repetition: the victim's loss in % is against its own idle figure
measured moments apart. The suite's matrix is victim node x aggressor node x aggressor
threads x mix; on one node, victim and aggressor share it."""
from __future__ import annotations

import numpy as np

from ..errors import CheckError
from ..memory import PAGE_SIZES, native
from ..options import Option, pick
from . import chase, loaded_latency
from .chase import Walker
from .common import Measurement, measure, place, resolve_cpus

NAME = "interference"
TITLE = "Cross-node interference"
BUFFERS = loaded_latency.BUFFERS        # the victim's (chased and read); the aggressors'
DESCRIPTION = ("a victim node's latency and bandwidth while other threads stream to an "
               "aggressor node (mem.load), against the same with them idle (loss in %)")
OPTIONS = {
    **pick("size", "mem", "page", "cpus", "repeat", "warmup", "tolerance", "timeout",
           size=256 << 20),
    "window": chase.OPTIONS["window"],
    "load_size": loaded_latency.OPTIONS["load_size"],
    "threads": Option("threads", "int", "all", "aggressor threads (CPUs after the victim's "
                      "one); or all", min=1, words=("all",)),
    "mix": loaded_latency.OPTIONS["mix"],
    "loads": Option("loads", "int", 1 << 20, "victim chase loads per repetition, each side",
                    min=1000),
    "batch": chase.OPTIONS["batch"],
}


def _cpus(params: dict) -> list[int]:
    return loaded_latency._cpus({**params, "delay": 0})


def skip(params: dict, topology) -> str | None:
    """More aggressors than the machine has CPUs beside the victim's: a suite's larger
    counts on a small machine."""
    want = params["threads"]
    if want == "all":
        return None
    have = len(resolve_cpus({**params, "threads": "all"}))
    if want + 1 > have:
        return f"threads={want} needs {want + 1} CPUs (a victim's and {want}), {have} here"
    return None


def validate(params: dict, topology) -> None:
    loaded_latency.validate({**params, "delay": 0}, topology)


def estimate(params: dict, figures) -> float:
    """Seconds: the buffers placed and the cycle built once, and every repetition's two
    chases (idle, and loaded at twice the latency) and two passes over the victim's buffer."""
    f = figures.of(params["mem"])
    size, load = params["size"], params["load_size"]
    reps = params["warmup"] + params["repeat"]
    setup = size / f.touch + size // 64 * chase.CYCLE_S + load * (1 / f.touch + 1 / f.scan)
    return setup + reps * (3 * params["loads"] * f.latency_ns(size) * 1e-9 + 3 * size / f.scan)


def run(params: dict) -> Measurement:
    cpus = _cpus(params)
    (buf,) = place(params, cpus[:1], BUFFERS[:1])
    (load,) = place({**params, "size": params["load_size"]}, cpus[1:], BUFFERS[1:],
                    buf.topology)
    load.alloc.fill_index(cpus[1:])
    gens = len(cpus) - 1
    verify = loaded_latency.LoadCheck(load, params["load_size"], gens, params["mix"])
    size, batch = params["size"], params["batch"]
    passed = size - size % (native.LOAD_BATCH_LINES * 64)     # the pass reads whole batches
    walker = Walker(buf.addr, native.chase_build(buf.alloc, size, params["window"],
                                                 PAGE_SIZES[buf.page], 1))
    victim_sum = int(buf.array(np.uint64)[:passed // 8].sum(dtype=np.uint64))  # the cycle's
    info: dict = {"generators": gens, "idle": {}, "loaded": {}}
    sides = {s: chase.Distribution(params["loads"], batch, info[s], params["warmup"])
             for s in ("idle", "loaded")}
    loads = sides["idle"].loads
    pos, calls = 0, 0

    def call(loaded: bool, dist: chase.Distribution | None):
        """One side: the victim's timed chase (dist) or its read pass, aggressors on or not."""
        nonlocal pos, calls
        calls += 1
        value = calls << 32         # differs per call, so each one must store anew
        r = native.loaded_latency(walker.addr(pos), loads, load.addr if loaded else 0,
                                  params["load_size"] if loaded else 0,
                                  gens if loaded else 0, params["mix"], 0, cpus, value,
                                  ticks=dist.addr if dist else 0, batch=batch,
                                  victim=None if dist else (buf.addr, passed))
        if loaded:
            verify.check(r, value)
        if dist:
            pos = walker.expect(r.end, pos, loads)
        elif r.victim_sum != victim_sum:
            raise CheckError(f"interference: the victim's pass read words summing to "
                             f"{r.victim_sum:#x}, expected {victim_sum:#x}")
        return r

    def once() -> dict[str, float]:
        idle = sides["idle"].summarise(call(False, sides["idle"]).chase_ns)
        under = sides["loaded"].summarise(call(True, sides["loaded"]).chase_ns)
        calm, busy = call(False, None), call(True, None)
        bw, bw_idle = passed / busy.chase_ns, passed / calm.chase_ns
        return {**under, "idle_latency": idle["latency"],
                "latency_loss": (under["latency"] / idle["latency"] - 1) * 100,
                "bandwidth": bw, "idle_bandwidth": bw_idle,
                "bandwidth_loss": (1 - bw / bw_idle) * 100,
                "aggressor_bandwidth": busy.moved / busy.gen_ns if busy.gen_ns else 0.0}

    units = {**sides["loaded"].units, "idle_latency": "ns", "latency_loss": "%",
             "bandwidth": "GB/s", "idle_bandwidth": "GB/s", "bandwidth_loss": "%",
             "aggressor_bandwidth": "GB/s"}
    m = Measurement(kernel="interference+" + params["mix"], isa="scalar", cpus=cpus,
                    units=units, info=info)
    return measure(m, params, [buf, load], once)
