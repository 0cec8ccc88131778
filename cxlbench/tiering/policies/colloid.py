"""Colloid-like (Vuppalapati and Agarwal, SOSP'24): place pages so that the two tiers'
loaded latencies balance, not so that the fast tier holds the hottest pages. A fast
tier near its bandwidth is slower than an idle slow one, so Colloid then moves hot
pages out of it. As in the paper, a page moves only where its accesses fit in what is
left to move (give or take the tolerance): one that would jump past the balance point,
to be moved back the next epoch, is skipped for a colder one."""
from __future__ import annotations

import numpy as np

from ...options import Option
from .base import (MAX_MOVE, Epoch, Policy, TierFigures, first_touch, hottest, knob_table,
                   loaded_latency, move_budget, promote)


def balance(fast: TierFigures, slow: TierFigures, offered_gbs: float) -> float:
    """The fraction p of the accesses on the fast tier at which both tiers' loaded
    latencies are equal; 1 where the fast one is still the lower with all of them, 0
    where it is the higher with none."""
    def gap(p: float) -> float:
        return loaded_latency(fast, p * offered_gbs) - loaded_latency(slow, (1 - p) * offered_gbs)
    if gap(1.0) <= 0:
        return 1.0
    if gap(0.0) >= 0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(50):     # gap rises with p
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) < 0 else (lo, mid)
    return (lo + hi) / 2


class Colloid(Policy):
    NAME = "colloid"
    DESCRIPTION = ("moves hot pages between tiers until their loaded latencies balance (each "
                   "tier's measured loaded-latency curve at the load it is offered; a "
                   "queueing guess only where no curve exists), each only where its "
                   "accesses fit in what is left to move")
    KNOBS = knob_table(
        MAX_MOVE,
        Option("tolerance", "float", 0.05, "fast-tier access share off the balance point "
               "that is left alone", min=0, max=1))

    def initial(self) -> np.ndarray:
        return first_touch(self.pages, self.capacity)

    def after(self, epoch: Epoch) -> np.ndarray:
        counts, fast = epoch.counts, epoch.fast.copy()
        total = int(counts.sum())
        if total == 0 or epoch.ns <= 0:
            return fast
        target = balance(*epoch.tiers, total * epoch.access_bytes / epoch.ns) * total
        gap = target - int(counts[fast].sum())      # accesses to bring onto the fast tier
        slack = self.knobs["tolerance"] * total
        if abs(gap) <= slack:
            return fast
        # Demoting is promoting onto the slow tier, which has room for every page.
        onto, room = (fast, self.capacity) if gap > 0 else (~fast, self.pages)
        promote(onto, room, hottest(counts, ~onto & (counts > 0), self.pages), counts, onto,
                move_budget(self.knobs["max_move"], self.capacity), abs(gap), slack)
        return onto if gap > 0 else ~onto
