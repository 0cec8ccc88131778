"""Host-device copies: host to device, device to host, or both at once, by the GPU's copy
engines (cudaMemcpyAsync; engine=ce) or by a kernel on the SMs reading and writing the host
memory mapped into the device's space (engine=sm, as NCCL and nvbandwidth's SM copies do),
from host memory of four kinds. pageable and registered copy a
cxlbench buffer placed, and verified, on the node `mem` names: pageable as it is (the
driver stages it through pinned buffers of its own; any node, CXL included), registered
pinned where it lies (cudaHostRegister) for the case (not on a node of movable memory
only, as CXL memory onlined by dax/kmem usually is: pinning migrates it elsewhere). pinned and wc are cudaHostAlloc'd by
the driver, plain or write-combined, where the worker's CPU node puts them (not verified).
Every repetition is timed by CUDA events around the copies alone; every byte is checked
after the timing. GB/s counts the bytes copied (both directions' for bidir)."""
from __future__ import annotations

from .. import gpu, pcie_link
from .gpu_stream import OPTIONS as STREAM_OPTIONS
from .gpu_stream import checked_times, grid
from ..errors import CheckError, UserError
from ..options import Option, pick
from .common import (Measurement, check_placement, measure, place, timed_in_one_call, resolve_cpus,
                     unplaced)

NAME = "gpu_copy"
TITLE = "Host-device copies"
BUFFERS = ("host",)
DESCRIPTION = "host-device copies by the copy engines or the SMs from host memory on each " \
              "node, pinned, registered, pageable or write-combined (GB/s)"
PLACED = ("pageable", "registered")     # the kinds whose host side is a placed buffer

OPTIONS = {
    "direction": Option("direction", "choice", "h2d", "h2d, d2h, or bidir (both at once on "
                        "two streams)", choices=gpu.DIRECTIONS, expand={"all": gpu.DIRECTIONS}),
    "host": Option("host", "choice", "registered", "the host memory: pageable (a placed "
                   "buffer), registered (the same pinned where it is, on a node not all "
                   "movable), pinned or wc (cudaHostAlloc'd, plain or write-combined)",
                   choices=gpu.HOST_KINDS,
                   expand={"all": gpu.HOST_KINDS}),
    "engine": Option("engine", "choice", "ce", "ce: the copy engines (cudaMemcpyAsync); sm: a "
                     "kernel copying 16 bytes a thread through the mapped host memory (not "
                     "pageable)", choices=gpu.ENGINES, expand={"all": gpu.ENGINES}),
    "size": Option("size", "size", 256 << 20, "bytes copied each way", "bytes", min=4096,
                   expand={"sweep": (4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20,
                                     1 << 30)}),
    "threads": STREAM_OPTIONS["threads"],
    "blocks_per_sm": STREAM_OPTIONS["blocks_per_sm"],
    "device": STREAM_OPTIONS["device"],
    **pick("mem", "page", "cpus", "repeat", "warmup", "tolerance", "timeout", repeat=10,
           warmup=2),
}


def buffers_of(params: dict) -> tuple[str, ...]:
    return BUFFERS if params.get("host") in PLACED else ()


def unused(params: dict) -> dict[str, str]:
    out = {}
    if params["engine"] == "ce":
        why = "engine=ce: the copy engines, not a kernel"
        out |= {"threads": why, "blocks_per_sm": why}
    if params["host"] not in PLACED:
        why = f"host={params['host']} is allocated by the CUDA driver, not placed"
        out |= {"mem": why, "page": why}
    return out


def sizes(params: dict) -> dict[str, int]:
    return {"host": params["size"] * (2 if params["direction"] == "bidir" else 1)}


def skip(params: dict, topology) -> str | None:
    if params["host"] == "pageable" and params["engine"] == "sm":
        return ("pageable memory is not mapped into the device's space: only the copy "
                "engines (through the driver's staging) copy it")
    if params["host"] == "pageable" and params["direction"] == "bidir":
        return ("pageable copies are staged by the driver synchronously: the two directions "
                "would run one after the other, not at once")
    return gpu.unavailable() or (gpu.pinnable(params["mem"]) if params["host"] == "registered"
                                 else None)


def validate(params: dict, topology) -> None:
    if params["engine"] == "sm":
        gpu.check_threads(params["threads"])
        if params["size"] % 16:
            raise UserError(f"size={params['size']}: an SM copy moves 16 bytes a thread, so "
                            "the size must be a multiple of 16")
    gpu.check_device(params["device"])
    if params["host"] in PLACED:
        check_placement(params, resolve_cpus({**params, "threads": 1}), topology,
                        sizes(params))


def estimate(params: dict, figures=None) -> float:
    """Seconds of the case's own work (gpu.ASSUMED): the copies at the link's bandwidth
    (staged, for pageable), and the host buffer written, registered and checked."""
    a = gpu.ASSUMED
    host = sizes(params)["host"]
    link = a["pageable"] if params["host"] == "pageable" else a["pcie"]
    return (params["warmup"] + params["repeat"]) * host / link + 3 * host / a["host"]


def run(params: dict) -> Measurement:
    cpus = resolve_cpus({**params, "threads": 1})
    bufs = place(params, cpus, sizes(params)) if params["host"] in PLACED else []
    dev = gpu.device(params["device"])
    moved = params["size"] * (2 if params["direction"] == "bidir" else 1)
    engine = params["engine"]
    blocks = grid(params, dev) if engine == "sm" else 0
    threads = params["threads"] if engine == "sm" else 0
    what = f"gpu_copy {params['direction']} {params['host']} {engine}"
    info = {"device": dev, "bytes": moved, "host": params["host"],
            **({"blocks": blocks, "threads": threads} if blocks else {})}

    def timed() -> list[int]:
        # The link read while the copies run: an idle GPU's link is at Gen1.
        with pcie_link.Watch(pcie_link.address(dev["pci_domain"], dev["pci_bus"],
                                               dev["pci_device"])) as link:
            ns, bad = gpu.copy(params["direction"], params["host"], params["size"],
                               params["warmup"] + params["repeat"],
                               bufs[0].addr if bufs else 0, params["device"], engine, blocks,
                               threads)
        if link.highest:
            info["pcie"] = link.highest
        if bad:
            raise CheckError(f"{what}: {bad} of {moved} bytes were not what was copied")
        return checked_times(ns, f"gpu_copy: a copy of {params['size']} bytes")

    m = Measurement(kernel=f"gpu_copy_{params['direction']}_{engine}",
                    isa=f"sm_{dev['major']}{dev['minor']}", cpus=cpus,
                    units={"bandwidth": "GB/s", "time": "us"}, info=info)
    m = measure(m, params, bufs,
                timed_in_one_call(timed, lambda ns: {"bandwidth": moved / ns, "time": ns / 1e3}))
    if not bufs:        # the driver's memory: neither placed nor verified
        m.placement = unplaced(f"cudaHostAlloc ({params['host']})")
    return m
