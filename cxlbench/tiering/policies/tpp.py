"""TPP-like (Maruf et al., ASPLOS'23, Linux's memory tiering): a slow page is promoted on
a second NUMA hint fault, i.e. when it was accessed in consecutive epochs, and the fast
node keeps a watermark free by demoting its least recently used pages."""
from __future__ import annotations

import math

import numpy as np

from ...options import Option
from .base import Epoch, Policy, first_touch, hottest, knob_table


class TPP(Policy):
    NAME = "tpp"
    DESCRIPTION = ("slow pages accessed hint_delay+1 epochs running promoted; least recently "
                   "used fast pages demoted to keep a watermark free")
    KNOBS = knob_table(
        Option("hint_delay", "int", 1, "earlier epochs running a slow page must have been "
               "accessed in, besides this one, to be promoted", "epochs", min=0),
        Option("watermark", "float", 0.02, "fraction of the fast capacity kept free",
               min=0, max=0.5))

    def __init__(self, pages: int, capacity: int, knobs: dict | None = None,
                 profile: np.ndarray | None = None):
        super().__init__(pages, capacity, knobs, profile)
        self.reserve = math.ceil(self.knobs["watermark"] * capacity)
        self.last = np.full(pages, -1, dtype=np.int64)      # epoch of the last access
        self.streak = np.zeros(pages, dtype=np.int64)       # epochs accessed, running

    def initial(self) -> np.ndarray:
        return first_touch(self.pages, self.capacity - self.reserve)

    def after(self, epoch: Epoch) -> np.ndarray:
        counts, fast = epoch.counts, epoch.fast.copy()
        accessed = counts > 0
        self.streak = np.where(accessed, self.streak + 1, 0)
        self.last[accessed] = epoch.index
        candidates = ~fast & (self.streak > self.knobs["hint_delay"])
        room = self.capacity - int(np.count_nonzero(fast))
        promoted = hottest(counts, candidates, room)
        fast[promoted] = True
        short = self.reserve - (self.capacity - int(np.count_nonzero(fast)))
        if short > 0:
            demotable = fast.copy()
            demotable[promoted] = False
            idx = np.flatnonzero(demotable)
            lru = idx[np.lexsort((idx, counts[idx], self.last[idx]))]
            fast[lru[:short]] = False
        return fast
