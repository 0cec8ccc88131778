"""Tiering policies on synthetic access streams whose right answers are known: pure
functions of counts, so no engine, machine or compiled core is needed."""
import math
import re

import numpy as np
import pytest

from cxlbench.tiering.policies import POLICIES, base, colloid, get, linux, memtis
from cxlbench.tiering.policies.base import Epoch, TierFigures

FAST, SLOW = TierFigures(80.0, 100.0), TierFigures(250.0, 25.0)


def epoch(index, counts, fast, ns=None, access_bytes=64, tiers=(FAST, SLOW)):
    """An Epoch whose arrays are read-only, so a policy that writes to them fails."""
    counts = np.array(counts, dtype=np.int64)
    fast = np.array(fast, dtype=bool)
    counts.flags.writeable = fast.flags.writeable = False
    # Default: light load (1 access per 1000 ns), where the fast tier is the better.
    ns = float(counts.sum()) * 1000 + 1 if ns is None else ns
    return Epoch(index, counts, fast, ns, access_bytes, tiers)


def make(name, pages, capacity, profile=None, **knobs):
    cls = get(name)
    return cls(pages, capacity, knobs, profile=profile if cls.PROFILED else None)


def run(policy, stream, **kw):
    """Masks: the initial placement, then the one after each epoch of the stream."""
    masks = [policy.initial()]
    for i, counts in enumerate(stream):
        masks.append(policy.after(epoch(i, counts, masks[-1], **kw)))
    return masks


def moves(masks):
    """Pages moved between consecutive placements."""
    return [int(np.count_nonzero(a != b)) for a, b in zip(masks, masks[1:])]


def cost(masks, stream):
    """Accesses served by the slow tier: each epoch's counts on the pages slow during it."""
    return int(sum(counts[~fast].sum() for counts, fast in zip(stream, masks)))


def stationary(rng, pages, hot, epochs, hot_rate=20.0, cold_rate=0.2):
    rates = np.full(pages, cold_rate)
    rates[hot] = hot_rate
    return [rng.poisson(rates) for _ in range(epochs)]


def random_stream(rng, pages, epochs):
    """Skewed counts whose hot pages move about: every policy's moves get exercised."""
    out = []
    for _ in range(epochs):
        rates = rng.pareto(1.2, pages) * rng.choice([0.1, 1, 10])
        out.append(rng.poisson(np.minimum(rates, 1e4)))
    return out


def test_registry_order_and_names():
    assert list(POLICIES) == ["all-fast", "all-slow", "first-touch", "interleave", "oracle",
                              "hemem", "memtis", "tpp", "colloid", "linux"]
    for name, cls in POLICIES.items():
        assert cls.NAME == name and cls.DESCRIPTION
        assert get(name) is cls
        for short, opt in cls.KNOBS.items():
            assert opt.name == short
            assert opt.convert(opt.default) == opt.default


def test_get_unknown_lists_the_names():
    with pytest.raises(ValueError, match="no tiering policy 'lru'.*all-fast.*hemem.*linux"):
        get("lru")


@pytest.mark.parametrize("name", list(POLICIES))
@pytest.mark.parametrize("pages,capacity", [(200, 30), (64, 64), (50, 0), (1, 1)])
def test_masks_respect_capacity_on_random_streams(name, pages, capacity):
    rng = np.random.default_rng([list(POLICIES).index(name), pages, capacity])
    if name == "all-fast":
        capacity = pages            # what the engines give it
    stream = random_stream(rng, pages, 40)
    policy = make(name, pages, capacity, profile=np.sum(stream, axis=0))
    fast = policy.initial()
    limit = capacity
    for i, counts in enumerate(stream):
        assert fast.dtype == bool and fast.shape == (pages,)
        assert np.count_nonzero(fast) <= limit
        # Load from idle to far past either tier's bandwidth (colloid's both branches).
        ns = float(counts.sum()) * 64 / rng.choice([0.01, 20, 500]) + 1
        e = epoch(i, counts, fast, ns=ns)
        before = e.counts.copy(), e.fast.copy()
        fast = policy.after(e)
        assert fast is not e.fast
        assert np.array_equal(e.counts, before[0]) and np.array_equal(e.fast, before[1])
    assert np.count_nonzero(fast) <= limit


def test_bounds():
    for pages in (1, 10, 257):
        policy = make("all-fast", pages, pages)     # the engines give it every page
        fast = policy.initial()
        assert fast.dtype == bool and np.count_nonzero(fast) == pages == policy.capacity
        assert np.array_equal(policy.after(epoch(0, np.ones(pages), fast)), fast)
    assert not make("all-slow", 10, 3).initial().any()
    assert all(POLICIES[n].STATIC for n in ("all-fast", "all-slow", "first-touch",
                                            "interleave", "oracle"))
    assert not any(POLICIES[n].STATIC for n in ("hemem", "memtis", "tpp", "colloid"))


def test_first_touch_is_the_first_capacity_pages_and_never_moves():
    rng = np.random.default_rng(1)
    masks = run(make("first-touch", 100, 30), stationary(rng, 100, np.arange(50, 60), 10))
    assert np.array_equal(np.flatnonzero(masks[0]), np.arange(30))
    assert not any(moves(masks))


