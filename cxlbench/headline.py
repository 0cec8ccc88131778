"""The answer first: what a reader came for, from a machine's runs. Per memory node its
idle latency, peak read and write bandwidth at one and at every thread, latency under load,
the cache levels its latency sweep showed, and how it compares with the fastest node; per
ML workload its throughput on each node and the slowdown on each slower one; per tiering
scenario each policy's knee. Every cell says where it came from (measured here, firmware,
an assumed profile, the model) or, where it has no value, why in a word.

Built from summary records (what `cxlbench run --json` prints, one per case and metric);
`cxlbench run` prints it after its summary and every report opens with it."""
from __future__ import annotations

import statistics
import textwrap
from dataclasses import dataclass, field

from . import analysis
from .paramtext import resolved
from .tiering.calibration import profiles
from .units import format_list, format_size, parse_list, quantity

MEASURED, FIRMWARE, MODELLED = "measured", "firmware", "modelled"
# Each ML benchmark's figure of merit (the tiering benchmark's is its throughput).
THROUGHPUT = {"embedding": "lookups", "kvcache": "tokens", "optimizer": "params",
              "checkpoint": "bandwidth"}
SLOWDOWN = ("slowdown: the fast node's throughput over the slower one's, less 1 (0 %: as "
            "fast; 100 %: half the throughput, the same work taking twice as long)")
WIDTH = 100                     # the console's notes wrap here
NODE_COLUMNS = ("idle latency", "read, 1 thread", "read, all threads", "write, 1 thread",
                "write, all threads", "loaded latency", "caches", "against the fastest")


@dataclass
class Cell:
    """One figure: its value and unit, or why it has none; `note` says how it was got
    (the working set, the threads)."""
    value: float | None = None
    unit: str = ""
    why: str = "not run"
    note: str = ""
    memory: bool = True             # a figure of the memory (not of a cache)

    def text(self, notes: bool = True) -> str:
        if self.value is None:
            return self.why
        figure = f"{self.value:+.0f} %" if self.unit == "%" else quantity(self.value, self.unit)
        return figure + (f" ({self.note})" if notes and self.note
                                                  else "")


@dataclass
class NodeRow:
    name: str                       # "node 0 (CPUs 0-1)", "slower tier"
    source: str                     # measured / firmware: ... / assumed: profile ...
    cells: dict[str, Cell | str] = field(default_factory=dict)   # NODE_COLUMNS
    node: int | None = None


@dataclass
class WorkloadRow:
    job: str                        # the suite's job: one setting of a workload
    benchmark: str
    metric: str
    per_node: dict[int, Cell]       # throughput on each node
    slowdown: dict[str, tuple[Cell, str]]   # slower node -> (slowdown, its source)


@dataclass
class Headline:
    nodes: list[NodeRow]
    workloads: list[WorkloadRow]
    knees: list[dict]               # per tiering scenario: workload, engine, tiers, knees
    notes: list[str]                # one-node words, what the slower rows stand on
    one_node: bool

    def to_dict(self) -> dict:
        def cell(c):
            return c.__dict__ if isinstance(c, Cell) else c
        return {"nodes": [{"name": r.name, "node": r.node, "source": r.source,
                           "cells": {k: cell(v) for k, v in r.cells.items()}}
                          for r in self.nodes],
                "workloads": [{"job": w.job, "benchmark": w.benchmark, "metric": w.metric,
                               "per_node": {str(n): c.__dict__ for n, c in w.per_node.items()},
                               "slowdown": {k: {**c.__dict__, "source": s}
                                            for k, (c, s) in w.slowdown.items()}}
                              for w in self.workloads],
                "knees": self.knees, "notes": self.notes, "one_node": self.one_node}


