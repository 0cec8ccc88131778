"""cxlbench.memory.move and node_map on this machine's one node: maps of placed, unfaulted
and foreign memory, moves that report each page kept or failed, and clear refusals. The
guest test in test_emulate.py moves pages to a second node."""
import errno

import numpy as np
import pytest

from cxlbench import memory
from cxlbench.errors import PlacementError
from cxlbench.memory import Buffer

from .conftest import free_hugepages

MB = 1 << 20


def test_map_of_a_placed_buffer_and_of_a_large_thp_array():
    assert (memory.node_map(Buffer(4 * MB + 1, "local")) == 0).all()
    # 1 GiB: 262144 pages read back in C, one int32 each.
    a = memory.array(1 << 27, "u8", mem="bind:0", page="thp")
    m = memory.node_map(a)
    assert m.dtype == np.int32 and m.shape == (1 << 18,) and (m == 0).all()


def test_map_of_unfaulted_and_read_only_pages():
    b = Buffer(MB, "bind:0", prefault=False)
    assert (memory.node_map(b) == -errno.ENOENT).all()
    a = b.array(np.uint64)
    assert a[::512].sum() == 0              # a read maps the shared zero page
    a[:512 * 3] = 1                         # pages 0-2 written
    assert memory.node_map(b)[:5].tolist() == [0, 0, 0, -errno.EFAULT, -errno.EFAULT]


def test_an_array_takes_the_whole_pages_at_its_ends():
    a = memory.array(10 * 4096, "u1")
    assert memory.node_map(a[5000:9000]).tolist() == [0, 0]         # bytes in pages 1, 2
    assert memory.node_map(a[4096:8192]).size == 1
    assert memory.node_map(a[::4096]).size == 10                    # a strided view
    plain = np.ones(3 * 4096 + 100, np.uint8)                       # numpy's own memory
    lo = plain.ctypes.data
    m = memory.node_map(plain)
    assert m.size == -(-(lo + plain.size) // 4096) - lo // 4096 and (m == 0).all()


@pytest.mark.parametrize("method,batch", [("move_pages", 0), ("move_pages", 3), ("mbind", 0),
                                          ("mbind", 4)])
def test_move_reports_pages_kept_and_failed(method, batch):
    b = Buffer(64 * 4096, "bind:0", prefault=False)
    a = b.array(np.uint64)
    a[:10 * 512] = np.arange(10 * 512)      # pages 0-9 present, the rest never touched
    r = memory.move(b, 0, 5, 15, method=method, batch=batch)
    assert r.moved == 5 and r.ns > 0
    assert r.failures == {i: "ENOENT" for i in range(10, 15)}
    assert r.reasons() == "ENOENT x5"
    assert (a[:10 * 512] == np.arange(10 * 512)).all()
    assert memory.move(b, 0, 0, 10, method=method, batch=batch).failures == {}


def test_move_of_a_thp_range_and_an_array():
    a = memory.array(4 * MB, "u1", mem="bind:0", page="thp")
    a[:] = 7
    r = memory.move(a, 0, 3, 700)           # inside huge pages: base pages of them
    assert (r.moved, r.failures) == (697, {})
    assert memory.move(a[4096:], 0).moved == 1023 and (a == 7).all()


def test_hugetlb_pages_are_the_unit():
    if free_hugepages("2m") < 2:
        pytest.skip("no two free 2 MiB hugetlb pages on node 0")
    b = Buffer(4 * MB, "bind:0", "2m")
    assert memory.node_map(b).tolist() == [0, 0]
    assert memory.move(b, 0, 1).moved == 1


@pytest.mark.parametrize("args,message", [
    ((0, 0, 0), r"page range \[0, 0\) is not within the 16 pages of 4K"),
    ((0, -1), r"page range \[-1, 16\)"), ((0, 3, 17), r"\[3, 17\) is not within the 16"),
    ((7,), r"node 7 does not exist or has no memory \(nodes with memory: 0"),
    ((-1,), "node -1 does not exist"),
])
def test_bad_ranges_and_nodes_are_refused(args, message):
    with pytest.raises(PlacementError, match=message):
        memory.move(Buffer(16 * 4096, "local"), *args)


def test_bad_objects_and_methods_are_refused():
    for obj in ([1, 2], np.zeros(0), b"abc"):
        with pytest.raises(PlacementError, match="a Buffer or a non-empty numpy array"):
            memory.node_map(obj)
    with pytest.raises(PlacementError, match="'madvise' or batch 0 is not move_pages or mbind"):
        memory.move(np.ones(10), 0, method="madvise")
