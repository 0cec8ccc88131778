"""GPU HBM streaming kernels (BabelStream's copy, scale, add, triad and dot, plus read and
write) over three arrays of doubles in device memory, with the grid as options for an
occupancy sweep: blocks per SM and threads per block. Each repetition is one launch timed
by events around it alone (in the library, no Python between them); after the timing every
element written, or the sum read, is checked against its closed-form value. GB/s counts
the bytes the header declares for each kernel (CXB_GPU_BYTES_*): 8 per element for read
and write, 16 for copy, scale and dot, 24 for add and triad, times the passes. A launch
goes over the arrays as many times as it takes to move PASS_BYTES, so a working set that
fits L1 or L2 is timed there, not as the launch's own overhead (about 5 us: at 4 TB/s,
the time of 20 MB)."""
from __future__ import annotations

from .. import gpu
from ..errors import CheckError
from ..options import Option, pick
from .common import Measurement

NAME = "gpu_stream"
TITLE = "GPU HBM streaming"
BUFFERS = ()            # device memory, allocated by the library
DESCRIPTION = "GPU HBM streaming kernels over an occupancy sweep (GB/s)"
KERNELS = gpu.KERNELS    # name -> bytes per element, from the header: no library needed
PASS_BYTES = 1 << 30     # moved a launch at least: 250 us at 4 TB/s, 50x a launch's cost

OPTIONS = {
    "kernel": Option("kernel", "choice", "triad", "the streaming kernel",
                     choices=tuple(KERNELS), expand={"all": tuple(KERNELS)}),
    # 1 GiB an array: 20x an H200's L2 (50 MiB), so each launch streams from HBM.
    "size": Option("size", "size", 1 << 30, "bytes of each of the three arrays (sweep: 64 "
                   "KiB to 4 GiB, L1 and L2 to HBM)", "bytes", min=64 << 10, multiple=16,
                   expand={"sweep": tuple(1 << k for k in range(16, 33, 2))}),
    "threads": Option("threads", "int", 256, "threads per block (whole warps)", min=32,
                      max=1024, expand={"sweep": (64, 128, 256, 512, 1024)}),
    "blocks_per_sm": Option("blocks_per_sm", "int", "full", "blocks per SM (full: as many as "
                            "the SM holds at once at these threads and the kernel's "
                            "registers)", min=1, max=1 << 16,
                            words=("full",), expand={"sweep": (1, 2, 4, 8, 16, 32)}),
    "device": Option("device", "int", 0, "the CUDA device", min=0),
    **pick("repeat", "warmup", "timeout", repeat=20, warmup=2),
}


def skip(params: dict, topology) -> str | None:
    return gpu.unavailable()


def validate(params: dict, topology) -> None:
    gpu.check_threads(params["threads"])
    gpu.check_device(params["device"])


def checked_times(ns: list[int], what: str) -> list[int]:
    """Events resolve about half a microsecond: a repetition timed at 0 has no figure."""
    if min(ns) == 0:
        raise CheckError(f"{what} took under the CUDA events' resolution: use a larger size")
    return ns


def grid(params: dict, dev: dict) -> int:
    """The copy, zero-copy, embedding and KV kernels' grid (the stream kernels' full grid
    is the library's, from the occupancy their registers allow)."""
    per_sm = params["blocks_per_sm"]
    if per_sm == "full":        # resident at once: threads and the blocks' own limit
        per_sm = max(1, min(dev["max_threads_per_sm"] // params["threads"],
                            dev["max_blocks_per_sm"]))
    return per_sm * dev["sms"]


def passes(kernel: str, size: int) -> int:
    """Times over the arrays in one launch: enough to move PASS_BYTES."""
    return max(1, -(-PASS_BYTES // (KERNELS[kernel] * (size // 8))))


def estimate(params: dict, figures=None) -> float:
    """Seconds of the case's own work at the assumed HBM bandwidth (gpu.ASSUMED)."""
    n = params["size"] // 8
    launch = KERNELS[params["kernel"]] * n * passes(params["kernel"], params["size"])
    return ((params["warmup"] + params["repeat"]) * launch + 3 * params["size"]) / \
        gpu.ASSUMED["hbm"]


def run(params: dict) -> Measurement:
    dev = gpu.device(params["device"])
    full = params["blocks_per_sm"] == "full"
    n = params["size"] // 8
    warm, reps = params["warmup"], params["repeat"]
    times = passes(params["kernel"], params["size"])
    r = gpu.stream(params["kernel"], n, 0 if full else grid(params, dev), params["threads"],
                   warm + reps, params["device"], times)
    if r.bad:
        what = (f"sum {r.total!r}, not {r.want!r}" if params["kernel"] in ("read", "dot")
                else f"{r.bad} of {n} elements off their value")
        raise CheckError(f"gpu_stream {params['kernel']}: {what}")
    checked_times(r.ns, f"gpu_stream {params['kernel']}: a launch over {params['size']} "
                        "bytes")
    moved = KERNELS[params["kernel"]] * n * times
    return Measurement(kernel=f"gpu_{params['kernel']}", isa=f"sm_{dev['major']}{dev['minor']}",
                       cpus=[], units={"bandwidth": "GB/s"},
                       reps=[{"bandwidth": moved / ns} for ns in r.ns[warm:]],
                       info={"device": dev, "blocks": r.blocks, "threads": params["threads"],
                             "resident_per_sm": r.resident, "bytes": moved, "elements": n,
                             "passes": times})
