"""The answer first: what a reader came for, from a machine's runs. Per memory node its
idle latency, peak read and write bandwidth at one and at every thread, latency under load,
the cache levels its latency sweep showed, and how it compares with the fastest node; per
ML job its throughput on each node and the slowdown on each slower one; per tiering
scenario its bounds and each policy's knee. Every column or cell says where it came from
(measured here, the firmware's HMAT, an assumed profile, the model) or, where it has no
value, why in a word.

Built from summary records (what `cxlbench run --json` prints, one per case and metric);
`cxlbench run` prints it after its summary, `cxlbench report` before its paths, and every
report opens with it."""
from __future__ import annotations

import statistics
import textwrap
from dataclasses import asdict, dataclass, field

from . import analysis
from .options import split_buffer_option
from .paramtext import NOT_MEASURED, resolved
from .tiering.calibration import default_profile, profiles
from .tiering.checked import UNTRUSTED
from .units import format_list, format_size, parse_list, quantity

MEASURED, FIRMWARE, MODELLED = "measured", "firmware", "modelled"
# Each ML benchmark's figure of merit.
THROUGHPUT = {"embedding": "lookups", "kvcache": "tokens", "optimizer": "params",
              "checkpoint": "bandwidth"}
SLOWDOWN = ("slowdown: the reference node's throughput over the slower node's or tier's, "
            "less 1 (0 %: as fast; 100 %: half the throughput, the same work taking twice "
            "as long)")
CHECKED = ("model against measurement here: the model's throughput for the same cases on "
           "this node, over the measured, less 1 (how far to trust its slowdowns)")
EMULATE = "cxlbench emulate --topology cxl -- run SUITE"
WIDTH = 100                     # the console's notes wrap here
# Suites whose cases are the model's inputs or its check, not a first look at a machine.
NOT_HEADLINED = ("calibrate", "model-check")
NODE_COLUMNS = ("idle latency", "read, 1 thread", "read, all threads", "write, 1 thread",
                "write, all threads", "copy, best method", "loaded latency",
                "p99.9 latency, idle", "p99.9 latency, loaded", "bandwidth lost to other traffic",
                "caches", "against the fastest")
TAIL = "p99.9"                  # the tail the headline shows (the CXL papers' figure)
# Every way cxlbench copies: hand-written loads and stores, the string instruction, libc's.
COPIES = ("copy", "copy_nt", "copy_rep", "copy_libc")
# A chase that measures one load's idle latency: one chain, no timed batches, every line
# of a page (chase's defaults); the others measure something else per load.
PLAIN_CHASE = {"chains": 1, "dist": False, "lines_per_page": 0}


@dataclass
class Cell:
    """One figure: its value and unit, or why it has none; `note` says how it was got
    (the working set, the threads); `cache`: a latency of a cache, not of the memory."""
    value: float | None = None
    unit: str = ""
    why: str = "not run"
    note: str = ""
    cache: bool = False

    def text(self, notes: bool = True) -> str:
        if self.value is None:
            return self.why
        figure = f"{self.value:+.0f} %" if self.unit == "%" else quantity(self.value, self.unit)
        if notes and self.note:
            return f"{figure} ({self.note})"
        return figure + (" (a cache's)" if self.cache else "")


@dataclass
class NodeRow:
    name: str                       # "node 0 (CPUs 0-1)", "slower tier (cxl-asic)"
    source: str                     # measured / firmware: HMAT / assumed: profile NAME
    cells: dict[str, Cell | str] = field(default_factory=dict)   # NODE_COLUMNS
    node: int | None = None


@dataclass
class WorkloadRow:
    job: str                        # the suite's job: one setting of a workload
    benchmark: str
    metric: str
    per_node: dict[int, Cell]       # its figure on each node
    slowdown: dict[str, tuple[Cell, str]]   # "node N" or "slower tier" -> (cell, source)
    # the model against the measurement here, where the slowdown is the model's: a
    # prediction is worth what the same model got right on the node it could check
    check: Cell | None = None


