"""The GPU families: HBM bandwidth and latency, host-device copies, zero-copy and managed
memory, embedding gathers and KV-cache swaps."""
from __future__ import annotations

import pandas as pd

from ... import analysis
from ...units import format_size
from .draw import _metric, bars, lines


def gpu_stream(frame, runs):
    """HBM bandwidth by kernel at a full grid; triad against threads per block, a line per
    number of blocks per SM (the occupancy sweep)."""
    full = frame["params"].map(lambda p: p.get("blocks_per_sm") == "full")
    yield bars(frame[full], ("kernel",), "bandwidth", key="gpu-stream", family="gpu_stream",
               title="GPU memory bandwidth by kernel",
               measured="Bandwidth (GB/s of the bytes each kernel's row declares) of one "
                        "launch over arrays in device memory, timed by CUDA events, at as "
                        "many blocks as the SMs hold at once")
    yield lines(frame[~full], "threads", "bandwidth", logx=True, xlabel="threads per block",
                key="gpu-occupancy", family="gpu_stream", exclude=("kernel",),
                title="GPU memory bandwidth against occupancy",
                measured="Bandwidth (GB/s) of one kernel's launch against threads per block, "
                         "a line per number of blocks per SM")


def _gpu_marks(lat: pd.DataFrame) -> list[tuple[float, str]]:
    """The latency figure's marks: the L2 the device reports, and the steps the line-stride
    sweep itself shows (L1 is not reported: it shares its SRAM with shared memory, so its
    size is the carve-out's)."""
    line = lat[lat["params"].map(lambda p: int(p.get("stride") or 128) <= 128)]
    l2 = {int(i["device"]["l2_bytes"]) for i in line["info"]
          if isinstance(i, dict) and i.get("device", {}).get("l2_bytes")}
    marks = [(b, f"L2 {format_size(b)} (device)") for b in sorted(l2)]
    if len(l2) <= 1 and line["machine"].nunique() <= 1:     # one device's curve
        points = [(int(p["size"]), float(v)) for p, v in zip(line["params"], line["median"])]
        marks += [(lv["capacity"], f"step {format_size(lv['capacity'])} (measured)")
                  for lv in analysis.cache_levels(points) if lv["capacity"]]
    return marks


def gpu_chase(frame, runs):
    """Latency against working set, a line per stride: the steps are L1, L2 and HBM (a
    line's stride) or the TLBs' reach (a page's)."""
    lat = _metric(frame, "latency")
    yield lines(frame, "size", "latency", logx=True, logy=True, xsize=True,
                xlabel="working set", key="gpu-latency", family="gpu_chase",
                marks=_gpu_marks(lat),
                title="GPU memory latency against working set",
                measured="Time of one dependent load (ns, CUDA events around a launch of one "
                         "thread's chase through a random cycle, over its loads); dotted "
                         "lines mark the device's L2 and the steps the line-stride sweep "
                         "shows")


def gpu_copy(frame, runs):
    """Copy bandwidth against size, a line per direction, host memory kind and node."""
    yield lines(frame, "size", "bandwidth", logx=True, xsize=True, xlabel="bytes each way",
                key="gpu-copy", family="gpu_copy",
                title="Host-device copies against size",
                measured="Bandwidth (GB/s: bytes copied, both ways' for bidir) between "
                         "device memory and host memory of each kind, placed on each node "
                         "where it is a cxlbench buffer, by the copy engines (cudaMemcpyAsync) "
                         "or by a kernel on the SMs, timed by CUDA events")


def gpu_zero_copy(frame, runs):
    """The GPU streaming host memory in place, by node; its chase latency, by node."""
    yield bars(frame, ("op",), "bandwidth", key="gpu-zero-copy", family="gpu_zero_copy",
               title="GPU reading and writing host memory in place",
               measured="Bandwidth (GB/s) of a grid of GPU threads reading or writing "
                        "registered host memory placed on each node, over the link")
    yield bars(frame, ("op",), "latency", key="gpu-zero-copy-latency",
               family="gpu_zero_copy", title="GPU load latency to host memory",
               measured="Time of one dependent load (ns) of one GPU thread chasing a random "
                        "cycle of 64-byte lines through host memory placed on each node")


def gpu_managed(frame, runs):
    """Managed memory's read by mode: faulted in, prefetched, resident; and first touch."""
    yield bars(frame, ("mode",), "bandwidth", key="gpu-managed", family="gpu_managed",
               title="GPU managed memory: faults against prefetch",
               measured="Bandwidth (GB/s of the managed buffer) of a grid of GPU threads "
                        "reading pages the host wrote (migrated on fault, or prefetched "
                        "first, timed with the read), pages already on the device, or "
                        "writing memory never touched, timed by CUDA events")


def gpu_embedding(frame, runs):
    """Embedding-bag gathers by where the table lives: HBM, the driver's pinned memory, and
    host memory placed on each node."""
    yield bars(frame, ("table",), "lookups", key="gpu-embedding", family="gpu_embedding",
               title="GPU embedding-bag gathers by where the table lives",
               measured="Lookups a second (M/s) of one warp a bag summing its rows in fp32, "
                        "the table in HBM, in the driver's pinned memory or in host memory "
                        "placed on each node (both read in place over the link), timed by "
                        "CUDA events")


def gpu_kv_swap(frame, runs):
    """KV-cache swaps by direction and method, a bar per placement of the host pool."""
    yield bars(frame, ("direction", "method"), "bandwidth", key="gpu-kv-swap",
               family="gpu_kv_swap", title="KV-cache swaps between HBM and host memory",
               measured="Bandwidth (GB/s of KV bytes swapped) of every layer's K and V of the "
                        "blocks swapped between HBM and a host pool placed on each node, one "
                        "cudaMemcpyAsync a copy or one kernel through the block table, timed "
                        "by CUDA events")
    yield bars(frame, ("direction", "method"), "issue_time", key="gpu-kv-swap-issue",
               family="gpu_kv_swap", title="KV-cache swaps: the CPU's time issuing them",
               measured="Time (µs) the host spent in the calls that issue one swap (one "
                        "cudaMemcpyAsync a copy, or one launch), by its clock: where it "
                        "nears the swap's own time, the CPU's calls bound the swap, not the "
                        "memory")


PLOTTERS = {"gpu_stream": gpu_stream, "gpu_chase": gpu_chase, "gpu_copy": gpu_copy,
            "gpu_zero_copy": gpu_zero_copy, "gpu_managed": gpu_managed,
            "gpu_embedding": gpu_embedding, "gpu_kv_swap": gpu_kv_swap}
