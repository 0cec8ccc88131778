"""Cache-line transfers between CPUs (pingpong) and atomic operations (atomics)."""
from __future__ import annotations

from .. import fleet
from ...units import parse_list
from . import words
from .draw import _metric, _unit, bars, caption, heatmaps


def pingpong(frame, runs):
    fv = fleet.view(frame)
    frame = fv.frame
    sub = _metric(frame, "latency")
    tables = []
    for (label, mem, mode), g in sub.groupby(
            [sub["label"], sub["params"].map(lambda p: p.get("mem.line") or p.get("mem")),
             sub["params"].map(lambda p: p.get("mode"))], sort=False):
        cells = {}
        for cpus, v in zip(g["cpus_used"], g["median"]):
            a, b = (parse_list(str(cpus)) + [None, None])[:2]
            cells[(a, b)] = cells[(b, a)] = v
        cpus_ = sorted({a for a, _ in cells if a is not None})
        prefix = f"{label} " if sub["label"].nunique() > 1 else ""
        tables.append((f"{prefix}{words.value('mem', mem)}, {mode}", cpus_, cpus_, cells))
    yield heatmaps(tables, unit=_unit(sub), key="pingpong", family="pingpong",
                   title="Cache-line transfer between CPUs (ping-pong)",
                   row_label="CPU", col_label="CPU",
                   caption_text=caption(sub, "One-way transfer time (ns) of one cache line "
                                             "bounced between two CPUs, homed on the node the "
                                             "title names, handed over by a store or a CAS",
                                        exclude=("mem", "mode"),
                                        shown="fleet-cells" if fv.labels else "cells",
                                        labels=fv.labels) + (" " + fv.words if fv.words else ""))


def atomics(frame, runs):
    yield bars(frame, ("mode", "threads"), "throughput", key="atomics", family="atomics",
               title="Atomic operations on shared, private and falsely shared lines",
               measured="Atomic operations per second (millions) over all threads")


PLOTTERS = {"pingpong": pingpong, "atomics": atomics}