@dataclass
class Headline:
    nodes: list[NodeRow]
    workloads: list[WorkloadRow]
    tiering: list[dict]             # per scenario: workload, how, bounds, tiers, knees
    notes: list[str]                # the one-node words
    one_node: bool
    reference: int | None           # the node slowdowns are against

    @property
    def empty(self) -> bool:
        return not (self.nodes or self.workloads or self.tiering)

    def to_dict(self) -> dict:
        def cell(c):
            return asdict(c) if isinstance(c, Cell) else c
        return {"nodes": [{"name": r.name, "node": r.node, "source": r.source,
                           "cells": {k: cell(v) for k, v in r.cells.items()}}
                          for r in self.nodes],
                "workloads": [{"job": w.job, "benchmark": w.benchmark, "metric": w.metric,
                               "per_node": {str(n): asdict(c) for n, c in w.per_node.items()},
                               "slowdown": {k: {**asdict(c), "source": s}
                                            for k, (c, s) in w.slowdown.items()},
                               "model_error_here": asdict(w.check) if w.check else None}
                              for w in self.workloads],
                "tiering": self.tiering, "notes": self.notes, "one_node": self.one_node,
                "reference": self.reference}


def _cpu_list(cpus) -> list[int]:
    if isinstance(cpus, (list, tuple)):
        return list(cpus)
    try:
        return parse_list(str(cpus)) if cpus not in (None, "", "nan") else []
    except ValueError:
        return []


def node_of(params: dict, topology: dict, cpus) -> int | None:
    """The one node the memory a case studies was on: the node its mem.<buffer> options
    bind (the buffer placed apart is the one under study), else mem's; `local` is the
    node of every CPU the case ran on. None where that spans nodes or cannot be told."""
    own = {str(v) for k, v in params.items()
           if (split_buffer_option(k) or ("",))[0] == "mem" and v is not None}
    specs = own or {str(params.get("mem", "local"))}
    if len(specs) != 1:
        return None                 # buffers under study on different nodes
    (spec,) = specs
    if spec.startswith("bind:"):
        only = spec.split(":", 1)[1]
        return int(only) if only.isdigit() else None        # bind:0-1 spans two
    if spec != "local":
        return None
    nodes = [n for n in topology.get("nodes", []) if n.get("mem_total")]
    if len(nodes) == 1:
        return nodes[0]["id"]
    ran = set(_cpu_list(cpus))
    return next((n["id"] for n in nodes if ran and ran <= set(n.get("cpus", []))), None)


def build(records: list[dict], topology: dict, knee: float = analysis.KNEE_SLOWDOWN
          ) -> Headline:
    """The headline of one machine's records (of one run each suite: a case id is named
    with its run_dir where several runs are merged)."""
    ok = [r for r in records if r.get("status") == "ok" and r.get("median") is not None]
    failed = [r for r in records if r.get("status") not in ("ok", "unsupported")]
    memory = [n for n in topology.get("nodes", []) if n.get("mem_total")]
    caches = (topology.get("cpu") or {}).get("caches", [])
    rows = [_node_row(n, ok, failed, topology, caches) for n in memory]
    rows = [r for r in rows if _any_figure(r)] + \
        [f for n, r in zip(memory, rows) if not _any_figure(r) for f in _firmware_row(n)]
    reference = _reference(rows, memory)
    against_fastest(rows)
    one_node = len(memory) == 1
    notes: list[str] = []
    if one_node and rows:
        name = default_profile()
        assumed = _assumed_row(rows[0], name, profiles()[name])
        if _any_figure(assumed):
            rows.append(assumed)
    workloads = _workloads(ok, topology, [n["id"] for n in memory], reference)
    tiering = _tiering(ok, knee)
    if one_node and (rows or workloads):
        notes.append("One memory node: nothing here is slower to measure. "
                     + ("The slower tier's column is this node's memory figures under the "
                        f"assumed profile {default_profile()}. " if len(rows) > 1 else "")
                     + "Slowdowns come from the tier model (cxlbench calibrate measures "
                     f"its figures here) or from emulated far memory ({EMULATE}).")
    return Headline(rows, workloads, tiering, notes, one_node, reference)


