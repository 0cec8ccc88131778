"""A plan (`cxlbench plan --json > PLAN.json`) as a report section (`cxlbench report RUNS
--plan PLAN.json`): its answer, a figure of each part's bytes on its tiers, one of the
host work's predicted time against the share of host state on the slow tier, and the
parts and work with their formulas and sources."""
from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass

import matplotlib.pyplot as plt

from ..errors import UserError
from ..plan.job import read_input
from .document import Heading, Para, Table
from .figures import Figure
from .figures.layout import FONTS, grid, png

GIB = 1 << 30
COLOURS = {"GPU": "#4c72b0", "DRAM": "#55a868", "slow tier": "#dd8452"}
FIGURE_PARTS = 20       # bars the bytes figure draws: the largest parts, the rest summed
MAX_PLAN = 64 << 20     # a plan's file (cxlbench plan writes a few KB)


@dataclass(frozen=True)
class Num:
    """A finite number within [low, high]; an integer where asked; None where allowed."""
    low: float = 0.0
    high: float = math.inf
    integer: bool = False
    null: bool = False


@dataclass(frozen=True)
class Rows:
    """A list of `row`s, at most `most` of them (cxlbench plan writes a handful)."""
    row: object
    most: int


SHARE = Num(0.0, 1.0)
# What the section reads of a plan, each value's kind: str, a tuple of the words allowed,
# Num, Rows, or a dict of the keys an object must have (others are left alone).
SHAPE = {
    "shape": str,
    "answer": Rows(str, 100),
    "parts": Rows({"name": str, "bytes": Num(), "where": ("gpu", "host"), "dram": Num(),
                   "slow": Num(), "why": str, "formula": str}, 100_000),
    "host": {"ranks": Num(1, integer=True), "dram": Num(), "slow": Num(),
             "step_slow_share": SHARE,
             "tiers": Rows({"name": str, "speed_source": str}, 16)},
    "work": Rows({"name": str, "per": str, "formula": str,
                  **{k: Num(null=True) for k in ("ns", "all_dram_ns", "all_slow_ns")}}, 1000),
    "curve": Rows({"slow_share": SHARE, "ns": Num()}, 1000),
}


def _show(value) -> str:
    """A value in a few words: a list or an object by its kind, not its contents."""
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "an object"
    text = json.dumps(value) if isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def problem(value, shape, where: str = "") -> str | None:
    """What in `value` is not of `shape` (SHAPE's kinds), its path named; None: nothing."""
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return f"{where or 'the file'}: {_show(value)} is not an object"
        for key, inner in shape.items():
            path = f"{where}.{key}" if where else key
            found = f"no {path}" if key not in value else problem(value[key], inner, path)
            if found:
                return found
        return None
    if isinstance(shape, Rows):
        if not isinstance(value, list):
            return f"{where}: {_show(value)} is not a list"
        if len(value) > shape.most:
            return f"{where}: {len(value)} entries, more than the {shape.most} a report takes"
        return next(filter(None, (problem(v, shape.row, f"{where}[{i}]")
                                  for i, v in enumerate(value))), None)
    if isinstance(shape, Num):
        if value is None and shape.null:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                (shape.integer and not isinstance(value, int)):
            kind = "an integer" if shape.integer else "a number"
            return f"{where}: {_show(value)} is not {kind}"
        try:
            finite = math.isfinite(value)
        except OverflowError:       # an integer past a float's range
            finite = False
        if not finite:
            return f"{where}: {_show(value)} is not a finite number"
        if value < shape.low:
            return f"{where}: {_show(value)} is below {shape.low:g}"
        return f"{where}: {_show(value)} is above {shape.high:g}" if value > shape.high \
            else None
    if isinstance(shape, tuple):
        return None if value in shape and isinstance(value, str) else \
            f"{where}: {_show(value)} is not one of {', '.join(shape)}"
    return None if isinstance(value, shape) else \
        f"{where}: {_show(value)} is not {'text' if shape is str else shape.__name__}"


def load(path: str) -> dict:
    """A plan's JSON, refused in one line naming the file and what is wrong where it is
    not one: not UTF-8, not JSON, or any value the section reads not of its kind."""
    text = read_input(path, "--plan", MAX_PLAN)
    try:
        data = json.loads(text)
    except ValueError as e:     # also an integer of over 4300 digits
        raise UserError(f"--plan {path}: not JSON: {e}") from None
    except RecursionError:
        raise UserError(f"--plan {path}: not JSON: nested too deeply") from None
    found = problem(data, SHAPE)
    if found:
        raise UserError(f"--plan {path}: not a plan ({found}); write one with cxlbench plan "
                        "... --json > PLAN.json")
    return data


def _segments(part: dict) -> list[tuple[str, float]]:
    """A part's bytes on each tier it has: a GPU's, or a host's in DRAM and slow."""
    return [("GPU", part["bytes"])] if part["where"] == "gpu" else \
        [("DRAM", part["dram"]), ("slow tier", part["slow"])]