def node_of(params: dict, topology: dict, cpus) -> int | None:
    """The one node a case's memory was on: bind:N of mem or of a buffer's mem.<buffer>
    (the buffer under study), or `local` on a machine of one memory node, or the node
    of the CPUs it ran on; None where it spans several or cannot be told."""
    specs = [str(v) for k, v in params.items() if k == "mem" or k.startswith("mem.")]
    bound = {s.split(":", 1)[1] for s in specs if s.startswith("bind:")}
    if bound:
        only = bound.pop() if len(bound) == 1 else ""
        return int(only) if only.isdigit() else None        # bind:0-1 spans two
    if any(s != "local" for s in specs):
        return None
    nodes = [n for n in topology.get("nodes", []) if n.get("mem_total")]
    if len(nodes) == 1:
        return nodes[0]["id"]
    first = _cpu_list(cpus)[:1]
    return next((n["id"] for n in nodes if first and first[0] in n.get("cpus", [])), None)


def _cpu_list(cpus) -> list[int]:
    if isinstance(cpus, (list, tuple)):
        return list(cpus)
    try:
        return parse_list(str(cpus)) if cpus not in (None, "", "nan") else []
    except ValueError:
        return []


def build(records: list[dict], topology: dict, knee: float = analysis.KNEE_SLOWDOWN,
          profile: dict | None = None) -> Headline:
    """The headline of one machine's records. `profile`: {"name", "latency",
    "bandwidth", "description"}, the assumed slow tier a machine of one memory node is
    shown beside (None: the first of tiering/profiles.toml)."""
    ok = [r for r in records if r.get("status") == "ok" and r.get("median") is not None]
    memory = [n for n in topology.get("nodes", []) if n.get("mem_total")]
    levels = analysis.sweep_cache_levels(ok, (topology.get("cpu") or {}).get("caches", []))
    rows = [_node_row(n, ok, topology, levels) for n in memory]
    one_node = len(memory) == 1
    notes: list[str] = []
    _against_fastest(rows)
    scenarios = analysis.tiering_scenarios(ok, knee)
    if one_node and rows:
        name, p = next(iter(profiles().items())) if profile is None else \
            (profile["name"], profile)
        assumed = _assumed_row(rows[0], name, p)
        scaled = any(isinstance(c, Cell) for c in assumed.cells.values())
        if scaled:
            rows.append(assumed)
        notes.append("One memory node: nothing here is slower to measure. "
                     + (f"The slower tier's column is node {rows[0].node}'s measured memory "
                        f"figures scaled by the assumed profile {name} ({p['description']}). "
                        if scaled else "")
                     + "Slowdowns come from the tier model (cxlbench calibrate, then "
                     "cxlbench tiering) or from emulated far memory (cxlbench emulate "
                     "--topology cxl -- run ml).")
    workloads = _workloads(ok, topology, [n["id"] for n in memory], scenarios)
    if workloads:
        notes.append(SLOWDOWN)
    knees = [{"workload": sc["workload"], "engine": sc["engine"], "tiers": sc["tiers"],
              "within": sc["knee_within"],
              "knees": {name: (row["knee"] if row["held"] else "not held to a share")
                        for name, row in sc["policies"].items()}}
             for sc in scenarios if sc["policies"] and sc["all_fast"]]
    return Headline([r for r in rows if any(isinstance(c, Cell) and c.value is not None
                                            for c in r.cells.values())],
                    workloads, knees, notes, one_node)


def _pick(ok: list[dict], node: int, topology: dict, bench: str, metric: str,
          where=lambda p: True) -> list[dict]:
    return [r for r in ok if r["benchmark"] == bench and r["metric"] == metric
            and where(r["parameters"])
            and node_of(r["parameters"], topology, r.get("cpus")) == node]


def _threads(r: dict) -> int | None:
    t = resolved(r["parameters"], r.get("cpus")).get("threads")
    return t if isinstance(t, int) else None


