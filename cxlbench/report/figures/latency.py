"""Idle latency against working set (chase) and latency under load (loaded_latency)."""
from __future__ import annotations

from .. import fleet
from . import words
from .draw import _metric, bars, lines
from .params import swept

# What a chase case measured at one or two sizes varies (the bars' groups).
KNOBS = ("page", "lines_per_page", "chains", "dist", "window", "size")


def _cache_marks(runs) -> list[tuple[float, str]]:
    caches = runs[0].meta.get("topology", {}).get("cpu", {}).get("caches", []) if runs else []
    return [(c["size"], f"L{c['level']} {words.size(c['size'])}") for c in caches
            if c.get("size") and c.get("type") in ("Data", "Unified")]


def chase(frame, runs):
    """Sweeps (3 sizes or more) as latency curves; the knobs measured at one or two sizes
    (page size, TLB reach, chains, distribution) as bars beside them."""
    lat = _metric(frame, "latency")
    curve = swept(lat, "size")
    sweep = lat[curve]
    yield lines(sweep, "size", "latency", xlabel="working set", logx=True, logy=True,
                xsize=True, marks=_cache_marks(runs), key="latency", family="chase",
                title="Idle latency against working-set size",
                measured="Dependent-load latency (ns per load) of a random pointer chase over "
                         "the working set, one pointer per 64-byte line; dotted lines mark "
                         f"the CPU caches of {runs[0].label if runs else 'the machine'}")
    knobs = lat[~curve]
    if len(knobs):
        alone = sweep.empty        # no sweep: these bars are the latency figure
        yield bars(knobs, KNOBS, "latency",
                   key="latency" if alone else "latency-knobs", family="chase",
                   title="Idle latency per case" if alone else
                   "Latency outside the size sweeps: page size, TLB reach, parallelism",
                   measured="Dependent-load latency (ns per load) of the chase cases measured "
                            "at one or two sizes (page size, lines visited per page for TLB "
                            "reach, chains walked at once for memory-level parallelism, timed "
                            "batches)")


def loaded_latency(frame, runs):
    """Chase latency against the bandwidth the generators drew at each delay, a line per
    mix and placement (threads is the generators' count, "all" for every point of a
    sweep, though the idle point runs none)."""
    fv = fleet.view(frame)
    frame = fv.frame
    bw = _metric(frame, "bandwidth")
    gbs = {(l, c): v for l, c, v in zip(bw["label"], bw["case"], bw["median"])}
    yield lines(frame, lambda r: gbs.get((r["label"], r["case"]), 0.0), "latency",
                xlabel="generator bandwidth (GB/s)", key="loaded-latency",
                family="loaded_latency", exclude=("delay", "threads"),
                title="Loaded latency: latency against the bandwidth of the load",
                measured="Chase latency (ns per load) on the first CPU while the other "
                         "CPUs stream with a pause (delay) after every 8 lines; each point "
                         "is one delay, from idle to no pause",
                shown="fleet-range" if fv.labels else None, labels=fv.labels,
                note=" " + fv.words if fv.words else "")


PLOTTERS = {"chase": chase, "loaded_latency": loaded_latency}
