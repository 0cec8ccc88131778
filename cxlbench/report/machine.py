"""The machines a report's runs came from: a table of the runs, and each machine's
nodes, tiers, CXL devices, GPUs and settings; for a fleet, once per kind of machine."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .. import runner
from ..units import format_list, format_size
from . import fleet
from .document import Folded, Heading, Para, Table
from .runs import LoadedRun, fact_text, facts, hardware, machine_key
from .text import printable


def _machines(r: LoadedRun) -> str:
    """The run's machine, and those that finished it (run --resume --other-machine)."""
    others = [m.get("machine id") for m in r.meta.get("resumed_elsewhere") or []
              if isinstance(m, dict)]
    return r.machine + "".join(f", then {m} (resumed there)" for m in others)


def _load(r: LoadedRun) -> str:
    """How busy the machine was while the run measured (its start and end readings)."""
    if not r.meta.get("load"):
        return "not recorded"
    busy = runner.busy_text(r)
    return busy.replace("machine busy: ", "BUSY: ") if busy else "quiet"


def _time(r: LoadedRun) -> str:
    """What the cases took beside their estimate, and how many were scaled down to fit
    their time (--fit, or a guest's limit)."""
    text = runner.timing_text(r.meta, r.journal) or "not estimated"
    fitted = len(r.meta.get("fitted") or {})
    cases = f"{fitted} case{'s' if fitted != 1 else ''}"
    return text + (f"; {cases} scaled down to fit (run.json's \"fitted\")" if fitted else "")


def run_table(runs: list[LoadedRun]) -> Table:
    return Table(["label", "machine", "run", "suite", "started", "load", "time", "cxlbench",
                  "command"],
                 [[r.label, _machines(r), r.run_id, r.suite, r.meta.get("started", ""),
                   _load(r), _time(r),
                   f"{r.meta.get('cxlbench_version', '')} {r.meta.get('git_describe') or ''}"
                   .strip(), " ".join(r.meta.get("command", []))] for r in runs])


# Facts the machine section shows in its heading or tables rather than among the settings.
TABLED = ("machine", "hostname", "NUMA nodes", "CXL regions", "TSC GHz")


def _hmat(node: dict) -> str:
    a = (node.get("hmat") or {}).get("access0") or {}
    if not a:
        return ""
    return (f"read {a.get('read_latency')} ns, {a.get('read_bandwidth')} MB/s; "
            f"write {a.get('write_latency')} ns, {a.get('write_bandwidth')} MB/s")


def machine_blocks(run: LoadedRun) -> list:
    """The machine a run measured: nodes, tiers, CXL devices, GPUs, and the settings."""
    machine = (run.meta.get("topology") or {}).get("machine") or {}
    return [Heading(3, f"{run.label}: {machine.get('hostname', run.machine)}"),
            *_hardware_blocks(run), settings_block([run])]


def _hardware_blocks(run: LoadedRun) -> list:
    topo = run.meta.get("topology") or {}
    blocks: list = []
    if run.meta.get("emulated"):
        em = run.meta["emulated"]
        blocks.append(Para(f"EMULATED under QEMU ({em.get('topology')}, {em.get('accel')}, "
                           f"guest kernel {em.get('guest_kernel', '?')}): placement and "
                           "behaviour are real, timings are QEMU's, not hardware's.", "note"))
    rows = []
    for n in topo.get("nodes", []):
        rows.append([n["id"], format_list(n["cpus"]) or "none",
                     format_size(n["mem_total"], exact=False) if n.get("mem_total") else "",
                     n.get("tier", ""), "yes" if n.get("far_memory") else "",
                     " ".join(str(v) for _, v in sorted(n.get("distances", {}).items(),
                                                        key=lambda kv: int(kv[0]))),
                     _hmat(n), ", ".join(n.get("cxl_regions", []))])
    blocks.append(Table(["node", "CPUs", "memory", "tier", "far memory", "distances",
                         "HMAT access0", "CXL regions"], rows))
    cxl = topo.get("cxl") or {}
    if cxl.get("regions"):
        blocks.append(Table(["CXL region", "mode", "size", "ways", "granularity", "memdevs",
                             "node"],
                            [[r["name"], r.get("mode"),
                              format_size(r.get("size") or 0, exact=False),
                              r.get("interleave_ways"), r.get("interleave_granularity"),
                              ", ".join(t.get("memdev") or "?" for t in r.get("targets", [])),
                              r.get("node")] for r in cxl["regions"]]))
    if topo.get("gpus"):
        blocks.append(Table(["GPU", "memory", "NUMA node"],
                            [[g.get("name"), g.get("memory"), g.get("numa_node")]
                             for g in topo["gpus"]]))
    return blocks


def _timer_text(run: LoadedRun) -> str | None:
    timer = run.meta.get("timer") or {}
    if not timer:
        return None
    tsc = f"{timer['tsc_hz'] / 1e9:.4g} GHz" if timer.get("tsc_hz") else "none"
    return f"{timer.get('clock')}, overhead {timer.get('clock_overhead_ns')} ns; TSC {tsc}"


def settings_block(runs: list[LoadedRun]) -> Folded:
    """The settings the runs' machines recorded (folded: the kernel command line alone is
    a paragraph): one machine's values; for several, each setting's common value, or how
    it varies between them (the timer's overhead, measured on each, said apart)."""
    texts = [{k: fact_text(v) for k, v in facts(r.meta).items() if k not in TABLED}
             for r in runs]
    if len(runs) == 1 and (timer := _timer_text(runs[0])):
        texts[0]["timer"] = timer
    rows = [[name, _across([t.get(name, "not recorded") for t in texts])]
            for name in dict.fromkeys(k for t in texts for k in t)]
    return Folded(f"Settings ({len(rows)})", [Table(["setting", "value"], rows)])


