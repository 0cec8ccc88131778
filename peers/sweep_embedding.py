"""How far ahead the embedding-bag kernel should prefetch, measured: for each table shape
(dim, dtype, pooling, distribution) the kernel's lookups/s at each prefetch distance (rows
ahead, across bag boundaries, which is how the kernel keeps several bags in flight) and
with each vector width (avx2: 8 ymm accumulators, 64 floats a pass; avx512: 16 zmm, 256
floats), the distances alternated round by round, one thread, the table placed and
verified.

The kernel's default (the embedding option `prefetch`) was chosen from this table; run it
on a new machine to see whether it still holds:

    python peers/sweep_embedding.py                  # the grid below, ~2 min
    python peers/sweep_embedding.py --dims 64 --dtypes bf16 --rounds 5

Prints, per shape, each distance's median M lookups/s (relative to the best) and where
the default lands."""
from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys

import numpy as np

from cxlbench import memory, native
from cxlbench.workloads import embedding


def shapes(args):
    """The grid: every dim x dtype at the base pooling and skew, then the pooling and the
    distribution varied at the base dim."""
    base = (args.dims[len(args.dims) // 2] if len(args.dims) > 1 else args.dims[0])
    out = [(d, t, args.pooling, "zipf", args.alpha)
           for d, t in itertools.product(args.dims, args.dtypes)]
    out += [(base, "fp32", p, "zipf", args.alpha) for p in args.poolings if p != args.pooling]
    out += [(base, "fp32", args.pooling, "zipf", a) for a in args.alphas if a != args.alpha]
    out += [(base, "fp32", args.pooling, "uniform", 0.0)]
    return out


def sweep(shape, args, cpu) -> None:
    dim, dtype, pooling, dist, alpha = shape
    probe = embedding.Layout((1,), (pooling,), dim, dtype, 1)
    rows = max(1, args.table_bytes // probe.row_bytes)
    lay = embedding.Layout((rows,), (pooling,), dim, dtype, max(1, args.lookups // pooling))
    raw = memory.array(lay.sizes()["table"], np.uint8, mem=args.mem, page=args.page, cpus=cpu)
    embedding.fill_table(raw, lay, 1)
    indices, offsets = embedding.make_indices(lay, {"dist": dist, "alpha": alpha, "seed": 1})
    out = np.empty((lay.bags, dim), dtype=np.float32)
    isas = [i for i in ("avx2", "avx512") if native.embedding_isa_supported(i)]
    default = embedding.prefetch_rows("auto", lay.row_bytes)
    sides = [(isa, pf) for isa in isas for pf in sorted({*args.prefetch, default})]
    rates = {s: [] for s in sides}
    for _ in range(args.rounds):
        for isa, pf in sides:
            r = native.embedding_bag(raw.ctypes.data, rows, lay.row_bytes, dim, dtype, "sum",
                                     indices, offsets, out, isa, cpu, pf)
            assert r.bad == 0
            rates[(isa, pf)].append(lay.lookups / r.ns * 1e3)
    med = {s: statistics.median(v) for s, v in rates.items()}
    best = max(med, key=med.get)
    lines = -(-lay.row_bytes // 64)
    print(f"dim {dim} {dtype} ({lines} lines a row), pooling {pooling}, {dist}"
          f"{f' {alpha:g}' if dist == 'zipf' else ''}, {rows} rows: best {best[0]} "
          f"prefetch {best[1]} ({med[best]:.1f} M/s); default {default}")
    for isa in isas:
        cells = [f"{pf}:{med[(isa, pf)]:.1f}{'*' if pf == default else ''}"
                 for _, pf in filter(lambda s: s[0] == isa, sides)]
        print(f"  {isa:<7} " + "  ".join(cells))
    del raw


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", type=int, nargs="+", default=[32, 128, 256])
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "fp16", "bf16"])
    ap.add_argument("--pooling", type=int, default=32)
    ap.add_argument("--poolings", type=int, nargs="+", default=[1, 128])
    ap.add_argument("--alpha", type=float, default=1.05)
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.6, 1.2])
    ap.add_argument("--prefetch", type=int, nargs="+", default=[0, 8, 16, 32, 64, 128])
    ap.add_argument("--table-bytes", type=int, default=1 << 30)
    ap.add_argument("--lookups", type=int, default=1 << 19)
    ap.add_argument("--mem", default="local")
    ap.add_argument("--page", default="thp")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cpu = [sorted(os.sched_getaffinity(0))[0]]
    os.sched_setaffinity(0, cpu)
    for shape in shapes(args):
        sweep(shape, args, cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
