"""The ML workloads on the GPU (issue 15, item 6): embedding-bag gathers from a table in
HBM, pinned or placed host memory (gpu_embedding), and paged-KV block swaps between device
memory and a placed host pool (gpu_kv_swap). Host-side logic here on a stand-in for the
library; the library's argument checks where nvcc is (they refuse before CUDA is asked);
tests marked gpu run both on a GPU and skip here with the library's reason."""
import ctypes

import numpy as np
import pytest

from cxlbench import benchmarks, gpu
from cxlbench.benchmarks import embedding as embedding_bench
from cxlbench.benchmarks import gpu_embedding, gpu_kv_swap
from cxlbench.benchmarks import kvcache as kvcache_bench
from cxlbench.workloads import embedding, kvcache
from cxlbench.errors import CheckError, UserError
from cxlbench.topology import Topology

from .conftest import cxlbench
from .test_gpu import H200, defaults, mutant, needs_nvcc, private_sources  # noqa: F401 (fixtures)


def emb_params(**over):
    return defaults(gpu_embedding, over, rows=4096, dim=64, pooling=8, batch=256, repeat=3,
                    warmup=1, mem="local", page="4k")


def kv_params(**over):
    return defaults(gpu_kv_swap, over, blocks=8, pool_blocks=32, repeat=3, warmup=1,
                    mem="local", page="4k")


def placed_sizes(monkeypatch, module):
    """The bytes of each buffer the module's run() places (placed for real, recorded)."""
    seen = {}
    real = module.place

    def place(params, cpus, buffers, topology=None):
        seen.update(buffers)
        return real(params, cpus, buffers, topology)
    monkeypatch.setattr(module, "place", place)
    return seen


# ---- embedding: which buffers, which options, which rows --------------------------------------
@pytest.mark.parametrize("table,placed", [("hbm", False), ("pinned", False),
                                          ("registered", True)])
def test_only_a_registered_table_is_a_placed_buffer(table, placed):
    p = emb_params(table=table)
    assert gpu_embedding.buffers_of(p) == (("table",) if placed else ())
    assert set(gpu_embedding.unused(p)) == (set() if placed else {"mem", "page"})
    assert set(gpu_embedding.unused({**p, "dist": "uniform"})) == \
        ({"alpha"} if placed else {"alpha", "mem", "page"})


@pytest.mark.parametrize("dist", ["uniform", "zipf"])
def test_the_gpu_draws_the_rows_the_cpu_embedding_benchmark_draws(dist):
    """One custom table of the same shape, seed, dist and alpha: the CPU benchmark's
    indices, element for element; another seed draws others."""
    p = emb_params(dist=dist, alpha=1.2, seed=7, rows=100000, pooling=5, batch=300)
    cpu = {k: o.default for k, o in embedding_bench.OPTIONS.items()}
    cpu.update(tables=1, rows=100000, pooling=5, batch=300, dim=64, dist=dist, alpha=1.2,
               seed=7)
    want, offsets = embedding.make_indices(embedding.layout(cpu), cpu)
    got = gpu_embedding.make_indices(p)
    assert got.dtype == np.int64 and got.flags.c_contiguous and got.shape == (1500,)
    assert np.array_equal(got, want) and np.array_equal(offsets, np.arange(301) * 5)
    assert got.min() >= 0 and got.max() < 100000
    assert not np.array_equal(gpu_embedding.make_indices({**p, "seed": 8}), got)
    if dist == "zipf":          # popular rows: far fewer distinct ones than uniform draws
        uniform = gpu_embedding.make_indices({**p, "dist": "uniform"})
        assert len(np.unique(got)) < 0.8 * len(np.unique(uniform))


def fake_embedding(monkeypatch, ns, bad=0):
    calls = []

    def embedding_(table, rows, dim, indices, pooling, reps, blocks, threads, host_addr=0,
                   device_index=0):
        calls.append(dict(table=table, rows=rows, dim=dim, indices=indices.copy(),
                          pooling=pooling, reps=reps, blocks=blocks, threads=threads,
                          addr=host_addr, device=device_index))
        return list(ns), bad
    monkeypatch.setattr(gpu, "embedding", embedding_)
    monkeypatch.setattr(gpu, "device", lambda i: {**H200, "index": i})
    return calls


