"""What a tiering policy sees and returns. A policy is pure: from each epoch's exact
per-page access counts and the placement now, it says which pages should sit on the fast
node next, within the fast tier's capacity. The engines (real: pages moved with
move_pages(2) and verified; model: placement only) do the moving, timing and checking, so
one policy runs on both, and on synthetic streams in the tests."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...options import Option


@dataclass(frozen=True)
class TierFigures:
    """What is known of one tier's memory: its idle read latency and its read bandwidth
    (where the figures came from is the engine's business, and recorded there), and
    where a catalogue run measured it, its loaded-latency curve: (GB/s of load, ns of
    latency under it) points, the load rising and the latency never falling."""
    latency_ns: float
    bandwidth: float            # GB/s (bytes per ns)
    curve: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class Epoch:
    """One epoch as the policy learns of it, after it ran."""
    index: int                  # 0, 1, ...
    counts: np.ndarray          # int64 per page: accesses this epoch, exact
    fast: np.ndarray            # bool per page: on the fast node during it (verified)
    ns: float                   # its time (measured by the real engine, predicted by the model)
    access_bytes: int           # bytes one access reads (a row, a block...)
    tiers: tuple[TierFigures, TierFigures]    # fast, slow


class Policy:
    """Subclasses set NAME, DESCRIPTION and KNOBS (their options, named without a prefix:
    the benchmark offers them as <name>_<knob>, e.g. hemem_threshold), and override
    initial() and, if they move pages, after()."""
    NAME: ClassVar[str]
    DESCRIPTION: ClassVar[str]
    KNOBS: ClassVar[dict[str, Option]] = {}
    STATIC: ClassVar[bool] = False      # never moves a page after the first epoch
    PROFILED: ClassVar[bool] = False    # needs the whole run's counts up front (an oracle)
    KERNEL: ClassVar[bool] = False      # Linux places the pages; the engine only watches

    def __init__(self, pages: int, capacity: int, knobs: dict | None = None,
                 profile: np.ndarray | None = None):
        """pages: the tiered buffer's pages, in the order they were first touched (the
        workload fills them by address). capacity: how many may sit on the fast node.
        knobs: this policy's KNOBS by short name (defaults where missing). profile: the
        whole run's per-page counts, given to PROFILED policies only."""
        if not 0 <= capacity <= pages:
            raise ValueError(f"capacity {capacity} is not within 0..{pages} pages")
        self.pages, self.capacity = pages, capacity
        self.knobs = {k: o.default for k, o in self.KNOBS.items()} | dict(knobs or {})
        self.profile = profile

    def initial(self) -> np.ndarray:
        """bool per page: the placement before the first epoch."""
        raise NotImplementedError

    def after(self, epoch: Epoch) -> np.ndarray:
        """bool per page: the placement for the next epoch (at most `capacity` True)."""
        return epoch.fast.copy()


def first_touch(pages: int, capacity: int) -> np.ndarray:
    """Fast until full, then slow: where an unmanaged kernel leaves pages filled in order."""
    fast = np.zeros(pages, dtype=bool)
    fast[:capacity] = True
    return fast


