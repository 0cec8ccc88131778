"""Checkpoint copies: a snapshot of model and optimizer state (bf16 weights, an fp32 master
copy and two fp32 Adam moments: 14 bytes per parameter) copied from one placement (`src`)
to another (`dst`) in chunks, with regular or non-temporal stores; per chunk optionally
clwb and sfence (the persistence path of memory that survives a crash) and a write to a
file, fsync'd at the end (the path to storage). Or a differential snapshot: only the dirty
rows of an embedding table, gathered and packed (dist=trained: the rows the embedding
benchmark's training steps updated on the table, run untimed first). With `interfere`,
the snapshot also runs while a training-like step runs on the other CPUs (its arrays in
`step`), and both slowdowns are reported, each against its own run alone in the same
repetition.

Before every repetition (untimed) dst is overwritten and both src and dst are evicted from
every cache, so the copy finds both sides in memory, as a snapshot of state that training
streamed past does. Every repetition's snapshot is checked: a position-weighted checksum
of dst (and of the file, read back) computed in numpy equals the source's."""
from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

from .. import tuning
from ..errors import UserError
from ..memory import native
from ..options import pick
from . import bandwidth
from ..workloads import checkpoint as workload
from ..workloads.checkpoint import (MIN_DONE_STEPS, background, check_snapshot, checksum,
                                    chunks, dirty_from, dirty_rows, file_checksum, filesystem,
                                    layout, make_cold, pinned, run_steps, source_checksum,
                                    together, train, trained_lookups)
from .common import workload_seconds, Measurement, check_placement, measure, place, predict, resolve_cpus

NAME = "checkpoint"
TITLE = "Checkpoint copies"
DESCRIPTION = ("checkpoint snapshots of model and optimizer state, or of an embedding "
               "table's dirty rows, to another placement or a file (GB/s, ms, slowdowns "
               "beside a training step)")
BUFFERS = ("src", "dst", "step")      # step: the background's arrays (interfere)
PREFETCH = 8            # rows a differential snapshot prefetches ahead
MIN_ALONE_STEPS = 3     # steps timed alone in each repetition, at least
OPTIONS = {**workload.OPTIONS, **pick("threads", "cpus", "mem", "page", "isa", "repeat",
                                         "warmup", "tolerance", "timeout")}
unused = workload.unused


def split_cpus(params: dict) -> tuple[list[int], list[int]]:
    """The snapshot's CPUs (threads of cpus), and the step's: the rest of cpus."""
    mine = resolve_cpus(params)
    every = resolve_cpus({**params, "threads": "all"})
    return mine, [c for c in every if c not in mine]


def skip(params: dict, topology) -> str | None:
    if params["persist"] and params["store"] in ("regular", "rep") and \
            not native.flush_supported("clwb"):
        return (f"persist with {'rep movsb' if params['store'] == 'rep' else 'regular stores'}"
                " writes lines back with clwb, which this CPU lacks")
    if params["store"] in ("nt", "rep") and not native.flush_supported("nt"):
        return ("non-temporal stores need x86-64 with SSE2" if params["store"] == "nt" else
                "rep movsb is an x86-64 instruction")
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


def validate(params: dict, topology) -> None:
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


def estimate(params: dict, figures) -> float:
    """Seconds of the case's work (common.workload_seconds): source and destination
    placed and the source filled, then each repetition's snapshot (the source read, the
    destination written) and its checksum (read again)."""
    lay = layout(params)
    sizes = lay.sizes(params["step_size"], params["interfere"])
    probe = 0.0
    if params["store"] == "auto":   # every candidate, every round, on up to PROBE_BYTES
        n = len(store_candidates(params, not params["dirty"]))
        probe = n * tuning.ROUNDS * 2 * min(lay.dst, bandwidth.PROBE_BYTES)
    reps = params["warmup"] + params["repeat"]
    return workload_seconds(params, figures, "src", sum(sizes.values()),
                            lay.src + 2 * lay.dst + probe / reps)


def store_candidates(params: dict, whole: bool) -> list[dict]:
    """What store=auto tries, the plainest first: regular stores, non-temporal ones (a
    whole snapshot's also with the bandwidth kernels' prefetches and page walks), and rep
    movsb; those this CPU lacks left out (x86-64 has NT stores and rep movsb alike; with
    persist, regular stores and rep movsb need clwb). A store set by hand is the one."""
    if params["store"] != "auto":
        return [{"store": params["store"], "prefetch": 0, "walk": 1}]
    x86 = native.flush_supported("nt")
    writeback = not params["persist"] or native.flush_supported("clwb")
    walks = [(p, w) for p in bandwidth.PREFETCHES for w in bandwidth.WALKS] if whole \
        else [(0, 1)]
    return ([{"store": "regular", "prefetch": 0, "walk": 1}] if writeback else []) + \
        ([{"store": "nt", "prefetch": p, "walk": w} for p, w in walks] if x86 else []) + \
        ([{"store": "rep", "prefetch": 0, "walk": 1}] if x86 and writeback else [])


