"""Where each part of a planned job lives, and why: the GPU's parts on the GPU (checked to
fit), the host's on DRAM first and the slow tier after, the part that loses most time a
byte on the slow tier placed first (the checkpoint's staging copy, touched once a
checkpoint, last); then each piece of host work's predicted time as placed, beside all in
DRAM and all on the slow tier."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .balance import Option, options
from .footprint import Part, footprint, heaviest_stage, shown_stages, within_bounds
from .job import Job
from .timing import Work, host_bytes, works
from .tiers import Machine

SHARES = np.linspace(0.0, 1.0, 11)      # the slow tier's share of host state, for the curve
BETTER = 0.03                           # a split named where it beats the placement by this


@dataclass(frozen=True)
class Placed:
    part: Part
    total: float        # bytes: on one GPU (gpu parts) or one host (host parts, all its ranks)
    fast: float         # of a host part: bytes in DRAM,
    slow: float         # on the slow tier,
    short: float        # and that no tier had room for
    reason: str
    order: int = -1     # of a host part, its turn in the placement (0: first)


@dataclass(frozen=True)
class Timed:
    work: Work
    share: float        # of its bytes, the share in DRAM as placed
    ns: float | None    # predicted as placed (None: not calibrated here)
    fast_ns: float | None
    slow_ns: float | None
    best: tuple[float, float] | None = None     # (DRAM share, ns) beating the placement



@dataclass
class Plan:
    job: Job
    machine: Machine
    placed: list[Placed]
    timed: list[Timed]
    curve: list[tuple[float, float]] = field(default_factory=list)  # (slow share, ns a step)
    step_slow: float = 0.0      # of the step work's bytes, the share on the slow tier
    stage: int = 0              # the pipeline stage planned: the one that decides the fit
    stages: dict[int, list[Part]] = field(default_factory=dict)     # shown_stages' parts
    balancing: list[Option] = field(default_factory=list)   # ways to even the stages out

    @property
    def gpu_total(self) -> float:
        return sum(p.total for p in self.placed if p.part.where == "gpu")

    @property
    def gpu_fits(self) -> bool | None:
        return None if self.machine.gpu is None else self.gpu_total <= self.machine.gpu

    def host(self, tier: str) -> float:
        """Host bytes in DRAM, on the slow tier, or (short) on neither."""
        key = {"DRAM": "fast", "slow": "slow", "short": "short"}[tier]
        return sum(getattr(p, key) for p in self.placed if p.part.where == "host")


def ratio(fast: float, slow: float) -> str:
    """An interleave's weights, DRAM:slow, in percent (never 0 for a tier that has some)."""
    a = max(1, round(100 * fast / (fast + slow)))
    return f"{min(a, 99)}:{100 - min(a, 99)}"


def _better(work: Work, machine: Machine, share: float, ns: float) -> tuple | None:
    """A smaller DRAM share the model finds faster than the placement by over BETTER
    (both tiers' bandwidth at once: interleaving can beat DRAM alone)."""
    shares = [s for s in SHARES if s < share]
    if not shares or work.per == "checkpoint":
        return None
    best = min(((work.ns(machine, float(s)), float(s)) for s in shares))
    return (best[1], best[0]) if best[0] < ns * (1 - BETTER) else None


def plan(job: Job, machine: Machine) -> Plan:
    stage = heaviest_stage(job)
    parts = within_bounds(job, stage)
    items = works(job, parts, stage)
    home = {name: w for w in items for name in w.parts}
    sizes = {p.name: host_bytes(job, p) for p in parts if p.where == "host"}

    def cost(p: Part) -> tuple:
        """Checkpoints last; then the most time lost a byte on the slow tier first."""
        w = home.get(p.name)
        if w is None or not machine.timed:
            return (w is not None and w.per == "checkpoint", 0.0)
        own = max(sum(sizes.get(n, 0) for n in w.parts), 1.0)
        return (w.per == "checkpoint", -(w.ns(machine, 0.0) - w.ns(machine, 1.0)) / own)

    room = [t.capacity for t in machine.host]
    placed = []
    for p in sorted((p for p in parts if p.where == "host"), key=cost):   # placement order
        b = sizes[p.name]
        fast = min(b, max(room[0], 0.0))
        slow = min(b - fast, max(room[1], 0.0))
        room = [room[0] - fast, room[1] - slow]
        if fast == b:
            why = "fits in DRAM"
        elif fast == 0:
            why = "DRAM is full: " + ("all on the slow tier" if slow == b - fast else
                                      f"{slow / b:.0%} on the slow tier")
        else:
            why = (f"DRAM is full: {slow / b:.0%} on the slow tier, interleaved "
                   f"{ratio(fast, slow)} (DRAM:slow)")
        if b - fast - slow > 0:
            why += f"; {(b - fast - slow) / 2 ** 30:.1f} GiB fit nowhere"
        placed.append(Placed(p, b, fast, slow, b - fast - slow, why, len(placed)))
    placed += [Placed(p, p.bytes, 0.0, 0.0, 0.0, "on the GPU") for p in parts
               if p.where == "gpu"]
    placed.sort(key=lambda x: parts.index(x.part))      # the footprint's order
    by_name = {p.part.name: p for p in placed}
    timed = []
    step_bytes = [0.0, 0.0]
    for w in items:
        own = [by_name[n] for n in w.parts if n in by_name]
        total = max(sum(p.total for p in own), 1.0)
        # bytes that fit nowhere are charged as the slow tier's (the plan says they do not fit)
        share = sum(p.fast for p in own) / total
        if w.per != "checkpoint":
            step_bytes = [step_bytes[0] + total - total * share, step_bytes[1] + total]
        if machine.timed:
            ns = w.ns(machine, share)
            timed.append(Timed(w, share, ns, w.ns(machine, 1.0), w.ns(machine, 0.0),
                               _better(w, machine, share, ns)))
        else:
            timed.append(Timed(w, share, None, None, None))
    curve = []
    if machine.timed:
        steps = [w for w in items if w.per != "checkpoint"]
        curve = [(float(s), sum(w.ns(machine, 1.0 - s) for w in steps)) for s in SHARES]
    return Plan(job, machine, placed, timed, curve,
                step_bytes[0] / step_bytes[1] if step_bytes[1] else 0.0, stage,
                {s: footprint(job, s) for s in shown_stages(job, stage)} if job.pp > 1 else {},
                options(job, machine))