def test_embedding_figures_from_each_launch_warmup_dropped(monkeypatch):
    """256 bags of 8 lookups of 64 floats: 2048 lookups, 2048 x 256 bytes of rows a
    launch; the warm-up launch is timed in the same call but not kept."""
    calls = fake_embedding(monkeypatch, [7, 1000, 2000, 4000])
    m = gpu_embedding.run(emb_params(threads=128, blocks_per_sm=2, device=1))
    (c,) = calls
    assert (c["table"], c["rows"], c["dim"], c["pooling"], c["reps"]) == ("hbm", 4096, 64, 8, 4)
    assert (c["blocks"], c["threads"], c["addr"], c["device"]) == (2 * 132, 128, 0, 1)
    assert np.array_equal(c["indices"], gpu_embedding.make_indices(emb_params()))
    gathered = 2048 * 64 * 4
    assert [r["lookups"] for r in m.reps] == [2048 / 1000 * 1e3, 2048 / 2000 * 1e3,
                                              2048 / 4000 * 1e3]
    assert [r["bandwidth"] for r in m.reps] == [gathered / 1000, gathered / 2000,
                                                gathered / 4000]
    assert m.units == {"lookups": "M/s", "bandwidth": "GB/s"} and m.isa == "sm_90"
    assert m.info["bytes"] == gathered and m.info["lookups"] == 2048
    assert m.placement["verified"] == [] and m.placement["spec"].startswith("device memory")


def test_a_registered_table_is_placed_at_its_bytes_and_handed_to_the_library(monkeypatch):
    seen = placed_sizes(monkeypatch, gpu_embedding)
    calls = fake_embedding(monkeypatch, [1000] * 4)
    m = gpu_embedding.run(emb_params(table="registered", rows=3000, dim=36))
    assert seen == {"table": 3000 * 36 * 4}
    (v,) = m.placement["verified"]
    assert v["buffer"] == "table" and v["ok"] and m.status == "ok"
    assert calls[0]["addr"] != 0 and calls[0]["table"] == "registered"


def test_embedding_output_off_the_hosts_sum_fails_the_case(monkeypatch):
    fake_embedding(monkeypatch, [1000] * 4, bad=5)
    with pytest.raises(CheckError, match=r"gpu_embedding table=pinned: 256 bags of 8 rows: "
                                         r"5 of 16384 output elements differ"):
        gpu_embedding.run(emb_params(table="pinned"))
    fake_embedding(monkeypatch, [1000, 1000, 0, 1000], bad=0)
    with pytest.raises(CheckError, match="under the CUDA events. resolution"):
        gpu_embedding.run(emb_params())


def test_embedding_skips_a_registered_table_on_movable_memory_only(monkeypatch):
    monkeypatch.setattr(gpu, "unavailable", lambda: None)
    monkeypatch.setattr(gpu, "pinnable", lambda mem: f"mem={mem}: movable")
    assert gpu_embedding.skip(emb_params(table="registered", mem="bind:0"), None) == \
        "mem=bind:0: movable"
    assert gpu_embedding.skip(emb_params(table="hbm", mem="bind:0"), None) is None
    assert gpu_embedding.skip(emb_params(table="pinned"), None) is None
    monkeypatch.setattr(gpu, "unavailable", lambda: "no GPU")
    assert gpu_embedding.skip(emb_params(table="hbm"), None) == "no GPU"


