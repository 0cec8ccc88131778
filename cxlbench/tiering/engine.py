"""The two engines, one loop. Each epoch the workload runs on the placement (timed by its
C kernel in the real engine, predicted by the model in both), the policy sees the epoch's
exact per-page counts and says where pages go next, and the engine carries that out:
really (move_pages(2), demotions first to make room, promotions hottest first, every page
verified with a node map afterwards) or on paper."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import CheckError
from ..memory import Buffer, move, node_map
from . import model
from .policies.base import Epoch, Policy, Tier

PINGPONG_WINDOW = 4     # epochs: a page moved back within this many counts as ping-pong
MOVE_CHUNK = 1024       # pages a move call, so a time box can stop between calls


@dataclass
class Outcome:
    """What one policy did at one share, epoch by epoch."""
    ns: list[float] = field(default_factory=list)          # each epoch: measured or modelled
    predicted: list[float] = field(default_factory=list)   # each epoch: the model's
    fast_hits: list[float] = field(default_factory=list)   # share of accesses on fast pages
    promoted: int = 0           # pages moved to the fast node
    demoted: int = 0
    move_ns: int = 0            # the move calls, timed in C (real engine)
    unmoved: int = 0            # pages a move left where they were (busy, time box)
    start_unmoved: int = 0      # of the first placement, likewise (a full node, busy pages)
    pingpong: int = 0           # pages moved back within PINGPONG_WINDOW epochs
    fast_pages: int = 0         # most pages on the fast node at once


class Pingpong:
    """Counts pages whose last move went the other way within the window."""

    def __init__(self, pages: int):
        self.when = np.full(pages, -1 << 30, dtype=np.int64)
        self.up = np.zeros(pages, dtype=bool)

    def note(self, epoch: int, pages: np.ndarray, up: bool) -> int:
        back = int(((epoch - self.when[pages] <= PINGPONG_WINDOW)
                    & (self.up[pages] != up)).sum())
        self.when[pages], self.up[pages] = epoch, up
        return back


class Paper:
    """The model engine's hands: placements are whatever the policy says."""

    def __init__(self, fast: np.ndarray):
        self.fast = fast.copy()

    def apply(self, target: np.ndarray, order: np.ndarray, out: Outcome,
              boxed: bool = True) -> tuple:
        up = np.flatnonzero(target & ~self.fast)
        down = np.flatnonzero(~target & self.fast)
        self.fast = target.copy()
        return up, down


class Pages:
    """The real engine's hands: the tiered buffer's pages moved between two nodes, within
    an optional time box per epoch, and the placement read back after every epoch."""

    def __init__(self, buf: Buffer, fast_node: int, slow_node: int, page: int,
                 budget_ns: float):
        self.buf, self.nodes, self.page, self.budget = buf, (fast_node, slow_node), page, budget_ns
        self.fast = self.read()

    def read(self) -> np.ndarray:
        where = node_map(self.buf)
        stray = np.flatnonzero((where != self.nodes[0]) & (where != self.nodes[1]))
        if len(stray):
            raise CheckError(f"tiering: page {int(stray[0])} of the {self.buf.name} buffer is "
                             f"on node {int(where[stray[0]])}, not on node {self.nodes[0]} or "
                             f"{self.nodes[1]} ({len(stray)} pages astray)")
        return where == self.nodes[0]

    def apply(self, target: np.ndarray, order: np.ndarray, out: Outcome,
              boxed: bool = True) -> tuple:
        """Demotions first (they make the room), then promotions in `order`; stops between
        calls once the time box is spent (where `boxed`: not for the first placement).
        Returns the pages that really moved each way."""
        down = np.flatnonzero(~target & self.fast)
        up = order[target[order] & ~self.fast[order]]
        spent = 0
        for pages, node in ((down, self.nodes[1]), (up, self.nodes[0])):
            for lo in range(0, len(pages), MOVE_CHUNK):
                if boxed and self.budget and spent >= self.budget:
                    break
                r = move(self.buf, node, which=pages[lo:lo + MOVE_CHUNK])
                spent += r.ns
        out.move_ns += spent
        now = self.read()
        out.unmoved += int((now != target).sum())
        moved_up = np.flatnonzero(now & ~self.fast)
        moved_down = np.flatnonzero(~now & self.fast)
        self.fast = now
        return moved_up, moved_down


def drive(policy: Policy, workload, hands, counts: list[np.ndarray], tiers: tuple[Tier, Tier],
          mlp: float, real: bool) -> Outcome:
    """Run every epoch under the policy; the first placement is the policy's initial()."""
    out, pages = Outcome(), len(counts[0])
    pp = Pingpong(pages)
    first = policy.initial()
    check_capacity(policy, first)
    hands.apply(first, np.arange(pages), out, boxed=False)  # the start, not counted
    out.start_unmoved, out.unmoved, out.move_ns = out.unmoved, 0, 0
    for e, c in enumerate(counts):
        if policy.KERNEL:       # Linux moved pages meanwhile: where are they now
            hands.fast = hands.read()
        fast = hands.fast
        out.fast_pages = max(out.fast_pages, int(fast.sum()))
        access_bytes = workload.epoch_bytes() / max(1, int(c.sum()))
        predicted = model.epoch_ns(c, fast, tiers, access_bytes, mlp)
        ns = float(workload.run(e)) if real else predicted
        out.ns.append(ns)
        out.predicted.append(predicted)
        out.fast_hits.append(float(c[fast].sum()) / max(1, int(c.sum())))
        if e == len(counts) - 1 or policy.STATIC or policy.KERNEL:
            continue
        target = policy.after(Epoch(e, c, fast.copy(), ns, int(access_bytes), tiers))
        check_capacity(policy, target)
        up, down = hands.apply(target, np.argsort(-c, kind="stable"), out)
        out.promoted += len(up)
        out.demoted += len(down)
        out.pingpong += pp.note(e, up, True) + pp.note(e, down, False)
    return out


def check_capacity(policy: Policy, mask: np.ndarray) -> None:
    if mask.dtype != bool or len(mask) != policy.pages:
        raise AssertionError(f"policy {policy.NAME} returned {mask.dtype} x {len(mask)}, not "
                             f"bool x {policy.pages}")
    if policy.NAME != "all-fast" and mask.sum() > policy.capacity:
        raise AssertionError(f"policy {policy.NAME} put {int(mask.sum())} pages on the fast "
                             f"node, over its capacity of {policy.capacity}")
