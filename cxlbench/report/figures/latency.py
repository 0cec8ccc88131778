"""Idle latency against working set (chase) and latency under load (loaded_latency)."""
from __future__ import annotations

import matplotlib.pyplot as plt

from .. import fleet
from ...units import format_size
from .draw import (Figure, _errors, _legend, _metric, _png, _unit, bars, caption, lines,
                   series_names, varying)


def _cache_marks(runs) -> list[tuple[float, str]]:
    caches = runs[0].meta.get("topology", {}).get("cpu", {}).get("caches", []) if runs else []
    return [(c["size"], f"L{c['level']} {format_size(c['size'])}") for c in caches
            if c.get("size") and c.get("type") in ("Data", "Unified")]


def chase(frame, runs):
    """Sweeps (3 sizes or more) as latency curves; the knobs measured at one or two sizes
    (page size, TLB reach, chains, distribution) as bars beside them."""
    lat = _metric(frame, "latency")
    names = series_names(lat, exclude=("size",))
    sizes = lat.assign(_s=names).groupby("_s")["params"].agg(
        lambda ps: len({p.get("size") for p in ps}))
    sweep = lat[[sizes[n] >= 3 for n in names]]
    yield lines(sweep, "size", "latency", xlabel="working set", logx=True, logy=True,
                xsize=True, marks=_cache_marks(runs), key="latency", family="chase",
                title="Idle latency against working-set size",
                measured="Dependent-load latency (ns per load) of a random pointer chase over "
                         "the working set, one pointer per 64-byte line; dotted lines mark "
                         f"the CPU caches of {runs[0].label if runs else 'the machine'}")
    knobs = lat[[sizes[n] < 3 for n in names]]
    if len(knobs):
        alone = sweep.empty        # no sweep: these bars are the latency figure
        yield bars(knobs, tuple(varying(knobs)) or ("size",), "latency",
                   key="latency" if alone else "latency-knobs", family="chase",
                   title="Idle latency per case" if alone else
                   "Latency outside the size sweeps: page size, TLB reach, parallelism",
                   measured="Dependent-load latency (ns per load) of the chase cases measured "
                            "at one or two sizes (page size, lines visited per page for TLB "
                            "reach, chains walked at once for memory-level parallelism, timed "
                            "batches)")


def loaded_latency(frame, runs):
    fv = fleet.view(frame)
    frame = fv.frame
    lat, bw = _metric(frame, "latency"), _metric(frame, "bandwidth")
    gbs = {(l, c): v for l, c, v in zip(bw["label"], bw["case"], bw["median"])}
    xs = [gbs.get((l, c), 0.0) for l, c in zip(lat["label"], lat["case"])]
    sub = lat.assign(_gbs=xs)
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    # One curve per mix and placement; threads is the generators' count, "all" for every
    # point of a sweep, though the idle point runs none.
    sub = sub.assign(_series=series_names(sub, exclude=("delay", "threads")))
    for name, g in sub.groupby("_series", sort=False):
        g = g.sort_values("_gbs")
        ax.errorbar(g["_gbs"], g["median"], yerr=_errors(g), marker="o", markersize=3,
                    capsize=2, label=name)
    ax.set_xlabel("generator bandwidth (GB/s)")
    ax.set_ylabel(f"chase latency ({_unit(sub)})")
    title = "Loaded latency: latency against the bandwidth of the load"
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    _legend(ax, list(dict.fromkeys(sub["_series"])))
    yield Figure("loaded-latency", "loaded_latency", title,
                 caption(sub, "Chase latency (ns per load) on the first CPU while the other "
                              "CPUs stream with a pause (delay) after every 8 lines; each "
                              "point is one delay, from idle to no pause",
                         exclude=("delay", "threads"),
                         shown="fleet-range" if fv.labels else "whiskers", labels=fv.labels) +
                 (" " + fv.words if fv.words else ""), _png(fig))


PLOTTERS = {"chase": chase, "loaded_latency": loaded_latency}
