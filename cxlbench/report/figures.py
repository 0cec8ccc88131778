"""The report's figures: one plotter per benchmark family, each taking that family's rows of
the summary frame and giving figures with captions that say what was measured and how.
A family without a plotter of its own gets bars of its first metric, so a new benchmark
shows up in reports before anyone writes a plot for it."""
from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")   # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .. import analysis, benchmarks  # noqa: E402
from . import fleet  # noqa: E402
from .text import printable  # noqa: E402
from ..options import split_buffer_option  # noqa: E402
from ..paramtext import NOT_MEASURED, params_text, resolved, value_text  # noqa: E402
from ..units import format_size, parse_list  # noqa: E402

# Parameters a caption never lists as fixed (they are in the legend, on an axis, or noise).
QUIET = set(NOT_MEASURED) | {"cpus"}


@dataclass
class Figure:
    key: str            # file stem, unique within a report
    family: str         # the benchmark
    title: str
    caption: str
    png: bytes


# ---- shared helpers -------------------------------------------------------------------

def _params(frame: pd.DataFrame) -> list[dict]:
    """Each row's parameters, with threads="all" resolved to the CPUs it ran on, a
    buffer's mem.<buffer> or page.<buffer> that some rows set filled in on the others
    with the case's mem or page (what that buffer had), and the options the case ignores
    left out."""
    ps = [resolved(p, cpus) for p, cpus in zip(frame["params"], frame["cpus_used"])]
    own = {k: split[0] for p in ps for k in p if (split := split_buffer_option(k))}
    ps = [{**{k: p.get(base) for k, base in own.items()}, **p} for p in ps]
    families = frame["benchmark"] if "benchmark" in frame else [None] * len(ps)
    return [{k: v for k, v in p.items() if k not in _ignored(name, p)}
            for name, p in zip(families, ps)]


def _ignored(family: str, params: dict) -> dict:
    """The options a case ignores (a preset's own tables, another operation's knobs): a
    caption or legend naming them would say something untrue of the case."""
    bench = benchmarks.family(family) if family else None
    if bench is None:
        return {}
    try:        # a run made before an option existed lacks it: its default stands in
        return bench.ignored({**{k: o.default for k, o in bench.options.items()}, **params})
    except (KeyError, TypeError, ValueError):
        return {}


def _moving(ps: list[dict], exclude=()) -> list[str]:
    """The names whose value differs between the rows that have them: a row without one
    (a case that ignores the option) neither varies it nor fixes it."""
    names = sorted({k for p in ps for k in p} - set(exclude))
    return [k for k in names if len({repr(p[k]) for p in ps if k in p}) > 1]


def varying(frame: pd.DataFrame, exclude=()) -> list[str]:
    """Parameters whose value differs between the rows (the legend), in a stable order."""
    return _moving(_params(frame), QUIET | set(exclude))


def fixed(frame: pd.DataFrame, exclude=()) -> dict:
    ps = _params(frame)
    names = sorted({k for p in ps for k in p} - QUIET - set(exclude))
    moving = set(_moving(ps))
    return {k: next(p[k] for p in ps if k in p) for k in names if k not in moving}


def series_names(frame: pd.DataFrame, exclude=(), runs: bool = True) -> list[str]:
    """A legend entry per row: the run's label where several runs are shown (and `runs`),
    then the values of the parameters that vary."""
    keys = varying(frame, exclude)
    multi = runs and frame["label"].nunique() > 1
    out = []
    for label, p in zip(frame["label"], _params(frame)):
        own = [k for k in keys if k in p]
        out.append(" ".join(([label] if multi else []) + ([params_text(p, own)] if own else []))
                   or "all")
    return out


# What a fleet view's marks are (a figure of many runs: see fleet.py).
FLEET_SHOWN = {
    "fleet-band": "lines: the median of the runs' medians at each point, bands: their range",
    "fleet-box": "boxes: the runs' medians (quartiles, whiskers to 1.5 interquartile "
                 "ranges), a dot per run",
    "fleet-range": "points: the median of the runs' medians, whiskers: their range (not a "
                   "confidence interval)",
    "fleet-cells": "cells hold the median of the runs' medians"}


