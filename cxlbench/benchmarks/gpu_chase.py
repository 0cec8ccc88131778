"""Device-memory latency by working set: one GPU thread chasing a random cycle through
`size` bytes of device memory, an element every `stride` bytes (128: a line each, so the
sweep shows L1, L2 and HBM; 2 MiB: one element a page, so it shows the TLBs' reach). Each
repetition is `hops` dependent loads, going on where the last stopped, after one untimed
walk of the cycle: ns a load from CUDA events around the launch, and cycles a load from
clock64() around the loop on the SM. The cycle's links are written by the device from an
order the host computes too, and the end is checked against where that order puts it."""
from __future__ import annotations

from .. import gpu
from ..errors import CheckError, UserError
from ..options import Option, pick
from .common import Measurement
from .gpu_stream import checked_times

NAME = "gpu_chase"
TITLE = "GPU memory latency"
BUFFERS = ()            # device memory, allocated by the library
DESCRIPTION = "GPU memory latency by working set, a random chase (ns and cycles a load)"


def sweep() -> tuple[int, ...]:
    """1 KiB to 4 GiB in steps of 2, and of sqrt(2) from 4 to 256 MiB, where the L2 of
    every current GPU ends (A100 40 MiB, H100 and H200 50, L40S 96): with steps of 2 alone,
    a 50 MiB L2 falls between 32 and 64 MiB and its edge is not seen."""
    halves = (int(2 ** (k + 0.5)) // 65536 * 65536 for k in range(22, 28))
    return tuple(sorted({1 << k for k in range(10, 33)} | set(halves)))


OPTIONS = {
    "size": Option("size", "size", 1 << 30, "bytes of device memory the cycle runs through",
                   "bytes", min=1024, multiple=8, expand={"sweep": sweep()}),
    "stride": Option("stride", "size", 128, "bytes between the chased elements (128: a "
                     "line each; 2M: a page each, for TLB reach)", "bytes", min=8,
                     multiple=8),
    "hops": Option("hops", "int", 20000, "dependent loads a repetition", min=1000,
                   max=1 << 40),
    "device": Option("device", "int", 0, "the CUDA device", min=0),
    **pick("repeat", "warmup", "timeout", repeat=10, warmup=1),
}


def skip(params: dict, topology) -> str | None:
    return gpu.unavailable()


def validate(params: dict, topology) -> None:
    if params["size"] < 2 * params["stride"]:
        raise UserError(f"gpu_chase: size={params['size']} holds fewer than two elements "
                        f"{params['stride']} bytes apart")
    gpu.check_device(params["device"])


def estimate(params: dict, figures=None) -> float:
    """Seconds of the case's own work: its warm walk and every repetition's loads at the
    assumed latency (gpu.ASSUMED)."""
    warm = min(params["size"] // params["stride"], gpu.CHASE_WARM_MAX)
    hops = warm + (params["warmup"] + params["repeat"]) * params["hops"]
    return hops * gpu.ASSUMED["load"]


def run(params: dict) -> Measurement:
    dev = gpu.device(params["device"])
    hops, warm = params["hops"], params["warmup"]
    ns, cycles, bad = gpu.chase(params["size"], params["stride"], hops,
                                warm + params["repeat"], params["device"])
    if bad:
        raise CheckError("gpu_chase: the GPU's chase ended elsewhere than the cycle's order "
                         "puts it")
    checked_times(ns, f"gpu_chase: {hops} loads")
    reps = [{"latency": t / hops, "cycles": c / hops} for t, c in zip(ns[warm:], cycles[warm:])]
    return Measurement(kernel="gpu_chase", isa=f"sm_{dev['major']}{dev['minor']}", cpus=[],
                       units={"latency": "ns", "cycles": "cycles"}, reps=reps,
                       info={"device": dev, "elements": params["size"] // params["stride"],
                             "hops": hops})
