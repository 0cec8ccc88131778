"""What every family's figures are drawn with: captions, and lines, bars and heatmaps in
panels (panels.py) with whiskers or, for many runs, the fleet's marks, sized to the page
(layout.py) and labelled in words (words.py); and the generic bars of a family without a
plotter."""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

import matplotlib
import numpy as np
import pandas as pd

from .. import fleet
from ...paramtext import value_text
from . import layout, words
from .panels import split
from .params import fixed, varying


@dataclass
class Figure:
    key: str            # file stem, unique within a report
    family: str         # the benchmark
    title: str
    caption: str
    png: bytes


# What a fleet view's marks are (a figure of many runs: see fleet.py).
FLEET_SHOWN = {
    "fleet-band": "lines: the median of the runs' medians at each point, bands: their "
                  "interquartile range, whiskers: their range",
    "fleet-box": "boxes: the runs' medians (quartiles, whiskers to their range), a dot per "
                 "run where there are at most 200, past that a shaded violin: the density "
                 "of the runs' medians",
    "fleet-range": "points: the median of the runs' medians, whiskers: their range (not a "
                   "confidence interval)",
    "fleet-cells": "cells hold the median of the runs' medians"}


def caption(frame: pd.DataFrame, measured: str, exclude=(), shown="whiskers",
            labels=None) -> str:
    """What was measured, the parameters every shown case shared, the repetitions, and
    what the points and whiskers are (shown: one of FLEET_SHOWN for a fleet view, whose
    runs are `labels` where the frame holds only their fleet's rows; "pooled" where the
    figure draws samples pooled over the repetitions, which `measured` describes)."""
    f = fixed(frame, exclude)
    settings = ", ".join(f"{k}={value_text(k, v)}" for k, v in f.items())
    n_lo, n_hi = int(frame["n"].min()), int(frame["n"].max())
    reps = f"n={n_lo}" if n_lo == n_hi else f"n={n_lo}-{n_hi}"
    warm = {p.get("warmup") for p in frame["params"]}
    warm_text = f" after {warm.pop()} warm-up" if len(warm) == 1 else ""
    failed = int((~frame["placement_ok"].astype(bool)).sum())
    placed = ("placement verified on every case (move_pages after the case)" if not failed
              else f"placement check FAILED on {failed} rows")
    # A host of two (crosshost.py) maps a region no NUMA placement describes.
    across = frame["info"].map(lambda i: isinstance(i, dict) and "session" in i) \
        if "info" in frame else pd.Series(False, index=frame.index)
    if across.all() and len(frame):
        placed = ("each host's region is the DAX device (or file) both map: no NUMA node, "
                  "nothing to verify")
    elif across.any():
        placed += "; the runs of two hosts map a shared region, not verified"
    runs = fleet.runs_text(list(frame["label"]) if labels is None else labels)
    if shown == "pooled":       # a distribution of every repetition's samples: no medians
        text = f"{measured}. "
    elif shown in FLEET_SHOWN:
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
    # Every figure of an emulated run says so, whatever else it shows.
    emulated = sorted({str(m) for m in frame.get("machine", ())
                       if str(m).startswith("emulated")})
    if emulated:
        text = (f"EMULATED ({', '.join(emulated)}): figures from QEMU, not from hardware. "
                + text)
    return text + f"{placed[0].upper() + placed[1:]}. Runs: {runs}."


def _metric(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The rows of one metric, numbered afresh."""
    return frame[frame["metric"] == metric].reset_index(drop=True)


def _unit(frame: pd.DataFrame) -> str:
    """The rows' unit (one metric's rows share it)."""
    return str(frame["unit"].iloc[0]) if len(frame) else ""


def _errors(sub: pd.DataFrame) -> np.ndarray:
    """Whiskers from each median down and up to its confidence interval."""
    med = sub["median"].to_numpy(float)
    return np.vstack([np.clip(med - sub["ci_low"].to_numpy(float), 0, None),
                      np.clip(sub["ci_high"].to_numpy(float) - med, 0, None)])


def colours(names: list[str]) -> dict:
    """A colour per legend name, the same in every panel of a figure; an unnamed series
    takes the first, or grey beside named ones (which it is none of)."""
    cycle = [f"C{i}" for i in range(10)] if len(names) <= 10 else \
        [matplotlib.colormaps["tab20"](i) for i in range(20)]
    return {"": "tab:gray" if names else cycle[0],
            **{n: cycle[i % len(cycle)] for i, n in enumerate(names)}}


def plain(ax, x: bool, y: bool) -> None:
    """Log axes' ticks as plain numbers (64, 0.25), not 2^6 or 6x10^0; within a decade the
    minor ticks carry them."""
    text = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    for axis, on in ((ax.xaxis, x), (ax.yaxis, y)):
        if on:
            axis.set_major_formatter(text)
            axis.set_minor_formatter(text if len(axis.get_majorticklocs()) < 3 else
                                     matplotlib.ticker.NullFormatter())


def label(name: str) -> str:
    """A series' legend label: an unnamed series (nothing varies) has none."""
    return name or "_nolegend_"


