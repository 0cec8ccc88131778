"""Embedding-bag lookups (issue 13, part 1): the C kernel against numpy pooling the same
bags in every dtype, pooling, ISA and thread count; the index generator's skew; a wrong
result or a row outside the table caught; presets scaled; the case's three buffers each
placed and verified."""
import json
import os

import numpy as np
import pytest

from cxlbench import native, results
from cxlbench.benchmarks import embedding
from cxlbench.errors import CheckError

from .conftest import cxlbench

CPUS = sorted(os.sched_getaffinity(0))[:2]
ENTRY = next(d for d in native.drivers() if d.key == "embedding_bag")


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


def pool(lay, raw, indices, offsets, pool_, isa, cpus, prefetch=8):
    out = np.full((lay.bags, lay.dim), np.nan, dtype=np.float32)
    r = native.embedding_bag(raw.ctypes.data, sum(lay.rows), lay.row_bytes, lay.dim,
                             lay.dtype, pool_, indices, offsets, out, isa, cpus, prefetch)
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
    params = {name: opt.default for name, opt in embedding.OPTIONS.items()}
    params.update(rows=1000, batch=20, pooling=4, repeat=1, warmup=0, cpus=str(CPUS[0]))
    with pytest.raises(CheckError, match="differs from numpy's pooling"):
        embedding.run(params)


def test_scale_is_for_presets(tmp_path):
    r = cxlbench("run", "--bench", "embedding", "--set", "scale=0.5", "--dry-run")
    assert r.returncode == 2 and "scale shrinks a preset's tables" in r.stderr


def train_params(**over):
    params = {name: opt.default for name, opt in embedding.OPTIONS.items()}
    params.update(rows=3000, dim=20, batch=40, pooling=6, repeat=3, warmup=1,
                  cpus=",".join(map(str, CPUS)), threads=len(CPUS), **over)
    return params


@pytest.mark.parametrize("train", embedding.OPTIMIZERS)
@pytest.mark.parametrize("pool_", embedding.POOLS)
def test_training_steps_match_numpys(train, pool_):
    """Every repetition: the forward on the rows as the last step left them, then the
    step, each checked against numpy (a CheckError otherwise)."""
    m = embedding.run(train_params(train=train, pool=pool_, tables=2, dist="uniform"))
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
        embedding.run(train_params(train="sgd"))

    def twice(*a):
        return real(*a) + real(*a)
    monkeypatch.setattr(native, "embedding_update", twice)
    with pytest.raises(CheckError, match="Adagrad's state differs"):
        embedding.run(train_params(train="adagrad"))


def test_training_needs_fp32_tables():
    r = cxlbench("run", "--bench", "embedding", "--set", "train=sgd", "--set", "dtype=bf16",
                 "--dry-run")
    assert r.returncode == 2 and "train=sgd updates fp32 tables, not bf16" in r.stderr


def test_preset_refuses_custom_tables(tmp_path):
    r = cxlbench("run", "--bench", "embedding", "--set", "preset=dlrm-dcnv2", "--set",
                 "scale=0.0001", "--set", "dim=64", "--set", "tables=3", "--dry-run")
    assert r.returncode == 2
    assert "preset=dlrm-dcnv2 has tables, rows, dim and pooling of its own: tables, dim" in \
        r.stderr


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

