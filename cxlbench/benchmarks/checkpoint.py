"""Checkpoint copies: a snapshot of model and optimizer state (bf16 weights, an fp32 master
copy and two fp32 Adam moments: 14 bytes per parameter) copied from one placement (`src`)
to another (`dst`) in chunks, with regular or non-temporal stores; per chunk optionally
clwb and sfence (the persistence path of memory that survives a crash) and a write to a
file, fsync'd at the end (the path to storage). Or a differential snapshot: only the dirty
rows of an embedding table, gathered and packed. With `interfere`, the snapshot also runs
while a training-like step runs on the other CPUs (its arrays in `step`), and both
slowdowns are reported, each against its own run alone in the same repetition.

Before every repetition (untimed) dst is overwritten and both src and dst are evicted from
every cache, so the copy finds both sides in memory, as a snapshot of state that training
streamed past does. Every repetition's snapshot is checked: a position-weighted checksum
of dst (and of the file, read back) computed in numpy equals the source's."""
from __future__ import annotations

import math
import os
import shutil
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ..workloads import lookups
from ..errors import CheckError, UserError
from ..memory import native
from ..options import Option, pick
from . import optimizer
from .common import Measurement, check_placement, measure, place, resolve_cpus

NAME = "checkpoint"
TITLE = "Checkpoint copies"
DESCRIPTION = ("checkpoint snapshots of model and optimizer state, or of an embedding "
               "table's dirty rows, to another placement or a file (GB/s, ms, slowdowns "
               "beside a training step)")
BUFFERS = ("src", "dst", "step")      # step: the background's arrays (interfere)
STORES = ("regular", "nt")            # CXB_CKPT_* in native/cxlbench.h, in value order
BACKGROUNDS = ("none", "triad", "adam")
BYTES_PER_PARAM = 14    # bf16 weights 2, fp32 master copy 4, fp32 Adam moments 2 x 4
PRESETS = optimizer.PRESETS     # parameter counts of the models: the optimizer's
CHUNK = 1 << 20         # words per numpy step in checksums
MASK = (1 << 64) - 1
WEIGHTS = np.arange(1, CHUNK + 1, dtype=np.uint64)
PREFETCH = 8            # rows a differential snapshot prefetches ahead
TRIAD_SCALAR = 3        # triad's s: a = b + 3 c, exact in fp64 on small integers
MIN_ALONE_STEPS = 3     # steps timed alone in each repetition, at least
MIN_INSIDE_STEPS = 2    # steps wholly inside the snapshot for a step_slowdown

OPTIONS = {
    "preset": Option("preset", "choice", "custom", "state of a real model (parameters x 14 "
                     "bytes: bf16 weights, fp32 master and moments); custom: size",
                     choices=("custom", *PRESETS)),
    "scale": Option("scale", "float", 1.0, "a preset's parameters times this, to fit the "
                    "machine", min=1e-9, max=1.0),
    **pick("size", size=256 << 20),
    "dirty": Option("dirty", "float", 0.0, "0: snapshot the whole state; else a "
                    "differential snapshot of this fraction of an embedding table's rows "
                    "(1-10 % is typical: 0.01-0.1)", min=0.0, max=1.0),
    "rows": Option("rows", "int", 1 << 20, "rows of the embedding table (dirty > 0)", min=1,
                   max=1 << 40),
    "dim": Option("dim", "int", 128, "fp32 elements per row (dirty > 0): a multiple of 16, "
                  "rows of whole 64-byte lines", min=16, max=65536),
    "dist": Option("dist", "choice", "zipf", "which rows are dirty: the first distinct rows "
                   "of a uniform or Zipf(alpha) lookup stream (the rows training touched)",
                   choices=("uniform", "zipf")),
    "alpha": Option("alpha", "float", 1.05, "Zipf exponent", min=0.0, max=10.0),
    "store": Option("store", "choice", "regular", "the snapshot's stores: regular, or "
                    "non-temporal (nt)", choices=STORES, expand={"all": STORES}),
    "chunk": Option("chunk", "size", 1 << 20, "bytes copied between flushes and file "
                    "writes (differential: whole rows, at least one)", "bytes", min=64,
                    multiple=64),
    "persist": Option("persist", "bool", False, "after each chunk, clwb its lines (regular "
                      "stores) and sfence: the persistence path"),
    "path": Option("path", "path", "", "a directory: each chunk is also written to a file "
                   "there, fsync'd at the end and removed afterwards"),
    "interfere": Option("interfere", "choice", "none", "a training-like step run on the "
                        "CPUs the snapshot leaves: triad (STREAM's a = b + s c) or adam "
                        "(the optimizer's mixed-precision step)", choices=BACKGROUNDS),
    "step_size": Option("step_size", "size", 16 << 20, "bytes of each array of the step "
                        "(triad: 3 arrays; adam: its bf16 parameters, beside which "
                        "gradients, moments and master copy take 7x more)", "bytes",
                        min=4096, multiple=64),
    "seed": Option("seed", "int", 1, "seed of the dirty rows", min=0),
    **pick("threads", "cpus", "mem", "page", "isa", "repeat", "warmup", "tolerance",
           "timeout"),
}


