"""Paged KV-cache swaps between the GPU and host memory, as LLM servers move a preempted
sequence's KV blocks out of HBM and back (vLLM's swap_blocks): a model's KV shape (a
preset's layers, KV heads and head dim, or custom ones), `block` tokens a block, and
`blocks` KV blocks swapped at once, every layer's K and V of each: 2 x layers x blocks
copies of block x kv_heads x head_dim x dtype bytes, each layer's K (and V) of a block one
copy, as the engines keep them (per layer, K and V each a tensor of blocks). The host side
is a pool of `pool_blocks` KV blocks in the same layout, a cxlbench buffer placed, and
verified, on the node `mem` names (DRAM, a remote socket, a CXL node onlined with a normal
zone), registered for the case; the swapped blocks sit at distinct random slots of it
(`seed`). direction in: the pool's blocks to device memory; out: device memory to the
pool. method copies: one cudaMemcpyAsync a copy on one stream (the copy engines, as vLLM);
kernel: one kernel gathering (or scattering) every copy's 16-byte words through the block
table, reading or writing the pool in place over the link (the SMs). Each repetition is one
swap timed by CUDA events around all its copies; every byte is checked after the timing.
GB/s of the bytes swapped, and µs a swap."""
from __future__ import annotations

import numpy as np

from .. import gpu
from ..errors import CheckError, UserError
from ..options import Option, pick
from ..workloads import kvcache
from .common import Measurement, check_placement, measure, place, timed_in_one_call, resolve_cpus
from .gpu_stream import OPTIONS as STREAM_OPTIONS
from .gpu_stream import checked_times, grid

NAME = "gpu_kv_swap"
TITLE = "Paged KV-cache swaps on the GPU"
BUFFERS = ("pool",)
DESCRIPTION = "paged KV-cache blocks swapped between the GPU and a host pool placed on each " \
              "node, by copies or a kernel (GB/s, us a swap)"
CUSTOM = kvcache.CUSTOM         # layers, kv_heads, head_dim: what a preset sets itself

OPTIONS = {
    "direction": Option("direction", "choice", "in", "in: the pool's blocks to the GPU "
                        "(swap in); out: the GPU's to the pool (swap out)",
                        choices=gpu.KV_DIRECTIONS, expand={"all": gpu.KV_DIRECTIONS}),
    "method": Option("method", "choice", "copies", "copies: one cudaMemcpyAsync per layer's "
                     "K or V of a block (the copy engines, as vLLM swaps); kernel: one "
                     "kernel copying them all through the block table (the SMs)",
                     choices=gpu.KV_METHODS, expand={"all": gpu.KV_METHODS}),
    "preset": Option("preset", "choice", "llama-3-8b", "a model's KV shape (layers, kv_heads, "
                     "head_dim its own); custom: layers x kv_heads x head_dim",
                     choices=("custom", *kvcache.PRESETS)),
    "layers": Option("layers", "int", 32, "layers (custom)", min=1, max=(1 << 15) - 1),
    "kv_heads": Option("kv_heads", "int", 8, "KV heads (custom)", min=1, max=1024),
    "head_dim": Option("head_dim", "int", 128, "elements per head (custom)", min=1,
                       max=65536),
    "dtype": Option("dtype", "choice", "fp16", "KV element type (sets the bytes)",
                    choices=tuple(kvcache.ELEM_BYTES)),
    "block": Option("block", "int", 16, "tokens per block", "tokens", min=1, max=4096),
    "blocks": Option("blocks", "int", 64, "KV blocks swapped at once, every layer's K and V "
                     "of each (64 of 16 tokens: a 1024-token sequence)", min=1, max=1 << 24),
    "pool_blocks": Option("pool_blocks", "int", 256, "KV blocks the host pool holds (at least "
                          "blocks; the swapped ones at random slots of it)", min=1,
                          max=1 << 30),
    "seed": Option("seed", "int", 1, "seed of the swapped blocks' slots in the pool", min=0),
    "threads": STREAM_OPTIONS["threads"],
    "blocks_per_sm": STREAM_OPTIONS["blocks_per_sm"],
    "device": STREAM_OPTIONS["device"],
    **pick("mem", "page", "cpus", "repeat", "warmup", "tolerance", "timeout", repeat=10,
           warmup=1),
}


def shape(params: dict) -> dict:
    """layers, kv_heads, head_dim: the preset's, or the custom options'."""
    return kvcache.model_shape(params)


def copy_bytes(params: dict) -> int:
    """One layer's K (or V) of one block: what one copy moves."""
    s = shape(params)
    return params["block"] * s["kv_heads"] * s["head_dim"] * kvcache.ELEM_BYTES[params["dtype"]]


def copies(params: dict) -> int:
    """Copies a swap makes: every layer's K and V of every block swapped."""
    return 2 * shape(params)["layers"] * params["blocks"]


def pool_bytes(params: dict) -> int:
    return 2 * shape(params)["layers"] * params["pool_blocks"] * copy_bytes(params)


