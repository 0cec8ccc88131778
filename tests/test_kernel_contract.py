"""The kernel contract: every row of the C tables says how its output is checked, every
check passes on what the kernels do and fails on a wrong result, the drivers are listed,
and Python's enum names are the header's."""
import os
import platform
from dataclasses import replace

import numpy as np
import pytest

from cxlbench import benchmarks, native
from cxlbench._native import lib
from cxlbench.benchmarks import bandwidth, chase
from cxlbench.errors import CheckError
from cxlbench.memory import Buffer
from cxlbench.options import COMMON

from .conftest import cxlbench, last_json

STREAM_BENCHES = ("bandwidth", "random_bw")
CPUS = sorted(os.sched_getaffinity(0))[:2]


def defaults(bench, **over):
    return {**{name: opt.default for name, opt in bench.OPTIONS.items()}, **over}


def test_every_row_says_how_it_is_checked():
    for row in native.kernels() + native.drivers():
        assert row.check in native.CHECKS, row.key
        # a reason exactly where nothing is checked
        assert bool(row.unchecked) == (row.check == "none"), row.key
        assert row.min_threads >= 1, row.key
        assert row.max_threads == 0 or row.max_threads >= row.min_threads, row.key
        # (copy_rep and write_rep: x86-64 only, named so where they have no variant)
        assert (row.isas and row.isas[0] == "scalar") or \
            (not row.isas and "x86-64" in row.needs and platform.machine() != "x86_64"), row.key
    for k in native.kernels():
        if k.benchmark in STREAM_BENCHES:
            assert k.check in bandwidth.CHECKS, f"{k.key}: bandwidth.py cannot check {k.check}"
        if k.benchmark == "chase":
            assert k.check == "chain_end" and k.streams == 0 and k.max_threads == 1


def _stream_cases():
    return [(k.key, isa) for k in native.kernels() if k.benchmark in STREAM_BENCHES
            for isa in k.isas]


@pytest.mark.parametrize("key,isa", _stream_cases())
def test_every_stream_kernel_passes_its_check(key, isa):
    """On two threads where there are two CPUs, so the slices meet; 768 KiB is whole
    steps of every kernel (192 B, 4 KiB) and of every random block."""
    if not native.isa_supported(isa):
        pytest.skip(f"this CPU cannot run {isa}")
    m = bandwidth.run(defaults(bandwidth, kernel=key, isa=isa, size=768 << 10,
                               cpus=",".join(map(str, CPUS)), threads=len(CPUS), repeat=2,
                               warmup=0, passes=2))
    assert m.status == "ok" and m.isa == isa and len(m.reps) == 2


@pytest.mark.parametrize("knobs", [{}, {"chains": 4}, {"dist": True}])
def test_every_chase_kernel_passes_its_check(knobs):
    m = chase.run(defaults(chase, size=1 << 20, repeat=2, warmup=0, loads=20000, **knobs))
    assert m.status == "ok"


def _one_of(check: str) -> native.KernelInfo:
    return next(k for k in native.kernels() if k.check == check and k.benchmark == "bandwidth")


@pytest.mark.parametrize("check", sorted(bandwidth.CHECKS))
def test_each_check_kind_catches_a_wrong_result(check):
    """The kernel's output passes; one word changed after it (or its sum, for a sum
    check) fails."""
    k = _one_of(check)
    size = 64 << 10
    bufs = [Buffer(size, mem="local", page="4k", cpus=CPUS) for _ in range(k.streams)]
    streams = bandwidth.Streams(k, bufs, [], size)
    value = streams.value(1)
    r = native.run_kernel(k, k.best_isa(), [b.addr for b in bufs], size, 1, [], value)
    streams.check(r, 1, value)
    if check == "index_sum":
        with pytest.raises(CheckError, match="checksum"):
            streams.check(replace(r, checksum=r.checksum + 1), 1, value)
        return
    streams.words[0][777] ^= np.uint64(1 << 40)
    with pytest.raises(CheckError):
        streams.check(r, 1, value)


def test_index_sum_catches_a_missing_store():
    k = native.kernel("rw_1_1")
    a = Buffer(64 << 10, mem="local", page="4k", cpus=CPUS)
    streams = bandwidth.Streams(k, [a], [], 64 << 10)
    r = native.run_kernel(k, k.best_isa(), [a.addr], 64 << 10, 1, [], 9)
    streams.check(r, 1, 9)
    with pytest.raises(CheckError, match="written lines"):
        streams.check(r, 1, 10)         # the store of another repetition's value