def caption(frame: pd.DataFrame, measured: str, exclude=(), shown="whiskers",
            labels=None) -> str:
    """What was measured, the parameters every shown case shared, the repetitions, and
    what the points and whiskers are (shown: one of FLEET_SHOWN for a fleet view, whose
    runs are `labels` where the frame holds only their fleet's rows)."""
    f = fixed(frame, exclude)
    settings = ", ".join(f"{k}={value_text(k, v)}" for k, v in f.items())
    n_lo, n_hi = int(frame["n"].min()), int(frame["n"].max())
    reps = f"n={n_lo}" if n_lo == n_hi else f"n={n_lo}-{n_hi}"
    warm = {p.get("warmup") for p in frame["params"]}
    warm_text = f" after {warm.pop()} warm-up" if len(warm) == 1 else ""
    failed = int((~frame["placement_ok"].astype(bool)).sum())
    placed = ("placement verified on every case (move_pages after the case)" if not failed
              else f"placement check FAILED on {failed} rows")
    runs = fleet.runs_text(list(frame["label"]) if labels is None else labels)
    if shown in FLEET_SHOWN:
        text = (f"{measured}. Each run's value is the median of its {reps} repetitions"
                f"{warm_text}; {FLEET_SHOWN[shown]}. ")
    else:
        ci = {"whiskers": "whiskers: the 95 % distribution-free confidence interval of the "
                          "median", "cells": "cells hold medians", "none": ""}[shown]
        text = (f"{measured}. Each value is the median of {reps} repetitions{warm_text}"
                f"{'; ' + ci if ci else ''}. ")
    if settings:
        text += f"Fixed: {settings}. "
    legend = varying(frame, exclude)
    if legend:
        text += f"Varied: {', '.join(legend)}. "
    return text + f"{placed[0].upper() + placed[1:]}. Runs: {runs}."


def _legend(ax, names: list[str]) -> None:
    """A legend only where there is more than one series; beside the plot when long."""
    if names in ([], ["all"]):
        return
    if len(names) > 6:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(fontsize=7, loc="best")


def _png(fig) -> bytes:
    # Labels and titles may hold a path's or a name's undecodable bytes, which the font
    # code refuses: drawn as \xNN instead. Tick labels given as text are drawn afresh from
    # their formatter (a FuncFormatter, or a FixedFormatter before matplotlib 3.5), so its
    # texts are made printable too.
    for t in fig.findobj(matplotlib.text.Text):
        t.set_text(printable(t.get_text()))
    for axis in (a for ax in fig.axes for a in (ax.xaxis, ax.yaxis)):
        f = axis.get_major_formatter()
        if isinstance(f, matplotlib.ticker.FixedFormatter):
            f.seq = [printable(str(s)) for s in f.seq]
        elif isinstance(f, matplotlib.ticker.FuncFormatter):
            f.func = lambda x, pos=None, g=f.func: printable(str(g(x, pos)))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _metric(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    return frame[frame["metric"] == metric].reset_index(drop=True)


def _unit(frame: pd.DataFrame) -> str:
    return str(frame["unit"].iloc[0]) if len(frame) else ""


def _errors(sub: pd.DataFrame) -> np.ndarray:
    med = sub["median"].to_numpy(float)
    return np.vstack([np.clip(med - sub["ci_low"].to_numpy(float), 0, None),
                      np.clip(sub["ci_high"].to_numpy(float) - med, 0, None)])


def lines(frame: pd.DataFrame, x, metric: str, *, xlabel: str, title: str, measured: str,
          key: str, family: str, logx=False, logy=False, xsize=False, marks=(),
          exclude=()) -> Figure | None:
    """Median against x (a parameter name, or a function of a row's params and info), one
    line per series, CI whiskers; for many runs, the fleet's (see _fleet_lines)."""
    sub = _metric(frame, metric)
    if sub.empty:
        return None
    if isinstance(x, str):
        exclude = (*exclude, x)
        xs = [p.get(x) for p in sub["params"]]
    else:
        xs = [x(p, info) for p, info in zip(sub["params"], sub["info"])]
    many = fleet.many(sub)
    sub = sub.assign(_x=xs, _series=series_names(sub, exclude=exclude, runs=not many))
    sub = sub[sub["_x"].notna()]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    if many:
        legend, extra = _fleet_lines(ax, sub)
    else:
        legend, extra = list(dict.fromkeys(sub["_series"])), ""
        for name, g in sub.groupby("_series", sort=False):
            g = g.sort_values("_x")
            ax.errorbar(g["_x"].astype(float), g["median"], yerr=_errors(g), marker="o",
                        markersize=3, capsize=2, label=name)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    if xsize:
        ticks = sorted(set(sub["_x"].astype(float)))
        step = max(1, len(ticks) // 10)
        ax.set_xticks(ticks[::step])
        ax.set_xticklabels([format_size(int(t)) for t in ticks[::step]], rotation=45)
    for at, text in marks:
        ax.axvline(at, color="grey", linestyle=":", linewidth=1)
        ax.annotate(text, (at, 1), xycoords=("data", "axes fraction"), fontsize=8,
                    ha="right", va="top", rotation=90, color="grey")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"{metric} ({_unit(sub)})")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax, legend)
    shown = "fleet-band" if many else "whiskers"
    return Figure(key, family, title, caption(sub, measured, exclude=exclude, shown=shown) +
                  extra, _png(fig))


