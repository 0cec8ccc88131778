"""`cxlbench doctor`: the pre-flight check of a machine's memory settings, as pyperf's
`system show` is for CPUs. Each check says what it found, whether that can skew a run,
what it affects and the command that would change it; cxlbench never runs that command
itself. Read through injectable sysfs and procfs roots, so fixture trees work; a figure
that cannot be read says so in words, never raises."""
from __future__ import annotations

import os
import re
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path

from . import system
from .emulate import GUEST_PATH, guest_image, tools
from .topology import Topology, _read, no_movable_command
from .units import MAX_NODES, format_list, parse_list

THP = "/sys/kernel/mm/transparent_hugepage"
HUGEPAGE_POOLS = {"2M": "2048kB", "1G": "1048576kB"}
INDENT = " " * 6            # under the status column: "warn  "


@dataclass
class Check:
    name: str
    value: str                  # what was found, or "not available (why)"
    status: str                 # ok, warn or info
    affects: str                # what it changes in a run, in a platform engineer's words
    change: str | None = None   # the command that would change it; never run by cxlbench

    def to_dict(self) -> dict:
        """Plain data for `cxlbench doctor --json`."""
        return asdict(self)


def checks(sys_root: str | os.PathLike = "/sys", proc_root: str | os.PathLike = "/proc",
           find=tools.find, dev_root: str | os.PathLike = "/dev") -> list[Check]:
    """Every check of this machine, in the order render prints them. `find` finds a
    command as emulate does (tools.find: PATH, then the sbin folders), so tests can say
    what is installed; dev_root holds cpu/<n>/msr, for the prefetchers."""
    sysfs, procfs = Path(sys_root), Path(proc_root)
    topo = Topology.read(sysfs, procfs, probe_gpus=False)
    cpu = system.read_settings(sysfs, procfs)
    return [_nodes(topo), _movable(topo, sysfs, procfs), _hugepages(topo),
            _thp(topo.settings.get("thp_enabled")), _defrag(topo.settings.get("thp_defrag")),
            _balancing(topo.settings.get("numa_balancing")),
            _demotion(topo.settings.get("demotion_enabled")), _governor(sysfs),
            _turbo(cpu["turbo"], sysfs), _smt(cpu["smt"]),
            _prefetchers(system.prefetchers(procfs, dev_root)),
            _siblings(system.sibling_load(sysfs, procfs)), _load(procfs),
            _emulate_tools(len(topo.memory_nodes), find)]


def render(checks: list[Check], width: int = 100) -> list[str]:
    """Terminal lines: the warnings summed up first, then a check a line, wrapped to
    `width` with continuation lines indented under the text; the command to change it on
    a line of its own, so it copies whole where it fits."""
    warned = [c.name for c in checks if c.status == "warn"]
    head = (f"{len(warned)} warning{'s' if len(warned) != 1 else ''}: {', '.join(warned)}"
            if warned else "no warnings") + f" ({len(checks)} checks)"
    lines = _wrap(head, width, "")
    for c in checks:
        lines += _wrap(f"{c.status:<4}  {c.name}: {c.value}. Affects {c.affects}.", width,
                       INDENT)
        if c.change:
            lines += _wrap(f"to change: {c.change}", width, INDENT, first=INDENT)
    return lines


def _wrap(text: str, width: int, indent: str, first: str = "") -> list[str]:
    # Paths such as hugepages-2048kB break only where they must.
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=indent,
                         break_on_hyphens=False)


def _node_list(ids: list[int]) -> str:
    """[2] -> 'node 2', [2, 3] -> 'nodes 2-3'."""
    return f"node{'s' if len(ids) > 1 else ''} {format_list(ids)}"


# ---- the checks -------------------------------------------------------------------------
def _nodes(topo: Topology) -> Check:
    """How many tiers can be measured here: memory nodes, and the CPU-less ones among them."""
    memory, far = topo.memory_nodes, topo.far_memory_nodes
    if not memory:
        return Check("nodes", "not available (no memory node in sysfs)", "info",
                     "every placement: cxlbench reads the nodes from sysfs")
    value = f"{len(memory)} memory node{'s' if len(memory) != 1 else ''} ({format_list(memory)})"
    if far:
        value += f"; no CPUs: {format_list(far)} (far-memory/CXL candidates)"
    if len(memory) == 1:
        return Check("nodes", value, "info",
                     "tier comparisons: with one node, slowdowns come from the tier model "
                     "(`cxlbench calibrate` here; HMAT or an assumed far-tier profile) or "
                     "from a guest with emulated far memory",
                     "cxlbench emulate --topology cxl -- run suites/ci.toml")
    return Check("nodes", value, "ok", "tier comparisons: each memory node is measured"
                 + ("" if far else " (remote-socket DRAM only: no CPU-less node)"))


