"""What memory this machine has: NUMA nodes, tiers, HMAT, CXL devices, DAX, CPUs, GPUs.

Everything is read from sysfs and procfs under injectable roots, so the same code parses
fixture trees copied from multi-socket and CXL machines. The snapshot is plain data
(to_dict) and goes into every run's metadata."""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import gpu
from .units import format_list, format_size, parse_list

HMAT_KEYS = ("read_latency", "write_latency", "read_bandwidth", "write_bandwidth")


def _read(path: Path, default: str | None = None) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return default


def _int(path: Path, default: int | None = None, base: int = 10) -> int | None:
    text = _read(path)
    try:
        return int(text, base) if text is not None else default
    except ValueError:
        return default


def _hex_or_int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text, 0) if text else None
    except ValueError:
        return None


def _bracketed(text: str | None) -> str | None:
    """'always [madvise] never' -> 'madvise'."""
    if text is None:
        return None
    m = re.search(r"\[(\S+)\]", text)
    return m.group(1) if m else text


def _numbered(directory: Path, prefix: str) -> list[tuple[int, Path]]:
    if not directory.is_dir():
        return []
    out = []
    for p in directory.iterdir():
        m = re.fullmatch(re.escape(prefix) + r"(\d+)", p.name)
        if m:
            out.append((int(m.group(1)), p))
    return sorted(out)


@dataclass
class Node:
    id: int
    cpus: list[int]
    mem_total: int                      # bytes
    mem_free: int                       # bytes, as the node's meminfo says
    distances: dict[int, int]
    hugepages: dict[str, dict[str, int]]   # "2048kB" -> {"total": n, "free": n}
    hmat: dict[str, dict[str, int]]     # "access0" -> read_latency (ns), read_bandwidth (MB/s)...
    tier: int | None = None
    far_memory: bool = False            # memory and no CPUs: CXL or emulated far memory
    cxl_regions: list[str] = field(default_factory=list)

    @property
    def has_memory(self) -> bool:
        return self.mem_total > 0