def _fleet_lines(ax, sub: pd.DataFrame) -> tuple[list[str], str]:
    """Many runs as each series' fleet median (a line) and range (a band), and the runs
    off the fleet drawn alone (dashed, named). The legend's names and the caption's
    addition."""
    legend = []
    for name, g in sub.groupby("_series", sort=False):
        by_x = g.groupby("_x")["median"]
        xs = sorted(by_x.groups)
        line, = ax.plot(xs, by_x.median().loc[xs], marker="o", markersize=3,
                        label=f"{name} (fleet median)" if name != "all" else "fleet median")
        ax.fill_between(xs, by_x.min().loc[xs], by_x.max().loc[xs], alpha=0.2,
                        color=line.get_color())
        legend.append(line.get_label())
    outliers = fleet.off(sub, ["_series", "_x"])
    for label in list(dict.fromkeys(outliers["label"]))[:5]:
        for name, g in sub[sub["label"] == label].groupby("_series", sort=False):
            g = g.sort_values("_x")
            text = label if name == "all" else f"{label} {name}"
            ax.plot(g["_x"].astype(float), g["median"], linestyle="--", linewidth=1,
                    label=text)
            legend.append(text)
    dashed = " Dashed: runs off the fleet." if len(outliers) else ""
    return legend, (dashed + " " + fleet.named(outliers)).rstrip()


def bars(frame: pd.DataFrame, groups, metric: str, *, title: str, measured: str, key: str,
         family: str, logy=False, exclude=()) -> Figure | None:
    """Grouped bars: one group per value of `groups` (parameter names), one bar per series;
    for many runs, a box of their medians per series (see _fleet_boxes)."""
    sub = _metric(frame, metric)
    if sub.empty:
        return None
    ps = _params(sub)
    group_of = [" ".join(value_text(g, p[g]) if len(groups) == 1
                         else f"{g}={value_text(g, p[g])}" for g in groups if g in p) or "-"
                for p in ps]        # a group option the case ignores is not in its name
    many = fleet.many(sub)
    sub = sub.assign(_group=group_of,
                     _series=series_names(sub, exclude=(*groups, *exclude), runs=not many))
    order = list(dict.fromkeys(group_of))
    names = list(dict.fromkeys(sub["_series"]))
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(order) * len(names) + 2), 4.2))
    extra = ""
    for i, name in enumerate(names):
        g = sub[sub["_series"] == name]
        offset = (i - (len(names) - 1) / 2) * width
        if many:
            _fleet_boxes(ax, g, order, offset, width, name, f"C{i % 10}")
        else:
            at = [order.index(v) + offset for v in g["_group"]]
            ax.bar(at, g["median"], width, yerr=_errors(g), capsize=2, label=name)
    if many:
        extra = (" Runs off the fleet are named beside their dots. " +
                 fleet.named(fleet.off(sub, ["_group", "_series"]))).rstrip()
    ax.set_xticks(range(len(order)))
    crowded = len(order) > 4 or sum(len(v) for v in order) > 40
    ax.set_xticklabels(order, rotation=30 if crowded else 0, ha="right" if crowded else "center")
    ax.set_xlabel(groups[0] if len(groups) == 1 else "")
    ax.set_ylabel(f"{metric} ({_unit(sub)})")
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    _legend(ax, names)
    return Figure(key, family, title,
                  caption(sub, measured, exclude=(*groups, *exclude),
                          shown="fleet-box" if many else "whiskers") + extra, _png(fig))


