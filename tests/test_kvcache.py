"""Paged KV-cache (issue 13, part 2): what the C side writes is the hash numpy computes;
decode, prefill, swaps and restores pass their checks in every ISA, thread count and
fragmentation; a corrupted block, a wrong block-table entry, a wrong copy or an entry
outside the pool is caught; presets' sizes; the case places only the buffers its
operation uses, each verified."""
import json
import os
import time

import numpy as np
import pytest

from cxlbench import native, results
from cxlbench.benchmarks import kvcache as kvcache_bench
from cxlbench.workloads import kvcache
from cxlbench.errors import CheckError

from .conftest import cxlbench

CPUS = sorted(os.sched_getaffinity(0))[:2]
ENTRY = native.driver("kvcache")
CAN_EVICT = native.evict(0, 0)      # False off x86-64: cold runs warm there


def lay_of(op="decode", layers=3, kv_heads=2, head_dim=12, dtype="fp16", block=4, batch=3,
           seq_len=23, steps=5, chunk=8):
    """Small and uneven: 48-byte tokens (not whole lines), a partial last block."""
    return kvcache.Layout(op, layers, kv_heads, head_dim, dtype, block, batch, seq_len,
                          steps, chunk)


def memory(lay):
    """(address, uint64 view) of plain memory for each pool the operation uses."""
    out = []
    for size in lay.sizes().values():
        words = native.aligned_empty(size // 8, np.uint64)
        words.fill(0xDEADBEEF)
        out.append((words.ctypes.data, words))
    return out + [None] * (2 - len(out))


def workload(lay, fragmentation=1.0, isa="scalar", cpus=CPUS[:1], copy="block", seed=3,
             prefetch=0, cold=True):
    table = kvcache.block_table(lay, fragmentation, seed)
    cache, offload = memory(lay)
    return kvcache.Cache(lay, table, cache, offload, isa, cpus, copy, prefetch, cold)


def test_names_match_the_header():
    assert native.KV_OPS == ("decode", "write", "copy")
    assert ENTRY.benchmark == "kvcache" and ENTRY.check == "blocks"
    assert kvcache_bench.buffers_of({"op": "decode"}) == ("cache",)
    assert kvcache_bench.buffers_of({"op": "prefill"}) == ("cache",)
    assert all(kvcache_bench.buffers_of({"op": op}) == ("cache", "offload")
               for op in ("swap_out", "swap_in", "restore"))


@pytest.mark.parametrize("isa", ENTRY.isas)
def test_written_tokens_are_the_hash_numpy_computes(isa):
    if not native.isa_supported(isa):
        pytest.skip(f"this CPU cannot run {isa}")
    lay = lay_of(op="prefill")
    table = kvcache.block_table(lay, 1.0, 5)
    (addr, words), _ = memory(lay)
    pool = lay.cache_pool(addr)
    for cpus in (CPUS[:1], CPUS):
        r = native.kvcache("write", pool, lay.layers, lay.block, lay.token_bytes, isa, cpus,
                           table=table, tokens=lay.seq_len, gen=7)
        assert r.bad == 0 and r.ns > 0
        want = kvcache.token_sums(lay, 7, np.arange(lay.seq_len))
        kvcache.check_written(words, pool, lay, table, lay.seq_len, want, "write")
        with pytest.raises(CheckError, match="tokens hold what was not written"):
            kvcache.check_written(words, pool, lay, table, lay.seq_len,
                                  kvcache.token_sums(lay, 8, np.arange(lay.seq_len)), "write")
    # The first word of a token is the hash itself: layer 2, V, sequence 1, token 9.
    block = table[1, 9 // lay.block]
    at = ((2 * 2 + 1) * lay.blocks + block) * lay.block_bytes \
        + 9 % lay.block * lay.token_bytes
    first = words[at // 8:at // 8 + lay.words]
    assert (first == first[0] + np.arange(lay.words, dtype=np.uint64)).all()
    one = kvcache.token_sums(lay, 7, [9])
    assert one[2, 1, 1, 0] == first.sum(dtype=np.uint64)


@pytest.mark.parametrize("fragmentation", [0.0, 0.5, 1.0])
def test_decode_reads_what_was_written_in_every_variant(fragmentation):
    for isa in ENTRY.runnable_isas():
        for cpus, cold in ((CPUS[:1], True), (CPUS, True), (CPUS, False)):
            w = workload(lay_of(), fragmentation, isa, cpus, prefetch=len(cpus) * 4,
                         cold=cold)
            for _ in range(3):
                r, step_ns = w.once()
                assert r.ns > 0 and len(step_ns) == 5 and (step_ns > 0).all()
                assert step_ns.sum() == r.ns        # ns: the steps' times added
            assert (w.sums != 0).any()


def test_decode_reads_the_new_token_and_not_beyond_it():
    """The tokens past the end of each sequence hold junk (0xDEADBEEF words): reading one
    of them, or missing the token just appended, would change the sums."""
    lay = lay_of(seq_len=8, steps=3, block=4)         # appends cross into a new block
    w = workload(lay)
    w.once()
    want = kvcache.decode_want(lay, w.prompt, w.gen).reshape(-1)
    assert (w.sums == want).all()


@pytest.mark.parametrize("cold", [True, False])
def test_a_corrupted_block_is_caught(cold):
    lay = lay_of()
    w = workload(lay, fragmentation=1.0, cold=cold)
    w.once()
    # flip one bit of sequence 2's block 1 (the prompt, written before decoding), layer 1 K
    phys = w.table[2, 1]
    at = ((1 * 2 + 0) * lay.blocks + phys) * lay.block_bytes // 8 + 3
    w.cache_words[at] ^= np.uint64(1 << 20)
    with pytest.raises(CheckError, match=f"first layer 1 K, sequence 2, block 1 of the "
                                         f"sequence, physical block {phys}"):
        w.once()


def test_a_wrong_block_table_entry_is_caught(monkeypatch):
    lay = lay_of()
    w = workload(lay)
    real = native.kvcache

    def swapped(op, *a, table=None, **kw):
        if op == "decode":
            table = table.copy()
            table[0, 2], table[1, 3] = table[1, 3], table[0, 2]    # two entries exchanged
        return real(op, *a, table=table, **kw)
    monkeypatch.setattr(native, "kvcache", swapped)
    with pytest.raises(CheckError, match="decode read .* first layer 0 K, sequence 0, block 2"):
        w.once()


def test_an_entry_outside_the_pool_is_caught():
    lay = lay_of()
    w = workload(lay)
    w.table[1, 0] = lay.blocks                        # one past the last block
    with pytest.raises(CheckError, match="table entries named no block"):
        w.once()


@pytest.mark.parametrize("op", ["prefill", "swap_out", "swap_in", "restore"])
@pytest.mark.parametrize("copy", kvcache.COPIES)
def test_writes_and_copies_land_where_the_table_says(op, copy):
    lay = lay_of(op=op, seq_len=24 if op == "restore" else 23)
    for fragmentation in (0.0, 1.0):
        for cpus in (CPUS[:1], CPUS):
            w = workload(lay, fragmentation, ENTRY.best_isa(), cpus, copy)
            for _ in range(2):
                r, step_ns = w.once()
                assert r.ns > 0
                if op != "prefill":
                    assert len(step_ns) == (lay.batch * 3 if op == "restore" else lay.batch)


@pytest.mark.skipif(not CAN_EVICT, reason="no cache-line eviction off x86-64")
def test_cold_decode_reads_memory_and_times_only_the_steps(monkeypatch):
    """A pool that fits any last-level cache (1.5 MiB): warm, each step rereads it from the
    cache; cold, each step's blocks are evicted first, so no cold step is faster than the
    warm ones, the evictions happen (the call lasts well beyond its ns) and are not timed
    (ns is the steps' times added), and the sums still check."""
    lay = lay_of(layers=4, kv_heads=8, head_dim=64, block=16, batch=4, seq_len=176,
                 steps=16)                                # 1 KiB tokens, 1.5 MiB in all
    real, calls = native.kvcache, []

    def timed(op, *a, **kw):
        t0 = time.perf_counter_ns()
        r = real(op, *a, **kw)
        calls.append((time.perf_counter_ns() - t0, r.ns))
        return r
    monkeypatch.setattr(native, "kvcache", timed)
    got = {}
    for cold in (False, True, False, True):               # alternated
        w = workload(lay, isa=ENTRY.best_isa(), cold=cold)
        assert w.evicted == cold
        calls.clear()
        for _ in range(7):
            r, step_ns = w.once()                          # checked
            assert r.ns == step_ns.sum()
        got.setdefault(cold, []).extend(calls)
    ns = {c: np.median([n for _, n in v]) for c, v in got.items()}
    outside = {c: np.median([wall - n for wall, n in v]) for c, v in got.items()}
    assert ns[True] >= ns[False], ns                       # cold is not faster
    # 16 evictions of 1.5 MiB (24K lines each) happen in the call, outside its ns
    assert outside[True] > 2 * outside[False] + 16 * 24576, outside


def test_swaps_count_the_whole_blocks_they_copy():
    """seq_len 17 in blocks of 16: two blocks a sequence copied, layer and K/V, each byte
    counted once."""
    for op in ("swap_out", "swap_in"):
        for copy in kvcache.COPIES:
            lay = lay_of(op=op, block=16, seq_len=17, batch=3)
            w = workload(lay, copy=copy)
            assert w.copied == 3 * 2 * lay.block_bytes * 2 * lay.layers
            w.once()
    lay = lay_of(op="restore", seq_len=24, chunk=8)
    assert workload(lay).copied == lay.batch * 24 * lay.token_bytes * 2 * lay.layers


def test_a_wrong_copy_is_caught(monkeypatch):
    lay = lay_of(op="swap_in")
    w = workload(lay)
    real = native.kvcache

    def short(op, *a, runs=None, **kw):
        if op == "copy":
            runs = runs.copy()
            runs[1, 1] = runs[0, 1]                  # the second run onto the first's blocks
        return real(op, *a, runs=runs, **kw)
    monkeypatch.setattr(native, "kvcache", short)
    with pytest.raises(CheckError, match="swap_in: .* tokens hold what was not written"):
        w.once()


def test_block_table_fragmentation():
    lay = lay_of(batch=4, seq_len=60, steps=4)        # 16 blocks a sequence
    flat = kvcache.block_table(lay, 0.0, 1)
    assert (flat == np.arange(lay.blocks).reshape(4, 16)).all()
    for f in (0.3, 1.0):
        t = kvcache.block_table(lay, f, 1)
        assert sorted(t.ravel()) == list(range(lay.blocks))     # a permutation of the pool
        moved = (t.ravel() != np.arange(lay.blocks)).sum()
        assert moved <= round(f * lay.blocks) and moved > f * lay.blocks / 2


def test_copy_plans():
    lay = lay_of(op="swap_out", batch=2, seq_len=16, block=4)     # 4 blocks a sequence
    table = kvcache.block_table(lay, 0.0, 1)
    runs, groups = kvcache.copy_plan(lay, table, "block")
    assert runs.tolist() == [[b, b, 1] for b in range(8)] and groups.tolist() == [0, 4, 8]
    runs, groups = kvcache.copy_plan(lay, table, "batched")
    assert runs.tolist() == [[0, 0, 4], [4, 4, 4]] and groups.tolist() == [0, 1, 2]
    table = np.array([[5, 6, 0, 1], [2, 3, 4, 7]])
    runs, groups = kvcache.copy_plan(lay, table, "batched")
    assert runs.tolist() == [[5, 0, 2], [0, 2, 2], [2, 4, 3], [7, 7, 1]]
    assert groups.tolist() == [0, 2, 4]
    restore = lay_of(op="restore", batch=2, seq_len=16, block=4, chunk=8)
    runs, groups = kvcache.copy_plan(restore, np.arange(8).reshape(2, 4), "batched")
    assert runs.tolist() == [[0, 0, 2], [2, 2, 2], [4, 4, 2], [6, 6, 2]]   # a run a chunk
    assert groups.tolist() == [0, 1, 2, 3, 4]


def test_presets_sizes():
    base = {name: opt.default for name, opt in kvcache_bench.OPTIONS.items()}
    for preset, per_token in (("llama-3-8b", 128 << 10), ("llama-3-70b", 320 << 10)):
        lay = kvcache.layout({**base, "preset": preset})
        assert lay.layers * 2 * lay.token_bytes == per_token
    lay = kvcache.layout({**base, "scale": 0.125})
    assert lay.layers == 4 and lay.token_bytes == 2048 and lay.block_bytes == 32 << 10
    assert lay.width == -(-(1024 + 16) // 16) and lay.sizes() == {
        "cache": 4 * 2 * 8 * lay.width * (32 << 10)}
    swap = kvcache.layout({**base, "op": "swap_in", "preset": "custom", "layers": 2,
                           "kv_heads": 1, "head_dim": 64, "dtype": "fp8"})
    assert swap.token_bytes == 64 and set(swap.sizes()) == {"cache", "offload"}


def test_case_places_its_buffers_and_records_the_preset(tmp_path):
    r = cxlbench("run", "--bench", "kvcache", "--set", "op=swap_out", "--set", "scale=0.0625",
                 "--set", "batch=2", "--set", "seq_len=256", "--set", "mem.cache=bind:0",
                 "--set", "page.offload=thp", "--set", "copy=batched", "--set", "repeat=2",
                 "--set", "warmup=0", "--json", "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    recs = {x["metric"]: x for x in json.loads(r.stdout)}
    assert set(recs) == {"bandwidth", "tokens", "seq_p50", "seq_p99"}
    assert all(x["status"] == "ok" and x["median"] > 0 for x in recs.values())
    (entry,) = results.load(recs["bandwidth"]["run_dir"]).attrs["journal"].values()
    verified = {v["buffer"]: v for v in entry["placement"]["verified"]}
    assert set(verified) == {"cache", "offload"} and verified["cache"]["spec"] == "bind:0"
    assert verified["offload"]["page"] == "thp"
    info = entry["info"]
    assert info["preset"] == "llama-3-8b" and info["preset_layers"] == 32
    assert info["layers"] == 2 and info["scale"] == 0.0625 and info["copy"] == "batched"


def test_decode_case_places_only_the_cache_and_reports(tmp_path):
    suite = tmp_path / "kv.toml"
    suite.write_text('[decode]\nbench = "kvcache"\nscale = 0.03125\nbatch = 2\n'
                     'seq_len = [64, 256]\nsteps = 4\nrepeat = 2\nwarmup = 0\n'
                     'threads = "all"\n')
    r = cxlbench("run", str(suite), "--json", "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    recs = json.loads(r.stdout)
    assert {x["metric"] for x in recs} == {"bandwidth", "tokens", "step_p50", "step_p99"}
    (run_dir,) = {x["run_dir"] for x in recs}
    for entry in results.load(run_dir).attrs["journal"].values():
        assert [v["buffer"] for v in entry["placement"]["verified"]] == ["cache"]
    out = tmp_path / "report"
    r = cxlbench("report", run_dir, "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "Paged KV-cache" in (out / "report.md").read_text()


@pytest.mark.parametrize("sets,message", [
    (["scale=0.5", "preset=custom"], "scale shrinks a preset's layers"),
    (["head_dim=64"], "head_dim=64 would not be used: preset=llama-3-8b has layers, "
                      "kv_heads and head_dim of its own"),
    (["preset=custom", "kv_heads=1", "head_dim=2"], "is not whole 8-byte words"),
    (["op=restore", "seq_len=300"], "seq_len 300 of chunk_tokens"),
    (["op=restore", "block=24"], "chunk_tokens 256 must be a multiple of block 24"),
    (["op=prefill", "steps=4"], "steps=4 would not be used: op=prefill (they serve decode "
                                "only)"),
    (["copy=batched", "chunk_tokens=128", "steps=4"],
     "copy=batched would not be used: op=decode (they serve swap_out, swap_in, restore "
     "only); chunk_tokens=128 would not be used: op=decode (they serve restore only)"),
    (["op=swap_out", "prefetch=2", "steps=16"],         # steps at its default: not named
     "kvcache: prefetch=2 would not be used: op=swap_out (they serve decode only)\n"),
    (["op=swap_in", "chunk_tokens=128"], "chunk_tokens=128 would not be used: op=swap_in"),
    (["op=restore", "steps=4", "prefetch=1"], "steps=4, prefetch=1 would not be used: "
                                              "op=restore"),
])
def test_bad_input_is_refused(sets, message):
    args = [x for s in sets for x in ("--set", s)]
    r = cxlbench("run", "--bench", "kvcache", *args, "--dry-run")
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_arrays_the_kernel_would_misread_are_refused():
    lay = lay_of()
    (addr, _), _ = memory(lay)
    pool = lay.cache_pool(addr)
    table = kvcache.block_table(lay, 1.0, 1)
    with pytest.raises(ValueError, match="not C-contiguous int64"):
        native.kvcache("write", pool, lay.layers, lay.block, lay.token_bytes, "scalar", [],
                       table=table.astype(np.int32), tokens=lay.seq_len)
    with pytest.raises(ValueError, match="not C-contiguous uint64"):
        native.kvcache("decode", pool, lay.layers, lay.block, lay.token_bytes, "scalar", [],
                       table=table, tokens=lay.seq_len, steps=lay.steps,
                       sums=np.zeros(3, dtype=np.uint64))
    with pytest.raises(Exception, match="cannot hold"):       # more tokens than blocks
        native.kvcache("decode", pool, lay.layers, lay.block, lay.token_bytes, "scalar", [],
                       table=table, tokens=lay.seq_len + 1, steps=lay.steps,
                       sums=np.zeros(lay.layers * 2 * table.size, dtype=np.uint64))
