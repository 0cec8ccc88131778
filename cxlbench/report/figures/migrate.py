"""Page-migration throughput per batch, and the touches a second CPU sees meanwhile."""
from __future__ import annotations

import numpy as np

from . import layout, words
from .draw import Figure, _metric, bars, lines


def _batch_pages(row) -> float | None:
    """Pages a call: the batch, or the whole buffer's pages where batch is 0."""
    return row["params"].get("batch") or row["info"].get("pages")


def migrate(frame, runs):
    yield lines(frame, _batch_pages, "bandwidth", xlabel="pages per call (the last point: "
                "the whole buffer in one call)", logx=True, logy=True, exclude=("batch",),
                key="migration", family="migrate", title="Page-migration throughput per batch",
                measured="Bytes migrated per second (GB/s) by move_pages(2) or "
                         "mbind(MPOL_MF_MOVE), each move checked (every page on the "
                         "destination, the data unchanged)")


def migrate_touch(frame, runs):
    yield bars(frame, ("batch",), "touch_max", key="migration-spike", family="migrate_touch",
               logy=True, title="Worst touch while pages migrate",
               measured="The longest single touch (µs) a second CPU saw while the pages it "
                        "touched were being migrated")
    sub = _metric(frame, "touch_max")
    if sub.empty:
        return
    worst = sub.loc[sub["median"].idxmax()]
    line = worst["info"].get("timeline")
    if not line:
        return
    p = worst["params"]
    title = f"Touch latency through one move ({worst['label']} {worst['case']})"
    grid = layout.grid(1, 7.5, [["the move"]], title=title)
    ax = grid.axes[0]
    ax.step(line["t_us"], np.maximum(line["max_ns"], 1), where="post", linewidth=1)
    ax.axvspan(line["move_start_us"], line["move_end_us"], alpha=0.2, color="orange",
               label="the move")
    ax.set_yscale("log")
    ax.set_xlabel("time since the toucher began (µs)")
    ax.set_ylabel("worst touch in the bin (ns)")
    grid.legend()
    yield Figure("migration-timeline", "migrate_touch", title,
                 f"The worst touch in each of {len(line['t_us'])} time bins during the last "
                 f"repetition of case {worst['case']} (method={p.get('method')}, "
                 f"batch={p.get('batch')}, access={p.get('access')}, "
                 f"{words.size(p.get('size', 0))} from node {p.get('from')} to node "
                 f"{p.get('to')}); the shaded span is the move.", layout.png(grid.fig))


PLOTTERS = {"migrate": migrate, "migrate_touch": migrate_touch}
