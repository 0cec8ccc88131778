"""Page-migration throughput per batch, and the touches a second CPU sees meanwhile."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ...units import format_size
from .draw import Figure, _metric, _png, bars, lines


def _batch_pages(p, info) -> float | None:
    return p.get("batch") or info.get("pages")


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
               measured="The longest single touch (us) a second CPU saw while the pages it "
                        "touched were being migrated")
    sub = _metric(frame, "touch_max")
    if sub.empty:
        return
    worst = sub.loc[sub["median"].idxmax()]
    line = worst["info"].get("timeline")
    if not line:
        return
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    ax.step(line["t_us"], np.maximum(line["max_ns"], 1), where="post", linewidth=1)
    ax.axvspan(line["move_start_us"], line["move_end_us"], alpha=0.2, color="orange",
               label="the move")
    ax.set_yscale("log")
    ax.set_xlabel("time since the toucher began (us)")
    ax.set_ylabel("worst touch in the bin (ns)")
    p = worst["params"]
    title = f"Touch latency through one move ({worst['label']} {worst['case']})"
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    yield Figure("migration-timeline", "migrate_touch", title,
                 f"The worst touch in each of {len(line['t_us'])} time bins during the last "
                 f"repetition of case {worst['case']} (method={p.get('method')}, "
                 f"batch={p.get('batch')}, access={p.get('access')}, "
                 f"{format_size(int(p.get('size', 0)))} from node {p.get('from')} to node "
                 f"{p.get('to')}); the shaded span is the move.", _png(fig))


PLOTTERS = {"migrate": migrate, "migrate_touch": migrate_touch}
