"""Weighted interleave, as Linux's MPOL_WEIGHTED_INTERLEAVE spreads pages N:M over two
nodes: placement by address alone, blind to heat."""
from __future__ import annotations

import numpy as np

from ...options import Option
from .base import Policy, knob_table


class Interleave(Policy):
    NAME = "interleave"
    DESCRIPTION = ("pages spread fast:slow by weights (default: the capacity's own share, "
                   "evenly); never moves")
    STATIC = True
    KNOBS = knob_table(
        Option("fast_weight", "int", 0, "pages to the fast node per round; 0: auto, "
               "the capacity spread evenly", "pages", min=0, max=255),
        Option("slow_weight", "int", 1, "pages to the slow node per round (with "
               "fast_weight set)", "pages", min=1, max=255))

    def initial(self) -> np.ndarray:
        i = np.arange(self.pages, dtype=np.int64)
        n, m = self.knobs["fast_weight"], self.knobs["slow_weight"]
        if not n:
            # Page i is fast where i*c/p crosses an integer: exactly c pages, evenly.
            c, p = self.capacity, max(self.pages, 1)
            return (i + 1) * c // p > i * c // p
        fast = i % (n + m) < n
        fast[np.flatnonzero(fast)[self.capacity:]] = False   # the kernel falls back when full
        return fast