def lines(frame: pd.DataFrame, x, metric: str, *, xlabel: str, title: str, measured: str,
          key: str, family: str, logx=False, logy=False, xsize=False, marks=(),
          exclude=(), shown=None, labels=None, note="") -> Figure | None:
    """Median against x (a parameter name, or a function of a summary row), a
    panel per job of other settings, a line per series, CI whiskers; for many runs, the
    fleet's (see _fleet_lines). shown, labels and note: the caption's, where the frame is
    a fleet's view (fleet.view) already."""
    sub = _metric(frame, metric)
    if sub.empty:
        return None
    if isinstance(x, str):
        exclude = (*exclude, x)
        xs = [p.get(x) for p in sub["params"]]
    else:
        xs = [x(r) for _, r in sub.iterrows()]
    many = fleet.many(sub)
    sub = sub.assign(_x=xs)
    sub = sub[sub["_x"].notna()].reset_index(drop=True)
    if sub.empty:
        return None
    panels = split(sub, exclude=exclude, runs=not many, promote=False)
    grid = layout.grid(len(panels), 5.4, [p.series for p in panels], title=title,
                       narrowest=3.8)
    extras = []         # what each panel's fleet adds to the caption
    for ax, panel in zip(grid.axes, panels):
        rows = panel.rows.assign(_series=panel.series)
        colour = colours(grid.names if grid.shared else list(dict.fromkeys(panel.series)))
        if many:
            extras.append(_fleet_lines(ax, rows, colour))
        else:
            for name, g in rows.groupby("_series", sort=False):
                g = g.sort_values("_x")
                ax.errorbar(g["_x"].astype(float), g["median"], yerr=_errors(g), marker="o",
                            markersize=3, capsize=2, label=label(name), color=colour[name])
        if logx:
            ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
        plain(ax, logx and not xsize, logy)
        if xsize:
            ticks = sorted(set(rows["_x"].astype(float)))
            step = max(1, math.ceil(len(ticks) / 10))
            ax.set_xticks(ticks[::step])
            ax.set_xticklabels([words.size(t) for t in ticks[::step]], rotation=45,
                               ha="right")
            ax.minorticks_off()
        for at, text in marks:
            ax.axvline(at, color="grey", linestyle=":", linewidth=1)
            ax.annotate(text, (at, 1), xycoords=("data", "axes fraction"), fontsize=9,
                        ha="right", va="top", rotation=90, color="grey")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(words.metric(metric, _unit(rows)))
        grid.title(ax, panel.title)
        ax.grid(True, which="both", alpha=0.3)
    grid.legend()
    shown = shown or ("fleet-band" if many else "whiskers")
    return Figure(key, family, title, caption(sub, measured, exclude=exclude, shown=shown,
                                              labels=labels) +
                  "".join(dict.fromkeys(extras)) + note +
                  _panels_text(panels), layout.png(grid.fig))


def _panels_text(panels) -> str:
    """The caption's word on panels, where there are several."""
    return (" A panel per job (or setting) of its own: each titled with its jobs and what "
            "sets it apart from the others.") if len(panels) > 1 else ""


def _fleet_lines(ax, sub: pd.DataFrame, colour: dict) -> str:
    """Many runs as each series' fleet median (a line) and range (a band), and the runs
    off the fleet drawn alone (dashed, named). The caption's addition."""
    for name, g in sub.groupby("_series", sort=False):
        by_x = g.groupby("_x")["median"]
        xs = sorted(by_x.groups)
        line, = ax.plot(xs, by_x.median().loc[xs], marker="o", markersize=3,
                        color=colour.get(name),
                        label=f"{name} (fleet median)" if name else "fleet median")
        # The band the middle half of the runs (a few slow ones cannot stretch it), the
        # whiskers every run.
        ax.fill_between(xs, by_x.quantile(0.25).loc[xs], by_x.quantile(0.75).loc[xs],
                        alpha=0.25, color=line.get_color())
        ax.vlines(np.asarray(xs, float), by_x.min().loc[xs], by_x.max().loc[xs],
                  color=line.get_color(), linewidth=0.8, alpha=0.6)
    outliers = fleet.off(sub, ["_series", "_x"])
    for run in list(dict.fromkeys(outliers["label"]))[:5]:
        for name, g in sub[sub["label"] == run].groupby("_series", sort=False):
            g = g.sort_values("_x")
            ax.plot(g["_x"].astype(float), g["median"], linestyle="--", linewidth=1,
                    label=f"{run}, {name}" if name else run)
    dashed = " Dashed: runs off the fleet." if len(outliers) else ""
    return (dashed + " " + fleet.named(outliers)).rstrip()


