"""Checkpoint copies (issue 13, part 4): the C snapshot against numpy in every ISA, store
kind, thread count, chunking and persistence, whole and as a gather of dirty rows; the
checksum's reach; a wrong copy, a wrong row and a wrong file caught; the file removed; the
interference case's slowdowns (and step_slowdown left out where the step does not fit
inside the snapshot); src and dst evicted before every copy; presets scaled; what check
refuses, options the case would not use included; the report's figures. dist=trained (issue
29): the rows real embedding training steps updated, snapshotted as training left them."""
import ctypes
import json
import os

import numpy as np
import pytest

from cxlbench import native, results
from cxlbench.benchmarks import checkpoint as checkpoint_bench
from cxlbench.errors import CheckError, UserError
from cxlbench.workloads import checkpoint, embedding, optimizer

from .conftest import cxlbench

CPUS = sorted(os.sched_getaffinity(0))[:2]
ENTRY = native.driver("checkpoint")


def params(**over):
    p = {name: opt.default for name, opt in checkpoint_bench.OPTIONS.items()}
    # store=auto probes with extra copies first: the tests that count copies set one
    p.update(size=1 << 20, repeat=2, warmup=0, cpus=str(CPUS[0]), store="regular")
    p.update(over)
    return p


def persist_kinds(store):
    """persist=True where this CPU runs it (regular stores need clwb)."""
    return (False, True) if store == "nt" or native.flush_supported("clwb") else (False,)


def test_names_match_the_header_and_the_driver_row():
    assert checkpoint.STORES == native.CKPT_STORES
    assert ENTRY.benchmark == "checkpoint" and ENTRY.check == "snapshot"
    assert ENTRY.isas[0] == "scalar"


@pytest.mark.parametrize("store", checkpoint.STORES)
def test_whole_snapshot_copies_src_exactly(store):
    """Chunks that do not divide the size (the last one short), one and two threads."""
    n = 64 * 4099
    src = native.aligned_empty(n, np.uint8)
    src[:] = np.random.default_rng(3).integers(0, 256, n, dtype=np.uint8)
    for isa in ENTRY.runnable_isas():
        for persist in persist_kinds(store):
            for threads in (1, len(CPUS)):
                dst = native.aligned_empty(n, np.uint8)
                dst.fill(0xA5)
                r = native.checkpoint(dst.ctypes.data, src.ctypes.data, n, 64 * 37, store,
                                      isa, CPUS[:threads], persist=persist)
                assert np.array_equal(dst, src), (isa, persist, threads)
                assert r.ns > 0 and r.t1 - r.t0 == r.ns and r.bad == 0


@pytest.mark.parametrize("store", checkpoint.STORES)
def test_differential_snapshot_gathers_the_rows_in_order(store):
    rows, row_bytes = 500, 192                  # rows of three lines
    src = native.aligned_empty(rows * row_bytes, np.uint8)
    src[:] = np.random.default_rng(4).integers(0, 256, src.size, dtype=np.uint8)
    dirty = np.array([3, 4, 100, 7, 499, 0, 250], dtype=np.int64)   # any order
    want = src.reshape(rows, row_bytes)[dirty]
    for isa in ENTRY.runnable_isas():
        for chunk in (64, 2 * row_bytes, 1 << 20):     # below a row: one row a chunk
            for prefetch in (0, 2):
                dst = native.aligned_empty(dirty.size * row_bytes, np.uint8)
                dst.fill(0)
                r = native.checkpoint(dst.ctypes.data, src.ctypes.data, 0, chunk, store, isa,
                                      CPUS, rows=dirty, src_rows=rows, row_bytes=row_bytes,
                                      prefetch=prefetch)
                assert np.array_equal(dst.reshape(-1, row_bytes), want) and r.bad == 0


def test_a_row_outside_the_table_is_skipped_and_counted():
    src = native.aligned_empty(10 * 64, np.uint8)
    dst = native.aligned_empty(3 * 64, np.uint8)
    r = native.checkpoint(dst.ctypes.data, src.ctypes.data, 0, 64, "regular", "scalar",
                          CPUS[:1], rows=np.array([1, 10, 2], dtype=np.int64), src_rows=10,
                          row_bytes=64)
    assert r.bad == 1
    with pytest.raises(CheckError, match="1 dirty rows named no row"):
        checkpoint.check_snapshot((0, 0), (0, 0), "dst", r.bad)