def _across(values: list[str]) -> str:
    """One setting over several machines: its value, its range where numbers, or its most
    common values with their counts."""
    counts = Counter(values)
    if len(counts) == 1:
        return values[0]
    try:
        numbers = [float(v) for v in values]
        return f"varies: {min(numbers):g} to {max(numbers):g}"
    except ValueError:
        common = ", ".join(f"{v} ({n} machines)" for v, n in counts.most_common(3))
        more = f", and {len(counts) - 3} more values" if len(counts) > 3 else ""
        return f"varies: {common}{more}"


def kind_key(run: LoadedRun) -> tuple:
    """What makes machines of one kind: their hardware (hardware: CPU, ISAs, caches, the
    nodes and which have CPUs) and whether emulated. Not their settings or memory sizes,
    which differ from machine to machine of one purchase (a frequency read at start, the
    kernel command line's root=UUID, crashkernel's share of a node) and which a fleet's
    report shows as differences of a machine from its kind rather than kinds of their own."""
    return (*hardware(run.meta).values(), bool(run.meta.get("emulated")))


@dataclass
class Kind:
    """Machines of one hardware (kind_key): their first runs, every run of theirs, and the
    blocks that show them."""
    number: int                     # 1 for the most machines
    machines: list[LoadedRun]       # each machine's first run
    runs: list[LoadedRun]
    blocks: list                    # the hardware of the first, the settings of all

    @property
    def name(self) -> str:
        return f"kind {self.number}"

    def describe(self) -> str:
        """The kind in a line: its CPU, memory nodes and memory."""
        topo = self.machines[0].meta.get("topology") or {}
        nodes = [n for n in topo.get("nodes", []) if n.get("mem_total")]
        cpus = sum(len(n.get("cpus") or []) for n in topo.get("nodes", []))
        far = sum(1 for n in nodes if not n.get("cpus"))
        memory = sorted(sum(n.get("mem_total") or 0 for n in
                            (r.meta.get("topology") or {}).get("nodes", []))
                        for r in self.machines)
        sizes = [format_size(m, exact=False) for m in (memory[0], memory[-1]) if m]
        parts = [(topo.get("cpu") or {}).get("model") or "CPU not recorded",
                 f"{cpus} CPUs" if cpus else "",
                 f"{len(nodes)} memory node{'s' * (len(nodes) != 1)}"
                 + (f" ({far} without CPUs)" if far else ""),
                 " to ".join(dict.fromkeys(sizes)),
                 "EMULATED" if self.machines[0].meta.get("emulated") else ""]
        return printable(", ".join(p for p in parts if p))


def first_runs(runs: list[LoadedRun]) -> dict[tuple, list[LoadedRun]]:
    """Each machine (machine_key) with its runs, in the runs' order."""
    out: dict[tuple, list[LoadedRun]] = {}
    for r in runs:
        out.setdefault(machine_key(r), []).append(r)
    return out


def kinds(runs: list[LoadedRun]) -> list[Kind]:
    """The runs' machines (one host name over two sets of hardware is two) by kind, the
    kind of the most machines first."""
    groups: dict[tuple, list[list[LoadedRun]]] = {}
    for own in first_runs(runs).values():
        groups.setdefault(kind_key(own[0]), []).append(own)
    out = []
    for number, machines in enumerate(sorted(groups.values(), key=lambda g: -len(g)), 1):
        firsts = [own[0] for own in machines]
        out.append(Kind(number, firsts, [r for own in machines for r in own],
                        [*_hardware_blocks(firsts[0]), settings_block(firsts)]))
    return out


def machines_blocks(runs: list[LoadedRun], alike: bool = False) -> list:
    """machine_blocks once per machine the runs came from; for a fleet (or where alike:
    a kind's page), once per kind of machine, headed by the machines of that kind."""
    groups = kinds(runs)
    if not alike and sum(len(k.machines) for k in groups) <= fleet.FLEET:
        return [b for own in first_runs(runs).values() for b in machine_blocks(own[0])]
    out = []
    for kind in groups:
        names = [r.label for r in kind.machines]
        many = len(names) > 2 * fleet.FLEET
        out.append(Heading(3, f"{len(names)} machine{'s' * (len(names) > 1)} alike: "
                              + (f"{min(names)} to {max(names)} by name" if many
                                 else ", ".join(names))))
        if many:                # every name, folded: a thousand would fill the screen
            out.append(Folded(f"The {len(names)} machines", [Para(", ".join(names))]))
        out.extend(kind.blocks)
        overheads = [t["clock_overhead_ns"] for r in kind.machines
                     if (t := r.meta.get("timer") or {}).get("clock_overhead_ns") is not None]
        if overheads:
            out.append(Para(f"Timer: {kind.machines[0].meta['timer'].get('clock')}, its "
                            f"overhead measured on each machine from {min(overheads):.3g} "
                            f"to {max(overheads):.3g} ns."))
    return out


def failed_blocks(bad: list[dict]) -> list:
    """The cases without results (runs.not_ok), as a section."""
    if not bad:
        return []
    return [Heading(2, "Cases without results"),
            Table(["run", "case", "status", "why"],
                  [[b["label"], b["case"], b["status"], b["error"]] for b in bad])]