def _node_row(n: dict, ok: list[dict], topology: dict, levels: list[dict]) -> NodeRow:
    node = n["id"]
    cpus = n.get("cpus") or []
    row = NodeRow(f"node {node} " + (f"(CPUs {format_list(cpus)})" if cpus else "(no CPUs)"),
                  MEASURED, node=node)
    chase = _pick(ok, node, topology, "chase", "latency")
    if chase:
        big = max(chase, key=lambda r: (r["parameters"].get("size", 0), -r["median"]))
        size = int(big["parameters"]["size"])
        llc = max((c.get("size") or 0 for c in (topology.get("cpu") or {}).get("caches", [])),
                  default=0)
        # A sweep that stops inside the last cache measured the cache, not the memory.
        row.cells["idle latency"] = Cell(big["median"], big["unit"], note=(
            f"chase over {format_size(size)}" + (
                f", within the {format_size(llc)} last-level cache: not memory's"
                if size <= llc else "")), memory=size > llc)
    else:
        idle = _pick(ok, node, topology, "loaded_latency", "latency",
                     lambda p: p.get("delay") == "idle")
        row.cells["idle latency"] = Cell(idle[0]["median"], idle[0]["unit"],
                                         note="loaded-latency probe, no load") if idle \
            else Cell()
    most = max((len(x.get("cpus") or []) for x in topology.get("nodes", [])), default=1)
    for op, kernels in (("read", ("read",)), ("write", ("write", "write_nt"))):
        bw = _pick(ok, node, topology, "bandwidth", "bandwidth",
                   lambda p: p.get("kernel") in kernels)
        one = [r for r in bw if _threads(r) == 1]
        many = [r for r in bw if (_threads(r) or 0) > 1]
        row.cells[f"{op}, 1 thread"] = _peak(one)
        row.cells[f"{op}, all threads"] = _peak(many, threads=True) if many else \
            Cell(why="one CPU" if most == 1 and bw else "not run")
    loaded = _pick(ok, node, topology, "loaded_latency", "latency",
                   lambda p: p.get("delay") != "idle")
    if loaded:
        hardest = min(loaded, key=lambda r: float(r["parameters"]["delay"]))
        gbs = next((r["median"] for r in ok if r["case"] == hardest["case"]
                    and r["metric"] == "bandwidth"), None)
        row.cells["loaded latency"] = Cell(hardest["median"], hardest["unit"], note=(
            f"at {quantity(gbs, 'GB/s')} of load" if gbs else "under load"))
    else:
        row.cells["loaded latency"] = Cell()
    found = [s for s in levels if s["mem"] and node_of({"mem": s["mem"]}, topology, None)
             == node]
    row.cells["caches"] = ", ".join(
        f"{lv['level']} " + (format_size(lv["detected"], exact=False) if lv["detected"]
                             else "not seen") for lv in found[0]["levels"]) if found \
        else "not run"
    return row


def _peak(rows: list[dict], threads: bool = False) -> Cell:
    if not rows:
        return Cell()
    best = max(rows, key=lambda r: r["median"])
    kernel = best["parameters"].get("kernel")
    note = f"{kernel}" + (f", {_threads(best)} threads" if threads else "")
    return Cell(best["median"], best["unit"], note=note)


def _against_fastest(rows: list[NodeRow]) -> None:
    """Each node's idle latency and all-thread read bandwidth as multiples of the best
    node's."""
    def value(row, column):
        c = row.cells.get(column)
        return c.value if isinstance(c, Cell) else None
    lat = [value(r, "idle latency") for r in rows]
    bw = [value(r, "read, all threads") or value(r, "read, 1 thread") for r in rows]
    best_lat = min((v for v in lat if v), default=None)
    best_bw = max((v for v in bw if v), default=None)
    for row, la, b in zip(rows, lat, bw):
        if len(rows) == 1:
            row.cells["against the fastest"] = "the only node"
            continue
        parts = ([f"{la / best_lat:.2g}x latency"] if la and best_lat else []) + \
            ([f"{b / best_bw:.2g}x bandwidth"] if b and best_bw else [])
        row.cells["against the fastest"] = ", ".join(parts) or "not run"


