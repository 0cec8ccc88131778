"""Checkpoint snapshots: model and optimizer state (bf16 weights, an fp32 master copy and
two fp32 Adam moments: 14 bytes per parameter), or only the dirty rows of an embedding
table gathered and packed, copied to another placement or a file. Its option table, the
layout of what a case snapshots, which rows are dirty (drawn, or updated by the embedding
workload's training steps), the position-weighted checksum a snapshot is checked with
(the source's, dst's, the file's read back), dst overwritten and both sides evicted
before a snapshot, and the training-like steps that run beside one (STREAM's triad, the
optimizer's mixed-precision Adam). The checkpoint benchmark runs it."""
from __future__ import annotations

import functools
import math
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np

from ..errors import CheckError, UserError
from ..memory import native
from ..options import Option, pick
from . import embedding, lookups, optimizer
from .epochs import Demand

NAME = "checkpoint"

STORES = ("regular", "nt", "rep")     # CXB_CKPT_* in native/cxlbench.h, in value order
BACKGROUNDS = ("none", "triad", "adam")
BYTES_PER_PARAM = 14    # bf16 weights 2, fp32 master copy 4, fp32 Adam moments 2 x 4
PRESETS = optimizer.PRESETS     # parameter counts of the models: the optimizer's
CHUNK = 1 << 20         # words per numpy step in checksums
MASK = (1 << 64) - 1
WEIGHTS = np.arange(1, CHUNK + 1, dtype=np.uint64)
TRIAD_SCALAR = 3        # triad's s: a = b + 3 c, exact in fp64 on small integers
MIN_DONE_STEPS = 1.0    # a step's worth of work done during the snapshot, for a step_slowdown
MAX_REUSE = 64          # lookups a table row drawn at most before dirty rows are refused
# dist=trained: the embedding benchmark's training step at its defaults (batch bags of
# pooling lookups, summed, sgd), on the checkpointed table. Its lr divided by the batch:
# the gradient of the batch's mean loss, as training takes it. The sum's would move a hot
# row by its thousands of lookups times lr a step, and diverge within a few steps.
TRAIN = {name: embedding.OPTIONS[name].default
         for name in ("batch", "pooling", "pool", "prefetch", "lr")}
TRAIN.update(train="sgd", lr=TRAIN["lr"] / TRAIN["batch"])