def test_unchecked_kernels_are_refused_and_chase_ends_are_checked():
    with pytest.raises(CheckError, match="no independent check"):
        bandwidth.Streams(native.kernel("crash"), [], [], 0)
    a = native.Allocation(1 << 20, "4k", "local")
    order = native.chase_build(a, a.size, 0, 4096, seed=5)
    walker = chase.Walker(a.addr, order)
    r = native.run_chase(native.kernel("chase"), [0], 1000, start=walker.addr(0))
    assert walker.expect(r.end, 0, 1000) == 1000
    with pytest.raises(CheckError, match="chase ended"):
        walker.expect(r.end, 0, 999)


def test_fill_values_are_one_byte_everywhere():
    """A FILL kernel may store bytes (memset): the value Python asks for is one byte in
    every byte of the word, and it differs between consecutive repetitions."""
    s = bandwidth.Streams.__new__(bandwidth.Streams)
    s.k = native.kernel("write")
    values = [s.value(rep) for rep in range(1, 600)]
    assert all(v.to_bytes(8, "little") == bytes([v & 0xFF]) * 8 for v in values)
    assert all(a != b for a, b in zip(values, values[1:]))


def test_driver_table_lists_the_bespoke_entry_points():
    rows = {d.key: d for d in native.drivers()}
    assert set(rows) >= {"loaded_latency", "pingpong", "atomics", "flush", "migrate_touch",
                         "embedding_bag", "embedding_update"}     # each workload's tests own theirs
    for d in rows.values():
        assert callable(getattr(lib, f"cxb_{d.key}")) and d.description
        assert benchmarks.get(d.benchmark).name == d.benchmark
    assert (rows["pingpong"].min_threads, rows["pingpong"].max_threads) == (2, 2)
    assert rows["atomics"].check == rows["pingpong"].check == "counters"
    assert rows["migrate_touch"].check == "pages"       # migrate.Checker after each move


@pytest.mark.parametrize("names,prefix", [
    (native.ISAS, "CXB_ISA_"), (native.PAGE_KINDS, "CXB_PAGE_"), (native.POLICIES, "CXB_POL_"),
    (native.WEIGHTED_METHODS, "CXB_WEIGHTED_"), (native.LOAD_MODES, "CXB_LOAD_"),
    (native.PINGPONG_MODES, "CXB_PINGPONG_"), (native.ATOMIC_MODES, "CXB_ATOMIC_"),
    (native.FLUSH_KINDS, "CXB_FLUSH_"), (native.CHECKS, "CXB_CHECK_")])
def test_enum_tuples_are_the_headers(names, prefix):
    assert [getattr(lib, prefix + n.upper()) for n in names] == list(range(len(names)))
    assert len(names) == sum(1 for n in dir(lib) if n.startswith(prefix))


def test_option_choices_follow_the_header():
    assert COMMON["isa"].choices == ("auto",) + native.ISAS
    assert set(COMMON["page"].choices) == set(native.PAGE_KINDS)


@pytest.mark.parametrize("key", ["copy_libc", "write_libc", "copy_rep", "write_rep"])
def test_libc_and_string_kernels_are_listed_and_run_checked(tmp_path, key):
    """libc's memcpy and memset, and the rep movsb / rep stosb kernels (x86-64), run as
    any kernel does, checked, with their one variant named scalar."""
    k = native.kernel(key)
    if key.endswith("_rep") and platform.machine() != "x86_64":
        assert not k.isas and "x86-64" in k.needs
        pytest.skip("rep movsb and rep stosb are x86-64 instructions")
    listed = cxlbench("list")
    assert listed.returncode == 0, listed.stderr
    assert key in listed.stdout
    assert k.benchmark == "bandwidth" and k.isas == ("scalar",) and \
        ("libc" if key.endswith("libc") else "rep ") in k.description
    r = cxlbench("run", "--bench", "bandwidth", "--set", f"kernel={key}", "--set",
                 "size=1M", "--set", "repeat=2", "--set", "threads=all", "--json",
                 "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    recs = last_json(r.stdout)
    assert recs and all(x["status"] == "ok" and x["kernel"] == key and x["isa"] == "scalar"
                        for x in recs)
