"""What every family's figures are drawn with: the parameters of a frame's rows (varied,
fixed, legend names), captions, and lines, bars and heatmaps with whiskers or, for many
runs, the fleet's marks; and the generic bars of a family without a plotter."""
from __future__ import annotations

import io
import math
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")   # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ... import benchmarks  # noqa: E402
from .. import fleet  # noqa: E402
from ..text import printable  # noqa: E402
from ...options import split_buffer_option  # noqa: E402
from ...paramtext import NOT_MEASURED, params_text, resolved, value_text  # noqa: E402
from ...units import format_size  # noqa: E402


# Parameters a caption never lists as fixed (they are in the legend, on an axis, or noise).
QUIET = set(NOT_MEASURED) | {"cpus"}


@dataclass
class Figure:
    key: str            # file stem, unique within a report
    family: str         # the benchmark
    title: str
    caption: str
    png: bytes


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


def generic(frame, runs):
    family = frame["benchmark"].iloc[0]
    metric = frame["metric"].iloc[0]
    groups = tuple(varying(_metric(frame, metric))) or ("kernel",)
    yield bars(frame, groups, metric, key=family, family=family, title=f"{family}: {metric}",
               measured=f"{metric.capitalize()} of each {family} case")