def test_bad_arguments_are_refused_in_c_and_python():
    buf = native.aligned_empty(4096, np.uint8)
    with pytest.raises(Exception, match="whole 64-byte lines"):
        native.checkpoint(buf.ctypes.data, buf.ctypes.data, 100, 64, "regular", "scalar",
                          CPUS[:1])
    with pytest.raises(Exception, match="not 64-byte aligned"):
        native.checkpoint(buf.ctypes.data + 8, buf.ctypes.data, 64, 64, "regular",
                          "scalar", CPUS[:1])
    with pytest.raises(Exception, match="chunk of 32 bytes"):
        native.checkpoint(buf.ctypes.data, buf.ctypes.data, 64, 32, "regular", "scalar",
                          CPUS[:1])
    with pytest.raises(ValueError, match="not C-contiguous int64"):
        native.checkpoint(buf.ctypes.data, buf.ctypes.data, 0, 64, "regular", "scalar",
                          CPUS[:1], rows=np.arange(4, dtype=np.int32), src_rows=4,
                          row_bytes=64)


def test_checksum_sees_a_changed_word_and_two_swapped_ones():
    words = np.arange(3 * checkpoint.CHUNK + 5, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    base = checkpoint.checksum(words)
    changed = words.copy()
    changed[checkpoint.CHUNK + 1] += np.uint64(1)
    swapped = words.copy()
    swapped[[7, 2 * checkpoint.CHUNK]] = swapped[[2 * checkpoint.CHUNK, 7]]
    assert checkpoint.checksum(changed) != base and checkpoint.checksum(swapped) != base
    assert checkpoint.checksum(swapped)[0] == base[0]     # the plain sum alone would pass
    # In pieces, each at its position, it adds up to the whole.
    k = checkpoint.CHUNK + 3
    assert checkpoint.add(checkpoint.checksum(words[:k]),
                          checkpoint.checksum(words[k:], k)) == base


def test_dirty_rows_are_distinct_sorted_and_seeded():
    for dist in ("uniform", "zipf"):
        rows = checkpoint.dirty_rows(100000, 5000, dist, 1.05, seed=2)
        assert rows.dtype == np.int64 and rows.size == 5000
        assert (np.diff(rows) > 0).all() and rows[0] >= 0 and rows[-1] < 100000
        assert np.array_equal(rows, checkpoint.dirty_rows(100000, 5000, dist, 1.05, seed=2))
    assert checkpoint.dirty_rows(10, 10, "zipf", 1.05, 1).tolist() == list(range(10))
    with pytest.raises(UserError, match="names only"):
        checkpoint.dirty_rows(1000, 999, "zipf", 10.0, 1)


# 32768 rows of 64 B (2 MiB): three training batches reach 60 % of them (19661 rows).
TRAINED = {"dirty": 0.6, "rows": 1 << 15, "dim": 16, "dist": "trained"}


def test_trained_dirty_rows_are_the_rows_the_training_steps_updated(monkeypatch):
    """The rows snapshotted are every row the forward's batches looked up (what the sgd
    step updates), batch after batch until they reach dirty x rows; each snapshot holds
    them as a numpy replay of the same steps leaves them, and verifies."""
    real_bag, real_copy = native.embedding_bag, native.checkpoint
    batches, snapshots = [], []

    def bag(table, rows, row_bytes, dim, dtype, pool, indices, *a, **kw):
        batches.append(indices.copy())
        return real_bag(table, rows, row_bytes, dim, dtype, pool, indices, *a, **kw)

    def copy(dst, *a, rows=None, row_bytes=0, **kw):
        r = real_copy(dst, *a, rows=rows, row_bytes=row_bytes, **kw)
        packed = (ctypes.c_float * (len(rows) * row_bytes // 4)).from_address(dst)
        snapshots.append((rows.copy(), np.array(packed).reshape(len(rows), -1)))
        return r
    monkeypatch.setattr(native, "embedding_bag", bag)
    monkeypatch.setattr(native, "checkpoint", copy)
    m = checkpoint_bench.run(params(**TRAINED))
    assert m.status == "ok" and len(snapshots) == 2      # each checked against the table

    rows, dim, asked = TRAINED["rows"], TRAINED["dim"], round(TRAINED["rows"] * 0.6)
    want = np.unique(np.concatenate(batches))
    assert len(batches) == 3 and np.unique(np.concatenate(batches[:-1])).size < asked
    assert asked <= want.size == m.info["dirty_rows"] == m.info["bytes"] // (dim * 4)
    assert m.info["dirty_from"] == ("embedding training: 3 sgd steps of 2048 bags x 32 "
                                    f"lookups, Zipf(1.05), updating {want.size} rows "
                                    f"({asked} asked)")
    # numpy's replay from the table's first values: each bag summed, each row's gradient
    # the sum of its bags', w -= lr g
    w = np.empty((rows, dim), dtype=np.float32)
    embedding.fill_table(w.view(np.uint8), checkpoint.training_layout(rows, dim), 1)
    first = w[want].copy()
    for idx in batches:
        out = w[idx.reshape(-1, 32)].sum(axis=1)
        g = np.zeros_like(w)
        np.add.at(g, idx, np.repeat(out, 32, axis=0))
        w -= np.float32(checkpoint.TRAIN["lr"]) * g
    for got_rows, got in snapshots:
        assert np.array_equal(got_rows, want)
        assert np.allclose(got, w[want], rtol=1e-5, atol=1e-6)
        assert (got != first).any(axis=1).all()         # training changed every row


def test_trained_dirty_rows_out_of_reach_are_refused():
    """At 64 lookups a row, Zipf(4) batches name far fewer than half the rows."""
    with pytest.raises(UserError, match=r"embedding training on \d+ batches of 2048 bags x "
                                        r"32 Zipf\(4.0\) lookups names only \d+ of the 2048 "
                                        "dirty rows asked: lower alpha or dirty"):
        checkpoint.layout(params(dirty=0.5, rows=4096, dim=16, dist="trained", alpha=4.0))
    assert "alpha" not in checkpoint.unused(params(dirty=0.05, dist="trained"))


def test_layout_of_a_scaled_preset_and_of_a_table():
    lay = checkpoint.layout(params(preset="llama-2-7b", scale=1e-3))
    assert lay.params == 6738416 and lay.src == lay.dst == -(-6738416 * 14 // 64) * 64
    lay = checkpoint.layout(params(dirty=0.05, rows=1000, dim=32))
    assert (lay.rows, lay.row_bytes, lay.dirty, lay.src, lay.dst) == (1000, 128, 50,
                                                                      128000, 6400)
    assert lay.sizes(1 << 20, "triad") == {"src": 128000, "dst": 6400, "step": 3 << 20}
    # 2 + 2 + 12 bytes a parameter, and the optimizer's stagger after each state array
    assert checkpoint.step_bytes("adam", 1 << 20) == (8 << 20) + 3 * 4 * optimizer.STAGGER
    assert checkpoint.PRESETS is optimizer.PRESETS
    lay = checkpoint.layout(params(**TRAINED))      # the last batch's rows: a few more
    assert lay.asked == 19661 and lay.dirty >= lay.asked and lay.dst == lay.dirty * 64


def test_chunks_are_counted_as_c_copies_them():
    """Whole snapshots: chunk bytes each, the last short. Differential ones: whole rows,
    chunk // row_bytes of them a chunk, at least one."""
    assert checkpoint.chunks(checkpoint.layout(params(size=5 << 20)), 2 << 20) == 3
    lay = checkpoint.layout(params(dirty=0.05, rows=1000, dim=32))     # 50 rows of 128 B
    assert checkpoint.chunks(lay, 64) == 50                  # a row each, though 2 chunks long
    assert checkpoint.chunks(lay, 1024) == 7                 # 8 rows a chunk
    assert checkpoint.chunks(lay, 1 << 20) == 1
    m = checkpoint_bench.run(params(dirty=0.05, rows=1000, dim=32, chunk=1024))
    assert m.info["chunks"] == 7


@pytest.mark.parametrize("over", [{}, {"store": "nt"}, {"dirty": 0.05, "rows": 4000},
                                  {"persist": True, "store": "nt", "threads": len(CPUS),
                                   "cpus": ",".join(map(str, CPUS))}])
def test_run_checks_every_repetition(over):
    m = checkpoint_bench.run(params(**over))
    assert m.status == "ok" and len(m.reps) == 2
    assert all(rep["bandwidth"] > 0 and rep["time"] > 0 for rep in m.reps)
    assert [v["buffer"] for v in m.placement["verified"]] == ["src", "dst"]
    assert m.kernel == ("checkpoint+dirty" if "dirty" in over else "checkpoint")


def test_store_auto_tries_every_store_this_cpu_has_and_records_its_choice(monkeypatch,
                                                                         tmp_path):
    """store=auto: regular, nt (a whole snapshot's with every prefetch and page walk of
    the bandwidth kernels) and rep movsb, probed on the case's buffers; the case runs and
    checks the chosen one, and its info says which, by what figures, from where."""
    from cxlbench.benchmarks import bandwidth
    monkeypatch.setenv("CXLBENCH_CACHE", str(tmp_path))
    whole = checkpoint_bench.store_candidates(params(store="auto"), whole=True)
    assert [c["store"] for c in whole] == \
        ["regular"] + ["nt"] * len(bandwidth.PREFETCHES) * len(bandwidth.WALKS) + ["rep"]
    assert checkpoint_bench.store_candidates(params(store="auto"), whole=False) == [
        {"store": s, "prefetch": 0, "walk": 1} for s in ("regular", "nt", "rep")]
    assert checkpoint_bench.store_candidates(params(store="rep"), whole=True) == [
        {"store": "rep", "prefetch": 0, "walk": 1}]
    for over in ({"store": "auto"}, {"store": "auto", "dirty": 0.05, "rows": 4000}):
        m = checkpoint_bench.run(params(**over))
        assert m.status == "ok" and len(m.reps) == 2
        tuned = m.info["tuned"]
        assert tuned["chosen"] == (f"store={m.info['store']} prefetch={m.info['prefetch']} "
                                   f"walk={m.info['walk']}")
        assert len(tuned["by"]) == len(checkpoint_bench.store_candidates(
            params(**over), whole="dirty" not in over))
    assert "tuned" not in checkpoint_bench.run(params()).info      # set by hand: no probe
    # persist without clwb: only the stores that need no write-back are tried
    monkeypatch.setattr(native, "flush_supported", lambda kind: kind != "clwb")
    assert {c["store"] for c in checkpoint_bench.store_candidates(
        params(store="auto", persist=True), whole=True)} == {"nt"}


def test_a_wrong_copy_is_caught(monkeypatch):
    real = native.checkpoint

    def short(dst, src, nbytes, chunk, *a, **kw):     # the last chunk never copied
        return real(dst, src, nbytes - chunk, chunk, *a, **kw)
    monkeypatch.setattr(native, "checkpoint", short)
    with pytest.raises(CheckError, match="checksum of dst .* differs from the source's"):
        checkpoint_bench.run(params(chunk=64 << 10))

    def off_by_one_row(*a, rows=None, **kw):
        return real(*a, rows=(rows + 1) % kw["src_rows"], **kw)
    monkeypatch.setattr(native, "checkpoint", off_by_one_row)
    with pytest.raises(CheckError, match="checksum of dst"):
        checkpoint_bench.run(params(dirty=0.02, rows=5000, dist="uniform"))
    with pytest.raises(CheckError, match="checksum of dst"):     # trained values as well
        checkpoint_bench.run(params(**TRAINED))


@pytest.mark.parametrize("over", [{}, {"dirty": 0.02, "rows": 5000},
                                  {"interfere": "triad", "step_size": 1 << 20}])
def test_src_and_dst_are_evicted_before_every_copy(monkeypatch, over):
    """Between one timed copy and the next, all of src (the table, for a differential
    snapshot) and all of dst leave the cache: alone and beside the step alike."""
    if "interfere" in over:
        if len(CPUS) < 2:
            pytest.skip("interference needs a CPU beside the snapshot's")
        over = {**over, "cpus": ",".join(map(str, CPUS))}
    real_evict, real_copy = native.evict, native.checkpoint
    evicted, copies = [], []

    def evict(addr, nbytes):
        evicted.append((addr, addr + nbytes))
        return real_evict(addr, nbytes)

    def covered(lo, hi):
        return any(a <= lo and hi <= b for a, b in evicted)

    def copy(dst, src, nbytes, chunk, *a, rows=None, src_rows=0, row_bytes=0, **kw):
        src_bytes = nbytes if rows is None else src_rows * row_bytes
        dst_bytes = nbytes if rows is None else len(rows) * row_bytes
        copies.append((covered(src, src + src_bytes), covered(dst, dst + dst_bytes)))
        evicted.clear()
        return real_copy(dst, src, nbytes, chunk, *a, rows=rows, src_rows=src_rows,
                         row_bytes=row_bytes, **kw)
    monkeypatch.setattr(native, "evict", evict)
    monkeypatch.setattr(native, "checkpoint", copy)
    m = checkpoint_bench.run(params(**over, repeat=2, warmup=1))
    expected = 3 * (2 if "interfere" in over else 1)        # alone and beside the step
    assert copies == [(True, True)] * expected
    assert m.info["evicted"] is native.flush_supported("clflush")


def test_a_stale_snapshot_cannot_pass(monkeypatch):
    """A second repetition that copies nothing finds dst overwritten since the first."""
    real, calls = native.checkpoint, []

    def once_only(*a, **kw):
        calls.append(1)
        if len(calls) == 1:
            return real(*a, **kw)
        return native.CheckpointResult(1, 0, 1, 0)     # copies nothing
    monkeypatch.setattr(native, "checkpoint", once_only)
    with pytest.raises(CheckError, match="checksum of dst"):
        checkpoint_bench.run(params())
    assert len(calls) == 2


def test_file_target_is_read_back_and_removed(tmp_path, monkeypatch):
    m = checkpoint_bench.run(params(path=str(tmp_path), store="nt", chunk=256 << 10))
    assert m.status == "ok" and m.info["filesystem"] != "unknown"
    assert list(tmp_path.iterdir()) == []
    real = native.checkpoint

    def spoil_the_file(*a, fd=-1, **kw):
        r = real(*a, fd=fd, **kw)
        os.pwrite(fd, b"\1", 4096)
        return r
    monkeypatch.setattr(native, "checkpoint", spoil_the_file)
    with pytest.raises(CheckError, match="the file read back"):
        checkpoint_bench.run(params(path=str(tmp_path)))
    assert list(tmp_path.iterdir()) == []       # removed on failure too


@pytest.mark.skipif(len(CPUS) < 2, reason="interference needs a CPU beside the snapshot's")
@pytest.mark.parametrize("step", ["triad", "adam"])
def test_interference_reports_both_slowdowns(step):
    # A snapshot of ~5 ms beside steps of ~0.1 ms: dozens inside it, two at least even
    # where another process takes the step's CPU for a time slice.
    m = checkpoint_bench.run(params(size=64 << 20, interfere=step, step_size=1 << 20,
                                    cpus=",".join(map(str, CPUS)), repeat=2))
    assert m.status == "ok"
    # Where another process holds the step's CPU through a whole snapshot (a loaded CI
    # host), too little of a step ran during it: step_slowdown is then left out, saying why.
    inside = m.info["steps_beside_min"] >= checkpoint.MIN_DONE_STEPS
    assert inside == ("step_slowdown_left_out" not in m.info)
    for rep in m.reps:
        assert set(rep) == {"bandwidth", "time", "bandwidth_shared", "snapshot_slowdown",
                            "step_time"} | ({"step_slowdown"} if inside else set())
        assert all(v > 0 for v in rep.values())
    assert [v["buffer"] for v in m.placement["verified"]] == ["src", "dst", "step"]
    assert m.info["step_cpus"] == CPUS[1:] and m.info["steps_beside_min"] > 0


@pytest.mark.skipif(len(CPUS) < 2, reason="interference needs a CPU beside the snapshot's")
def test_a_step_longer_than_the_snapshot_reports_no_step_slowdown():
    """A 64 KiB snapshot beside a triad over 3 x 32 MiB: a small part of one step runs
    during it, and a step_slowdown would be a step mostly run alone. Left out, with the
    reason."""
    m = checkpoint_bench.run(params(size=64 << 10, interfere="triad", step_size=32 << 20,
                                    cpus=",".join(map(str, CPUS)), repeat=2))
    assert m.status == "ok" and m.info["steps_beside_min"] < checkpoint.MIN_DONE_STEPS
    assert all("step_slowdown" not in rep and rep["snapshot_slowdown"] > 0 for rep in m.reps)
    assert "step_slowdown" not in m.units
    assert "step's work was done during the snapshot" in m.info["step_slowdown_left_out"]


@pytest.mark.skipif(len(CPUS) < 2, reason="interference needs a CPU beside the snapshot's")
def test_the_default_interference_case_reports_the_steps_slowdown():
    """At its defaults (a 256 MiB snapshot beside 16 MiB triad steps) the step's rate
    during the snapshot, partial steps counted by their share, gives step_slowdown in
    every repetition: the figure the case exists for is never silently missing."""
    defaults = {k: checkpoint_bench.OPTIONS[k].default for k in ("size", "step_size")}
    m = checkpoint_bench.run(params(interfere="triad", cpus=",".join(map(str, CPUS)),
                                    repeat=2, **defaults))
    assert m.status == "ok" and "step_slowdown_left_out" not in m.info, m.info
    assert all(rep["step_slowdown"] > 0 for rep in m.reps)
    assert m.info["steps_beside_min"] >= checkpoint.MIN_DONE_STEPS


def test_the_adam_background_is_the_optimizers_state():
    """Laid out as the optimizer's params, grads and states, filled by State.fill (bf16
    rounded by to_bf16), and it steps."""
    buf = type("Buf", (), {})()
    raw = native.aligned_empty(checkpoint.step_bytes("adam", 1 << 16), np.uint8)
    buf.array = lambda dtype: raw.view(dtype)
    bg = checkpoint.Adam(buf, 1 << 16, CPUS[:1])
    st = bg.state
    assert st.mixed and st.n == 1 << 15
    assert np.array_equal(st.p, optimizer.to_bf16(st.w))
    assert st.p.ctypes.data == raw.ctypes.data and st.w.ctypes.data + st.w.nbytes <= \
        raw.ctypes.data + raw.nbytes
    before = st.w.copy()
    bg.step()
    bg.check()
    assert not np.array_equal(st.w, before)


def test_a_wrong_background_step_is_caught(monkeypatch):
    real = native.run_kernel

    def half(k, isa, addrs, nbytes, *a, **kw):
        return real(k, isa, addrs, nbytes // 2, *a, **kw)
    monkeypatch.setattr(native, "run_kernel", half)
    if len(CPUS) < 2:
        pytest.skip("interference needs a CPU beside the snapshot's")
    with pytest.raises(CheckError, match="background triad"):
        checkpoint_bench.run(params(interfere="triad", step_size=1 << 20,
                                    cpus=",".join(map(str, CPUS))))


def test_steps_in_counts_a_share_of_a_step_partly_inside():
    spans = [(0, 10), (10, 20), (20, 30)]
    assert checkpoint.steps_in(spans, 5, 25) == pytest.approx(2.0)
    assert checkpoint.steps_in(spans, 12, 14) == pytest.approx(0.2)


def test_persist_without_clwb_is_skipped_with_the_reason(monkeypatch):
    monkeypatch.setattr(native, "flush_supported", lambda kind: kind != "clwb")
    why = checkpoint_bench.skip(params(persist=True), None)
    assert why and "clwb" in why
    assert checkpoint_bench.skip(params(persist=True, store="nt"), None) is None


def test_interference_without_a_cpu_to_spare_is_skipped(tmp_path):
    """Listed as unsupported with the reason, so a suite on a one-CPU machine runs on."""
    why = checkpoint_bench.skip(params(interfere="triad", threads="all", cpus=""), None)
    assert "runs the step on the CPUs the snapshot leaves" in why
    r = cxlbench("run", "--bench", "checkpoint", "--set", "interfere=triad", "--set",
                 "threads=all", "--set", "size=1M", "--json", "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "runs the step on the CPUs the snapshot leaves" in r.stdout + r.stderr


@pytest.mark.parametrize("sets,message", [
    (["scale=0.5"], "scale shrinks a preset's state"),
    (["preset=llama-2-7b", "scale=0.001", "size=64M"], "sets the size itself"),
    (["preset=opt-1.3b", "scale=0.001", "dirty=0.05"], "not a preset's state"),
    (["dirty=0.05", "dim=20"], "multiple of 16"),
    (["path=/nonexistent-dir"], "is not a directory"),
    (["dirty=0.01", "size=1G"], "size=1073741824 would not be used: dirty=0.01 snapshots"),
    (["size=8M", "step_size=1G", "alpha=3"],
     "alpha=3.0 would not be used: dirty=0 snapshots the whole state, not a table's rows; "
     "step_size=1073741824 would not be used: interfere=none runs no step"),
    (["rows=4096", "dim=32", "dist=uniform", "seed=3"],
     "rows=4096, dim=32, dist=uniform, seed=3 would not be used: dirty=0"),
    (["dirty=0.05", "dist=uniform", "alpha=2"], "alpha=2.0 would not be used: dist=uniform"),
    (["dirty=0.5", "rows=4096", "dim=16", "dist=trained", "alpha=4"],
     "names only"),      # out of training's reach
    (["preset=llama-2-70b"], "exceeds its free memory"),     # 2 x 966 GB
])
def test_check_refuses_what_cannot_run(sets, message):
    """One line, exit 2, naming the options (those the case would not use included)."""
    args = [a for s in sets for a in ("--set", s)]
    r = cxlbench("run", "--bench", "checkpoint", *args, "--dry-run")
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_ignored_options_are_left_out_of_the_label():
    """size shows only where the case copies size bytes."""
    from cxlbench.suite import Case
    for over, shown in (({}, True), ({"preset": "opt-1.3b", "scale": 0.001}, False),
                        ({"dirty": 0.01}, False)):
        label = Case("j/000", "j", "checkpoint", params(**over)).label()
        assert ("size=" in label) is shown, label


@pytest.mark.serial    # its background step needs the other CPU free during a 4 MiB snapshot
def test_case_places_its_buffers_and_reports(tmp_path):
    sets = ["size=4M", "mem.src=bind:0", "mem.dst=bind:0", "page.dst=thp", "repeat=2",
            "warmup=0", "store=all"]
    if len(CPUS) >= 2:
        sets += ["interfere=triad", "step_size=1M", "cpus=" + ",".join(map(str, CPUS))]
    r = cxlbench("run", "--bench", "checkpoint", *[a for s in sets for a in ("--set", s)],
                 "--json", "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    recs = json.loads(r.stdout)
    assert all(x["status"] == "ok" and x["median"] > 0 for x in recs)
    df = results.load(recs[0]["run_dir"])
    entry = next(iter(df.attrs["journal"].values()))
    verified = {v["buffer"]: v for v in entry["placement"]["verified"]}
    assert verified["dst"]["spec"] == "bind:0" and verified["dst"]["page"] == "thp"
    out = tmp_path / "report"
    r = cxlbench("report", recs[0]["run_dir"], "-o", str(out))
    assert r.returncode == 0, r.stderr
    md = (out / "report.md").read_text()
    assert "Checkpoint copies" in md and "checkpoint-bandwidth" in md
    if len(CPUS) >= 2:
        assert "checkpoint-interference" in md and "checkpoint-slowdown" in md