@dataclass
class Topology:
    nodes: list[Node]
    tiers: dict[int, list[int]]
    settings: dict
    cxl: dict
    dax: list[dict]
    cpu: dict
    gpus: list[dict]
    machine: dict

    # ---- reading ----------------------------------------------------------------------
    @classmethod
    def read(cls, sys_root: str | os.PathLike = "/sys", proc_root: str | os.PathLike = "/proc",
             probe_gpus: bool = True) -> "Topology":
        sysfs, procfs = Path(sys_root), Path(proc_root)
        nodes = _read_nodes(sysfs, procfs)
        tiers = _read_tiers(sysfs)
        for tier, members in tiers.items():
            for node in nodes:
                if node.id in members:
                    node.tier = tier
        cxl = _read_cxl(sysfs)
        dax = _read_dax(sysfs)
        _map_regions_to_nodes(sysfs, cxl, dax, nodes)
        return cls(nodes=nodes, tiers=tiers, settings=_read_settings(sysfs, procfs), cxl=cxl,
                   dax=dax, cpu=_read_cpu(sysfs, procfs),
                   gpus=_read_gpus(sysfs) if probe_gpus else [],
                   machine={"hostname": socket.gethostname(), "kernel": platform.release(),
                            "arch": platform.machine(), "emulated": _emulated()})

    # ---- queries ----------------------------------------------------------------------
    def node(self, node_id: int) -> Node:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(node_id)

    @property
    def memory_nodes(self) -> list[int]:
        return [n.id for n in self.nodes if n.has_memory]

    @property
    def far_memory_nodes(self) -> list[int]:
        return [n.id for n in self.nodes if n.far_memory]

    def cpu_pairs(self) -> list[str]:
        """Ping-pong's default pairs: the first CPU of every node with CPUs against each
        other, and the first two CPUs of the first such node (two cores where the numbering
        puts SMT siblings apart, as on most x86 servers: siblings are not paired here)."""
        firsts = [n.cpus[0] for n in self.nodes if n.cpus]
        pairs = [f"{a},{b}" for i, a in enumerate(firsts) for b in firsts[i + 1:]]
        local = next((n.cpus for n in self.nodes if len(n.cpus) >= 2), None)
        if local:
            pairs.insert(0, f"{local[0]},{local[1]}")
        return pairs

    @property
    def allowed_cpus(self) -> list[int]:
        """The CPUs cases may run on: the reading process's affinity on the machine read."""
        text = self.cpu.get("allowed")
        return parse_list(text) if text else sorted(c for n in self.nodes for c in n.cpus)

    def nodes_of_cpus(self, cpus) -> list[int]:
        wanted = set(cpus)
        return [n.id for n in self.nodes if wanted & set(n.cpus)]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["tiers"] = {str(k): v for k, v in self.tiers.items()}
        for n in d["nodes"]:
            n["distances"] = {str(k): v for k, v in n["distances"].items()}
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    # ---- human output -----------------------------------------------------------------
    def render(self) -> str:
        lines = [f"{self.machine['hostname']}: {self.cpu.get('model') or 'unknown CPU'}, "
                 f"kernel {self.machine['kernel']}"]
        emulated = self.machine.get("emulated")
        if emulated:
            lines.append(f"EMULATED: QEMU {emulated['qemu']} '{emulated['topology']}' guest "
                         f"({emulated['accel']}); figures here are not hardware figures")
        lines.append(f"available: {len(self.nodes)} nodes ({format_list(n.id for n in self.nodes)})")
        for n in self.nodes:
            kind = "far memory (no CPUs)" if n.far_memory else ("no memory" if not n.has_memory else "")
            tier = f"  tier {n.tier}" if n.tier is not None else ""
            cpus = format_list(n.cpus) if n.cpus else "-"
            lines.append(f"node {n.id}: cpus {cpus}  size {format_size_mib(n.mem_total)}  "
                         f"free {format_size_mib(n.mem_free)}{tier}  {kind}".rstrip())
            for cls_name, values in sorted(n.hmat.items()):
                lines.append(f"  hmat {cls_name}: " + "  ".join(
                    f"{k} {values[k]}{' ns' if 'latency' in k else ' MB/s'}"
                    for k in HMAT_KEYS if k in values)
                    + f"  (from node {format_list(values.get('initiators', []))})")
            pools = [f"{k} {v['free']}/{v['total']} free" for k, v in sorted(n.hugepages.items())
                     if v["total"]]
            if pools:
                lines.append("  hugepages: " + ", ".join(pools))
            if n.cxl_regions:
                lines.append("  fed by CXL " + ", ".join(n.cxl_regions))
        if self.nodes:
            ids = [n.id for n in self.nodes]
            lines.append("node distances:")
            lines.append("node " + "".join(f"{i:>5}" for i in ids))
            for n in self.nodes:
                lines.append(f"{n.id:>4} " + "".join(f"{n.distances.get(j, '-'):>5}" for j in ids))
        s = self.settings
        lines.append(f"settings: THP {s.get('thp_enabled')} (defrag {s.get('thp_defrag')}), "
                     f"NUMA balancing {s.get('numa_balancing')}, demotion "
                     f"{s.get('demotion_enabled')}, governor {s.get('governor')}")
        if s.get("weighted_interleave"):
            lines.append("weighted interleave weights: " + ", ".join(
                f"node{k}={v}" for k, v in sorted(s["weighted_interleave"].items())))
        if self.cxl["memdevs"] or self.cxl["regions"]:
            lines.append("CXL:")
            for m in self.cxl["memdevs"]:
                lines.append(f"  {m['name']}: ram {format_size_mib(m['ram_size'] or 0)}, pmem "
                             f"{format_size_mib(m['pmem_size'] or 0)}, serial {m['serial']}")
            for r in self.cxl["regions"]:
                targets = ", ".join(f"{t['decoder']}->{t['memdev']}" for t in r["targets"])
                lines.append(f"  {r['name']}: {r['mode']} {format_size_mib(r['size'] or 0)}, "
                             f"{r['interleave_ways']}-way x {r['interleave_granularity']} B "
                             f"[{targets}] -> node {r['node'] if r['node'] is not None else '?'}")
        else:
            lines.append("CXL: none")
        for d in self.dax:
            region = f", in CXL {d['region']}" if d["region"] else ""
            lines.append(f"dax {d['name']}: {d['mode']}, {format_size_mib(d['size'] or 0)}, "
                         f"node {d['target_node']}{region}")
        caches = ", ".join(f"L{c['level']}{c['type'][0].lower() if c['type'] != 'Unified' else ''} "
                           f"{format_size(c['size'])}" for c in self.cpu.get("caches", []))
        lines.append(f"cpu: {', '.join(self.cpu.get('isas', [])) or 'scalar only'}; caches {caches}")
        lines.append("gpus: " + ("none" if not self.gpus else ", ".join(
            f"{g['name']} ({g['memory']}, NUMA {g.get('numa_node')})" for g in self.gpus)))
        return "\n".join(lines)