def _fleet_boxes(ax, g: pd.DataFrame, order: list, offset: float, width: float,
                 name: str, color: str) -> None:
    """One series of many runs: a box of the runs' medians at each group, a dot per run,
    and the runs off the fleet named beside their dots."""
    groups = [v for v in order if (g["_group"] == v).any()]
    at = [order.index(v) + offset for v in groups]
    values = [g.loc[g["_group"] == v, "median"].to_numpy(float) for v in groups]
    ax.boxplot(values, positions=at, widths=width * 0.8, showfliers=False, patch_artist=True,
               boxprops={"facecolor": color, "alpha": 0.35}, medianprops={"color": color})
    for x, v in zip(at, values):
        ax.scatter(np.full(len(v), x) + np.linspace(-0.3, 0.3, len(v)) * width, v, s=4,
                   color=color, zorder=3)
    ax.scatter([], [], color=color, label=name)      # the legend's entry
    for group, runs in fleet.off(g, ["_group"]).groupby("_group", sort=False):
        # runs within 3 % of each other named in one label, which would otherwise overlap
        notes: list[list] = []
        for _, r in runs.sort_values("median").iterrows():
            if notes and r["median"] <= notes[-1][0] * 1.03:
                notes[-1][1].append(r["label"])
            else:
                notes.append([r["median"], [r["label"]]])
        for y, names in notes:
            ax.annotate(", ".join(names), (order.index(group) + offset, y), fontsize=6,
                        xytext=(4, 0), textcoords="offset points", va="center")


def heatmaps(tables: list[tuple[str, list, list, dict]], *, unit: str, title: str,
             caption_text: str, key: str, family: str, row_label: str,
             col_label: str) -> Figure | None:
    """One annotated heatmap per (subtitle, rows, cols, {(row, col): value})."""
    if not tables:
        return None
    fig, axes = plt.subplots(1, len(tables), figsize=(4.4 * len(tables) + 0.5, 3.6),
                             squeeze=False, constrained_layout=True)
    for ax, (sub, rows, cols, cells) in zip(axes[0], tables):
        grid = np.array([[cells.get((r, c), np.nan) for c in cols] for r in rows], float)
        im = ax.imshow(grid, cmap="viridis")
        for i in range(len(rows)):
            for j in range(len(cols)):
                if not math.isnan(grid[i, j]):
                    ax.text(j, i, f"{grid[i, j]:.3g}", ha="center", va="center", fontsize=8,
                            color="white")
        ax.set_xticks(range(len(cols)))
        ax.set_xticklabels(cols)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows)
        ax.set_xlabel(col_label)
        ax.set_ylabel(row_label)
        ax.set_title(sub, fontsize=9)
        fig.colorbar(im, ax=ax, label=unit, shrink=0.8)
    fig.suptitle(title)
    return Figure(key, family, title, caption_text, _png(fig))


# ---- the families ---------------------------------------------------------------------

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


def bandwidth(frame, runs):
    yield bars(frame, ("kernel", "threads"), "bandwidth", key="bandwidth", family="bandwidth",
               title="Bandwidth per kernel and thread count",
               measured="Application bandwidth (bytes the kernel reads and writes, GB/s) of "
                        "each streaming kernel on pinned threads released together")


def random_bw(frame, runs):
    yield bars(frame, ("granularity",), "bandwidth", key="random-bandwidth", family="random_bw",
               title="Random-access bandwidth per block size",
               measured="Read bandwidth (GB/s) of blocks visited in a random order, each once a "
                        "pass")


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


def _ratio_share(p, info) -> float | None:
    m = re.fullmatch(r"(\d+):(\d+)", str(p.get("ratio", "")))
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
        tables.append((f"{prefix}{mem} {mode}", cpus_, cpus_, cells))
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


def flush(frame, runs):
    yield bars(frame, ("flush", "state"), "latency", key="flush", family="flush",
               title="Flush and write-back cost per line",
               measured="Time per 64-byte line (ns) to flush (or write and flush) a range, "
                        "one sfence at the end; instructions this CPU lacks are left out "
                        "(unsupported, not replaced)")


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


