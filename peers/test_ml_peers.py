"""The ML workloads' peers through cxlbench's own pytest plugin: the same embedding bags
pooled by numpy's idiom, by torch.nn.functional.embedding_bag (where torch is installed)
and by cxlbench's kernel, one thread, the table placed on each memory node in turn
(`tier`) and verified before and after, pytest-benchmark's tables and JSON as usual.

    pytest peers/test_ml_peers.py                     # every memory node
    pytest peers/test_ml_peers.py --cxlbench-tiers=cxl --benchmark-json=out.json

Not part of the default test run (testpaths = tests). Each test's extra_info holds the
table's placement (spec, page, pages per node before and after) and `lookups`, so M
lookups/s = lookups x OPS / 1e6. Every side's bags are checked against numpy's reference
once, outside the timed rounds."""
from __future__ import annotations

import os

import numpy as np
import pytest

from cxlbench.workloads import embedding

ROWS, DIM, BATCH, POOLING, ALPHA = 1 << 18, 128, 2048, 32, 1.05     # 128 MiB of fp32 rows
SIDES = ("numpy", "torch", "cxlbench")


@pytest.fixture(scope="module")
def bags():
    lay = embedding.Layout((ROWS,), (POOLING,), DIM, "fp32", BATCH)
    indices, offsets = embedding.make_indices(lay, {"dist": "zipf", "alpha": ALPHA, "seed": 1})
    return lay, indices, offsets


@pytest.fixture(autouse=True)
def one_cpu():
    """numpy, torch and the kernel on one CPU, as compare_ml.py runs them."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, [min(before)])
    yield min(before)
    os.sched_setaffinity(0, before)


@pytest.mark.parametrize("side", SIDES)
def test_embedding_bag(benchmark, tier, placed_array, bags, side, one_cpu):
    lay, indices, offsets = bags
    raw = placed_array(lay.sizes()["table"], np.uint8, page="thp", cpus=[one_cpu])
    embedding.fill_table(raw, lay, 1)
    table = raw.view(np.float32).reshape(ROWS, DIM)
    want = embedding.reference(raw, lay, indices, "sum")
    if side == "numpy":
        def pool():
            return np.add.reduceat(table[indices], offsets[:-1], axis=0)
    elif side == "torch":
        torch = pytest.importorskip("torch")
        torch.set_num_threads(1)
        t_table, t_idx = torch.from_numpy(table), torch.from_numpy(indices)
        t_off = torch.from_numpy(offsets[:-1])

        def pool():
            return torch.nn.functional.embedding_bag(t_idx, t_table, t_off, mode="sum").numpy()
    else:
        from cxlbench import native
        isa = embedding.resolve_bag_isa("auto")
        out = np.empty((lay.bags, DIM), dtype=np.float32)
        # prefetch=auto and regs=auto, as the benchmark resolves them
        tuned = embedding.tune_bags({"prefetch": "auto", "regs": "auto", "pool": "sum",
                                     "dist": "zipf", "alpha": ALPHA}, lay, isa, [one_cpu],
                                    raw.ctypes.data, f"{tier.id} thp", indices, offsets, out)

        def pool():
            r = native.embedding_bag(raw.ctypes.data, ROWS, lay.row_bytes, DIM, "fp32", "sum",
                                     indices, offsets, out, isa, [one_cpu],
                                     tuned.settings["prefetch"], None, 0,
                                     tuned.settings["regs"])
            assert r.bad == 0
            return out
        benchmark.extra_info.update(isa=isa, tuned=tuned.record())
    assert np.allclose(pool(), want, rtol=1e-5, atol=1e-4), f"{side}: bags differ"
    benchmark.group = f"embedding bag, table on {tier.id}"
    benchmark.extra_info.update(lookups=lay.lookups, rows=ROWS, dim=DIM, alpha=ALPHA)
    benchmark(pool)