def slots(params: dict) -> np.ndarray:
    """The library's block table (uint64, C order): the pool is, per layer, K's blocks then
    V's (pool_blocks copies each); copy j = (2 x layer + kv) x blocks + b, KV block b of
    the swap, comes from (or goes to) pool copy (2 x layer + kv) x pool_blocks + slot[b],
    slot[b] the swapped blocks' distinct random slots."""
    rng = np.random.default_rng(params["seed"])
    slot = rng.choice(params["pool_blocks"], params["blocks"], replace=False).astype(np.uint64)
    planes = np.arange(2 * shape(params)["layers"], dtype=np.uint64)[:, None]
    return np.ascontiguousarray((planes * np.uint64(params["pool_blocks"]) + slot).ravel())


def unused(params: dict) -> dict[str, str]:
    out = {}
    if params["method"] == "copies":
        why = "method=copies runs on the copy engines, not a grid"
        out.update({"threads": why, "blocks_per_sm": why})
    if params["preset"] != "custom":
        out.update(dict.fromkeys(CUSTOM, f"preset={params['preset']} has layers, kv_heads "
                                         "and head_dim of its own"))
    return out


def skip(params: dict, topology) -> str | None:
    return gpu.unavailable() or gpu.pinnable(params["mem"])


def validate(params: dict, topology) -> None:
    if params["pool_blocks"] < params["blocks"]:
        raise UserError(f"gpu_kv_swap: pool_blocks={params['pool_blocks']} cannot hold "
                        f"blocks={params['blocks']} (the pool needs a slot for each block "
                        "swapped)")
    if params["method"] == "kernel":
        if copy_bytes(params) % 16:
            raise UserError(f"gpu_kv_swap: method=kernel copies 16-byte words, and a block's "
                            f"K of {copy_bytes(params)} bytes (block x kv_heads x head_dim x "
                            f"{kvcache.ELEM_BYTES[params['dtype']]}) is not whole words")
        gpu.check_threads(params["threads"])
    gpu.check_device(params["device"])
    check_placement(params, resolve_cpus({**params, "threads": 1}), topology,
                    {"pool": pool_bytes(params)})


def figures(moved: int):
    """Each swap's (ns, the host's ns issuing it) -> its figures: GB/s of the bytes swapped,
    µs a swap, and µs the CPU spent issuing it (near the swap's own time, the CPU's calls
    and not the memory bound it: one cudaMemcpyAsync a few µs, a copy of a block less)."""
    return lambda t: {"bandwidth": moved / t[0], "time": t[0] / 1e3, "issue_time": t[1] / 1e3}


def estimate(params: dict, figures=None) -> float:
    """Seconds of the case's own work (gpu.ASSUMED): the pool placed, filled and checked,
    then each swap's bytes over the link and, by copies, each copy's issue."""
    a, n = gpu.ASSUMED, copies(params)
    swap = n * copy_bytes(params) / a["pcie"] + (n * a["call"] if params["method"] ==
                                                  "copies" else 0)
    return (params["warmup"] + params["repeat"]) * swap + 3 * pool_bytes(params) / a["host"]


def run(params: dict) -> Measurement:
    cpus = resolve_cpus({**params, "threads": 1})
    (buf,) = place(params, cpus, {"pool": pool_bytes(params)})
    dev = gpu.device(params["device"])
    kernel = params["method"] == "kernel"
    blocks = grid(params, dev) if kernel else 0
    threads = params["threads"] if kernel else 0
    table = slots(params)
    each, n = copy_bytes(params), len(table)
    moved = n * each
    what = (f"gpu_kv_swap {params['direction']} {params['method']}: {params['blocks']} "
            f"blocks ({n} copies of {each} bytes)")

    def timed() -> list[int]:
        ns, issue, bad = gpu.kv_swap(params["direction"], params["method"], buf.addr,
                              2 * shape(params)["layers"] * params["pool_blocks"], each, table,
                              params["warmup"] + params["repeat"], blocks, threads,
                              params["device"])
        if bad:
            raise CheckError(f"{what}: {bad} bytes " + (
                "of the device's blocks differ from their pool slots'"
                if params["direction"] == "in" else
                "of the pool differ from what was swapped out to them (or were written "
                "where nothing was swapped)"))
        return list(zip(checked_times(ns, f"{what} (a swap)"), issue))

    s = shape(params)
    m = Measurement(kernel=f"gpu_kv_swap_{params['direction']}",
                    isa=f"sm_{dev['major']}{dev['minor']}", cpus=cpus,
                    units={"bandwidth": "GB/s", "time": "us", "issue_time": "us"},
                    info={"device": dev, "method": params["method"], **s,
                          "block_bytes": each, "copies": n, "bytes": moved,
                          "pool_bytes": pool_bytes(params),
                          "kv_bytes_per_token": 2 * s["layers"] * each // params["block"],
                          **({"grid": blocks, "threads": threads} if kernel else {})})
    return measure(m, params, [buf], timed_in_one_call(timed, figures(moved)))
