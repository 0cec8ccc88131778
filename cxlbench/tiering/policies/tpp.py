"""TPP-like (Maruf et al., ASPLOS'23, Linux's memory tiering): a slow page is promoted on
a second NUMA hint fault, i.e. when it was accessed in consecutive epochs, and the fast
node keeps a watermark free by demoting its least recently used pages, as kswapd does,
to make room for the promotions."""
from __future__ import annotations

import math

import numpy as np

from ...options import Option
from .base import (MAX_MOVE, Epoch, Policy, coldest, first_touch, hottest, knob_table,
                   move_budget, promote)


class TPP(Policy):
    NAME = "tpp"
    DESCRIPTION = ("slow pages accessed hint_delay+1 epochs running promoted, in place of "
                   "the least recently used fast pages; a watermark kept free")
    KNOBS = knob_table(
        Option("hint_delay", "int", 1, "earlier epochs running a slow page must have been "
               "accessed in, besides this one, to be promoted", "epochs", min=0),
        Option("watermark", "float", 0.02, "fraction of the fast capacity kept free",
               min=0, max=0.5),
        MAX_MOVE)

    def __init__(self, pages: int, capacity: int, knobs: dict | None = None,
                 profile: np.ndarray | None = None):
        super().__init__(pages, capacity, knobs, profile)
        self.usable = capacity - math.ceil(self.knobs["watermark"] * capacity)
        self.last = np.full(pages, -1, dtype=np.int64)      # epoch of the last access
        self.streak = np.zeros(pages, dtype=np.int64)       # epochs accessed, running

    def initial(self) -> np.ndarray:
        return first_touch(self.pages, self.usable)

    def after(self, epoch: Epoch) -> np.ndarray:
        counts, fast = epoch.counts, epoch.fast.copy()
        accessed = counts > 0
        self.streak = np.where(accessed, self.streak + 1, 0)
        self.last[accessed] = epoch.index
        # Least recently used first: the epoch of the last access, then this one's count.
        recency = self.last * (int(counts.max(initial=0)) + 1) + counts
        budget = move_budget(self.knobs["max_move"], self.capacity)
        # The watermark short (a demotion the engine could not make): kswapd's turn first.
        out = coldest(recency, fast, min(budget, int(np.count_nonzero(fast)) - self.usable))
        fast[out] = False
        # Then promotions, into the room below the watermark or for a less recent page.
        want = hottest(counts, ~epoch.fast & (self.streak > self.knobs["hint_delay"]), budget)
        promote(fast, self.usable, want, recency, epoch.fast, budget - len(out))
        return fast
