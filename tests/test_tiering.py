"""Tiering (cxlbench.tiering, the tiering benchmark, `cxlbench tiering`): the pages an
access touches, the embedding workload's epochs and their exact per-page counts, the
model's closed form and where its tiers come from, the engine loop on paper and on this
machine's one node (moves that are no-ops, a page astray caught), move(which=...), the
benchmark's checks and model-engine figures, the knees and gaps of the analysis, and the
command end to end. Every expected figure is worked out here by hand or in closed form."""
import errno
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from cxlbench import analysis, benchmarks, memory
from cxlbench.benchmarks import common, embedding
from cxlbench.benchmarks import tiering as bench
from cxlbench.cli import main
from cxlbench.errors import CheckError, PlacementError, UserError
from cxlbench.memory import Buffer
from cxlbench.tiering import engine, model, workloads
from cxlbench.tiering.policies.base import Epoch, Policy, Tier, first_touch
from cxlbench.topology import Topology

from .conftest import REPO

PAGE = 4096
HERE = Topology.read(probe_gpus=False)
ONE_NODE = HERE.memory_nodes == [0] and not any(n.hmat for n in HERE.nodes)
one_node = pytest.mark.skipif(not ONE_NODE, reason="the expectations are this VM's: one "
                              "memory node (0), no HMAT")


def policies_or_skip():
    """The policies package (written apart); skip where it does not import yet."""
    try:
        from cxlbench.tiering import policies
    except ImportError as e:           # pragma: no cover - while the policies are written
        pytest.skip(f"cxlbench.tiering.policies does not import: {e}")
    return policies


def params(**over):
    """The tiering benchmark's defaults, tiny: 4096 rows of 512 B (512 pages), 64 bags of
    32 lookups (2048 lookups an epoch), 3 epochs."""
    p = {k: o.default for k, o in bench.OPTIONS.items()}
    p.update(rows=4096, batch=64, epochs=3, repeat=1)
    p.update(over)
    return p


def hot(counts, k):
    """The k most accessed pages."""
    return set(np.argsort(-counts, kind="stable")[:k].tolist())


def test_each_tiering_module_imports_first_in_a_fresh_interpreter():
    """The registry imports the tiering benchmark, which imports the workloads, which use
    the embedding benchmark: no order of first import may find one half made."""
    for name in ("cxlbench.tiering.workloads", "cxlbench.tiering.engine",
                 "cxlbench.tiering.model", "cxlbench.benchmarks.tiering"):
        r = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr


# ---- workloads.pages_touched -------------------------------------------------------------
def test_accesses_inside_one_page_count_once():
    first = np.array([0, 100, 4095, 4096, 8191, 3 * 4096 + 7], dtype=np.int64)
    assert workloads.pages_touched(first, 1, PAGE).tolist() == [0, 0, 0, 1, 1, 3]
    # 64 B at 4032 ends on byte 4095: still page 0 alone.
    assert workloads.pages_touched(np.array([4032, 4096]), 64, PAGE).tolist() == [0, 1]


def test_an_access_over_a_page_boundary_counts_on_both():
    first = np.array([0, 4000, 8192, 4095], dtype=np.int64)
    # 200 B: [0,199] page 0; [4000,4199] pages 0 and 1; [8192,8391] page 2; [4095,4294] 0,1.
    assert workloads.pages_touched(first, 200, PAGE).tolist() == [0, 0, 1, 2, 0, 1]


def test_rows_larger_than_a_page_touch_every_page_they_span():
    first = np.array([100, 0, 3 * 4096 - 1], dtype=np.int64)
    # 10000 B: [100,10099] pages 0-2; [0,9999] pages 0-2; [12287,22286] pages 2-5.
    assert workloads.pages_touched(first, 10000, PAGE).tolist() == \
        [0, 1, 2, 0, 1, 2, 2, 3, 4, 5]
    # Exactly two pages, aligned: two pages each, no third.
    assert workloads.pages_touched(np.array([0, 8192]), 8192, PAGE).tolist() == [0, 1, 2, 3]


# ---- workloads.Embedding -------------------------------------------------------------------
@pytest.mark.parametrize("dim,per_row", [(128, 1), (1024, 1), (2048, 2)])
def test_counts_sum_to_lookups_times_pages_per_row(dim, per_row):
    """fp32 rows of 512 B, 4 KiB and 8 KiB, page-aligned: 1, 1 and 2 pages a lookup."""
    rows = 512
    w = workloads.Embedding(params(rows=rows, dim=dim, tables=2, batch=16, pooling=4))
    assert w.units() == 2 * 16 * 4 == 128
    assert w.epoch_bytes() == 128 * dim * 4
    pages = 2 * rows * dim * 4 // PAGE
    assert w.sizes()["table"] == pages * PAGE
    for e in range(3):
        c = w.counts(e, pages, PAGE)
        assert c.shape == (pages,) and c.sum() == 128 * per_row