@dataclass(frozen=True)
class Layout:
    """What one case snapshots: `src` bytes of state, or a table of rows x row_bytes of
    which `dirty` rows are copied."""
    src: int
    dst: int
    rows: int = 0           # differential: the table's rows and the dirty ones
    row_bytes: int = 0
    dirty: int = 0
    params: int = 0         # a preset's parameters, scaled

    def sizes(self, step: int = 0, background: str = "none") -> dict[str, int]:
        out = {"src": self.src, "dst": self.dst}
        if background != "none":
            out["step"] = step_bytes(background, step)
        return out


def step_bytes(background: str, size: int) -> int:
    """The step buffer: triad's three arrays; adam's bf16 parameters and gradients, fp32
    master copy and moments (size / 2 parameters: 2 + 2 + 4 + 4 + 4 bytes each), laid
    out as the optimizer's params, grads and states buffers one after another."""
    if background == "triad":
        return 3 * size
    return sum(optimizer.sizes(size // 2, "mixed").values())


def layout(params: dict) -> Layout:
    if params["dirty"] > 0:
        row_bytes = params["dim"] * 4
        dirty = max(1, round(params["rows"] * params["dirty"]))
        return Layout(params["rows"] * row_bytes, dirty * row_bytes, params["rows"],
                      row_bytes, dirty)
    if params["preset"] == "custom":
        return Layout(params["size"], params["size"])
    count = max(1, math.ceil(PRESETS[params["preset"]] * params["scale"]))
    nbytes = -(-count * BYTES_PER_PARAM // 64) * 64         # whole lines
    return Layout(nbytes, nbytes, params=count)


def dirty_rows(rows: int, k: int, dist: str, alpha: float, seed: int) -> np.ndarray:
    """k distinct rows, sorted (a checkpointer walks its dirty bitmap in row order): a
    uniform sample, or the first k distinct rows of a Zipf lookup stream (the rows a
    skewed training batch touches first), the stream lengthened until it names k rows."""
    rng = np.random.default_rng(seed)
    if dist == "uniform" or k == rows:
        return np.sort(rng.choice(rows, k, replace=False)).astype(np.int64)
    count = 4 * k
    while True:
        stream = lookups.zipf(rows, count, alpha, rng)
        distinct, first = np.unique(stream, return_index=True)
        if distinct.size >= k:
            return np.sort(distinct[np.argsort(first, kind="stable")[:k]]).astype(np.int64)
        if count >= 64 * rows:
            raise UserError(f"checkpoint: a Zipf({alpha}) stream of {count} lookups names "
                            f"only {distinct.size} of the {k} dirty rows asked: lower alpha "
                            "or dirty, or use dist=uniform")
        count *= 4


def checksum(words: np.ndarray, base: int = 0) -> tuple[int, int]:
    """(sum of the uint64 words, sum of each times its position + 1) mod 2^64, the words
    starting at position `base`: a word changed, or two swapped, changes it."""
    s1 = s2 = 0
    for lo in range(0, len(words), CHUNK):
        w = words[lo:lo + CHUNK]
        a = int(w.sum(dtype=np.uint64))
        b = int((w * WEIGHTS[:len(w)]).sum(dtype=np.uint64))
        s1 = (s1 + a) & MASK
        s2 = (s2 + (base + lo) * a + b) & MASK
    return s1, s2


def add(x: tuple[int, int], y: tuple[int, int]) -> tuple[int, int]:
    return (x[0] + y[0]) & MASK, (x[1] + y[1]) & MASK


def source_checksum(src_words: np.ndarray, lay: Layout,
                    rows: np.ndarray | None) -> tuple[int, int]:
    """What the snapshot must hold: src, or its dirty rows packed in order, gathered by
    numpy a block of rows at a time."""
    if rows is None:
        return checksum(src_words[:lay.src // 8])
    per_row = lay.row_bytes // 8
    table = src_words[:lay.rows * per_row].reshape(lay.rows, per_row)
    step = max(1, CHUNK // per_row)
    total = (0, 0)
    for lo in range(0, len(rows), step):
        total = add(total, checksum(table[rows[lo:lo + step]].ravel(), lo * per_row))
    return total


def file_checksum(fd: int, nbytes: int) -> tuple[int, int]:
    """The file read back from its start, a chunk at a time."""
    total, buf = (0, 0), np.empty(CHUNK, dtype=np.uint64)
    view, done = memoryview(buf).cast("B"), 0
    while done < nbytes:
        want = min(CHUNK * 8, nbytes - done)
        got = os.preadv(fd, [view[:want]], done)
        if got <= 0:
            raise CheckError(f"checkpoint: the file ends at {done} of {nbytes} bytes")
        if got % 8:
            got -= got % 8
        total = add(total, checksum(buf[:got // 8], done // 8))
        done += got
    if os.fstat(fd).st_size != nbytes:
        raise CheckError(f"checkpoint: the file holds {os.fstat(fd).st_size} bytes, the "
                         f"snapshot {nbytes}")
    return total


def check_snapshot(got: tuple[int, int], want: tuple[int, int], what: str,
                   bad: int = 0) -> None:
    if bad:
        raise CheckError(f"checkpoint: {bad} dirty rows named no row of the table")
    if got != want:
        raise CheckError(f"checkpoint: the checksum of {what} ({got[0]:#x}, {got[1]:#x}) "
                         f"differs from the source's ({want[0]:#x}, {want[1]:#x})")


def split_cpus(params: dict) -> tuple[list[int], list[int]]:
    """The snapshot's CPUs (threads of cpus), and the step's: the rest of cpus."""
    mine = resolve_cpus(params)
    every = resolve_cpus({**params, "threads": "all"})
    return mine, [c for c in every if c not in mine]


# ---- the background step ---------------------------------------------------------------

class Triad:
    """STREAM's triad a = b + 3 c over three arrays of the step buffer, on the step's CPUs:
    the memory traffic of a training step that streams (an optimizer's is 2 reads to 1
    write as well). Its output is checked after the case."""

    def __init__(self, buf, size: int, cpus):
        self.k, self.cpus, self.size = native.kernel("triad"), cpus, size
        self.isa = self.k.best_isa()
        doubles = buf.array(np.float64)[:3 * size // 8].reshape(3, -1)
        self.a, self.b, self.c = doubles
        rng = np.random.default_rng(7)
        self.b[:] = rng.integers(0, 1 << 20, len(self.b))
        self.c[:] = rng.integers(0, 1 << 20, len(self.c))
        self.a.fill(np.nan)
        self.addrs = [buf.addr, buf.addr + size, buf.addr + 2 * size]

    def step(self) -> None:
        native.run_kernel(self.k, self.isa, self.addrs, self.size, 1, self.cpus,
                          value=TRIAD_SCALAR)

    def check(self) -> None:
        for lo in range(0, len(self.a), CHUNK):
            hi = lo + CHUNK
            if not np.array_equal(self.a[lo:hi], self.b[lo:hi] + TRIAD_SCALAR * self.c[lo:hi]):
                raise CheckError("checkpoint: the background triad's output differs from "
                                 "numpy's a = b + 3 c")


class _Part:
    """A part of the step buffer standing in for one of the optimizer's placed buffers
    (what optimizer.State.of reads: array(dtype))."""

    def __init__(self, raw: np.ndarray, offset: int, nbytes: int):
        self.raw = raw[offset:offset + nbytes]

    def array(self, dtype) -> np.ndarray:
        return self.raw.view(dtype)


class Adam:
    """The optimizer's mixed-precision Adam step (bf16 parameters and gradients, fp32
    master copy and moments) over size / 2 parameters, on the step's CPUs: its arrays
    laid out and filled as the optimizer benchmark's (optimizer.State). Its output is
    checked to stay finite (the optimizer's own tests check its values)."""

    def __init__(self, buf, size: int, cpus):
        n = size // 2
        self.cpus, self.n, self.t = cpus, n, 0
        raw, parts, offset = buf.array(np.uint8), [], 0
        for nbytes in optimizer.sizes(n, "mixed").values():     # params, grads, states
            parts.append(_Part(raw, offset, nbytes))
            offset += nbytes
        self.state = optimizer.State.of(parts, n, "mixed")
        self.state.fill(np.random.default_rng(7))
        self.isa = native.driver("adam").best_isa()

    def step(self) -> None:
        self.t += 1
        st = self.state
        native.adam(st.p, st.g, st.m, st.v, st.w, "adam", "mixed", self.isa, 1e-3,
                    (0.9, 0.999), 1e-8, 0.0, self.t, self.cpus)

    def check(self) -> None:
        if not (np.isfinite(self.state.w).all() and np.isfinite(self.state.v).all()):
            raise CheckError("checkpoint: the background Adam step left non-finite state")


def background(name: str, buf, size: int, cpus):
    return Triad(buf, size, cpus) if name == "triad" else Adam(buf, size, cpus)


def run_steps(step, until: threading.Event | None = None, least: int = 0, span: int = 0,
              started: threading.Event | None = None) -> list[tuple[int, int]]:
    """Steps back to back, each bracketed by the clock: until `until` is set, or at least
    `least` of them over at least `span` ns. The C calls release the GIL, so a thread
    running this overlaps the snapshot's C call in the main thread."""
    spans = []
    while (until.is_set() is False if until is not None else
           len(spans) < least or spans[-1][1] - spans[0][0] < span):
        t0 = native.now_ns()
        step()
        spans.append((t0, native.now_ns()))
        if started is not None:
            started.set()
    return spans


def steps_in(spans: list[tuple[int, int]], t0: int, t1: int) -> float:
    """Steps done inside [t0, t1]: a step partly inside counts the share of it that is,
    as if it progressed evenly."""
    done = 0.0
    for s, e in spans:
        overlap = min(e, t1) - max(s, t0)
        if overlap > 0 and e > s:
            done += overlap / (e - s)
    return done


@contextmanager
def pinned(cpus):
    """The calling thread on `cpus` (none: left as it is) for the while."""
    if not cpus:
        yield
        return
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)


def together(snapshot, step, cpus=None, step_cpus=None) \
        -> tuple[native.CheckpointResult, float | None, float, int]:
    """The snapshot while the step runs in a thread of its own: (the snapshot's result,
    the step's time during it in ns, the steps done during it, the steps wholly inside
    it). The step has finished one step first, so it is in full flight when the snapshot
    starts. The step's time is the mean of the steps wholly inside the snapshot where
    there are MIN_INSIDE_STEPS or more; else None: a step partly outside the snapshot ran
    partly alone, and its time would understate the slowdown. With `cpus` and
    `step_cpus`, the calling thread and the step's Python thread are pinned to them for
    the while: the C calls start pinned threads of their own, but the Python between
    steps and the callers' waits would otherwise land on the other side's CPUs (on a
    small machine, time-sliced against the snapshot's copy)."""
    stop, started, out, errors = threading.Event(), threading.Event(), [], []

    def loop():
        try:
            if step_cpus:
                os.sched_setaffinity(0, step_cpus)      # this thread only
            out.extend(run_steps(step, until=stop, started=started))
        except BaseException as e:      # re-raised in the caller
            errors.append(e)
            started.set()

    thread = threading.Thread(target=loop, name="checkpoint-step", daemon=True)
    thread.start()
    started.wait()
    try:
        with pinned(cpus):
            r = snapshot() if not errors else None
    finally:
        stop.set()
        thread.join()
    if errors:
        raise errors[0]
    done = steps_in(out, r.t0, r.t1)
    if done <= 0:
        raise CheckError("checkpoint: no background step ran during the snapshot")
    inside = [e - s for s, e in out if s >= r.t0 and e <= r.t1]
    busy = sum(inside) / len(inside) if len(inside) >= MIN_INSIDE_STEPS else None
    return r, busy, done, len(inside)


# ---- the benchmark ---------------------------------------------------------------------

def skip(params: dict, topology) -> str | None:
    if params["persist"] and params["store"] == "regular" and not native.flush_supported("clwb"):
        return "persist with regular stores writes lines back with clwb, which this CPU lacks"
    if params["store"] == "nt" and not native.flush_supported("nt"):
        return "non-temporal stores need x86-64 with SSE2"
    if params["interfere"] != "none":
        mine, rest = split_cpus(params)
        if not rest:
            return (f"interfere={params['interfere']} runs the step on the CPUs the "
                    f"snapshot leaves, and its {len(mine)} threads take every CPU given")
    return None


def _check_path(path: str, nbytes: int) -> None:
    if not os.path.isdir(path):
        raise UserError(f"checkpoint: path={path} is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise UserError(f"checkpoint: cannot write in path={path}")
    free = shutil.disk_usage(path).free
    if free < nbytes:
        raise UserError(f"checkpoint: path={path} has {free} bytes free, the snapshot needs "
                        f"{nbytes}")


def unused(params: dict) -> dict[str, str]:
    """The options this case ignores, each with why: the registry refuses them set away
    from their defaults (each would only make a second case measure the same thing), and
    progress lines leave them out (size, for a preset or a differential snapshot)."""
    out = {}
    if params["dirty"] > 0:
        out.update(dict.fromkeys(("preset", "scale", "size"), (
            f"dirty={params['dirty']:g} snapshots rows x dim of an embedding table, not a "
            "preset's state or size bytes")))
        if params["dist"] == "uniform":
            out["alpha"] = "dist=uniform (alpha is Zipf's)"
    else:
        out.update(dict.fromkeys(("rows", "dim", "dist", "alpha", "seed"),
                                 "dirty=0 snapshots the whole state, not a table's rows"))
        if params["preset"] == "custom":
            out["scale"] = "scale shrinks a preset's state; custom state takes size"
        else:
            out["size"] = f"preset={params['preset']} sets the size itself (scale shrinks it)"
    if params["interfere"] == "none":
        out["step_size"] = "interfere=none runs no step"
    return out


def check(params: dict, topology) -> None:
    """What cannot run here. (Options the case ignores, set, the registry refuses first:
    see unused.)"""
    if params["dirty"] > 0 and params["dim"] % 16:
        raise UserError(f"checkpoint: dim={params['dim']} makes rows of {params['dim'] * 4} "
                        "bytes: rows of whole 64-byte lines need a multiple of 16")
    native.driver("checkpoint").choose_isa(params["isa"])
    mine, rest = split_cpus(params)
    lay = layout(params)
    if params["path"]:
        _check_path(params["path"], lay.dst)
    claimed: dict = {}
    sizes = lay.sizes(params["step_size"], params["interfere"])
    check_placement(params, mine, topology, {k: sizes[k] for k in ("src", "dst")}, claimed)
    if "step" in sizes and rest:
        check_placement(params, rest, topology, {"step": sizes["step"]}, claimed)


def buffers_of(params: dict) -> tuple[str, ...]:
    return BUFFERS if params.get("interfere", "none") != "none" else BUFFERS[:2]


def make_cold(src, src_bytes: int, dst, dst_bytes: int, value: int) -> bool:
    """Untimed, before every snapshot: every word of dst overwritten (nothing of the last
    snapshot can pass for this one), then src and dst evicted from every cache, so the
    copy reads the state from memory and writes a snapshot that is not cached (the last
    check read all of dst, and a table's dirty rows or a state smaller than the LLC
    would otherwise still be cached from the last repetition). False where this CPU
    cannot evict lines (not x86): the copy may then find either side cached."""
    dst.array(np.uint64)[:dst_bytes // 8].fill(value)
    src_cold = native.evict(src.addr, src_bytes)
    dst_cold = native.evict(dst.addr, dst_bytes)
    return src_cold and dst_cold


def run(params: dict) -> Measurement:
    lay = layout(params)
    isa = native.driver("checkpoint").choose_isa(params["isa"])
    cpus, rest = split_cpus(params)
    name = params["interfere"]
    sizes = lay.sizes(params["step_size"], name)
    src, dst = place(params, cpus, {k: sizes[k] for k in ("src", "dst")})
    buffers = [src, dst]
    if name != "none":
        (step_buf,) = place(params, rest, {"step": sizes["step"]})
        buffers.append(step_buf)
        bg = background(name, step_buf, params["step_size"], rest)
    src.alloc.fill_index(cpus)          # word i holds i: every row and chunk differs
    rows = (dirty_rows(lay.rows, lay.dirty, params["dist"], params["alpha"], params["seed"])
            if lay.dirty else None)
    want = source_checksum(src.array(np.uint64), lay, rows)
    dst_words = dst.array(np.uint64)[:lay.dst // 8]
    fd, file_path = -1, None
    if params["path"]:
        fd, file_path = tempfile.mkstemp(prefix="cxlbench-checkpoint-", suffix=".bin",
                                         dir=params["path"])
    rep, turns, cold = 0, 0, []
    beside: list[tuple[float, int, float, float]] = []  # steps in, wholly in, ns, step ns

    def snapshot() -> native.CheckpointResult:
        nonlocal rep
        rep += 1
        if fd >= 0:
            os.ftruncate(fd, 0)         # a new checkpoint file each time: blocks allocated
        cold.append(make_cold(src, lay.src, dst, lay.dst, rep << 40))
        r = native.checkpoint(dst.addr, src.addr, lay.src, params["chunk"], params["store"],
                              isa, cpus, rows=rows, src_rows=lay.rows,
                              row_bytes=lay.row_bytes, persist=params["persist"], fd=fd,
                              prefetch=PREFETCH)
        check_snapshot(checksum(dst_words), want, "dst", r.bad)
        if fd >= 0:
            check_snapshot(file_checksum(fd, lay.dst), want, "the file read back")
        return r

    def once() -> dict[str, float]:
        nonlocal turns
        out = {}
        if name == "none":
            r = snapshot()
        else:
            # Alone and together, their order alternated so drift falls on both sides.
            turns += 1
            first_alone = turns % 2 == 1
            if not first_alone:
                busy, step_busy, done, inside = together(snapshot, bg.step, cpus, rest)
            r = snapshot()
            with pinned(rest):          # where its thread runs beside the snapshot
                spans = run_steps(bg.step, least=MIN_ALONE_STEPS, span=r.ns)
            step_alone = float(np.median([e - s for s, e in spans]))
            if first_alone:
                busy, step_busy, done, inside = together(snapshot, bg.step, cpus, rest)
            bg.check()
            beside.append((done, inside, busy.ns, step_alone))
            out = {"bandwidth_shared": lay.dst / busy.ns, "snapshot_slowdown": busy.ns / r.ns,
                   "step_time": step_alone / 1e6}
            if step_busy is not None:
                out["step_slowdown"] = step_busy / step_alone
        return {"bandwidth": lay.dst / r.ns, "time": r.ns / 1e6, **out}

    units = {"bandwidth": "GB/s", "time": "ms"}
    if name != "none":
        units.update(bandwidth_shared="GB/s", snapshot_slowdown="x", step_slowdown="x",
                     step_time="ms")
    m = Measurement(kernel="checkpoint" + ("+dirty" if lay.dirty else ""), isa=isa,
                    cpus=cpus, units=units,
                    info={"bytes": lay.dst, "state_bytes": lay.src, "threads": len(cpus),
                          "chunks": chunks(lay, params["chunk"]),
                          **({"preset": params["preset"], "scale": params["scale"],
                              "parameters": lay.params} if lay.params else {}),
                          **({"rows": lay.rows, "row_bytes": lay.row_bytes,
                              "dirty_rows": lay.dirty} if lay.dirty else {}),
                          **({"step_cpus": rest, "step": name} if name != "none" else {}),
                          **({"filesystem": filesystem(params["path"])} if fd >= 0 else {})})
    try:
        measure(m, params, buffers, once)
        m.info["evicted"] = all(cold)   # src and dst evicted before every snapshot
        if beside:
            slowdown_or_why(m, beside[-len(m.reps):] if m.reps else beside)
        return m
    finally:
        if fd >= 0:
            os.close(fd)
            os.unlink(file_path)


def chunks(lay: Layout, chunk: int) -> int:
    """The chunks cxb_checkpoint copies: of `chunk` bytes, or of whole dirty rows (as
    many as fit in a chunk, at least one)."""
    if lay.dirty:
        per_chunk = max(1, chunk // lay.row_bytes)
        return -(-lay.dirty // per_chunk)
    return -(-lay.dst // chunk)


def slowdown_or_why(m: Measurement, beside: list[tuple[float, int, float, float]]) -> None:
    """Whether the case reports step_slowdown: only where every repetition had at least
    MIN_INSIDE_STEPS steps wholly inside the snapshot. Where a step is about as long as
    the snapshot or longer, its time beside it is mostly time alone, and any slowdown
    would understate it: step_slowdown is then left out of every repetition (so the case
    is not summarised from its longest snapshots only) and info says why."""
    m.info["steps_beside_min"] = round(min(b[0] for b in beside), 2)
    m.info["steps_inside_min"] = min(b[1] for b in beside)
    if m.info["steps_inside_min"] >= MIN_INSIDE_STEPS:
        return
    for rep in m.reps:
        rep.pop("step_slowdown", None)
    m.units.pop("step_slowdown", None)
    snap = float(np.median([b[2] for b in beside])) / 1e6
    step = float(np.median([b[3] for b in beside])) / 1e6
    m.info["step_slowdown_left_out"] = (
        f"fewer than {MIN_INSIDE_STEPS} steps ran wholly inside the snapshot in some "
        f"repetition (at least {m.info['steps_inside_min']}; a step takes {step:.3g} ms "
        f"alone, the snapshot {snap:.3g} ms beside it): a step partly outside ran partly "
        "alone and would understate the slowdown. Lengthen the snapshot (size, rows, "
        "dirty) or shorten step_size (a step that fits in the cache measures little)")


def filesystem(path: str) -> str:
    """The type of the filesystem holding path (the longest mount point above it): tmpfs
    makes fsync free, so it is recorded."""
    best, kind = "", "unknown"
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2:
                    point = parts[1].replace("\\040", " ")
                    if (path == point or path.startswith(point.rstrip("/") + "/")) \
                            and len(point) > len(best):
                        best, kind = point, parts[2]
    except OSError:
        pass
    return kind