def _bars(parts: list[dict]) -> tuple[list[tuple[str, list]], int]:
    """The figure's bars, in the plan's order: every part where they are FIGURE_PARTS or
    fewer; else the largest, and the rest summed in one bar for the GPU's and one for the
    host's. Also how many were summed."""
    if len(parts) <= FIGURE_PARTS:
        return [(p["name"], _segments(p)) for p in parts], 0
    size = [sum(b for _, b in _segments(p)) for p in parts]
    kept = set(heapq.nlargest(FIGURE_PARTS - 2, range(len(parts)), key=size.__getitem__))
    bars = [(p["name"], _segments(p)) for i, p in enumerate(parts) if i in kept]
    for where, word, tiers in (("gpu", "GPU", ("GPU",)), ("host", "host", ("DRAM", "slow tier"))):
        rest = [_segments(p) for i, p in enumerate(parts) if i not in kept and p["where"] == where]
        if rest:
            bars.append((f"{len(rest)} other {word} parts",
                         [(t, sum(b for segs in rest for tier, b in segs if tier == t))
                          for t in tiers]))
    return bars, len(parts) - len(kept)


def _bytes_figure(plan: dict) -> Figure | None:
    parts = plan["parts"]
    if not parts:
        return None
    bars, summed = _bars(parts)
    g = grid(1, 7.5, [list(COLOURS)], panel_height=0.45 * len(bars) + 1.2,
             title="Each part's bytes on its tiers: GPU parts a GPU, host parts a host "
                   f"({plan['host']['ranks']} rank{'s' if plan['host']['ranks'] > 1 else ''})")
    ax = g.axes[0]
    labelled = set()
    for y, (name, segments) in enumerate(bars[::-1]):
        left = 0.0
        for tier, b in segments:
            ax.barh(y, b / GIB, left=left / GIB, color=COLOURS[tier],
                    label=None if tier in labelled else tier)
            labelled.add(tier)
            left += b
    # a name is the plan file's text: drawn as it is, never as mathtext ("$" in it)
    ax.set_yticks(range(len(bars)), [name for name, _ in bars][::-1], parse_math=False)
    ax.set_xlabel("GiB")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    grouped = (f" The plan has {len(parts)} parts: the {len(parts) - summed} largest are "
               f"drawn, the other {summed} summed as the GPU's and the host's others (the "
               "table lists every part).") if summed else ""
    return Figure("plan-bytes", "plan", "Bytes per part and tier",
                  "Where the plan puts each part: a GPU part's bytes on one GPU; a host "
                  "part's on one host, in DRAM first and the rest on the slow tier. "
                  "Sizes are the plan's formulas (see the table), not measurements."
                  + grouped, png(g.fig))


def _time_figure(plan: dict) -> Figure | None:
    curve = plan["curve"]
    if not curve:
        return None
    g = grid(1, 7.5, [["predicted", "as placed"]],
             title="Host work a step, predicted, against the share of host state on the "
                   "slow tier")
    ax = g.axes[0]
    xs = [c["slow_share"] * 100 for c in curve]
    ys = [c["ns"] / 1e6 for c in curve]
    ax.plot(xs, ys, marker="o", color=COLOURS["slow tier"], label="predicted")
    host = plan["host"]
    steps = [w for w in plan["work"] if w["per"] != "checkpoint" and w["ns"] is not None]
    if steps:           # the step work's own share on the slow tier, as the curve's x
        ax.plot([host["step_slow_share"] * 100], [sum(w["ns"] for w in steps) / 1e6], "k*",
                markersize=12, label="as placed")
    ax.set_xlabel("host state on the slow tier (%)")
    ax.set_ylabel("ms a step")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    sources = "; ".join(f"{t['name']}: {t['speed_source']}" for t in host["tiers"])
    return Figure("plan-time", "plan", "Predicted host work against the slow tier's share",
                  "The calibrated tier model's time for the host's memory-bound work of one "
                  "step (the same share of every host part on the slow tier), and the plan's "
                  f"own placement (the star). Predictions, not measurements. Tiers: {sources}.",
                  png(g.fig))


def section(plan: dict) -> list:
    with plt.rc_context(FONTS):
        figures = [f for f in (_bytes_figure(plan), _time_figure(plan)) if f is not None]
    parts = Table(["part", "GiB a device", "where", "GiB a host in DRAM", "on the slow tier",
                   "why", "formula"],
                  [[p["name"], round(p["bytes"] / GIB, 2), p["where"],
                    round(p["dram"] / GIB, 2) if p["where"] == "host" else "",
                    round(p["slow"] / GIB, 2) if p["where"] == "host" else "", p["why"],
                    p["formula"]] for p in plan["parts"]])
    work = Table(["work", "per", "predicted as placed (ms)", "all in DRAM (ms)",
                  "all on the slow tier (ms)", "what it moves"],
                 [[w["name"], w["per"], *(round(w[k] / 1e6, 3) if w[k] is not None else
                                          "not calibrated"
                                          for k in ("ns", "all_dram_ns", "all_slow_ns")),
                   w["formula"]] for w in plan["work"]])
    return [Heading(2, f"Plan: {plan['shape']}"),
            *(Para(line, "headline") for line in plan["answer"]),
            *figures, *([parts] if plan["parts"] else []), *([work] if plan["work"] else [])]
