"""Bandwidth per kernel, random access, the node matrix and the weighted-interleave sweep."""
from __future__ import annotations

import re

from .. import fleet
from .draw import _metric, _unit, bars, caption, heatmaps, lines
from .params import swept


def bandwidth(frame, runs):
    yield bars(frame, ("kernel", "threads"), "bandwidth", key="bandwidth", family="bandwidth",
               title="Bandwidth per kernel and thread count",
               measured="Application bandwidth (bytes the kernel reads and writes, GB/s) of "
                        "each streaming kernel on pinned threads released together")


def random_bw(frame, runs):
    """Bandwidth against working set where sizes are swept, a line per block size; the
    cases at one or two sizes as bars per block size."""
    bw = _metric(frame, "bandwidth")
    curve = swept(bw, "size")
    measured = "Read bandwidth (GB/s) of blocks visited in a random order, each once a pass"
    yield lines(bw[curve], "size", "bandwidth", xlabel="working set", logx=True, xsize=True,
                key="random-bandwidth-sweep", family="random_bw", measured=measured,
                title="Random-access bandwidth against working-set size")
    yield bars(bw[~curve], ("granularity",), "bandwidth", key="random-bandwidth",
               family="random_bw", title="Random-access bandwidth per block size",
               measured=measured)


def matrix(frame, runs):
    fv = fleet.view(frame)
    frame = fv.frame
    for metric in ("latency", "bandwidth"):
        sub = _metric(frame, metric)
        tables = []
        for label, g in sub.groupby("label", sort=False):
            cells = {(p["initiator"], p["target"]): v for p, v in zip(g["params"], g["median"])}
            rows = sorted({i for i, _ in cells})
            cols = sorted({t for _, t in cells})
            tables.append((label, rows, cols, cells))
        if tables:
            yield heatmaps(tables, unit=_unit(sub), key=f"matrix-{metric}", family="matrix",
                           title=f"Node matrix: {metric}", row_label="initiator node (CPUs)",
                           col_label="target node (memory)",
                           caption_text=caption(sub, f"{metric.capitalize()} from each node's "
                                                     "CPUs (rows) to memory bound to each "
                                                     "node (columns)",
                                                exclude=("initiator", "target"),
                                                shown="fleet-cells" if fv.labels else "cells",
                                                labels=fv.labels) +
                           (" " + fv.words if fv.words else ""))


def _ratio_share(row) -> float | None:
    """A case's % of pages on the first node (ratio 3:1 -> 75), the sweep's x."""
    m = re.fullmatch(r"(\d+):(\d+)", str(row["params"].get("ratio", "")))
    return int(m[1]) / (int(m[1]) + int(m[2])) * 100 if m else None


def interleave_sweep(frame, runs):
    for measure_, g in frame.groupby(frame["params"].map(lambda p: p.get("measure")), sort=False):
        metric = "bandwidth" if measure_ in ("read", "triad") else "latency"
        yield lines(g, _ratio_share, metric, xlabel="% of pages on the first node",
                    key=f"interleave-{measure_}", family="interleave_sweep", exclude=("ratio",),
                    title=f"Weighted interleave between two nodes: {measure_}",
                    measured=f"{measure_.capitalize()} {metric} at each weighted-interleave "
                             "ratio, from all pages on the second node (0 %) to all on the "
                             "first (100 %)")


PLOTTERS = {"bandwidth": bandwidth, "random_bw": random_bw, "matrix": matrix,
            "interleave_sweep": interleave_sweep}