def embedding(frame, runs):
    skew = ("dist", "alpha")
    yield bars(frame, skew, "lookups", key="embedding-lookups", family="embedding",
               title="Embedding-bag lookups per skew and placement",
               measured="Lookups per second (millions) of embedding bags pooled on pinned "
                        "threads, rows gathered from the stacked tables")
    yield bars(frame, skew, "bag_p99", key="embedding-bag-p99", family="embedding",
               title="Embedding-bag latency, 99th percentile",
               measured="The 99th percentile of single bags' time (us), timed in C on about "
                        "1024 bags of each repetition")


def optimizer(frame, runs):
    kind = ("optim", "precision")
    yield bars(frame, kind, "params", key="optimizer-params", family="optimizer",
               title="Optimizer step: parameters per second per placement",
               measured="Parameters (millions) a fused Adam/AdamW step updates per second, "
                        "on pinned threads")
    yield bars(frame, kind, "of_triad", key="optimizer-of-triad", family="optimizer",
               title="Optimizer step against the triad bound",
               measured="The step's memory traffic per second over the STREAM triad's on the "
                        "same buffers, timed in the same repetition (1: the step streams as "
                        "fast as the triad)")


def _as_metric(frame: pd.DataFrame, metric: str, name: str, **params) -> pd.DataFrame:
    """The rows of `metric` as rows of `name`, with `params` added to each row's."""
    sub = _metric(frame, metric)
    return sub.assign(metric=name, params=[{**p, **params} for p in sub["params"]])


def checkpoint(frame, runs):
    ps = _params(frame)
    where = ("mem.dst",) if any("mem.dst" in p for p in ps) else ("mem",)
    quiet = frame[[p.get("interfere", "none") == "none" for p in frame["params"]]]
    yield bars(quiet if len(quiet) else frame, where, "bandwidth", key="checkpoint-bandwidth",
               family="checkpoint",
               title="Checkpoint snapshot GB/s per destination",
               measured="Snapshot bytes per second (GB/s) copied from src to dst in chunks "
                        "(each byte read once and written once), alone on the machine")
    busy = frame[[p.get("interfere", "none") != "none" for p in frame["params"]]]
    if busy.empty:
        return
    both = pd.concat([_as_metric(busy, "bandwidth", "bandwidth", snapshot="alone"),
                      _as_metric(busy, "bandwidth_shared", "bandwidth",
                                 snapshot="beside the step")], ignore_index=True)
    yield bars(both, where, "bandwidth", key="checkpoint-interference", family="checkpoint",
               title="Checkpoint GB/s with and without a training step beside it",
               measured="Snapshot GB/s alone and while a training-like step (interfere) runs "
                        "on the other CPUs, both timed in the same repetition")
    slow = pd.concat([_as_metric(busy, "step_slowdown", "slowdown", lost="the step"),
                      _as_metric(busy, "snapshot_slowdown", "slowdown", lost="the snapshot")],
                     ignore_index=True)
    yield bars(slow, where, "slowdown", key="checkpoint-slowdown", family="checkpoint",
               title="What the training step and the snapshot lose to each other",
               measured="Time under interference over time alone (x): the step's mean step "
                        "time during the snapshot, and the snapshot's time, each against "
                        "its own run alone in the same repetition")


def kvcache(frame, runs):
    """Decode-step latency against sequence length, a line per placement; the copies
    (swaps, restores) and prefill as bars of bandwidth."""
    op = frame["params"].map(lambda p: p.get("op", "decode"))
    yield lines(frame[op == "decode"], "seq_len", "step_p50", logx=True, logy=True,
                xlabel="tokens per sequence before the step", key="kvcache-decode-step",
                family="kvcache", exclude=("op",),
                title="KV-cache decode step against sequence length",
                measured="Time of one decode step (us, the median step of a repetition, "
                         "timed in C): a token appended to each sequence of the batch, then "
                         "every block of each read, all layers, K and V")
    yield bars(frame[op != "decode"], ("op", "copy"), "bandwidth", key="kvcache-copies",
               family="kvcache", title="KV-cache prefill, swaps and prefix restores",
               measured="Bandwidth (GB/s: bytes copied, each once; for prefill, bytes "
                        "written) of prompts written, whole sequences swapped between cache "
                        "and offload, and 256-token chunks restored, one memcpy per block or "
                        "runs of blocks batched")


