"""In the guest, before any figure: the far-memory nodes exist and hold data. Writes a
pattern to a buffer bound to each CPU-less node, reads it back, and checks placement.
Prints a JSON report; exits 1 when a node is missing or loses data."""
from __future__ import annotations

import json
import sys

import numpy as np

from .. import memory
from ..placement import Placement
from ..topology import Topology

WORDS = 4 << 20        # 32 MiB: enough to span many pages, small for emulated CXL


def main() -> int:
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
