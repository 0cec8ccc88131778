"""Loaded latency: one thread chases pointers while the others load memory with a pause
after every 8 lines. Sweeping the pause from idle to none gives the bandwidth-latency
curve (Mess); the mix sets the read share of the load."""
from __future__ import annotations

from .. import native
from ..errors import UserError
from ..memory import PAGE_SIZES, Buffer
from ..options import Option, pick
from .chase import Walker
from .common import Measurement, check_placement, measure, place, resolve_cpus

NAME = "loaded_latency"
DESCRIPTION = "chase latency under load from generator threads (ns, and the load's GB/s)"
DELAYS = ("idle", 1000, 200, 50, 20, 10, 5, 3, 2, 1, 0)   # a pause is ~10-150 cycles
OPTIONS = {
    **pick("size", "mem", "page", "cpus", "repeat", "warmup", "tolerance", "timeout",
           size=256 << 20),
    "load_size": Option("load_size", "size", 1 << 30, "bytes the generators stream over",
                        "bytes", min=64 << 10, multiple=4096),
    "threads": Option("threads", "int", "all", "generator threads (CPUs after the chase's "
                      "one); or all", min=1, words=("all",)),
    "mix": Option("mix", "choice", "read", "what the generators do: read, the read:write "
                  "mixes, write or write_nt", choices=native.LOAD_MODES,
                  expand={"all": native.LOAD_MODES}),
    "delay": Option("delay", "int", "sweep", "pauses after each 8 lines: idle (no load) to 0 "
                    "(full load); sweep runs them all", min=0, words=("idle",),
                    expand={"sweep": DELAYS}),
    "loads": Option("loads", "int", 1 << 20, "chase loads per repetition", min=1000),
}


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


def check(params: dict, topology) -> None:
    cpus = _cpus(params)
    check_placement(params, cpus[:1], topology)
    if len(cpus) > 1:
        check_placement({**params, "size": params["load_size"]}, cpus[1:], topology)


def run(params: dict) -> Measurement:
    cpus = _cpus(params)
    (buf,) = place(params, cpus[:1])
    gens = len(cpus) - 1
    load = None
    if gens:
        load = Buffer(params["load_size"], mem=params["mem"], page=params["page"],
                      cpus=cpus[1:], topology=buf.topology, tolerance=params["tolerance"])
        load.check("after allocation")
    order = native.chase_build(buf.alloc, params["size"],
                               min(PAGE_SIZES[params["page"]], params["size"]), 1)
    walker, loads, pos = Walker(buf.addr, order), params["loads"], 0
    delay = 0 if params["delay"] == "idle" else params["delay"]

    def once() -> dict[str, float]:
        nonlocal pos
        r = native.loaded_latency(walker.addr(pos), loads, load.addr if load else 0,
                                  params["load_size"] if load else 0, gens, params["mix"],
                                  delay, cpus)
        pos = walker.expect(r.end, pos, loads)
        return {"latency": r.chase_ns / loads,
                "bandwidth": r.moved / r.gen_ns if r.gen_ns else 0.0}

    m = Measurement(kernel="chase+" + params["mix"], isa="scalar", cpus=cpus,
                    units={"latency": "ns", "bandwidth": "GB/s"},
                    info={"generators": gens, "loads": loads})
    return measure(m, params, [buf] + ([load] if load else []), once)
