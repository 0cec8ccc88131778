"""Embedding-bag lookups (issue 13, part 1): the C kernel against numpy pooling the same
bags in every dtype, pooling, ISA and thread count; the index generator's skew; a wrong
result or a row outside the table caught; presets scaled; the case's three buffers each
placed and verified."""
import hashlib
import json
import os

import numpy as np
import pytest

from cxlbench import benchmarks, native, results
from cxlbench.benchmarks import embedding as embedding_bench
from cxlbench.workloads import embedding, lookups
from cxlbench.errors import CheckError

from .conftest import cxlbench

CPUS = sorted(os.sched_getaffinity(0))[:2]
ENTRY = native.driver("embedding_bag")


def test_option_names_match_the_header():
    assert embedding.DTYPES == native.EMB_DTYPES and embedding.POOLS == native.POOLS
    assert embedding.OPTIMIZERS == native.OPTIMIZERS
    assert ENTRY.benchmark == "embedding" and ENTRY.check == "pooled"


def tables(dtype, rows=(300, 1, 77), pooling=(5, 1, 40), dim=37, batch=50, seed=3):
    """A small stacked layout with its filled table (plain numpy memory), indices and
    offsets; dim 37 leaves a tail after every vector width."""
    lay = embedding.Layout(rows, pooling, dim, dtype, batch)
    raw = native.aligned_empty(lay.sizes()["table"], np.uint8)
    embedding.fill_table(raw, lay, seed)
    indices, offsets = embedding.make_indices(lay, {"dist": "zipf", "alpha": 1.05,
                                                    "seed": seed})
    return lay, raw, indices, offsets


def pool(lay, raw, indices, offsets, pool_, isa, cpus, prefetch=8, regs=0):
    out = np.full((lay.bags, lay.dim), np.nan, dtype=np.float32)
    r = native.embedding_bag(raw.ctypes.data, sum(lay.rows), lay.row_bytes, lay.dim,
                             lay.dtype, pool_, indices, offsets, out, isa, cpus, prefetch,
                             None, 0, regs)
    return out, r


@pytest.mark.parametrize("dtype", embedding.DTYPES)
@pytest.mark.parametrize("pool_", embedding.POOLS)
def test_kernel_pools_what_numpy_pools(dtype, pool_):
    lay, raw, indices, offsets = tables(dtype)
    want = embedding.reference(raw, lay, indices, pool_)
    assert want.shape == (lay.bags, lay.dim) and np.isfinite(want).all()
    for isa in ENTRY.runnable_isas():
        for threads in (1, len(CPUS)):
            for prefetch in (0, 8):
                out, r = pool(lay, raw, indices, offsets, pool_, isa, CPUS[:threads], prefetch)
                embedding.check_output(out, want, lay, r.bad)   # bit-exact but int8
                assert r.ns > 0


# Each pass width the wide variants have: AVX-512's 16, 8, 4, 2 and 1 zmm and the ymm
# after them, AVX2's 16 and 12 ymm (where asked), 8, 4, 2 and 1, and the scalar tail
# (300 = 256 + 32 + 8 + 4), under every register limit the probe may choose.
@pytest.mark.parametrize("dim", (8, 24, 120, 136, 264, 300))
@pytest.mark.parametrize("dtype", embedding.DTYPES)
def test_every_pass_width_pools_what_numpy_pools(dim, dtype):
    lay, raw, indices, offsets = tables(dtype, dim=dim)
    want = embedding.reference(raw, lay, indices, "sum")
    for isa in ENTRY.runnable_isas():
        for regs in (0, *embedding.REGS.get(isa, ()), 2, 1):
            out, r = pool(lay, raw, indices, offsets, "sum", isa, CPUS[:1], 16, regs)
            embedding.check_output(out, want, lay, r.bad)