def _any_figure(row: NodeRow) -> bool:
    return any(isinstance(c, Cell) and c.value is not None for c in row.cells.values())


# Benchmarks whose load (mem.load) is what they put beside the memory they study: the
# chased buffer's node is theirs, not the load's.
LOADED = ("loaded_latency", "interference")


def _where(r: dict, topology: dict) -> int | None:
    p = r["parameters"]
    if r["benchmark"] in LOADED:
        p = {k: v for k, v in p.items() if k != "mem.load"}
    return node_of(p, topology, r.get("cpus"))


def _cases(records: list[dict], node: int, topology: dict, bench: str,
           where=lambda p: True) -> list[dict]:
    """The records of `bench` on `node` whose parameters pass `where`."""
    return [r for r in records if r["benchmark"] == bench and where(r["parameters"])
            and _where(r, topology) == node]


def _plain(p: dict) -> bool:
    return all(p.get(k, v) == v for k, v in PLAIN_CHASE.items())


def _threads(r: dict) -> int | None:
    t = resolved(r["parameters"], r.get("cpus")).get("threads")
    return t if isinstance(t, int) else None


def _none(failed: list[dict], node: int, topology: dict, bench: str, where) -> Cell:
    """No figure: its cases failed, or none ran."""
    lost = _cases(failed, node, topology, bench, where)
    return Cell(why=f"failed ({len({r['case'] for r in lost})} cases)" if lost else "not run")


def _node_row(n: dict, ok: list[dict], failed: list[dict], topology: dict,
              caches: list[dict]) -> NodeRow:
    node, cpus = n["id"], n.get("cpus") or []
    row = NodeRow(f"node {node} " + (f"(CPUs {format_list(cpus)})" if cpus else "(no CPUs)"),
                  MEASURED, node=node)
    chase = [r for r in _cases(ok, node, topology, "chase", _plain) if r["metric"] == "latency"]
    llc = max((c.get("size") or 0 for c in caches), default=0)
    if chase:
        size = max(int(r["parameters"]["size"]) for r in chase)
        # at the largest size, the lowest: huge pages spare it the page walks of 4 KiB
        big = min((r for r in chase if int(r["parameters"]["size"]) == size),
                  key=lambda r: r["median"])
        inside = size <= llc        # a sweep that stops inside the last cache measured it
        row.cells["idle latency"] = Cell(big["median"], big["unit"], cache=inside, note=(
            f"chase over {format_size(size)}, {big['parameters'].get('page', '4k')} pages"
            + (f": inside the {format_size(llc)} last-level cache, a cache's latency"
               if inside else "")))
    else:
        idle = [r for r in _cases(ok, node, topology, "loaded_latency",
                                  lambda p: p.get("delay") == "idle")
                if r["metric"] == "latency"]
        row.cells["idle latency"] = Cell(idle[0]["median"], idle[0]["unit"],
                                         note="loaded-latency probe, no load") if idle \
            else _none(failed, node, topology, "chase", _plain)
    for op, kernels in (("read", ("read",)), ("write", ("write", "write_nt"))):
        def of(p, kernels=kernels):
            return p.get("kernel") in kernels
        bw = [r for r in _cases(ok, node, topology, "bandwidth", of) if r["metric"] == "bandwidth"]
        one = [r for r in bw if _threads(r) == 1]
        many = [r for r in bw if (_threads(r) or 0) > 1]
        gone = _none(failed, node, topology, "bandwidth", of)
        row.cells[f"{op}, 1 thread"] = _peak(one, False) if one else gone
        row.cells[f"{op}, all threads"] = _peak(many, True) if many else gone

    def copies(p):
        return p.get("kernel") in COPIES
    bw = [r for r in _cases(ok, node, topology, "bandwidth", copies) if r["metric"] == "bandwidth"]
    row.cells["copy, best method"] = _peak(bw, True) if bw else \
        _none(failed, node, topology, "bandwidth", copies)
    loaded = [r for r in _cases(ok, node, topology, "loaded_latency",
                                lambda p: p.get("delay") != "idle") if r["metric"] == "latency"]
    if loaded:
        hardest = _worst_hardest(loaded)
        gbs = _metric_of(ok, hardest, "bandwidth")
        row.cells["loaded latency"] = Cell(hardest["median"], hardest["unit"], note=(
            f"at {quantity(gbs, 'GB/s')} of {hardest['parameters'].get('mix')} load"
            if gbs else "under load"))
    else:
        row.cells["loaded latency"] = _none(failed, node, topology, "loaded_latency",
                                            lambda p: p.get("delay") != "idle")
    _tail_cells(row, ok, failed, topology)
    sweeps = analysis.sweep_cache_levels([r for r in chase], caches)
    row.cells["caches"] = ", ".join(
        f"{lv['level']} " + (format_size(lv["detected"], exact=False) if lv["detected"]
                             else "not seen") for lv in sweeps[0]["levels"]) if sweeps \
        else "not run"
    return row


