"""Placement specs, checks before allocation, verified placement and page size, numpy views."""
import gc
from pathlib import Path

import numpy as np
import pytest

from cxlbench import memory
from cxlbench.benchmarks.common import Measurement, measure
from cxlbench.errors import PlacementError, UserError
from cxlbench.memory import Buffer, Placement, check_request, huge_bytes

from .conftest import free_hugepages

PAGE_NEEDS = {"4k": None, "thp": None, "2m": "2m", "1g": "1g"}


@pytest.mark.parametrize("text,canonical", [
    ("local", "local"), ("bind:0", "bind:0"), ("preferred:2", "preferred:2"),
    ("interleave:0-3", "interleave:0-3"), ("interleave:3,0,1,2", "interleave:0-3"),
    ("weighted:0=3,2=1", "weighted:0=3,2=1"), ("weighted:0-1=2,2=1", "weighted:0=2,1=2,2=1"),
])
def test_spec_parses(text, canonical):
    assert str(Placement.parse(text)) == canonical


@pytest.mark.parametrize("text,message", [
    ("bind", "malformed placement"), ("bind:", "malformed placement"),
    ("bind:a", "not a list of numbers"), ("stripe:0", "unknown policy"),
    ("preferred:0-1", "exactly one node"), ("weighted:0=0", "outside 1..255"),
    ("weighted:0", "is not NODES=WEIGHT"), ("weighted:0=1,0=2", "weighted twice"),
    ("interleave:3-1", "runs backwards"),
])
def test_malformed_spec(text, message):
    with pytest.raises(PlacementError, match=message):
        Placement.parse(text)


def test_shares():
    assert Placement.parse("weighted:0=3,2=1").shares([]) == {0: 0.75, 2: 0.25}
    assert Placement.parse("interleave:0-3").shares([]) == {n: 0.25 for n in range(4)}


def test_checks_against_fixture_topology(topo):
    t = topo("two_socket_cxl")
    ok = check_request(Placement.parse("bind:2"), "4k", 1 << 30, t, [0])
    assert ok == [2]
    assert check_request(Placement.parse("local"), "4k", 1 << 20, t, [4, 5]) == [1]
    with pytest.raises(PlacementError, match="node 7 does not exist"):
        check_request(Placement.parse("bind:7"), "4k", 4096, t, [0])
    with pytest.raises(PlacementError, match=r"exceeds its free memory \(14746 MiB free"):
        check_request(Placement.parse("bind:2"), "4k", 15 << 30, t, [0])
    with pytest.raises(PlacementError, match="hugepages-2048kB/nr_hugepages"):
        check_request(Placement.parse("bind:2"), "2m", 4 << 20, t, [0])
    # 16 free 2 MiB pages on node 0: 32 MiB fits, 34 MiB does not
    check_request(Placement.parse("bind:0"), "2m", 32 << 20, t, [0])
    with pytest.raises(PlacementError, match="has 16 free 2m pages, 17 needed"):
        check_request(Placement.parse("bind:0"), "2m", 34 << 20, t, [0])


def test_node_without_memory_refused(topo, machines):
    t = topo("two_socket_cxl")
    t.node(1).mem_total = 0               # a CPU-only node, as on some servers
    with pytest.raises(PlacementError, match="node 1 has no memory"):
        check_request(Placement.parse("interleave:0-1"), "4k", 1 << 20, t, [0])


@pytest.mark.parametrize("page", list(PAGE_NEEDS))
def test_placement_verified_on_node0(page):
    need = PAGE_NEEDS[page]
    if need and free_hugepages(need) < 1:
        pytest.skip(f"no free {page} hugetlb pages on node 0 (raise "
                    f"/sys/kernel/mm/hugepages/*/nr_hugepages to test it)")
    size = (1 << 30) if page == "1g" else (8 << 20)
    b = Buffer(size, "bind:0", page)
    v = b.ensure_placed("after allocation")
    step = 1 << 30 if page == "1g" else (2 << 20 if page == "2m" else 4096)
    assert v.step == step
    assert v.counts[0] == size // step and v.other == 0 and v.deviation == 0
    assert v.huge == (0.0 if page == "4k" else 1.0)


