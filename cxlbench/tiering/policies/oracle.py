"""The best static placement, from hindsight: the whole run's hottest pages fast from
the start. No online policy knows the profile; it bounds what a static one can do."""
from __future__ import annotations

import numpy as np

from .base import Policy, hottest


class Oracle(Policy):
    NAME = "oracle"
    DESCRIPTION = ("the whole run's hottest pages fast from the start (needs its profile); "
                   "never moves")
    STATIC = True
    PROFILED = True

    def __init__(self, pages: int, capacity: int, knobs: dict | None = None,
                 profile: np.ndarray | None = None):
        super().__init__(pages, capacity, knobs, profile)
        if profile is None:
            raise ValueError("the oracle needs the run's profile (per-page counts)")
        if len(profile) != pages:
            raise ValueError(f"the profile has {len(profile)} pages, not {pages}")

    def initial(self) -> np.ndarray:
        fast = np.zeros(self.pages, dtype=bool)
        fast[hottest(np.asarray(self.profile), ~fast, self.capacity)] = True
        return fast