def _emulated() -> dict | None:
    """What `cxlbench emulate` says of the guest this runs in (None on real machines)."""
    text = os.environ.get("CXLBENCH_EMULATED")
    if not text:
        return None
    try:
        marker = json.loads(text)
    except json.JSONDecodeError:
        return {"topology": "unknown", "qemu": "?", "accel": "?", "raw": text}
    probe = _read(Path(marker.get("probe_file", "/nonexistent")))
    if probe:
        marker["far_memory_check"] = json.loads(probe)
    return marker


def format_size_mib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


# ---- readers ----------------------------------------------------------------------------
def meminfo(path: Path) -> dict[str, int]:
    """/proc/meminfo or a node's meminfo ("Node 0 MemFree: ... kB") -> bytes by field."""
    out = {}
    for line in (_read(path, "") or "").splitlines():
        m = re.match(r"(?:Node\s+\d+\s+)?(\S+):\s+(\d+)(\s+kB)?", line)
        if m:
            out[m.group(1)] = int(m.group(2)) * (1024 if m.group(3) else 1)
    return out


def _read_nodes(sysfs: Path, procfs: Path) -> list[Node]:
    base = sysfs / "devices/system/node"
    nodes, rows = [], {}
    for node_id, d in _numbered(base, "node"):
        info = meminfo(d / "meminfo")
        cpus = parse_list(_read(d / "cpulist")) if _read(d / "cpulist") else []
        rows[node_id] = [int(x) for x in (_read(d / "distance", "") or "").split()]
        hugepages = {}
        for p in sorted((d / "hugepages").glob("hugepages-*")):
            hugepages[p.name.split("-", 1)[1]] = {"total": _int(p / "nr_hugepages", 0),
                                                  "free": _int(p / "free_hugepages", 0)}
        hmat = {}
        for access in ("access0", "access1"):
            values = {k: _int(d / access / "initiators" / k) for k in HMAT_KEYS}
            values = {k: v for k, v in values.items() if v is not None}
            if values:
                initiators = sorted(int(p.name[4:]) for p in (d / access / "initiators").glob("node*"))
                hmat[access] = {**values, "initiators": initiators}
        nodes.append(Node(id=node_id, cpus=cpus, mem_total=info.get("MemTotal", 0),
                          mem_free=info.get("MemFree", 0), distances={}, hugepages=hugepages,
                          hmat=hmat))
    ids = [n.id for n in nodes]
    for n in nodes:
        n.distances = dict(zip(ids, rows[n.id]))
        n.far_memory = n.has_memory and not n.cpus
    if len(nodes) == 1:
        # Some VMs hot-plug memory that the node's meminfo does not count; on one node the
        # whole machine's figures are the node's.
        sysinfo = meminfo(procfs / "meminfo")
        n = nodes[0]
        n.mem_total = max(n.mem_total, sysinfo.get("MemTotal", 0))
        n.mem_free = max(n.mem_free, sysinfo.get("MemFree", 0))
    return nodes


