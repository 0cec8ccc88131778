"""What the tiering engines ask of a workload, and the per-page counting its answers share.

A workload the engines can drive has an `Epochs` class in its module:
  Epochs(own, seed, epochs, phase)   own: its options (Epochs.OPTIONS' names, no prefix)
  TIERED, BUFFERS                    the tiered buffer's name; every buffer's, in order
  UNIT, RATE                         what an epoch does, and the unit and scale of its rate
  sizes(), epoch_bytes(), units()    bytes of each buffer; bytes and units of one epoch
  counts(epoch, pages, page)         each page's accesses in the epoch (exact, no sampling)
  waits(counts)                      the misses an epoch waits for, given its counts
  choose_isa(asked), prepare(buffers, isa, cpus), run(epoch) -> ns (checked)
  unused(own) (a classmethod)        its options this case ignores, each with why"""
from __future__ import annotations

import numpy as np


def pages_touched(first_byte: np.ndarray, nbytes, page: int) -> np.ndarray:
    """Per access at first_byte of nbytes (one size, or each access's): the index of every
    page it touches, all concatenated (an access over a page boundary counts on both)."""
    p0 = first_byte // page
    span = (first_byte + nbytes - 1) // page - p0 + 1
    if (span == 1).all():
        return p0
    return np.repeat(p0, span) + (np.arange(span.sum()) - np.repeat(np.cumsum(span) - span, span))
