"""The machines a report's runs came from: a table of the runs, and each machine's
nodes, tiers, CXL devices, GPUs and settings; for a fleet, once per kind of machine."""
from __future__ import annotations

from dataclasses import dataclass

from .. import runner
from ..units import format_list, format_size
from . import fleet
from .document import Folded, Heading, Para, Table
from .runs import LoadedRun, fact_text, facts, machine_key


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


def run_table(runs: list[LoadedRun]) -> Table:
    return Table(["label", "machine", "run", "suite", "started", "load", "cxlbench",
                  "command"],
                 [[r.label, _machines(r), r.run_id, r.suite, r.meta.get("started", ""),
                   _load(r),
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
    topo = run.meta.get("topology") or {}
    machine = topo.get("machine") or {}
    blocks: list = [Heading(3, f"{run.label}: {machine.get('hostname', run.machine)}")]
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
    settings = [[k, fact_text(v)] for k, v in facts(run.meta).items() if k not in TABLED]
    timer = run.meta.get("timer") or {}
    if timer:
        tsc = f"{timer['tsc_hz'] / 1e9:.4g} GHz" if timer.get("tsc_hz") else "none"
        settings.append(["timer", f"{timer.get('clock')}, overhead "
                                  f"{timer.get('clock_overhead_ns')} ns; TSC {tsc}"])
    # Below the figures a reader came for: the kernel command line alone is a paragraph.
    blocks.append(Folded(f"Settings ({len(settings)})", [Table(["setting", "value"], settings)]))
    return blocks


@dataclass
class Kind:
    """Machines alike in hardware and settings (all but the timer's overhead, measured on
    each): their first runs, every run of theirs, and the blocks that show them."""
    number: int                     # 1 for the most machines
    machines: list[LoadedRun]       # each machine's first run
    runs: list[LoadedRun]
    blocks: list                    # machine_blocks of any of them, without heading and timer

    @property
    def name(self) -> str:
        return f"kind {self.number}"

    def describe(self) -> str:
        """The kind in a line: its CPU, memory nodes and memory."""
        topo = self.machines[0].meta.get("topology") or {}
        nodes = [n for n in topo.get("nodes", []) if n.get("mem_total")]
        cpus = sum(len(n.get("cpus") or []) for n in topo.get("nodes", []))
        far = sum(1 for n in nodes if not n.get("cpus"))
        memory = sum(n["mem_total"] for n in nodes)
        parts = [(topo.get("cpu") or {}).get("model") or "CPU not recorded",
                 f"{cpus} CPUs" if cpus else "",
                 f"{len(nodes)} memory node{'s' * (len(nodes) != 1)}"
                 + (f" ({far} without CPUs)" if far else ""),
                 format_size(memory, exact=False) if memory else "",
                 "EMULATED" if self.machines[0].meta.get("emulated") else ""]
        return ", ".join(p for p in parts if p)


def kinds(runs: list[LoadedRun]) -> list[Kind]:
    """The runs' machines (one host name over two sets of hardware is two) by kind, the
    kind of the most machines first."""
    firsts = {machine_key(r): r for r in reversed(runs)}
    groups: dict[str, list] = {}
    for r in runs:
        if firsts[machine_key(r)] is r:
            blocks = [_without_timer(b) for b in machine_blocks(r)[1:]]
            groups.setdefault(repr(blocks), [blocks, []])[1].append(r)
    out = []
    for number, (blocks, alike) in enumerate(sorted(groups.values(),
                                                    key=lambda g: -len(g[1])), 1):
        keys = {machine_key(r) for r in alike}
        out.append(Kind(number, alike, [r for r in runs if machine_key(r) in keys], blocks))
    return out


def machines_blocks(runs: list[LoadedRun], alike: bool = False) -> list:
    """machine_blocks once per machine the runs came from; for a fleet (or where alike:
    a kind's page), once per kind of machine, headed by the machines of that kind."""
    groups = kinds(runs)
    if not alike and sum(len(k.machines) for k in groups) <= fleet.FLEET:
        firsts = {machine_key(r): r for r in reversed(runs)}
        return [b for r in runs if firsts[machine_key(r)] is r for b in machine_blocks(r)]
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


def _without_timer(block):
    """A machine's folded settings without the timer's overhead (measured on each)."""
    if not isinstance(block, Folded):
        return block
    inner = [Table(b.headers, [row for row in b.rows if row[0] != "timer"])
             if isinstance(b, Table) and b.headers == ["setting", "value"] else b
             for b in block.blocks]
    return Folded(block.summary, inner)