def _timed(p: dict) -> bool:
    """A chase timed in batches, of one chain (chase's dist, or loaded latency's)."""
    return bool(p.get("dist")) and p.get("chains", 1) == 1 and not p.get("lines_per_page")


def _batches_note(r: dict) -> str:
    p = r["parameters"]
    batches = int(p["loads"] or 0) // int(p["batch"]) if p.get("loads") else 0
    above = f", {int(batches * 0.001)} above it a repetition" if batches else ""
    return f"batches of {p['batch']} loads{above}"


def _tail_cells(row: NodeRow, ok: list[dict], failed: list[dict], topology: dict) -> None:
    """The node's p99.9 latency idle and under the hardest load measured, and what another
    node's traffic (its own, where there is no other) took of its read bandwidth."""
    node = row.node
    timed = [r for b in ("chase", "loaded_latency") for r in _cases(
        ok, node, topology, b, lambda p: _timed(p) and p.get("delay", "idle") == "idle")]
    tail = [r for r in timed if r["metric"] == TAIL]
    if tail:
        size = max(int(r["parameters"]["size"]) for r in tail)
        best = min((r for r in tail if int(r["parameters"]["size"]) == size),
                   key=lambda r: r["median"])
        row.cells["p99.9 latency, idle"] = Cell(best["median"], best["unit"], note=(
            f"chase over {format_size(size)}, {_batches_note(best)}"))
    else:
        row.cells["p99.9 latency, idle"] = Cell(why="too few batches for p99.9") if timed \
            else _none(failed, node, topology, "loaded_latency", _timed)
    loaded = [r for r in _cases(ok, node, topology, "loaded_latency",
                                lambda p: _timed(p) and p.get("delay") != "idle")]
    tail = [r for r in loaded if r["metric"] == TAIL]
    if tail:
        worst = _worst_hardest(tail)
        gbs = _metric_of(ok, worst, "bandwidth")
        row.cells["p99.9 latency, loaded"] = Cell(worst["median"], worst["unit"], note=(
            f"beside {worst['parameters'].get('mix')} load"
            + (f" of {quantity(gbs, 'GB/s')}" if gbs else "")
            + f", pause {worst['parameters']['delay']}, the highest load measured; "
            + _batches_note(worst)))
    else:
        row.cells["p99.9 latency, loaded"] = Cell(why="too few batches for p99.9") \
            if loaded else Cell(why="not run")
    row.cells["bandwidth lost to other traffic"] = _interference_cell(
        ok, failed, node, topology, sum(1 for n in topology.get("nodes", [])
                                        if n.get("mem_total")) == 1)


