"""Managed memory (cudaMallocManaged) as the GPU meets it: pages the host wrote, read by a
grid of GPU threads that faults them over on demand (fault), or after moving them ahead
with cudaMemPrefetchAsync inside the timed region (prefetch), against the same read of
pages already on the device (resident), and the GPU's first touch of memory never used
(first-touch: written, each page allocated where the GPU faults it). The host's pages are
where the worker's CPUs first touch them (the driver's, not a placed buffer: not
verified). Never
oversubscribed: the memory must fit in the device's free memory. Each repetition one timed
region between CUDA events; the read's sum, or every double written, is checked."""
from __future__ import annotations

import os

from .. import gpu
from ..errors import CheckError, UserError
from ..options import Option, pick
from .common import Measurement, resolve_cpus
from .gpu_stream import OPTIONS as STREAM_OPTIONS
from .gpu_stream import checked_times, grid

NAME = "gpu_managed"
TITLE = "GPU managed memory"
BUFFERS = ()            # managed memory, allocated by the driver
DESCRIPTION = "managed memory: GPU page faults against prefetch against resident pages, and " \
              "the GPU's first touch (GB/s)"
OVERSUBSCRIBED = 0.9    # the share of the device's memory a case may take (the library
                        # holds it to the same share of what is free)

OPTIONS = {
    "mode": Option("mode", "choice", "fault", "fault: the host's pages read by the GPU, "
                   "migrated on fault; prefetch: moved first by cudaMemPrefetchAsync (timed "
                   "with the read); resident: already on the device; first-touch: memory "
                   "never used, written by the GPU", choices=gpu.MANAGED_MODES,
                   expand={"all": gpu.MANAGED_MODES}),
    "size": Option("size", "size", 256 << 20, "bytes of managed memory", "bytes", min=4096,
                   multiple=8),
    "threads": STREAM_OPTIONS["threads"],
    "blocks_per_sm": STREAM_OPTIONS["blocks_per_sm"],
    "device": STREAM_OPTIONS["device"],
    # cpus: where the host writes from (under the default policy its pages land on that
    # CPU's node; not verified: managed memory is the driver's, not a placed buffer).
    **pick("cpus", "repeat", "warmup", "timeout", repeat=10, warmup=1),
}


def estimate(params: dict, figures=None) -> float:
    """Seconds of the case's own work (gpu.ASSUMED): each repetition's pages written by
    the host and migrated on fault (the slowest mode)."""
    a = gpu.ASSUMED
    return (params["warmup"] + params["repeat"]) * params["size"] * (1 / a["fault"] +
                                                                      1 / a["host"])


def skip(params: dict, topology) -> str | None:
    return gpu.unavailable()


def unused(params: dict) -> dict[str, str]:
    if params["mode"] == "first-touch":
        return {"cpus": "mode=first-touch: the host never writes the memory"}
    return {}


def validate(params: dict, topology) -> None:
    gpu.check_threads(params["threads"])
    gpu.check_device(params["device"])
    total = gpu.device(params["device"])["memory_bytes"]
    if params["size"] > OVERSUBSCRIBED * total:
        raise UserError(f"size={params['size']} is over {OVERSUBSCRIBED:.0%} of device "
                        f"{params['device']}'s {total} bytes: managed memory would be "
                        "oversubscribed, and evictions measured instead of migrations")


def run(params: dict) -> Measurement:
    cpus = resolve_cpus({**params, "threads": 1})
    dev = gpu.device(params["device"])
    mode, size, warm = params["mode"], params["size"], params["warmup"]
    blocks = grid(params, dev)
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)   # the host's writes from here: its pages on this CPU's node
    try:
        ns, bad = gpu.managed(mode, size, warm + params["repeat"], blocks, params["threads"],
                              params["device"])
    finally:
        os.sched_setaffinity(0, allowed)
    if bad:
        raise CheckError(f"gpu_managed {mode}: " + (
            f"{bad} doubles not what the GPU wrote" if mode == "first-touch" else
            "the GPU's sum is not that of what the host wrote"))
    checked_times(ns, f"gpu_managed {mode}: {size} bytes")
    return Measurement(kernel=f"gpu_managed_{mode}", isa=f"sm_{dev['major']}{dev['minor']}",
                       cpus=cpus, units={"bandwidth": "GB/s", "time": "us"},
                       reps=[{"bandwidth": size / t, "time": t / 1e3} for t in ns[warm:]],
                       info={"device": dev, "bytes": size, "blocks": blocks,
                             "threads": params["threads"]})