def test_the_probe_tries_each_prefetch_and_pass_width_and_the_case_records_its_choice(
        tmp_path, monkeypatch):
    """prefetch=auto and regs=auto: the fixed table's distance with every register first,
    then the others; a value set is the one tried; the case's info names the choice."""
    monkeypatch.setenv("CXLBENCH_CACHE", str(tmp_path))
    auto = {"prefetch": "auto", "regs": "auto"}
    got = embedding.bag_candidates(auto, "avx2", 512)
    assert got[0] == {"prefetch": embedding.prefetch_rows("auto", 512), "regs": 8}
    assert {c["regs"] for c in got} == {8, 16, 12, 4}
    assert {c["prefetch"] for c in got} == {16, *embedding.PROBE_PREFETCH}
    assert embedding.bag_candidates({"prefetch": 4, "regs": 12}, "avx512", 512) == [
        {"prefetch": 4, "regs": 12}]
    assert embedding.bag_candidates(auto, "scalar", 64)[0]["regs"] == 0
    params = {name: opt.default for name, opt in embedding_bench.OPTIONS.items()}
    params.update(rows=5000, batch=64, pooling=8, repeat=1, warmup=0, cpus=str(CPUS[0]))
    m = embedding_bench.run(params)
    assert m.status == "ok" and m.info["tuned"]["chosen"] == \
        f"prefetch={m.info['prefetch_rows']} regs={m.info['regs']}"
    assert len(m.info["tuned"]["by"]) == len(embedding.bag_candidates(params, m.isa, 512))


def test_the_probe_reads_the_other_draw_between_its_timings(tmp_path, monkeypatch):
    """Each timed probe pass is followed by an untimed pass over every bag of the other
    draw (as the measured throughput passes alternate with the latency pass's): timed back
    to back, a skewed table's probed rows stayed cached and prefetch=0 was chosen where 128
    ran 2.5 times as fast. The case hands its fresh draw to the probe."""
    monkeypatch.setenv("CXLBENCH_CACHE", str(tmp_path))
    calls = []
    real = native.embedding_bag

    def spy(table, rows, row_bytes, dim, dtype, pool, indices, offsets, out, *rest):
        calls.append((indices.ctypes.data, len(offsets) - 1))
        return real(table, rows, row_bytes, dim, dtype, pool, indices, offsets, out, *rest)
    monkeypatch.setattr(native, "embedding_bag", spy)      # the module the proxy reads
    params = {name: opt.default for name, opt in embedding_bench.OPTIONS.items()}
    params.update(rows=5000, batch=64, pooling=8, repeat=1, warmup=0, cpus=str(CPUS[0]),
                  regs=16, dist="zipf", alpha=1.2, isa="scalar")
    lay = embedding.layout(params)
    indices, offsets = embedding.make_indices(lay, params)
    other = embedding.make_indices(lay, {**params, "seed": 2})[0]
    raw = np.zeros(lay.sizes()["table"], dtype=np.uint8)
    out = np.zeros((lay.bags, lay.dim), dtype=np.float32)
    choice = embedding.tune_bags(params, lay, "scalar", CPUS[:1], raw.ctypes.data, "here",
                                 indices, offsets, out, other)
    timed, between = calls[::2], calls[1::2]
    assert len(timed) == len(between) == len(choice.figures) * 3 > 0
    assert {c[0] for c in timed} == {indices.ctypes.data}
    assert set(between) == {(other.ctypes.data, lay.bags)}        # all of it, every time
    # a choice probed back to back is another key's: it is not reused for this probe
    calls.clear()
    embedding.tune_bags(params, lay, "scalar", CPUS[:1], raw.ctypes.data, "here", indices,
                        offsets, out)
    assert calls and len(calls) == len(choice.figures) * 3
    assert embedding.tune_bags(params, lay, "scalar", CPUS[:1], raw.ctypes.data, "here",
                               indices, offsets, out, other).kept


def test_a_wrong_bag_or_a_row_outside_the_table_is_caught():
    lay, raw, indices, offsets = tables("fp32")
    want = embedding.reference(raw, lay, indices, "sum")
    out, r = pool(lay, raw, indices, offsets, "sum", "scalar", CPUS[:1])
    out[7, 3] = np.nextafter(out[7, 3], np.float32(np.inf))     # one ulp off
    with pytest.raises(CheckError, match="bag 7 differs from numpy's pooling"):
        embedding.check_output(out, want, lay, r.bad)
    bad = indices.copy()
    bad[5] = sum(lay.rows)                                       # one past the last row
    out, r = pool(lay, raw, bad, offsets, "sum", "scalar", CPUS[:1])
    assert r.bad == 1
    with pytest.raises(CheckError, match="1 lookups named no row"):
        embedding.check_output(out, want, lay, r.bad)


