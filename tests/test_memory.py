"""Placement specs, checks before allocation, verified placement, numpy views."""
import gc
from pathlib import Path

import numpy as np
import pytest

from cxlbench import memory
from cxlbench.errors import PlacementError
from cxlbench.memory import Buffer, Placement, check_request

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
    v = b.check("after allocation")
    step = 1 << 30 if page == "1g" else (2 << 20 if page == "2m" else 4096)
    assert v.step == step
    assert v.counts[0] == size // step and v.other == 0 and v.deviation == 0


def test_weighted_places_and_records_method():
    b = Buffer(4 << 20, "weighted:0=3", "4k")
    assert b.method in ("kernel", "manual")
    assert b.check("after allocation").counts[0] == 1024
    assert b.placement_method in ("MPOL_WEIGHTED_INTERLEAVE", "mbind page ranges")


def test_verification_catches_misplaced_pages(monkeypatch):
    """Pages reported outside the spec's node fail the check, beyond the tolerance."""
    b = Buffer(4 << 20, "bind:0", "4k")
    monkeypatch.setattr(b.alloc, "query_nodes", lambda step, maxnode: ([1000, 24], 0))
    with pytest.raises(PlacementError, match=r"0:1000;1:24, 2.3% misplaced"):
        b.check("after the case")
    b.tolerance = 0.05
    assert b.check("after the case").ok


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