def _worst_hardest(loaded: list[dict]) -> dict:
    """Of loaded-latency records, the highest at the hardest load (the shortest pause,
    then the most threads): the mix that costs the chase most."""
    def load(r):
        return float(r["parameters"]["delay"]), -(_threads(r) or 0)
    hardest = min(map(load, loaded))
    return max((r for r in loaded if load(r) == hardest), key=lambda r: r["median"])


def _metric_of(ok: list[dict], r: dict, metric: str) -> float | None:
    """Another metric of the case of record r."""
    return next((x["median"] for x in ok if x["metric"] == metric
                 and (x.get("run_dir"), x["case"]) == (r.get("run_dir"), r["case"])), None)


def _interference_cell(ok: list[dict], failed: list[dict], node: int, topology: dict,
                       one_node: bool) -> Cell:
    """The victim's read bandwidth (one thread's read stream) lost to the most aggressor
    threads measured: another node's traffic where some case had it (the worst mix),
    else its own node's."""
    mine = [(_aggressor(r, topology), r)
            for r in _cases(ok, node, topology, "interference")
            if r["metric"] == "bandwidth_loss"]
    if not mine:
        lost = _cases(failed, node, topology, "interference")
        return Cell(why=f"failed ({len({r['case'] for r in lost})} cases)" if lost
                    else "not run")
    other = [(a, r) for a, r in mine if a is not None and a != node]
    pool = other or mine
    most = max(_threads(r) or 0 for _, r in pool)
    aggressor, worst = max(((a, r) for a, r in pool if (_threads(r) or 0) == most),
                           key=lambda ar: ar[1]["median"])
    gbs = _metric_of(ok, worst, "aggressor_bandwidth")
    whose = f"node {aggressor}'s" if other else \
        "its own node's" + (" (no second node)" if one_node else "")
    return Cell(worst["median"], "%", note=(
        f"one thread's read stream, to {whose} {worst['parameters'].get('mix')} traffic"
        + (f" of {quantity(gbs, 'GB/s')}" if gbs else "") + f", {_thread_count(worst)}"))


def _aggressor(r: dict, topology: dict) -> int | None:
    """The node an interference case's aggressors streamed to: mem.load's, else mem's."""
    p = r["parameters"]
    return node_of({"mem": p.get("mem.load") or p.get("mem")}, topology, r.get("cpus")[1:]
                   if isinstance(r.get("cpus"), list) else None)


def _thread_count(r: dict) -> str:
    n = _threads(r)
    return f"{n} thread{'' if n == 1 else 's'}"


def _peak(rows: list[dict], threads: bool) -> Cell:
    best = max(rows, key=lambda r: r["median"])
    note = ", ".join(filter(None, [str(best["parameters"].get("kernel")), best.get("tuned"),
                                   _thread_count(best) if threads else ""]))
    return Cell(best["median"], best["unit"], note=note)


def _firmware_row(n: dict) -> list[NodeRow]:
    """A node no run measured, where the firmware's HMAT gives its read latency and
    bandwidth from its nearest initiators."""
    a = (n.get("hmat") or {}).get("access0") or (n.get("hmat") or {}).get("access1") or {}
    lat, bw = a.get("read_latency"), a.get("read_bandwidth")
    if not (lat and bw):
        return []
    cpus = n.get("cpus") or []
    row = NodeRow(f"node {n['id']} " + (f"(CPUs {format_list(cpus)})" if cpus else
                                        "(no CPUs)"), f"{FIRMWARE}: HMAT", node=n["id"])
    row.cells = {c: "not in HMAT" for c in NODE_COLUMNS}
    row.cells["idle latency"] = Cell(float(lat), "ns", note="HMAT read latency")
    row.cells["read, all threads"] = Cell(bw / 1000.0, "GB/s", note="HMAT read bandwidth")
    return [row]


def _reference(rows: list[NodeRow], memory: list[dict]) -> int | None:
    """The node slowdowns are against: the lowest measured memory latency, else the
    first node with CPUs."""
    lat = {r.node: c.value for r in rows if r.node is not None
           and isinstance(c := r.cells.get("idle latency"), Cell) and c.value is not None
           and not c.cache and r.source == MEASURED}
    if lat:
        return min(lat, key=lat.get)
    return next((n["id"] for n in memory if n.get("cpus")),
                memory[0]["id"] if memory else None)


