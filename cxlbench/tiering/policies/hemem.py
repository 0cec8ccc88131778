"""HeMem-like (Raybuck et al., SOSP'21): a page is hot once its accesses since the last
cooling stand out; hot slow pages are promoted, and cold fast pages demoted only to make
room for them, a bounded number of moves an epoch.

HeMem counts PEBS samples (one in 10007 accesses), so its absolute threshold of 8
samples is relative to that sampling rate. The counts here are exact, and an absolute
threshold would mean something else at every stream density (at 64 accesses a page an
epoch, nearly every page passes 8, none is left cold to give way, and the moves stop).
So the threshold is relative to the stream's density: a page is hot where its cooled
count is at least `threshold` times the mean cooled count per page, over all pages. The
counts cool exactly (as floats), so a stream scaled by any factor is placed alike."""
from __future__ import annotations

import numpy as np

from ...options import Option
from .base import (MAX_MOVE, Epoch, Heat, Policy, cooling_knob, first_touch, hottest,
                   knob_table, move_budget, promote)


class HeMem(Policy):
    NAME = "hemem"
    DESCRIPTION = ("pages with threshold times the mean page's accesses (halved every "
                   "cooling epochs) are hot; hot slow pages promoted, cold fast ones "
                   "demoted to make room")
    KNOBS = knob_table(
        Option("threshold", "float", 2.0, "a page is hot where its accesses since the last "
               "cooling are at least this many times the mean page's (HeMem's absolute 8 "
               "counts 1-in-10007 samples; exact counts need a threshold relative to the "
               "stream's density)", "x mean", min=0.01),
        cooling_knob(1), MAX_MOVE)
    HEAT_DTYPE: type = np.float64       # exact halving: the threshold is scale-free

    def __init__(self, pages: int, capacity: int, knobs: dict | None = None,
                 profile: np.ndarray | None = None):
        super().__init__(pages, capacity, knobs, profile)
        self.heat = Heat(pages, self.knobs["cooling"], self.HEAT_DTYPE)

    def initial(self) -> np.ndarray:
        return first_touch(self.pages, self.capacity)

    def after(self, epoch: Epoch) -> np.ndarray:
        self.heat.add(epoch.counts)
        counts, fast = self.heat.counts, epoch.fast.copy()
        hot = self.hot(counts)
        budget = move_budget(self.knobs["max_move"], self.capacity)
        # Victims are cold pages only: a hot page is never demoted for another.
        promote(fast, self.capacity, hottest(counts, hot & ~fast, budget), counts, ~hot, budget)
        self.heat.cool()
        return fast

    def hot(self, counts: np.ndarray) -> np.ndarray:
        """bool per page: those that belong on the fast node (MEMTIS picks them otherwise):
        accessed, and at least `threshold` times the mean page's cooled count."""
        mean = float(counts.mean()) if len(counts) else 0.0
        return (counts > 0) & (counts >= self.knobs["threshold"] * mean)
