"""The ML workloads side by side with what an ML engineer would otherwise run, in one run
on one machine, at one thread and at every thread this process may use, on the same data
in the same placed memory; one table at the end, each ratio beside its target.

  embedding   cxlbench's embedding_bag kernel (widest ISA, the benchmark's default
              prefetch), fp32, fp16 and bf16 tables (--grid: dims 32-256, pooling 1-128,
              uniform and Zipf 0.6-1.2 as well)
              vs torch.nn.functional.embedding_bag (sum)   >= 1.05 (fp32), 1.00 (16-bit)
              vs numpy's np.add.reduceat(table[indices], offsets[:-1])       >= 2 (1 thread)
  update      the training step on the rows a batch looked up: cxlbench's grouping of the
              lookups by row (numpy, timed) and its C step, SGD and row-wise Adagrad
              vs torch's embedding_bag backward (sparse gradients) and SGD step  >= 1.10
              and Adagrad (torch has only the element-wise one, a float of state per
              element, not per row: other work, shown, not judged)
  optimizer   cxlbench's fused Adam step, fp32 and bf16 parameters with an fp32 master
              vs torch.optim.Adam(fused=True) (mixed: on the fp32 master, the bf16
              gradients widened first and the bf16 parameters copied out after,
              all timed, as a bf16 training loop does)                        >= 1.05
              (and its step alone, the same 28 bytes a parameter: shown, not judged)
              vs torch.optim.Adam(foreach=True), numpy's vectorised Adam      >= 1
              and as a share of this machine's triad bound (28 bytes a parameter at
              the GB/s of triad with non-temporal stores): target >= 85 %
  kvcache     cxlbench's paged decode (every block of every sequence, layer, K and V
              read through the block table each step)
              vs torch's index_select of the same blocks and a sum over them  >= 1
              (torch has no paged read: the gather copies the blocks first)
  checkpoint  cxlbench's snapshot copy of the state with its default store=auto (what
              a probe on these buffers picks: regular, non-temporal with a prefetch and
              page walk, or rep movsb), and each store kind alone (shown, not judged)
              vs libc's memcpy of the same bytes (split between the threads)  >= 1 (auto)
              vs torch.save of the same bytes to a file on tmpfs (/dev/shm)   >= 1 (auto)

The sides alternate for --rounds rounds, so a shared machine's drift hits each; each
side's figure is the median of its rounds, its spread the rounds' range. What would
measure the harness instead of the kernels is kept out: torch's OpenMP threads wait
passively (OMP_WAIT_POLICY=PASSIVE unless set), so none spins on the CPUs of the side
that runs after it; glibc keeps freed memory (no mmap, no trim), so a side that allocates
its output each call (torch) reuses pages already faulted in, as cxlbench's preallocated
outputs are; a side still taking page faults has them shown beside its spread. The state
under study is placed (--mem, --page); outputs, copies and scratch are ordinary memory.
Every side's result is checked against a reference. Without torch (pip install '.[peers]'), its rows
say so and are not counted. Exits 1 when a target is missed, 2 when a side's result is
wrong or a side failed (no verdict). Usage:

  python peers/compare_ml.py [all|embedding|update|optimizer|kvcache|checkpoint ...]
      [--threads 1 all] [--rounds 5] [--grid] [--isa avx2 avx512] [--mem local] [--page thp]

Its first line names the CPU (vendor, model, family) and the ISAs it runs; every
comparison runs in each vector ISA the CPU runs (AVX2 on an AVX-512 host too), each in a
process of its own with torch's FBGEMM and ATen pinned to the same ISA, so an AVX2
kernel meets torch's AVX2 code."""
from __future__ import annotations

import argparse
import ctypes
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from cxlbench import memory, native, tuning
from cxlbench.benchmarks import checkpoint as checkpoint_bench
from cxlbench.errors import CheckError
from cxlbench.workloads import checkpoint as checkpoint_workload
from cxlbench.workloads import embedding, kvcache, optimizer

class Wrong(Exception):
    """A side's result differs from the reference: exit 2, no verdict."""


