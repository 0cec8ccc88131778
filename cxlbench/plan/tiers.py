"""The memory a plan places parts on, with each capacity's and each figure's source: the
GPU's HBM (nvidia-smi's, or --gpu-mem), the host's DRAM (its CPU nodes' MemTotal, less a
share kept for the system, or --dram), and a slower host tier (its CPU-less nodes, CXL or
emulated far memory; where this machine has none, one assumed from a named profile, as
large as the job needs unless --slow-mem bounds it). A host tier's speed is its node's
calibration (`cxlbench calibrate`), or the fast node's scaled by HMAT or the profile."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..errors import UserError
from ..tiering import calibration, checked
from ..tiering.calibration import Calibration
from ..units import format_size, parse_size

RESERVE = 0.10          # of DRAM, kept for the kernel, the framework and page cache


@dataclass(frozen=True)
class Tier:
    name: str                   # "DRAM", "slow"
    nodes: tuple[int, ...]      # () where assumed: no such node on this machine
    capacity: float             # bytes the plan may use (inf: as much as needed)
    capacity_source: str
    cal: Calibration | None     # None: not calibrated here (no times predicted)

    @property
    def speed_source(self) -> str:
        return self.cal.source if self.cal else "not calibrated"


@dataclass(frozen=True)
class Machine:
    gpu: float | None           # bytes of one GPU's memory (None: no GPU here, none given)
    gpu_source: str
    host: tuple[Tier, Tier]     # fast (DRAM), slow
    threads: int                # host CPUs the memory-bound work runs on
    # the model's error on this machine's checked cases, by benchmark (tiering.checked)
    checked: dict = field(default_factory=dict)

    @property
    def timed(self) -> bool:
        return all(t.cal is not None for t in self.host)


def _size(text: str | None, flag: str) -> float | None:
    if text is None:
        return None
    try:
        return float(parse_size(text))
    except ValueError as e:
        raise UserError(f"{flag} {text}: {e}") from None


def _gpu(topology, given: float | None) -> tuple[float | None, str]:
    if given is not None:
        return given, "given (--gpu-mem)"
    if topology.gpus:
        g = topology.gpus[0]
        found = re.match(r"\s*(\d+)\s*MiB", str(g.get("memory", "")))
        if found:
            return int(found.group(1)) << 20, f"nvidia-smi: {g['name']}"
    return None, "no GPU here: the GPU parts are counted, not fitted (--gpu-mem to fit them)"


def machine(topology, *, gpu_mem: str | None = None, dram: str | None = None,
            slow_mem: str | None = None, profile: str = "", calibration_path: str = "",
            results_dir=None) -> Machine:
    """This machine's tiers as a plan sees them, each capacity and figure with its source.
    Several DRAM nodes are one tier (the ranks spread over the sockets), as are several
    CPU-less nodes; each tier's speed is its first node's."""
    if profile and profile not in calibration.profiles():  # checked with a calibration or not
        raise UserError(f"plan: --slow-tier {profile}: no such profile (the profiles: "
                        f"{', '.join(calibration.profiles())})")
    fast_nodes = tuple(n.id for n in topology.nodes if n.cpus and n.has_memory)
    slow_nodes = tuple(n.id for n in topology.nodes if n.far_memory)
    if not fast_nodes:
        raise UserError("plan: no node with CPUs and memory here")
    by_id = {n.id: n for n in topology.nodes}
    given = _size(dram, "--dram")
    total = sum(by_id[i].mem_total for i in fast_nodes)
    dram_cap, dram_src = (given, "given (--dram)") if given is not None else (
        total * (1 - RESERVE), f"MemTotal of node{'s' if len(fast_nodes) > 1 else ''} "
        f"{','.join(map(str, fast_nodes))} ({format_size(total, exact=False)}), less "
        f"{RESERVE:.0%} kept for the system")
    given = _size(slow_mem, "--slow-mem")
    if slow_nodes:
        total = sum(by_id[i].mem_total for i in slow_nodes)
        slow_cap, slow_src = (given, "given (--slow-mem)") if given is not None else (
            float(total), f"MemTotal of CPU-less node{'s' if len(slow_nodes) > 1 else ''} "
            f"{','.join(map(str, slow_nodes))}")
    else:
        slow_cap, slow_src = (given, "given (--slow-mem)") if given is not None else (
            math.inf, "none here: an assumed tier as large as the job needs (--slow-mem "
            "bounds it)")
    found = calibration.tiers(fast_nodes[0], slow_nodes[0] if slow_nodes else None, topology,
                              path=calibration_path, profile=profile, results_dir=results_dir)
    fast_cal, slow_cal = found if found else (None, None)
    threads = fast_cal.threads if fast_cal else sum(len(by_id[i].cpus) for i in fast_nodes)
    gpu, gpu_src = _gpu(topology, _size(gpu_mem, "--gpu-mem"))
    return Machine(gpu, gpu_src,
                   (Tier("DRAM", fast_nodes, dram_cap, dram_src, fast_cal),
                    Tier("slow", slow_nodes, slow_cap, slow_src, slow_cal)),
                   threads, checked.errors(results_dir or calibration.default_results_dir())
                   if fast_cal else {})
