"""Embedding-bag lookups, the sparse half of recommendation models (DLRM): for each sample
and table, the rows its indices name are gathered and summed (or averaged) into one
vector. Tables are stacked in one `table` buffer as FBGEMM keeps them, the indices and
offsets in `indices`, the pooled vectors in `out`, each placed on its own. Lookups per
second and GB/s of rows gathered; the latency of single bags, timed in C on a sample;
every repetition's output checked against numpy pooling the same bags."""
from __future__ import annotations

import numpy as np

from ..errors import UserError
from ..memory import native
from ..options import pick
from ..workloads import embedding as workload
from ..workloads.embedding import (Trainer, check_output, fill_table, layout, make_indices,
                                   reference, resolve_bag_isa, reuse_note, trace_info)
from .common import workload_seconds, Measurement, check_placement, measure, place, predict, resolve_cpus

NAME = "embedding"
TITLE = "Embedding-bag lookups"
DESCRIPTION = "embedding-bag lookups over stacked tables (M lookups/s, GB/s of rows, bag latency)"
BUFFERS = ("table", "indices", "out", "state")     # state: Adagrad's (train=adagrad)
OPTIONS = {**workload.OPTIONS, **pick("threads", "cpus", "mem", "page", "isa", "repeat",
                                         "warmup", "tolerance", "timeout")}
unused = workload.unused


def buffers_of(params: dict) -> tuple[str, ...]:
    return BUFFERS if params.get("train") == "adagrad" else BUFFERS[:3]


def validate(params: dict, topology) -> None:
    if params["train"] != "none" and params["dtype"] != "fp32":
        raise UserError(f"embedding: train={params['train']} updates fp32 tables, not "
                        f"{params['dtype']}")
    resolve_bag_isa(params["isa"])
    lay = layout(params)            # a trace is read and checked here
    check_placement(params, resolve_cpus(params), topology, lay.sizes())
    return reuse_note(lay, params)


def estimate(params: dict, figures) -> float:
    """Seconds of the case's work (common.workload_seconds): the table placed and filled,
    two draws of indices and their numpy references, then each repetition's two passes
    (all bags, then each bag timed) of random rows (twice again in training)."""
    lay = layout(params)
    touched = lay.lookups * lay.row_bytes * (4 if lay.train != "none" else 2)
    return workload_seconds(params, figures, "table", sum(lay.sizes().values()), touched,
                            randoms=2 * lay.lookups, working_set=lay.sizes()["table"],
                            numpy_bytes=2 * lay.lookups * (lay.row_bytes + 8))


def run(params: dict) -> Measurement:
    lay = layout(params)
    isa = resolve_bag_isa(params["isa"])
    cpus = resolve_cpus(params)
    table, idx_buf, out_buf, *state = place(params, cpus, lay.sizes())
    fill_table(table.array(np.uint8), lay, params["seed"])
    indices, offsets = make_indices(lay, params)
    space = idx_buf.array(np.int64)
    k, b = len(indices), len(offsets)
    space[:k], space[k:k + b] = indices, offsets
    indices, offsets = space[:k], space[k:k + b]
    out = out_buf.array(np.float32)[:lay.bags * lay.dim].reshape(lay.bags, lay.dim)
    trainer = (Trainer(lay, params, table, indices, offsets, out, space[k + b:],
                       state[0] if state else None) if lay.train != "none" else None)
    raw = table.array(np.uint8)
    want = reference(raw, lay, indices, params["pool"], offsets)
    bag_ns = np.zeros(lay.bags, dtype=np.uint64)
    # The latency pass looks up a fresh draw of the same distribution (a trace replays
    # itself): replaying the bags just read would find their very rows in the cache.
    drawn = indices.copy()
    fresh = drawn if workload.trace_of(params) is not None else \
        make_indices(lay, {**params, "seed": params["seed"] + 1})[0]
    want_fresh = reference(raw, lay, fresh, params["pool"], offsets)

    choice = workload.tune_bags(params, lay, isa, cpus, table.addr,
                                f"{table.placement} {table.page}", indices, offsets, out,
                                fresh)
    prefetch, regs = choice.settings["prefetch"], choice.settings["regs"]

    def pool(times=None) -> native.EmbeddingResult:
        out.fill(np.nan)        # a bag the kernel skips cannot pass for last time's
        r = native.embedding_bag(table.addr, sum(lay.rows), lay.row_bytes, lay.dim,
                                 lay.dtype, params["pool"], indices, offsets, out, isa, cpus,
                                 prefetch, times, 1 if times is not None else 0, regs)
        check_output(out, want if times is None else want_fresh, lay, r.bad)
        return r

    def once() -> dict[str, float]:
        nonlocal want, want_fresh
        r = pool()              # timed whole, no clock read inside
        indices[:] = fresh      # in the placed buffer, as the throughput pass read its own
        pool(bag_ns)            # every bag timed alone: the latencies, not the throughput
        indices[:] = drawn
        us = bag_ns / 1000.0
        rep = {"lookups": lay.lookups / r.ns * 1e3,
               "bandwidth": lay.lookups * lay.row_bytes / r.ns,
               "bag_p50": float(np.percentile(us, 50)), "bag_p99": float(np.percentile(us, 99))}
        if trainer:
            ns = trainer.step(cpus)
            rep["rows_updated"] = len(trainer.rows) / ns * 1e3
            want = reference(raw, lay, indices, params["pool"], offsets)   # rows changed
            want_fresh = reference(raw, lay, fresh, params["pool"], offsets)
        return rep

    units = {"lookups": "M/s", "bandwidth": "GB/s", "bag_p50": "us", "bag_p99": "us"}
    if trainer:
        units["rows_updated"] = "M/s"
    m = Measurement(kernel="embedding_bag" + ("+" + lay.train if trainer else ""), isa=isa,
                    cpus=cpus, units=units,
                    info={"tables": len(lay.rows), "rows": sum(lay.rows), "dim": lay.dim,
                          "prefetch_rows": prefetch, "regs": regs,
                          **({"tuned": choice.record()} if choice.figures else {}),
                          "row_bytes": lay.row_bytes, "lookups": lay.lookups,
                          "bags": lay.bags, "threads": len(cpus),
                          **trace_info(params),
                          **({"rows_touched": len(trainer.rows)} if trainer else {})})
    m = measure(m, params, [table, idx_buf, out_buf, *state], once)
    predict(m, table, workload.demand(params), "lookups", 1e3)
    return m
