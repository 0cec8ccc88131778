"""Cross-node interference: what aggressor threads streaming to one node cost a victim
node, as a heat table per mix and metric (rows: victim and aggressors' nodes, columns:
aggressor threads), each cell its loss in %."""
from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd

from .. import fleet
from . import layout, words
from .draw import Figure, _metric, caption
from .params import QUIET, _moving, _params

# The victim's losses the table shows: (metric, what it is in words).
LOSSES = (("bandwidth_loss", "read bandwidth lost"), ("latency_loss", "latency added"))
# the table's own settings: the victim's node (mem, or mem.chain where it is set apart)
MATRIX = ("mem", "mem.chain", "page.chain", "mem.load", "threads", "mix")
CELL = 0.55             # inches a column of cells takes
ROW = 0.3               # inches a line of a row's label takes
COLOURBAR = 0.8         # inches a panel's colour bar takes, its label beside it


def _where(spec) -> str:
    """A placement as a table's row names it: '0' (one node: the axis says node), else in
    words ('interleaved over nodes 0-1')."""
    text = words.placement(spec)
    return text[len("on node "):] if text.startswith("on node ") else text


def _memory_nodes(runs) -> dict[str, int]:
    """Each run's count of nodes with memory, where its topology says."""
    out = {}
    for run in runs or ():
        nodes = run.meta.get("topology", {}).get("nodes", [])
        if nodes:
            out[run.label] = sum(1 for n in nodes if n.get("mem_total", 1))
    return out


def _row(label: str, victim, aggressor, prefix: bool, alone: bool) -> str:
    """A row's name: the run (several), the victim's node <- the aggressors', and where
    they are one node, so said."""
    name = f"{_where(victim)} ← {_where(aggressor)}"
    if str(victim) == str(aggressor):
        name += " (no second node)" if alone else " (same node)"
    return f"{label}:\n{name}" if prefix else name


def _column(raw, resolved) -> tuple[tuple, str]:
    """A column's order and name: the aggressors' count, every CPU's ('all') named so."""
    n = resolved if isinstance(resolved, int) else 0
    return (n, raw == "all"), (f"all ({n})" if raw == "all" and n else str(raw))


def _cell(v: float) -> str:
    return f"{v:.0f} %" if abs(v) >= 10 else f"{v:.1f} %"


def interference(frame, runs):
    """The victim's read bandwidth lost and latency added in %, a heat table per mix (and
    other setting): victim node <- aggressors' node by aggressor threads."""
    fv = fleet.view(frame)
    frame = fv.frame
    sub = frame[frame["metric"].isin([m for m, _ in LOSSES])].reset_index(drop=True)
    if sub.empty:
        return
    ps = _params(sub)
    raw = list(sub["params"])
    prefix = not fv.labels and sub["label"].nunique() > 1
    nodes = _memory_nodes(runs)
    rest = _moving(ps, QUIET | set(MATRIX))      # settings other than the table's
    tables: dict[tuple, dict] = {}      # (metric, mix words, rest words): {(row, col): v}
    rows_of, cols_of = {}, {}
    for r, p, given in zip(sub.itertuples(), ps, raw):
        victim = p.get("mem.chain") or p.get("mem")
        aggressor = p.get("mem.load") or victim
        row = _row(r.label, victim, aggressor, prefix, nodes.get(r.label) == 1)
        rank, col = _column(given.get("threads"), p.get("threads"))
        key = (r.metric, words.value("mix", p.get("mix")), words.setting(p, rest,
                                                                        "interference"))
        tables.setdefault(key, {})[(row, col)] = r.median
        rows_of.setdefault(key, {}).setdefault(row, None)
        cols_of.setdefault(key, {})[col] = rank
    order = {m: i for i, (m, _) in enumerate(LOSSES)}
    keys = sorted(tables, key=lambda k: order[k[0]])     # metric first, mixes as found
    said = dict(LOSSES)
    most_rows = max(len(rows_of[k]) for k in keys)
    lines = max(len(r.splitlines()) for k in keys for r in rows_of[k])
    label_width = max(len(line) for k in keys for r in rows_of[k] for line in r.splitlines())
    most_cols = max(len(cols_of[k]) for k in keys)
    width = label_width * layout.CHAR_WIDTH + 0.6 + CELL * most_cols + COLOURBAR
    # a row of panels per loss, where its mixes fit one: never more panels to a row
    across = max(sum(1 for k in keys if k[0] == m) for m, _ in LOSSES)
    least = layout.MAX_WIDTH / (across + 1) + 0.05
    table = ROW * lines * most_rows         # inches the cells take, down
    title = "Interference: the victim node's loss while aggressor threads stream to a node"
    grid = layout.grid(len(keys), max(width, least), title=title,
                       narrowest=max(width - 0.6, least),
                       panel_height=1.4 + max(table, 1.2))
    limit = {m: max([abs(v) for k, cells in tables.items() if k[0] == m
                     for v in cells.values() if np.isfinite(v)] or [1.0]) or 1.0
             for m, _ in LOSSES}
    cmap = matplotlib.colormaps["RdBu_r"]
    for ax, key in zip(grid.axes, keys):
        metric, mix, other = key
        rows = list(rows_of[key])
        cols = sorted(cols_of[key], key=cols_of[key].get)
        values = np.array([[tables[key].get((r, c), np.nan) for c in cols] for r in rows])
        lim = limit[metric]
        im = ax.imshow(values, cmap=cmap, vmin=-lim, vmax=lim, aspect="auto")
        for i in range(len(rows)):
            for j in range(len(cols)):
                v = values[i, j]
                if np.isfinite(v):
                    ax.text(j, i, _cell(v), ha="center", va="center", fontsize=9,
                            color="white" if abs(v) > 0.6 * lim else "black")
        ax.set_xticks(range(len(cols)))
        ax.set_xticklabels(cols)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows)
        ax.set_xlabel("aggressor threads")
        ax.set_ylabel("victim node ←\naggressor node" if table < 2.2 else
                      "victim node ← aggressor node")
        # over the cells alone (the rows' names take the panel's left): a line each
        grid.title(ax, "\n".join(filter(None, (f"{said[metric]} (%)", f"aggressors' {mix}",
                                                other))))
        grid.fig.colorbar(im, ax=ax, label="%", shrink=0.9)
    yield Figure("interference-matrix", "interference", title,
                 caption(sub, _measured(frame, nodes), exclude=MATRIX,
                         shown="fleet-cells" if fv.labels else "cells", labels=fv.labels) +
                 (" " + fv.words if fv.words else ""), layout.png(grid.fig))


def _measured(frame: pd.DataFrame, nodes: dict[str, int]) -> str:
    """What the table measured, the aggressors' bandwidth and, on one node, what that
    means."""
    text = ("What aggressor threads streaming to a node (the columns: how many) cost one "
            "victim thread on a node (the rows: victim node ← aggressor node): the "
            "victim's read bandwidth lost (% of its idle bandwidth, one pass over its "
            "buffer) and the latency its chase added (% over its idle mean), each against "
            "its own idle figure measured moments apart in the same repetition; below 0: "
            "faster beside the aggressors than alone (noise, or a boost)")
    agg = _metric(frame, "aggressor_bandwidth")["median"]
    if len(agg):
        text += (f". The aggressors drew {agg.min():.3g} to {agg.max():.3g} GB/s"
                 if agg.min() != agg.max() else f". The aggressors drew {agg.min():.3g} GB/s")
    if nodes and all(n == 1 for n in nodes.values()):
        text += (". One memory node: no second node for the aggressors, who share the "
                 "victim's node")
    return text


PLOTTERS = {"interference": interference}
