"""TPP-like (Maruf et al., ASPLOS'23, Linux's memory tiering): a slow page is promoted on
a second NUMA hint fault, i.e. when it was accessed on the slow node in consecutive
epochs (a page just demoted must fault there again, hint_delay + 1 epochs, before it
comes back), and kswapd keeps a watermark free on the fast node by demoting pages from
its inactive LRU: those not accessed this epoch, least recently used first. A page
accessed this epoch is never demoted to keep the watermark, so where every fast page is
active the promotions may take the watermark's pages too (at share 1, every page ends
up fast); a promotion may also take the place of a less recently used fast page."""
from __future__ import annotations

import math

import numpy as np

from ...options import Option
from .base import (MAX_MOVE, Epoch, Policy, coldest, first_touch, hottest, knob_table,
                   move_budget, promote)


class TPP(Policy):
    NAME = "tpp"
    DESCRIPTION = ("slow pages accessed hint_delay+1 epochs running on the slow node "
                   "promoted, in place of the least recently used fast pages; inactive "
                   "fast pages demoted to keep a watermark free")
    KNOBS = knob_table(
        Option("hint_delay", "int", 1, "earlier epochs running a slow page must have been "
               "accessed in on the slow node, besides this one, to be promoted", "epochs",
               min=0),
        Option("watermark", "float", 0.02, "fraction of the fast capacity kept free by "
               "demoting inactive pages (not accessed in the epoch); active pages are "
               "never demoted for it", min=0, max=0.5),
        MAX_MOVE)

    def __init__(self, pages: int, capacity: int, knobs: dict | None = None,
                 profile: np.ndarray | None = None):
        super().__init__(pages, capacity, knobs, profile)
        self.usable = capacity - math.ceil(self.knobs["watermark"] * capacity)
        self.last = np.full(pages, -1, dtype=np.int64)      # epoch of the last access
        self.streak = np.zeros(pages, dtype=np.int64)       # epochs accessed slow, running

    def initial(self) -> np.ndarray:
        return first_touch(self.pages, self.usable)

    def after(self, epoch: Epoch) -> np.ndarray:
        counts, fast = epoch.counts, epoch.fast.copy()
        accessed = counts > 0
        # Hint faults are taken on the slow node only: time on the fast one breaks a run.
        self.streak = np.where(accessed & ~epoch.fast, self.streak + 1, 0)
        self.last[accessed] = epoch.index
        # Least recently used first: the epoch of the last access, then this one's count.
        recency = self.last * (int(counts.max(initial=0)) + 1) + counts
        budget = move_budget(self.knobs["max_move"], self.capacity)
        # kswapd: the watermark short (the promotions took it when nothing was inactive),
        # inactive fast pages demoted, least recently used first.
        short = int(np.count_nonzero(fast)) - self.usable
        out = coldest(recency, fast & ~accessed, min(budget, short))
        fast[out] = False
        # Promotions: into the room below the watermark, or, while the fast node has
        # inactive pages (kswapd would demote them for the room), in exchange for the
        # least recently used; only where every fast page is active, the watermark's room.
        room = self.usable if (fast & ~accessed).any() else self.capacity
        want = hottest(counts, self.streak > self.knobs["hint_delay"], budget)
        promote(fast, room, want, recency, epoch.fast, budget - len(out))
        return fast