def test_embedding_refuses_bad_grids_and_devices(monkeypatch):
    monkeypatch.setattr(gpu, "runtime", lambda: gpu.Runtime(13000, 13000, 1, 0, ""))
    with pytest.raises(UserError, match="threads=48 is not whole warps"):
        gpu_embedding.validate(emb_params(threads=48), None)
    with pytest.raises(UserError, match="device=2, but this machine has 1 CUDA device"):
        gpu_embedding.validate(emb_params(device=2), None)
    gpu_embedding.validate(emb_params(), None)        # nothing placed: no topology asked
    here = Topology.read(probe_gpus=False)
    gpu_embedding.validate(emb_params(table="registered"), here)
    with pytest.raises(UserError):      # 2^40 rows of 64 KiB: no machine's memory
        gpu_embedding.validate(emb_params(table="registered", rows=1 << 40, dim=16384), here)


# ---- KV swaps ---------------------------------------------------------------------------------
def test_a_kv_copy_is_one_layers_k_or_v_of_a_block():
    """llama-3-8b: 8 KV heads x 128 x 2 bytes a token's K in a layer, 16 tokens a block:
    32 KiB a copy, 2 x 32 layers of them a block; the pool the same per slot."""
    p = kv_params()
    assert gpu_kv_swap.copy_bytes(p) == 32 << 10
    assert gpu_kv_swap.copies(p) == 2 * 32 * 8
    assert gpu_kv_swap.pool_bytes(p) == 2 * 32 * 32 * (32 << 10)
    seventy = kv_params(preset="llama-3-70b", dtype="fp8", block=32)
    assert gpu_kv_swap.copy_bytes(seventy) == 32 * 8 * 128
    assert gpu_kv_swap.copies(seventy) == 2 * 80 * 8
    custom = kv_params(preset="custom", layers=2, kv_heads=4, head_dim=64, dtype="fp32")
    assert gpu_kv_swap.copy_bytes(custom) == 16 * 4 * 64 * 4 and gpu_kv_swap.copies(custom) == 32
    # a sequence of 16 tokens a block holds kvcache's bytes a token
    lay = kvcache.layout({**{k: o.default for k, o in kvcache_bench.OPTIONS.items()}})
    assert 2 * lay.layers * lay.token_bytes == 2 * 32 * gpu_kv_swap.copy_bytes(p) // 16


def test_the_block_table_moves_each_layers_k_and_v_of_the_swapped_slots():
    """The library's model in numpy: device copy j <- pool copy slots[j]. Each (layer, K/V)
    plane of the device then holds the same plane of the pool at the swapped blocks'
    slots, distinct and random by seed."""
    p = kv_params(preset="custom", layers=3, kv_heads=1, head_dim=8, dtype="fp32",
                  blocks=5, pool_blocks=40, seed=3)
    table = gpu_kv_swap.slots(p)
    assert table.dtype == np.uint64 and table.flags.c_contiguous
    assert len(table) == gpu_kv_swap.copies(p) == 30
    assert len(set(table.tolist())) == 30 and int(table.max()) < 2 * 3 * 40
    planes, pool_blocks = 6, 40
    pool = np.arange(planes * pool_blocks).reshape(planes, pool_blocks)    # copy ids
    device = pool.ravel()[table.astype(np.int64)].reshape(planes, 5)
    slot = device[0] - 0                       # plane 0: the slots themselves
    assert len(set(slot.tolist())) == 5 and slot.max() < 40
    for plane in range(planes):
        assert (device[plane] == pool[plane, slot]).all()
    assert not np.array_equal(gpu_kv_swap.slots({**p, "seed": 4}), table)
    assert np.array_equal(gpu_kv_swap.slots(p), table)                      # by seed