def against_fastest(rows: list[NodeRow]) -> None:
    """Each node's memory latency and read bandwidth as multiples of the best node's,
    the bandwidth at every thread where each node has that figure, else at one."""
    def value(row, column):
        c = row.cells.get(column)
        return c.value if isinstance(c, Cell) and not c.cache else None
    if len(rows) == 1:
        rows[0].cells["against the fastest"] = "the only node"
        return
    column = "read, all threads" if all(value(r, "read, all threads") for r in rows
                                        if value(r, "read, 1 thread")) else "read, 1 thread"
    lat = [value(r, "idle latency") for r in rows]
    bw = [value(r, column) for r in rows]
    best_lat = min((v for v in lat if v), default=None)
    best_bw = max((v for v in bw if v), default=None)
    for row, la, b in zip(rows, lat, bw):
        parts = ([f"{la / best_lat:.2g}x latency"] if la and best_lat else []) + \
            ([f"{b / best_bw:.2g}x bandwidth"] if b and best_bw else [])
        fastest = la == best_lat and b == best_bw and la is not None
        row.cells["against the fastest"] = "the fastest" if fastest else \
            ", ".join(parts) or "no memory figure"


def _assumed_row(fast: NodeRow, name: str, p: dict) -> NodeRow:
    """A slower tier this machine lacks: the node's memory latency and every-thread read
    bandwidth under the profile (what the profile's two factors are of); nothing else,
    which no profile says."""
    row = NodeRow(f"slower tier ({name})", f"assumed: profile {name}")
    row.cells = {c: "no figure" for c in NODE_COLUMNS}
    for column, factor in (("idle latency", p["latency"]), ("read, all threads",
                                                            p["bandwidth"])):
        c = fast.cells.get(column)
        if isinstance(c, Cell) and c.value is not None and not c.cache:
            row.cells[column] = Cell(c.value * factor, c.unit,
                                     note=f"{factor:g}x node {fast.node}'s")
    row.cells["caches"] = "the CPU's"
    row.cells["against the fastest"] = f"{p['latency']:g}x latency, {p['bandwidth']:g}x " \
                                       "bandwidth"
    return row


def _study_key(params: dict) -> str:
    """What pairs a case on one node with the same case on another: every setting but
    the placement of the memory under study (and how it was repeated)."""
    own = {k for k in params if (split_buffer_option(k) or ("",))[0] == "mem"}
    moved = own or {"mem"}
    return repr(sorted((k, str(v)) for k, v in params.items()
                       if k not in moved and k not in NOT_MEASURED))