def _bars_width(panel, least: bool = False) -> float:
    """Inches a panel of grouped bars takes (least: at the narrowest): room for each bar,
    and for its group's label written aslant."""
    groups = len(set(panel.groups))
    per_bar = 0.2 if least else 0.3
    return max(3.6, 1.0 + per_bar * groups * len(set(panel.series)), 1.0 + 0.4 * groups)


def bars(frame: pd.DataFrame, groups, metric: str, *, title: str, measured: str, key: str,
         family: str, logy=False, exclude=()) -> Figure | None:
    """Grouped bars: a panel per job of other settings, a group per value of `groups`
    (parameter names) in it, a bar per series; for many runs, a box of their medians per
    series (see _fleet_boxes)."""
    sub = _metric(frame, metric)
    if sub.empty:
        return None
    many = fleet.many(sub)
    panels = split(sub, groups, exclude, runs=not many)
    grid = layout.grid(len(panels), max(_bars_width(p) for p in panels),
                       [p.series for p in panels], title=title,
                       narrowest=max(_bars_width(p, least=True) for p in panels))
    for ax, panel in zip(grid.axes, panels):
        rows = panel.rows.assign(_group=panel.groups, _series=panel.series)
        order = list(dict.fromkeys(panel.groups))
        names = list(dict.fromkeys(panel.series))
        colour = colours(grid.names if grid.shared else names)
        width = 0.8 / len(names)
        for i, name in enumerate(names):
            g = rows[rows["_series"] == name]
            offset = (i - (len(names) - 1) / 2) * width
            if many:
                _fleet_boxes(ax, g, order, offset, width, name, colour[name])
            elif len(g) > MANY_BARS:
                _thin_bars(ax, g, order, offset, width, label(name), colour[name], logy)
            else:
                at = [order.index(v) + offset for v in g["_group"]]
                ax.bar(at, g["median"], width, yerr=_errors(g), capsize=2, label=label(name),
                       color=colour[name])
        if order == [""]:           # nothing varies here but the series: no x labels
            ax.set_xticks([])
        else:
            _group_labels(ax, order, grid.panel_width)
        ax.set_xlabel(", ".join(panel.axis))
        ax.set_ylabel(words.metric(metric, _unit(rows)))
        if logy:
            ax.set_yscale("log")
            plain(ax, False, True)
        grid.title(ax, panel.title)
        ax.grid(True, axis="y", alpha=0.3)
    grid.legend()
    extra = ""
    if many:
        points = pd.concat([p.rows.assign(_panel=i, _group=p.groups, _series=p.series)
                            for i, p in enumerate(panels)])
        extra = (f" Runs off the fleet are named beside their dots (the {NAMED} furthest "
                 "off at a box). " + fleet.named(
                     fleet.off(points, ["_panel", "_group", "_series"]))).rstrip()
    return Figure(key, family, title,
                  caption(sub, measured, exclude=(*groups, *exclude),
                          shown="fleet-box" if many else "whiskers") + extra +
                  _panels_text(panels), layout.png(grid.fig))


# Bars in one series beyond which each is drawn as a line of one collection: a patch per
# bar (matplotlib's bar) takes seconds a thousand, and no eye tells them apart anyway.
MANY_BARS = 1000


def _thin_bars(ax, g: pd.DataFrame, order: list, offset: float, width: float, name: str,
               color, logy: bool) -> None:
    """A series of very many bars as one collection of lines from the base up to each
    median, with their intervals as a second, darker one."""
    index = {v: i for i, v in enumerate(order)}
    at = np.array([index[v] for v in g["_group"]], float) + offset
    med = g["median"].to_numpy(float)
    base = np.nanmin(med[med > 0]) / 2 if logy and (med > 0).any() else 0.0
    ax.vlines(at, base, med, colors=color, linewidth=max(0.5, 72 * width / 100),
              label=name)
    ax.vlines(at, g["ci_low"].to_numpy(float), g["ci_high"].to_numpy(float),
              colors="black", linewidth=0.5, alpha=0.6)
    ax.set_xlim(-0.5, len(order) - 0.5)


def _group_labels(ax, order: list[str], width: float) -> None:
    """The groups' names under their bars: level, over lines as wide as a group, where
    that is 8 characters or more; else aslant."""
    chars = int((width - 0.8) / len(order) / layout.CHAR_WIDTH)
    ax.set_xticks(range(len(order)))
    if chars >= 8:
        ax.set_xticklabels([textwrap.fill(v, chars) for v in order])
    else:
        ax.set_xticklabels([textwrap.fill(v, 24) for v in order], rotation=30, ha="right")