def _read_tiers(sysfs: Path) -> dict[int, list[int]]:
    tiers = {}
    for tier_id, d in _numbered(sysfs / "devices/virtual/memory_tiering", "memory_tier"):
        text = _read(d / "nodelist")
        tiers[tier_id] = parse_list(text) if text else []
    return tiers


def _read_settings(sysfs: Path, procfs: Path) -> dict:
    weights = {}
    wdir = sysfs / "kernel/mm/mempolicy/weighted_interleave"
    for node_id, p in _numbered(wdir, "node"):
        weights[node_id] = _int(p)
    balancing = _int(procfs / "sys/kernel/numa_balancing")
    return {
        "numa_balancing": {0: "disabled", 1: "normal", 2: "memory tiering", 3: "normal+tiering"}
        .get(balancing, balancing),
        "demotion_enabled": _read(sysfs / "kernel/mm/numa/demotion_enabled"),
        "thp_enabled": _bracketed(_read(sysfs / "kernel/mm/transparent_hugepage/enabled")),
        "thp_defrag": _bracketed(_read(sysfs / "kernel/mm/transparent_hugepage/defrag")),
        "weighted_interleave": weights,
        "weighted_interleave_auto": _read(wdir / "auto"),
        "governor": _read(sysfs / "devices/system/cpu/cpu0/cpufreq/scaling_governor", "none"),
    }


def _read_cpu(sysfs: Path, procfs: Path) -> dict:
    model, flags = None, set()
    for line in (_read(procfs / "cpuinfo", "") or "").splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model") and model is None:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    isas = [isa for isa, flag in (("avx2", "avx2"), ("avx512", "avx512f")) if flag in flags]
    caches = []
    for _, d in _numbered(sysfs / "devices/system/cpu/cpu0/cache", "index"):
        size = _read(d / "size")
        if size:
            caches.append({"level": _int(d / "level"), "type": _read(d / "type", "Unified"),
                           "size": int(size.rstrip("K")) * 1024 if size.endswith("K") else int(size),
                           "shared_cpus": _read(d / "shared_cpu_list")})
    online = _read(sysfs / "devices/system/cpu/online")
    # procfs rather than os.sched_getaffinity, so a fixture tree says it too.
    status = _read(procfs / "self/status", "") or ""
    m = re.search(r"^Cpus_allowed_list:\s*(\S+)", status, re.M)
    return {"model": model, "isas": isas, "caches": caches, "online": online,
            "allowed": m.group(1) if m else online}


def _link_name(link: Path) -> str | None:
    """The last part of a symlink's target (a driver's or a device's name), read from the
    link itself: sysfs copies (containers, support bundles, partial snapshots) keep links
    whose targets are missing, and the name still says what the link points at."""
    try:
        return os.readlink(link).rstrip("/").rpartition("/")[2] or None
    except OSError:         # no link there (unbound), or not a link at all
        return None


def _cxl_parent(path: Path, prefix: str) -> str | None:
    """Name of the nearest ancestor (or self) called prefixN, following the real path.
    (resolve() without strict= reads link targets without requiring them to exist.)"""
    for part in reversed(path.resolve().parts):
        if re.fullmatch(re.escape(prefix) + r"\d+(\.\d+)?", part):
            return part
    return None