def _workloads(ok: list[dict], topology: dict, nodes: list[int],
               reference: int | None) -> list[WorkloadRow]:
    """A row per ML job (of each run): its figure of merit on each node (a median over
    the job's cases, their range in the note), and the slowdown on each other node
    against the reference, over the cases run on both; on a machine of one node, the
    calibrated model's slowdown on the default profile's tier."""
    calibrated = any((r.get("model") or {}).get("slower") for r in ok)
    jobs: dict[tuple, list[dict]] = {}
    for r in ok:
        if THROUGHPUT.get(r["benchmark"]) == r["metric"]:
            jobs.setdefault((r.get("run_dir"), r["case"].rsplit("/", 1)[0]), []).append(r)
    out = []
    for (_, job), recs in jobs.items():
        by_node: dict[int, dict[str, float]] = {}
        spans = False
        for r in recs:
            node = _where(r, topology)
            spans |= node is None
            if node is not None:
                by_node.setdefault(node, {})[_study_key(r["parameters"])] = r["median"]
        unit, bench = recs[0]["unit"], recs[0]["benchmark"]
        per_node = {n: _span(list(by_node[n].values()), unit) if n in by_node else
                    Cell(why="placement spans nodes" if spans else "not run") for n in nodes}
        slowdown: dict[str, tuple[Cell, str]] = {}
        base = by_node.get(reference, {})
        for n in nodes:
            if n == reference:
                continue
            pairs = [base[k] / v - 1 for k, v in by_node.get(n, {}).items() if k in base and v]
            slowdown[f"node {n}"] = (_span(pairs, "%"), MEASURED) if pairs else \
                (Cell(why="not run on both"), "")
        check = None
        if len(nodes) == 1:
            slowdown = {"slower tier": _modelled(recs, calibrated)}
            errors = [r["model"]["predicted"] / r["median"] - 1 for r in recs
                      if (r.get("model") or {}).get("metric") == r["metric"]]
            check = _span(errors, "%") if errors else None
            off = statistics.median(abs(e) for e in errors) if errors else 0.0
            if off > UNTRUSTED and slowdown["slower tier"][0].value is not None:
                slowdown["slower tier"] = (Cell(why=(
                    f"not trustworthy here: the model was {off:.0%} off these cases' "
                    f"measurements (past {UNTRUSTED:.0%})")), "")
        out.append(WorkloadRow(job, bench, THROUGHPUT[bench], per_node, slowdown, check))
    return out


def _modelled(recs: list[dict], calibrated: bool) -> tuple[Cell, str]:
    """The calibrated model's slowdown for each case on its node under the default
    profile (benchmarks.common.predict), or why there is none."""
    slower = [r["model"]["slower"] for r in recs if (r.get("model") or {}).get("slower")]
    if slower:
        return (_span([s["slowdown"] for s in slower], "%"),
                f"{MODELLED}: this node's calibration under profile {slower[0]['profile']}")
    why = "not modelled (these settings)" if calibrated else \
        "no model: cxlbench calibrate first"
    return Cell(why=why), ""


def _tiering(ok: list[dict], knee: float) -> list[dict]:
    """Each tiering scenario's bounds (all-fast's throughput, all-slow's slowdown against
    it) and each policy's knee, with the tiers it ran on."""
    out = []
    for sc in analysis.tiering_scenarios(ok, knee):
        if not sc["all_fast"]:
            continue
        out.append({"workload": sc["workload"] + (", hot set shifting" if sc["phase"] ==
                                                  "shift" else ""),
                    "how": MODELLED if "model" in sc["engine"] else MEASURED,
                    "all_fast": quantity(sc["all_fast"], sc["unit"] or ""),
                    "all_slow": (f"{(sc['all_fast'] / sc['all_slow'] - 1) * 100:+.0f} %"
                                 if sc["all_slow"] else "not run"),
                    "tiers": sc["tiers"] or "not recorded", "within": sc["knee_within"],
                    "knees": {name: (f"{row['knee'] * 100:.4g} %" if row["knee"] is not None
                                     else "none") if row["held"] else "not held to a share"
                              for name, row in sc["policies"].items()}})
    return out


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
    a row per figure, the first saying where the column's figures came from; the
    figures no run measured named in one row."""
    headers = ["memory", *(r.name for r in h.nodes)]
    rows = [["source", *(r.source for r in h.nodes)]]
    for column in NODE_COLUMNS:
        if column not in unmeasured(h):
            rows.append([column, *(c.text(notes) if isinstance(c, Cell) else str(c)
                                   for c in (r.cells.get(column, "") for r in h.nodes))])
    return headers, rows


def unmeasured(h: Headline) -> list[str]:
    """The node table's figures no run measured on any node (said in one line)."""
    def has(c: Cell | str) -> bool:
        return c.value is not None if isinstance(c, Cell) else c not in ("", "not run")
    return [column for column in NODE_COLUMNS
            if not any(has(r.cells.get(column, "")) for r in h.nodes if r.node is not None)]