def fake_kv(monkeypatch, ns, bad=0):
    calls = []

    def kv_swap(direction, method, host_addr, pool_blocks, block_bytes, slots, reps, grid=0,
                threads=0, device_index=0):
        # the pool is there, all of it: its last byte read through the address given
        last = ctypes.c_ubyte.from_address(host_addr + pool_blocks * block_bytes - 1).value
        calls.append(dict(direction=direction, method=method, pool_blocks=pool_blocks,
                          block_bytes=block_bytes, slots=slots.copy(), reps=reps, grid=grid,
                          threads=threads, device=device_index, last=last))
        return list(ns), [t // 2 for t in ns], bad
    monkeypatch.setattr(gpu, "kv_swap", kv_swap)
    monkeypatch.setattr(gpu, "device", lambda i: {**H200, "index": i})
    return calls


@pytest.mark.parametrize("method,grid,threads", [("copies", 0, 0), ("kernel", 8 * 132, 256)])
def test_kv_swap_figures_from_each_swap_and_the_placed_pool(monkeypatch, method, grid, threads):
    seen = placed_sizes(monkeypatch, gpu_kv_swap)
    calls = fake_kv(monkeypatch, [3, 1000, 2000, 4000])
    p = kv_params(method=method, direction="out")
    m = gpu_kv_swap.run(p)
    (c,) = calls
    assert seen == {"pool": gpu_kv_swap.pool_bytes(p)}
    assert (c["direction"], c["method"], c["reps"]) == ("out", method, 4)
    assert (c["pool_blocks"], c["block_bytes"]) == (2 * 32 * 32, 32 << 10)
    assert (c["grid"], c["threads"]) == (grid, threads)
    assert np.array_equal(c["slots"], gpu_kv_swap.slots(p))
    moved = 2 * 32 * 8 * (32 << 10)
    assert m.reps == [{"bandwidth": moved / t, "time": t / 1e3, "issue_time": t // 2 / 1e3}
                      for t in (1000, 2000, 4000)]
    assert m.info["bytes"] == moved and m.info["copies"] == 512
    assert m.info["kv_bytes_per_token"] == 128 << 10
    (v,) = m.placement["verified"]
    assert v["buffer"] == "pool" and v["ok"] and m.kernel == "gpu_kv_swap_out"


@pytest.mark.parametrize("direction,words", [("in", "of the device's blocks differ"),
                                             ("out", "of the pool differ")])
def test_a_kv_swap_with_wrong_bytes_fails_the_case(monkeypatch, direction, words):
    fake_kv(monkeypatch, [1000] * 4, bad=9)
    with pytest.raises(CheckError, match=f"gpu_kv_swap {direction} copies: 8 blocks \\(512 "
                                         f"copies of 32768 bytes\\): 9 bytes {words}"):
        gpu_kv_swap.run(kv_params(direction=direction))


def test_kv_swap_options_each_case_ignores():
    assert set(gpu_kv_swap.unused(kv_params(method="copies"))) == \
        {"threads", "blocks_per_sm", "layers", "kv_heads", "head_dim"}
    assert set(gpu_kv_swap.unused(kv_params(method="kernel", preset="custom"))) == set()
    assert benchmarks.get("gpu_kv_swap").case_buffers(kv_params()) == ("pool",)


def test_kv_swap_refuses_what_cannot_be_swapped(monkeypatch):
    monkeypatch.setattr(gpu, "runtime", lambda: gpu.Runtime(13000, 13000, 1, 0, ""))
    here = Topology.read(probe_gpus=False)
    with pytest.raises(UserError, match="pool_blocks=4 cannot hold blocks=8"):
        gpu_kv_swap.validate(kv_params(pool_blocks=4), here)
    odd = dict(preset="custom", kv_heads=1, head_dim=3, dtype="fp8", block=4)
    with pytest.raises(UserError, match="a block's K of 12 bytes .* is not whole words"):
        gpu_kv_swap.validate(kv_params(method="kernel", **odd), here)
    gpu_kv_swap.validate(kv_params(method="copies", **odd), here)     # any bytes copy
    with pytest.raises(UserError, match="threads=40 is not whole warps"):
        gpu_kv_swap.validate(kv_params(method="kernel", threads=40), here)
    gpu_kv_swap.validate(kv_params(method="kernel"), here)
    with pytest.raises(UserError):      # a pool of 2^30 llama-3-70b blocks: no machine's
        gpu_kv_swap.validate(kv_params(preset="llama-3-70b", pool_blocks=1 << 30), here)


def test_kv_swap_skips_a_pool_on_movable_memory_only(monkeypatch):
    monkeypatch.setattr(gpu, "unavailable", lambda: None)
    monkeypatch.setattr(gpu, "pinnable", lambda mem: None if mem == "local" else "movable")
    assert gpu_kv_swap.skip(kv_params(), None) is None
    assert gpu_kv_swap.skip(kv_params(mem="bind:1"), None) == "movable"


# ---- suites -------------------------------------------------------------------------------------
def test_a_suite_lists_every_table_direction_and_method(tmp_path):
    suite = tmp_path / "ml.toml"
    suite.write_text('[emb]\nbench = "gpu_embedding"\ntable = "all"\nrows = 4096\n'
                     '[kv]\nbench = "gpu_kv_swap"\ndirection = "all"\nmethod = "all"\n'
                     'pool_blocks = 128\n')
    r = cxlbench("run", str(suite), "--dry-run", "--results-dir", str(tmp_path / "r"))
    assert r.returncode == 0, r.stderr
    cases = [line for line in r.stdout.splitlines() if "/" in line.split(" ")[0]]
    assert len(cases) == 7
    assert [c.split()[1] for c in cases] == ["gpu_embedding"] * 3 + ["gpu_kv_swap"] * 4
    assert "table=registered rows=4096 mem=local" in cases[2]
    assert "mem=" not in cases[0] and "mem=" not in cases[1]     # not placed
    assert "direction=out method=kernel" in cases[6]
    why = gpu.unavailable()
    if why is not None:
        assert r.stderr.count(f"skipped: {why}") == 7
    # alpha under dist=uniform would change nothing: refused with why
    suite.write_text('[emb]\nbench = "gpu_embedding"\ndist = "uniform"\nalpha = 2.0\n')
    r = cxlbench("run", str(suite), "--dry-run", "--results-dir", str(tmp_path / "r"))
    assert r.returncode != 0 and "alpha=2.0 would not be used: dist=uniform" in r.stderr


# ---- the library's own checks (no GPU needed: they refuse before CUDA is asked) ------------
@needs_nvcc
def test_the_library_refuses_an_index_outside_the_table():
    idx = np.array([0, 1, 2, 10, 3, 4], dtype=np.int64)
    with pytest.raises(gpu.GpuError, match="lookup 3 names row 10, not a row of a table of "
                                           "10"):
        gpu.embedding("hbm", 10, 8, idx, 2, 1, 1, 32)
    with pytest.raises(gpu.GpuError, match="lookup 0 names row -1"):
        gpu.embedding("hbm", 10, 8, np.array([-1, 0], dtype=np.int64), 2, 1, 1, 32)
    with pytest.raises(gpu.GpuError, match="cxb_gpu_embedding: table, rows"):
        gpu.embedding("registered", 10, 8, idx, 2, 1, 1, 32)     # registered needs memory
    with pytest.raises(gpu.GpuError, match="cxb_gpu_embedding: table, rows"):
        gpu.embedding("hbm", 10, 8, idx, 2, 1, 1, 48)            # not whole warps
    if gpu.unavailable() is not None:
        with pytest.raises(gpu.GpuError, match=r"cudaSetDevice.*\(CUDA error \d+\)"):
            gpu.embedding("hbm", 10, 8, idx[:4] % 10, 2, 1, 1, 32)


@needs_nvcc
def test_the_library_refuses_slots_twice_or_outside_the_pool():
    pool = np.zeros(8 * 64, dtype=np.uint8)
    addr = pool.ctypes.data
    with pytest.raises(gpu.GpuError, match="block 2's slot 1 is named twice"):
        gpu.kv_swap("in", "copies", addr, 8, 64, np.array([1, 5, 1], dtype=np.uint64), 1)
    with pytest.raises(gpu.GpuError, match="block 1's slot 8 is not in the pool"):
        gpu.kv_swap("out", "copies", addr, 8, 64, np.array([0, 8], dtype=np.uint64), 1)
    with pytest.raises(gpu.GpuError, match="block_bytes \\(the kernel's a multiple of 16\\)"):
        gpu.kv_swap("in", "kernel", addr, 8, 60, np.array([0], dtype=np.uint64), 1, 1, 32)
    with pytest.raises(gpu.GpuError, match="blocks \\(at most pool_blocks\\)"):
        gpu.kv_swap("in", "copies", addr, 2, 64, np.array([0, 1, 2], dtype=np.uint64), 1)
    assert not pool.any()               # refused before the pool was written
    if gpu.unavailable() is not None:
        with pytest.raises(gpu.GpuError, match=r"cudaSetDevice.*\(CUDA error \d+\)"):
            gpu.kv_swap("in", "copies", addr, 8, 64, np.array([3, 1], dtype=np.uint64), 1)


# ---- on a GPU ----------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dim", [64, 37])
@pytest.mark.parametrize("table", gpu.EMBEDDING_TABLES)
def test_embedding_gathers_and_checks_on_the_gpu(table, dim):
    """64 K rows, 4096 bags of 16: every output element checked; dim 37 takes the scalar
    loads. Any table, HBM or over a link, gathers over 0.5 GB/s."""
    m = gpu_embedding.run(emb_params(table=table, rows=1 << 16, dim=dim, pooling=16,
                                     batch=4096, repeat=5))
    assert m.status == "ok", m.error
    print(table, dim, [round(r["bandwidth"], 1) for r in m.reps], "GB/s")
    assert min(r["bandwidth"] for r in m.reps) > 0.5
    assert m.info["vector_loads"] == (dim % 4 == 0)


@pytest.mark.gpu
def test_hbm_gathers_faster_than_host_memory_on_the_gpu():
    """A table in HBM against the same table read over the link (uniform rows, 1 M of
    them: past the L2)."""
    p = dict(rows=1 << 20, dim=128, pooling=32, batch=16384, dist="uniform", repeat=5)
    hbm = gpu_embedding.run(emb_params(table="hbm", **p))
    host = gpu_embedding.run(emb_params(table="registered", **p))
    med = [sorted(r["bandwidth"] for r in m.reps)[2] for m in (hbm, host)]
    print("hbm, registered GB/s", med)
    assert med[0] > 2 * med[1]


@pytest.mark.gpu
@pytest.mark.parametrize("method", gpu.KV_METHODS)
@pytest.mark.parametrize("direction", gpu.KV_DIRECTIONS)
def test_kv_swaps_run_and_check_on_the_gpu(direction, method):
    """8 llama-3-8b blocks (512 copies of 32 KiB, 16 MiB) from or to a 32-block pool, every
    byte checked; any link moves more than 1 GB/s."""
    m = gpu_kv_swap.run(kv_params(direction=direction, method=method))
    assert m.status == "ok", m.error
    print(direction, method, [round(r["bandwidth"], 1) for r in m.reps], "GB/s",
          [round(r["time"]) for r in m.reps], "us")
    assert min(r["bandwidth"] for r in m.reps) > 1


@pytest.mark.gpu
def test_a_swap_through_the_wrong_slots_is_caught(mutant):  # noqa: F811
    """The kernel rebuilt to take block j from slot j (the table ignored): the device's
    blocks hold other slots' bytes, and the case fails."""
    mutant("kvswap.cu", "uint4 *host = pool + slots[j] * words + (i - j * words);",
           "uint4 *host = pool + j * words + (i - j * words);")
    with pytest.raises(CheckError, match="gpu_kv_swap in kernel: .* bytes of the device"):
        gpu_kv_swap.run(kv_params(method="kernel", seed=5))


@pytest.mark.gpu
def test_a_bag_missing_a_row_is_caught(mutant):  # noqa: F811
    """The gather rebuilt to skip each bag's last row: every output element is off."""
    mutant("embedding.cu", "for (int k = 0; k < pooling; k++)",
           "for (int k = 0; k < pooling - 1; k++)", count=2)
    with pytest.raises(CheckError, match="gpu_embedding table=hbm: .* output elements"):
        gpu_embedding.run(emb_params())
