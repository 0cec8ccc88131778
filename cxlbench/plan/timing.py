"""The host's memory-bound work in a planned job, and its predicted time from the calibrated
tier model (tiering/model.predict_ns) with any share of it on the slow tier. Each item is
what one of cxlbench's workloads measures, so each prediction can be checked against the
kernel (plan/check.py):

- the optimizer step on the CPU (offloaded state): every array streamed once, in place;
- embedding lookups: a random row read from memory per lookup forward, again backward, and
  the row written back (the tables far beyond the caches: hot rows the caches would hold
  are not credited, so this bounds the time from above); the hottest rows on the fast tier;
- a decode step over a host-resident KV-cache: every block of every sequence read, the
  attention computed where the cache is (on the CPUs), the new token's K and V written;
- the checkpoint's staging copy, written with streaming stores, once a checkpoint;
- copies between host and GPU (offload) at the link's rate, or the host tier's if lower."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..tiering import model
from ..workloads.epochs import Demand
from .footprint import MOMENTS, Part, kv_token_bytes, stage_layers
from .job import DTYPE_BYTES, Job
from .tiers import Machine

SAMPLE = 1 << 16        # random accesses the model charges; the rest scale with them
# One GPU's host link: assumed, and said so (measured GPU copies are not read yet).
LINK_GBS = 53.0
LINK_SOURCE = ("assumed: PCIe 5.0 x16, 64 GB/s a direction on the wire (32 GT/s x 16 "
               "lanes, 128b/130b), of which pinned copies reach about 83 %")


@dataclass(frozen=True)
class Work:
    name: str
    parts: tuple[str, ...]      # the parts it reads and writes (its placement is theirs)
    per: str                    # "step", "decode step" or "checkpoint"
    formula: str
    demand: Callable[[float], tuple[Demand, np.ndarray, float]]
    link_bytes: float = 0.0     # bytes one GPU's link carries for it (0: none)

    def ns(self, machine: Machine, fast_share: float) -> float:
        """Predicted ns with `fast_share` of its bytes on the fast tier, the rest slow."""
        d, fast, scale = self.demand(fast_share)
        host = model.predict_ns(d, tuple(t.cal for t in machine.host), machine.threads,
                                fast=fast) * scale
        return max(host, self.link_bytes / LINK_GBS)


def _split(units: int, fast_share: float) -> tuple[np.ndarray, np.ndarray]:
    """Pages for `units` accesses, the first fast_share of them on page 0 (fast)."""
    pages = (np.arange(units) >= round(fast_share * units)).astype(np.int64)
    return pages, np.array([True, False])


def _streamed(read: float, write: float, fast_share: float, nt=False, in_place=False):
    streamed = read + write
    return (Demand(units=1, read=read, write=write, nt=nt, in_place=in_place,
                   stream_pages=np.array([fast_share, 1 - fast_share]) * streamed),
            np.array([True, False]), 1.0)


def _gathers(lookups: float, row: int, written: float, on_fast: Callable[[float], float]):
    """`lookups` random reads of `row` bytes from memory (a sample charged, scaled), and
    `written` bytes streamed back, on_fast(share) of them on the fast tier."""
    k = int(min(max(lookups, 1), SAMPLE))

    def demand(fast_share: float):
        hit = on_fast(fast_share)
        pages, fast = _split(k, hit)
        w = written * k / lookups
        return (Demand(units=k, block=row, reuse=np.full(k, np.inf), pages=pages, write=w,
                       stream_pages=np.array([hit, 1 - hit]) * w),
                fast, lookups / k)
    return demand


def hot_share(byte_share: float, rows: int, skew: float) -> float:
    """Of Zipf(skew) lookups over `rows` rows, the share that hits the hottest byte_share
    of them: H(m) / H(rows), H the generalized harmonic number (its integral form)."""
    def h(x: float) -> float:
        x = max(x, 0.0)
        if x < 1:
            return x
        return 1 + (math.log(x) if abs(skew - 1) < 1e-9 else (x ** (1 - skew) - 1) / (1 - skew))
    return h(byte_share * rows) / h(rows) if rows else 0.0


OPTIMIZER, PARAMS, LOOKUPS, DECODE, STAGING = (
    "optimizer step (CPU)", "parameters to the GPU", "embedding lookups", "KV decode step",
    "checkpoint staging copy")
# The benchmark whose checked cases say how far to trust each work's time (a copy's
# streams are the checkpoint's).
CHECKED_BY = {OPTIMIZER: "optimizer", PARAMS: "checkpoint", LOOKUPS: "embedding",
              DECODE: "kvcache", STAGING: "checkpoint"}


def host_bytes(job: Job, part: Part) -> float:
    """A host part's bytes on one host: each of its ranks' copy, but one set of embedding
    tables a host (the model's, not a rank's)."""
    return part.bytes if part.name == "embedding tables" else part.bytes * job.host_ranks


def works(job: Job, parts: list[Part], stage: int = 0) -> list[Work]:
    """The host's memory-bound work for the host-side parts (of pipeline stage `stage`),
    for one host (its ranks')."""
    host = {p.name: host_bytes(job, p) for p in parts if p.where == "host"}
    r = job.host_ranks
    out = []
    if "optimizer moments" in host:
        k = MOMENTS[job.optimizer]
        n = host["optimizer moments"] // (4 * k)
        read, write = n * (8 + 4 * k), n * (4 + 4 * k)     # grad, weights, states; in place
        out.append(Work(
            OPTIMIZER, ("master weights", "optimizer moments", "host gradients"),
            "step", f"{n / 1e9:.2f} G parameters on {r} rank{'s' if r > 1 else ''}' host "
            f"state: {8 + 4 * k} B read, {4 + 4 * k} B written a parameter, in place",
            lambda f: _streamed(read, write, f, in_place=True),
            link_bytes=2 * DTYPE_BYTES[job.dtype] * n / r))
    passes = 2 if job.train else 1      # forward and backward, or forward alone
    if "parameters" in host:
        b = host["parameters"]
        out.append(Work(PARAMS, ("parameters",), "step",
                        f"each rank's parameters read {'twice' if job.train else 'once'} a "
                        "step and sent over its link",
                        lambda f: _streamed(passes * b, 0, f, nt=True),
                        link_bytes=passes * b / r))
    if "embedding tables" in host:
        row = job.table_dim * DTYPE_BYTES[job.table_dtype]
        pooling = job.pooling or (1,) * len(job.tables)
        lookups = job.micro_batch * job.micro_batches * r * sum(pooling)

        def on_fast(share: float) -> float:
            return sum(p * hot_share(share, rows, job.table_zipf)
                       for p, rows in zip(pooling, job.tables)) / sum(pooling)
        out.append(Work(LOOKUPS, ("embedding tables",), "step",
                        f"{lookups:,} lookups a step of {row} B rows, "
                        + ("read forward and backward and written back" if job.train else
                           "read once") + f"; Zipf {job.table_zipf:g}, the hottest rows on "
                        "the fast tier",
                        _gathers(passes * lookups, row, lookups * row if job.train else 0,
                                 on_fast)))
    if "KV-cache" in host:
        token, layers = kv_token_bytes(job, stage), stage_layers(job, stage)
        block = token // (2 * layers) * job.kv_block   # a layer's K or V
        # every sequence reads all its blocks, a shared prefix's too (their one copy is
        # read once a sequence)
        reads = r * job.micro_batch * -(-job.context // job.kv_block) * 2 * layers
        out.append(Work(DECODE, ("KV-cache",), "decode step",
                        f"{reads:,} blocks of {block} B read a step, every block of each of "
                        f"the {job.micro_batch} sequence{'s' if job.micro_batch > 1 else ''}"
                        ", from memory; a token each written",
                        _gathers(reads, block, r * token * job.micro_batch, lambda s: s)))
    if "checkpoint staging" in host:
        b = host["checkpoint staging"]
        local = "optimizer moments" in host     # the states are in host memory: a copy
        out.append(Work(STAGING, ("checkpoint staging",), "checkpoint",
                        f"{b / 2 ** 30:.1f} GiB written with streaming stores"
                        + (", read from the host's state" if local else
                           ", from the GPUs over their links"),
                        lambda f: _streamed(b if local else 0, b, f, nt=True),
                        link_bytes=0 if local else b / r))
    return out