def _tiering_scenarios(frame: pd.DataFrame, runs) -> list[tuple[str, dict]]:
    """analysis.tiering's scenarios of each run in the frame, with the run's label; a
    case that failed keeps its repetitions in the results, not in the scenarios."""
    status = {(r.label, case): e.get("status") for r in runs for case, e in r.journal.items()}
    out = []
    for label, g in frame.groupby("label", sort=False):
        records = [{"benchmark": "tiering", "status": status.get((label, c), "ok"),
                    "metric": m, "parameters": p, "median": v, "unit": u, "kernel": k}
                   for c, m, p, v, u, k in zip(g["case"], g["metric"], g["params"],
                                               g["median"], g["unit"], g["kernel"])]
        out += [(label, sc) for sc in analysis.tiering(records)]
    return out


def _scenario_title(label: str, sc: dict, many: bool) -> str:
    text = sc["workload"] + (", hot set shifting" if sc["phase"] == "shift" else "")
    text += " (model: predicted)" if sc["engine"] == "model" else ""
    return f"{label}: {text}" if many else text


def tiering(frame, runs):
    """Knee curves per scenario, the policy matrix at one share, the MB each policy
    moved, and the model's prediction against the real engine's measurement."""
    scenarios = _tiering_scenarios(frame, runs)
    many = len({label for label, _ in scenarios}) > 1
    for i, (label, sc) in enumerate(scenarios):
        fig, ax = plt.subplots(figsize=(7.5, 4.2))
        for name, row in sc["policies"].items():
            xs = sorted(row["throughput"])
            ax.plot(xs, [row["throughput"][x] for x in xs], marker="o", markersize=3,
                    label=name, **({"linestyle": "--", "color": "black"}
                                   if name == "oracle" else {}))
        for bound, style in (("all_fast", ":"), ("all_slow", "-.")):
            if sc[bound]:
                ax.axhline(sc[bound], color="grey", linestyle=style, linewidth=1,
                           label=bound.replace("_", "-"))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("fast-tier share of the workload's pages")
        ax.set_ylabel(f"throughput ({sc['unit']})")
        title = "Knee curves: " + _scenario_title(label, sc, many)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        _legend(ax, [*sc["policies"], "all-fast", "all-slow"])
        knees = ", ".join(f"{n} {r['knee']:g}" for n, r in sc["policies"].items()
                          if r["knee"] is not None) or "none within 5 %"
        yield Figure(f"tiering-knee-{i}", "tiering", title,
                     "Throughput of the workload at each fast-tier share under each policy "
                     "(the static oracle dashed; all-fast and all-slow as lines). Knees (the "
                     "smallest share within 5 % of all-fast from there up): " + knees + ".",
                     _png(fig))
    yield _tiering_matrix(scenarios, many)
    yield bars(frame, ("policy",), "migrated", key="tiering-migrated", family="tiering",
               title="Pages moved per policy (MB)",
               measured="Megabytes each policy moved between the nodes over the run "
                        "(promotions and demotions)")
    real = frame[frame["kernel"].astype(str).str.endswith(":real")]
    pred, meas = _metric(real, "predicted"), _metric(real, "throughput")
    if len(pred) and len(pred) == len(meas):
        fig, ax = plt.subplots(figsize=(5.5, 4.6))
        ax.scatter(meas["median"], pred["median"], s=12)
        top = float(max(meas["median"].max(), pred["median"].max())) * 1.05
        ax.plot([0, top], [0, top], color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel(f"measured ({_unit(meas)})")
        ax.set_ylabel(f"predicted ({_unit(pred)})")
        ax.set_title("Model engine against the real engine")
        err = (pred["median"].to_numpy(float) / meas["median"].to_numpy(float) - 1)
        yield Figure("tiering-prediction", "tiering", "Model engine against the real engine",
                     f"Each real case's throughput against the model's prediction for the "
                     f"same placements (dotted: equal). Median error "
                     f"{float(np.median(np.abs(err))):.0%}, worst {float(np.abs(err).max()):.0%}.",
                     _png(fig))


def _tiering_matrix(scenarios, many: bool) -> Figure | None:
    """Scenarios x policies: slowdown against all-fast at one share (of those measured,
    the nearest a quarter; a scenario without it a blank row), the best cell of each row
    marked among the policies held to the share, the oracle aside."""
    shares = set().union(*[sc["shares"] for _, sc in scenarios])
    if not shares:
        return None
    share = min(shares, key=lambda s: abs(math.log2(s) + 2) if s > 0 else 99)
    names = list(dict.fromkeys(n for _, sc in scenarios for n in sc["policies"]))
    rows = [_scenario_title(label, sc, many) for label, sc in scenarios]
    grid = np.array([[sc["policies"].get(n, {}).get("slowdown", {}).get(share, np.nan)
                      for n in names] for _, sc in scenarios], float) * 100
    if np.isnan(grid).all():
        return None
    fig, ax = plt.subplots(figsize=(1.1 * len(names) + 3, 0.6 * len(rows) + 2),
                           constrained_layout=True)
    im = ax.imshow(grid, cmap="viridis_r", aspect="auto")
    light = np.nanmin(grid) + 0.5 * (np.nanmax(grid) - np.nanmin(grid))   # yellow end
    for i in range(len(rows)):
        held = scenarios[i][1]["policies"]
        online = [j for j, n in enumerate(names) if n != "oracle" and not np.isnan(grid[i, j])
                  and held[n]["held"]]
        best = min(online, key=lambda j: grid[i, j]) if online else None
        for j in range(len(names)):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.0f}%" + (" *" if j == best else ""),
                        ha="center", va="center", fontsize=8,
                        color="black" if grid[i, j] < light else "white")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows)
    fig.colorbar(im, ax=ax, label="slowdown against all-fast (%)", shrink=0.8)
    title = f"Policy matrix at a fast share of {share:g}"
    ax.set_title(title)
    return Figure("tiering-matrix", "tiering", title,
                  f"Slowdown of each policy against all-fast at a fast-tier share of {share:g} "
                  "(lower is better); * marks each row's best policy other than the oracle "
                  "(and Linux, which is not held to the share).",
                  _png(fig))