def _read_cxl(sysfs: Path) -> dict:
    devices = sysfs / "bus/cxl/devices"
    memdevs, regions, root_decoders, endpoints = [], [], [], {}
    if not devices.is_dir():
        return {"memdevs": [], "regions": [], "root_decoders": []}
    for p in sorted(devices.iterdir()):
        name = p.name
        if re.fullmatch(r"mem\d+", name):
            memdevs.append({"name": name, "serial": _read(p / "serial"),
                            "ram_size": _hex_or_int(p / "ram/size"),
                            "pmem_size": _hex_or_int(p / "pmem/size"),
                            "numa_node": _int(p / "numa_node")})
        elif re.fullmatch(r"decoder\d+\.\d+", name):
            parent = p.resolve().parent
            if re.fullmatch(r"root\d+", parent.name):
                root_decoders.append({
                    "name": name, "start": _hex_or_int(p / "start"), "size": _hex_or_int(p / "size"),
                    "interleave_ways": _int(p / "interleave_ways"),
                    "interleave_granularity": _int(p / "interleave_granularity"),
                    "target_list": _read(p / "target_list")})
            elif re.fullmatch(r"endpoint\d+", parent.name):
                memdev = _link_name(parent / "uport") or _cxl_parent(parent, "mem")
                endpoints[name] = (memdev, _read(p / "mode"))
    for p in sorted(devices.iterdir()):
        if re.fullmatch(r"region\d+", p.name):
            ways = _int(p / "interleave_ways", 0) or 0
            targets, modes = [], set()
            for i in range(ways):
                decoder = _read(p / f"target{i}")
                if decoder:
                    memdev, mode = endpoints.get(decoder, (None, None))
                    targets.append({"decoder": decoder, "memdev": memdev})
                    modes.add(mode)
            # Before Linux 6.3 a region has no mode file; its endpoint decoders say it.
            mode = _read(p / "mode") or (modes.pop() if len(modes) == 1 else None)
            regions.append({
                "name": p.name, "mode": mode, "size": _hex_or_int(p / "size"),
                "resource": _hex_or_int(p / "resource"), "interleave_ways": ways,
                "interleave_granularity": _int(p / "interleave_granularity"),
                "root_decoder": _cxl_parent(p.resolve().parent, "decoder"),
                "targets": targets, "node": None})
    return {"memdevs": memdevs, "regions": regions, "root_decoders": root_decoders}


def _read_dax(sysfs: Path) -> list[dict]:
    out = []
    devices = sysfs / "bus/dax/devices"
    if not devices.is_dir():
        return out
    for p in sorted(devices.iterdir()):
        driver_name = _link_name(p / "driver")
        # A DAX device of the nvdimm path hangs off an nd region (ndbusN/regionM), whose
        # number is not the CXL region's: only a CXL-bus parent names the region.
        parents = p.resolve().parts
        nd = any(re.fullmatch(r"ndbus\d+", part) for part in parents)
        out.append({"name": p.name, "size": _int(p / "size"),
                    "resource": _hex_or_int(p / "resource"),
                    "target_node": _int(p / "target_node"),
                    "mode": {"kmem": "system-ram", "device_dax": "devdax"}.get(driver_name,
                                                                              driver_name),
                    "region": None if nd else _cxl_parent(p, "region")})
    return out


def _map_regions_to_nodes(sysfs: Path, cxl: dict, dax: list[dict], nodes: list[Node]) -> None:
    """A region feeds the node of a system-ram DAX device inside it (its parent, or a
    device whose physical range lies in the region's: the nvdimm path), or else the node
    whose memory blocks lie in the region's range."""
    block = _hex_or_int_text(_read(sysfs / "devices/system/memory/block_size_bytes"))
    blocks = {n.id: [i * block for i, _ in _numbered(sysfs / f"devices/system/node/node{n.id}",
                                                     "memory")]
              for n in nodes} if block and cxl["regions"] else {}
    for region in cxl["regions"]:
        inside = _inside(region)
        for d in dax:
            if d["region"] == region["name"] or (d["resource"] is not None and d["size"] and
                                                 inside(d["resource"], d["size"])):
                d["region"] = region["name"]
                if d["mode"] == "system-ram" and region["node"] is None:
                    region["node"] = d["target_node"]
        if region["node"] is None:
            region["node"] = next((node for node, starts in blocks.items()
                                   if any(inside(a, block) for a in starts)), None)
        for n in nodes:
            if n.id == region["node"]:
                n.cxl_regions.append(region["name"])