def _assumed_row(fast: NodeRow, name: str, p: dict) -> NodeRow:
    """A slower tier this machine lacks: the fast node's latency and bandwidth scaled by
    the profile (its caches are the CPU's)."""
    row = NodeRow(f"slower tier ({name})", f"assumed: profile {name}")
    for column in NODE_COLUMNS:
        c = fast.cells.get(column)
        if not isinstance(c, Cell) or c.value is None or not c.memory:
            row.cells[column] = "no figure"
        elif column == "loaded latency":
            # a quarter of the bandwidth under the same load queues far more: a profile
            # has no loaded curve to say how much
            row.cells[column] = "no figure (the profile has no loaded curve)"
        elif column == "idle latency":
            row.cells[column] = Cell(c.value * p["latency"], c.unit,
                                     note=f"{p['latency']:g}x node {fast.node}")
        elif column.startswith(("read", "write")):
            row.cells[column] = Cell(c.value * p["bandwidth"], c.unit,
                                     note=f"{p['bandwidth']:g}x node {fast.node}")
    row.cells["caches"] = "the CPU's"
    row.cells["against the fastest"] = f"{p['latency']:g}x latency, {p['bandwidth']:g}x " \
                                       "bandwidth"
    return row


PLACEMENT = ("mem", "page")


def _workloads(ok: list[dict], topology: dict, nodes: list[int],
               scenarios: list[dict]) -> list[WorkloadRow]:
    """A row per ML job: its figure of merit on each node (a range over the job's cases),
    and the slowdown on each slower node: measured where the same case ran there, else
    the model's all-slow against all-fast for that workload where tiering ran."""
    calibrated = any((r.get("model") or {}).get("slower") for r in ok)
    jobs: dict[str, list[dict]] = {}
    for r in ok:
        if THROUGHPUT.get(r["benchmark"]) == r["metric"]:
            jobs.setdefault(r["case"].rsplit("/", 1)[0], []).append(r)
    modelled = {sc["workload"]: sc for sc in scenarios if sc["all_fast"] and sc["all_slow"]}
    out = []
    for job, recs in jobs.items():
        by_node: dict[int, dict[str, float]] = {}
        for r in recs:
            node = node_of(r["parameters"], topology, r.get("cpus"))
            if node is not None:
                key = repr(sorted((k, str(v)) for k, v in r["parameters"].items()
                                  if k not in PLACEMENT and not k.startswith(("mem.",
                                                                              "page."))))
                by_node.setdefault(node, {})[key] = r["median"]
        if not by_node:
            continue
        unit = recs[0]["unit"]
        per_node = {n: _span(list(by_node[n].values()), unit) if n in by_node else Cell()
                    for n in nodes}
        fast = max(by_node, key=lambda n: statistics.median(by_node[n].values()))
        slowdown = {}
        for n in nodes:
            if n == fast:
                continue
            pairs = [by_node[fast][k] / v - 1 for k, v in by_node.get(n, {}).items()
                     if k in by_node[fast] and v]
            slowdown[f"node {n}"] = (_span(pairs, "%"), MEASURED) if pairs else \
                (Cell(why="not run"), "")
        bench = recs[0]["benchmark"]
        if not slowdown or all(c.value is None for c, _ in slowdown.values()):
            slowdown = _modelled(recs, bench, modelled.get(bench), len(nodes),
                                 calibrated) or slowdown
        out.append(WorkloadRow(job, bench, THROUGHPUT[bench], per_node, slowdown))
    return out


def _modelled(recs: list[dict], bench: str, sc: dict | None, nodes: int,
              calibrated: bool) -> dict[str, tuple[Cell, str]]:
    """The slowdown on a slower tier this machine could not measure: the calibrated
    model's for each case (its node under the default profile), else tiering's all-slow
    against all-fast for the workload; empty where neither ran."""
    slower = [r["model"]["slower"] for r in recs if (r.get("model") or {}).get("slower")]
    if slower:
        p = slower[0]["profile"]
        return {"slower tier": (_span([s["slowdown"] for s in slower], "%"),
                                f"{MODELLED}: calibrated node under profile {p}")}
    if sc is not None:
        what = MODELLED if "model" in sc["engine"] else MEASURED
        return {"slower tier": (Cell(sc["all_fast"] / sc["all_slow"] * 100 - 100, "%",
                                     note=f"cxlbench tiering's {bench} at its own settings"),
                                f"{what}: tiering's all-slow against all-fast, tiers "
                                f"{sc['tiers'] or 'not recorded'}")}
    if nodes == 1:
        why = "not modelled (these settings)" if calibrated else \
            "no calibration: cxlbench calibrate"
        return {"slower tier": (Cell(why=why), "")}
    return {}


