"""The GPU reading and writing host memory in place (zero-copy): a buffer placed, and
verified, on the node `mem` names (local DRAM, a remote socket, a CXL node onlined with a
normal zone), registered mapped, then read or written by a grid of GPU threads (GB/s), or chased by one GPU thread
through a random cycle of its 64-byte lines (ns a dependent load, across the link). Each
repetition is one launch between two CUDA events; reads are checked by their sum, writes
by every double, the chase by where the cycle's order puts its end."""
from __future__ import annotations

from .. import gpu
from ..errors import CheckError
from ..options import Option, pick
from .common import Measurement, check_placement, measure, place, timed_in_one_call, resolve_cpus
from .gpu_stream import OPTIONS as STREAM_OPTIONS
from .gpu_stream import checked_times, grid

NAME = "gpu_zero_copy"
TITLE = "GPU zero-copy access to host memory"
BUFFERS = ("host",)
DESCRIPTION = "a GPU reading, writing and chasing host memory placed on each node, in place " \
              "(GB/s, ns a load)"

OPTIONS = {
    "op": Option("op", "choice", "read", "read or write: a grid of threads streams the "
                 "buffer; chase: one thread's dependent loads", choices=gpu.ZERO_COPY_OPS,
                 expand={"all": gpu.ZERO_COPY_OPS}),
    "size": Option("size", "size", 256 << 20, "bytes of host memory", "bytes", min=4096,
                   multiple=64),
    # (at least 1000: a launch's few microseconds then weigh under 1 % of a ~1 us load's)
    "hops": Option("hops", "int", 20000, "chase: dependent loads a repetition, each launch "
                   "going on from where the last stopped", min=1000, max=1 << 40),
    "threads": STREAM_OPTIONS["threads"],
    "blocks_per_sm": STREAM_OPTIONS["blocks_per_sm"],
    "device": STREAM_OPTIONS["device"],
    **pick("mem", "page", "cpus", "repeat", "warmup", "tolerance", "timeout", repeat=10,
           warmup=1),
}


def skip(params: dict, topology) -> str | None:
    return gpu.unavailable() or gpu.pinnable(params["mem"])


def unused(params: dict) -> dict[str, str]:
    if params["op"] == "chase":
        why = "the chase is one thread"
        return {"threads": why, "blocks_per_sm": why}
    return {"hops": f"op={params['op']} streams the buffer once a repetition"}


def validate(params: dict, topology) -> None:
    gpu.check_threads(params["threads"])
    gpu.check_device(params["device"])
    check_placement(params, resolve_cpus({**params, "threads": 1}), topology,
                    {"host": params["size"]})


def estimate(params: dict, figures=None) -> float:
    """Seconds of the case's own work (gpu.ASSUMED): each launch's pass over the buffer,
    or its loads across the link after a warm walk; the buffer written and checked."""
    a, reps = gpu.ASSUMED, params["warmup"] + params["repeat"]
    if params["op"] == "chase":     # the untimed launch's hops and every repetition's
        work = (reps + 1) * params["hops"] * a["link_load"]
    else:
        work = reps * params["size"] / a["zero_copy"]
    return work + 3 * params["size"] / a["host"]


def run(params: dict) -> Measurement:
    cpus = resolve_cpus({**params, "threads": 1})
    (buf,) = place(params, cpus, {"host": params["size"]})
    dev = gpu.device(params["device"])
    op, size = params["op"], params["size"]
    blocks = grid(params, dev) if op != "chase" else 1
    threads = params["threads"] if op != "chase" else 1

    def timed() -> list[int]:
        ns, bad = gpu.zero_copy(op, buf.addr, size, params["warmup"] + params["repeat"],
                                blocks, max(threads, 32), params["hops"], params["device"])
        if bad:
            raise CheckError(f"gpu_zero_copy {op}: the GPU " + (
                f"left {bad} doubles unwritten" if op == "write" else
                "read a sum other than what the buffer holds" if op == "read" else
                "ended its chase elsewhere than the cycle's order puts it"))
        return checked_times(ns, f"gpu_zero_copy {op}: a launch over {size} bytes")

    if op == "chase":
        units, figures = {"latency": "ns"}, (lambda ns: {"latency": ns / params["hops"]})
    else:
        units, figures = {"bandwidth": "GB/s"}, (lambda ns: {"bandwidth": size / ns})
    m = Measurement(kernel=f"gpu_zero_copy_{op}", isa=f"sm_{dev['major']}{dev['minor']}",
                    cpus=cpus, units=units,
                    info={"device": dev, "bytes": size, "blocks": blocks, "threads": threads,
                          **({"hops": params["hops"]} if op == "chase" else {})})
    return measure(m, params, [buf], timed_in_one_call(timed, figures))