def test_interleave_auto_spreads_exactly_capacity_evenly():
    assert np.flatnonzero(make("interleave", 10, 3).initial()).tolist() == [3, 6, 9]
    assert np.flatnonzero(make("interleave", 10, 5).initial()).tolist() == [1, 3, 5, 7, 9]
    assert make("interleave", 10, 10).initial().all()
    assert not make("interleave", 10, 0).initial().any()
    for pages, capacity in [(1000, 1), (1000, 333), (1000, 999), (997, 500)]:
        fast = np.flatnonzero(make("interleave", pages, capacity).initial())
        assert len(fast) == capacity
        gaps = np.diff(fast)
        assert set(gaps.tolist()) <= {pages // capacity, math.ceil(pages / capacity)}


def test_interleave_weights_round_robin_until_the_fast_node_is_full():
    one_one = make("interleave", 10, 5, fast_weight=1, slow_weight=1).initial()
    assert one_one.tolist() == [True, False] * 5
    full = make("interleave", 10, 3, fast_weight=1, slow_weight=1).initial()
    assert np.flatnonzero(full).tolist() == [0, 2, 4]        # then the kernel falls back
    three_one = make("interleave", 12, 12, fast_weight=3, slow_weight=1).initial()
    assert three_one.tolist() == [True, True, True, False] * 3


def test_oracle_picks_the_profiles_top_pages_ties_to_the_lower():
    profile = np.array([5, 9, 0, 9, 7, 1, 7, 3])
    fast = make("oracle", 8, 4, profile=profile).initial()
    assert np.flatnonzero(fast).tolist() == [1, 3, 4, 6]
    fast = make("oracle", 8, 3, profile=profile).initial()
    assert np.flatnonzero(fast).tolist() == [1, 3, 4]      # 4 and 6 tie: the lower
    with pytest.raises(ValueError, match="profile"):
        POLICIES["oracle"](8, 3)
    with pytest.raises(ValueError, match="3 pages, not 8"):
        POLICIES["oracle"](8, 3, profile=np.zeros(3))


def test_oracle_costs_least_on_a_stationary_stream():
    rng = np.random.default_rng(2)
    pages, capacity = 400, 60
    hot = rng.choice(pages, 50, replace=False)
    stream = stationary(rng, pages, hot, 30)
    profile = np.sum(stream, axis=0)
    costs = {name: cost(run(make(name, pages, capacity, profile=profile), stream), stream)
             for name in POLICIES if name != "all-fast"}   # all-fast has every page
    assert costs["oracle"] == min(costs.values())
    assert costs["oracle"] < costs["first-touch"] < costs["all-slow"]


def test_hottest_and_coldest_order_ties_to_the_lower_page():
    scores = np.array([3, 1, 3, 0, 1])
    every = np.ones(5, dtype=bool)
    assert base.hottest(scores, every, 5).tolist() == [0, 2, 1, 4, 3]
    assert base.coldest(scores, every, 5).tolist() == [3, 1, 4, 0, 2]
    assert base.coldest(scores, scores > 0, 2).tolist() == [1, 4]
    assert base.hottest(scores, every, 0).tolist() == []
    assert base.coldest(scores, ~every, 3).tolist() == []


def test_promote_returns_its_moves():
    scores = np.array([0, 2, 9, 6, 4, 1])

    def promote(budget, **kw):
        fast = np.array([True, True, False, False, False, False])
        want = base.hottest(scores, ~fast, 4)                       # 2, 3, 4, 5
        made = base.promote(fast, 3, want, scores, fast.copy(), budget, **kw)
        return made, np.flatnonzero(fast).tolist()
    # Into the free place, then for the coldest fast pages; page 5 finds none left colder.
    assert promote(10) == ([(2, -1), (3, 0), (4, 1)], [2, 3, 4])
    assert promote(4) == ([(2, -1), (3, 0)], [1, 2, 3])          # a swap is two moves
    assert promote(0) == ([], [0, 1])
    # Within a gap of 7: 9 overshoots and is skipped, 6 fits (1 left), then 4-0 does not,
    # 1-0 does, and what is left is 0.
    assert promote(10, gap=7) == ([(3, -1), (5, 0)], [1, 3, 5])
    # Within 1: 9 lands 2 past 7, too far; 6 leaves 1, within it: done.
    assert promote(10, gap=7, slack=1) == ([(3, -1)], [0, 1, 3])
    assert promote(10, gap=7, slack=2) == ([(2, -1)], [0, 1, 2])  # 9 lands within 2 of 7


def test_hemem_moves_at_most_max_move_pages_an_epoch():
    rng = np.random.default_rng(3)
    stream = random_stream(rng, 300, 200)
    for max_move, limit in [(0, 64 // 8), (3, 3), (2, 2), (40, 40)]:
        # A high threshold (100 times the mean page): with the stream's heavy tail, most
        # pages reach a low one, and hot pages are never demoted for others.
        m = moves(run(make("hemem", 300, 64, max_move=max_move, threshold=100), stream))
        assert max(m) <= limit
        assert sum(m) > 0
    # The fast tier is full from the start and a swap is two moves: one allows none.
    assert not any(moves(run(make("hemem", 300, 64, max_move=1, threshold=100), stream)))
    assert base.move_budget(0, 8) == 2 and base.move_budget(0, 800) == 100


def test_hemem_and_memtis_converge_to_the_hot_set():
    rng = np.random.default_rng(4)
    pages, capacity = 500, 100
    hot = np.arange(400, 460)           # past the first-touch pages
    stream = stationary(rng, pages, hot, 30)
    for name in ("memtis", "hemem"):
        masks = run(make(name, pages, capacity), stream)
        assert not masks[0][hot].any()
        assert all(m[hot].all() for m in masks[-10:]), name
    # HeMem settles; MEMTIS's threshold falls as low as fits, so cold pages with a few
    # accesses still come and go, for the coldest fast pages.
    assert moves(masks)[-5:] == [0] * 5


def test_hemem_never_demotes_a_hot_page_for_another():
    pages, capacity = 100, 20
    counts = np.zeros(pages, dtype=np.int64)
    counts[:60] = 20                    # three times the capacity, all equally hot
    # 60 of 100 pages: each is 1/0.6 times the mean page, hot at 1.5 (none is at 2).
    policy = make("hemem", pages, capacity, max_move=8, threshold=1.5)
    masks = run(policy, [counts] * 20)
    assert np.flatnonzero(policy.hot(policy.heat.counts)).tolist() == list(range(60))
    assert masks[0][:20].all() and not any(moves(masks))


def test_hemem_threshold_is_relative_to_the_mean_page():
    opt = POLICIES["hemem"].KNOBS["threshold"]
    assert (opt.kind, opt.default) == ("float", 2.0) and "mean" in opt.help
    assert opt.convert("0.5") == 0.5
    with pytest.raises(ValueError, match="below the minimum"):
        opt.convert(0)
    policy = make("hemem", 6, 2)
    counts = np.array([0, 1, 2, 3, 6, 12], dtype=np.float64)     # mean 4
    assert np.flatnonzero(policy.hot(counts)).tolist() == [5]   # >= 8
    assert np.flatnonzero(make("hemem", 6, 2, threshold=0.5).hot(counts)).tolist() == [2, 3, 4, 5]
    assert not policy.hot(np.zeros(6)).any()                    # no accesses: none hot
    assert not make("hemem", 6, 2, threshold=0.01).hot(np.zeros(6)).any()


@pytest.mark.parametrize("cooling", [1, 3])
def test_hemem_places_a_stream_scaled_x100_alike(cooling):
    # (With an absolute threshold of 8, x100 made nearly every page hot: no moves.)
    rng = np.random.default_rng(14)
    pages, capacity = 300, 60
    stream = (stationary(rng, pages, np.arange(200, 240), 15, hot_rate=3.0, cold_rate=0.3)
              + stationary(rng, pages, np.arange(100, 140), 15, hot_rate=3.0, cold_rate=0.3))
    one = run(make("hemem", pages, capacity, cooling=cooling), stream)
    hundred = run(make("hemem", pages, capacity, cooling=cooling), [c * 100 for c in stream])
    assert all(np.array_equal(a, b) for a, b in zip(one, hundred))
    assert sum(moves(one)) > 0 and one[-1][100:140].all()


def test_hemem_keeps_moving_toward_the_hot_set_on_a_dense_stream():
    # The reviewer's case: 64 lookups a page an epoch, so every page passes an absolute 8,
    # none is cold to give way, and HeMem stopped once the fast tier was full (from the
    # start: first touch).
    rng = np.random.default_rng(15)
    pages, capacity = 400, 100
    hot = np.arange(300, 350)           # past the first-touch pages
    stream = stationary(rng, pages, hot, 20, hot_rate=640.0, cold_rate=64.0)
    assert all(np.mean(c >= 8) > 0.999 for c in stream)
    masks = run(make("hemem", pages, capacity, max_move=8), stream)
    on_fast = [int(m[hot].sum()) for m in masks]
    assert on_fast[:14] == list(range(0, 52, 4)) + [50]         # 4 swaps an epoch
    assert on_fast[-1] == 50 and moves(masks)[-5:] == [0] * 5


def test_memtis_keeps_its_histogram_on_whole_counts():
    """MEMTIS replaces HeMem's hot(): no threshold knob, and its heat stays integer
    (log2 bins of whole counts, halved rounding down)."""
    assert "threshold" not in POLICIES["memtis"].KNOBS
    rng = np.random.default_rng(16)
    stream = random_stream(rng, 200, 10)
    policy = make("memtis", 200, 40)
    run(policy, stream)
    counts = policy.heat.counts
    assert counts.dtype == np.int64
    assert np.array_equal(policy.hot(counts), memtis.hot_set(counts, 40))
    heat = base.Heat(3, 1)
    heat.add(np.array([5, 1, 0]))
    heat.cool()
    assert heat.counts.tolist() == [2, 0, 0]
    heat = base.Heat(3, 1, np.float64)
    heat.add(np.array([5, 1, 0]))
    heat.cool()
    assert heat.counts.tolist() == [2.5, 0.5, 0.0]


def test_memtis_hot_set_is_the_lowest_log2_bins_that_fit():
    counts = np.array([0, 1, 2, 3, 4, 8, 9, 16, 100])
    # bins: 1 -> 0, 2-3 -> 1, 4 -> 2, 8-9 -> 3, 16 -> 4, 100 -> 6
    assert np.flatnonzero(memtis.hot_set(counts, 3)).tolist() == [7, 8]
    assert np.flatnonzero(memtis.hot_set(counts, 4)).tolist() == [5, 6, 7, 8]
    assert np.flatnonzero(memtis.hot_set(counts, 8)).tolist() == list(range(1, 9))
    assert not memtis.hot_set(np.array([5, 5, 5]), 2).any()     # the top bin alone is too big
    assert not memtis.hot_set(np.zeros(4, dtype=np.int64), 4).any()
    rng = np.random.default_rng(6)
    for _ in range(200):
        counts = rng.poisson(rng.pareto(1.0, 300) * 3)
        capacity = int(rng.integers(0, 300))
        hot = memtis.hot_set(counts, capacity)
        bins = np.array([int(c).bit_length() - 1 for c in counts])    # -1: a count of 0
        top = bins.max()
        low = bins[hot].min() if hot.any() else top + 1
        assert np.array_equal(hot, (bins >= low) & (bins >= 0))     # whole bins
        assert np.count_nonzero(hot) <= capacity
        if low > 0 and (bins >= 0).any():                           # one bin lower: too many
            assert np.count_nonzero(bins >= low - 1) > capacity


def test_memtis_moves_at_most_max_move():
    rng = np.random.default_rng(7)
    stream = random_stream(rng, 300, 100)
    m = moves(run(make("memtis", 300, 80, max_move=5), stream))
    assert max(m) <= 5 and sum(m) > 0


def tpp_free_kept(policy, masks, reserve):
    """The fast node has `reserve` pages free in every placement."""
    assert all(policy.capacity - np.count_nonzero(m) >= reserve for m in masks)


def tpp_checked(policy, masks, stream):
    """TPP's rules, epoch by epoch: a promoted page was accessed on the slow node in each
    of the hint_delay + 1 epochs up to this one (a second hint fault there); a page
    accessed in the epoch leaves the fast node only in exchange for a promotion, never for
    the watermark; and where the watermark is short after an epoch, no inactive page is
    left fast, or the move budget is spent."""
    delay = policy.knobs["hint_delay"]
    reserve = policy.capacity - policy.usable
    budget = base.move_budget(policy.knobs["max_move"], policy.capacity)
    for i, (before, after, counts) in enumerate(zip(masks, masks[1:], stream)):
        up, down = after & ~before, before & ~after
        moved = int(np.count_nonzero(up) + np.count_nonzero(down))
        assert np.count_nonzero(after) <= policy.capacity and moved <= budget, i
        for page in np.flatnonzero(up).tolist():
            assert i >= delay, (i, page)
            for j in range(i - delay, i + 1):
                assert not masks[j][page] and stream[j][page] > 0, (i, page, j)
        assert np.count_nonzero(down & (counts > 0)) <= np.count_nonzero(up), i
        if policy.capacity - np.count_nonzero(after) < reserve:
            assert not (after & (counts == 0)).any() or moved == budget, i


def test_tpp_keeps_the_watermark_free():
    rng = np.random.default_rng(8)
    stream = random_stream(rng, 300, 100)
    for watermark in (0.02, 0.1, 0.5):
        policy = make("tpp", 300, 100, watermark=watermark)
        reserve = math.ceil(watermark * 100)
        masks = run(policy, stream)
        assert np.flatnonzero(masks[0]).tolist() == list(range(100 - reserve))
        tpp_checked(policy, masks, stream)
        assert sum(moves(masks)) > 0
    # The one page is the watermark: a page takes it only in an epoch it was accessed in
    # (nothing fast is inactive), and kswapd demotes it in the first it was not.
    stream = random_stream(rng, 10, 30)
    policy = make("tpp", 10, 1, watermark=0.5)
    masks = run(policy, stream)
    assert not masks[0].any()
    tpp_checked(policy, masks, stream)
    for before, after, counts in zip(masks, masks[1:], stream):
        assert not (after & before & (counts == 0)).any()


def test_tpp_keeps_the_watermark_while_inactive_pages_remain():
    # Each epoch 50 of 300 pages accessed, at random: of the 90 fast pages, 40 or more
    # are always inactive, and kswapd demotes those for the promotions.
    rng = np.random.default_rng(17)
    pages, capacity = 300, 100
    stream = []
    for _ in range(60):
        counts = np.zeros(pages, dtype=np.int64)
        counts[rng.choice(pages, 50, replace=False)] = rng.integers(1, 50, 50)
        stream.append(counts)
    for hint_delay, max_move in [(0, 0), (0, 40), (1, 8)]:
        policy = make("tpp", pages, capacity, watermark=0.1, hint_delay=hint_delay,
                      max_move=max_move)
        masks = run(policy, stream)
        tpp_free_kept(policy, masks, 10)
        tpp_checked(policy, masks, stream)
        assert sum(moves(masks)) > 0


@pytest.mark.parametrize("watermark,want", [(0.02, [0, 2] + [0] * 10),
                                            (0.5, [0] + [12] * 4 + [2] + [0] * 6)])
def test_tpp_at_share_one_puts_every_active_page_fast(watermark, want):
    # (Keeping its watermark out of the pages, it held 2% of them slow at share 1 and
    # swapped them for the least used fast pages every epoch.)
    rng = np.random.default_rng(18)
    stream = [rng.integers(1, 20, 100) for _ in range(12)]     # every page, every epoch
    policy = make("tpp", 100, 100, watermark=watermark)
    masks = run(policy, stream)
    assert masks[0].sum() == 100 - math.ceil(watermark * 100)  # the reserve left at first
    assert moves(masks) == want                 # hint_delay 1: promoted after 2 epochs
    assert masks[-1].all()
    assert not np.any([a & ~b for a, b in zip(masks, masks[1:])])    # none demoted
    tpp_checked(policy, masks, stream)


def test_tpp_promotes_into_a_full_tier_within_max_move():
    pages, capacity = 100, 50
    counts = np.zeros(pages, dtype=np.int64)
    counts[50:] = 5                         # hot every epoch, and slow at first
    stream = [counts] * 16
    # The tier is full of never-used pages: each promotion demotes one, a swap two moves,
    # from the second epoch (hint_delay 1); max_move 5 leaves one move unused.
    for max_move, want, hot_fast in [(8, [0] + [8] * 12 + [4] + [0] * 2, 50),
                                     (5, [0] + [4] * 15, 30), (2, [0] + [2] * 15, 15)]:
        policy = make("tpp", pages, capacity, watermark=0, max_move=max_move)
        masks = run(policy, stream)
        assert np.flatnonzero(masks[0]).tolist() == list(range(50))
        assert moves(masks) == want
        assert masks[-1][50:].sum() == hot_fast and masks[-1].sum() == capacity
    # A watermark of 5 pages: 45 hot pages fast in place of inactive ones, the watermark
    # kept; then nothing fast is inactive, kswapd has nothing to demote, and the last 5
    # take the watermark's room.
    policy = make("tpp", pages, capacity, watermark=0.1, max_move=8)
    masks = run(policy, stream)
    assert moves(masks) == [0] + [8] * 11 + [2] + [5] + [0] * 2
    tpp_free_kept(policy, masks[:-3], 5)
    assert masks[-1][50:].all() and not masks[-1][:50].any()
    tpp_checked(policy, masks, stream)


def test_tpp_moves_at_most_max_move_and_keeps_the_watermark():
    rng = np.random.default_rng(10)
    stream = random_stream(rng, 300, 100)
    for max_move, limit in [(0, 100 // 8), (3, 3), (40, 40), (1, 0)]:   # a swap is two
        policy = make("tpp", 300, 100, hint_delay=0, max_move=max_move)
        masks = run(policy, stream)
        assert max(moves(masks)) <= limit and (sum(moves(masks)) > 0) == (limit > 0)
        tpp_checked(policy, masks, stream)


def test_tpp_restores_a_short_watermark_from_inactive_pages_lru_within_the_budget():
    pages, capacity = 20, 10
    below = np.arange(pages) < 7            # the 7 pages below the watermark (0.3)
    first = np.zeros(pages, dtype=np.int64)
    first[:7] = first[8] = 3                # 8 slow, accessed; 7 and 9 never accessed
    fast = np.arange(pages) < 10            # then 3 over the 7
    then = np.zeros(pages, dtype=np.int64)
    then[:7] = 3                            # 7, 8 and 9 inactive; 8 the most recent
    then[15] = 9                            # a candidate with hint_delay 0
    # kswapd demotes the inactive pages, least recently used first (7 and 9 tie: the
    # lower first); then nothing fast is inactive, and 15 takes a free place.
    for max_move, down, up in [(1, [7], []), (2, [7, 9], []), (3, [7, 8, 9], []),
                               (4, [7, 8, 9], [15]), (8, [7, 8, 9], [15])]:
        policy = make("tpp", pages, capacity, hint_delay=0, watermark=0.3,
                      max_move=max_move)
        # Nothing fast is inactive: 8 takes a place of the watermark's.
        assert np.flatnonzero(policy.after(epoch(0, first, below))).tolist() == \
            list(range(7)) + [8]
        after = policy.after(epoch(1, then, fast))
        assert np.flatnonzero(fast & ~after).tolist() == down, max_move
        assert np.flatnonzero(after & ~fast).tolist() == up, max_move


def test_tpp_never_demotes_an_active_page_for_the_watermark():
    # (It demoted the least recently used pages, active or not, until the watermark was
    # free: 3 pages for 1 inactive here.)
    pages, capacity = 20, 10
    fast = np.zeros(pages, dtype=bool)
    fast[:10] = True                        # 3 over the 7 below the watermark (0.3)
    counts = np.zeros(pages, dtype=np.int64)
    counts[:9] = 3                          # 9 alone is inactive
    counts[15] = 9
    policy = make("tpp", pages, capacity, hint_delay=0, watermark=0.3, max_move=8)
    after = policy.after(epoch(0, counts, fast))
    assert np.flatnonzero(fast & ~after).tolist() == [9]
    assert np.flatnonzero(after).tolist() == list(range(9)) + [15]     # into a free place


def test_tpp_promotes_after_hint_delay_plus_one_accessed_epochs():
    pages, capacity, page = 20, 10, 15
    accessed = [1, 0, 1, 1, 1, 1]           # epochs page 15 was accessed in
    stream = [np.where(np.arange(pages) == page, a * 3, 0) for a in accessed]
    for delay, first in [(0, 0), (1, 3), (2, 4), (3, 5), (4, None)]:
        masks = run(make("tpp", pages, capacity, hint_delay=delay, watermark=0.1), stream)
        fast_after = [bool(m[page]) for m in masks[1:]]
        expect = [first is not None and i >= first for i in range(len(accessed))]
        assert fast_after == expect, delay


def test_tpp_ping_pong_case_waits_for_faults_on_the_slow_node():
    # The reviewer's case: it counted epochs on the fast node as hint faults, so a page
    # demoted after one epoch came back after a single slow one, 2 moves every epoch.
    stream = [np.array([5, 1, 9, 9]), np.array([5, 9, 1, 9])] * 10
    policy = make("tpp", 4, 2, watermark=0, hint_delay=1, max_move=2)
    masks = run(policy, stream)
    assert np.flatnonzero(masks[0]).tolist() == [0, 1]          # pages start fast
    assert moves(masks) == [0, 2, 2, 2] * 5
    tpp_checked(policy, masks, stream)


@pytest.mark.parametrize("hint_delay", [0, 1, 2, 3])
def test_tpp_demoted_page_must_fault_again_on_the_slow_node(hint_delay):
    # Page 0 starts fast and is accessed every epoch; 1 takes its place after hint_delay
    # + 1 slow epochs, then page 0 must be accessed as many slow epochs to come back.
    h = hint_delay
    stream = [np.array([1, 5, 0])] * (h + 1) + [np.array([5, 1, 0])] * (h + 3)
    policy = make("tpp", 3, 1, watermark=0, hint_delay=h, max_move=2)
    masks = run(policy, stream)
    on_fast = [int(np.flatnonzero(m)[0]) for m in masks]
    assert on_fast == [0] * (h + 1) + [1] * (h + 1) + [0] * 3
    tpp_checked(policy, masks, stream)


@pytest.mark.parametrize("hint_delay", [0, 1, 2])
def test_tpp_rules_hold_on_random_streams(hint_delay):
    rng = np.random.default_rng(19 + hint_delay)
    stream = random_stream(rng, 200, 80)
    for capacity, watermark, max_move in [(60, 0.02, 0), (60, 0.2, 6), (200, 0.1, 0)]:
        policy = make("tpp", 200, capacity, hint_delay=hint_delay, watermark=watermark,
                      max_move=max_move)
        masks = run(policy, stream)
        tpp_checked(policy, masks, stream)
        assert sum(moves(masks)) > 0


def test_tpp_demotes_the_least_recently_used():
    pages, capacity = 20, 10
    policy = make("tpp", pages, capacity, hint_delay=0, watermark=0.1)   # reserve 1
    fast = policy.initial()
    assert np.flatnonzero(fast).tolist() == list(range(9))
    counts = np.zeros(pages, dtype=np.int64)
    counts[[0, 1, 2, 3, 5, 6, 7, 8]] = 2        # page 4 never accessed: the LRU one
    counts[1] = 1                               # lower count, but recent
    counts[15] = 5
    fast = policy.after(epoch(0, counts, fast))
    assert np.flatnonzero(fast).tolist() == [0, 1, 2, 3, 5, 6, 7, 8, 15]
    counts[:] = 0
    counts[[0, 2, 3, 5, 6, 7, 8, 15]] = 1       # 1 is now the oldest; 16 comes in
    counts[16] = 4
    fast = policy.after(epoch(1, counts, fast))
    assert np.flatnonzero(fast).tolist() == [0, 2, 3, 5, 6, 7, 8, 15, 16]


def test_loaded_latency_and_balance():
    tier = TierFigures(100.0, 10.0)
    assert base.loaded_latency(tier, 0) == 100
    assert base.loaded_latency(tier, 5) == pytest.approx(200)
    assert base.loaded_latency(tier, 1e6) == pytest.approx(2000)    # capped at 95% busy
    assert colloid.balance(FAST, SLOW, 0.1) == 1.0      # light load: all on the fast tier
    assert colloid.balance(TierFigures(300, 10), TierFigures(100, 10), 0.1) == 0.0
    fast, slow = TierFigures(80, 20), TierFigures(160, 20)
    p = colloid.balance(fast, slow, 20)
    assert 0.5 < p < 1
    assert base.loaded_latency(fast, p * 20) == pytest.approx(
        base.loaded_latency(slow, (1 - p) * 20), rel=1e-6)


def test_loaded_latency_follows_a_measured_curve():
    """Between the points, linear; below the first, the first's; past the last, the
    queueing curve from there (the tier's 10 GB/s: 1/(1-u)), and past the tier's bandwidth
    stretched by the load as well (saturated: Little's law); the idle latency unused."""
    tier = TierFigures(100.0, 10.0, curve=((0.0, 90.0), (4.0, 110.0), (6.0, 200.0)))
    assert base.loaded_latency(tier, 0.0) == 90.0
    assert base.loaded_latency(tier, 2.0) == pytest.approx(100.0)
    assert base.loaded_latency(tier, 5.0) == pytest.approx(155.0)
    assert base.loaded_latency(tier, 6.0) == pytest.approx(200.0)
    # 8 GB/s: 200 x (1 / 0.2) / (1 / 0.4); 16 GB/s: capped at 0.95 busy, then x 1.6.
    assert base.loaded_latency(tier, 8.0) == pytest.approx(400.0)
    assert base.loaded_latency(tier, 16.0) == pytest.approx(200.0 * 20 / 2.5 * 1.6)
    assert base.loaded_latency(TierFigures(100.0, 10.0, curve=((2.0, 95.0),)), 1.0) == 95.0


def test_balance_from_measured_curves_differs_from_the_queueing_guess():
    """A fast tier whose measured latency climbs early (at 4 GB/s already 300 ns) balances
    with a slower, flat one at a lower fast share than 1 / (1 - u) of the same idle
    figures would; the two loaded latencies are equal there."""
    fast = TierFigures(80.0, 15.0, curve=((0.0, 80.0), (4.0, 300.0), (8.0, 600.0)))
    slow = TierFigures(160.0, 20.0, curve=((0.0, 160.0), (20.0, 200.0)))
    p = colloid.balance(fast, slow, 10.0)
    guess = colloid.balance(TierFigures(80.0, 15.0), TierFigures(160.0, 20.0), 10.0)
    assert 0 < p < guess < 1
    assert base.loaded_latency(fast, p * 10) == pytest.approx(
        base.loaded_latency(slow, (1 - p) * 10), rel=1e-6)
    # x GB/s on the fast tier: 80 + 55 x ns there, 160 + 2 (10 - x) on the slow one.
    assert p * 10 == pytest.approx(100.0 / 57.0, rel=1e-6)


def shares(masks, counts):
    total = counts.sum()
    return [counts[m].sum() / total for m in masks]


def test_colloid_promotes_when_the_slow_tier_is_slower_at_light_load():
    pages, capacity = 100, 50
    counts = np.ones(pages, dtype=np.int64)
    counts[60:70] = 100                     # hot, on the slow node at first
    policy = make("colloid", pages, capacity, max_move=8)
    masks = run(policy, [counts] * 4, ns=1e9)   # ~0.001 GB/s: both tiers idle
    assert moves(masks) == [8, 8, 4, 0]        # swaps, a cold fast page for a hot one
    assert masks[-1][60:70].sum() == 10 and masks[-1].sum() == capacity
    assert shares(masks, counts) == sorted(shares(masks, counts))


def test_colloid_demotes_hot_pages_from_a_saturated_fast_tier():
    pages, capacity = 100, 50
    counts = np.ones(pages, dtype=np.int64)
    counts[:10] = 100                       # hot, on the fast node: ~91% of accesses
    tiers = (TierFigures(80, 0.5), TierFigures(250, 50))  # a fast tier with hardly any bandwidth
    total = int(counts.sum())
    ns = total * 64 / 10.0                  # 10 GB/s offered
    p_star = colloid.balance(*tiers, 10.0)
    assert p_star < 0.2
    policy = make("colloid", pages, capacity, max_move=4)
    masks = run(policy, [counts] * 4, ns=ns, tiers=tiers)
    # The hot pages leave, hottest first, until the share is p*'s (40 cold pages stay).
    assert moves(masks) == [4, 4, 2, 0]
    assert np.flatnonzero(masks[-1]).tolist() == list(range(10, 50))
    s = shares(masks, counts)
    assert s == sorted(s, reverse=True) and s[-1] == pytest.approx(p_star, abs=0.05)

    def after(fast):
        return make("colloid", pages, capacity).after(epoch(0, counts, fast, ns=ns,
                                                            tiers=tiers))
    fast = np.zeros(pages, dtype=bool)
    fast[10:10 + round(p_star * total)] = True      # at the balance point: left alone
    assert np.array_equal(after(fast), fast)
    fast[:] = False
    fast[3] = True                                  # 100 accesses, past the tolerance
    assert not after(fast).any()


def back_and_forth(masks):
    """Pages that moved both up and down over the placements."""
    up = np.any([b & ~a for a, b in zip(masks, masks[1:])], axis=0)
    down = np.any([a & ~b for a, b in zip(masks, masks[1:])], axis=0)
    return np.flatnonzero(up & down).tolist()


def test_colloid_never_jumps_a_page_past_the_balance_point(monkeypatch):
    monkeypatch.setattr(colloid, "balance", lambda *tiers_and_load: 0.7)
    counts = np.full(41, 10, dtype=np.int64)
    counts[40] = 600                        # 600 of the 1000 accesses on one page
    policy = make("colloid", 41, 41, max_move=8)
    # At 0.4 the page would bring 0.6 (past 0.7 by more than the tolerance): it stays
    # slow, and nothing else is there to move. (Hottest first went 0.4, 1.0, 0.4...)
    fast = counts < 600
    masks = [fast]
    for i in range(6):
        masks.append(policy.after(epoch(i, counts, masks[-1])))
    assert not any(moves(masks)) and shares(masks, counts) == [0.4] * 7
    # At 1.0 the cold pages leave instead, 25 of them, to 0.75: within 0.05 of 0.7.
    masks = [np.ones(41, dtype=bool)]
    for i in range(6):
        masks.append(policy.after(epoch(i, counts, masks[-1])))
    assert moves(masks) == [8, 8, 8, 1, 0, 0]
    assert masks[-1][40] and masks[-1].sum() == 41 - 25
    assert shares(masks, counts)[-1] == pytest.approx(0.75)


def test_colloid_converges_without_moving_a_page_back(monkeypatch):
    monkeypatch.setattr(colloid, "balance", lambda *tiers_and_load: 0.7)
    counts = np.zeros(111, dtype=np.int64)
    counts[:20] = 10                        # fast, with 40 unused fast pages after them
    counts[60] = 600                        # slow: fits in the 710 wanted
    counts[61:] = 10                        # slow, 50 warm pages
    policy = make("colloid", 111, 60, max_move=8)
    masks = run(policy, [counts] * 5)
    # 910 of 1300 wanted fast: 600, then 10s until within 65 (the tolerance) of it.
    assert moves(masks) == [8, 4, 0, 0, 0]
    assert np.flatnonzero(masks[-1] & ~masks[0]).tolist() == [60, 61, 62, 63, 64, 65]
    s = shares(masks, counts)
    assert s == sorted(s) and abs(s[-1] - 0.7) <= 0.05
    assert back_and_forth(masks) == []


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_colloid_settles_on_skewed_counts_under_load(seed):
    # (Hottest first, one page went back and forth every epoch at 10 and 30 GB/s.)
    rng = np.random.default_rng(seed)
    counts = rng.poisson(rng.pareto(1.0, 300) * 5)
    total = int(counts.sum())
    tiers = (TierFigures(80, 5), TierFigures(250, 20))
    for gbs in (1, 5, 10, 30):
        masks = run(make("colloid", 300, 100), [counts] * 30,
                    ns=total * 64 / gbs, tiers=tiers)
        assert back_and_forth(masks) == [], gbs
        assert moves(masks)[-5:] == [0] * 5, gbs


def test_phase_change_followed_by_online_policies_only():
    rng = np.random.default_rng(9)
    pages, capacity, n = 400, 60, 30     # room for one hot set and some
    a, b = np.arange(200, 240), np.arange(300, 340)
    stream = stationary(rng, pages, a, n) + stationary(rng, pages, b, n)
    profile = np.sum(stream, axis=0)
    for name in ("hemem", "memtis", "tpp"):
        masks = run(make(name, pages, capacity), stream)
        # TPP also promotes a cold page accessed twice running, for a less recent one.
        assert masks[n][a].all() and masks[n][b].sum() <= (2 if name == "tpp" else 0), name
        assert masks[-1][b].all(), name
        assert masks[-1][a].sum() <= capacity - len(b), name
    for name in ("oracle", "first-touch"):
        masks = run(make(name, pages, capacity, profile=profile), stream)
        assert not any(moves(masks)), name


def test_linux_returns_the_kernels_placement():
    policy = make("linux", 10, 4)
    assert policy.KERNEL
    fast = policy.initial()
    assert np.flatnonzero(fast).tolist() == [0, 1, 2, 3]
    moved = np.zeros(10, dtype=bool)
    moved[[2, 7]] = True                # the kernel moved pages: that is what it reports
    assert np.array_equal(policy.after(epoch(0, np.ones(10), moved)), moved)


@pytest.mark.parametrize("balancing,demotion,reason", [
    ("2\n", "true\n", None),
    ("3\n", "1\n", None),
    ("1\n", "true\n", r"^kernel.numa_balancing is 1, not 2 \(memory tiering\); "
     "cxlbench never changes it$"),
    ("0\n", "false\n", "numa_balancing is 0, .*; .*demotion_enabled is false, not true"),
    ("2\n", None, "^cannot read .*demotion_enabled: No such file"),
])
def test_linux_unavailable(tmp_path, monkeypatch, balancing, demotion, reason):
    for attr, name, text in (("NUMA_BALANCING", "numa_balancing", balancing),
                             ("DEMOTION", "demotion_enabled", demotion)):
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        monkeypatch.setattr(linux, attr, str(path))
    why = linux.unavailable()
    if reason is None:
        assert why is None
    else:
        assert why is not None
        assert re.search(reason, why), why
