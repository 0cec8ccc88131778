"""Tiering policies on synthetic access streams whose right answers are known: pure
functions of counts, so no engine, machine or compiled core is needed."""
import math
import re

import numpy as np
import pytest

from cxlbench.tiering.policies import POLICIES, base, colloid, get, linux, memtis
from cxlbench.tiering.policies.base import Epoch, Tier

FAST, SLOW = Tier(80.0, 100.0), Tier(250.0, 25.0)


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
    stream = random_stream(rng, pages, 40)
    policy = make(name, pages, capacity, profile=np.sum(stream, axis=0))
    fast = policy.initial()
    limit = pages if name == "all-fast" else capacity
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
    assert make("all-fast", 10, 3).initial().all()
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
             for name in POLICIES if name != "all-fast"}   # all-fast ignores the capacity
    assert costs["oracle"] == min(costs.values())
    assert costs["oracle"] < costs["first-touch"] < costs["all-slow"]


def test_hemem_moves_at_most_max_move_pages_an_epoch():
    rng = np.random.default_rng(3)
    stream = random_stream(rng, 300, 200)
    for max_move, limit in [(0, 64 // 8), (3, 3), (2, 2), (40, 40)]:
        # A high threshold: with the stream's heavy tail, most pages reach a low one, and
        # hot pages are never demoted for others.
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
    rng = np.random.default_rng(5)
    pages, capacity = 100, 20
    hot = np.arange(60)                 # three times the capacity, all equally hot
    masks = run(make("hemem", pages, capacity, max_move=8), stationary(rng, pages, hot, 20))
    assert masks[0][:20].all() and not any(moves(masks))


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
    """After each epoch the fast node has `reserve` pages free, unless every page on it was
    promoted in that epoch (those are never demoted at once)."""
    for before, after in zip(masks, masks[1:]):
        free = policy.capacity - np.count_nonzero(after)
        promoted = after & ~before
        assert free >= reserve or not (after & ~promoted).any()


def test_tpp_keeps_the_watermark_free():
    rng = np.random.default_rng(8)
    stream = random_stream(rng, 300, 100)
    for watermark in (0.02, 0.1, 0.5):
        policy = make("tpp", 300, 100, watermark=watermark)
        reserve = math.ceil(watermark * 100)
        masks = run(policy, stream)
        assert np.flatnonzero(masks[0]).tolist() == list(range(100 - reserve))
        tpp_free_kept(policy, masks, reserve)
        assert sum(moves(masks)) > 0
    policy = make("tpp", 10, 1, watermark=0.5)     # the one page promoted stays, this once
    tpp_free_kept(policy, run(policy, random_stream(rng, 10, 30)), 1)


def test_tpp_promotes_after_hint_delay_plus_one_accessed_epochs():
    pages, capacity, page = 20, 10, 15
    accessed = [1, 0, 1, 1, 1, 1]           # epochs page 15 was accessed in
    stream = [np.where(np.arange(pages) == page, a * 3, 0) for a in accessed]
    for delay, first in [(0, 0), (1, 3), (2, 4), (3, 5), (4, None)]:
        masks = run(make("tpp", pages, capacity, hint_delay=delay, watermark=0.1), stream)
        fast_after = [bool(m[page]) for m in masks[1:]]
        expect = [first is not None and i >= first for i in range(len(accessed))]
        assert fast_after == expect, delay


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
    tier = Tier(100.0, 10.0)
    assert base.loaded_latency(tier, 0) == 100
    assert base.loaded_latency(tier, 5) == pytest.approx(200)
    assert base.loaded_latency(tier, 1e6) == pytest.approx(2000)    # capped at 95% busy
    assert colloid.balance(FAST, SLOW, 0.1) == 1.0      # light load: all on the fast tier
    assert colloid.balance(Tier(300, 10), Tier(100, 10), 0.1) == 0.0
    fast, slow = Tier(80, 20), Tier(160, 20)
    p = colloid.balance(fast, slow, 20)
    assert 0.5 < p < 1
    assert base.loaded_latency(fast, p * 20) == pytest.approx(
        base.loaded_latency(slow, (1 - p) * 20), rel=1e-6)


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
    tiers = (Tier(80, 0.5), Tier(250, 50))  # a fast tier with hardly any bandwidth
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


def test_phase_change_followed_by_online_policies_only():
    rng = np.random.default_rng(9)
    pages, capacity, n = 400, 60, 30     # room for one hot set and some
    a, b = np.arange(200, 240), np.arange(300, 340)
    stream = stationary(rng, pages, a, n) + stationary(rng, pages, b, n)
    profile = np.sum(stream, axis=0)
    for name in ("hemem", "memtis", "tpp"):
        masks = run(make(name, pages, capacity), stream)
        assert masks[n][a].all() and not masks[n][b].any(), name
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