def tune_store(params: dict, lay, isa: str, cpus, src: int, dst: int, where: list[str],
               rows) -> tuning.Choice:
    """The fastest store on this case's own buffers (addresses src and dst, placed as
    `where` says), threads and chunks: the first PROBE_BYTES of a whole snapshot, or its
    first rows (kept per CPU, kind of snapshot, placement and size class). No file is
    written: what is chosen is the copy."""
    whole = rows is None
    probe_rows = None if whole else rows[:max(1, bandwidth.PROBE_BYTES // lay.row_bytes)]
    nbytes = min(lay.src, bandwidth.PROBE_BYTES) if whole else len(probe_rows) * lay.row_bytes

    def rate(c: dict) -> float:
        r = native.checkpoint(dst, src, nbytes if whole else lay.src,
                              params["chunk"], c["store"], isa, cpus, rows=probe_rows,
                              src_rows=lay.rows, row_bytes=lay.row_bytes,
                              persist=params["persist"], prefetch=PREFETCH,
                              lines_ahead=c["prefetch"], ways=c["walk"])
        return nbytes / r.ns
    key = {"snapshot": "whole" if whole else f"rows of {lay.row_bytes} B", "isa": isa,
           "threads": len(cpus), "chunk": params["chunk"], "persist": params["persist"],
           "size_class": tuning.size_class(nbytes), "buffers": where}
    return tuning.choose("checkpoint", key, store_candidates(params, whole), rate, "GB/s")


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
    rows = (dirty_rows(lay.rows, lay.asked, params["dist"], params["alpha"], params["seed"])
            if lay.dirty else None)
    if lay.dirty and params["dist"] == "trained":   # the rows its steps update
        train(src, lay, trained_lookups(lay.rows, lay.asked, params["alpha"], params["seed"]),
              params["seed"], cpus)
    else:
        src.alloc.fill_index(cpus)      # word i holds i: every row and chunk differs
    choice = tune_store(params, lay, isa, cpus, src.addr, dst.addr,
                        tuning.placed((src, dst)), rows)
    store, ahead, ways = (choice.settings[k] for k in ("store", "prefetch", "walk"))
    want = source_checksum(src.array(np.uint64), lay, rows)    # after training, if any
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
        r = native.checkpoint(dst.addr, src.addr, lay.src, params["chunk"], store, isa, cpus,
                              rows=rows, src_rows=lay.rows, row_bytes=lay.row_bytes,
                              persist=params["persist"], fd=fd, prefetch=PREFETCH,
                              lines_ahead=ahead, ways=ways)
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
                          "store": store, "prefetch": ahead, "walk": ways,
                          **({"tuned": choice.record()} if choice.figures else {}),
                          "chunks": chunks(lay, params["chunk"]),
                          **({"preset": params["preset"], "scale": params["scale"],
                              "parameters": lay.params} if lay.params else {}),
                          **({"rows": lay.rows, "row_bytes": lay.row_bytes,
                              "dirty_rows": lay.dirty, "dirty_from": dirty_from(params, lay)}
                             if lay.dirty else {}),
                          **({"step_cpus": rest, "step": name} if name != "none" else {}),
                          **({"filesystem": filesystem(params["path"])} if fd >= 0 else {})})
    try:
        measure(m, params, buffers, once)
        m.info["evicted"] = all(cold)   # src and dst evicted before every snapshot
        predict(m, dst, demand({**params, "store": store}, lay.dst), "bandwidth", 1.0)
        if beside:
            slowdown_or_why(m, beside[-len(m.reps):] if m.reps else beside)
        return m
    finally:
        if fd >= 0:
            os.close(fd)
            os.unlink(file_path)


def demand(params: dict, nbytes: int):
    """A whole snapshot alone (workload.copy_demand); None for the cases the model leaves
    out: dirty rows, persistence, a file, a step beside it."""
    if params["dirty"] or params["persist"] or params["path"] or params["interfere"] != "none":
        return None
    return workload.copy_demand(nbytes, params["store"] == "nt")


def slowdown_or_why(m: Measurement, beside: list[tuple[float, int, float, float]]) -> None:
    """Whether the case reports step_slowdown: only where every repetition did at least
    MIN_DONE_STEPS steps' worth of work during the snapshot. Where a step is longer than
    the snapshot, its rate beside it is mostly its rate alone, and any slowdown would
    understate it: step_slowdown is then left out of every repetition (so the case is not
    summarised from its longest snapshots only) and info says why."""
    m.info["steps_beside_min"] = round(min(b[0] for b in beside), 2)
    m.info["steps_inside_min"] = min(b[1] for b in beside)
    if m.info["steps_beside_min"] >= MIN_DONE_STEPS:
        return
    for rep in m.reps:
        rep.pop("step_slowdown", None)
    m.units.pop("step_slowdown", None)
    snap = float(np.median([b[2] for b in beside])) / 1e6
    step = float(np.median([b[3] for b in beside])) / 1e6
    m.info["step_slowdown_left_out"] = (
        f"less than {MIN_DONE_STEPS:g} step's work was done during the snapshot in some "
        f"repetition ({m.info['steps_beside_min']:g}; a step takes {step:.3g} ms alone, the "
        f"snapshot {snap:.3g} ms beside it): a step mostly outside it ran mostly alone and "
        "would understate the slowdown. Lengthen the snapshot (size, rows, dirty) or "
        "shorten step_size (a step that fits in the cache measures little)")
