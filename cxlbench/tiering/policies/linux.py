"""Linux's own memory tiering (NUMA balancing mode 2 with demotion): the kernel moves the
pages; the engine only places them first-touch and records what the kernel did."""
from __future__ import annotations

import numpy as np

from .base import Policy, first_touch

NUMA_BALANCING = "/proc/sys/kernel/numa_balancing"
DEMOTION = "/sys/kernel/mm/numa/demotion_enabled"


class Linux(Policy):
    NAME = "linux"
    DESCRIPTION = ("the kernel's NUMA-balancing tiering moves the pages (first-touch to "
                   "start); needs numa_balancing=2 and demotion enabled")
    KERNEL = True

    def initial(self) -> np.ndarray:
        return first_touch(self.pages, self.capacity)


def _read(path: str) -> tuple[str | None, str | None]:
    """(text, None), or (None, why it could not be read)."""
    try:
        with open(path) as f:
            return f.read().strip(), None
    except OSError as e:
        return None, f"cannot read {path}: {e.strerror or e}"


def unavailable() -> str | None:
    """Why the kernel's tiering cannot run here, or None where it can. The settings are
    the machine's: cxlbench reads them and never changes them."""
    reasons = []
    text, why = _read(NUMA_BALANCING)
    if why:
        reasons.append(why)
    else:
        try:
            mode = int(text)
        except ValueError:
            mode = 0
        if not mode & 2:
            reasons.append(f"kernel.numa_balancing is {text}, not 2 (memory tiering); "
                           "cxlbench never changes it")
    text, why = _read(DEMOTION)
    if why:
        reasons.append(why)
    elif text.lower() not in ("true", "1"):
        reasons.append(f"{DEMOTION} is {text}, not true (demotion to the slow node); "
                       "cxlbench never changes it")
    return "; ".join(reasons) or None
