"""A plan (`cxlbench plan --json > PLAN.json`) as a report section (`cxlbench report RUNS
--plan PLAN.json`): its answer, a figure of each part's bytes on its tiers, one of the
host work's predicted time against the share of host state on the slow tier, and the
parts and work with their formulas and sources. A pipelined plan (pp > 1: its "stages")
also gets a figure of every stage's GPU parts against the GPU's capacity, with the ways to
even the stages out; a plan written before stages were counted has none and is drawn as
it was."""
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
# A stage's GPU parts, each its own colour: the GPU's blue first, then the other cool and
# muted colours of the same palette (DRAM's green and the slow tier's orange left to them).
PART_COLOURS = {"parameters": "#4c72b0", "gradients": "#64b5cd", "master weights": "#8172b3",
                "optimizer moments": "#da8bc3", "activations": "#c44e52",
                "output activations": "#937860", "KV-cache": "#ccb974"}
SPARE_COLOURS = ("#8c8c8c", "#2f4b7c", "#a05195", "#665191", "#7a5c3e", "#b0b0b0")
NOWHERE = "#d9d9d9"     # host bytes the plan found no room for
OPTION_MARKERS = "osD^vP"
HOST_NAMES = {"DRAM": "host parts in DRAM", "slow tier": "host parts on the slow tier",
              "fits nowhere": "host parts with no room"}
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
class Opt:
    """A key an object may lack (plans written before it was added); of `shape` where there."""
    shape: object


@dataclass(frozen=True)
class Map:
    """An object of any keys (names), each value of `value`, at most `most` of them."""
    value: object
    most: int


@dataclass(frozen=True)
class Rows:
    """A list of `row`s, at most `most` of them (cxlbench plan writes a handful)."""
    row: object
    most: int