def workload_table(h: Headline, notes: bool = True) -> tuple[list[str], list[list[str]]]:
    """A row per ML job: its figure of merit on each node, then the slowdown on each
    other node (against the reference) or the slower tier, each with its source."""
    # the nodes and slowdowns some job has a figure for
    nodes = sorted({n for w in h.workloads for n, c in w.per_node.items()
                    if c.value is not None})
    slower = list(dict.fromkeys(k for w in h.workloads for k, (c, _) in w.slowdown.items()
                                if c.value is not None or k == "slower tier"))
    against = f" against node {h.reference}" if h.reference is not None and len(nodes) > 1 \
        else ""
    checked = any(w.check for w in h.workloads)
    headers = ["ML workload (job)", "figure", *(f"node {n}" for n in nodes),
               *(f"slowdown, {k}{against}" for k in slower),
               *(["model against measurement here"] if checked else [])]
    rows = []
    for w in h.workloads:
        cells = [w.job, w.metric, *(w.per_node.get(n, Cell()).text(notes) for n in nodes)]
        for k in slower:
            cell, source = w.slowdown.get(k, (Cell(why="-"), ""))
            word = f" {source.split(':')[0]}" if source and cell.value is not None else ""
            cells.append(cell.text(False) + word
                         + (f" ({cell.note})" if notes and cell.note else ""))
        if checked:
            cells.append(w.check.text(notes) if w.check else "-")
        rows.append(cells)
    return headers, rows


def workload_notes(h: Headline) -> list[str]:
    """What the workload table's columns mean, as it shows them."""
    return [SLOWDOWN] + ([CHECKED] if any(w.check for w in h.workloads) else [])


def tiering_table(h: Headline) -> tuple[list[str], list[list[str]]]:
    """A row per tiering scenario: its bounds, each policy's knee (the smallest fast
    share within the knee's slowdown of all-fast), and the tiers it ran on."""
    policies = list(dict.fromkeys(p for t in h.tiering for p in t["knees"]))
    headers = ["tiering", "all-fast", "all-slow slowdown", *(f"{p} knee" for p in policies),
               "tiers"]
    return headers, [[f"{t['workload']} ({t['how']})", t["all_fast"], t["all_slow"],
                      *(t["knees"].get(p, "-") for p in policies), t["tiers"]]
                     for t in h.tiering]


def lines(h: Headline) -> list[str]:
    """The headline as the terminal prints it: figures without their notes, each
    table's sources in its first row or beside each slowdown; nothing where it is
    empty (a run of GPU or coherence cases)."""
    if h.empty:
        return []
    out = ["", "HEADLINE"]
    out += [line for n in h.notes
            for line in textwrap.wrap(n, WIDTH, initial_indent="  ", subsequent_indent="  ")]
    if h.nodes:
        out += aligned(*node_table(h, notes=False))
        if unmeasured(h):
            out += textwrap.wrap(f"not run: {'; '.join(unmeasured(h))}", WIDTH,
                                 initial_indent="  ", subsequent_indent="    ")
    if h.workloads:
        out.append("")
        out += aligned(*workload_table(h, notes=False))
        out += [line for text in workload_notes(h) for line in
                textwrap.wrap(text, WIDTH, initial_indent="  ", subsequent_indent="  ")]
    for t in h.tiering:             # a paragraph each: policies are many, tiers long
        knees = (f"knee, the smallest fast share within {t['within']:.0%} of all-fast at "
                 "it and every larger share: " + ", ".join(
                     f"{p} {k}" for p, k in t["knees"].items())) if t["knees"] else \
            "no policy ran between the bounds, so no knee to judge"
        out.append("")
        out += textwrap.wrap(
            f"tiering {t['workload']} ({t['how']}): all-fast {t['all_fast']}, all-slow "
            f"{t['all_slow']}; {knees}; tiers {t['tiers']}", WIDTH,
            initial_indent="  ", subsequent_indent="    ")
    return out


def aligned(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    return ["  " + "  ".join(f"{str(x):<{w}}" for x, w in zip(line, widths)).rstrip()
            for line in (headers, *rows)]
