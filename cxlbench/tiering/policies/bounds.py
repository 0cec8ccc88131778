"""The bounds every other policy lies between: all pages fast, and none."""
from __future__ import annotations

import numpy as np

from .base import Policy


class AllFast(Policy):
    NAME = "all-fast"
    DESCRIPTION = ("every page on the fast node: the upper bound (its capacity is the "
                   "whole buffer, share 1)")
    STATIC = True

    def initial(self) -> np.ndarray:
        return np.ones(self.pages, dtype=bool)


class AllSlow(Policy):
    NAME = "all-slow"
    DESCRIPTION = "every page on the slow node: the lower bound"
    STATIC = True

    def initial(self) -> np.ndarray:
        return np.zeros(self.pages, dtype=bool)