SHARE = Num(0.0, 1.0)
STAGE = Num(integer=True)
MAX_PP = 1 << 16        # cxlbench plan's bound on --pp
# What the section reads of a plan, each value's kind: str, a tuple of the words allowed,
# Num, Rows, Map, or a dict of the keys an object must have (others are left alone; an
# Opt key may be missing).
SHAPE = {
    "shape": str,
    "answer": Rows(str, 100),
    "parts": Rows({"name": str, "bytes": Num(), "where": ("gpu", "host"), "dram": Num(),
                   "slow": Num(), "why": str, "formula": str,
                   "host_bytes": Opt(Num())}, 100_000),
    # pipeline stages (cxlbench plan shows every one up to 8, else a few)
    "stage": Opt(STAGE),
    "imbalance": Opt(Num(null=True)),
    "stages": Opt(Rows({"stage": STAGE, "gpu": Num(), "parts": Map(Num(), 1000)}, 64)),
    "balance": Opt(Rows({"option": str, "how": str, "stages_gpu": Rows(Num(), MAX_PP),
                         "cost": str}, 16)),
    "gpu": Opt({"capacity": Num(null=True), "source": str}),
    "job": Opt({"pp": Opt(Num(1, MAX_PP, integer=True))}),
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
            if key not in value and isinstance(inner, Opt):
                continue
            found = f"no {path}" if key not in value else \
                problem(value[key], getattr(inner, "shape", inner), path)
            if found:
                return found
        return None
    if isinstance(shape, (Map, Rows)):          # an object's values, or a list's rows
        kind, what = (dict, "an object") if isinstance(shape, Map) else (list, "a list")
        if not isinstance(value, kind):
            return f"{where}: {_show(value)} is not {what}"
        if len(value) > shape.most:
            return f"{where}: {len(value)} entries, more than the {shape.most} a report takes"
        items = ((_show(k), v) for k, v in value.items()) if isinstance(shape, Map) \
            else enumerate(value)
        inner = shape.value if isinstance(shape, Map) else shape.row
        return next(filter(None, (problem(v, inner, f"{where}[{k}]") for k, v in items)), None)
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


def _host_share(plan: dict) -> list[tuple[str, float]]:
    """One rank's share of the planned stage's host parts on each host tier, and what the
    plan found no room for: (tier, bytes), the tiers holding any."""
    held = {"DRAM": 0.0, "slow tier": 0.0, "fits nowhere": 0.0}
    for p in plan["parts"]:
        whole = p.get("host_bytes") or p["dram"] + p["slow"]    # one host's: all its ranks'
        if p["where"] != "host" or whole <= 0:
            continue
        dram, slow = (p["bytes"] * min(p[k] / whole, 1.0) for k in ("dram", "slow"))
        held["DRAM"] += dram
        held["slow tier"] += slow
        held["fits nowhere"] += max(p["bytes"] - dram - slow, 0.0)
    return [(tier, b) for tier, b in held.items() if b > 0]


def _stage_parts(stages: list[dict]) -> tuple[list[str], dict]:
    """The parts the stage bars stack, in the plan's order, and each one's colour: the
    known ones theirs, others the spare colours, and past those one summed "other parts"."""
    names = list(dict.fromkeys(n for st in stages for n in st["parts"]))
    spare = iter(SPARE_COLOURS)
    colours = {}
    for n in names:
        colour = PART_COLOURS.get(n) or next(spare, None)
        if colour is not None:
            colours[n] = colour
    rest = len(names) - len(colours)
    if rest:
        colours[f"{rest} other parts"] = NOWHERE
    return list(colours), colours


def _stages_figure(plan: dict) -> Figure | None:
    """Every pipeline stage's GPU parts stacked, the GPU's capacity as a line, the planned
    stage's host parts below the axis in the host tiers' colours, and, in a second panel,
    each way to even the stages out by its stages' peaks."""
    stages = plan.get("stages") or []
    if len(stages) < 2:
        return None
    gpu = plan.get("gpu") or {}
    capacity = gpu.get("capacity")
    balance = [o for o in plan.get("balance") or [] if o["stages_gpu"]]
    numbers = [st["stage"] for st in stages]
    planned = plan.get("stage")
    host = _host_share(plan) if planned in numbers else []
    names, colours = _stage_parts(stages)
    cap_name = "one GPU's capacity"
    first = names + [HOST_NAMES[t] for t, _ in host] + ([cap_name] if capacity else [])
    second = ["as planned", *(o["option"] for o in balance)] + ([cap_name] if capacity else [])
    g = grid(2 if balance else 1, 7.5, [first, second][:2 if balance else 1],
             panel_height=3.8, title="Each pipeline stage's GPU bytes by part, against one "
                                     "GPU's capacity" + (", and the ways to even the stages "
                                                         "out" if balance else ""))
    xs = range(len(stages))
    ticks = [f"stage {s}" + ("\ndecides the fit" if s == planned else "") for s in numbers]
    ax = g.axes[0]
    drawn = set()
    for x, st in zip(xs, stages):
        bottom = 0.0
        for n in names:
            b = st["parts"].get(n)
            if b is None and n not in PART_COLOURS and n.endswith(" other parts"):
                b = sum(v for k, v in st["parts"].items() if k not in colours)
            if not b:
                continue
            ax.bar(x, b / GIB, bottom=bottom / GIB, width=0.6, color=colours[n],
                   edgecolor="white", linewidth=0.5, label=None if n in drawn else n)
            drawn.add(n)
            bottom += b
        ax.annotate(f"{st['gpu'] / GIB:.1f}", (x, max(bottom, st["gpu"]) / GIB),
                    xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                    fontsize=9)
    if host:
        x, below = numbers.index(planned), 0.0
        for tier, b in host:
            ax.bar(x, -b / GIB, bottom=-below / GIB, width=0.6,
                   color=COLOURS.get(tier, NOWHERE), edgecolor="white", linewidth=0.5,
                   hatch="//" if tier == "fits nowhere" else None, label=HOST_NAMES[tier])
            below += b
        ax.axhline(0, color="black", linewidth=0.8)
        ax.yaxis.set_major_formatter(lambda v, pos=None: f"{abs(v):g}")
        ax.set_ylabel("GiB on one GPU\n(below 0: one rank's host parts)")
    else:
        ax.set_ylabel("GiB on one GPU")
    for a in g.axes:
        if capacity:
            a.axhline(capacity / GIB, color="black", linestyle="--", linewidth=1.2,
                      label=cap_name)
        a.set_xticks(list(xs), ticks)
        a.margins(y=0.08)
    ratio = plan.get("imbalance")
    g.title(ax, "As planned: each stage's GPU parts"
            + (f" (the largest over the smallest: {ratio:.2f}x)" if ratio else ""))
    if balance:
        ax2 = g.axes[1]
        ax2.bar(list(xs), [st["gpu"] / GIB for st in stages], width=0.7, color="#e3e3e3",
                edgecolor="#bdbdbd", label="as planned")
        step = 0.6 / len(balance)
        for i, o in enumerate(balance):
            peaks = [(x, o["stages_gpu"][s]) for x, s in zip(xs, numbers)
                     if s < len(o["stages_gpu"])]
            ax2.plot([x - 0.3 + step * (i + 0.5) for x, _ in peaks],
                     [b / GIB for _, b in peaks], linestyle="none",
                     marker=OPTION_MARKERS[i % len(OPTION_MARKERS)], markersize=7,
                     color=SPARE_COLOURS[1:][i % (len(SPARE_COLOURS) - 1)],
                     markeredgecolor="black", markeredgewidth=0.5, label=o["option"])
        ax2.set_ylabel("GiB on one GPU")
        ax2.set_ylim(bottom=0)
        g.title(ax2, "Each way to even the stages out, alone: its stages' GPU peaks")
    g.legend([first, second])       # each panel's in its names' order, not lines first
    pp = (plan.get("job") or {}).get("pp") or max((len(o["stages_gpu"]) for o in balance),
                                                   default=len(stages))
    skipped = pp - len(stages)
    source = gpu.get("source") or "not known"
    caption = (f"One bar per pipeline stage of one data-parallel rank ({pp} stages"
               + (f"; the {skipped} between those drawn are not drawn" if skipped > 0 else "")
               + "): its GPU parts' bytes stacked, the total over the bar. Sizes are the "
               "plan's formulas (cxlbench plan's per-stage table), not measurements. "
               + (f"The dashed line: one GPU's capacity ({source}). " if capacity else
                  f"One GPU's capacity is not known ({source}), so no line. ")
               + (f"Stage {planned} decides the GPU fit; the plan's other figures and tables "
                  "are of it. " if planned in numbers else "")
               + ("Below 0, in the host tiers' colours: one rank's share of that stage's "
                  "host parts, as the plan placed them (the other stages' host parts are not "
                  "placed). " if host else "")
               + ("Second panel: each way to even the stages out, taken alone: its stages' "
                  "GPU peaks (markers) over the stages as planned (grey); the table below "
                  "says how each is done and what it costs." if balance else ""))
    return Figure("plan-stages", "plan", "GPU bytes per pipeline stage", caption, png(g.fig))


def _balance_table(plan: dict) -> Table | None:
    balance = [o for o in plan.get("balance") or [] if o["stages_gpu"]]
    if not balance or len(plan.get("stages") or []) < 2:
        return None
    capacity = (plan.get("gpu") or {}).get("capacity")
    return Table(["way to even the stages out", "how", "largest stage (GiB)",
                  "fits one GPU", "what it costs"],
                 [[o["option"], o["how"], round(max(o["stages_gpu"]) / GIB, 2),
                   "not known" if not capacity else
                   "yes" if max(o["stages_gpu"]) <= capacity else "no", o["cost"]]
                  for o in balance])


def section(plan: dict) -> list:
    with plt.rc_context(FONTS):
        figures = [f for f in (_bytes_figure(plan), _time_figure(plan)) if f is not None]
        stages = _stages_figure(plan)
    balance = _balance_table(plan) if stages else None
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
            *figures, *([stages] if stages else []), *([balance] if balance else []),
            *([parts] if plan["parts"] else []), *([work] if plan["work"] else [])]