def gpu_stream(frame, runs):
    """HBM bandwidth by kernel at a full grid; triad against threads per block, a line per
    number of blocks per SM (the occupancy sweep)."""
    full = frame["params"].map(lambda p: p.get("blocks_per_sm") == "full")
    yield bars(frame[full], ("kernel",), "bandwidth", key="gpu-stream", family="gpu_stream",
               title="GPU memory bandwidth by kernel",
               measured="Bandwidth (GB/s of the bytes each kernel's row declares) of one "
                        "launch over arrays in device memory, timed by CUDA events, at as "
                        "many blocks as the SMs hold at once")
    yield lines(frame[~full], "threads", "bandwidth", logx=True, xlabel="threads per block",
                key="gpu-occupancy", family="gpu_stream", exclude=("kernel",),
                title="GPU memory bandwidth against occupancy",
                measured="Bandwidth (GB/s) of one kernel's launch against threads per block, "
                         "a line per number of blocks per SM")


def _gpu_marks(lat: pd.DataFrame) -> list[tuple[float, str]]:
    """The latency figure's marks: the L2 the device reports, and the steps the line-stride
    sweep itself shows (L1 is not reported: it shares its SRAM with shared memory, so its
    size is the carve-out's)."""
    line = lat[lat["params"].map(lambda p: int(p.get("stride") or 128) <= 128)]
    l2 = {int(i["device"]["l2_bytes"]) for i in line["info"]
          if isinstance(i, dict) and i.get("device", {}).get("l2_bytes")}
    marks = [(b, f"L2 {format_size(b)} (device)") for b in sorted(l2)]
    if len(l2) <= 1 and line["machine"].nunique() <= 1:     # one device's curve
        points = [(int(p["size"]), float(v)) for p, v in zip(line["params"], line["median"])]
        marks += [(lv["capacity"], f"step {format_size(lv['capacity'])} (measured)")
                  for lv in analysis.cache_levels(points) if lv["capacity"]]
    return marks


def gpu_chase(frame, runs):
    """Latency against working set, a line per stride: the steps are L1, L2 and HBM (a
    line's stride) or the TLBs' reach (a page's)."""
    lat = _metric(frame, "latency")
    yield lines(frame, "size", "latency", logx=True, logy=True, xsize=True,
                xlabel="working set", key="gpu-latency", family="gpu_chase",
                marks=_gpu_marks(lat),
                title="GPU memory latency against working set",
                measured="Time of one dependent load (ns, CUDA events around a launch of one "
                         "thread's chase through a random cycle, over its loads); dotted "
                         "lines mark the device's L2 and the steps the line-stride sweep "
                         "shows")


