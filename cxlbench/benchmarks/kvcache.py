"""Paged KV-cache traffic of LLM serving, in the layout paged-attention engines (vLLM) keep:
per layer, K and V each of (blocks, block tokens, kv_heads, head_dim), a block table per
sequence naming its blocks, scattered over the pool by `fragmentation`. One operation per
case: a decode step (append one token to every sequence, then read all its blocks, every
layer, K and V, as attention does), prefill (write the prompts' blocks), a swap of whole
sequences between the `cache` pool and the `offload` space, or a prefix restore (256-token
chunks brought back into the cache). GB/s, tokens/s, and the time of each step, swapped
sequence or chunk, timed in C. GB/s counts, for decode, the bytes read plus the bytes
written (the blocks read and the new tokens' K and V); for prefill, the bytes written; for
swaps and restores, the bytes copied, each once (whole blocks: a partial last block is
copied whole), as checkpoint counts its snapshots. With cold (the default) every timed
region starts with its data out of the caches, as a server finds its KV-cache once the
model's weights have streamed through them: decode evicts each step's blocks before it
(in C, untimed), the other ops their buffers before the call. Every token written is a hash
numpy knows, so every block read (decode's sums) or written (the others) is checked
against numpy every repetition."""
from __future__ import annotations

import numpy as np

from ..errors import UserError
from ..options import pick
from ..workloads import kvcache as workload
from ..workloads.kvcache import (ELEM_BYTES, OFFLOADING, PRESETS, Cache, block_table, entry,
                                 layout)
from .common import workload_seconds, Measurement, check_placement, measure, place, predict, resolve_cpus

NAME = "kvcache"
TITLE = "Paged KV-cache"
DESCRIPTION = ("paged KV-cache of LLM serving: decode steps over scattered blocks, prefill, "
               "swaps and prefix restores (GB/s, tokens/s, step latency)")
BUFFERS = ("cache", "offload")
OPTIONS = {**workload.OPTIONS, **pick("threads", "cpus", "mem", "page", "isa", "repeat",
                                         "warmup", "tolerance", "timeout")}
unused = workload.unused


def buffers_of(params: dict) -> tuple[str, ...]:
    return BUFFERS if params.get("op") in OFFLOADING else BUFFERS[:1]


def validate(params: dict, topology) -> None:
    lay = layout(params)
    if lay.token_bytes % 8:
        raise UserError(f"kvcache: a token's K of {lay.token_bytes} bytes (kv_heads x head_dim "
                        f"x {ELEM_BYTES[lay.dtype]}) is not whole 8-byte words")
    if lay.op == "restore" and (lay.chunk % lay.block or lay.seq_len % lay.chunk):
        raise UserError(f"kvcache: restore brings back whole chunks of whole blocks: "
                        f"chunk_tokens {lay.chunk} must be a multiple of block {lay.block}, "
                        f"and seq_len {lay.seq_len} of chunk_tokens")
    if lay.tokens >= 1 << 32:
        raise UserError("kvcache: seq_len and steps must stay below 2^32 tokens")
    entry().choose_isa(params["isa"])
    check_placement(params, resolve_cpus(params), topology, lay.sizes())


STEP_METRIC = {"decode": "step", "swap_out": "seq", "swap_in": "seq", "restore": "chunk"}


def estimate(params: dict, figures) -> float:
    """Seconds of the case's work (common.workload_seconds): the pools placed and filled,
    then each repetition's tokens read and written (decode: all tokens so far and one new
    a step; the others: the sequences' tokens once, copied)."""
    lay = layout(params)
    tb = lay.layers * 2 * lay.token_bytes
    if lay.op == "decode":
        moved = tb * lay.batch * (sum(lay.seq_len + i + 1 for i in range(lay.steps)) +
                                  lay.steps)
    else:
        moved = 2 * tb * lay.batch * lay.seq_len
    placed = sum(lay.sizes().values())
    return workload_seconds(params, figures, "cache", placed, moved, numpy_bytes=placed)


def run(params: dict) -> Measurement:
    lay = layout(params)
    isa = entry().choose_isa(params["isa"])
    cpus = resolve_cpus(params)
    bufs = place(params, cpus, lay.sizes())
    table = block_table(lay, params["fragmentation"], params["seed"])
    mems = [(b.addr, b.array(np.uint64)) for b in bufs]
    work = Cache(lay, table, mems[0], mems[1] if len(mems) > 1 else None, isa, cpus,
                 params["copy"], params["prefetch"], params["cold"])
    tb = lay.layers * 2 * lay.token_bytes               # one token, every layer, K and V
    if lay.op == "decode":      # bytes read + written: all tokens so far, one new a sequence
        read = tb * lay.batch * sum(lay.seq_len + i + 1 for i in range(lay.steps))
        moved, tokens = read + tb * lay.batch * lay.steps, lay.batch * lay.steps
    elif lay.op == "prefill":   # bytes written
        moved, tokens = tb * lay.batch * lay.seq_len, lay.batch * lay.seq_len
    else:                       # bytes copied, each once (as checkpoint): whole blocks
        moved, tokens = work.copied, lay.batch * lay.seq_len
    step = STEP_METRIC.get(lay.op)

    def once() -> dict[str, float]:
        r, step_ns = work.once()
        rep = {"bandwidth": moved / r.ns, "tokens": tokens / r.ns * 1e9}
        if step:
            us = step_ns / 1000.0
            rep[f"{step}_p50"] = float(np.percentile(us, 50))
            rep[f"{step}_p99"] = float(np.percentile(us, 99))
        return rep

    units = {"bandwidth": "GB/s", "tokens": "tok/s"}
    if step:
        units.update({f"{step}_p50": "us", f"{step}_p99": "us"})
    preset = PRESETS.get(params["preset"])
    info = {"preset": params["preset"], "layers": lay.layers,
            **({"preset_layers": preset["layers"], "scale": params["scale"]} if preset else {}),
            "kv_heads": lay.kv_heads, "head_dim": lay.head_dim, "dtype": lay.dtype,
            "kv_bytes_per_token": tb, "block_bytes": lay.block_bytes, "blocks": lay.blocks,
            "batch": lay.batch, "seq_len": lay.seq_len, "bytes": moved, "threads": len(cpus),
            "evicted": work.evicted,
            **({"steps": lay.steps} if lay.op == "decode" else {})}
    if lay.op in OFFLOADING:
        info.update(copy=params["copy"], copies=int(len(work.runs)) * 2 * lay.layers,
                    groups=work.steps, **({"chunk": lay.chunk} if lay.op == "restore" else {}))
    m = Measurement(kernel=f"kvcache_{lay.op}", isa=isa, cpus=cpus, units=units, info=info)
    m = measure(m, params, bufs, once)
    predict(m, bufs[0], workload.demand(params), "tokens", 1e9)
    return m
