"""In the guest, before any figure: the far-memory nodes exist and hold data. Writes a
pattern to a buffer bound to each CPU-less node, reads it back, and checks placement.
A guest of two sharing one device has no far node but the device's DAX region: it maps
it and writes a pattern to a page of its own at the end (the start is where the hosts
meet), reading it back. Prints a JSON report; exits 1 when a node or the region is
missing or loses data."""
from __future__ import annotations

import json
import os
import sys

import numpy as np

from .. import memory
from ..placement import Placement
from ..shared_region import PAGE, Region, dax_size
from ..topology import Topology

WORDS = 4 << 20        # 32 MiB: enough to span many pages, small for emulated CXL


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
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
