"""Idle latency against working set (chase) and latency under load (loaded_latency); the
latency distribution of the cases timed in batches (dist), idle and under load, per node."""
from __future__ import annotations

from dataclasses import dataclass

import matplotlib
import numpy as np
import pandas as pd

from .. import fleet
from . import layout, words
from .draw import Figure, _metric, bars, caption, colours, label, lines
from .params import QUIET, _moving, _params, swept

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
    yield distribution(frame, "chase", key="chase-distribution",
                       title="Idle latency distribution per memory node (timed batches)",
                       measured="The share of the chase's timed batches slower than each "
                                "latency (1 − q, log scales: the tail shows), idle")


# Exceedances a distribution's figure marks, and the percentile each is.
TAILS = ((1e-2, "p99"), (1e-3, "p99.9"), (1e-4, "p99.99"))
# An idle loaded_latency case's settings of the load it does not run.
LOAD_ONLY = {"mix", "threads", "load_size", "mem.load", "page.load"}
IDLE = ("black", "dimgray", "darkgray")     # the idle curves' colours, the first alone
# Each run's line style where a few runs share a panel (fleet.FLEET of them at most).
RUN_STYLES = ("-", "--", ":", "-.", (0, (6, 2, 1, 2, 1, 2)), (0, (1, 4)))


@dataclass
class _Curve:
    panel: str              # its panel's title: the node
    run: str                # its run's label, where a few runs share the panels; else ''
    name: str               # its legend's
    idle: bool
    exceed: np.ndarray      # 1 - q
    ns: np.ndarray          # each quantile (a fleet's: the runs' median)
    low: np.ndarray | None  # a fleet's: the runs' range at each quantile
    high: np.ndarray | None


def _quantiles(info) -> tuple[np.ndarray, np.ndarray] | None:
    """A case's pooled quantiles (info["cdf"]: q and ns), or None where it kept none."""
    cdf = info.get("cdf") if isinstance(info, dict) else None
    try:
        q, ns = np.asarray(cdf["q"], float), np.asarray(cdf["ns"], float)
    except (KeyError, TypeError, ValueError):
        return None
    return (q, ns) if q.ndim == 1 and len(q) and q.shape == ns.shape else None


def _pick(family: str, ps: list[dict]) -> list[tuple[int, str, bool]]:
    """The rows a node's distribution figure draws, each with its legend name and whether
    it is idle: a chase's every case; loaded latency's idle cases and, of each load's
    settings but its delay (each mix), the hardest load measured (the least delay)."""
    quiet = QUIET | {"mem", "delay", "dist"}
    if family != "loaded_latency":
        keys = _moving(ps, quiet)
        return [(i, words.setting(p, keys, family), True) for i, p in enumerate(ps)]
    idle = [i for i, p in enumerate(ps) if p.get("delay") == "idle"]
    hardest: dict[str, int] = {}
    for i, p in enumerate(ps):
        d = p.get("delay")
        if d == "idle" or not isinstance(d, (int, float)):
            continue
        rest = repr(sorted((k, repr(v)) for k, v in p.items() if k != "delay"))
        if rest not in hardest or d < ps[hardest[rest]]["delay"]:
            hardest[rest] = i
    loaded = sorted(hardest.values())
    calm = _moving([ps[i] for i in idle], quiet | LOAD_ONLY)
    busy = _moving([ps[i] for i in loaded], quiet)
    return [(i, ", ".join(filter(None, (words.value("delay", "idle"),
                                        words.setting(ps[i], calm, family)))), True)
            for i in idle] + \
        [(i, ", ".join(filter(None, (words.setting(ps[i], busy, family),
                                     words.value("delay", ps[i]["delay"])))), False)
         for i in loaded]