def test_weighted_places_and_records_method():
    b = Buffer(4 << 20, "weighted:0=3", "4k")
    assert b.method in ("kernel", "manual")
    assert b.ensure_placed("after allocation").counts[0] == 1024
    assert b.placement_method in ("MPOL_WEIGHTED_INTERLEAVE", "mbind page ranges")


def test_verification_catches_misplaced_pages(monkeypatch):
    """Pages reported outside the spec's node fail the check, beyond the tolerance."""
    b = Buffer(4 << 20, "bind:0", "4k")
    monkeypatch.setattr(b.alloc, "query_nodes", lambda step, maxnode: ([1000, 24], 0))
    with pytest.raises(PlacementError, match=r"0:1000;1:24, 2.3% misplaced"):
        b.ensure_placed("after the case")
    b.tolerance = 0.05
    assert b.ensure_placed("after the case").ok
    # pages not present are misplaced once, not also counted as missing from node 0
    monkeypatch.setattr(b.alloc, "query_nodes", lambda step, maxnode: ([0, 0], 1024))
    assert b.verify().deviation == 1.0


def test_numpy_array_is_placed_shared_and_freed():
    a = memory.array((256, 1024), "f8", mem="bind:0", page="thp")
    assert a.shape == (256, 1024) and a.dtype == np.float64
    a[:] = 2.0
    assert a.sum() == 2.0 * 256 * 1024
    addr = a.__array_interface__["data"][0]

    def mapped():
        for line in Path("/proc/self/maps").read_text().splitlines():
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= addr < hi:
                return True
        return False
    assert mapped()
    view = a[10:20]
    del a
    gc.collect()
    assert mapped(), "a view still uses the memory"
    del view
    gc.collect()
    assert not mapped()


THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")
needs_thp = pytest.mark.skipif(
    not THP_ENABLED.exists() or "[never]" in THP_ENABLED.read_text(),
    reason="transparent huge pages are off here (/sys/kernel/mm/transparent_hugepage/enabled)")
MB = 1 << 20


def smaps(*vmas) -> str:
    """smaps text: (start, end, AnonHugePages bytes[, KernelPageSize kB]) per VMA."""
    out = []
    for start, end, huge, *kernel_page in vmas:
        out += [f"{start:x}-{end:x} rw-p 00000000 00:00 0 ",
                f"Size:           {(end - start) >> 10:8d} kB",
                f"KernelPageSize: {(kernel_page or [4])[0]:8d} kB",
                f"AnonHugePages:  {huge >> 10:8d} kB",
                "THPeligible:    1", "VmFlags: rd wr mr mw me ac hg"]
    return "\n".join(out) + "\n"


def test_huge_bytes_from_smaps_by_address_range():
    lo, hi = 0x40000000, 0x40000000 + 8 * MB
    assert huge_bytes(smaps((lo, hi, 6 * MB)), lo, hi) == (6 * MB, True)
    # other VMAs do not count; a VMA split in two (mbind, mprotect) counts both halves
    text = smaps((lo - 4 * MB, lo, 4 * MB), (lo, lo + 2 * MB, 2 * MB), (lo + 2 * MB, hi, 4 * MB),
                 (hi, hi + 2 * MB, 2 * MB))
    assert huge_bytes(text, lo, hi) == (6 * MB, True)
    # merged with a 4 MiB neighbour: only what cannot lie outside is credited
    assert huge_bytes(smaps((lo - 4 * MB, hi, 12 * MB)), lo, hi) == (8 * MB, False)
    assert huge_bytes(smaps((lo - 4 * MB, hi, 10 * MB)), lo, hi) == (6 * MB, False)
    assert huge_bytes(smaps((lo - 4 * MB, hi, 0)), lo, hi) == (0, True)
    # hugetlb: huge by construction, whatever AnonHugePages says
    assert huge_bytes(smaps((lo, hi, 0, 2048)), lo, hi) == (8 * MB, True)


@needs_thp
@pytest.mark.parametrize("size", [1 * MB, 3 * MB, 8 * MB])
def test_thp_buffer_is_huge_and_4k_is_not(size):
    thp = Buffer(size, "bind:0", "thp").ensure_placed("after allocation")
    small = Buffer(size, "bind:0", "4k").ensure_placed("after allocation")
    assert thp.huge >= 0.99 and thp.huge_exact and thp.ok
    assert small.huge == 0 and small.ok
    assert thp.to_dict()["huge"] == thp.huge and small.to_dict()["huge"] == 0