# The workload's own options; the benchmark adds where and how it runs.
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
                   "of a uniform or Zipf(alpha) lookup stream (the rows training touched); "
                   "trained: the rows real training steps updated (the embedding benchmark's "
                   f"forward and sgd step on batches of {TRAIN['batch']} bags x "
                   f"{TRAIN['pooling']} Zipf(alpha) lookups, until they reach dirty x rows: "
                   "the whole last batch's, so a few more)",
                   choices=("uniform", "zipf", "trained")),
    "alpha": Option("alpha", "float", 1.05, "Zipf exponent", min=0.0, max=10.0),
    "store": Option("store", "choice", "auto", "the snapshot's stores: regular, "
                    "non-temporal (nt), or rep movsb (rep, x86-64); auto: the fastest of "
                    "them (nt with a prefetch and page walk too) by a short probe on this "
                    "machine, kept in the cache", choices=("auto", *STORES),
                    expand={"all": STORES}),
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
    "seed": Option("seed", "int", 1, "seed of the dirty rows (dist=trained: and of the "
                   "table's values)", min=0),
}


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
    asked: int = 0          # the dirty rows asked (dist=trained: dirty may be a few more)

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
        asked = dirty = max(1, round(params["rows"] * params["dirty"]))
        if params["dist"] == "trained":     # whole batches' rows
            dirty = len(dirty_rows(params["rows"], asked, "trained", params["alpha"],
                                   params["seed"]))
        return Layout(params["rows"] * row_bytes, dirty * row_bytes, params["rows"],
                      row_bytes, dirty, asked=asked)
    if params["preset"] == "custom":
        return Layout(params["size"], params["size"])
    count = max(1, math.ceil(PRESETS[params["preset"]] * params["scale"]))
    nbytes = -(-count * BYTES_PER_PARAM // 64) * 64         # whole lines
    return Layout(nbytes, nbytes, params=count)


def chunks(lay: Layout, chunk: int) -> int:
    """The chunks cxb_checkpoint copies: of `chunk` bytes, or of whole dirty rows (as
    many as fit in a chunk, at least one)."""
    if lay.dirty:
        per_chunk = max(1, chunk // lay.row_bytes)
        return -(-lay.dirty // per_chunk)
    return -(-lay.dst // chunk)


def dirty_rows(rows: int, k: int, dist: str, alpha: float, seed: int) -> np.ndarray:
    """k distinct rows, sorted (a checkpointer walks its dirty bitmap in row order): a
    uniform sample, or the first k distinct rows of a Zipf lookup stream (the rows a
    skewed training batch touches first), the stream lengthened until it names k rows;
    or (trained) every row the training steps of trained_lookups update, k or a few more."""
    if dist == "trained":
        return np.unique(trained_lookups(rows, k, alpha, seed))
    rng = np.random.default_rng(seed)
    if dist == "uniform" or k == rows:
        return np.sort(rng.choice(rows, k, replace=False)).astype(np.int64)
    stream, first = _naming(rows, k, lambda count: lookups.zipf(rows, count, alpha, rng),
                            lambda count: f"a Zipf({alpha}) stream of {count} lookups")
    return np.sort(stream[first[:k]]).astype(np.int64)


def _naming(rows: int, k: int, draw, what) -> tuple[np.ndarray, np.ndarray]:
    """A lookup stream, draw(count), lengthened 4x at a time until it names k distinct
    rows (at most MAX_REUSE lookups a row, else refused, what(lookups) saying of what):
    the stream, and where it first looks up each row it names, in stream order."""
    count = 4 * k
    while True:
        stream = draw(count)
        first = np.sort(np.unique(stream, return_index=True)[1])
        if first.size >= k:
            return stream, first
        if count >= MAX_REUSE * rows:
            raise UserError(f"checkpoint: {what(len(stream))} names only {first.size} of "
                            f"the {k} dirty rows asked: lower alpha or dirty, or use "
                            "dist=uniform")
        count *= 4


def training_layout(rows: int, dim: int, batches: int = 1) -> embedding.Layout:
    """dist=trained's table as the embedding workload lays one out: fp32, one table."""
    return embedding.Layout((rows,), (TRAIN["pooling"],), dim, "fp32",
                            batches * TRAIN["batch"], TRAIN["train"])


@functools.lru_cache(maxsize=16)    # layout (in check and in run) and run draw it once
def trained_lookups(rows: int, k: int, alpha: float, seed: int) -> np.ndarray:
    """The lookups of dist=trained's training steps, batch after batch (read-only): drawn
    as the embedding workload draws a table's (make_indices, Zipf(alpha) scattered by a
    seeded hash) in one stream, so a hot row stays hot from batch to batch, and cut after
    the batch that brings the rows they name to k."""
    per = TRAIN["batch"] * TRAIN["pooling"]
    source = {"dist": "zipf", "alpha": alpha, "seed": seed}
    stream, first = _naming(
        rows, k, lambda count: embedding.make_indices(
            training_layout(rows, 16, -(-count // per)), source)[0],
        lambda count: (f"embedding training on {count // per} batches of {TRAIN['batch']} "
                       f"bags x {TRAIN['pooling']} Zipf({alpha}) lookups"))
    out = stream[:(first[k - 1] // per + 1) * per].copy()
    out.flags.writeable = False
    return out


def train(table, lay: Layout, stream: np.ndarray, seed: int, cpus) -> None:
    """dist=trained's setup, untimed: the table filled as the embedding workload fills one
    (fp32 in [-1, 1); the checksum's index words read as fp32 are zeros and denormals, and
    NaNs past 16 GiB), then on each batch of the stream that workload's forward and sgd
    step, each checked against numpy as it checks them (check_output, Trainer)."""
    per, dim = TRAIN["batch"] * TRAIN["pooling"], lay.row_bytes // 4
    elay = training_layout(lay.rows, dim)
    raw = table.array(np.uint8)
    embedding.fill_table(raw, elay, seed)
    isa = embedding.resolve_bag_isa("auto")
    offsets = np.arange(0, per + 1, TRAIN["pooling"], dtype=np.int64)
    out = np.empty((TRAIN["batch"], dim), dtype=np.float32)
    space = np.empty(3 * per + 1, dtype=np.int64)      # the lookups grouped by row
    for lo in range(0, len(stream), per):
        idx = stream[lo:lo + per]
        r = native.embedding_bag(table.addr, lay.rows, lay.row_bytes, dim, "fp32",
                                 TRAIN["pool"], idx, offsets, out, isa, cpus,
                                 embedding.prefetch_rows(TRAIN["prefetch"], lay.row_bytes))
        embedding.check_output(out, embedding.reference(raw, elay, idx, TRAIN["pool"]),
                               elay, r.bad)
        embedding.Trainer(elay, TRAIN, table, idx, offsets, out, space, None).step(cpus)


def dirty_from(params: dict, lay: Layout) -> str:
    """Where a differential snapshot's rows came from, for the case's info."""
    alpha = params["alpha"]
    if params["dist"] == "uniform":
        return "a uniform sample of the table's rows"
    if params["dist"] == "zipf":
        return f"the first distinct rows of a Zipf({alpha:g}) lookup stream"
    steps = len(trained_lookups(lay.rows, lay.asked, alpha, params["seed"])) // (
        TRAIN["batch"] * TRAIN["pooling"])
    return (f"embedding training: {steps} sgd steps of {TRAIN['batch']} bags x "
            f"{TRAIN['pooling']} lookups, Zipf({alpha:g}), updating {lay.dirty} rows "
            f"({lay.asked} asked)")


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
    laid out and filled as the optimizer workload's (optimizer.State). Its output is
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
    starts. The step's time is the snapshot's time over the steps done during it, those
    partly inside counted by their share (its rate during the overlap: a 16 ms step
    beside a 74 ms snapshot, 1.9 steps done, took 39 ms), where at least MIN_DONE_STEPS
    were done; else None: a step mostly outside the snapshot ran mostly alone, and its
    rate would understate the slowdown. With `cpus` and
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
    inside = sum(1 for s, e in out if s >= r.t0 and e <= r.t1)
    busy = r.ns / done if done >= MIN_DONE_STEPS else None
    return r, busy, done, inside


# ---- the tiering engines' epochs ---------------------------------------------------------

def copy_demand(nbytes: int, nt: bool) -> Demand:
    """A whole snapshot as the tier model charges it, from memory to memory: every byte
    read and written once, regular stores pulling each destination line in first (as the
    copy kernel's traffic counts it)."""
    return Demand(units=nbytes, read=nbytes * (1 if nt else 2), write=nbytes, nt=nt)


class Epochs:
    """Checkpoint staging as the tiering engines drive it: one whole snapshot an epoch,
    the state (`src`, on the fast node) copied in chunks into a staging buffer (`dst`, the
    tiered one), as a checkpointer stages a snapshot before writing it out. Every line of
    dst is written once a snapshot, so its pages are all alike: a share says how much of
    the staging area sits on the slow node."""
    TIERED = "dst"
    BUFFERS = ("dst", "src")    # the tiered buffer first: the engines move buffers[0]
    UNIT = "bytes"
    RATE = ("GB/s", 1e9)        # what throughput is reported in: unit, units a second each
    # The options a tiering case takes, as checkpoint.<name>: 64 MiB snapshots, copied in
    # the benchmark's default chunks.
    OPTIONS = {
        "size": OPTIONS["size"].but(default=64 << 20, help="bytes of each snapshot"),
        # the epochs charge a snapshot's traffic by its store kind, known before it runs
        "store": OPTIONS["store"].but(default="regular", choices=STORES, help=(
            "the snapshot's stores: regular, non-temporal (nt), or rep movsb (rep, x86-64)")),
    }

    def __init__(self, own: dict, seed: int, epochs: int, phase: str):
        if phase != "none":
            raise UserError(f"checkpoint: phase={phase} moves a hot set, and a snapshot "
                            "writes every line of dst alike: there is none (use phase=none)")
        own = {**{name: opt.default for name, opt in OPTIONS.items()},
               **{name: opt.default for name, opt in self.OPTIONS.items()}, **own}
        self.lay = layout({**own, "dirty": 0.0, "preset": "custom"})    # src and dst: size
        self.store, self.chunk, self.epochs = own["store"], own["chunk"], epochs

    @classmethod
    def unused(cls, own: dict) -> dict[str, str]:
        return {}

    def sizes(self) -> dict[str, int]:
        return {"dst": self.lay.dst, "src": self.lay.src}

    def _lines(self) -> int:
        return -(-self.lay.dst // optimizer.LINE)

    def epoch_bytes(self) -> int:
        """Bytes a snapshot moves: src read and dst written, line by line, and with regular
        stores dst's lines read first (write-allocate), as the copy's traffic counts it."""
        return optimizer.LINE * self._lines() * (2 if self.store == "nt" else 3)

    def units(self) -> int:
        """Bytes a snapshot copies."""
        return self.lay.dst

    def waits(self, counts: np.ndarray) -> int:
        """Misses waited: one a line of dst."""
        return self._lines()

    def counts(self, epoch: int, pages: int, page: int) -> np.ndarray:
        """Each dst page's accesses in a snapshot: its lines, each written once (src is
        not tiered: its reads fall on no page counted here)."""
        return optimizer.lines_per_page(0, self.lay.dst, pages, page)

    def demand(self, epoch: int, page: int) -> Demand:
        """A snapshot as the calibrated model charges it (the checkpoint benchmark's demand):
        src read, dst written (and read first, with regular stores). Per dst page the bytes
        it moves; the rest of the traffic, src's reads, is on no tiered page."""
        per_line = optimizer.LINE * (1 if self.store == "nt" else 2)
        c = self.counts(epoch, -(-self.lay.dst // page), page)
        return replace(copy_demand(self.lay.dst, self.store == "nt"),
                       stream_pages=c * float(per_line))

    def choose_isa(self, asked: str) -> str:
        if self.store == "nt" and not native.flush_supported("nt"):
            raise UserError("checkpoint.store=nt: non-temporal stores need x86-64 with SSE2")
        if self.store == "rep" and not native.flush_supported("nt"):     # x86-64 alike
            raise UserError("checkpoint.store=rep: rep movsb is an x86-64 instruction")
        return native.driver("checkpoint").choose_isa(asked)

    def prepare(self, buffers, isa: str, cpus: list[int]) -> None:
        """src filled with its words' indices (every chunk differs) and its checksum taken
        once: what every snapshot must hold."""
        self.dst, self.src = buffers
        self.isa, self.cpus, self.rep = isa, list(cpus), 0
        self.src.alloc.fill_index(self.cpus)
        self.want = source_checksum(self.src.array(np.uint64), self.lay, None)
        self.dst_words = self.dst.array(np.uint64)[:self.lay.dst // 8]

    def run(self, epoch: int) -> int:
        """One snapshot by the C kernel, dst overwritten and both sides evicted first (as the
        benchmark does), timed there, dst's checksum checked against src's: ns."""
        self.rep += 1
        make_cold(self.src, self.lay.src, self.dst, self.lay.dst, self.rep << 40)
        r = native.checkpoint(self.dst.addr, self.src.addr, self.lay.src, self.chunk,
                              self.store, self.isa, self.cpus)
        check_snapshot(checksum(self.dst_words), self.want, "dst", r.bad)
        return r.ns