def _curves(lat: pd.DataFrame, family: str) -> tuple[list[_Curve], pd.DataFrame, list]:
    """The distributions among a family's latency rows: a panel per node, the curves
    _pick chooses in it (each run's, where there are a few runs); for a fleet, the runs'
    median quantiles and their range. Also the rows drawn (a fleet's: one run's each) and
    their infos (a fleet's: every run's)."""
    lat = lat[[_quantiles(i) is not None for i in lat["info"]]].reset_index(drop=True)
    if lat.empty:
        return [], lat, []
    many = fleet.many(lat)
    points = [list(g.index) for _, g in lat.groupby(fleet.point_key(lat), sort=False)] \
        if many else [[i] for i in lat.index]
    rep = lat.loc[[at[0] for at in points]].reset_index(drop=True)
    multi = not many and rep["label"].nunique() > 1
    ps = _params(rep)
    panels: dict[tuple, list[int]] = {}
    for i, p in enumerate(ps):
        panels.setdefault((rep["label"].iloc[i] if multi else "", str(p.get("mem"))),
                          []).append(i)
    curves, drawn, infos = [], [], []
    for (run, mem), at in panels.items():
        title = words.value("mem", mem, family)
        for j, name, idle in _pick(family, [ps[i] for i in at]):
            i = at[j]
            runs_ = [_quantiles(lat.at[k, "info"]) for k in points[i]]
            q = runs_[0][0]
            for other, _ in runs_[1:]:          # the quantiles every run kept
                q = np.intersect1d(q, other)
            ns = np.array([v[np.isin(qq, q)] for qq, v in runs_])
            curves.append(_Curve(title, run, name, idle, 1 - q, np.median(ns, axis=0),
                                 ns.min(axis=0) if many else None,
                                 ns.max(axis=0) if many else None))
            drawn.append(i)
            infos += [lat.at[k, "info"] for k in points[i]]
    return curves, rep.iloc[drawn], infos