@needs_thp
def test_thp_below_tolerance_fails_with_the_reason(tmp_path, monkeypatch):
    b = Buffer(8 * MB, "bind:0", "thp")
    fixture = tmp_path / "smaps"
    fixture.write_text(smaps((b.addr, b.addr + 8 * MB, 6 * MB)))
    b.smaps = str(fixture)
    monkeypatch.setitem(b.topology.settings, "thp_defrag", "never")
    with pytest.raises(PlacementError, match=r"^page=thp not honoured after allocation: 75.0% "
                       r"of 8M in huge pages \(tolerance 1.0%\): no free 2 MiB pages at fault "
                       r"and no compaction tried \(/sys/kernel/mm/transparent_hugepage/defrag "
                       r"is never"):
        b.ensure_placed("after allocation")
    monkeypatch.setitem(b.topology.settings, "thp_defrag", "madvise")
    with pytest.raises(PlacementError, match=r"too fragmented .*/defrag is madvise"):
        b.ensure_placed("after allocation")
    b.tolerance = 0.25                   # one 2 MiB page of four may be small
    assert b.ensure_placed("after allocation").ok


@needs_thp
def test_case_fails_when_huge_pages_were_split(tmp_path):
    """measure() records the fraction per buffer and fails the case like misplaced pages."""
    bufs = [Buffer(4 * MB, "bind:0", "thp") for _ in range(2)]
    for b in bufs:
        b.ensure_placed("after allocation")
    fixture = tmp_path / "smaps"
    fixture.write_text(smaps((bufs[1].addr, bufs[1].addr + 4 * MB, 2 * MB)))
    bufs[1].smaps = str(fixture)
    params = {"mem": "bind:0", "page": "thp", "warmup": 0, "repeat": 1}
    m = measure(Measurement("k", "scalar", [0], {"x": "s"}), params, bufs, lambda: {"x": 1.0})
    assert [v["huge"] for v in m.placement["verified"]] == [1.0, 0.5]
    assert [v["ok"] for v in m.placement["verified"]] == [True, False]
    assert m.status == "failed" and m.reps == [{"x": 1.0}]
    assert m.error.startswith("page=thp not honoured after the case: 50.0% of 4M")
    assert "split since allocation" in m.error


def test_thp_refused_up_front_when_disabled(topo):
    t = topo("vm")
    for mode in ("always", "madvise"):
        t.settings["thp_enabled"] = mode
        check_request(Placement.parse("bind:0"), "thp", 4 * MB, t, [0])
    t.settings["thp_enabled"] = "never"
    with pytest.raises(UserError, match=r"/sys/kernel/mm/transparent_hugepage/enabled is never"):
        check_request(Placement.parse("bind:0"), "thp", 4 * MB, t, [0])
    check_request(Placement.parse("bind:0"), "4k", 4 * MB, t, [0])


@needs_thp
def test_numpy_array_verification_reports_the_huge_fraction():
    a = memory.array((512, 1024), "f8", mem="bind:0", page="thp")
    v = memory.verify(a[100:200])       # a view reads back the whole buffer
    assert v.ok and v.huge >= 0.99 and v.counts[0] == 1024
    assert memory.verify(memory.array(1000, "u1")).huge == 0
    with pytest.raises(PlacementError, match="made by cxlbench.memory.array"):
        memory.verify(np.zeros(4))


def vma_policy(addr: int) -> str:
    """The policy /proc/self/numa_maps shows for the mapping at addr."""
    for line in Path("/proc/self/numa_maps").read_text().splitlines():
        start, policy = line.split()[:2]
        if int(start, 16) == addr:
            return policy
    raise AssertionError(f"no mapping at {addr:#x} in numa_maps")


def test_release_policy_leaves_the_pages_and_drops_the_ranges_policy():
    """What lets NUMA balancing scan a tiering buffer: after release the range shows the
    default policy (the task's), its pages where they were."""
    b = Buffer(1 << 20, mem="bind:0", page="4k", name="x")
    assert vma_policy(b.addr) == "bind:0"
    before = memory.node_map(b)
    b.release_policy()
    assert vma_policy(b.addr) == "default"
    assert (memory.node_map(b) == before).all() and b.verify().ok
