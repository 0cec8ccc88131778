"""The tiering policies by name, in the order they are listed: the bounds, the static
placements, the online policies, and the kernel's own."""
from __future__ import annotations

from .base import Policy
from .bounds import AllFast, AllSlow
from .colloid import Colloid
from .first_touch import FirstTouch
from .hemem import HeMem
from .interleave import Interleave
from .linux import Linux
from .memtis import Memtis
from .oracle import Oracle
from .tpp import TPP

POLICIES: dict[str, type[Policy]] = {p.NAME: p for p in (
    AllFast, AllSlow, FirstTouch, Interleave, Oracle, HeMem, Memtis, TPP, Colloid, Linux)}


def knob_name(policy: str, knob: str) -> str:
    """A knob's option name: hemem's threshold is hemem_threshold."""
    return f"{policy.replace('-', '_')}_{knob}"


# Every policy's knobs by option name: (policy, knob, its Option).
KNOBS = {knob_name(p.NAME, k): (p.NAME, k, o) for p in POLICIES.values()
         for k, o in p.KNOBS.items()}


def get(name: str) -> type[Policy]:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"no tiering policy {name!r}; the policies are "
                         f"{', '.join(POLICIES)}") from None
