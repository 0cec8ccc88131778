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
    accesses of `block` bytes each (rows, KV blocks), with, per access, its reuse distance
    (bytes of other data touched since its last access, by an exact LRU stack; inf for a
    first access) and, where a buffer is tiered, the page it reads; and streamed bytes (read
    and written in address order, the optimizer's and checkpoint's), per tiered page where
    tiered. `floor`: charge the embedding kernel's own work per access."""
    units: float
    block: int = 0
    reuse: np.ndarray | None = None         # bytes, per random access
    pages: np.ndarray | None = None         # tiered page per random access
    read: float = 0.0                       # streamed bytes read (all, untiered or tiered)
    write: float = 0.0
    stream_pages: np.ndarray | None = None  # per tiered page: its streamed bytes (the rest: fast)
    nt: bool = False
    floor: bool = False


def reuse_bytes(units: np.ndarray, nunits: int, unit_bytes: int) -> np.ndarray:
    """Each access's LRU reuse distance in bytes over the stream of unit ids (inf for a
    first access): the distinct units touched since its last access, times their size."""
    d = native.stack_distances(units, nunits).astype(np.float64)
    d[d < 0] = np.inf
    return d * unit_bytes
