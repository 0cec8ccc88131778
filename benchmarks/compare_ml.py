"""The ML workloads side by side with what an ML engineer would otherwise run, in one run
on one machine, one thread each, the same table and indices in the same placed memory.

  embedding  cxlbench's embedding_bag kernel (widest ISA, prefetch 8)
             vs numpy's idiom: np.add.reduceat(table[indices], offsets[:-1])   >= 2x
             vs torch.nn.functional.embedding_bag, where torch is installed    >= 1x

The sides alternate for --rounds rounds so a shared machine's drift hits each; each
side's figure is the median of its rounds (M lookups/s). Every side's output is checked
against the others. Exits 1 when a target is missed. Usage:
python benchmarks/compare_ml.py [--rows 4194304] [--dim 128] [--batch 2048]
[--pooling 32] [--alpha 1.05] [--dtype fp32] [--mem local] [--page thp] [--rounds 5]"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from cxlbench import memory, native
from cxlbench.benchmarks import embedding


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4 << 20)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--pooling", type=int, default=32)
    ap.add_argument("--alpha", type=float, default=1.05)
    ap.add_argument("--dtype", default="fp32", choices=("fp32",))   # what numpy gathers as is
    ap.add_argument("--mem", default="local")
    ap.add_argument("--page", default="thp")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    cpu = [sorted(os.sched_getaffinity(0))[0]]
    os.sched_setaffinity(0, cpu)            # numpy and torch on the kernel's one CPU
    lay = embedding.Layout((args.rows,), (args.pooling,), args.dim, args.dtype, args.batch)
    raw = memory.array(lay.sizes()["table"], np.uint8, mem=args.mem, page=args.page, cpus=cpu)
    embedding.fill_table(raw, lay, 1)
    table = raw.view(np.float32).reshape(args.rows, args.dim)
    indices, offsets = embedding.make_indices(lay, {"dist": "zipf", "alpha": args.alpha,
                                                    "seed": 1})
    out = np.empty((lay.bags, args.dim), dtype=np.float32)
    isa = embedding.resolve_bag_isa("auto")     # the widest with the FMA and F16C it needs
    print(f"table {args.rows} x {args.dim} {args.dtype} ({lay.sizes()['table'] >> 20} MiB, "
          f"mem={args.mem} page={args.page}, verified {memory.verify(raw).counts_text()}), "
          f"{lay.bags} bags of {args.pooling}, Zipf {args.alpha}, 1 thread on CPU {cpu[0]}, "
          f"isa {isa}")

    def ours():
        r = native.embedding_bag(raw.ctypes.data, args.rows, lay.row_bytes, args.dim,
                                 args.dtype, "sum", indices, offsets, out, isa, cpu, 8)
        assert r.bad == 0
        return out, r.ns

    def numpy_idiom():
        t = time.perf_counter_ns()
        res = np.add.reduceat(table[indices], offsets[:-1], axis=0)
        return res, time.perf_counter_ns() - t

    sides = {"cxlbench": ours, "numpy": numpy_idiom}
    try:
        import torch
        torch.set_num_threads(1)
        t_table = torch.from_numpy(table)           # the same placed memory, no copy
        t_idx, t_off = torch.from_numpy(indices), torch.from_numpy(offsets[:-1])

        def torch_bag():
            t = time.perf_counter_ns()
            res = torch.nn.functional.embedding_bag(t_idx, t_table, t_off, mode="sum")
            return res.numpy(), time.perf_counter_ns() - t
        sides["torch"] = torch_bag
    except ImportError:
        print("torch: not installed, left out")

    want = embedding.reference(raw, lay, indices, "sum")
    rates = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, side in sides.items():
            res, ns = side()
            if not np.allclose(res, want, rtol=1e-5, atol=1e-4):
                print(f"{name}: its bags differ from the reference")
                return 1
            rates[name].append(lay.lookups / ns * 1e3)
    med = {name: statistics.median(v) for name, v in rates.items()}
    for name, v in rates.items():
        print(f"{name:<9} {med[name]:8.2f} M lookups/s  (rounds: "
              f"{', '.join(f'{x:.2f}' for x in v)})")
    ok = True
    for name, target in (("numpy", 2.0), ("torch", 1.0)):
        if name in med:
            ratio = med["cxlbench"] / med[name]
            hit = ratio >= target
            ok &= hit
            print(f"cxlbench / {name}: {ratio:.2f} (target >= {target:g}) "
                  f"{'ok' if hit else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
