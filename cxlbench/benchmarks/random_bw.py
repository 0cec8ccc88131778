"""Random-access bandwidth: blocks of 64 B, 256 B or 4 KiB read in a random order, every
block once a pass, on pinned threads (each thread over its own slice)."""
from __future__ import annotations

from ..errors import UserError
from ..options import Option, pick
from . import bandwidth
from .common import cases_of_another, estimate_of_another

NAME = "random_bw"
TITLE = "Random-access bandwidth"
BUFFERS = ("src",)                  # the random_* kernels' one stream
DESCRIPTION = "random-access read bandwidth at a block granularity (GB/s)"
OPTIONS = {
    "granularity": Option("granularity", "int", 64, "bytes read at each random place",
                          "bytes", expand={"all": (64, 256, 4096)}),
    **pick("size", "threads", "cpus", "mem", "page", "isa", "repeat", "warmup", "tolerance",
           "timeout"),
    "passes": bandwidth.OPTIONS["passes"],
}
GRANULARITIES = (64, 256, 4096)


def _delegate(params: dict, topology=None):
    """The bandwidth case this is: kernel random_<granularity>."""
    g = params["granularity"]
    if g not in GRANULARITIES:
        raise UserError(f"random_bw: granularity {g} is not one of 64, 256, 4096")
    if params["size"] % g:
        raise UserError(f"random_bw: size {params['size']} is not a multiple of {g}")
    return bandwidth, {**params, "kernel": f"random_{g}"}


estimate = estimate_of_another(_delegate)
validate, run = cases_of_another(_delegate)
