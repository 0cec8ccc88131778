"""What Linux does without tiering: pages go to the fast node as they are first touched
until it is full, and stay where they landed."""
from __future__ import annotations

import numpy as np

from .base import Policy, first_touch


class FirstTouch(Policy):
    NAME = "first-touch"
    DESCRIPTION = "the first pages touched fast until the capacity is full; never moves"
    STATIC = True

    def initial(self) -> np.ndarray:
        return first_touch(self.pages, self.capacity)