WORKLOADS = ("embedding", "update", "optimizer", "kvcache", "checkpoint")
TRIAD_SHARE = 0.85          # the optimizer's target share of its triad bound
BAG_TARGET = {"fp32": 1.05, "fp16": 1.00, "bf16": 1.00}     # embedding bags over torch's
# torch's own kernels pinned to the ISA compared (FBGEMM's embedding bags, ATen's ops):
# each is read once, as torch loads, so each ISA is compared in a process of its own
TORCH_ISA_ENV = {"avx2": {"FBGEMM_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
                 "avx512": {"FBGEMM_ENABLE_INSTRUCTIONS": "AVX512",
                            "ATEN_CPU_CAPABILITY": "avx512"}}
ADAM_BYTES = 28             # a parameter's bytes read and written by a step (fp32 or mixed)


@dataclass
class Row:
    """One line of the closing table: cxlbench's figure against one peer's."""
    workload: str
    threads: int
    peer: str
    ours: float
    theirs: float | None     # None: the peer did not run (said why in note)
    unit: str
    target: float | None     # None: shown, not judged
    spread: str = ""
    note: str = ""

    @property
    def ratio(self) -> float | None:
        return None if self.theirs is None else self.ours / self.theirs

    @property
    def missed(self) -> bool:
        return self.target is not None and self.ratio is not None and self.ratio < self.target


class Ctx:
    """What every comparison shares: the CPUs, torch (or None), the options."""

    def __init__(self, args, torch):
        self.args, self.torch = args, torch
        self.allowed = sorted(os.sched_getaffinity(0))
        self.cpus = self.allowed[:1]
        self.isa = "auto"           # the kernels' variant: each of --isa in turn

    def use(self, n: int) -> None:
        """numpy, torch and the kernels on the first n CPUs."""
        self.cpus = self.allowed[:n]
        os.sched_setaffinity(0, self.cpus)
        if self.torch is not None:
            self.torch.set_num_threads(n)

    @property
    def threads(self) -> int:
        return len(self.cpus)

    def place(self, n: int, dtype) -> np.ndarray:
        return memory.array(n, dtype, mem=self.args.mem, page=self.args.page, cpus=self.cpus)


FAULTS_SHOWN = 64          # page faults a call from which a side's spread names them


def alternate(sides: dict, rounds: int, check, work: float) -> dict[str, tuple[float, str]]:
    """Each side in turn, `rounds` times: side() -> (result, ns); check(name, result)
    raises on a wrong one. Returns each side's median rate (work per second) and the
    rounds' range as a share of it (with its minor page faults a call, where many)."""
    rates = {name: [] for name in sides}
    faults = dict.fromkeys(sides, 0)
    for _ in range(rounds):
        for name, side in sides.items():
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            res, ns = side()
            faults[name] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
            check(name, res)
            rates[name].append(work / ns * 1e9)
    out = {}
    for name, v in rates.items():
        med, per_call = statistics.median(v), faults[name] // rounds
        out[name] = (med, f"{(min(v) / med - 1) * 100:+.0f}/{(max(v) / med - 1) * 100:+.0f}%"
                     + (f" ({per_call} faults)" if per_call >= FAULTS_SHOWN else ""))
    return out


def keep_freed_memory() -> None:
    """glibc: no allocation by mmap and no trim of the heap, so memory freed by one call is
    reused, already faulted in, by the next (torch allocates each output anew: 2048 page
    faults a call of 8 MiB otherwise, ~3 ms of a ~10 ms call here)."""
    libc = ctypes.CDLL(None)
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    libc.mallopt(M_MMAP_MAX, 0)
    libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)


def timed(fn):
    t = time.perf_counter_ns()
    res = fn()
    return res, time.perf_counter_ns() - t


def rows_for(label: str, ctx: Ctx, med: dict, unit: str, scale: float,
             peers: list[tuple[str, float | None, str]]) -> list[Row]:
    """cxlbench's median against each peer that ran; (peer, target, note)."""
    ours, spread = med["cxlbench"]
    out = []
    for peer, target, note in peers:
        theirs = med.get(peer)
        out.append(Row(label, ctx.threads, peer, ours * scale,
                       None if theirs is None else theirs[0] * scale, unit, target,
                       spread + ("" if theirs is None else f" vs {theirs[1]}"), note))
    return out


def torch_peer(ctx: Ctx, name: str, target: float | None, note: str = "") -> tuple:
    return (name, target, note if ctx.torch is not None else "torch not installed")


# ---- embedding bags -------------------------------------------------------------------
NP_DTYPES = {"fp32": np.float32, "fp16": np.float16, "bf16": np.uint16}


def embedding_shapes(args) -> list[tuple]:
    """(dim, dtype, pooling, dist, alpha): the three dtypes at dim 128, pooling 32, Zipf
    1.05; --grid adds the dims, poolings and distributions the issue names (fp32)."""
    out = [(128, t, 32, "zipf", 1.05) for t in ("fp32", "fp16", "bf16")]
    if args.grid:
        out += [(d, "fp32", 32, "zipf", 1.05) for d in (32, 64, 256)]
        out += [(128, "fp32", p, "zipf", 1.05) for p in (1, 8, 128)]
        out += [(128, "fp32", 32, "zipf", a) for a in (0.6, 1.2)]
        out += [(128, "fp32", 32, "uniform", 0.0)]
    return out


