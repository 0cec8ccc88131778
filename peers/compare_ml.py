"""The ML workloads side by side with what an ML engineer would otherwise run, in one run
on one machine, one thread each, the same data in the same placed memory.

  embedding  cxlbench's embedding_bag kernel (widest ISA, the benchmark's default prefetch)
             vs numpy's idiom: np.add.reduceat(table[indices], offsets[:-1])   >= 2x
             vs torch.nn.functional.embedding_bag, where torch is installed    >= 1x
  optimizer  cxlbench's fused Adam step (widest ISA, fp32)
             vs numpy's vectorised Adam (in-place ufuncs, one scratch array)   >= 1x
             vs torch.optim.Adam, foreach and fused, where torch is installed  >= 1x

The sides alternate for --rounds rounds so a shared machine's drift hits each; each
side's figure is the median of its rounds. Every side's result is checked against the
reference. Exits 1 when a target is missed. Usage:
python peers/compare_ml.py [embedding|optimizer|all] [--rows 4194304] [--dim 128]
[--batch 2048] [--pooling 32] [--alpha 1.05] [--params 67108864] [--mem local]
[--page thp] [--rounds 5]"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from cxlbench import memory, native
from cxlbench.workloads import embedding, optimizer

PREFETCH = embedding.OPTIONS["prefetch"].default


def alternate(sides: dict, rounds: int, check, work: float, unit: str) -> dict[str, float]:
    """Each side in turn, `rounds` times: side() -> (result, ns); check(name, result)
    raises on a wrong one. Prints and returns each side's median rate (work per us)."""
    rates = {name: [] for name in sides}
    for _ in range(rounds):
        for name, side in sides.items():
            res, ns = side()
            check(name, res)
            rates[name].append(work / ns * 1e3)
    med = {name: statistics.median(v) for name, v in rates.items()}
    for name, v in rates.items():
        print(f"{name:<16} {med[name]:8.2f} {unit}  (rounds: {', '.join(f'{x:.2f}' for x in v)})")
    return med


def verdict(med: dict[str, float], targets) -> bool:
    ok = True
    for name, target in targets:
        if name in med:
            ratio = med["cxlbench"] / med[name]
            ok &= ratio >= target
            print(f"cxlbench / {name}: {ratio:.2f} (target >= {target:g}) "
                  f"{'ok' if ratio >= target else 'MISSED'}")
    return ok


def torch_or_none():
    try:
        import torch
    except ImportError:
        print("torch: not installed, left out")
        return None
    torch.set_num_threads(1)
    return torch


def compare_embedding(args, cpu) -> bool:
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
                                 args.dtype, "sum", indices, offsets, out, isa, cpu, PREFETCH)
        assert r.bad == 0
        return out, r.ns

    def numpy_idiom():
        t = time.perf_counter_ns()
        res = np.add.reduceat(table[indices], offsets[:-1], axis=0)
        return res, time.perf_counter_ns() - t

    sides = {"cxlbench": ours, "numpy": numpy_idiom}
    torch = torch_or_none()
    if torch is not None:
        t_table = torch.from_numpy(table)           # the same placed memory, no copy
        t_idx, t_off = torch.from_numpy(indices), torch.from_numpy(offsets[:-1])

        def torch_bag():
            t = time.perf_counter_ns()
            res = torch.nn.functional.embedding_bag(t_idx, t_table, t_off, mode="sum")
            return res.numpy(), time.perf_counter_ns() - t
        sides["torch"] = torch_bag

    want = embedding.reference(raw, lay, indices, "sum")

    def check(name, res):
        if not np.allclose(res, want, rtol=1e-5, atol=1e-4):
            raise SystemExit(f"{name}: its bags differ from the reference")
    med = alternate(sides, args.rounds, check, lay.lookups, "M lookups/s")
    return verdict(med, (("numpy", 2.0), ("torch", 1.0)))