def test_layout_of_a_scaled_preset_and_of_custom_tables():
    params = {"preset": "dlrm-dcnv2", "scale": 1e-4, "dtype": "int8", "batch": 4,
              "train": "none"}
    lay = embedding.layout({**params, "tables": 1, "rows": 1, "dim": 1, "pooling": 1})
    assert len(lay.rows) == 26 and lay.dim == 128 and lay.row_bytes == 136
    assert lay.rows[0] == 4000 and lay.rows[5] == 1 and lay.pooling[20] == 100
    assert lay.lookups == 4 * 214 and lay.bags == 104
    custom = embedding.layout({"preset": "custom", "tables": 3, "rows": 10, "dim": 8,
                               "pooling": 2, "dtype": "bf16", "batch": 5, "scale": 1.0,
                               "train": "none"})
    assert custom.sizes() == {"table": 30 * 16, "indices": (30 + 15 + 1) * 8,
                              "out": 15 * 8 * 4}
    adagrad = embedding.Layout(custom.rows, custom.pooling, 8, "fp32", 5, "adagrad")
    assert adagrad.sizes() == {"table": 30 * 32, "indices": (30 + 15 + 1 + 91) * 8,
                               "out": 15 * 8 * 4, "state": 30 * 4}


def test_case_places_three_buffers_and_checks_every_repetition(tmp_path):
    r = cxlbench("run", "--bench", "embedding", "--set", "tables=2", "--set", "rows=5000",
                 "--set", "dim=64", "--set", "pooling=8", "--set", "batch=300", "--set",
                 "dtype=bf16", "--set", "mem.table=bind:0", "--set", "page.table=thp",
                 "--set", "repeat=3", "--set", "warmup=0", "--json", "--results-dir",
                 str(tmp_path))
    assert r.returncode == 0, r.stderr
    recs = {x["metric"]: x for x in json.loads(r.stdout)}
    assert set(recs) == {"lookups", "bandwidth", "bag_p50", "bag_p99"}
    assert all(x["status"] == "ok" and x["median"] > 0 for x in recs.values())
    df = results.load(recs["lookups"]["run_dir"])
    (entry,) = df.attrs["journal"].values()
    verified = {v["buffer"]: v for v in entry["placement"]["verified"]}
    assert set(verified) == {"table", "indices", "out"}
    assert verified["table"]["spec"] == "bind:0" and verified["table"]["page"] == "thp"
    assert entry["info"]["lookups"] == 2 * 300 * 8 and entry["info"]["row_bytes"] == 128
    out = tmp_path / "report"
    r = cxlbench("report", recs["lookups"]["run_dir"], "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "Embedding-bag lookups" in (out / "report.md").read_text()


def test_a_kernel_that_pools_wrongly_fails_the_case(monkeypatch):
    real = native.embedding_bag

    def off_by_one_row(table, rows, row_bytes, dim, dtype, pool_, indices, offsets, out,
                       *rest):
        return real(table, rows, row_bytes, dim, dtype, pool_, (indices + 1) % rows,
                    offsets, out, *rest)
    monkeypatch.setattr(native, "embedding_bag", off_by_one_row)
    params = {name: opt.default for name, opt in embedding_bench.OPTIONS.items()}
    params.update(rows=1000, batch=20, pooling=4, repeat=1, warmup=0, cpus=str(CPUS[0]))
    with pytest.raises(CheckError, match="differs from numpy's pooling"):
        embedding_bench.run(params)


def test_scale_is_for_presets(tmp_path):
    r = cxlbench("run", "--bench", "embedding", "--set", "scale=0.5", "--dry-run")
    assert r.returncode == 2 and "scale shrinks a preset's tables" in r.stderr


def train_params(**over):
    params = {name: opt.default for name, opt in embedding_bench.OPTIONS.items()}
    params.update(rows=3000, dim=20, batch=40, pooling=6, repeat=3, warmup=1,
                  cpus=",".join(map(str, CPUS)), threads=len(CPUS), **over)
    return params


@pytest.mark.parametrize("train", embedding.OPTIMIZERS)
@pytest.mark.parametrize("pool_", embedding.POOLS)
def test_training_steps_match_numpys(train, pool_):
    """Every repetition: the forward on the rows as the last step left them, then the
    step, each checked against numpy (a CheckError otherwise)."""
    m = embedding_bench.run(train_params(train=train, pool=pool_, tables=2, dist="uniform"))
    assert m.status == "ok" and len(m.reps) == 3
    assert all(rep["rows_updated"] > 0 for rep in m.reps)
    assert m.kernel == f"embedding_bag+{train}" and 0 < m.info["rows_touched"] <= 6000
    names = [v["buffer"] for v in m.placement["verified"]]
    assert names == (["table", "indices", "out", "state"] if train == "adagrad"
                     else ["table", "indices", "out"])


def test_a_step_not_taken_or_taken_twice_is_caught(monkeypatch):
    real = native.embedding_update
    monkeypatch.setattr(native, "embedding_update", lambda *a: 1)
    with pytest.raises(CheckError, match="updated rows differ from numpy's sgd step"):
        embedding_bench.run(train_params(train="sgd"))

    def twice(*a):
        return real(*a) + real(*a)
    monkeypatch.setattr(native, "embedding_update", twice)
    with pytest.raises(CheckError, match="Adagrad's state differs"):
        embedding_bench.run(train_params(train="adagrad"))


def test_training_needs_fp32_tables():
    r = cxlbench("run", "--bench", "embedding", "--set", "train=sgd", "--set", "dtype=bf16",
                 "--dry-run")
    assert r.returncode == 2 and "train=sgd updates fp32 tables, not bf16" in r.stderr


def test_preset_refuses_custom_tables(tmp_path):
    r = cxlbench("run", "--bench", "embedding", "--set", "preset=dlrm-dcnv2", "--set",
                 "scale=0.0001", "--set", "dim=64", "--set", "tables=3", "--dry-run")
    assert r.returncode == 2
    assert "embedding: tables=3, dim=64 would not be used: preset=dlrm-dcnv2 has tables, " \
        "rows, dim and pooling of its own" in r.stderr


def test_arrays_the_kernel_would_misread_are_refused():
    lay, raw, indices, offsets = tables("fp32")
    out = np.zeros((lay.bags, lay.dim), dtype=np.float64)
    with pytest.raises(ValueError, match="not C-contiguous float32"):
        native.embedding_bag(raw.ctypes.data, sum(lay.rows), lay.row_bytes, lay.dim, "fp32",
                             "sum", indices, offsets, out, "scalar", CPUS[:1])
    out = np.zeros((lay.bags, lay.dim), dtype=np.float32)
    with pytest.raises(ValueError, match="offsets must climb"):
        native.embedding_bag(raw.ctypes.data, sum(lay.rows), lay.row_bytes, lay.dim, "fp32",
                             "sum", indices, offsets + 1, out, "scalar", CPUS[:1])
    with pytest.raises(ValueError, match="not C-contiguous int64"):
        native.embedding_bag(raw.ctypes.data, sum(lay.rows), lay.row_bytes, lay.dim, "fp32",
                             "sum", indices[::2], offsets, out, "scalar", CPUS[:1])
    with pytest.raises(Exception, match="row of"):      # a row too short for its dtype
        native.embedding_bag(raw.ctypes.data, sum(lay.rows), lay.dim, lay.dim, "fp32",
                             "sum", indices, offsets, out, "scalar", CPUS[:1])



# ---- recorded traces and the meta-2022-like preset ------------------------------------
def params_with(**over):
    params = {name: opt.default for name, opt in embedding_bench.OPTIONS.items()}
    params.update({"dim": 20, "repeat": 2, "warmup": 0, "cpus": str(CPUS[0]), **over})
    return params


def write_trace(path, tables=3, batch=40, rows=(500, 70, 3000), seed=0, form="lengths"):
    """A trace as the dlrm_datasets files hold one, converted to npz: lengths (tables x
    batch, empty bags among them), offsets over all bags, indices counting from each
    table's row 0. Returns the lengths and indices."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 9, (tables, batch))
    lengths[0, 3] = 0
    indices = np.concatenate([rng.integers(0, r, lengths[t].sum())
                              for t, r in enumerate(rows)])
    offsets = np.concatenate(([0], np.cumsum(lengths.ravel())))
    arrays = {"lengths": dict(lengths=lengths), "offsets": dict(offsets=offsets),
              "both": dict(offsets=offsets, lengths=lengths)}[form]
    np.savez(path, indices=indices, **arrays)
    return lengths, indices


def test_bags_of_any_size_pool_as_the_fixed_size_reference_does():
    """The variable-size reference (a trace's) against the fixed-size one, bit for bit,
    on the same bags, and zeros for an empty bag."""
    lay, raw, indices, offsets = tables("bf16")
    for pool_ in embedding.POOLS:
        fixed = embedding.reference(raw, lay, indices, pool_)
        per_table = tuple(lay.batch * p for p in lay.pooling)
        var = embedding.Layout(lay.rows, lay.pooling, lay.dim, lay.dtype, lay.batch,
                               table_lookups=per_table)
        assert np.array_equal(embedding.reference(raw, var, indices, pool_, offsets), fixed)
    with_empty = np.insert(offsets, 4, offsets[4])          # bag 4 is empty now
    got = embedding.reference(raw, var, indices, "mean", with_empty)
    assert not got[4].any() and np.array_equal(got[5], fixed[4])


@pytest.mark.parametrize("form", ["lengths", "offsets", "both"])
def test_a_trace_gives_the_bags_tables_and_rows(tmp_path, form):
    path = tmp_path / "fbgemm_t3_bs40.npz"
    lengths, idx = write_trace(path, form=form)
    params = params_with(trace=str(path), **({} if form != "offsets" else {"tables": 3}))
    lay = embedding.layout(params)
    # rows: each table's highest index + 1; the bags: all 40 of each table (batch 2048)
    ends = np.cumsum(lengths.sum(axis=1))
    starts = ends - lengths.sum(axis=1)
    assert lay.rows == tuple(int(idx[s:e].max()) + 1 for s, e in zip(starts, ends))
    assert lay.batch == 40 and lay.lookups == lengths.sum() and lay.bags == 120
    indices, offsets = embedding.make_indices(lay, params)
    assert np.array_equal(np.diff(offsets), lengths.ravel())
    assert np.array_equal(indices[lengths[0].sum():lengths[:2].sum()],        # table 1's
                          idx[lengths[0].sum():lengths[:2].sum()] + lay.rows[0])
    m = embedding_bench.run(params)           # every repetition checked against numpy
    assert m.status == "ok" and m.info["lookups"] == lengths.sum()
    assert m.info["trace"] == path.name and m.info["trace_bags"] == 120
    assert m.info["trace_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_batch_takes_each_tables_first_bags_and_rows_fix_the_tables(tmp_path):
    path = tmp_path / "t.npz"
    lengths, idx = write_trace(path)
    params = params_with(trace=str(path), batch=5, rows=4096, pool="mean", train="adagrad")
    lay = embedding.layout(params)
    assert lay.rows == (4096,) * 3 and lay.batch == 5
    assert lay.table_lookups == tuple(int(x) for x in lengths[:, :5].sum(axis=1))
    indices, offsets = embedding.make_indices(lay, params)
    starts = np.concatenate(([0], np.cumsum(lengths.sum(axis=1))))
    assert np.array_equal(indices[:lay.table_lookups[0]], idx[:lengths[0, :5].sum()])
    assert np.array_equal(indices[lay.table_lookups[0]:sum(lay.table_lookups[:2])],
                          idx[starts[1]:starts[1] + lengths[1, :5].sum()] + 4096)
    m = embedding_bench.run(params)           # training on a trace's bags, checked too
    assert m.status == "ok" and m.kernel == "embedding_bag+adagrad"


def test_a_folder_of_npy_files_is_a_trace(tmp_path):
    lengths, idx = write_trace(tmp_path / "t.npz")
    np.save(tmp_path / "indices.npy", idx)
    np.save(tmp_path / "lengths.npy", lengths)
    lay = embedding.layout(params_with(trace=str(tmp_path)))
    assert lay.lookups == lengths.sum() and len(lay.rows) == 3


BAD_TRACES = {
    "missing": (dict(indices=[1, 2]), "needs arrays 'indices' and 'offsets' (or 'lengths'); "
                "it holds indices"),
    "float": (dict(indices=[1.0, 2.0], offsets=[0, 2]), "'indices' holds float64, not integers"),
    "climbs": (dict(indices=[1, 2, 3], offsets=[0, 2, 1, 3]),
               "'offsets' are not monotone: bag 1 runs from 2 to 1"),
    "start": (dict(indices=[1, 2], offsets=[1, 2]), "'offsets' must start at 0"),
    "short": (dict(indices=[1, 2, 3], offsets=[0, 2]),
              "the bags cover 2 lookups but 'indices' holds 3"),
    "negative": (dict(indices=[1, -4, 3], offsets=[0, 1, 3]),
                 "'indices' has a negative row (-4 at lookup 1)"),
    "neglen": (dict(indices=[1, 2], lengths=[3, -1]), "'lengths' has a negative bag size "
               "(-1 at bag 1)"),
    "disagree": (dict(indices=[1, 2, 3], lengths=[1, 2], offsets=[0, 2, 3]),
                 "'offsets' and 'lengths' disagree"),
    "split": (dict(indices=[1, 2, 3], lengths=[[1, 1, 1]]), None),      # fine: 1 table
}


@pytest.mark.parametrize("case", sorted(BAD_TRACES))
def test_a_bad_trace_is_one_line_at_check_time(tmp_path, case):
    arrays, message = BAD_TRACES[case]
    path = tmp_path / f"{case}.npz"
    np.savez(path, **{k: np.asarray(v) for k, v in arrays.items()})
    r = cxlbench("run", "--bench", "embedding", "--set", f"trace={path}", "--dry-run")
    if message is None:
        assert r.returncode == 0, r.stderr
        return
    assert r.returncode == 2
    assert r.stderr.strip() == f"error: embedding/000: trace {case}.npz: {message}" or \
        r.stderr.strip().startswith(f"error: embedding/000: trace {case}.npz: {message}")
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_trace_errors_and_options_a_trace_replaces(tmp_path):
    path = tmp_path / "t.npz"
    write_trace(path)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    np.save(tmp_path / "lone.npy", np.arange(3))
    for sets, message in [
        ([f"trace={tmp_path}/absent.npz"], "trace absent.npz: no such file"),
        ([f"trace={tmp_path}/junk.npz"], "trace junk.npz: cannot be read as a trace"),
        ([f"trace={tmp_path}/lone.npy"], "trace lone.npy: cannot be read as a trace (a .npy "
                                         "file holds one array"),
        ([f"trace={path}", "rows=1000"], "trace t.npz: indices out of range: table 2 looks up "
                                         "row"),
        ([f"trace={path}", "tables=2"], "trace t.npz: 'lengths' is 3 tables x 40 bags, not 2 "
                                        "tables"),
        ([f"trace={path}", "dist=reuse", "pooling=4"], "embedding: pooling=4, dist=reuse would "
                                                       "not be used: trace=t.npz gives the bags "
                                                       "and the rows they name"),
        ([f"trace={path}", "preset=dlrm-dcnv2"], "embedding: preset=dlrm-dcnv2 would not be "
                                                 "used: trace=t.npz gives the bags"),
    ]:
        args = [x for s in sets for x in ("--set", s)]
        r = cxlbench("run", "--bench", "embedding", *args, "--dry-run")
        assert r.returncode == 2 and message in r.stderr, (sets, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1


def test_meta_2022_like_preset_has_many_tables_of_reuse_profile_indices():
    params = params_with(preset="meta-2022-like", scale=0.001, batch=64, dim=128)
    lay = embedding.layout(params)
    assert len(lay.rows) == 788 and set(lay.rows) == {1000} and set(lay.pooling) == {14}
    assert lay.dim == 128 and lay.lookups == 788 * 64 * 14
    indices, offsets = embedding.make_indices(lay, params)
    assert indices.max() < 788 * 1000 and len(offsets) == 788 * 64 + 1
    # Tables large enough for the batch: the stream's reuse histogram is the profile's.
    profile = lookups.PROFILES["meta-2022"]
    for b, (rows, served) in zip(profile.buckets, lookups.reuse_histogram(indices,
                                                                          profile.buckets)):
        assert abs(rows - b.rows) < 0.01 and abs(served - b.lookups) < 0.025, (b, rows, served)
    assert embedding.reuse_note(lay, params) is None
    assert embedding.trace_info(params) == {"indices": "reuse:meta-2022"}
    small = params_with(preset="meta-2022-like", scale=0.0001, batch=512, dim=128)
    assert "788 of 788 tables have fewer rows (the smallest 100) than the distinct rows the " \
        "meta-2022 profile draws from a table for a batch of 512 (up to 565)" in \
        embedding.reuse_note(embedding.layout(small), small)


def test_options_a_case_ignores_are_refused_and_left_out_of_legends(tmp_path):
    bench = benchmarks.get("embedding")
    ignored = bench.ignored(params_with(dist="uniform"))
    assert set(ignored) == {"scale", "alpha", "profile", "lr"}
    r = cxlbench("run", "--bench", "embedding", "--set", "dist=uniform", "--set", "alpha=2",
                 "--dry-run")
    assert r.returncode == 2 and "embedding: alpha=2.0 would not be used: dist=uniform" \
        in r.stderr
    r = cxlbench("run", "--bench", "embedding", "--set", "lr=0.5", "--dry-run")
    assert r.returncode == 2 and "lr=0.5 would not be used: train=none takes no step" in r.stderr
    # A preset's rows are not the rows option's default: captions must not say rows=1048576.
    import pandas as pd
    from cxlbench.report import figures
    preset = params_with(preset="dlrm-dcnv2", scale=0.001, dim=128)
    frame = pd.DataFrame({"benchmark": ["embedding"] * 2, "cpus_used": ["0", "0"],
                          "params": [preset, {**preset, "dist": "uniform"}]})
    shown = figures._params(frame)
    assert "rows" not in shown[0] and "tables" not in shown[0] and "lr" not in shown[0]
    assert shown[0]["alpha"] == 1.05 and "alpha" not in shown[1]     # Zipf's alone
    assert shown[0]["preset"] == "dlrm-dcnv2" and shown[0]["scale"] == 0.001


def test_meta_2022_like_preset_refuses_what_it_sets_itself(tmp_path):
    r = cxlbench("run", "--bench", "embedding", "--set", "preset=meta-2022-like", "--set",
                 "scale=0.0001", "--set", "dist=uniform", "--set", "pooling=3", "--dry-run")
    assert r.returncode == 2
    assert "embedding: pooling=3, dist=uniform would not be used: preset=meta-2022-like has " \
        "tables, rows, dim, pooling and indices (dist=reuse, profile=meta-2022) of its own" \
        in r.stderr
    r = cxlbench("run", "--bench", "embedding", "--set", "preset=meta-2022-like", "--set",
                 "scale=0.0005", "--set", "batch=256", "--dry-run")
    assert r.returncode == 0 and "preset=meta-2022-like scale=0.0005 batch=256" in r.stdout


def test_the_latency_pass_looks_up_a_fresh_draw(monkeypatch):
    """The throughput pass reads the case's indices; the bag-latency pass a fresh draw of
    the same distribution (seed + 1), so it does not replay the rows just read; each is
    checked against its own numpy pooling, and the case's indices are back after."""
    seen = []
    real = native.embedding_bag

    def spy(*args):
        seen.append((args[6].copy(), args[12] is not None))     # indices, timed per bag
        return real(*args)
    monkeypatch.setattr(native, "embedding_bag", spy)
    p = params_with(rows=4096, batch=64, repeat=2, warmup=0, dist="zipf", alpha=1.05)
    m = embedding_bench.run(p)
    assert m.status == "ok"
    lay = embedding.layout(p)
    drawn = embedding.make_indices(lay, p)[0]
    fresh = embedding.make_indices(lay, {**p, "seed": p["seed"] + 1})[0]
    assert not np.array_equal(drawn, fresh)
    assert [timed for _, timed in seen] == [False, True] * 2
    for indices, timed in seen:
        assert np.array_equal(indices, fresh if timed else drawn)
