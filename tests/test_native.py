"""The C core through its one boundary: the kernel table, checks, errors, timers."""
import pytest

from cxlbench import native
from cxlbench.errors import NativeError


def test_kernel_table_rows():
    keys = {k.key: k for k in native.kernels()}
    assert keys["read"].benchmark == "bandwidth"
    assert (keys["read"].bytes_read, keys["read"].bytes_written) == (8, 0)
    assert keys["read"].isas[0] == "scalar"
    assert keys["crash"].test_only and not keys["read"].test_only


@pytest.mark.parametrize("isa", native.ISAS)
def test_read_checksum_every_isa(isa):
    k = native.kernel("read")
    if isa not in k.isas or not native.isa_supported(isa):
        pytest.skip(f"{isa} is not available on this CPU or build")
    a = native.Allocation(3 << 20, "4k", "local")
    a.prefault([])
    a.fill_index([])
    n = a.size // 8
    for threads in ([0], [0, 0, 0]):        # odd split: the last thread takes the tail
        r = native.run_kernel(k, isa, [a.addr], a.size, 2, threads)
        assert r.checksum == 2 * n * (n - 1) // 2 % 2 ** 64
        assert r.ns > 0


def test_read_checksum_sees_a_changed_element():
    k = native.kernel("read")
    a = native.Allocation(1 << 20, "4k", "local")
    a.fill_index([])
    arr = a.array("u8")
    arr[12345] += 7
    n = a.size // 8
    r = native.run_kernel(k, k.best_isa(), [a.addr], a.size, 1, [0])
    assert r.checksum == (n * (n - 1) // 2 + 7) % 2 ** 64


def test_chase_cycle_covers_every_line_once():
    a = native.Allocation(1 << 20, "4k", "local")
    order = native.chase_build(a, a.size, 4096, 4096, seed=7)
    assert sorted(order.tolist()) == list(range(a.size // 64))
    # lines of one 4 KiB window are visited together
    assert len(set(order[:64] // 64)) == 1
    r = native.run_chase(native.kernel("chase"), [0], 1000, start=a.addr + int(order[5]) * 64)
    assert r.end == a.addr + int(order[(5 + 1000) % len(order)]) * 64


@pytest.mark.parametrize("window", [64 << 10, 256 << 10, 0])
def test_chase_window_is_walked_whole_and_not_page_by_page(window):
    """Each window's lines come as one run, in random order across its pages; window 0
    spreads consecutive loads over the whole buffer."""
    a = native.Allocation(4 << 20, "4k", "local")
    order = native.chase_build(a, a.size, window, 4096, seed=11)
    lines = a.size // 64
    assert sorted(order.tolist()) == list(range(lines))
    per = (window or a.size) // 64
    blocks = order.reshape(-1, per) // per
    assert (blocks == blocks[:, :1]).all()          # one window at a time
    first = order[:64] // 64                        # the first 64 loads' pages
    assert len(set(first.tolist())) >= 8            # not one 4 KiB page after another
    windows = order[::per] // per
    assert sorted(windows.tolist()) == list(range(lines // per))


def test_chase_window_refuses_partial_pages_with_tlb_knob():
    a = native.Allocation(1 << 20, "4k", "local")
    with pytest.raises(NativeError, match="whole pages"):
        native.chase_build(a, a.size, 6144, 4096, seed=1, run_lines=2)


def test_c_failure_becomes_typed_error_with_errno():
    with pytest.raises(NativeError) as e:
        native.Allocation(1 << 20, "4k", "bind", nodes=[1000])
    assert e.value.errno == 22 and "mbind" in str(e.value) and "Invalid argument" in str(e.value)
    with pytest.raises(NativeError, match="no variant"):
        native.run_kernel(native.kernel("chase"), "avx2", [0], 64, 1, [0])
    with pytest.raises(NativeError, match="cannot pin"):
        a = native.Allocation(1 << 20, "4k", "local")
        native.run_kernel(native.kernel("read"), "scalar", [a.addr], a.size, 1, [1000])


def test_failed_allocation_leaks_no_mapping():
    def mappings():
        return len(open("/proc/self/maps").read().splitlines())
    before = mappings()
    for _ in range(20):
        with pytest.raises(NativeError):
            native.Allocation(64 << 20, "thp", "bind", nodes=[1000])
    assert mappings() <= before + 1


def test_timer_calibration_is_measured():
    t = native.timer_calibrate(30)
    assert t["clock"] == "CLOCK_MONOTONIC_RAW" and t["clock_overhead_ns"] > 0
    if t["tsc_available"]:
        assert 1e8 < t["tsc_hz"] < 1e10


def _bandwidth_cases():
    from cxlbench.benchmarks import bandwidth
    return [(k, isa) for k in bandwidth._kernels() for isa in native.kernel(k).isas]


@pytest.mark.parametrize("key,isa", _bandwidth_cases())
def test_every_bandwidth_kernel_checked_in_every_isa(key, isa):
    """Each kernel's output recomputed independently, on a size that is not a whole
    number of steps (the remainder path runs too)."""
    from cxlbench.benchmarks import bandwidth
    k = native.kernel(key)
    if not native.isa_supported(isa):
        pytest.skip(f"this CPU cannot run {isa}")
    params = {name: opt.default for name, opt in bandwidth.OPTIONS.items()}
    params.update(kernel=key, isa=isa, size=(1 << 20) + 64 * 7, cpus="0", threads=1,
                  repeat=2, warmup=1, passes=2)
    m = bandwidth.run(params)
    assert m.status == "ok" and m.isa == isa and len(m.reps) == 2
    assert ("bandwidth_memory" in m.reps[0]) == k.write_allocate


def test_bandwidth_check_catches_a_kernel_that_skipped_work(monkeypatch):
    from cxlbench.benchmarks import bandwidth
    from cxlbench.errors import CheckError
    real = native.run_kernel

    def half(k, isa, addrs, nbytes, count, cpus, value=0, *walk):
        return real(k, isa, addrs, nbytes // 2, count, cpus, value, *walk)
    monkeypatch.setattr(native, "run_kernel", half)
    for key in ("read", "write_nt", "copy", "triad_nt", "rw_2_1"):
        params = {name: opt.default for name, opt in bandwidth.OPTIONS.items()}
        params.update(kernel=key, size=1 << 20, repeat=1, warmup=0, passes=1)
        with pytest.raises(CheckError):
            bandwidth.run(params)


@pytest.mark.parametrize("key", ["copy", "copy_nt", "write", "write_nt"])
def test_walked_copies_and_fills_move_every_byte_once(key):
    """Every prefetch distance and page walk of the copies and fills, every ISA, on one
    and on three threads (slices that start mid-page), over a size that is no whole
    number of walks: the destination is exactly the source (or the value), and the
    bytes past it are untouched."""
    import numpy as np
    k = native.kernel(key)
    size = 3 * 4096 * 4 + 5 * 64                    # 3 walks of 4 pages, 5 lines over
    guard = 4096
    for isa in k.runnable_isas():
        for prefetch, ways in ((0, 1), (4, 1), (0, 2), (8, 4), (16, 3), (2, 16)):
            for cpus in ([0], [0, 0, 0]):
                dst = native.Allocation(size + guard, "4k", "local")
                src = native.Allocation(size + guard, "4k", "local")
                src.fill_index([])
                d = dst.array(np.uint8)
                d[:] = 0xA5
                native.run_kernel(k, isa, [dst.addr, src.addr][:k.streams], size, 2, cpus,
                                  0x3737373737373737, prefetch, ways)
                want = src.array(np.uint8)[:size] if key.startswith("copy") else \
                    np.full(size, 0x37, np.uint8)
                what = f"{key} {isa} prefetch={prefetch} ways={ways} threads={len(cpus)}"
                assert np.array_equal(d[:size], want), what
                assert (d[size:] == 0xA5).all(), what + ": wrote past the end"


def test_read_sum_closed_form():
    from cxlbench.benchmarks.bandwidth import read_sum
    import numpy as np
    for lines, period, reads in ((10, 4, 3), (7, 3, 2), (5, 2, 1), (2, 4, 3)):
        words = np.arange(lines * 8, dtype=np.uint64).reshape(lines, 8)
        mask = np.arange(lines) % period < reads
        assert read_sum(lines, period, reads) == int(words[mask].sum())