def hottest(scores: np.ndarray, among: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k highest-scoring pages where `among` is True, hottest first (ties:
    lower page first, so results are deterministic)."""
    idx = np.flatnonzero(among)
    if k <= 0 or not len(idx):
        return idx[:0]
    order = np.lexsort((idx, -scores[idx].astype(np.float64)))
    return idx[order[:k]]


def coldest(scores: np.ndarray, among: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k lowest-scoring pages where `among` is True, coldest first (ties:
    lower page first)."""
    return hottest(-np.asarray(scores, dtype=np.float64), among, k)


def knob_table(*options: Option) -> dict[str, Option]:
    """KNOBS from options, keyed by their names."""
    return {o.name: o for o in options}


MAX_MOVE = Option("max_move", "int", 0, "pages moved per epoch, promotions plus demotions; "
                  "0: an eighth of the fast capacity, at least 2", "pages", min=0)


def cooling_knob(default: int) -> Option:
    return Option("cooling", "int", default, "epochs between halvings of every page's count",
                  "epochs", min=1)


def move_budget(max_move: int, capacity: int) -> int:
    """Pages a policy may move in one epoch: max_move, or for 0 an eighth of the capacity,
    at least the two moves of one swap (else a full fast tier would never change)."""
    return max_move or max(2, capacity // 8)


class Heat:
    """Per-page counts that accumulate and halve every `cooling` epochs, so that old
    accesses fade (HeMem's and MEMTIS's cooling). Integer counts halve rounding down;
    float ones exactly, so that a stream scaled by any factor cools alike."""

    def __init__(self, pages: int, cooling: int, dtype: type = np.int64):
        self.counts = np.zeros(pages, dtype=dtype)
        self.cooling, self.epochs = cooling, 0

    def add(self, counts: np.ndarray) -> None:
        self.counts += counts

    def cool(self) -> None:
        """Called once an epoch, after the policy decided on its counts."""
        self.epochs += 1
        if self.epochs % self.cooling == 0:
            if self.counts.dtype.kind == "f":
                self.counts /= 2
            else:
                self.counts //= 2


def promote(fast: np.ndarray, capacity: int, want: np.ndarray, scores: np.ndarray,
            demotable: np.ndarray, budget: int, gap: float = math.inf,
            slack: float = 0.0) -> list[tuple[int, int]]:
    """Moves the slow pages `want` (in the order to promote them) onto the fast node in the
    mask `fast`, changed in place: into free room while there is some, then each in
    exchange for the coldest `demotable` fast page, of a lower score than its own, while
    `budget` moves last (a promotion or a demotion is one each). A page is taken only
    where the score it brings (its own, less its victim's) fits in what remains of `gap`
    give or take `slack`, skipping those that would overshoot further, until what remains
    is within `slack`. Returns the moves made: (page promoted, page demoted for it or -1)."""
    free = capacity - int(np.count_nonzero(fast))
    victims = coldest(scores, demotable & fast, len(want)).tolist()
    used, moves = 0, []
    for page in want.tolist():
        victim = -1 if free > 0 else victims[used] if used < len(victims) else None
        if (victim is None or budget < (1 if victim < 0 else 2) or gap <= slack
                or (victim >= 0 and scores[victim] >= scores[page])):
            break       # the pages come colder, the victims hotter: none later would do
        brings = scores[page] - (scores[victim] if victim >= 0 else 0)
        if brings > gap + slack:
            continue    # too far past the target: a colder page may fit
        gap -= brings
        fast[page] = True
        if victim >= 0:
            fast[victim] = False
            used, budget = used + 1, budget - 1
        else:
            free -= 1
        budget -= 1
        moves.append((page, victim))
    return moves


def queueing(tier: TierFigures, offered_gbs: float) -> float:
    """How much a load stretches latency: 1 / (1 - utilisation), the utilisation capped at
    0.95 so that an overloaded tier is slow (20x) but finite."""
    return 1.0 / (1.0 - min(0.95, offered_gbs / tier.bandwidth))


def loaded_latency(tier: TierFigures, offered_gbs: float) -> float:
    """A tier's latency under `offered_gbs` of load. From its measured curve where it has
    one: between its points, linearly (below the first, the first's). Past its last point
    (the load generators may not have reached the tier's bandwidth), the queueing curve
    from there on, and past the tier's bandwidth, stretched in proportion to the load too
    (a saturated tier serves no more: by Little's law each access waits that much
    longer). Without a curve, the idle latency stretched by the queueing curve."""
    if not tier.curve:
        return tier.latency_ns * queueing(tier, offered_gbs)
    gbs, ns = zip(*tier.curve)
    if offered_gbs <= gbs[-1]:
        return float(np.interp(offered_gbs, gbs, ns))
    stretched = ns[-1] * queueing(tier, offered_gbs) / queueing(tier, gbs[-1])
    return stretched * max(1.0, offered_gbs / tier.bandwidth)
