"""HeMem-like (Raybuck et al., SOSP'21): a page is hot once its accesses since the last
cooling reach a threshold; hot slow pages are promoted, and cold fast pages demoted only
to make room for them, a bounded number of moves an epoch."""
from __future__ import annotations

import numpy as np

from ...options import Option
from .base import (MAX_MOVE, Epoch, Heat, Policy, cooling_knob, first_touch, hottest,
                   knob_table, move_budget, promote)


class HeMem(Policy):
    NAME = "hemem"
    DESCRIPTION = ("pages with threshold accesses (halved every cooling epochs) are hot; "
                   "hot slow pages promoted, cold fast ones demoted to make room")
    KNOBS = knob_table(
        Option("threshold", "int", 8, "accesses since the last cooling that make a page hot",
               min=1),
        cooling_knob(1), MAX_MOVE)

    def __init__(self, pages: int, capacity: int, knobs: dict | None = None,
                 profile: np.ndarray | None = None):
        super().__init__(pages, capacity, knobs, profile)
        self.heat = Heat(pages, self.knobs["cooling"])

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
        """bool per page: those that belong on the fast node (MEMTIS picks them otherwise)."""
        return counts >= self.knobs["threshold"]