# Runs in a box beyond which their dots are left out (only those off the fleet drawn).
DOTS = 200
NAMED = 4           # runs off the fleet named beside a box, the furthest off first


def _fleet_boxes(ax, g: pd.DataFrame, order: list, offset: float, width: float,
                 name: str, color) -> None:
    """One series of many runs: a box of the runs' medians at each group, a dot per run
    (past DOTS, the runs' density as a violin behind a narrower box), and the runs off
    the fleet named beside their dots."""
    groups = [v for v in order if (g["_group"] == v).any()]
    at = [order.index(v) + offset for v in groups]
    values = [g.loc[g["_group"] == v, "median"].to_numpy(float) for v in groups]
    dense = {x for x, v in zip(at, values) if len(v) > DOTS}
    shaded = [(x, v) for x, v in zip(at, values) if x in dense and np.ptp(v) > 0]
    if shaded:              # a violin needs spread: identical medians have no density
        parts = ax.violinplot([v for _, v in shaded], positions=[x for x, _ in shaded],
                              widths=width * 0.9, showextrema=False)
        for body in parts["bodies"]:
            body.set_facecolor(color)
            body.set_edgecolor("none")
            body.set_alpha(0.25)
    ax.boxplot(values, positions=at, widths=[width * (0.35 if x in dense else 0.8) for x in at],
               showfliers=False, patch_artist=True, whis=(0, 100),
               boxprops={"facecolor": color, "alpha": 0.35}, medianprops={"color": color})
    for x, v in zip(at, values):
        if x not in dense:      # past DOTS, a blob over the box: the off runs dotted below
            ax.scatter(np.full(len(v), x) + np.linspace(-0.3, 0.3, len(v)) * width, v, s=4,
                       color=color, zorder=3)
    ax.scatter([], [], color=color, label=label(name))      # the legend's entry
    off = fleet.off(g, ["_group"])
    xs = [order.index(v) + offset for v in off["_group"]]
    crowded = [x in dense for x in xs]
    if any(crowded):
        ax.scatter(np.array(xs)[crowded], off["median"].to_numpy()[crowded], s=6,
                   color=color, edgecolor="black", linewidth=0.5, zorder=3)
    for group, runs in off.groupby("_group", sort=False):
        # the runs furthest off named (the caption names the rest); those within 3 % of
        # each other in one label, which would otherwise overlap
        runs = runs.reindex(runs["slower"].abs().sort_values(ascending=False).index)
        runs = runs.head(NAMED)
        notes: list[list] = []
        for _, r in runs.sort_values("median").iterrows():
            if notes and r["median"] <= notes[-1][0] * 1.03:
                notes[-1][1].append(r["label"])
            else:
                notes.append([r["median"], [r["label"]]])
        for y, names in notes:
            ax.annotate(", ".join(names), (order.index(group) + offset, y), fontsize=9,
                        xytext=(4, 0), textcoords="offset points", va="center")


def heatmaps(tables: list[tuple[str, list, list, dict]], *, unit: str, title: str,
             caption_text: str, key: str, family: str, row_label: str,
             col_label: str) -> Figure | None:
    """One annotated heatmap per (subtitle, rows, cols, {(row, col): value}), as many to a
    row as fit the page."""
    if not tables:
        return None
    side = max(len(cols) for _, _, cols, _ in tables)
    grid = layout.grid(len(tables), max(3.6, 1.8 + 0.5 * side), title=title,
                       panel_height=min(max(3.2, 1.4 + 0.4 * side), 8.0))
    for ax, (sub, rows, cols, cells) in zip(grid.axes, tables):
        values = np.array([[cells.get((r, c), np.nan) for c in cols] for r in rows], float)
        im = ax.imshow(values, cmap="viridis")
        for i in range(len(rows)):
            for j in range(len(cols)):
                if not math.isnan(values[i, j]):
                    ax.text(j, i, f"{values[i, j]:.3g}", ha="center", va="center",
                            fontsize=9, color="white")
        ax.set_xticks(range(len(cols)))
        ax.set_xticklabels(cols)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows)
        ax.set_xlabel(col_label)
        ax.set_ylabel(row_label)
        grid.title(ax, sub)
        grid.fig.colorbar(im, ax=ax, label=words.unit(unit), shrink=0.8)
    return Figure(key, family, title, caption_text, layout.png(grid.fig))


def generic(frame, runs):
    family = frame["benchmark"].iloc[0]
    metric = frame["metric"].iloc[0]
    groups = tuple(varying(_metric(frame, metric))) or ("kernel",)
    yield bars(frame, groups, metric, key=family, family=family, title=f"{family}: {metric}",
               measured=f"{metric.capitalize()} of each {family} case")
