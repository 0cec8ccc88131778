"""The two engines, one loop. Each epoch the workload runs on the placement (timed by its
C kernel in the real engine, predicted by the model in both), the policy sees the epoch's
exact per-page counts and says where pages go next, and the engine carries that out:
really (move_pages(2) in chunks, each chunk's coldest demotions before its hottest
promotions, promotions only into room the demotions made, every page's node read back
before every epoch) or on paper."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import CheckError
from ..memory import Buffer, move, node_map
from . import model
from .policies.base import Epoch, Policy, TierFigures

PINGPONG_WINDOW = 4     # epochs: a page moved back within this many counts as ping-pong
MOVE_CHUNK = 1024       # pages a move call, so a time box can stop between calls
SETTLE_S = (0.001, 0.01, 0.1, 1.0)  # waits for pages the kernel is migrating to land


@dataclass
class Outcome:
    """What one policy did at one share, epoch by epoch."""
    ns: list[float] = field(default_factory=list)          # each epoch: measured or modelled
    predicted: list[float] = field(default_factory=list)   # each epoch: the model's
    fast_hits: list[float] = field(default_factory=list)   # share of accesses on fast pages
    fast_share: list[float] = field(default_factory=list)  # share of pages on the fast node
    promoted: int = 0           # pages moved to the fast node (by Linux too, for its policy)
    demoted: int = 0
    move_ns: float = 0          # the move calls, timed in C (real) or at the migration rate
    unmoved: int = 0            # pages a move left where they were (busy, time box, room)
    start_unmoved: int = 0      # of the first placement, likewise (a full node, busy pages)
    drifted: int = 0            # pages found moved before an epoch by someone else (Linux)
    pingpong: int = 0           # pages moved back within PINGPONG_WINDOW epochs


class Pingpong:
    """The pages whose move went the other way from their last within the window."""

    def __init__(self, pages: int):
        self.when = np.full(pages, -1 << 30, dtype=np.int64)
        self.up = np.zeros(pages, dtype=bool)
        self.seen = np.zeros(pages, dtype=bool)

    def note(self, epoch: int, pages: np.ndarray, up: bool) -> None:
        back = pages[(epoch - self.when[pages] <= PINGPONG_WINDOW) & (self.up[pages] != up)]
        self.seen[back] = True
        self.when[pages], self.up[pages] = epoch, up

    @property
    def pages(self) -> int:
        return int(self.seen.sum())


class PlannedPages:
    """The model engine's pages_of: placements are whatever the policy says; a move costs
    its bytes at the migration rate."""

    def __init__(self, pages: int, page: int, migrate_gbs: float):
        self.fast = np.zeros(pages, dtype=bool)
        self.page, self.rate = page, migrate_gbs

    def apply(self, target: np.ndarray, order: np.ndarray, out: Outcome, capacity: int,
              boxed: bool = True) -> tuple[np.ndarray, np.ndarray]:
        up = np.flatnonzero(target & ~self.fast)
        down = np.flatnonzero(~target & self.fast)
        self.fast = target.copy()
        out.move_ns += (len(up) + len(down)) * self.page / self.rate
        return up, down

    def read(self) -> np.ndarray:
        return self.fast


class MovedPages:
    """The real engine's pages_of: the tiered buffer's pages moved between two nodes, within
    an optional time box per epoch, and read back before every epoch."""

    def __init__(self, buf: Buffer, fast_node: int, slow_node: int, budget_ns: float,
                 patient: bool = False):
        self.buf, self.nodes, self.budget = buf, (fast_node, slow_node), budget_ns
        self.patient = patient
        self.fast = self.read()

    def read(self) -> np.ndarray:
        """Each page on the fast node or not. `patient` (Linux's own tiering moving the
        pages): a page caught mid-migration, which move_pages(2) reports as not present,
        is read again after a wait until it lands."""
        where = node_map(self.buf)
        for wait in SETTLE_S if self.patient else ():
            if not (where < 0).any():
                break
            time.sleep(wait)
            where = node_map(self.buf)
        stray = np.flatnonzero((where != self.nodes[0]) & (where != self.nodes[1]))
        if len(stray):
            raise CheckError(f"tiering: page {int(stray[0])} of the {self.buf.name} buffer is "
                             f"on node {int(where[stray[0]])}, not on node {self.nodes[0]} or "
                             f"{self.nodes[1]} ({len(stray)} pages astray)")
        return where == self.nodes[0]

    def apply(self, target: np.ndarray, order: np.ndarray, out: Outcome, capacity: int,
              boxed: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Chunk by chunk, the coldest demotions then the hottest promotions (`order`:
        hottest first), a promotion only into room: a demotion refused (a busy page)
        keeps the fast tier within `capacity`. Stops at the first chunk after the time
        box is spent (where `boxed`: not for the first placement). Returns the pages that
        really moved each way, as read back."""
        down = order[::-1][~target[order[::-1]] & self.fast[order[::-1]]]
        up = order[target[order] & ~self.fast[order]]
        on_fast, spent, at = int(self.fast.sum()), 0, 0     # at: the next promotion
        for lo in range(0, max(len(down), len(up)), MOVE_CHUNK):
            if boxed and self.budget and spent >= self.budget:
                break
            if lo < len(down):
                r = move(self.buf, self.nodes[1], which=down[lo:lo + MOVE_CHUNK])
                spent += r.ns
                on_fast -= len(down[lo:lo + MOVE_CHUNK]) - len(r.failures)
            room = min(MOVE_CHUNK, capacity - on_fast, len(up) - at)
            if room > 0:        # the hottest waiting first, however many chunks it waited
                r = move(self.buf, self.nodes[0], which=up[at:at + room])
                spent += r.ns
                on_fast += room - len(r.failures)
                at += room
        out.move_ns += spent
        now = self.read()
        out.unmoved += int((now != target).sum())
        moved_up, moved_down = np.flatnonzero(now & ~self.fast), np.flatnonzero(~now & self.fast)
        self.fast = now
        return moved_up, moved_down


