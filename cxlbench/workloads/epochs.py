"""What the tiering engines ask of a workload, and the per-page counting its answers share.

A workload the engines can drive has an `Epochs` class in its module:
  Epochs(own, seed, epochs, phase)   own: its options (Epochs.OPTIONS' names, no prefix)
  TIERED, BUFFERS                    the tiered buffer's name; every buffer's, in order
  UNIT, RATE                         what an epoch does, and the unit and scale of its rate
  sizes(), epoch_bytes(), units()    bytes of each buffer; bytes and units of one epoch
  counts(epoch, pages, page)         each page's accesses in the epoch (exact, no sampling)
  waits(counts)                      the misses an epoch waits for, given its counts
  choose_isa(asked), prepare(buffers, isa, cpus), run(epoch) -> ns (checked)
  unused(own) (a classmethod)        its options this case ignores, each with why
  demand(epoch, page) (optional)     the epoch's Demand: what the calibrated model charges"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..memory import native

BASE_PAGE = 4096        # the page the calibration's random reads ran on

def pages_touched(first_byte: np.ndarray, nbytes, page: int) -> np.ndarray:
    """Per access at first_byte of nbytes (one size, or each access's): the index of every
    page it touches, all concatenated (an access over a page boundary counts on both)."""
    p0 = first_byte // page
    span = (first_byte + nbytes - 1) // page - p0 + 1
    if (span == 1).all():
        return p0
    return np.repeat(p0, span) + (np.arange(span.sum()) - np.repeat(np.cumsum(span) - span, span))


@dataclass
class Demand:
    """What one timed run of a workload asks of memory, for the tier model. Random
    accesses of `block` bytes each (rows, KV blocks; `blocks`: each access's bytes where
    they differ, a part-filled KV block's its tokens'), with, per access, its working set
    (working_sets; inf: from memory, whatever the footprint) and, where a buffer is
    tiered, the page it reads; and streamed bytes (read and written in address order, the
    optimizer's and checkpoint's), per tiered page where tiered. `floor`: the accesses are
    the embedding kernel's lookups of rows of `dim` elements of `dtype` on pages of `page`
    bytes, charged as its prefetched gathers cost where it prefetches `prefetch` rows
    ahead (0: as random reads), with its own work per row; `in_place`:
    the streamed writes go back to lines just read (no allocating read, the write-back off
    the thread's path); `kernel`: the streaming kernel whose own work a unit (calibrated
    on data the caches hold) a thread cannot beat however fast its streams ("adam-mixed")."""
    units: float
    block: int = 0
    reuse: np.ndarray | None = None         # bytes, per random access (working_sets)
    blocks: np.ndarray | None = None        # bytes, per random access, where not all `block`
    pages: np.ndarray | None = None         # tiered page per random access
    read: float = 0.0                       # streamed bytes read (all, untiered or tiered)
    write: float = 0.0
    stream_pages: np.ndarray | None = None  # per tiered page: its streamed bytes (the rest: fast)
    nt: bool = False
    floor: bool = False
    in_place: bool = False
    dtype: str = "fp32"
    dim: int = 0
    prefetch: int = 64
    page: int = BASE_PAGE
    kernel: str = ""


def working_sets(units: np.ndarray, nunits: int, unit_bytes: int, page: int,
                 footprint: float) -> np.ndarray:
    """Each access's working set in bytes, as a random read over that many bytes would
    have it: the data touched since its last access (its LRU stack distance in units,
    times their size: what the caches see), or, where larger, the pages of `page` bytes
    touched since its page's last access, times 4 KiB (what the TLB sees, an entry a page:
    the calibration's random reads were over 4 KiB pages; rows scattered over a big table
    each take a page of their own); a first access, and none beyond, the whole footprint
    the accesses are drawn from."""
    data = native.stack_distances(units, nunits).astype(np.float64) * unit_bytes
    first = units.astype(np.int64) * unit_bytes // page
    ids, dense = np.unique(first, return_inverse=True)
    pages = native.stack_distances(dense.ravel(), len(ids)).astype(np.float64) * BASE_PAGE
    ws = np.maximum(data, pages)
    ws[(data < 0) | (pages < 0)] = footprint
    return np.minimum(ws, footprint)