def _span(values: list[float], unit: str) -> Cell:
    """One value, or the median of several with their range in the note."""
    if unit == "%":
        values = [v * 100 for v in values]
    mid = statistics.median(values)
    note = f"{len(values)} cases, {Cell(min(values), unit).text()} to " \
           f"{Cell(max(values), unit).text()}" if len(values) > 1 else ""
    return Cell(mid, unit, note=note)


def node_table(h: Headline, notes: bool = True) -> tuple[list[str], list[list[str]]]:
    """The memory nodes side by side, a column each (as the CXL papers' first table):
    a row per figure, the first saying where the column's figures came from."""
    headers = ["memory", *(r.name for r in h.nodes)]
    rows = [["source", *(r.source for r in h.nodes)]]
    for column in NODE_COLUMNS:
        cells = [r.cells.get(column, "") for r in h.nodes]
        if not any(_has_figure(c) for r, c in zip(h.nodes, cells) if r.node is not None):
            continue            # a figure no run measured: one line saying so is enough
        rows.append([column, *(c.text(notes) if isinstance(c, Cell) else str(c)
                               for c in cells)])
    missing = [c for c in NODE_COLUMNS if c not in {row[0] for row in rows}]
    if missing:
        rows.append(["not run", *("; ".join(missing) if i == 0 else ""
                                  for i in range(len(h.nodes)))])
    return headers, rows


def _has_figure(c: Cell | str) -> bool:
    return c.value is not None if isinstance(c, Cell) else c not in ("", "not run")


def workload_table(h: Headline, notes: bool = True) -> tuple[list[str], list[list[str]]]:
    """A row per ML job: its figure of merit on each node, then the slowdown on each
    slower node or tier with the slowdown's source."""
    nodes = sorted({n for w in h.workloads for n in w.per_node})
    slower = list(dict.fromkeys(k for w in h.workloads for k in w.slowdown))
    headers = ["ML workload (job)", "figure", *(f"node {n}" for n in nodes),
               *(f"slowdown, {k}" for k in slower)]
    rows = []
    for w in h.workloads:
        cells = [w.job, f"{w.metric}", *(w.per_node.get(n, Cell()).text(notes)
                                          for n in nodes)]
        for k in slower:
            cell, source = w.slowdown.get(k, (Cell(why="-"), ""))
            word = f" {source.split(':')[0]}" if source and cell.value is not None else ""
            cells.append(cell.text(False) + word
                         + (f" ({cell.note})" if notes and cell.note else ""))
        rows.append(cells)
    return headers, rows


def knee_lines(h: Headline) -> list[str]:
    out = []
    for k in h.knees:
        how = "predicted by the model" if "model" in k["engine"] else "measured"
        shares = ", ".join(f"{name} {knee:g}" if isinstance(knee, float) else
                           f"{name} {'none' if knee is None else knee}"
                           for name, knee in k["knees"].items())
        out.append(f"tiering {k['workload']}: the smallest fast share within "
                   f"{k['within']:.0%} of all-fast ({how}; tiers {k['tiers'] or 'not recorded'}):"
                   f" {shares}")
    return out


def lines(h: Headline) -> list[str]:
    """The headline as the terminal prints it after a run: figures without their notes,
    each table's sources in its first row or beside each slowdown."""
    out = ["", "HEADLINE"]
    out += [line for n in h.notes if n != SLOWDOWN
            for line in textwrap.wrap(n, WIDTH, initial_indent="  ", subsequent_indent="  ")]
    if h.nodes:
        out += _aligned(*node_table(h, notes=False))
    if h.workloads:
        out.append("")
        out += _aligned(*workload_table(h, notes=False))
        out += textwrap.wrap(SLOWDOWN, WIDTH, initial_indent="  ", subsequent_indent="  ")
    knees = knee_lines(h)
    if knees:
        out.append("")
        out += [line for k in knees for line in
                textwrap.wrap(k, WIDTH, initial_indent="  ", subsequent_indent="    ")]
    return out


def _aligned(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    return ["  " + "  ".join(f"{str(x):<{w}}" for x, w in zip(line, widths)).rstrip()
            for line in (headers, *rows)]
