"""MEMTIS-like (Lee et al., SOSP'23): HeMem's moves, but the hot threshold is not a knob:
it is read from a log2 histogram of the pages' counts, as low as lets the hot pages fit
the fast tier."""
from __future__ import annotations

import numpy as np

from .base import MAX_MOVE, cooling_knob, knob_table
from .hemem import HeMem


def hot_set(counts: np.ndarray, capacity: int) -> np.ndarray:
    """bool per page: those in the log2 bins (bin b: counts in [2^b, 2^(b+1)); a count of
    0 is in none) from the lowest bin whose pages and those of every bin above fit in
    `capacity`. Empty where the top bin alone does not fit."""
    nonzero = counts > 0
    # frexp's exponent is floor(log2) + 1, exact for counts below 2^53.
    bins = np.where(nonzero, np.frexp(counts.astype(np.float64))[1] - 1, -1)
    hist = np.bincount(bins[nonzero], minlength=1)
    above = np.append(np.cumsum(hist[::-1])[::-1], 0)    # pages in bins >= b
    threshold = int(np.argmax(above <= capacity))
    return nonzero & (bins >= threshold)


class Memtis(HeMem):
    NAME = "memtis"
    DESCRIPTION = ("the hot threshold from a log2 histogram of counts (halved every cooling "
                   "epochs), as low as fits; hot pages promoted, cold ones demoted for them")
    KNOBS = knob_table(cooling_knob(2), MAX_MOVE)
    HEAT_DTYPE = np.int64       # whole counts, halved rounding down, in log2 bins

    def hot(self, counts: np.ndarray) -> np.ndarray:
        # The hot set fits, so there are always enough cold fast pages to give way.
        return hot_set(counts, self.capacity)