def _inside(region: dict):
    """range -> whether [start, start + size) lies in the region's physical range."""
    lo, size = region["resource"], region["size"]
    if lo is None or not size:
        return lambda start, n: False
    return lambda start, n: lo <= start and start + n <= lo + size


def _hex_or_int_text(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(text, 16)        # block_size_bytes is hex without a prefix
    except ValueError:
        return None


GPU_QUERY = "name,memory.total,pcie.link.gen.current,pcie.link.width.current,pci.bus_id"
# Asked apart: a driver that lacks one of these (MIG before R450) refuses the whole query.
GPU_SETTINGS = {"ecc": "ecc.mode.current", "mig": "mig.mode.current",
                "max_sm_clock": "clocks.max.sm", "max_memory_clock": "clocks.max.memory",
                "driver": "driver_version", "pcie_max_gen": "pcie.link.gen.max"}


def _smi(query: str) -> list[list[str]] | None:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [[x.strip() for x in line.split(",")] for line in out.strip().splitlines()]


def _read_gpus(sysfs: Path) -> list[dict]:
    """What nvidia-smi says of each GPU (settings as they are: never changed; pcie the link
    now, which idle is Gen1, and pcie_max_gen the most it reaches), the host
    node nearest it from sysfs, and where the GPU library loads, the runtime's facts of
    the same device (matched by PCI address): SMs, L2, compute capability."""
    if not shutil.which("nvidia-smi"):
        return []
    gpus = []
    for name, memory, gen, width, bus in _smi(GPU_QUERY) or []:
        numa = _int(sysfs / "bus/pci/devices" / bus.lower()[-12:] / "numa_node")
        gpus.append({"name": name, "memory": memory, "pcie": f"gen{gen} x{width}",
                     "bus_id": bus, "numa_node": numa})
    settings = _smi(",".join(GPU_SETTINGS.values()))
    if settings and len(settings) == len(gpus):     # the same GPUs, in the same order
        for g, values in zip(gpus, settings):
            g.update(zip(GPU_SETTINGS, values))
    _add_cuda_facts(gpus)
    return gpus


def _pci_address(bus_id: str) -> tuple[int, int, int] | None:
    """nvidia-smi's 00000000:17:00.0 as (domain, bus, device)."""
    try:
        domain, bus, rest = bus_id.split(":")
        return int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
    except ValueError:
        return None


def _add_cuda_facts(gpus: list[dict]) -> None:
    if not gpus or gpu.unavailable() is not None:
        return
    by_address = {_pci_address(g["bus_id"]): g for g in gpus}
    for index in range(gpu.runtime().devices):
        try:
            d = gpu.device(index)
        except gpu.GpuError:        # a device the runtime cannot describe keeps smi's facts
            continue
        g = by_address.get((d["pci_domain"], d["pci_bus"], d["pci_device"]))
        if g is not None:
            g["cuda"] = {k: d[k] for k in ("index", "major", "minor", "sms", "l2_bytes",
                                           "max_threads_per_sm", "bus_width_bits")}


def no_movable_command(topo: "Topology", movable) -> str:
    """The command (as root) that onlines these nodes' memory outside ZONE_MOVABLE, so it
    can be pinned: daxctl's where a DAX device in system-ram mode feeds a node, the memory
    blocks' own state files for the rest."""
    daxes = [d for d in topo.dax if d["mode"] == "system-ram" and d["target_node"] in movable]
    names = " ".join(d["name"] for d in daxes)
    rest = sorted(set(movable) - {d["target_node"] for d in daxes})
    parts = [f"daxctl offline-memory {names} && daxctl online-memory --no-movable {names}"
             ] if daxes else []
    if rest:
        parts.append("for b in " + " ".join(f"/sys/devices/system/node/node{n}/memory*"
                                            for n in rest)
                     + "; do echo offline > $b/state && echo online_kernel > $b/state; done")
    return "; ".join(parts)