def _movable(topo: Topology, sysfs: Path, procfs: Path) -> Check:
    """Far nodes onlined all ZONE_MOVABLE (daxctl's default) take no long-term pins and no
    kernel allocations, which GPU and RDMA runs need."""
    name = "far memory zones"
    far = topo.far_memory_nodes
    if not far:
        return Check(name, "no CPU-less node", "info",
                     "GPU pinning and kernel allocations on far memory (none here)")
    movable = _movable_only(far, sysfs, procfs)
    if movable is None:
        return Check(name, "not available (no /proc/zoneinfo, no has_normal_memory)",
                     "info", "GPU pinning and kernel allocations on the far nodes")
    affects = ("GPU pinning: long-term pins (cudaHostRegister, RDMA registration) move pages "
               "out of ZONE_MOVABLE, so a pinned buffer never stays on a far node; and "
               "kernel allocations (slab, page tables) never land there")
    if not movable:
        return Check(name, f"{_node_list(far)}: ZONE_NORMAL memory too", "ok", affects)
    return Check(name, f"{_node_list(movable)}: all ZONE_MOVABLE", "warn", affects,
                 no_movable_command(topo, movable))


def _hugepages(topo: Topology) -> Check:
    """hugetlb pools per memory node: page=2m and page=1g cases bind into them."""
    memory = [n for n in topo.nodes if n.has_memory]
    if not any(n.hugepages for n in memory):
        return Check("hugepages", "not available (no hugetlb pools in sysfs)", "info",
                     "page=2m and page=1g cases: refused without a pool")
    pools, empty = [], []
    for n in memory:
        found = [f"{size} {n.hugepages[key]['free']}/{n.hugepages[key]['total']} free"
                 for size, key in HUGEPAGE_POOLS.items()
                 if n.hugepages.get(key, {}).get("total")]
        if found:
            pools.append(f"node {n.id}: {', '.join(found)}")
        else:
            empty.append(n.id)
    value = "; ".join(pools + ([f"none on {_node_list(empty)}"] if empty else []))
    short = [n.id for n in memory if not n.hugepages.get("2048kB", {}).get("free")]
    affects = "page=2m and page=1g cases: each needs free pages in the pool of its node"
    if not short:
        return Check("hugepages", value, "ok", affects)
    pool = f"/hugepages/hugepages-{HUGEPAGE_POOLS['2M']}/nr_hugepages"
    change = (f"echo 512 > /sys/devices/system/node/node{short[0]}{pool}" if len(short) == 1
              else f"for n in {' '.join(map(str, short))}; do echo 512 > "
                   f"/sys/devices/system/node/node$n{pool}; done")
    return Check("hugepages", value, "info",
                 affects + f" (no free 2M pages on {_node_list(short)})", change)


def _thp(enabled: str | None) -> Check:
    """cxlbench madvises its own buffers (huge for page=thp, not for 4k): madvise is the
    setting that leaves every other allocation alone."""
    change = f"echo madvise > {THP}/enabled"
    if enabled is None:
        return Check("thp", "not available (kernel without THP)", "info",
                     "page=thp cases: no huge pages")
    if enabled == "always":
        return Check("thp", enabled, "warn",
                     "TLB reach: buffers cxlbench does not madvise (workloads' arrays) turn "
                     "huge at fault or when khugepaged collapses them mid-run",
                     change)
    if enabled == "never":
        return Check("thp", enabled, "warn", "page=thp cases: refused", change)
    return Check("thp", enabled, "ok", "TLB reach: only page=thp buffers get huge pages")


def _defrag(defrag: str | None) -> Check:
    """Whether a page=thp fault may compact memory to find a huge page (memory.thp_hint)."""
    change = f"echo madvise > {THP}/defrag"
    if defrag is None:
        return Check("thp defrag", "not available (kernel without THP)", "info",
                     "page=thp cases: no huge pages")
    if defrag in ("defer", "never"):
        return Check("thp defrag", defrag, "warn",
                     "page=thp buffers: no compaction at fault, so fragmented memory gives "
                     "them 4 KiB pages", change)
    if defrag == "always":
        return Check("thp defrag", defrag, "info",
                     "first touch: every huge-page fault may stall in compaction", change)
    return Check("thp defrag", defrag, "ok", "page=thp buffers: faults compact for huge pages")