def test_counts_of_rows_straddling_pages_match_a_row_by_row_count():
    """6000 B rows (dim 1500) span two or three pages depending on where they start."""
    w = workloads.Embedding(params(rows=50, dim=1500, batch=8, pooling=4))
    pages = -(-50 * 6000 // PAGE)
    for e in range(3):
        want = np.zeros(pages, dtype=np.int64)
        for r in w._streams[e].tolist():
            for pg in range(r * 6000 // PAGE, (r * 6000 + 5999) // PAGE + 1):
                want[pg] += 1
        assert (w.counts(e, pages, PAGE) == want).all()
        assert want.sum() > 32              # some rows did span three pages


def test_epochs_are_cut_from_one_stream():
    """Each table's lookups of all epochs, in epoch order, are the stream make_indices
    draws for batch x epochs bags: epoch e holds bags [e*batch, (e+1)*batch) of each."""
    p = params(rows=300, tables=2, batch=10, pooling=3, epochs=4)
    w = workloads.Embedding(p)
    whole = embedding.Layout((300, 300), (3, 3), 128, "fp32", 40)
    indices, _ = embedding.make_indices(whole, w.params)
    per = 10 * 3
    for t in range(2):
        joined = np.concatenate([w._streams[e][t * per:(t + 1) * per] for e in range(4)])
        assert (joined == indices[t * 4 * per:(t + 1) * 4 * per]).all()
        assert ((joined >= 300 * t) & (joined < 300 * (t + 1))).all()
    # Epochs differ (not one batch repeated) and together are the whole run's counts.
    assert not (w._streams[0] == w._streams[1]).all()
    pages = -(-600 * 512 // PAGE)
    total = sum(w.counts(e, pages, PAGE) for e in range(4))
    want = np.bincount(indices * 512 // PAGE, minlength=pages)
    assert (total == want).all()


def test_popularity_holds_across_epochs():
    w = workloads.Embedding(params(epochs=4))
    c = [w.counts(e, 512, PAGE) for e in range(4)]
    assert len(hot(c[0], 16) & hot(c[1], 16)) >= 10
    assert len(hot(c[0] + c[1], 16) & hot(c[2] + c[3], 16)) >= 10


def test_phase_shift_moves_the_hot_pages_in_the_second_half():
    still = workloads.Embedding(params(epochs=4))
    moved = workloads.Embedding(params(epochs=4, phase="shift"))
    c = [moved.counts(e, 512, PAGE) for e in range(4)]
    # The first half as without a shift; the hot set stays put within each half...
    for e in range(2):
        assert (c[e] == still.counts(e, 512, PAGE)).all()
    assert len(hot(c[2], 16) & hot(c[3], 16)) >= 10
    # ...and leaves the first half's pages: each row turned by half its table (2048 rows
    # of 512 B = 256 pages), so the second half's counts are the unshifted ones rolled.
    assert len(hot(c[0] + c[1], 16) & hot(c[2] + c[3], 16)) <= 3
    for e in (2, 3):
        assert (c[e] == np.roll(still.counts(e, 512, PAGE), 256)).all()


def test_phase_shift_turns_each_table_within_itself():
    p = params(rows=1000, tables=2, batch=10, pooling=3, epochs=3)
    still, moved = workloads.Embedding(p), workloads.Embedding({**p, "phase": "shift"})
    assert (moved._streams[0] == still._streams[0]).all()     # epochs // 2 = 1 unshifted
    per = 10 * 3
    for e in (1, 2):
        for t in range(2):
            s = still._streams[e][t * per:(t + 1) * per]
            m = moved._streams[e][t * per:(t + 1) * per]
            assert (m == 1000 * t + (s - 1000 * t + 500) % 1000).all()


# ---- model -----------------------------------------------------------------------------------
def test_access_takes_the_longer_of_latency_over_mlp_and_bytes_over_bandwidth():
    t = Tier(100.0, 10.0)
    assert model.access_ns(t, 64, 10) == 10.0           # 100/10 = 10 > 64/10 = 6.4
    assert model.access_ns(t, 4096, 10) == 409.6        # 4096/10 > 10
    assert model.access_ns(t, 64, 1) == 100.0


def test_epoch_time_closed_form():
    counts = np.array([3, 0, 5, 2], dtype=np.int64)
    fast = np.array([True, False, False, True])
    tiers = (Tier(100.0, 100.0), Tier(300.0, 10.0))
    # mlp 4, 64 B: fast max(25, 0.64) = 25 ns x 5 accesses; slow max(75, 6.4) x 5.
    assert model.epoch_ns(counts, fast, tiers, 64, 4) == 5 * 25 + 5 * 75
    # 1024 B: slow is bandwidth-bound, max(75, 102.4).
    assert model.epoch_ns(counts, fast, tiers, 1024, 4) == 5 * 25 + 5 * 102.4
    assert model.epoch_ns(counts, np.zeros(4, bool), tiers, 64, 4) == 10 * 75


def tier_params(**over):
    return {"fast_latency": 0.0, "fast_bandwidth": 0.0, "slow_latency": 0.0,
            "slow_bandwidth": 0.0, **over}


def test_tiers_from_options_win(topo):
    two = topo("two_socket_cxl")
    p = tier_params(fast_latency=80.0, fast_bandwidth=200.0, slow_latency=400.0,
                    slow_bandwidth=20.0)
    tiers, source = model.tiers_for(p, two, 0, 2)
    assert tiers == (Tier(80.0, 200.0), Tier(400.0, 20.0))
    assert source == "fast: options, slow: options"


def test_tiers_from_hmat(topo):
    """two_socket_cxl: node 0 reads at 90 ns and 102400 MB/s, node 2 at 250 ns, 32000."""
    two = topo("two_socket_cxl")
    tiers, source = model.tiers_for(tier_params(), two, 0, 2)
    assert tiers == (Tier(90.0, 102.4), Tier(250.0, 32.0))
    assert source == "fast: HMAT of node 0, slow: HMAT of node 2"
    # One figure of an option over the HMAT's other.
    tiers, source = model.tiers_for(tier_params(slow_latency=500.0), two, 0, 2)
    assert tiers == (Tier(90.0, 102.4), Tier(500.0, 32.0))
    assert source == "fast: HMAT of node 0, slow: HMAT of node 2 with options"


def test_tiers_assumed_without_hmat_or_options(topo):
    vm = topo("vm")
    for topology, slow in ((vm, None), (None, None), (vm, 0)):
        tiers, source = model.tiers_for(tier_params(), topology, 0, slow)
        assert tiers == model.ASSUMED == (Tier(110.0, 100.0), Tier(275.0, 25.0))
        assert source == "fast: assumed, slow: assumed"
    tiers, source = model.tiers_for(tier_params(fast_bandwidth=50.0), vm, 0, None)
    assert tiers == (Tier(110.0, 50.0), Tier(275.0, 25.0))
    assert source == "fast: assumed with options, slow: assumed"


# ---- engine.drive on paper -----------------------------------------------------------------
class FakeWork:
    """`units` accesses of `access_bytes` an epoch; the model engine never runs it."""

    def __init__(self, units, access_bytes=64):
        self._units, self.access_bytes = units, access_bytes

    def epoch_bytes(self):
        return self._units * self.access_bytes

    def units(self):
        return self._units

    def run(self, epoch):
        raise AssertionError("the model engine ran the workload")


# mlp 1, 64 B accesses: 100 ns on the fast tier, 300 on the slow.
TIERS = (Tier(100.0, 100.0), Tier(300.0, 100.0))
HOT_LAST = [np.array([1, 1, 10, 10], dtype=np.int64)] * 3


def drive(policy, counts, tiers=TIERS):
    return engine.drive(policy, FakeWork(int(counts[0].sum())), engine.Paper(
        np.zeros(len(counts[0]), dtype=bool)), counts, tiers, 1.0, False)


def test_oracle_beats_first_touch_by_the_hand_computed_margin():
    policies = policies_or_skip()
    profile = np.sum(HOT_LAST, axis=0)
    ft = drive(policies.get("first-touch")(4, 2), HOT_LAST)
    oracle = drive(policies.get("oracle")(4, 2, profile=profile), HOT_LAST)
    # first-touch: pages 0, 1 fast: 2 x 100 + 20 x 300; the oracle: 2, 3 fast.
    assert ft.predicted == ft.ns == [6200.0] * 3
    assert oracle.predicted == oracle.ns == [2600.0] * 3
    assert sum(oracle.predicted) <= sum(ft.predicted)
    assert ft.fast_hits == pytest.approx([2 / 22] * 3)
    assert oracle.fast_hits == pytest.approx([20 / 22] * 3)
    assert ft.fast_pages == oracle.fast_pages == 2
    assert (ft.promoted, ft.demoted, ft.pingpong) == (0, 0, 0)    # the start is no move


def test_oracle_never_slower_than_first_touch_on_skewed_streams():
    policies = policies_or_skip()
    rng = np.random.default_rng(7)
    for _ in range(20):
        counts = [rng.poisson(rng.pareto(1.0, 32)) for _ in range(4)]
        counts[0][0] += 1                   # no empty first epoch
        cap = int(rng.integers(0, 33))
        ft = drive(policies.get("first-touch")(32, cap), counts)
        oracle = drive(policies.get("oracle")(32, cap, profile=np.sum(counts, axis=0)), counts)
        assert sum(oracle.predicted) <= sum(ft.predicted) + 1e-6


class Scripted(Policy):
    """Places pages as told: the initial mask, then masks[i] after epoch i; keeps what it
    was shown."""
    NAME = "scripted"
    DESCRIPTION = "test"

    def __init__(self, pages, capacity, start, masks):
        super().__init__(pages, capacity)
        self.start, self.masks, self.seen = start, masks, []

    def initial(self):
        return np.array(self.start, dtype=bool)

    def after(self, epoch):
        self.seen.append(epoch)
        return np.array(self.masks[epoch.index], dtype=bool)


def test_moves_counted_as_the_mask_differences_and_pingpong_within_the_window():
    """Page 0 up after epoch 0, down after 1 (back within the window: ping-pong); page 1 up
    after 1, down after 6 (5 epochs later, outside PINGPONG_WINDOW = 4: not)."""
    assert engine.PINGPONG_WINDOW == 4
    F, T = False, True
    masks = [[T, F, F, F], [F, T, F, F], [F, T, F, F], [F, T, F, F], [F, T, F, F],
             [F, T, F, F], [F, F, F, F]]
    counts = [np.array([4, 3, 2, 1], dtype=np.int64)] * 8
    policy = Scripted(4, 2, [F, F, T, T], masks)        # pages 2, 3 fast at the start
    out = drive(policy, counts)
    # Moves from the start's placement: after epoch 0 pages 2, 3 down and 0 up.
    placements = [np.array(m) for m in [[F, F, T, T], *masks]]
    up = sum(int((b & ~a).sum()) for a, b in zip(placements, placements[1:]))
    down = sum(int((a & ~b).sum()) for a, b in zip(placements, placements[1:]))
    assert (out.promoted, out.demoted) == (up, down) == (2, 4)
    assert out.pingpong == 1
    # The policy saw every epoch but the last, each with the placement it ran on.
    assert [e.index for e in policy.seen] == list(range(7))
    for e, seen in enumerate(policy.seen):
        assert (seen.fast == placements[e]).all() and (seen.counts == counts[e]).all()
        assert seen.access_bytes == 64 and seen.tiers == TIERS
        assert seen.ns == out.ns[e] == out.predicted[e]
    # Epoch times: fast pages' accesses at 100 ns, the rest at 300.
    want = [100 * counts[0][m].sum() + 300 * counts[0][~m].sum() for m in placements]
    assert out.ns == [float(x) for x in want]
    assert out.fast_pages == 2


def test_pingpong_counts_only_moves_back_within_the_window():
    pp = engine.Pingpong(4)
    assert pp.note(0, np.array([0, 1, 2]), True) == 0          # the first moves
    assert pp.note(4, np.array([0]), False) == 1               # 4 epochs on: within
    assert pp.note(5, np.array([1]), False) == 0               # 5 on: outside
    assert pp.note(1, np.array([2]), True) == 0                # the same way again
    assert pp.note(2, np.array([3]), False) == 0               # never moved before
    assert pp.note(6, np.array([0, 1]), True) == 2             # both back within 4


class Overfull(Policy):
    NAME = "overfull"
    DESCRIPTION = "test"

    def __init__(self, pages, capacity, start_full=False, dtype=bool):
        super().__init__(pages, capacity)
        self.start_full, self.dtype = start_full, dtype

    def initial(self):
        if self.start_full:
            return np.ones(self.pages, dtype=bool)
        return first_touch(self.pages, self.capacity)

    def after(self, epoch):
        return np.ones(self.pages, dtype=self.dtype)


def test_a_policy_over_its_capacity_is_caught():
    with pytest.raises(AssertionError, match="policy overfull put 4 pages on the fast node, "
                                             "over its capacity of 2"):
        drive(Overfull(4, 2), HOT_LAST)
    with pytest.raises(AssertionError, match="put 4 pages .* capacity of 2"):
        drive(Overfull(4, 2, start_full=True), HOT_LAST)
    with pytest.raises(AssertionError, match="returned int64 x 4, not bool x 4"):
        drive(Overfull(4, 4, dtype=np.int64), HOT_LAST)


def test_all_fast_may_exceed_the_capacity():
    policies = policies_or_skip()
    out = drive(policies.get("all-fast")(4, 1), HOT_LAST)
    assert out.ns == [2200.0] * 3 and out.fast_pages == 4


# ---- engine.Pages on this machine's one node ---------------------------------------------
def table(pages=8):
    return Buffer(pages * PAGE, "bind:0", name="table")


def recorded_moves(monkeypatch, ns=None):
    """engine.move wrapped: each call's (node, pages) kept; with ns, a fake of that cost
    instead of the real move."""
    calls = []

    def fake(buf, node, which=None, **kw):
        calls.append((node, np.asarray(which).tolist()))
        if ns is not None:
            return memory.MoveResult(len(which), ns, {})
        return memory.move(buf, node, which=which, **kw)
    monkeypatch.setattr(engine, "move", fake)
    return calls


def test_pages_on_one_node_read_all_fast_and_moves_are_no_ops(monkeypatch):
    calls = recorded_moves(monkeypatch)
    buf = table()
    hands = engine.Pages(buf, 0, 0, PAGE, 0)
    assert hands.fast.dtype == bool and hands.fast.tolist() == [True] * 8
    # Pretend pages 4-7 were slow, to see the order of the calls.
    hands.fast = np.array([False] * 4 + [True] * 4)
    target = np.array([True, True, False, False, False, False, True, True])
    out = engine.Outcome()
    up, down = hands.apply(target, np.array([1, 0, 2, 3, 4, 5, 6, 7]), out)
    # Demotions first (pages 4, 5), then promotions in the order given (1, then 0).
    assert calls == [(0, [4, 5]), (0, [1, 0])]
    # Read back: every page on node 0, the fast node: up are the four "slow" ones.
    assert up.tolist() == [0, 1, 2, 3] and down.tolist() == []
    assert hands.fast.tolist() == [True] * 8
    assert out.unmoved == 4                 # pages 2-5 should be slow, and are not
    assert out.move_ns > 0


def test_moves_go_in_chunks_and_stop_when_the_time_box_is_spent(monkeypatch):
    calls = recorded_moves(monkeypatch, ns=1000)
    monkeypatch.setattr(engine, "MOVE_CHUNK", 2)
    hands = engine.Pages(table(), 0, 0, PAGE, 0)
    hands.fast = np.array([True] * 5 + [False] * 3)
    target = np.array([False] * 5 + [True] * 3)
    out = engine.Outcome()
    hands.apply(target, np.arange(8)[::-1], out)
    assert calls == [(0, [0, 1]), (0, [2, 3]), (0, [4]), (0, [7, 6]), (0, [5])]
    assert out.move_ns == 5000
    # 2.5 us a epoch: the third call starts at 2000 ns spent, the fourth does not.
    calls.clear()
    hands = engine.Pages(table(), 0, 0, PAGE, 2500)
    hands.fast = np.array([True] * 5 + [False] * 3)
    out = engine.Outcome()
    hands.apply(target, np.arange(8)[::-1], out)
    assert calls == [(0, [0, 1]), (0, [2, 3]), (0, [4])]
    assert out.move_ns == 3000


def test_a_page_astray_is_caught_by_its_index(monkeypatch):
    buf = table()
    real = memory.node_map

    def astray(b):
        where = real(b).copy()
        where[5] = 3
        return where
    hands = engine.Pages(buf, 0, 0, PAGE, 0)
    monkeypatch.setattr(engine, "node_map", astray)
    with pytest.raises(CheckError, match=r"tiering: page 5 of the table buffer is on node 3, "
                                         r"not on node 0 or 0 \(1 pages astray\)"):
        hands.apply(np.ones(8, dtype=bool), np.arange(8), engine.Outcome())
    with pytest.raises(CheckError, match="page 5 of the table buffer is on node 3"):
        engine.Pages(buf, 0, 0, PAGE, 0)


def test_real_engine_drive_on_one_node_with_a_fake_kernel():
    """drive with real=True times the workload's run() (here a fixed 1000 ns) and moves
    nothing on one node; the model's prediction sits beside the measurement."""
    policies = policies_or_skip()

    class Timed(FakeWork):
        def run(self, epoch):
            return 1000

    hands = engine.Pages(table(4), 0, 0, PAGE, 0)
    out = engine.drive(policies.get("first-touch")(4, 2), Timed(22), hands, HOT_LAST, TIERS,
                       1.0, True)
    assert out.ns == [1000.0] * 3
    # Every page is on node 0, the fast node, whatever first-touch asked for.
    assert out.predicted == [2200.0] * 3 and out.fast_pages == 4


# ---- memory.move(which=...) -----------------------------------------------------------------
def test_move_of_a_scattered_page_list():
    b = Buffer(16 * PAGE, "bind:0")
    r = memory.move(b, 0, which=np.array([13, 2, 7, 0]))
    assert (r.moved, r.failures) == (4, {}) and r.ns > 0
    assert memory.move(b, 0, which=[15], batch=1).moved == 1
    assert memory.move(b, 0, which=np.arange(16)[::3], batch=2).moved == 6


def test_failures_of_a_page_list_are_keyed_by_page_index():
    b = Buffer(16 * PAGE, "bind:0", prefault=False)
    a = b.array(np.uint64)
    a[:5 * 512] = np.arange(5 * 512)        # pages 0-4 present, the rest never touched
    r = memory.move(b, 0, which=np.array([12, 1, 9, 3]))
    assert r.moved == 2
    assert r.failures == {12: "ENOENT", 9: "ENOENT"}
    assert (a[:5 * 512] == np.arange(5 * 512)).all()
    assert memory.node_map(b)[[9, 12]].tolist() == [-errno.ENOENT] * 2


@pytest.mark.parametrize("which,method", [([], "move_pages"), ([-1, 2], "move_pages"),
                                          ([3, 16], "move_pages"), ([1, 2], "mbind")])
def test_bad_page_lists_are_refused(which, method):
    with pytest.raises(PlacementError, match="a page list must name some of the 16 pages "
                                             "and move them with move_pages"):
        memory.move(Buffer(16 * PAGE, "local"), 0, which=np.array(which, dtype=np.int64),
                    method=method)


# ---- the benchmark ---------------------------------------------------------------------------
def test_engine_real_is_refused_on_one_node(topo):
    vm = topo("vm")
    with common.cpus_of(vm):
        for over in ({"engine": "real"}, {"engine": "real", "fast": 0, "slow": 0}):
            with pytest.raises(UserError, match="engine=real moves pages between two nodes "
                                                "with memory; this machine has 0: use "
                                                "engine=model"):
                bench.check(params(**over), vm)
        assert bench.check(params(engine="model"), vm) is None
        with pytest.raises(UserError, match=r"slow=5: no such node with memory \(nodes with "
                                            r"memory: 0\)"):
            bench.check(params(engine="real", slow=5), vm)
        # The model may take another machine's nodes, their figures from options.
        assert bench.check(params(engine="model", fast=5, slow=6), vm) is None


@one_node
def test_engine_real_is_refused_on_this_machine():
    with pytest.raises(UserError, match="engine=real moves pages between two nodes"):
        bench.check(params(engine="real"), HERE)


def test_engine_auto_is_the_model_on_one_node_and_real_on_two(topo):
    vm, two = topo("vm"), topo("two_socket_cxl")
    with common.cpus_of(vm):
        assert bench.nodes(params(), vm) == (0, None)
        assert bench.engine_of(params(), vm) == "model"
        assert bench.engine_of(params(fast=0, slow=0), vm) == "model"
    with common.cpus_of(two):
        assert bench.nodes(params(), two) == (0, 2)         # the CPU-less CXL node
        assert bench.engine_of(params(), two) == "real"
        assert bench.engine_of(params(engine="model"), two) == "model"
    if ONE_NODE:
        assert bench.engine_of(params(), HERE) == "model"


def test_linux_is_skipped_by_the_model(topo):
    vm = topo("vm")
    with common.cpus_of(vm):
        assert bench.skip(params(policy="linux"), vm) == \
            "the model cannot predict what Linux's own tiering would do"
        assert bench.skip(params(policy="oracle"), vm) is None


def test_unused_lists_other_policies_knobs_and_the_share_of_bounds():
    policies = policies_or_skip()
    knobs = {f"{p.NAME.replace('-', '_')}_{k}": p.NAME for p in policies.POLICIES.values()
             for k in p.KNOBS}
    assert {"hemem_threshold", "tpp_watermark", "colloid_tolerance"} <= set(knobs)
    for policy in ("first-touch", "hemem", "tpp", "all-fast"):
        u = bench.unused(params(policy=policy))
        assert {k for k in u if k in knobs} == {k for k, p in knobs.items() if p != policy}
        assert all(u[k] == f"a knob of {knobs[k]}" for k in u if k in knobs)
    assert "hemem_threshold" not in bench.unused(params(policy="hemem"))
    assert "share" not in bench.unused(params(policy="oracle"))
    for bound in ("all-fast", "all-slow"):
        assert bench.unused(params(policy=bound))["share"] == \
            f"{bound} is a bound: it places every page itself"
    # The embedding's own: a custom table takes no scale, Zipf no profile; train's lr is
    # not an option here.
    u = bench.unused(params())
    assert {"scale", "profile"} <= set(u) and "lr" not in u and "alpha" not in u
    # The registry refuses such an option set away from its default.
    reg = benchmarks.get("tiering")
    assert reg.set_but_ignored(params(hemem_threshold=4)) == \
        {"hemem_threshold": (4, "a knob of hemem")}
    assert reg.set_but_ignored(params(policy="hemem", hemem_threshold=4)) == {}


@pytest.mark.parametrize("policy,share,pages,want", [
    ("all-fast", 0.25, 100, 100), ("all-fast", 0.0, 7, 7), ("all-slow", 1.0, 100, 0),
    ("first-touch", 0.29, 100, 29),     # 0.29 * 100 = 28.999999999999996
    ("oracle", 0.5, 7, 3), ("hemem", 0.0, 100, 0), ("tpp", 1.0, 100, 100),
    ("first-touch", 0.7, 10, 7),        # 7.000000000000001
])
def test_capacity(policy, share, pages, want):
    assert bench.capacity({"policy": policy, "share": share}, pages) == want


@one_node
@pytest.mark.parametrize("policy,dim,mlp,fast_ns,slow_ns", [
    ("all-fast", 128, 10.0, 11.0, 27.5),        # latency-bound: 110/10 > 512/100
    ("all-slow", 128, 10.0, 11.0, 27.5),        # 275/10 > 512/25 = 20.48
    ("all-fast", 1024, 100.0, 40.96, 163.84),   # bandwidth-bound: 4096/100 > 110/100
    ("all-fast", 128, 2.0, 55.0, 137.5),
])
def test_model_run_of_a_bound_in_closed_form(policy, dim, mlp, fast_ns, slow_ns):
    rows = 4096 if dim == 128 else 512
    p = params(policy=policy, dim=dim, mlp=mlp, rows=rows, engine="model", repeat=2)
    fast, slow = model.ASSUMED
    row = dim * 4
    assert fast_ns == max(fast.latency_ns / mlp, row / fast.bandwidth)
    assert slow_ns == max(slow.latency_ns / mlp, row / slow.bandwidth)
    each = fast_ns if policy == "all-fast" else slow_ns
    m = bench.run(p)
    assert m.status == "ok" and m.kernel == "embedding:model" and m.isa == ""
    assert set(m.units) == {"throughput", "fast_hits", "migrated", "pingpong"}
    assert len(m.reps) == 2
    for rep in m.reps:
        # 2048 lookups an epoch at `each` ns: 1000 / each M lookups/s.
        assert rep["throughput"] == pytest.approx(1e3 / each, rel=1e-12)
        assert rep["fast_hits"] == (1.0 if policy == "all-fast" else 0.0)
        assert rep["migrated"] == rep["pingpong"] == 0
    pages = rows * row // PAGE
    assert m.info["engine"] == "model" and m.info["slow_node"] is None
    assert m.info["fast_node"] == 0
    assert m.info["tiers"]["source"] == "fast: assumed, slow: assumed"
    assert m.info["tiers"]["fast"] == {"latency_ns": 110.0, "bandwidth": 100.0}
    assert (m.info["pages"], m.info["page_bytes"], m.info["epochs"]) == (pages, PAGE, 3)
    assert m.info["capacity_pages"] == (pages if policy == "all-fast" else 0)
    assert m.info["epoch_ns"] == [round(2048 * each)] * 3


@one_node
def test_model_run_of_first_touch_in_closed_form():
    policies_or_skip()
    p = params(policy="first-touch", share=0.25, engine="model")
    m = bench.run(p)
    w = workloads.Embedding(p)
    counts = [w.counts(e, 512, PAGE) for e in range(3)]
    hits = [int(c[:128].sum()) for c in counts]          # 0.25 of 512 pages: the first 128
    ns = [h * 11.0 + (2048 - h) * 27.5 for h in hits]
    rep = m.reps[0]
    assert rep["throughput"] == pytest.approx(3 * 2048 / sum(ns) * 1e3, rel=1e-12)
    assert rep["fast_hits"] == pytest.approx(np.mean([h / 2048 for h in hits]), rel=1e-12)
    assert m.info["capacity_pages"] == 128
    assert m.info["epoch_ns"] == [round(x) for x in ns]


# ---- analysis --------------------------------------------------------------------------------
def record(policy, share, throughput, metric="throughput", unit="M/s", status="ok", **over):
    p = params(policy=policy, share=share, **over)
    return {"case": f"j/{policy}-{share}", "benchmark": "tiering", "kernel": "embedding:model",
            "isa": "", "cpus": [0], "parameters": p, "status": status, "error": None,
            "run_dir": "/tmp/x", "metric": metric, "unit": unit, "median": throughput,
            "ci_low": throughput, "ci_high": throughput, "cv": 0.0, "n": 1, "noisy": False}


def scenario_records(**over):
    rows = [("all-fast", 0.25, 100.0), ("all-slow", 0.25, 40.0),
            ("oracle", 1.0, 100.0), ("oracle", 0.5, 98.0), ("oracle", 0.25, 80.0),
            ("first-touch", 1.0, 100.0), ("first-touch", 0.5, 90.0),
            ("first-touch", 0.25, 97.0)]
    return [record(pol, s, t, **over) for pol, s, t in rows]


def test_analysis_slowdowns_gaps_and_knees():
    records = scenario_records()
    records.append(record("first-touch", 0.5, 0.6, metric="fast_hits", unit="ratio"))
    records.append(record("first-touch", 0.125, None, metric=None, unit=None,
                          status="failed"))
    records.append({**record("oracle", 0.125, 1.0), "benchmark": "embedding"})
    [sc] = analysis.tiering(records)
    assert (sc["workload"], sc["phase"], sc["engine"], sc["unit"]) == \
        ("embedding", "none", "model", "M/s")
    assert (sc["all_fast"], sc["all_slow"]) == (100.0, 40.0)
    assert sc["shares"] == [1.0, 0.5, 0.25]
    assert set(sc["policies"]) == {"oracle", "first-touch"}      # the bounds are not rows
    assert "policy" not in sc["params"] and "share" not in sc["params"]
    o, ft = sc["policies"]["oracle"], sc["policies"]["first-touch"]
    assert o["slowdown"] == pytest.approx({1.0: 0.0, 0.5: 100 / 98 - 1, 0.25: 0.25})
    assert ft["slowdown"] == pytest.approx({1.0: 0.0, 0.5: 100 / 90 - 1, 0.25: 100 / 97 - 1})
    assert o["gap"] == pytest.approx({1.0: 0.0, 0.5: 0.0, 0.25: 0.0})
    assert ft["gap"] == pytest.approx({1.0: 0.0, 0.5: 98 / 90 - 1, 0.25: 80 / 97 - 1})
    assert ft["fast_hits"] == {0.5: 0.6}
    # The oracle is within 5 % down to 0.5; first-touch is not at 0.5, so its knee is 1
    # although 0.25 is within 5 % again.
    assert o["knee"] == 0.5 and ft["knee"] == 1.0


def test_analysis_keeps_scenarios_apart_and_goes_without_bounds():
    records = scenario_records() + scenario_records(phase="shift")[2:]
    a, b = analysis.tiering(records)
    assert (a["phase"], b["phase"]) == ("none", "shift")
    assert b["all_fast"] is None and b["all_slow"] is None
    assert b["policies"]["oracle"]["slowdown"] == {} and b["policies"]["oracle"]["knee"] is None
    assert b["policies"]["first-touch"]["gap"][0.5] == pytest.approx(98 / 90 - 1)


def test_knee():
    assert analysis.KNEE_SLOWDOWN == 0.05
    assert analysis.knee({1.0: 0.0, 0.5: 0.01, 0.25: 0.2, 0.125: 0.5}) == 0.5
    assert analysis.knee({1.0: 0.0, 0.5: 0.1, 0.25: 0.01}) == 1.0
    assert analysis.knee({0.5: 0.0, 0.25: 0.04, 0.125: 0.06}) == 0.25
    assert analysis.knee({1.0: 0.05, 0.5: 0.0500001}) == 1.0       # 5 % itself is within
    assert analysis.knee({1.0: 0.2, 0.5: 0.0}) is None
    assert analysis.knee({1.0: 0.0, 0.5: 0.0, 0.25: 0.0}) == 0.25
    assert analysis.knee({}) is None


# ---- cxlbench tiering ---------------------------------------------------------------------
def invoke(*args):
    return CliRunner().invoke(main, ["tiering", *args])


@one_node
def test_tiering_command_end_to_end(tmp_path):
    policies_or_skip()
    sets = ["repeat=1", "rows=4096", "batch=64", "epochs=3"]
    r = invoke("--policies", "all-fast,oracle,first-touch", "--shares", "1,0.5",
               *[a for s in sets for a in ("--set", s)], "--results-dir", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert "(5 cases, 0 failed)" in r.stderr
    out = r.stdout
    assert "model engine: PREDICTED from each tier's latency and bandwidth, not measured" \
        in out
    # The expected figures, from the model in closed form: 11 ns a lookup on the fast tier,
    # 27.5 on the slow.
    w = workloads.Embedding(params())
    counts = [w.counts(e, 512, PAGE) for e in range(3)]
    profile = np.sum(counts, axis=0)
    oracle_pages = np.lexsort((np.arange(512), -profile))[:256]

    def time_of(fast_pages):
        hits = sum(int(c[fast_pages].sum()) for c in counts)
        return hits * 11.0 + (3 * 2048 - hits) * 27.5
    top = 3 * 2048 * 11.0
    t_ft, t_or = time_of(np.arange(256)), time_of(oracle_pages)
    assert f"all-fast {3 * 2048 / top * 1e3:.4g} M/s" in out
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("policy "))
    assert lines[head].split() == ["policy", "1", "0.5", "knee", "gap", "moved", "MB"]
    rows = {line.split()[0]: line.split() for line in lines[head + 1:] if line.strip()
            and not line.startswith("results")}
    assert set(rows) == {"oracle", "first-touch"}
    assert rows["oracle"] == ["oracle", "0.0%", f"{t_or / top - 1:.1%}", "1", "0.0%", "0"]
    assert rows["first-touch"] == ["first-touch", "0.0%", f"{t_ft / top - 1:.1%}", "1",
                                   f"{t_ft / t_or - 1:.1%}", "0"]
    assert t_or < t_ft and t_or / top - 1 > 0.05          # so both knees are at 1


def test_tiering_command_refuses_what_its_flags_say(tmp_path):
    for key, flag in (("policy", "--policies"), ("share", "--shares"),
                      ("engine", "--engine"), ("workload", "--workload")):
        r = invoke("--set", f"{key}=x", "--results-dir", str(tmp_path), "--dry-run")
        assert r.exit_code == 2 and f"error: --set {key}=...: use {flag}" in r.stderr
    r = invoke("--shares", "1,half", "--results-dir", str(tmp_path), "--dry-run")
    assert r.exit_code == 2
    assert "error: --shares '1,half': give numbers between 0 and 1" in r.stderr
    r = invoke("--shares", "1,2", "--results-dir", str(tmp_path), "--dry-run")
    assert r.exit_code == 2 and "option 'share': 2.0 is above the maximum 1.0" in r.stderr
    r = invoke("--policies", ",", "--results-dir", str(tmp_path), "--dry-run")
    assert r.exit_code == 2 and "error: --policies: name at least one policy" in r.stderr
    assert not os.listdir(tmp_path)


def test_tiering_command_lists_bounds_once_and_policies_at_every_share(tmp_path):
    r = invoke("--policies", "all-fast,all-slow,oracle", "--shares", "0.5,0.25",
               "--results-dir", str(tmp_path), "--dry-run")
    assert r.exit_code == 0, r.output
    cases = r.stdout.splitlines()
    assert [c.split()[0] for c in cases] == ["bounds/000", "bounds/001", "oracle/000",
                                            "oracle/001"]
    # Labels name what differs from the defaults (share 0.25 is the default).
    assert [c.split()[1:] for c in cases] == [
        ["tiering", "policy=all-fast"], ["tiering", "policy=all-slow"],
        ["tiering", "policy=oracle", "share=0.5"], ["tiering", "policy=oracle"]]


@one_node
def test_tiering_command_refuses_engine_real_here(tmp_path):
    r = invoke("--policies", "all-fast,oracle", "--engine", "real", "--results-dir",
               str(tmp_path), "--dry-run")
    assert r.exit_code == 2 and "engine=real moves pages between two nodes" in r.stderr


def test_tiering_command_takes_a_policy_knob(tmp_path):
    """A knob goes to its own policy's cases only; one of a policy not run is refused."""
    r = invoke("--policies", "all-fast,first-touch,hemem", "--shares", "0.5", "--set",
               "hemem_threshold=4", "--results-dir", str(tmp_path), "--dry-run")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert [ln for ln in lines if "hemem_threshold=4" in ln] == \
        [ln for ln in lines if "policy=hemem" in ln] != []
    r = invoke("--policies", "all-fast,first-touch", "--set", "hemem_threshold=4",
               "--results-dir", str(tmp_path), "--dry-run")
    assert r.exit_code == 2 and "a knob of hemem, which --policies does not run" in r.stderr


def test_tier_figures_from_a_catalogue_run():
    """The chase latency at the largest size bound to the node (the median of its
    repetitions), the best read-kernel case bound to it; the node matrix where neither
    exists; None where the run has no latency or no bandwidth of the node."""
    import pandas as pd

    def row(case, bench, metric, value, **params):
        return {"case": case, "benchmark": bench, "metric": metric, "value": value, **params}
    rows = [row("lat/0", "chase", "latency", 5.0, mem="bind:0", size=65536),
            *[row("lat/1", "chase", "latency", v, mem="bind:0", size=1 << 24)
              for v in (99.0, 100.0, 140.0)],
            row("lat/2", "chase", "latency", 250.0, mem="bind:1", size=1 << 24),
            row("bw/0", "bandwidth", "bandwidth", 10.0, mem="bind:0", kernel="read"),
            row("bw/1", "bandwidth", "bandwidth", 18.0, mem="bind:0", kernel="read"),
            row("bw/2", "bandwidth", "bandwidth", 4.0, mem="bind:1", kernel="read"),
            row("bw/3", "bandwidth", "bandwidth", 99.0, mem="bind:1", kernel="copy"),
            row("bw/4", "bandwidth", "bandwidth", 7.0, mem="bind:2", kernel="read")]
    df = pd.DataFrame(rows)
    assert model.measured_tier(df, 0) == Tier(100.0, 18.0)
    assert model.measured_tier(df, 1) == Tier(250.0, 4.0)
    assert model.measured_tier(df, 2) is None          # a bandwidth, no latency
    matrix = pd.DataFrame([row("m/0", "matrix", "latency", 300.0, target=1),
                           row("m/1", "matrix", "bandwidth", 5.0, target=1)])
    assert model.measured_tier(matrix, 1) == Tier(300.0, 5.0)
    assert model.measured_tier(matrix, 0) is None