def gpu_copy(frame, runs):
    """Copy bandwidth against size, a line per direction, host memory kind and node."""
    yield lines(frame, "size", "bandwidth", logx=True, xsize=True, xlabel="bytes each way",
                key="gpu-copy", family="gpu_copy",
                title="Host-device copies against size",
                measured="Bandwidth (GB/s: bytes copied, both ways' for bidir) between "
                         "device memory and host memory of each kind, placed on each node "
                         "where it is a cxlbench buffer, by the copy engines (cudaMemcpyAsync) "
                         "or by a kernel on the SMs, timed by CUDA events")


def gpu_zero_copy(frame, runs):
    """The GPU streaming host memory in place, by node; its chase latency, by node."""
    yield bars(frame, ("op",), "bandwidth", key="gpu-zero-copy", family="gpu_zero_copy",
               title="GPU reading and writing host memory in place",
               measured="Bandwidth (GB/s) of a grid of GPU threads reading or writing "
                        "registered host memory placed on each node, over the link")
    yield bars(frame, ("op",), "latency", key="gpu-zero-copy-latency",
               family="gpu_zero_copy", title="GPU load latency to host memory",
               measured="Time of one dependent load (ns) of one GPU thread chasing a random "
                        "cycle of 64-byte lines through host memory placed on each node")


def gpu_managed(frame, runs):
    """Managed memory's read by mode: faulted in, prefetched, resident; and first touch."""
    yield bars(frame, ("mode",), "bandwidth", key="gpu-managed", family="gpu_managed",
               title="GPU managed memory: faults against prefetch",
               measured="Bandwidth (GB/s of the managed buffer) of a grid of GPU threads "
                        "reading pages the host wrote (migrated on fault, or prefetched "
                        "first, timed with the read), pages already on the device, or "
                        "writing memory never touched, timed by CUDA events")


def gpu_embedding(frame, runs):
    """Embedding-bag gathers by where the table lives: HBM, the driver's pinned memory, and
    host memory placed on each node."""
    yield bars(frame, ("table",), "lookups", key="gpu-embedding", family="gpu_embedding",
               title="GPU embedding-bag gathers by where the table lives",
               measured="Lookups a second (M/s) of one warp a bag summing its rows in fp32, "
                        "the table in HBM, in the driver's pinned memory or in host memory "
                        "placed on each node (both read in place over the link), timed by "
                        "CUDA events")


def gpu_kv_swap(frame, runs):
    """KV-cache swaps by direction and method, a bar per placement of the host pool."""
    yield bars(frame, ("direction", "method"), "bandwidth", key="gpu-kv-swap",
               family="gpu_kv_swap", title="KV-cache swaps between HBM and host memory",
               measured="Bandwidth (GB/s of KV bytes swapped) of every layer's K and V of the "
                        "blocks swapped between HBM and a host pool placed on each node, one "
                        "cudaMemcpyAsync a copy or one kernel through the block table, timed "
                        "by CUDA events")
    yield bars(frame, ("direction", "method"), "issue_time", key="gpu-kv-swap-issue",
               family="gpu_kv_swap", title="KV-cache swaps: the CPU's time issuing them",
               measured="Time (µs) the host spent in the calls that issue one swap (one "
                        "cudaMemcpyAsync a copy, or one launch), by its clock: where it "
                        "nears the swap's own time, the CPU's calls bound the swap, not the "
                        "memory")


def generic(frame, runs):
    family = frame["benchmark"].iloc[0]
    metric = frame["metric"].iloc[0]
    groups = tuple(varying(_metric(frame, metric))) or ("kernel",)
    yield bars(frame, groups, metric, key=family, family=family, title=f"{family}: {metric}",
               measured=f"{metric.capitalize()} of each {family} case")


def figures_for(family: str, frame: pd.DataFrame, runs) -> list[Figure]:
    """The figures of one family's rows: its registry record's figure function here, or
    the generic bars."""
    bench = benchmarks.family(family)
    plot = globals()[bench.figures] if bench and bench.figures else generic
    return [f for f in plot(frame, runs) if f is not None]