def drive(policy: Policy, workload, pages_of, counts: list[np.ndarray],
          tiers: tuple[TierFigures, TierFigures], mlp: float, threads: int,
          real: bool, predict=None) -> Outcome:
    """Run every epoch under the policy; the first placement is the policy's initial(),
    its moves not counted (nor timed). predict(epoch, fast) -> ns: the calibrated model's
    figure for an epoch on a placement; without it, the roofline of `tiers`."""
    out, pages = Outcome(), len(counts[0])
    pp = Pingpong(pages)
    first = policy.initial()
    check_capacity(policy, first)
    pages_of.apply(first, np.arange(pages), out, policy.capacity, boxed=False)
    out.start_unmoved, out.unmoved, out.move_ns = out.unmoved, 0, 0
    for e, c in enumerate(counts):
        drift(policy, pages_of, out, pp, e)
        fast = pages_of.fast
        out.fast_share.append(float(fast.mean()))
        access_bytes = workload.epoch_bytes() / max(1, int(c.sum()))
        predicted = predict(e, fast) if predict else model.epoch_ns(
            c, fast, tiers, access_bytes, mlp, threads, workload.waits(c) / max(1, int(c.sum())))
        ns = float(workload.run(e)) if real else predicted
        out.ns.append(ns)
        out.predicted.append(predicted)
        out.fast_hits.append(float(c[fast].sum()) / max(1, int(c.sum())))
        if e == len(counts) - 1 or policy.STATIC or policy.KERNEL:
            continue
        target = policy.after(Epoch(e, c, fast.copy(), ns, int(access_bytes), tiers))
        check_capacity(policy, target)
        up, down = pages_of.apply(target, np.argsort(-c, kind="stable"), out, policy.capacity)
        out.promoted += len(up)
        out.demoted += len(down)
        pp.note(e, up, True)
        pp.note(e, down, False)
    if policy.KERNEL:           # what Linux moved during the last epoch
        drift(policy, pages_of, out, pp, len(counts))
    out.pingpong = pp.pages
    return out


def drift(policy: Policy, pages_of, out: Outcome, pp: Pingpong, epoch: int) -> None:
    """Pages found moved since the engine last placed them: Linux's moves, counted as its
    policy's; under any other policy a placement not the policy's, which fails the case."""
    now = pages_of.read()
    moved = now != pages_of.fast
    if not moved.any():
        return
    out.drifted += int(moved.sum())
    if not policy.KERNEL:
        raise CheckError(
            f"tiering: {int(moved.sum())} pages were moved by someone else before epoch "
            f"{epoch} (NUMA balancing?): the placement measured would not be "
            f"{policy.NAME}'s (kernel.numa_balancing=0 keeps the kernel out)")
    up, down = np.flatnonzero(now & moved), np.flatnonzero(~now & moved)
    out.promoted += len(up)
    out.demoted += len(down)
    pp.note(epoch, up, True)
    pp.note(epoch, down, False)
    pages_of.fast = now


def check_capacity(policy: Policy, mask: np.ndarray) -> None:
    if mask.dtype != bool or len(mask) != policy.pages:
        raise AssertionError(f"policy {policy.NAME} returned {mask.dtype} x {len(mask)}, not "
                             f"bool x {policy.pages}")
    if mask.sum() > policy.capacity:
        raise AssertionError(f"policy {policy.NAME} put {int(mask.sum())} pages on the fast "
                             f"node, over its capacity of {policy.capacity}")