def _balancing(mode) -> Check:
    """Automatic NUMA balancing moves pages after a run placed them."""
    if mode is None:
        return Check("numa balancing", "not available (kernel without NUMA balancing)",
                     "info", "placement: nothing moves pages between nodes")
    if mode == "disabled":
        return Check("numa balancing", mode, "ok", "placement: pages stay where a case put them")
    return Check("numa balancing", str(mode), "warn",
                 "placement: the kernel moves pages between nodes during a run, so figures "
                 "drift (the tiering benchmark's linux policy needs mode 2)",
                 "sysctl kernel.numa_balancing=0")


def _demotion(enabled: str | None) -> Check:
    """Reclaim demotes DRAM pages to a slower tier under memory pressure."""
    if enabled is None:
        return Check("demotion", "not available (kernel before 5.15)", "info",
                     "placement: reclaim never demotes pages")
    if enabled == "true":
        return Check("demotion", enabled, "warn",
                     "placement: under memory pressure reclaim moves DRAM pages to the far "
                     "tier mid-run (the tiering benchmark's linux policy needs it)",
                     "echo false > /sys/kernel/mm/numa/demotion_enabled")
    return Check("demotion", enabled, "ok", "placement: reclaim never demotes pages")


def _governor(sysfs: Path) -> Check:
    """Every CPU's cpufreq governor, counted: a lab machine has hundreds of CPUs."""
    found = system.governors(sysfs)
    affects = "latency and bandwidth: the clock follows load, so figures shift as it ramps"
    if found is None:
        return Check("governor", "not available (no cpufreq: a VM?)", "info",
                     "the clock: the hypervisor or firmware sets it")
    missing = found.pop(system.NO_CPUFREQ, 0)
    cpus = sum(found.values()) + missing
    value = ", ".join(f"{gov} on {'all ' if n == cpus else ''}{n} CPU{'s' if n > 1 else ''}"
                      if i == 0 else f"{gov} on {n}" for i, (gov, n) in enumerate(found.items()))
    if missing:
        value += f", no cpufreq on {missing}"
    if list(found) == ["performance"]:
        return Check("governor", value, "ok", affects)
    return Check("governor", value, "warn", affects, "cpupower frequency-set -g performance")


def _turbo(turbo: str | None, sysfs: Path) -> Check:
    """Turbo lets the clock rise with thermal headroom, which differs from run to run."""
    if turbo is None:
        return Check("turbo", "not available (no intel_pstate or cpufreq boost: a VM?)",
                     "info", "the clock: the hypervisor or firmware sets it")
    affects = "run-to-run spread: the clock rises with load and temperature headroom"
    if turbo == "off":
        return Check("turbo", turbo, "ok", affects)
    cpu = "/sys/devices/system/cpu"
    change = (f"echo 1 > {cpu}/intel_pstate/no_turbo"
              if _read(sysfs / "devices/system/cpu/intel_pstate/no_turbo") is not None
              else f"echo 0 > {cpu}/cpufreq/boost")
    return Check("turbo", turbo, "warn", affects, change)


def _smt(smt: str | None) -> Check:
    """SMT siblings share a core; cxlbench's default pairs avoid them, thread counts do not."""
    affects = ("threads past the core count: SMT siblings share a core's load ports and "
               "caches")
    if smt is None:
        return Check("smt", "not available (no smt control)", "info", affects)
    if smt == "on":
        return Check("smt", smt, "info", affects, "echo off > /sys/devices/system/cpu/smt/control")
    return Check("smt", smt, "ok", affects)


def _prefetchers(found: dict) -> Check:
    """The hardware prefetchers, as system.prefetchers read them: never a warning, since
    either state is a fair machine, but runs compare only at the same state."""
    affects = ("latency and its tails: prefetchers hide the misses of streams and "
               "neighbouring lines; runs compare only at the same state")
    if found.get("state") == "unknown":
        return Check("prefetchers", f"not available ({found['why']})", "info", affects,
                     "sudo modprobe msr && sudo cxlbench doctor")
    state = found["state"]
    off = [name for name, s in state.items() if s == "off"]
    value = (f"{'all on' if not off else 'off: ' + ', '.join(off)} "
             f"({found['source']}, CPU {found['cpu']} reads {found['raw']})")
    if found.get("note"):
        value += f"; {found['note']}"
    if not off:
        return Check("prefetchers", value, "ok", affects)
    return Check("prefetchers", value, "info", affects,
                 f"wrmsr -a {found['source'].split()[-1]} {found['all_on']}")