def _samples_text(infos: list[dict], params: list[dict]) -> str:
    """What a distribution's samples are: batches of how many loads, how many a case, and
    the repetitions they pool."""
    batch = sorted({int(i["batch"]) for i in infos if i.get("batch")} or
                   {int(p["batch"]) for p in params if p.get("batch")})
    n = sorted({int(i["cdf"].get("samples", 0)) for i in infos})
    per_rep = {int(i["batches"]) for i in infos if i.get("batches")}
    reps = {s // b for s in n for b in per_rep} if len(per_rep) == 1 else set()
    runs = {int(p.get("warmup", 0)) + int(p.get("repeat", 0)) for p in params}
    warm = any(int(p.get("warmup", 0)) for p in params)

    def span(v: list[int]) -> str:
        return f"{v[0]:,}" if len(v) == 1 else f"{v[0]:,} to {v[-1]:,}"
    loads = f"{span(batch)} dependent loads" if batch else "dependent loads"
    text = (f"each sample is a batch of {loads} timed together (its time divided by its "
            f"loads), {span(n)} batches a case")
    if len(reps) == 1:
        r = reps.pop()
        text += f", the batches of its {r} repetitions pooled" + \
            (" (the warm-up's among them)" if {r} == runs and warm else "")
    return text


def _log_ticks(axis) -> None:
    """A log axis's ticks as plain numbers (150, 0.001); within a decade, where fewer
    than 3 decades show, the minor ticks at 2 and 5 named too (not every one, which
    would overlap)."""
    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    lo, hi = sorted(axis.get_view_interval())
    few = lo > 0 and np.log10(hi / lo) < 3

    def minor(v, _):
        lead = round(v / 10 ** np.floor(np.log10(v)), 6) if v > 0 else 0
        return f"{v:g}" if few and lead in (2, 5) else ""
    axis.set_minor_formatter(matplotlib.ticker.FuncFormatter(minor))


def distribution(frame: pd.DataFrame, family: str, *, key: str, title: str,
                 measured: str) -> Figure | None:
    """The latency distribution of the cases timed in batches, per node: the share of
    batches slower than each latency (1 - q) on a log axis, so the tail shows down to
    where 100 batches still decide it; a line per case _pick chooses."""
    lat = _metric(frame, "latency")
    curves, rows, infos = _curves(lat, family)
    if not curves:
        return None
    fleet_labels = sorted(set(lat["label"])) if fleet.many(lat) else None
    titles = list(dict.fromkeys(c.panel for c in curves))
    runs = list(dict.fromkeys(c.run for c in curves if c.run))
    names = [list(dict.fromkeys(c.name for c in curves if c.panel == t)) + runs
             for t in titles]
    grid = layout.grid(len(titles), 5.4, names, title=title, narrowest=3.8,
                       panel_height=3.8)
    busy = list(dict.fromkeys(c.name for c in curves if not c.idle))
    calm = list(dict.fromkeys(c.name for c in curves if c.idle))
    colour = colours(busy if busy else calm)
    if busy:        # idle in black and greys beside the loads' colours
        colour.update({n: IDLE[min(i, len(IDLE) - 1)] for i, n in enumerate(calm)})
    # a run's curves in its line style; else idle dashed beside the loads
    style = {r: RUN_STYLES[i % len(RUN_STYLES)] for i, r in enumerate(runs)}
    lowest = min(float(c.exceed.min()) for c in curves)
    for ax, panel in zip(grid.axes, titles):
        for c in (c for c in curves if c.panel == panel):
            line, = ax.plot(c.ns, c.exceed, marker="o", markersize=3, linewidth=1.5,
                            color=colour[c.name], label=label(c.name) if not runs else
                            "_nolegend_", linestyle=style[c.run] if runs else
                            "--" if c.idle and busy else "-")
            if c.low is not None:
                ax.fill_betweenx(c.exceed, c.low, c.high, color=line.get_color(), alpha=0.2)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(lowest / 2, 1.3)
        for at, name in TAILS:
            if at >= lowest:
                ax.axhline(at, color="grey", linestyle=":", linewidth=1)
                ax.annotate(name, (0.01, at), xycoords=("axes fraction", "data"),
                            fontsize=9, color="grey", ha="left", va="bottom")
        _log_ticks(ax.xaxis)
        _log_ticks(ax.yaxis)
        ax.set_xlabel("latency per load (ns)")
        ax.set_ylabel("share of batches slower (1 − q)")
        grid.title(ax, panel)
        ax.grid(True, which="major", alpha=0.4)
        ax.grid(True, which="minor", alpha=0.15)
    if runs:            # the legend: a colour per curve, a line style per run
        for name in dict.fromkeys(c.name for c in curves):
            grid.axes[0].plot([], [], color=colour[name], marker="o", markersize=3,
                              label=label(name))
        for r in runs:
            grid.axes[0].plot([], [], color="grey", linestyle=style[r], label=r)
    grid.legend()
    text = (f"{measured}; {_samples_text(infos, _params(rows))}. A quantile is drawn only "
            "where 100 batches or more lie beyond it (dotted: p99, p99.9, p99.99)")
    if runs:
        text += ". A line style per run"
    if fleet_labels:
        text += (f". Lines: the median over the {len(fleet_labels)} runs of each quantile, "
                 "bands: their range")
    return Figure(key, family, title,
                  caption(rows, text, exclude=("mem", "delay", "mix", "threads", "dist"),
                          shown="pooled", labels=fleet_labels), layout.png(grid.fig))


def loaded_latency(frame, runs):
    """Chase latency against the bandwidth the generators drew at each delay, a line per
    mix and placement (threads is the generators' count, "all" for every point of a
    sweep, though the idle point runs none); then, of the cases timed in batches, the
    latency distribution idle and under each mix's hardest load."""
    raw, fv = frame, fleet.view(frame)
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
    yield distribution(raw, "loaded_latency", key="latency-distribution",
                       title="Latency distribution per memory node: idle and under the "
                             "hardest load of each kind",
                       measured="The share of the chase's timed batches slower than each "
                                "latency (1 − q, log scales: the tail shows), idle (black) "
                                "and beside the generators at the hardest load measured of "
                                "each mix (the least pause; every load's mean is in the "
                                "figure above)")


PLOTTERS = {"chase": chase, "loaded_latency": loaded_latency}
