"""A plan (`cxlbench plan --json > PLAN.json`) as a report section (`cxlbench report RUNS
--plan PLAN.json`): its answer, a figure of each part's bytes on its tiers, one of the
host work's predicted time against the share of host state on the slow tier, and the
parts and work with their formulas and sources."""
from __future__ import annotations

import json

import matplotlib.pyplot as plt

from ..errors import UserError
from .document import Heading, Para, Table
from .figures import Figure
from .figures.layout import FONTS, grid, png

GIB = 1 << 30
KEYS = ("shape", "answer", "parts", "host", "work", "curve")
PART_KEYS = ("name", "bytes", "where", "dram", "slow", "why", "formula")
WORK_KEYS = ("name", "per", "ns", "all_dram_ns", "all_slow_ns", "formula")
HOST_KEYS = ("ranks", "dram", "slow", "step_slow_share", "tiers")
COLOURS = {"GPU": "#4c72b0", "DRAM": "#55a868", "slow tier": "#dd8452"}


def load(path: str) -> dict:
    """A plan's JSON, refused with the reason where it is not one."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"--plan {path}: {e}") from None
    missing = [k for k in KEYS if k not in (data if isinstance(data, dict) else {})]
    if not missing:     # and each part, work and the host with what the section reads
        missing = [f"{where}.{k}" for where, rows, keys in (
            ("parts", data["parts"], PART_KEYS), ("work", data["work"], WORK_KEYS),
            ("host", [data["host"]], HOST_KEYS))
            for row in (rows if isinstance(rows, list) else [None])
            for k in keys if not isinstance(row, dict) or k not in row]
    if missing:
        raise UserError(f"--plan {path}: not a plan (no {', '.join(missing)}; write one "
                        "with cxlbench plan ... --json > PLAN.json)")
    return data


def _bytes_figure(plan: dict) -> Figure:
    parts = plan["parts"]
    g = grid(1, 7.5, [list(COLOURS)], panel_height=0.45 * len(parts) + 1.2,
             title="Each part's bytes on its tiers: GPU parts a GPU, host parts a host "
                   f"({plan['host']['ranks']} rank{'s' if plan['host']['ranks'] > 1 else ''})")
    ax = g.axes[0]
    names = [p["name"] for p in parts][::-1]
    for y, p in enumerate(parts[::-1]):
        segments = [("GPU", p["bytes"])] if p["where"] == "gpu" else \
            [("DRAM", p["dram"]), ("slow tier", p["slow"])]
        left = 0.0
        for tier, b in segments:
            ax.barh(y, b / GIB, left=left / GIB, color=COLOURS[tier],
                    label=tier if tier not in ax.get_legend_handles_labels()[1] else None)
            left += b
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("GiB")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    return Figure("plan-bytes", "plan", "Bytes per part and tier",
                  "Where the plan puts each part: a GPU part's bytes on one GPU; a host "
                  "part's on one host, in DRAM first and the rest on the slow tier. "
                  "Sizes are the plan's formulas (see the table), not measurements.",
                  png(g.fig))


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
            *figures, parts, *([work] if plan["work"] else [])]
