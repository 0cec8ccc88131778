"""In the guest, before any figure: the far-memory nodes exist and hold data. Writes a
pattern to a buffer bound to each CPU-less node, reads it back, and checks placement.
Then times a small chase and a small read on the near node and the first far one, and
says once (on stderr, which the host relays) how much slower the far node is under the
emulator, against what its HMAT declares: under TCG every access to the emulated device
is emulated, so far memory runs far slower than any device would (recorded in the report
as "tcg", and the guest's time estimates scale the near node's figures by it).
A guest of two sharing one device has no far node but the device's DAX region: it maps
it and writes a pattern to a page of its own at the end (the start is where the hosts
meet), reading it back. Prints a JSON report; exits 1 when a node or the region is
missing or loses data."""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from .. import benchmarks, memory
from ..placement import Placement
from ..shared_region import PAGE, Region, dax_size
from ..tiering.calibration import hmat_figures
from ..topology import Topology

WORDS = 4 << 20        # 32 MiB: enough to span many pages, small for emulated CXL
CHASE = {"size": 4 << 20, "loads": 20000, "repeat": 3, "warmup": 1}     # a few ms near
READ = {"size": 8 << 20, "passes": 1, "threads": 1, "repeat": 3, "warmup": 1}
TOUCH = 4 << 20         # placed and first touched: the emulated device's page writes


def _median(bench: str, node: int, metric: str, **over) -> float:
    b = benchmarks.get(bench)
    params = {**{k: o.default for k, o in b.options.items()}, **over,
              "mem": str(Placement.bind(node))}
    values = sorted(r[metric] for r in b.run(params).reps)
    return float(values[len(values) // 2])


def _touch_s(node: int, topo: Topology) -> float:
    """Seconds to first touch each page of TOUCH bytes placed on the node (the best of
    two; the placement's own checks before it are not timed)."""
    best = float("inf")
    for _ in range(2):
        buf = memory.Buffer(TOUCH, mem=Placement.bind(node), topology=topo, prefault=False)
        t0 = time.perf_counter()
        buf.alloc.prefault(buf.cpus)
        best = min(best, time.perf_counter() - t0)
        del buf         # unmapped: the next one is placed anew
    return best


def _best(measure, bench: str, metric: str, near: int, far: int, pick, **over) -> dict:
    """Each node measured twice in the order near, far, far, near, keeping its best: a
    stall of the shared host (or the emulator translating code) in one measurement would
    otherwise make the near node look slower than the far one."""
    seen: dict[int, list[float]] = {near: [], far: []}
    for n in (near, far, far, near):
        seen[n].append(measure(bench, n, metric, **over))
    return {n: pick(v) for n, v in seen.items()}


def emulated_ratio(topo: Topology, near: int, far: int, measure=_median,
                   touch=None) -> dict:
    """How much slower the far node's loads, reads and first touches are than the near
    node's here, and how much slower its HMAT says it is (None where the firmware gives
    no latency)."""
    lat = _best(measure, "chase", "latency", near, far, min, **CHASE)
    read = _best(measure, "bandwidth", "bandwidth", near, far, max, **READ)
    placed = {n: (touch or _touch_s)(n, topo) for n in (near, far)}
    declared = [hmat_figures(topo, n) for n in (near, far)]
    hmat = declared[1].latency_ns / declared[0].latency_ns if all(declared) else None
    return {"near": near, "far": far, "latency_ns": {str(n): lat[n] for n in lat},
            "read_gbs": {str(n): read[n] for n in read}, "slower": lat[far] / lat[near],
            "read_slower": read[near] / read[far],
            "touch_slower": placed[far] / max(placed[near], 1e-9), "hmat_slower": hmat}


def times(x: float) -> str:
    return f"{x:.1f}x" if x < 10 else f"{x:.0f}x"


def ratio_line(r: dict, accel: str) -> str:
    declared = f"HMAT declares {times(r['hmat_slower'])}" if r["hmat_slower"] else "no HMAT"
    return (f"far memory under {accel.upper()}: {times(r['slower'])} slower than near for "
            f"loads, {times(r['read_slower'])} for reads ({declared}); node {r['far']}'s "
            f"figures here are the emulator's, not a device's")


def shared(path: str, host: int) -> dict:
    """The shared region mapped, and a page of this host's own (the last but `host`)
    holding a pattern written and read back."""
    size, _ = dax_size(os.stat(path))
    with Region(path, size) as r:
        page = r.view[size - (host + 1) * PAGE:size - host * PAGE].view(np.uint64)
        pattern = np.arange(page.size, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15 + host)
        page[:] = pattern
        wrong = int(np.count_nonzero(page != pattern))
        del page
    report = {"region": path, "bytes": size, "host": host, "wrong": wrong}
    if wrong:
        report["error"] = "data written to the shared region did not read back intact"
    return report


def main() -> int:
    region = os.environ.get("CXLBENCH_SHARED_REGION")
    if region:
        try:
            report = shared(region, int(os.environ.get("CXLBENCH_SHARED_HOST", "0")))
        except Exception as e:          # noqa: BLE001 - the guest's set-up says why
            report = {"region": region, "error": str(e)}
        print(json.dumps(report))
        return 1 if "error" in report else 0
    topo = Topology.read(probe_gpus=False)
    report = {"far_nodes": topo.far_memory_nodes, "nodes": {}}
    if not topo.far_memory_nodes:
        report["error"] = "no CPU-less node came online"
        print(json.dumps(report))
        return 1
    pattern = np.arange(WORDS, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    ok = True
    for node in topo.far_memory_nodes:
        a = memory.array(WORDS, np.uint64, mem=Placement.bind(node))
        a[:] = pattern
        wrong = int(np.count_nonzero(a != pattern))
        report["nodes"][node] = {"words": WORDS, "wrong": wrong}
        ok &= wrong == 0
        del a
    if not ok:
        report["error"] = "data written to far memory did not read back intact"
        print(json.dumps(report))
        return 1
    near = next((n.id for n in topo.nodes if n.cpus and n.has_memory), None)
    if near is not None:
        try:
            report["tcg"] = emulated_ratio(topo, near, topo.far_memory_nodes[0])
            accel = json.loads(os.environ.get("CXLBENCH_EMULATED", "{}")).get("accel", "tcg")
            print(ratio_line(report["tcg"], accel), file=sys.stderr, flush=True)
        except Exception as e:      # noqa: BLE001 - the figures stand without the ratio
            report["tcg_error"] = str(e)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