def compare_optimizer(args, cpu) -> bool:
    """One Adam step (fp32, torch's defaults and weight decay 0) over the same placed
    parameters, gradients and moments; before each side's step they are set back to the
    same values (untimed), after it a sample is checked against numpy's reference."""
    n, f = args.params, np.float32
    hyper = {"optim": "adam", "precision": "fp32", "lr": 1e-3, "beta1": 0.9, "beta2": 0.999,
             "eps": 1e-8, "weight_decay": 0.0}
    p, g, m, v = (memory.array(n, np.float32, mem=args.mem, page=args.page, cpus=cpu)
                  for _ in range(4))
    optimizer.State(p, g, m, v).fill(np.random.default_rng(1))
    start = [a.copy() for a in (p, g, m, v)]
    idx = optimizer.sample(n, 1, np.random.default_rng(2))
    want = optimizer.reference(*(a[idx] for a in start), hyper, 1)
    isa = native.kernel("triad").best_isa()
    print(f"{n} fp32 parameters ({n * 16 >> 20} MiB of p, g, m, v; mem={args.mem} "
          f"page={args.page}, verified {memory.verify(p).counts_text()}), Adam step 1, "
          f"1 thread on CPU {cpu[0]}, isa {isa}")

    def reset():
        for a, b in zip((p, g, m, v), start):
            np.copyto(a, b)

    def ours():
        reset()
        ns = native.adam(p, g, m, v, None, "adam", "fp32", isa, hyper["lr"],
                         (hyper["beta1"], hyper["beta2"]), hyper["eps"], 0.0, 1, cpu)
        return None, ns

    scratch = np.empty(n, dtype=np.float32)
    b1, b2, eps = f(hyper["beta1"]), f(hyper["beta2"]), f(hyper["eps"])
    size = f(hyper["lr"] / (1 - hyper["beta1"]))            # step 1's bias corrections
    inv_bc2 = f(1 / np.sqrt(1 - hyper["beta2"]))

    def numpy_adam():
        reset()
        t = time.perf_counter_ns()
        np.multiply(m, b1, out=m)
        np.multiply(g, f(1) - b1, out=scratch)
        np.add(m, scratch, out=m)
        np.multiply(v, b2, out=v)
        np.multiply(g, g, out=scratch)
        np.multiply(scratch, f(1) - b2, out=scratch)
        np.add(v, scratch, out=v)
        np.sqrt(v, out=scratch)
        np.multiply(scratch, inv_bc2, out=scratch)
        np.add(scratch, eps, out=scratch)
        np.divide(m, scratch, out=scratch)
        np.multiply(scratch, size, out=scratch)
        np.subtract(p, scratch, out=p)
        return None, time.perf_counter_ns() - t

    sides = {"cxlbench": ours, "numpy": numpy_adam}
    torch = torch_or_none()
    if torch is not None:
        tensors = [torch.from_numpy(a) for a in (p, g, m, v)]    # the same placed memory

        def torch_adam(**how):
            def side():
                reset()
                param = torch.nn.Parameter(tensors[0], requires_grad=True)
                param.grad = tensors[1]
                opt = torch.optim.Adam([param], lr=1e-3, **how)
                opt.state[param] = {"step": torch.tensor(0.0), "exp_avg": tensors[2],
                                    "exp_avg_sq": tensors[3]}
                t = time.perf_counter_ns()
                opt.step()
                return None, time.perf_counter_ns() - t
            return side
        sides["torch-foreach"] = torch_adam(foreach=True)
        sides["torch-fused"] = torch_adam(fused=True)

    def check(name, _):
        for label, got, w in (("parameters", p[idx], want[0]), ("m", m[idx], want[1]),
                              ("v", v[idx], want[2])):
            if not np.allclose(got, w, rtol=1e-5, atol=1e-6 * float(np.abs(w).max())):
                raise SystemExit(f"{name}: its {label} differ from the reference step")
    med = alternate(sides, args.rounds, check, n, "M params/s")
    return verdict(med, (("numpy", 1.0), ("torch-foreach", 1.0), ("torch-fused", 1.0)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload", nargs="?", default="all",
                    choices=("embedding", "optimizer", "all"))
    ap.add_argument("--rows", type=int, default=4 << 20)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--pooling", type=int, default=32)
    ap.add_argument("--alpha", type=float, default=1.05)
    ap.add_argument("--dtype", default="fp32", choices=("fp32",))   # what numpy gathers as is
    ap.add_argument("--params", type=int, default=64 << 20)
    ap.add_argument("--mem", default="local")
    ap.add_argument("--page", default="thp")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    cpu = [sorted(os.sched_getaffinity(0))[0]]
    os.sched_setaffinity(0, cpu)            # numpy and torch on the kernels' one CPU
    ok = True
    for name, compare in (("embedding", compare_embedding), ("optimizer", compare_optimizer)):
        if args.workload in (name, "all"):
            print(f"== {name}")
            ok &= compare(args, cpu)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