def _siblings(found: dict | str | None) -> Check:
    """Other work on an SMT sibling shares the core with the thread measuring on it."""
    name = "smt siblings' load"
    affects = ("latency tails: a busy sibling shares its core's load ports and caches "
               "with the thread measuring on it")
    if found is None:
        return Check(name, "not available (no thread_siblings_list in sysfs)", "info",
                     affects)
    if found == system.NO_SMT:
        return Check(name, found, "ok", affects)
    if found.get("busy") is None:
        return Check(name, f"{found['count']} siblings; not available (no per-CPU "
                     f"/proc/stat)", "info", affects)
    busiest = ", ".join(f"CPU {c} {s:.0%}" for c, s in found["busiest"].items())
    value = f"{found['busy']} of {found['count']} siblings busy over " \
            f"{found['busier_than']:.0%}; busiest {busiest}"
    return Check(name, value, "warn" if found["busy"] else "ok", affects)


def _load(procfs: Path) -> Check:
    """Other work now competes for the memory bandwidth and CPUs a run measures."""
    found = system.load(procfs)
    affects = "every figure: other work takes memory bandwidth and CPUs, figures drop and spread"
    if found["load1"] is None and found["steal"] is None:
        return Check("load", "not available (no /proc/loadavg or /proc/stat)", "info", affects)
    why = system.busy(found)
    if why:
        return Check("load", why, "warn", affects)
    parts = []
    if found["load1"] is not None:
        parts.append(f"load average {found['load1']:.2f} on {found['cpus']} CPUs")
    if found.get("busy") is not None:
        parts.append(f"{found['busy']:.0%} of CPU time busy")
    if found["steal"] is not None:
        parts.append(f"{found['steal']:.0%} stolen")
    return Check("load", ", ".join(parts), "ok", affects)


def _emulate_tools(memory_nodes: int, find) -> Check:
    """What `cxlbench emulate` would refuse for (emulate.missing_requirements' tools), and
    the folders of those found (a user's PATH may lack them: /usr/sbin); on one node
    emulation is the only way to measure a far tier, so missing ones warn."""
    found = {t: find(t) for t in guest_image.TOOLS}
    found |= {t: find(t, path=GUEST_PATH) for t in guest_image.GUEST_TOOLS}
    host = [t for t in guest_image.TOOLS if found[t] is None]
    guest = [t for t in guest_image.GUEST_TOOLS if found[t] is None]
    where = tools.folders({t: p for t, p in found.items() if p is not None})
    affects = "`cxlbench emulate`: QEMU guests with emulated far memory"
    if not host and not guest:
        return Check("emulate tools", f"all found: {where}", "ok", affects)
    value = "; ".join(([f"missing {', '.join(host)}"] if host else [])
                      + ([f"for the cxl topologies: {', '.join(guest)}"] if guest else [])
                      + ([f"found {where}"] if where else []))
    package = {**guest_image.TOOLS, **guest_image.GUEST_TOOLS}
    packages = dict.fromkeys(package[t] for t in host + guest)
    return Check("emulate tools", value, "warn" if host and memory_nodes == 1 else "info",
                 affects, f"apt-get install {' '.join(packages)}")


# ---- one more reader ----------------------------------------------------------------------
def _zones(procfs: Path) -> dict[int, dict[str, int]]:
    """/proc/zoneinfo's present pages by node and zone: {2: {"Normal": 0, "Movable": n}}."""
    zones: dict[int, dict[str, int]] = {}
    where = None
    for line in (_read(procfs / "zoneinfo", "") or "").splitlines():
        m = re.match(r"Node\s+(\d+),\s+zone\s+(\S+)", line)
        if m:
            where = (int(m.group(1)), m.group(2))
            continue
        m = re.match(r"\s+present\s+(\d+)", line)
        if m and where:
            zones.setdefault(where[0], {})[where[1]] = int(m.group(1))
    return zones


def _movable_only(nodes: list[int], sysfs: Path, procfs: Path) -> list[int] | None:
    """Of `nodes`, those whose memory is all ZONE_MOVABLE: from /proc/zoneinfo, else from
    sysfs's has_normal_memory (the nodes with memory the kernel may allocate); None where
    neither can be read."""
    zones = _zones(procfs)
    if zones:
        return [n for n in nodes if zones.get(n, {}).get("Movable")
                and not any(v for z, v in zones[n].items() if z != "Movable")]
    text = _read(sysfs / "devices/system/node/has_normal_memory")
    try:
        normal = parse_list(text, limit=MAX_NODES) if text else None
    except ValueError:
        normal = None
    return None if normal is None else [n for n in nodes if n not in normal]