def compare_embedding(ctx: Ctx) -> list[Row]:
    out = []
    for dim, dtype, pooling, dist, alpha in embedding_shapes(ctx.args):
        probe = embedding.Layout((1,), (pooling,), dim, dtype, 1)
        rows = ctx.args.table_bytes // probe.row_bytes
        lay = embedding.Layout((rows,), (pooling,), dim, dtype, max(1, (1 << 19) // pooling))
        raw = ctx.place(lay.sizes()["table"], np.uint8)
        embedding.fill_table(raw, lay, 1)
        indices, offsets = embedding.make_indices(lay, {"dist": dist, "alpha": alpha, "seed": 1})
        bags = np.empty((lay.bags, dim), dtype=np.float32)
        isa = embedding.resolve_bag_isa(ctx.isa)
        # prefetch=auto and regs=auto as the benchmark resolves them: a probe, kept per CPU
        tuned = embedding.tune_bags(
            {"prefetch": "auto", "regs": "auto", "pool": "sum", "dist": dist, "alpha": alpha},
            lay, isa, ctx.cpus, raw.ctypes.data, f"{ctx.args.mem} {ctx.args.page}", indices,
            offsets, bags)
        prefetch, regs = tuned.settings["prefetch"], tuned.settings["regs"]
        label = (f"embedding {dtype} dim {dim} pool {pooling} "
                 f"{'uniform' if dist == 'uniform' else f'zipf {alpha:g}'}")
        print(f"{label}: {rows} rows ({lay.sizes()['table'] >> 20} MiB, verified "
              f"{memory.verify(raw).counts_text()}), {lay.bags} bags, isa {isa}, "
              f"{tuned.record()['chosen']} ({tuned.record()['source']}), "
              f"{ctx.threads} thread(s)")

        def ours():
            bags.fill(np.nan)       # untimed: a bag left unwritten cannot pass for the last
            r = native.embedding_bag(raw.ctypes.data, rows, lay.row_bytes, dim, dtype, "sum",
                                     indices, offsets, bags, isa, ctx.cpus, prefetch, None, 0,
                                     regs)
            if r.bad:
                raise Wrong(f"{label}: {r.bad} lookups named no row")
            return bags, r.ns

        sides = {"cxlbench": ours}
        table = raw.view(NP_DTYPES[dtype]).reshape(rows, -1)[:, :dim]
        if dtype == "fp32" and ctx.threads == 1:
            sides["numpy"] = lambda: timed(
                lambda: np.add.reduceat(table[indices], offsets[:-1], axis=0))
        torch = ctx.torch
        if torch is not None:
            t_table = torch.from_numpy(table)           # the same placed memory, no copy
            if dtype == "bf16":
                t_table = t_table.view(torch.bfloat16)
            t_idx, t_off = torch.from_numpy(indices), torch.from_numpy(offsets[:-1])
            sides["torch"] = lambda: timed(lambda: torch.nn.functional.embedding_bag(
                t_idx, t_table, t_off, mode="sum"))
        want = embedding.reference(raw, lay, indices, "sum")
        tol = 1e-5 if dtype == "fp32" else 1e-2         # torch rounds 16-bit bags to 16 bits

        def check(name, res):
            got = res if isinstance(res, np.ndarray) else res.float().numpy()
            if not np.allclose(got, want, rtol=tol, atol=tol * float(np.abs(want).max())):
                raise Wrong(f"{label}: {name}'s bags differ from the reference")
        med = alternate(sides, ctx.args.rounds, check, lay.lookups)
        peers = [torch_peer(ctx, "torch", BAG_TARGET[dtype])]
        if "numpy" in sides:
            peers.append(("numpy", 2.0, ""))
        out += rows_for(label, ctx, med, "M lookups/s", 1e-6, peers)
        del raw
    return out


# ---- the embedding training step -------------------------------------------------------
def compare_update(ctx: Ctx) -> list[Row]:
    dim, pooling, lr, eps = 128, 32, 0.01, embedding.EPS
    rows = ctx.args.table_bytes // (dim * 4)
    lay = embedding.Layout((rows,), (pooling,), dim, "fp32", (1 << 18) // pooling)
    raw = ctx.place(lay.sizes()["table"], np.uint8)
    embedding.fill_table(raw, lay, 1)
    weights = raw.view(np.float32).reshape(rows, dim)
    indices, offsets = embedding.make_indices(lay, {"dist": "zipf", "alpha": 1.05, "seed": 1})
    bags = np.empty((lay.bags, dim), dtype=np.float32)
    native.embedding_bag(raw.ctypes.data, rows, lay.row_bytes, dim, "fp32", "sum", indices,
                         offsets, bags, embedding.resolve_bag_isa(ctx.isa), ctx.cpus, 64)
    touched, starts, bag_of = embedding.group_by_row(indices, offsets)
    g = np.add.reduceat(bags[bag_of], starts[:-1], axis=0)     # each touched row's gradient
    before = weights[touched].copy()
    state = np.zeros(rows, dtype=np.float32)                    # row-wise Adagrad's
    print(f"embedding update: {rows} rows x {dim} fp32 ({lay.sizes()['table'] >> 20} MiB), "
          f"{lay.bags} bags of {pooling}, Zipf 1.05: {len(touched)} rows updated a step, "
          f"{ctx.threads} thread(s)")
    out = []
    for optim in ("sgd", "adagrad"):
        def reset():
            weights[touched] = before
            state[touched] = 0

        def ours():
            reset()

            def step():
                r, s, b = embedding.group_by_row(indices, offsets)
                native.embedding_update(raw.ctypes.data, lay.row_bytes, dim, optim, "sum", r,
                                        s, b, offsets, bags, state, lr, eps, ctx.cpus)
            return None, timed(step)[1]

        # what each side's step leaves in the touched rows, from numpy
        if optim == "sgd":
            want = {"cxlbench": before - np.float32(lr) * g}
            want["torch"] = want["cxlbench"]
        else:
            s = (g * g).sum(axis=1) / np.float32(dim)
            want = {"cxlbench": before - (np.float32(lr) / (np.sqrt(s) + np.float32(eps)))[:, None] * g,
                    "torch": before - np.float32(lr) * g / (np.sqrt(g * g) + np.float32(1e-10))}
        sides = {"cxlbench": ours}
        torch = ctx.torch
        if torch is not None:
            t_w = torch.from_numpy(weights)
            t_idx, t_off = torch.from_numpy(indices), torch.from_numpy(offsets[:-1])
            t_grad = torch.from_numpy(bags)

            def theirs():
                reset()
                w = torch.nn.Parameter(t_w)
                opt = (torch.optim.SGD([w], lr=lr) if optim == "sgd" else
                       torch.optim.Adagrad([w], lr=lr, eps=1e-10))
                res = torch.nn.functional.embedding_bag(t_idx, w, t_off, mode="sum",
                                                        sparse=True)
                t = time.perf_counter_ns()
                res.backward(t_grad)
                opt.step()
                return None, time.perf_counter_ns() - t
            sides["torch"] = theirs

        def check(name, _):
            w = want[name]
            if not np.allclose(weights[touched], w, rtol=1e-5,
                               atol=1e-6 * float(np.abs(w).max())):
                raise Wrong(f"update {optim}: {name}'s rows differ from numpy's step")
        med = alternate(sides, ctx.args.rounds, check, len(touched))
        # torch has no row-wise Adagrad: its element-wise one is shown, not judged
        peer = (torch_peer(ctx, "torch", 1.10) if optim == "sgd" else
                torch_peer(ctx, "torch", None, "element-wise Adagrad: other work, not judged"))
        out += rows_for(f"update {optim} dim {dim} pool {pooling} zipf 1.05", ctx, med,
                        "M rows/s", 1e-6, [peer])
    reset()
    return out


# ---- the optimizer step ------------------------------------------------------------------
def triad_bound(ctx: Ctx) -> float:
    """Parameters a second at this machine's triad bandwidth, ADAM_BYTES each: the
    catalogue's triad with non-temporal stores (its 24 bytes an element are all it moves;
    regular stores would read each written line first, which Adam's in-place writes do
    not), three 256 MiB arrays, the best of 3."""
    k = native.kernel("triad_nt")
    arrays = [ctx.place(256 << 20, np.uint8) for _ in range(3)]
    for a in arrays:
        a.fill(1)
    best = min(native.run_kernel(k, k.best_isa(), [a.ctypes.data for a in arrays], 256 << 20,
                                 1, ctx.cpus).ns for _ in range(3))
    gbs = 3 * (256 << 20) / best
    print(f"triad_nt: {gbs:.1f} GB/s on {ctx.threads} thread(s): {gbs * 1e3 / ADAM_BYTES:.0f} "
          f"M params/s at {ADAM_BYTES} B each")
    return gbs * 1e9 / ADAM_BYTES


def compare_optimizer(ctx: Ctx) -> list[Row]:
    """One Adam step (torch's defaults, weight decay 0) over the same placed state; before
    each side's step it is set back (untimed), after it a sample is checked."""
    n = ctx.args.params
    hyper = {"optim": "adam", "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
             "weight_decay": 0.0}
    bound = triad_bound(ctx)
    out = []
    for precision in ("fp32", "mixed"):
        wide = np.uint16 if precision == "mixed" else np.float32
        st = optimizer.State(ctx.place(n, wide), ctx.place(n, wide), ctx.place(n, np.float32),
                             ctx.place(n, np.float32),
                             ctx.place(n, np.float32) if precision == "mixed" else None)
        st.fill(np.random.default_rng(1))
        arrays = [a for a in (st.p, st.g, st.m, st.v, st.w) if a is not None]
        start = [a.copy() for a in arrays]
        idx = optimizer.sample(n, 1, np.random.default_rng(2))
        grads = optimizer.from_bf16(st.g[idx]) if st.mixed else st.g[idx]
        master = st.w if st.mixed else st.p
        want = optimizer.reference(master[idx].copy(), grads, st.m[idx].copy(),
                                   st.v[idx].copy(), hyper, 1)
        isa = native.kernel("triad").choose_isa(ctx.isa)
        label = f"adam {'fp32' if precision == 'fp32' else 'bf16 + fp32 master'} {n >> 20}M"
        print(f"{label}: {n} parameters (mem={ctx.args.mem} page={ctx.args.page}, verified "
              f"{memory.verify(st.m).counts_text()}), step 1, isa {isa}, {ctx.threads} thread(s)")

        def reset():
            for a, b in zip(arrays, start):
                np.copyto(a, b)

        def ours():
            reset()
            return None, native.adam(st.p, st.g, st.m, st.v, st.w, "adam", precision, isa,
                                     hyper["lr"], (hyper["beta1"], hyper["beta2"]),
                                     hyper["eps"], 0.0, 1, ctx.cpus)

        sides = {"cxlbench": ours}
        if precision == "fp32" and ctx.threads == 1:
            sides["numpy"] = numpy_adam(st, hyper, reset)
        torch = ctx.torch
        if torch is not None:
            for how in ("fused", "foreach"):
                if precision == "fp32" or how == "fused":
                    sides[f"torch-{how}"] = torch_adam(torch, st, hyper, reset, how)
            if st.mixed:
                sides["torch-fused step"] = torch_adam(torch, st, hyper, reset, "fused",
                                                       step_only=True)

        def check(name, _):
            for what, got, w in (("parameters", master[idx], want[0]), ("m", st.m[idx], want[1]),
                                 ("v", st.v[idx], want[2])):
                if not np.allclose(got, w, rtol=1e-5, atol=1e-6 * float(np.abs(w).max())):
                    raise Wrong(f"{label}: {name}'s {what} differ from the reference step")
            if st.mixed and name != "torch-fused step" and \
                    not np.array_equal(st.p[idx], optimizer.to_bf16(master[idx])):
                raise Wrong(f"{label}: {name}'s bf16 parameters are not the master's")
        med = alternate(sides, ctx.args.rounds, check, n)
        peers = [torch_peer(ctx, "torch-fused", 1.05, "bf16 gradients widened, parameters "
                            "copied out, timed" if st.mixed else "")]
        if st.mixed:
            peers.append(torch_peer(ctx, "torch-fused step", None, "its step alone on fp32 "
                                    "master and gradients (28 B, as cxlbench): not judged"))
        if "torch-foreach" in sides:
            peers.append(("torch-foreach", 1.0, ""))
        if "numpy" in sides:
            peers.append(("numpy", 1.0, ""))
        out += rows_for(label, ctx, med, "M params/s", 1e-6, peers)
        out.append(Row(label, ctx.threads, "triad bound", med["cxlbench"][0] * 1e-6,
                       bound * 1e-6, "M params/s", TRIAD_SHARE,
                       note=f"{ADAM_BYTES} B a parameter at triad_nt's GB/s"))
        del st, arrays, start
    return out


def numpy_adam(st, hyper, reset):
    f = np.float32
    p, g, m, v = st.p, st.g, st.m, st.v
    scratch = np.empty_like(m)
    b1, b2, eps = f(hyper["beta1"]), f(hyper["beta2"]), f(hyper["eps"])
    size = f(hyper["lr"] / (1 - hyper["beta1"]))            # step 1's bias corrections
    inv_bc2 = f(1 / np.sqrt(1 - hyper["beta2"]))

    def step():
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

    def side():
        reset()
        return None, timed(step)[1]
    return side


def torch_adam(torch, st, hyper, reset, how: str, step_only: bool = False):
    """torch.optim.Adam on the same memory; mixed: on the fp32 master, the bf16 gradients
    widened into its .grad and the bf16 parameters copied out after the step, all timed
    (step_only: the widening untimed, no copy out, the step alone timed)."""
    t = {k: torch.from_numpy(a) for k, a in (("p", st.p), ("g", st.g), ("m", st.m),
                                            ("v", st.v)) + ((("w", st.w),) if st.mixed else ())}
    if st.mixed:
        t["p"], t["g"] = t["p"].view(torch.bfloat16), t["g"].view(torch.bfloat16)
        wide = torch.empty(st.n, dtype=torch.float32)

    def side():
        reset()
        param = torch.nn.Parameter(t["w"] if st.mixed else t["p"])
        opt = torch.optim.Adam([param], lr=hyper["lr"], **{how: True})
        opt.state[param] = {"step": torch.tensor(0.0), "exp_avg": t["m"], "exp_avg_sq": t["v"]}
        if step_only:
            param.grad = wide.copy_(t["g"])
        start = time.perf_counter_ns()
        if st.mixed and not step_only:
            param.grad = wide.copy_(t["g"])
        elif not st.mixed:
            param.grad = t["g"]
        opt.step()
        if st.mixed and not step_only:
            t["p"].copy_(param.detach())
        return None, time.perf_counter_ns() - start
    return side


# ---- KV-cache decode ---------------------------------------------------------------------
def compare_kvcache(ctx: Ctx) -> list[Row]:
    """Llama-3-8B's KV shape at a quarter of its layers (8 of 32, fp16, 16-token blocks):
    8 sequences of 1024 tokens decoding 16 steps, blocks scattered; warm on both sides
    (the 272 MiB pool does not fit the caches anyway)."""
    params = {"op": "decode", "preset": "llama-3-8b", "scale": 0.25, "dtype": "fp16",
              "block": 16, "batch": 8, "seq_len": 1024, "steps": 16, "chunk_tokens": 256}
    lay = kvcache.layout(params)
    table = kvcache.block_table(lay, 1.0, 1)
    words = ctx.place(lay.sizes()["cache"] // 8, np.uint64)
    isa = native.driver("kvcache").choose_isa(ctx.isa)
    cache = kvcache.Cache(lay, table, (words.ctypes.data, words), None, isa, ctx.cpus,
                          cold=False)
    tokens = lay.batch * lay.steps
    print(f"kvcache decode: {lay.layers} layers, {lay.blocks} blocks of {lay.block_bytes >> 10} "
          f"KiB ({lay.sizes()['cache'] >> 20} MiB), {lay.batch} sequences of {lay.seq_len} "
          f"tokens, {lay.steps} steps, isa {isa}, {ctx.threads} thread(s)")

    def ours():
        r, _ = cache.once()         # checked inside against numpy's sums
        return None, r.ns

    sides = {"cxlbench": ours}
    torch = ctx.torch
    per_entry = lay.block * lay.words
    if torch is not None:
        pool = torch.from_numpy(words.view(np.int64)).view(lay.layers, 2, lay.blocks, per_entry)
        flat = torch.from_numpy(table.ravel())
        got = torch.empty(lay.layers, 2, lay.blocks, dtype=torch.int64)

        def theirs():
            t = time.perf_counter_ns()
            for _ in range(lay.steps):
                for layer in range(lay.layers):
                    for kv in range(2):
                        torch.sum(pool[layer, kv].index_select(0, flat), dim=1,
                                  out=got[layer, kv])
            return got, time.perf_counter_ns() - t
        sides["torch"] = theirs

    def check(name, res):
        if res is None:
            return
        view = words.reshape(lay.layers, 2, lay.blocks, per_entry)
        want = view[:, :, table.ravel()].sum(axis=-1, dtype=np.uint64)
        if not np.array_equal(res.numpy().view(np.uint64), want):
            raise Wrong(f"kvcache: {name}'s sums differ from numpy's over the same blocks")
    med = alternate(sides, ctx.args.rounds, check, tokens)
    return rows_for(f"kvcache decode llama-3-8b/4 fp16 {lay.batch}x{lay.seq_len}", ctx, med,
                    "k tok/s", 1e-3, [torch_peer(ctx, "torch", 1.0,
                                                 "index_select copies the blocks, then sums "
                                                 "them: 3x the bytes; no token appended")])


# ---- checkpoint copy ---------------------------------------------------------------------
def compare_checkpoint(ctx: Ctx) -> list[Row]:
    nbytes = ctx.args.checkpoint_bytes
    src, dst = ctx.place(nbytes // 8, np.uint64), ctx.place(nbytes // 8, np.uint64)
    src[:] = np.arange(nbytes // 8, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    isa = native.driver("checkpoint").choose_isa(ctx.isa)
    libc = ctypes.CDLL(None)
    libc.memcpy.restype = ctypes.c_void_p
    libc.memcpy.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    print(f"checkpoint: {nbytes >> 20} MiB (mem={ctx.args.mem} page={ctx.args.page}, verified "
          f"{memory.verify(src).counts_text()}), chunks of 1 MiB, isa {isa}, "
          f"{ctx.threads} thread(s)")

    # store=auto as the benchmark resolves it: a probe on these buffers, kept per CPU
    params = {"store": "auto", "persist": False, "chunk": 1 << 20}
    lay = checkpoint_workload.layout({**params, "size": nbytes, "preset": "custom",
                                      "dirty": 0.0})
    where = [f"{b}={ctx.args.mem} {ctx.args.page}" for b in ("src", "dst")]
    auto = checkpoint_bench.tune_store(params, lay, isa, ctx.cpus, src.ctypes.data,
                                       dst.ctypes.data, where, None)
    print(f"  store=auto: {auto.record()['chosen']} ({auto.record()['source']})")

    def ours(store, ahead=0, ways=1):
        def side():
            dst.fill(0)
            r = native.checkpoint(dst.ctypes.data, src.ctypes.data, nbytes, 1 << 20, store,
                                  isa, ctx.cpus, lines_ahead=ahead, ways=ways)
            return dst, r.ns
        return side

    def memcpy():
        dst.fill(0)
        n = ctx.threads
        part = -(-nbytes // n // 64) * 64
        spans = [(i * part, min(part, nbytes - i * part)) for i in range(n)]

        def copy(span):         # ctypes lets go of the GIL: the threads copy together
            libc.memcpy(dst.ctypes.data + span[0], src.ctypes.data + span[0], span[1])
        with ThreadPoolExecutor(n) as pool:
            t = time.perf_counter_ns()
            list(pool.map(copy, spans))
            return dst, time.perf_counter_ns() - t

    stores = ("regular", "nt") + (("rep",) if native.flush_supported("nt") else ())
    sides = {"cxlbench": ours(auto.settings["store"], auto.settings["prefetch"],
                              auto.settings["walk"]),
             **{f"cxlbench-{s}": ours(s) for s in stores}, "memcpy": memcpy}
    torch = ctx.torch
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    path = os.path.join(shm, f"cxlbench-compare-{os.getpid()}.pt")
    if torch is not None:
        t_src = torch.from_numpy(src)

        def save():
            t = time.perf_counter_ns()
            torch.save(t_src, path)
            ns = time.perf_counter_ns() - t
            return torch.load(path, mmap=True), ns
        sides["torch.save"] = save

    def check(name, res):
        got = res if isinstance(res, np.ndarray) else res.numpy()
        if not np.array_equal(got, src):
            raise Wrong(f"checkpoint: {name}'s copy differs from the source")
    try:
        med = alternate(sides, ctx.args.rounds, check, nbytes)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    label = f"checkpoint {nbytes >> 20} MiB"
    out = []
    for ours_name, store, target in (("cxlbench", f"auto ({auto.record()['chosen']})", 1.0),
                                     *((f"cxlbench-{s}", s, None) for s in stores)):
        m = {"cxlbench": med[ours_name], **{k: v for k, v in med.items()
                                           if not k.startswith("cxlbench")}}
        out += rows_for(f"{label} store={store}", ctx, m, "GB/s", 1e-9,
                        [("memcpy", target, "libc's, split between the threads"),
                         torch_peer(ctx, "torch.save", target, f"to {shm}")])
    return out


# ---- the table ---------------------------------------------------------------------------
def print_table(rows: list[Row]) -> None:
    head = ("workload", "thr", "cxlbench", "peer", "peer's", "ratio", "target", "", "spread")
    cells = [head]
    for r in rows:
        fmt = (lambda x: f"{x:.3g}") if r.unit != "M params/s" else (lambda x: f"{x:.0f}")
        cells.append((r.workload, str(r.threads), f"{fmt(r.ours)} {r.unit}", r.peer,
                      "-" if r.theirs is None else fmt(r.theirs),
                      "-" if r.ratio is None else f"{r.ratio:.2f}",
                      "-" if r.target is None else f">= {r.target:g}",
                      "not run" if r.theirs is None else "MISSED" if r.missed else
                      "ok" if r.target is not None else "",
                      r.spread + (f"; {r.note}" if r.note else "")))
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    for c in cells:
        print("  ".join(x.ljust(w) for x, w in zip(c, widths)).rstrip())


def without_isa(argv: list[str]) -> list[str]:
    """argv less --isa and the ISAs that follow it."""
    out, skipping = [], False
    for a in argv:
        if a == "--isa":
            skipping = True
        elif not (skipping and a in TORCH_ISA_ENV):
            skipping = False
            out.append(a)
    return out


def each_isa(argv: list[str], isas: list[str]) -> int:
    """This script again for each ISA, torch pinned to it too (TORCH_ISA_ENV): a kernel's
    AVX2 variant against torch's AVX2 code. Exits as the worst of them did (2, then 1)."""
    codes = []
    for isa in isas:
        print(f"\n=== isa {isa} ===", flush=True)
        codes.append(subprocess.run([sys.executable, __file__, *without_isa(argv), "--isa", isa],
                                    env={**os.environ, **TORCH_ISA_ENV[isa]}).returncode)
    return 2 if 2 in codes else max(codes)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workloads", nargs="*", metavar="WORKLOAD",
                    help=f"all (the default), or some of: {', '.join(WORKLOADS)}")
    ap.add_argument("--threads", nargs="+", default=["1", "all"],
                    help="thread counts to compare at (all: every CPU this process may use)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--grid", action="store_true",
                    help="embedding: dims 32-256, pooling 1-128, uniform, Zipf 0.6-1.2 too")
    ap.add_argument("--table-bytes", type=int, default=2 << 30)
    ap.add_argument("--params", type=int, default=64 << 20)
    ap.add_argument("--checkpoint-bytes", type=int, default=1 << 30)
    ap.add_argument("--isa", nargs="+", choices=("avx2", "avx512"),
                    help="the kernels' variants compared (default: every vector ISA this CPU "
                         "runs, AVX2 on AVX-512 hosts too)")
    ap.add_argument("--mem", default="local")
    ap.add_argument("--page", default="thp")
    args = ap.parse_args(argv)
    unknown = set(args.workloads) - {"all", *WORKLOADS}
    if unknown:
        ap.error(f"no workload {', '.join(sorted(unknown))} (all, {', '.join(WORKLOADS)})")
    # torch's OpenMP workers spin for a while after each call (libgomp's default), on
    # the CPUs the next side runs on: that side ran at half speed at 2 threads here. Set
    # before torch loads, they sleep instead; torch's own rates did not change.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import torch
        version = f"torch {torch.__version__}"
    except ImportError:
        torch, version = None, "torch: not installed (pip install '.[peers]'): its rows say so"
    # torch's Adagrad warns on every sparse step that it skips checks it need not make
    warnings.filterwarnings("ignore", message="Sparse invariant checks")
    keep_freed_memory()
    ctx = Ctx(args, torch)
    counts = sorted({len(ctx.allowed) if t == "all" else int(t) for t in args.threads})
    if not counts or min(counts) < 1 or max(counts) > len(ctx.allowed):
        ap.error(f"--threads: between 1 and {len(ctx.allowed)} (or all)")
    chosen = WORKLOADS if not args.workloads or "all" in args.workloads else args.workloads
    compare = {"embedding": compare_embedding, "update": compare_update,
               "optimizer": compare_optimizer, "kvcache": compare_kvcache,
               "checkpoint": compare_checkpoint}
    runs = [i for i in ("avx2", "avx512") if native.isa_supported(i) and
            native.embedding_isa_supported(i)]
    isas = args.isa or runs or ["scalar"]
    if set(isas) - set(runs or ["scalar"]):
        ap.error(f"--isa: this CPU runs {', '.join(runs) or 'no vector ISA'}")
    ctx.isa = isas[0]
    pinned = TORCH_ISA_ENV.get(ctx.isa, {})
    alike = all(os.environ.get(k) == v for k, v in pinned.items())
    if len(isas) > 1 or not alike:      # a process each, torch pinned to its ISA
        print(f"CPU: {tuning.cpu_identity()}; runs {', '.join(runs) or 'scalar only'}; "
              f"compared: {', '.join(isas)}", flush=True)
        return each_isa(argv if argv is not None else sys.argv[1:], isas)
    print(f"{version}; numpy {np.__version__}; CPUs {ctx.allowed}; isa {ctx.isa}"
          + (", torch's kernels pinned to it too" if pinned else ""))
    rows = []
    try:
        for n in counts:
            ctx.use(n)
            for name in chosen:
                rows += compare[name](ctx)
    except (Wrong, CheckError) as e:
        print(f"wrong: {e}", file=sys.stderr)
        return 2
    except Exception:       # no verdict either: not exit 1, which says a target was missed
        traceback.print_exc()
        return 2
    finally:
        ctx.use(len(ctx.allowed))
    print()
    print_table(rows)
    missed = [r for r in rows if r.missed]
    unrun = [r for r in rows if r.theirs is None]
    print(f"\n{len(rows) - len(unrun)} comparisons, {len(missed)} missed"
          + (f"; {len(unrun)} not run ({unrun[0].note})" if unrun else ""))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
