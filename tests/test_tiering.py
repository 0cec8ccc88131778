"""Tiering (cxlbench.tiering, the tiering benchmark, `cxlbench tiering`): the pages an
access touches, the embedding workload's epochs and their exact per-page counts, the
model's roofline, where its tiers and migration rate come from, the engine loop on paper
(moves charged at the migration rate, pages drifting under it) and on this machine's one
node or two simulated ones (moves that are no-ops, chunks of demotions then promotions into
room, the time box, a page astray caught), move(which=...), the benchmark's checks and
figures (moves charged) in both engines, the knees and gaps of the analysis, and the
command end to end. Every expected figure is worked out here by hand or in closed form."""
import errno
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from cxlbench import analysis, analysis_text, benchmarks, memory, native
from cxlbench.benchmarks import common, embedding
from cxlbench.benchmarks import tiering as bench
from cxlbench.cli import main
from cxlbench.errors import CheckError, PlacementError, UserError
from cxlbench.memory import Buffer
from cxlbench.tiering import calibration, engine, model
from cxlbench.workloads import embedding as embedding_workload
from cxlbench.workloads import epochs
from cxlbench.tiering.policies.base import Policy, TierFigures, first_touch
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
    over = {"rows": 4096, "batch": 64, "epochs": 3, "repeat": 1, **over}
    # the embedding workload's own options by their names in its table
    p.update({f"embedding.{k}" if f"embedding.{k}" in bench.OPTIONS else k: v
              for k, v in over.items()})
    return p


def hot(counts, k):
    """The k most accessed pages."""
    return set(np.argsort(-counts, kind="stable")[:k].tolist())


def test_each_tiering_module_imports_first_in_a_fresh_interpreter():
    """The registry imports the tiering benchmark, which imports the workloads and the
    engines: no order of first import may find one half made."""
    for name in ("cxlbench.workloads", "cxlbench.workloads.embedding",
                 "cxlbench.workloads.kvcache", "cxlbench.tiering.engine",
                 "cxlbench.tiering.model", "cxlbench.benchmarks.tiering"):
        r = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr


# ---- epochs.pages_touched --------------------------------------------------------------
def test_accesses_inside_one_page_count_once():
    first = np.array([0, 100, 4095, 4096, 8191, 3 * 4096 + 7], dtype=np.int64)
    assert epochs.pages_touched(first, 1, PAGE).tolist() == [0, 0, 0, 1, 1, 3]
    # 64 B at 4032 ends on byte 4095: still page 0 alone.
    assert epochs.pages_touched(np.array([4032, 4096]), 64, PAGE).tolist() == [0, 1]


def test_an_access_over_a_page_boundary_counts_on_both():
    first = np.array([0, 4000, 8192, 4095], dtype=np.int64)
    # 200 B: [0,199] page 0; [4000,4199] pages 0 and 1; [8192,8391] page 2; [4095,4294] 0,1.
    assert epochs.pages_touched(first, 200, PAGE).tolist() == [0, 0, 1, 2, 0, 1]


def test_rows_larger_than_a_page_touch_every_page_they_span():
    first = np.array([100, 0, 3 * 4096 - 1], dtype=np.int64)
    # 10000 B: [100,10099] pages 0-2; [0,9999] pages 0-2; [12287,22286] pages 2-5.
    assert epochs.pages_touched(first, 10000, PAGE).tolist() == \
        [0, 1, 2, 0, 1, 2, 2, 3, 4, 5]
    # Exactly two pages, aligned: two pages each, no third.
    assert epochs.pages_touched(np.array([0, 8192]), 8192, PAGE).tolist() == [0, 1, 2, 3]


# ---- the embedding workload's epochs ------------------------------------------------------
@pytest.mark.parametrize("dim,per_row", [(128, 1), (1024, 1), (2048, 2)])
def test_counts_sum_to_lookups_times_pages_per_row(dim, per_row):
    """fp32 rows of 512 B, 4 KiB and 8 KiB, page-aligned: 1, 1 and 2 pages a lookup."""
    rows = 512
    w = bench.workload(params(rows=rows, dim=dim, tables=2, batch=16, pooling=4))
    assert w.units() == 2 * 16 * 4 == 128
    assert w.epoch_bytes() == 128 * dim * 4
    pages = 2 * rows * dim * 4 // PAGE
    assert w.sizes()["table"] == pages * PAGE
    for e in range(3):
        c = w.counts(e, pages, PAGE)
        assert c.shape == (pages,) and c.sum() == 128 * per_row


def test_counts_of_rows_straddling_pages_match_a_row_by_row_count():
    """6000 B rows (dim 1500) span two or three pages depending on where they start."""
    w = bench.workload(params(rows=50, dim=1500, batch=8, pooling=4))
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
    w = bench.workload(p)
    whole = embedding_workload.Layout((300, 300), (3, 3), 128, "fp32", 40)
    indices, _ = embedding_workload.make_indices(whole, w.params)
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
    w = bench.workload(params(epochs=4))
    c = [w.counts(e, 512, PAGE) for e in range(4)]
    assert len(hot(c[0], 16) & hot(c[1], 16)) >= 10
    assert len(hot(c[0] + c[1], 16) & hot(c[2] + c[3], 16)) >= 10


def test_phase_shift_moves_the_hot_pages_in_the_second_half():
    still = bench.workload(params(epochs=4))
    moved = bench.workload(params(epochs=4, phase="shift"))
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
    still, moved = bench.workload(p), bench.workload({**p, "phase": "shift"})
    assert (moved._streams[0] == still._streams[0]).all()     # epochs // 2 = 1 unshifted
    per = 10 * 3
    for e in (1, 2):
        for t in range(2):
            s = still._streams[e][t * per:(t + 1) * per]
            m = moved._streams[e][t * per:(t + 1) * per]
            assert (m == 1000 * t + (s - 1000 * t + 500) % 1000).all()


# ---- model -----------------------------------------------------------------------------------
def test_epoch_time_is_the_longer_of_waiting_and_streaming():
    """A roofline: waiting, every access's latency summed over mlp x threads; streaming,
    each tier's bytes at its bandwidth, the two tiers at once (the longer of them)."""
    counts = np.array([3, 0, 5, 2], dtype=np.int64)
    fast = np.array([True, False, False, True])
    tiers = (TierFigures(100.0, 100.0), TierFigures(300.0, 10.0))
    # 5 accesses on each tier: waiting (5 x 100 + 5 x 300) / (mlp x threads) = 2000 / 4;
    # streaming at 64 B max(5 x 64 / 100, 5 x 64 / 10) = 32.
    assert model.epoch_ns(counts, fast, tiers, 64, 4) == 500.0
    assert model.epoch_ns(counts, fast, tiers, 64, 4, 1) == 500.0      # threads: 1
    assert model.epoch_ns(counts, fast, tiers, 64, 4, 2) == 250.0
    # 100 threads: waiting 20 < streaming 32, the slow tier's 320 B at 10 GB/s.
    assert model.epoch_ns(counts, fast, tiers, 64, 1, 100) == 32.0
    # 1024 B: streaming max(5120 / 100, 5120 / 10) = 512 > waiting 500.
    assert model.epoch_ns(counts, fast, tiers, 1024, 4) == 512.0
    # All slow: waiting 10 x 300 / 4 = 750 > streaming 640 / 10.
    assert model.epoch_ns(counts, np.zeros(4, bool), tiers, 64, 4) == 750.0
    # All fast, mlp 100: waiting 10 x 100 / 100 = 10 < streaming 10240 / 100.
    assert model.epoch_ns(counts, np.ones(4, bool), tiers, 1024, 100) == 102.4
    assert model.epoch_ns(np.zeros(4, np.int64), fast, tiers, 64, 4) == 0.0


def test_the_two_tiers_stream_at_once_not_one_after_the_other():
    counts = np.array([5, 5], dtype=np.int64)
    fast = np.array([True, False])
    same = (TierFigures(100.0, 100.0), TierFigures(300.0, 100.0))
    # 5 x 1024 B on each at 100 GB/s: 51.2 ns each, together 51.2 (not 102.4); waiting
    # (500 + 1500) / 1000 = 2.
    assert model.epoch_ns(counts, fast, same, 1024, 1000) == 51.2
    assert not hasattr(model, "access_ns")      # no per-access cost any more


def tier_params(**over):
    return {"fast_latency": 0.0, "fast_bandwidth": 0.0, "slow_latency": 0.0,
            "slow_bandwidth": 0.0, **over}


def run_row(case, bench, metric, value, **params):
    """One row of a catalogue run's frame (results.load)."""
    return {"case": case, "benchmark": bench, "metric": metric, "value": value, **params}


def measured(*nodes):
    """A catalogue run's frame with a chase latency and a read bandwidth bound to each of
    `nodes` (node n: 100 + 150 n ns, 18 / (n + 1) GB/s)."""
    import pandas as pd
    rows = []
    for n in nodes:
        rows += [run_row(f"lat/{n}", "chase", "latency", 100.0 + 150 * n, mem=f"bind:{n}",
                         size=1 << 24),
                 run_row(f"bw/{n}", "bandwidth", "bandwidth", 18.0 / (n + 1), mem=f"bind:{n}",
                         kernel="read")]
    return pd.DataFrame(rows)


def test_tiers_from_options_win(topo):
    two = topo("two_socket_cxl")
    p = tier_params(fast_latency=80.0, fast_bandwidth=200.0, slow_latency=400.0,
                    slow_bandwidth=20.0)
    tiers, source = model.tiers_for(p, two, 0, 2)
    assert tiers == (TierFigures(80.0, 200.0), TierFigures(400.0, 20.0))
    assert source == "fast: options, slow: options"


def test_tiers_from_hmat(topo):
    """two_socket_cxl: node 0 reads at 90 ns and 102400 MB/s, node 2 at 250 ns, 32000."""
    two = topo("two_socket_cxl")
    tiers, source = model.tiers_for(tier_params(), two, 0, 2)
    assert tiers == (TierFigures(90.0, 102.4), TierFigures(250.0, 32.0))
    assert source == "fast: HMAT of node 0, slow: HMAT of node 2"
    # One figure of an option over the HMAT's other.
    tiers, source = model.tiers_for(tier_params(slow_latency=500.0), two, 0, 2)
    assert tiers == (TierFigures(90.0, 102.4), TierFigures(500.0, 32.0))
    assert source == "fast: HMAT of node 0, slow: HMAT of node 2 with options"


def test_tiers_assumed_without_hmat_or_options(topo):
    vm = topo("vm")
    for topology, slow in ((vm, None), (None, None), (vm, 0)):
        tiers, source = model.tiers_for(tier_params(), topology, 0, slow)
        assert tiers == model.ASSUMED == (TierFigures(110.0, 100.0), TierFigures(275.0, 25.0))
        assert source == "fast: assumed, slow: assumed"


ASSUMED_BOTH = ("fast: assumed (the other tier had no figures of the same kind), "
                "slow: assumed (the other tier had no figures of the same kind)")


def test_a_measured_tier_beside_an_assumed_one_is_assumed_too(topo, monkeypatch):
    """HMAT or a catalogue run for one node, nothing for the other: both ASSUMED, and the
    source says why (a measured tier beside an assumed one compares two machines)."""
    two = topo("two_socket_cxl")
    # Node 0's HMAT, and no slow node or one (5) that two_socket_cxl lacks.
    for slow in (None, 5):
        assert model.tiers_for(tier_params(), two, 0, slow) == (model.ASSUMED, ASSUMED_BOTH)
    # Node 2's HMAT as the slow tier, beside a fast node with none.
    assert model.tiers_for(tier_params(), two, 5, 2) == (model.ASSUMED, ASSUMED_BOTH)
    # A catalogue run that measured node 0 only: asked for node 1's figures, it is refused.
    monkeypatch.setattr(model, "_frame", lambda path: measured(0))
    p = tier_params(tiers_from="run-1")
    with pytest.raises(UserError, match=r"tiers_from=run-1: no chase latency and read "
                                        r"bandwidth \(nor node matrix\) bound to node 1"):
        model.tiers_for(p, None, 0, 1)
    # ...and one that measured both: kept, 100 + 150 n ns and 18 / (n + 1) GB/s.
    monkeypatch.setattr(model, "_frame", lambda path: measured(0, 1))
    assert model.tiers_for(p, None, 0, 1) == \
        ((TierFigures(100.0, 18.0), TierFigures(250.0, 9.0)), "fast: node 0 in run-1, slow: node 1 in run-1")


def test_a_tier_from_options_keeps_the_other_as_it_is(topo):
    """Options are the user's word: neither they nor the tier beside them change."""
    two = topo("two_socket_cxl")
    opts = tier_params(fast_latency=80.0, fast_bandwidth=200.0)
    assert model.tiers_for(opts, two, 0, None) == \
        ((TierFigures(80.0, 200.0), TierFigures(275.0, 25.0)), "fast: options, slow: assumed")
    opts = tier_params(slow_latency=400.0, slow_bandwidth=20.0)
    assert model.tiers_for(opts, two, 0, None) == \
        ((TierFigures(90.0, 102.4), TierFigures(400.0, 20.0)), "fast: HMAT of node 0, slow: options")


def test_an_option_on_an_assumed_tier_is_kept_where_nothing_is_measured(topo):
    vm = topo("vm")
    assert model.tiers_for(tier_params(fast_bandwidth=50.0), vm, 0, None) == \
        ((TierFigures(110.0, 50.0), TierFigures(275.0, 25.0)), "fast: assumed with options, slow: assumed")
    assert model.tiers_for(tier_params(slow_latency=500.0), vm, 0, None) == \
        ((TierFigures(110.0, 100.0), TierFigures(500.0, 25.0)), "fast: assumed, slow: assumed with options")


def test_an_option_over_hmat_survives_the_assumed_rule(topo):
    tiers, _ = model.tiers_for(tier_params(fast_latency=80.0), topo("two_socket_cxl"), 0,
                               None)
    assert tiers[0].latency_ns == 80.0 and tiers[1] == model.ASSUMED[1]


def test_migrate_rate_from_options_else_the_run_else_assumed(monkeypatch):
    """The run's rate: the median bandwidth of each migrate case that moved 4 KiB pages
    with move_pages between the two nodes (either way), then the median of those; no-move
    baselines, THP, mbind and other node pairs are not the engine's moves."""
    assert model.ASSUMED_MIGRATE == 2.0
    assert model.migrate_rate({"migrate_gbs": 0.0, "tiers_from": ""}) == (2.0, "assumed")
    assert model.migrate_rate({"migrate_gbs": 8.0, "tiers_from": "run-1"}) == (8.0, "options")
    import pandas as pd

    def moved(case, value, frm=0, to=1, method="move_pages", page="4k"):
        return run_row(case, "migrate", "bandwidth", value, method=method, page=page,
                       **{"from": frm, "to": to})
    frame = pd.DataFrame([
        *[moved("m/0", v) for v in (1.0, 3.0, 2.0)],                   # 2
        moved("m/1", 5.0, frm=1, to=0),                                 # 5, the way back
        *[moved("m/2", v) for v in (4.0, 5.0)],                        # 4.5
        moved("m/3", 40.0, frm=0, to=0),                                # a no-move baseline
        moved("m/4", 40.0, page="thp"), moved("m/5", 40.0, method="mbind"),
        moved("m/6", 40.0, frm=0, to=2),                                # another pair
        run_row("m/7", "migrate", "latency", 99.0, method="move_pages", page="4k",
                **{"from": 0, "to": 1}),
        run_row("bw/0", "bandwidth", "bandwidth", 50.0)])
    monkeypatch.setattr(model, "_frame", lambda path: frame)
    # The median of 2, 5 and 4.5 (not 3.5, the median of every row, nor their mean).
    assert model.migrate_rate({"migrate_gbs": 0.0, "tiers_from": "run-1"}, 0, 1) == \
        (4.5, "run-1")
    assert model.migrate_rate({"migrate_gbs": 8.0, "tiers_from": "run-1"}, 0, 1) == \
        (8.0, "options")
    assert model.migrate_rate({"migrate_gbs": 0.0, "tiers_from": "run-1"}, 0, 3) == \
        (2.0, "assumed")                                                # no case of 0 and 3
    monkeypatch.setattr(model, "_frame", lambda path: measured(0))      # no migrate cases
    assert model.migrate_rate({"migrate_gbs": 0.0, "tiers_from": "run-1"}, 0, 1) == \
        (2.0, "assumed")


# ---- engine.drive on paper -----------------------------------------------------------------
class FakeWork:
    """`units` accesses of `access_bytes` an epoch; the model engine never runs it."""

    def __init__(self, units, access_bytes=64):
        self._units, self.access_bytes = units, access_bytes

    def epoch_bytes(self):
        return self._units * self.access_bytes

    def units(self):
        return self._units

    RATE = ("M/s", 1e6)

    def waits(self, counts):
        return self._units

    def run(self, epoch):
        raise AssertionError("the model engine ran the workload")


# mlp 1, one thread, 64 B accesses: 100 ns on the fast tier, 300 on the slow (latency-bound:
# 64 B at 100 GB/s is 0.64 ns). Moves at 2 GB/s: 2048 ns a 4 KiB page.
TIERS = (TierFigures(100.0, 100.0), TierFigures(300.0, 100.0))
RATE = 2.0
HOT_LAST = [np.array([1, 1, 10, 10], dtype=np.int64)] * 3


def drive(policy, counts, tiers=TIERS, pages_of=None, threads=1):
    pages_of = pages_of or engine.PlannedPages(len(counts[0]), PAGE, RATE)
    return engine.drive(policy, FakeWork(int(counts[0].sum())), pages_of, counts, tiers, 1.0,
                        threads, False)


def test_paper_places_as_told_and_charges_each_move_at_the_migration_rate():
    pages_of = engine.PlannedPages(4, PAGE, RATE)
    assert pages_of.fast.tolist() == [False] * 4 and pages_of.read() is pages_of.fast
    out = engine.Outcome()
    up, down = pages_of.apply(np.array([True, True, False, False]), np.arange(4), out, 2)
    assert (up.tolist(), down.tolist(), out.move_ns) == ([0, 1], [], 2 * 4096 / 2.0)
    up, down = pages_of.apply(np.array([False, True, True, False]), np.arange(4), out, 2)
    assert (up.tolist(), down.tolist(), out.move_ns) == ([2], [0], 4 * 4096 / 2.0)
    assert pages_of.read().tolist() == [False, True, True, False]
    # A 2 MiB page at 0.5 GB/s: 2097152 / 0.5 = 4194304 ns.
    out, big = engine.Outcome(), engine.PlannedPages(2, 2 << 20, 0.5)
    big.apply(np.array([True, False]), np.arange(2), out, 1)
    assert out.move_ns == 4194304.0


def test_oracle_beats_first_touch_by_the_hand_computed_margin():
    policies = policies_or_skip()
    profile = np.sum(HOT_LAST, axis=0)
    ft = drive(policies.get("first-touch")(4, 2), HOT_LAST)
    oracle = drive(policies.get("oracle")(4, 2, profile=profile), HOT_LAST)
    # first-touch: pages 0, 1 fast: 2 x 100 + 20 x 300; the oracle: 2, 3 fast.
    assert ft.predicted == ft.ns == [6200.0] * 3
    assert oracle.predicted == oracle.ns == [2600.0] * 3
    assert ft.fast_hits == pytest.approx([2 / 22] * 3)
    assert oracle.fast_hits == pytest.approx([20 / 22] * 3)
    assert ft.fast_share == oracle.fast_share == [0.5] * 3
    # The start is no move: neither counted nor charged.
    for out in (ft, oracle):
        assert (out.promoted, out.demoted, out.pingpong, out.move_ns) == (0, 0, 0, 0)
        assert (out.unmoved, out.start_unmoved, out.drifted) == (0, 0, 0)


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


def test_drive_passes_threads_to_the_model():
    """Two threads halve the waiting: first-touch's 6200 ns an epoch becomes 3100."""
    policies = policies_or_skip()
    out = drive(policies.get("first-touch")(4, 2), HOT_LAST, threads=2)
    assert out.ns == out.predicted == [3100.0] * 3


class Scripted(Policy):
    """Places pages as told: the initial mask, then masks[i] after epoch i; keeps what it
    was shown."""
    NAME = "scripted"
    DESCRIPTION = "test"

    def __init__(self, pages, capacity, start, masks=()):
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
    # The 6 moves at 2048 ns each; the start's 2 promotions not charged.
    assert out.move_ns == 6 * PAGE / RATE == 12288.0
    # The policy saw every epoch but the last, each with the placement it ran on.
    assert [e.index for e in policy.seen] == list(range(7))
    for e, seen in enumerate(policy.seen):
        assert (seen.fast == placements[e]).all() and (seen.counts == counts[e]).all()
        assert seen.access_bytes == 64 and seen.tiers == TIERS
        assert seen.ns == out.ns[e] == out.predicted[e]
    # Epoch times: fast pages' accesses at 100 ns, the rest at 300.
    want = [100 * counts[0][m].sum() + 300 * counts[0][~m].sum() for m in placements]
    assert out.ns == [float(x) for x in want]
    assert out.fast_share == [0.5, 0.25] + [0.25] * 5 + [0.0]


def test_pingpong_counts_the_pages_moved_back_within_the_window_once_each():
    pp = engine.Pingpong(4)
    assert pp.note(0, np.array([0, 1, 2]), True) is None       # the first moves
    assert pp.pages == 0
    pp.note(4, np.array([0]), False)                           # 4 epochs on: within
    assert pp.pages == 1
    pp.note(5, np.array([1]), False)                           # 5 on: outside
    pp.note(1, np.array([2]), True)                            # the same way again
    pp.note(2, np.array([3]), False)                           # never moved before
    assert pp.pages == 1
    pp.note(6, np.array([0, 1]), True)                         # both back within 4
    assert pp.pages == 2
    pp.note(7, np.array([0]), False)                           # page 0 a third time
    assert pp.pages == 2


def test_a_page_that_pingpongs_twice_counts_once():
    F, T = False, True
    masks = [[F, T], [T, F], [F, T], [T, F]]        # page 0 down, up, down, up
    out = drive(Scripted(2, 1, [T, F], masks), [np.array([2, 1], dtype=np.int64)] * 5)
    assert (out.promoted, out.demoted) == (4, 4)
    assert out.pingpong == 2                        # pages 0 and 1, however many times


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


def test_all_fast_is_held_to_its_capacity_like_any_policy():
    """No exception for all-fast: the benchmark's capacity() gives it every page."""
    policies = policies_or_skip()
    with pytest.raises(AssertionError, match="policy all-fast put 4 pages on the fast node, "
                                             "over its capacity of 1"):
        drive(policies.get("all-fast")(4, 1), HOT_LAST)
    cap = bench.capacity({"policy": "all-fast", "share": 0.25}, 4)
    assert cap == 4
    out = drive(policies.get("all-fast")(4, cap), HOT_LAST)
    assert out.ns == [2200.0] * 3 and out.fast_share == [1.0] * 3


class Drifting(engine.PlannedPages):
    """PlannedPages on which someone else (Linux) moves pages: before epoch e, the pages
    of drift[e][0] go fast and those of drift[e][1] slow."""

    def __init__(self, pages, drift):
        super().__init__(pages, PAGE, RATE)
        self.drift, self.reads = drift, 0

    def read(self):
        now = self.fast.copy()
        up, down = self.drift.get(self.reads, ((), ()))
        now[list(up)], now[list(down)] = True, False
        self.reads += 1
        return now


class Kernel(Scripted):
    NAME = "kernel"
    KERNEL = True


def test_pages_moved_by_the_kernel_are_read_back_and_its_policys_moves():
    """Before epoch 1 the kernel swaps pages 0 (down) and 2 (up); before epoch 2 it
    promotes page 3: 3 pages drifted, each epoch timed on where the pages were."""
    F, T = False, True
    pages_of = Drifting(4, {1: ((2,), (0,)), 2: ((3,), ())})
    out = drive(Kernel(4, 2, [T, T, F, F]), HOT_LAST, pages_of=pages_of)
    assert pages_of.reads == 4             # one read before every epoch, one after the last
    # [T, T, F, F]: 2 x 100 + 20 x 300; [F, T, T, F]: 11 x 100 + 11 x 300;
    # [F, T, T, T]: 21 x 100 + 1 x 300.
    assert out.ns == out.predicted == [6200.0, 4400.0, 2400.0]
    assert out.fast_hits == pytest.approx([2 / 22, 11 / 22, 21 / 22])
    assert out.fast_share == [0.5, 0.5, 0.75]      # not held to its capacity of 2
    assert out.drifted == 3
    assert (out.promoted, out.demoted, out.move_ns) == (2, 1, 0)    # the kernel's, free
    assert pages_of.fast.tolist() == [F, T, T, T]


def test_the_kernels_moves_back_are_ping_pong_and_its_last_epoch_counts():
    """Linux moves page 2 up, down, up: one page moved back (twice), and the move it made
    during the last epoch counted too."""
    F, T = False, True
    pages_of = Drifting(4, {1: ((2,), ()), 2: ((), (2,)), 3: ((2,), ())})
    out = drive(Kernel(4, 2, [T, F, F, F]), HOT_LAST, pages_of=pages_of)
    assert (out.promoted, out.demoted, out.drifted, out.pingpong) == (2, 1, 3, 1)


def test_pages_drifting_under_a_policy_of_its_own_fail_the_case():
    """The same drift under a policy that places pages itself: the placement measured
    would not be the policy's, so the engine stops, saying who may have moved them."""
    F, T = False, True
    policy = Scripted(4, 2, [T, T, F, F], [[T, T, F, F], [T, T, F, F]])
    with pytest.raises(CheckError, match=r"2 pages were moved by someone else before epoch "
                                         r"1 \(NUMA balancing\?\)"):
        drive(policy, HOT_LAST, pages_of=Drifting(4, {1: ((2,), (0,))}))


# ---- engine.MovedPages on this machine's one node ----------------------------------------
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


def two_nodes(monkeypatch, where, busy=(), ns=1000):
    """Nodes 0 and 1 simulated for a MovedPages: `where` each page's node, changed by
    engine.move (but not for a `busy` page, which fails EBUSY) and read by
    engine.node_map. Returns the calls and, after each, the pages on node 0."""
    calls, on_fast = [], []

    def move(buf, node, which=None, **kw):
        which = np.asarray(which)
        failures = {int(p): "EBUSY" for p in which if int(p) in busy}
        where[[p for p in which.tolist() if p not in failures]] = node
        calls.append((node, which.tolist()))
        on_fast.append(int((where == 0).sum()))
        return memory.MoveResult(len(which) - len(failures), ns, failures)
    monkeypatch.setattr(engine, "move", move)
    monkeypatch.setattr(engine, "node_map", lambda buf: where.copy())
    return calls, on_fast


def test_pages_on_one_node_read_all_fast_and_moves_are_no_ops(monkeypatch):
    calls = recorded_moves(monkeypatch)
    buf = table()
    pages_of = engine.MovedPages(buf, 0, 0, 0)
    assert pages_of.fast.dtype == bool and pages_of.fast.tolist() == [True] * 8
    assert pages_of.read().tolist() == [True] * 8
    # Pretend pages 0-3 were slow, to see the order of the calls.
    pages_of.fast = np.array([False] * 4 + [True] * 4)
    target = np.array([True, True, False, False, False, False, True, True])
    out = engine.Outcome()
    up, down = pages_of.apply(target, np.array([1, 0, 2, 3, 4, 5, 6, 7]), out, 4)
    # One chunk: its demotions coldest first (5, then 4), then its promotions hottest
    # first (1, then 0), into the room the demotions made (4 - 2).
    assert calls == [(0, [5, 4]), (0, [1, 0])]
    # Read back: every page on node 0, the fast node: up are the four "slow" ones.
    assert up.tolist() == [0, 1, 2, 3] and down.tolist() == []
    assert pages_of.fast.tolist() == [True] * 8
    assert out.unmoved == 4                 # pages 2-5 should be slow, and are not
    assert out.move_ns > 0


def test_promotions_go_only_into_room(monkeypatch):
    """At capacity 2 the two demotions make room for nothing (4 pages on fast, 2 after);
    at capacity 3, for one: the hottest."""
    target = np.array([True, True, False, False, False, False, True, True])
    for capacity, want in ((2, [(0, [5, 4])]), (3, [(0, [5, 4]), (0, [1])])):
        calls = recorded_moves(monkeypatch, ns=1000)
        pages_of = engine.MovedPages(table(), 0, 0, 0)
        pages_of.fast = np.array([False] * 4 + [True] * 4)
        pages_of.apply(target, np.array([1, 0, 2, 3, 4, 5, 6, 7]), engine.Outcome(), capacity)
        assert calls == want


def test_a_failed_demotion_leaves_no_room_for_a_promotion(monkeypatch):
    """Pages 0-3 on a full fast node (capacity 4) to swap with 4-7, two a chunk; page 0
    is busy and stays. Each chunk promotes only into the room its demotions really made,
    so the fast node never holds more than 4 pages (demotions first, then every
    promotion, would put 5 there)."""
    monkeypatch.setattr(engine, "MOVE_CHUNK", 2)
    where = np.array([0] * 4 + [1] * 4, dtype=np.int32)
    calls, on_fast = two_nodes(monkeypatch, where, busy={0})
    pages_of = engine.MovedPages(table(), 0, 1, 0)
    assert pages_of.fast.tolist() == [True] * 4 + [False] * 4
    out = engine.Outcome()
    target = np.array([False] * 4 + [True] * 4)
    up, down = pages_of.apply(target, np.arange(8)[::-1], out, 4)     # page 7 the hottest
    # Chunk 1: 0 (busy) and 1 down, room for one: 7 up. Chunk 2: 2 and 3 down, room for two.
    assert calls[:3] == [(1, [0, 1]), (0, [7]), (1, [2, 3])]
    assert max(on_fast) == 4 and on_fast[-1] == 4
    assert out.move_ns == 1000 * len(calls)
    # What really moved, as read back; the busy page and the one promotion that had no
    # room are unmoved.
    assert down.tolist() == [1, 2, 3] and 7 in up.tolist() and len(up) == 3
    assert pages_of.fast.sum() == 4 and pages_of.fast[0]
    assert out.unmoved == 2


def test_a_promotion_without_room_waits_for_the_next_chunk(monkeypatch):
    monkeypatch.setattr(engine, "MOVE_CHUNK", 2)
    where = np.array([0] * 4 + [1] * 4, dtype=np.int32)
    two_nodes(monkeypatch, where, busy={0})
    pages_of = engine.MovedPages(table(), 0, 1, 0)
    pages_of.apply(np.array([False] * 4 + [True] * 4), np.arange(8)[::-1], engine.Outcome(), 4)
    # Room for three promotions in all: the three hottest, 7, 6 and 5, beside busy page 0.
    assert np.flatnonzero(pages_of.fast).tolist() == [0, 5, 6, 7]


def test_moves_interleave_by_chunk_and_the_time_box_stops_between_chunks(monkeypatch):
    """Pages 0-3 fast (capacity 4) to swap with 4-7, two a chunk at 1000 ns a call: each
    chunk demotes two and promotes two, so a time box spent after one chunk leaves the fast
    tier full, half swapped, not emptied."""
    monkeypatch.setattr(engine, "MOVE_CHUNK", 2)
    target = np.array([False] * 4 + [True] * 4)
    order = np.arange(8)[::-1]                      # page 7 the hottest, 0 the coldest
    whole = [(0, [0, 1]), (0, [7, 6]), (0, [2, 3]), (0, [5, 4])]
    for budget, boxed, want in ((0, True, whole), (1500, True, whole[:2]),
                                (2000, True, whole[:2]), (2001, True, whole),
                                (1500, False, whole)):
        calls = recorded_moves(monkeypatch, ns=1000)
        pages_of = engine.MovedPages(table(), 0, 0, budget)
        pages_of.fast = np.array([True] * 4 + [False] * 4)
        out = engine.Outcome()
        pages_of.apply(target, order, out, 4, boxed=boxed)
        assert calls == want, (budget, boxed)
        assert out.move_ns == 1000 * len(want)
    # On two (simulated) nodes: after the first chunk, 2 and 3 still fast, 7 and 6 too.
    where = np.array([0] * 4 + [1] * 4, dtype=np.int32)
    calls, on_fast = two_nodes(monkeypatch, where)
    pages_of = engine.MovedPages(table(), 0, 1, 1500)
    out = engine.Outcome()
    up, down = pages_of.apply(target, order, out, 4)
    assert calls == [(1, [0, 1]), (0, [7, 6])] and on_fast == [2, 4]
    assert np.flatnonzero(pages_of.fast).tolist() == [2, 3, 6, 7]
    assert (sorted(up.tolist()), down.tolist(), out.unmoved) == ([6, 7], [0, 1], 4)


def test_the_first_placement_is_not_boxed_nor_counted(monkeypatch):
    """From all slow to four pages fast, two a chunk, under a 1 ns time box that the first
    call spends: all of it made (boxed, it would stop after one call), none of it counted
    or charged; page 3, busy, is the start's unmoved. The policy asks for it again after
    each epoch: those tries are counted, and charged."""
    monkeypatch.setattr(engine, "MOVE_CHUNK", 2)
    where = np.ones(8, dtype=np.int32)
    calls, _ = two_nodes(monkeypatch, where, busy={3})
    pages_of = engine.MovedPages(table(), 0, 1, 1)
    assert pages_of.fast.tolist() == [False] * 8
    start = [True] * 4 + [False] * 4
    out = drive(Scripted(8, 4, start, [start] * 2), [np.arange(8, dtype=np.int64)] * 3,
                pages_of=pages_of)
    assert calls == [(0, [0, 1]), (0, [2, 3]), (0, [3]), (0, [3])]
    assert (out.start_unmoved, out.unmoved, out.move_ns) == (1, 2, 2000)
    assert (out.promoted, out.demoted, out.drifted) == (0, 0, 0)
    assert out.fast_share == [3 / 8] * 3


def test_under_the_kernels_tiering_a_page_mid_migration_is_read_again(monkeypatch):
    """move_pages(2) reports a page the kernel is migrating as not present (-ENOENT): with
    Linux moving the pages the engine reads again after a wait; a page still absent after
    the waits, or absent under any other policy, fails as astray."""
    buf = table()
    real = memory.node_map
    reads = []

    def migrating(b, settles_after):
        where = real(b).copy()
        reads.append(1)
        if len(reads) <= settles_after:
            where[2] = -2
        return where
    waits = []
    monkeypatch.setattr(engine.time, "sleep", waits.append)
    patient = engine.MovedPages(buf, 0, 1, 0, patient=True)
    monkeypatch.setattr(engine, "node_map", lambda b: migrating(b, 2))
    reads.clear()
    assert patient.read().all() and len(reads) == 3 and waits == list(engine.SETTLE_S[:2])
    reads.clear()
    monkeypatch.setattr(engine, "node_map", lambda b: migrating(b, 99))
    with pytest.raises(CheckError, match="page 2 of the table buffer is on node -2"):
        patient.read()
    assert len(reads) == 1 + len(engine.SETTLE_S)
    reads.clear()
    monkeypatch.setattr(engine, "node_map", lambda b: migrating(b, 1))
    strict = engine.MovedPages.__new__(engine.MovedPages)
    strict.buf, strict.nodes, strict.patient = buf, (0, 1), False
    with pytest.raises(CheckError, match="page 2 of the table buffer is on node -2"):
        strict.read()
    assert len(reads) == 1


def test_a_page_astray_is_caught_by_its_index(monkeypatch):
    buf = table()
    real = memory.node_map

    def astray(b):
        where = real(b).copy()
        where[5] = 3
        return where
    pages_of = engine.MovedPages(buf, 0, 0, 0)
    monkeypatch.setattr(engine, "node_map", astray)
    with pytest.raises(CheckError, match=r"tiering: page 5 of the table buffer is on node 3, "
                                         r"not on node 0 or 0 \(1 pages astray\)"):
        pages_of.apply(np.ones(8, dtype=bool), np.arange(8), engine.Outcome(), 8)
    with pytest.raises(CheckError, match="page 5 of the table buffer is on node 3"):
        pages_of.read()
    with pytest.raises(CheckError, match="page 5 of the table buffer is on node 3"):
        engine.MovedPages(buf, 0, 0, 0)


def test_real_engine_drive_on_one_node_with_a_fake_kernel():
    """drive with real=True times the workload's run() (here a fixed 1000 ns) and moves
    nothing on one node; the model's prediction sits beside the measurement."""
    policies = policies_or_skip()

    class Timed(FakeWork):
        def run(self, epoch):
            return 1000

    pages_of = engine.MovedPages(table(4), 0, 0, 0)
    out = engine.drive(policies.get("first-touch")(4, 2), Timed(22), pages_of, HOT_LAST, TIERS,
                       1.0, 1, True)
    assert out.ns == [1000.0] * 3
    # Every page is on node 0, the fast node, whatever first-touch asked for: its two
    # demotions at the start are unmoved there, and nothing drifts.
    assert out.predicted == [2200.0] * 3 and out.fast_share == [1.0] * 3
    assert (out.start_unmoved, out.unmoved, out.drifted, out.move_ns) == (2, 0, 0, 0)


# ---- memory.move(which=...) and native.move ---------------------------------------------------
def test_move_of_a_scattered_page_list():
    b = Buffer(16 * PAGE, "bind:0")
    r = memory.move(b, 0, which=np.array([13, 2, 7, 0]))
    assert (r.moved, r.failures) == (4, {}) and r.ns > 0
    assert memory.move(b, 0, which=[15], batch=1).moved == 1
    assert memory.move(b, 0, which=np.arange(16)[::3], batch=2).moved == 6
    assert memory.move(b, 0, which=np.array([3, 1], dtype=np.uint32)).moved == 2


def test_failures_of_a_page_list_are_keyed_by_page_index():
    b = Buffer(16 * PAGE, "bind:0", prefault=False)
    a = b.array(np.uint64)
    a[:5 * 512] = np.arange(5 * 512)        # pages 0-4 present, the rest never touched
    r = memory.move(b, 0, which=np.array([12, 1, 9, 3]))
    assert r.moved == 2
    assert r.failures == {12: "ENOENT", 9: "ENOENT"}
    assert (a[:5 * 512] == np.arange(5 * 512)).all()
    assert memory.node_map(b)[[9, 12]].tolist() == [-errno.ENOENT] * 2


NOT_A_LIST = "a page list is a non-empty list of page indices, not "


@pytest.mark.parametrize("kw,message", [
    ({"which": [1, 2], "start": 2}, "move takes a page range or a page list, not both"),
    ({"which": [1, 2], "end": 4}, "move takes a page range or a page list, not both"),
    ({"which": [1, 2], "method": "mbind"}, "a page list moves with move_pages, not mbind"),
    ({"which": np.array([], dtype=np.int64)}, NOT_A_LIST + "int64 x (0,)"),
    ({"which": []}, NOT_A_LIST + "float64 x (0,)"),
    ({"which": [1.0, 2.0]}, NOT_A_LIST + "float64 x (2,)"),
    ({"which": np.ones(16, dtype=bool)}, NOT_A_LIST + "bool x (16,)"),    # a mask is not
    ({"which": [[1, 2]]}, NOT_A_LIST + "int64 x (1, 2)"),
    ({"which": 3}, NOT_A_LIST + "int64 x ()"),
    ({"which": [-1, 2]}, "page -1 is not one of the 16 pages"),
    ({"which": [3, 16]}, "page 16 is not one of the 16 pages"),
    ({"which": [16, -2]}, "page -2 is not one of the 16 pages"),
])
def test_bad_page_lists_are_refused_each_with_its_reason(kw, message):
    b = Buffer(16 * PAGE, "local")
    before = memory.node_map(b).tolist()
    with pytest.raises(PlacementError) as e:
        memory.move(b, 0, **kw)
    assert str(e.value) == message
    assert memory.node_map(b).tolist() == before


def test_native_move_refuses_an_index_of_another_length():
    b = Buffer(4 * PAGE, "bind:0")
    addr, pages, page = memory._pages(b)
    assert (pages, page) == (4, PAGE)
    with pytest.raises(ValueError, match=r"^move: 2 page indices for 3 pages$"):
        native.move(addr, 3, page, 0, "move_pages", 0, np.array([0, 1]))
    moved, _, status = native.move(addr, 2, page, 0, "move_pages", 0, np.array([3, 1]))
    assert moved == 2 and status.tolist() == [0, 0]


# ---- the benchmark ---------------------------------------------------------------------------
def test_engine_real_is_refused_on_one_node(topo):
    vm = topo("vm")
    with common.cpus_of(vm):
        with pytest.raises(UserError, match=r"engine=real moves pages between two nodes "
                                            r"with memory; this machine has one \(node 0\): "
                                            r"use engine=model, or cxlbench emulate"):
            bench.validate(params(engine="real"), vm)
        for engine_ in ("real", "model"):       # a node against itself is no tiering
            with pytest.raises(UserError, match="fast=0 and slow=0: tiering needs two nodes"):
                bench.validate(params(engine=engine_, fast=0, slow=0), vm)
        assert bench.validate(params(engine="model"), vm) is None
        with pytest.raises(UserError, match=r"slow=5: no such node with memory \(nodes with "
                                            r"memory: 0\)"):
            bench.validate(params(engine="real", slow=5), vm)
        # The model may take another machine's nodes, their figures from options.
        assert bench.validate(params(engine="model", fast=5, slow=6), vm) is None


@one_node
def test_engine_real_is_refused_on_this_machine():
    with pytest.raises(UserError, match="engine=real moves pages between two nodes"):
        bench.validate(params(engine="real"), HERE)


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
    assert {"embedding.scale", "embedding.profile"} <= set(u)
    assert "embedding.lr" not in u and "embedding.alpha" not in u
    # The registry refuses such an option set away from its default.
    reg = benchmarks.get("tiering")
    assert reg.set_but_ignored(params(hemem_threshold=4)) == \
        {"hemem_threshold": (4, "a knob of hemem")}
    assert reg.set_but_ignored(params(policy="hemem", hemem_threshold=4)) == {}


def test_new_options_and_their_bounds():
    o = bench.OPTIONS
    assert o["share"].min == 1e-6 and o["share"].max == 1.0
    with pytest.raises(ValueError, match="0.0 is below the minimum 1e-06"):
        o["share"].convert(0.0)
    assert o["share"].convert(1e-6) == 1e-6
    assert o["epochs"].max == 1000 and o["epochs"].convert(1000) == 1000
    with pytest.raises(ValueError, match="1001 is above the maximum 1000"):
        o["epochs"].convert(1001)
    assert o["embedding.batch"].default == 65536 and o["embedding.rows"].default == 1 << 18
    assert (o["migrate_gbs"].default, o["migrate_gbs"].min) == (0.0, 0.0)
    with pytest.raises(ValueError, match="below the minimum"):
        o["migrate_gbs"].convert(-1.0)


def test_the_model_ignores_the_time_box_and_both_take_the_migration_rate():
    """move_ms boxes the real engine's moves; migrate_gbs prices the model's moves, and
    the real engine's prediction of its own."""
    assert bench.unused(params(engine="model"))["move_ms"] == "the model engine has no time box"
    assert "migrate_gbs" not in bench.unused(params(engine="model"))
    assert not {"move_ms", "migrate_gbs"} & set(bench.unused(params(engine="real")))
    assert not {"move_ms", "migrate_gbs"} & set(bench.unused(params(engine="auto")))


@pytest.mark.parametrize("policy,share,pages,want", [
    ("all-fast", 0.25, 100, 100), ("all-fast", 1e-6, 7, 7), ("all-slow", 1.0, 100, 0),
    ("first-touch", 0.29, 100, 29),     # 0.29 * 100 = 28.999999999999996
    ("oracle", 0.5, 7, 3), ("hemem", 1e-6, 100, 0), ("tpp", 1.0, 100, 100),
    ("first-touch", 0.7, 10, 7),        # 7.000000000000001
])
def test_capacity(policy, share, pages, want):
    assert bench.capacity({"policy": policy, "share": share}, pages) == want


def test_figures_charge_the_moves_to_throughput_and_the_prediction():
    """2 epochs of 2048 units in 1000 + 3000 ns, 4000 ns of moves (2 up, 1 down, 4 KiB
    pages); the model predicted 1500 + 2500 ns and moves at 2 GB/s (3 x 2048 ns)."""
    out = engine.Outcome(ns=[1000.0, 3000.0], predicted=[1500.0, 2500.0],
                         fast_hits=[0.25, 0.75], fast_share=[0.5, 0.25], promoted=2,
                         demoted=1, move_ns=4000.0, pingpong=1)
    work = FakeWork(2048)
    real = bench.figures(out, work, PAGE, 2.0, True)
    assert set(real) == set(bench.units_of(work, True)) == {
        "throughput", "kernel_throughput", "predicted", "fast_hits", "fast_share",
        "migrated", "move_ms", "pingpong"}
    assert bench.units_of(work, True)["throughput"] == "M/s"
    assert real["throughput"] == pytest.approx(512.0, rel=1e-15)       # 4096 / 8000 ns
    assert real["kernel_throughput"] == pytest.approx(1024.0, rel=1e-15)   # 4096 / 4000
    assert real["predicted"] == pytest.approx(4096 / (4000 + 6144) * 1e3, rel=1e-15)
    assert (real["fast_hits"], real["fast_share"]) == (0.5, 0.375)
    assert real["migrated"] == 3 * 4096 / 1e6 and real["move_ms"] == 0.004
    assert real["pingpong"] == 1.0
    model_ = bench.figures(out, work, PAGE, 2.0, False)
    assert set(model_) == set(bench.units_of(work, False)) == set(real) - {"predicted"}
    assert {k: model_[k] for k in model_} == {k: real[k] for k in model_}


@one_node
@pytest.mark.parametrize("policy,dim,mlp,threads,fast_ns,slow_ns", [
    ("all-fast", 128, 10.0, 1, 11.0, 27.5),     # latency-bound: 110/10 > 512/100
    ("all-slow", 128, 10.0, 1, 11.0, 27.5),     # 275/10 > 512/25 = 20.48
    ("all-fast", 1024, 100.0, 1, 40.96, 163.84),   # bandwidth-bound: 4096/100 > 110/100
    ("all-fast", 128, 2.0, 1, 55.0, 137.5),
    ("all-fast", 128, 10.0, 2, 5.5, 20.48),     # two threads: 110/20 > 5.12
    ("all-slow", 128, 10.0, 2, 5.5, 20.48),     # 275/20 = 13.75 < 512/25: bandwidth-bound
])
def test_model_run_of_a_bound_in_closed_form(policy, dim, mlp, threads, fast_ns, slow_ns):
    rows = 4096 if dim == 128 else 512
    p = params(policy=policy, dim=dim, mlp=mlp, rows=rows, engine="model", repeat=2,
               threads=threads)
    fast, slow = model.ASSUMED
    row = dim * 4
    assert fast_ns == max(fast.latency_ns / (mlp * threads), row / fast.bandwidth)
    assert slow_ns == max(slow.latency_ns / (mlp * threads), row / slow.bandwidth)
    each = fast_ns if policy == "all-fast" else slow_ns
    m = bench.run(p)
    assert m.status == "ok" and m.kernel == "embedding:model" and m.isa == ""
    assert m.units == bench.units_of(embedding_workload.Epochs, False)
    assert set(m.units) == {"throughput", "kernel_throughput", "fast_hits", "fast_share",
                            "migrated", "move_ms", "pingpong"}
    assert len(m.reps) == 2 and len(m.cpus) == threads
    for rep in m.reps:
        # 2048 lookups an epoch at `each` ns: 1000 / each M lookups/s; no moves to charge.
        assert rep["throughput"] == rep["kernel_throughput"] == \
            pytest.approx(1e3 / each, rel=1e-12)
        share = 1.0 if policy == "all-fast" else 0.0
        assert rep["fast_hits"] == rep["fast_share"] == share
        assert rep["migrated"] == rep["pingpong"] == rep["move_ms"] == 0
    pages = rows * row // PAGE
    assert m.info["engine"] == "model" and m.info["slow_node"] is None
    assert m.info["fast_node"] == 0
    assert m.info["tiers"]["source"] == ("fast 110 ns 100 GB/s, slow 275 ns 25 GB/s "
                                         "(fast: assumed, slow: assumed)")
    assert m.info["tiers"]["fast"] == {"latency_ns": 110.0, "bandwidth": 100.0}
    assert (m.info["migrate_gbs"], m.info["migrate_source"]) == (2.0, "assumed")
    assert (m.info["pages"], m.info["page_bytes"], m.info["epochs"]) == (pages, PAGE, 3)
    assert m.info["capacity_pages"] == (pages if policy == "all-fast" else 0)
    assert (m.info["unmoved"], m.info["start_unmoved"], m.info["drifted"]) == (0, 0, 0)
    assert m.info["epoch_ns"] == [round(2048 * each)] * 3


@one_node
@pytest.mark.parametrize("threads", [1, 2])
def test_model_run_of_first_touch_in_closed_form(threads):
    """h lookups of 2048 on the fast tier's 128 pages: waiting (110 h + 275 (2048 - h)) /
    (10 x threads), streaming 512 B lookups, max(h / 100, (2048 - h) / 25) x 512. One
    thread waits (11 h + 27.5 (2048 - h)); two stream from the slow tier (20.48 a lookup)."""
    policies_or_skip()
    p = params(policy="first-touch", share=0.25, engine="model", threads=threads)
    m = bench.run(p)
    w = bench.workload(p)
    counts = [w.counts(e, 512, PAGE) for e in range(3)]
    hits = [int(c[:128].sum()) for c in counts]          # 0.25 of 512 pages: the first 128
    ns = [max((110 * h + 275 * (2048 - h)) / (10 * threads), 5.12 * h, 20.48 * (2048 - h))
          for h in hits]
    if threads == 1:
        assert ns == [h * 11.0 + (2048 - h) * 27.5 for h in hits]
    else:
        assert ns == pytest.approx([(2048 - h) * 20.48 for h in hits], rel=1e-15)
    rep = m.reps[0]
    assert rep["throughput"] == pytest.approx(3 * 2048 / sum(ns) * 1e3, rel=1e-12)
    assert rep["fast_hits"] == pytest.approx(np.mean([h / 2048 for h in hits]), rel=1e-12)
    assert rep["fast_share"] == 0.25 and rep["move_ms"] == rep["migrated"] == 0
    assert m.info["capacity_pages"] == 128
    assert m.info["epoch_ns"] == [round(x) for x in ns]


class Swap(Policy):
    """First-touch's first 128 pages, swapped for the next 128 after epoch 0."""
    NAME = "swap"
    DESCRIPTION = "test"

    def initial(self):
        return first_touch(self.pages, self.capacity)

    def after(self, epoch):
        fast = np.zeros(self.pages, dtype=bool)
        fast[128:256] = True
        return fast


@one_node
@pytest.mark.parametrize("gbs,rate,source", [(0.0, 2.0, "assumed"), (4.0, 4.0, "options")])
def test_model_run_charges_its_moves_at_the_migration_rate(monkeypatch, gbs, rate, source):
    """256 moves after epoch 0 (128 up, 128 down) of 4 KiB at `rate` GB/s; the start's
    128 promotions are not charged."""
    monkeypatch.setitem(bench.POLICIES, "first-touch", Swap)
    p = params(policy="first-touch", share=0.25, engine="model", migrate_gbs=gbs)
    m = bench.run(p)
    w = bench.workload(p)
    counts = [w.counts(e, 512, PAGE) for e in range(3)]
    hits = [int(counts[0][:128].sum()), *(int(c[128:256].sum()) for c in counts[1:])]
    ns = [h * 11.0 + (2048 - h) * 27.5 for h in hits]
    move_ns = 256 * 4096 / rate
    rep = m.reps[0]
    assert rep["throughput"] == pytest.approx(3 * 2048 / (sum(ns) + move_ns) * 1e3,
                                              rel=1e-12)
    assert rep["kernel_throughput"] == pytest.approx(3 * 2048 / sum(ns) * 1e3, rel=1e-12)
    assert rep["move_ms"] == move_ns / 1e6 and rep["migrated"] == 256 * 4096 / 1e6
    assert rep["pingpong"] == 0 and rep["fast_share"] == 0.25
    assert (m.info["migrate_gbs"], m.info["migrate_source"]) == (rate, source)
    assert m.info["epoch_ns"] == [round(x) for x in ns]


@one_node
@pytest.mark.parametrize("policy,tolerance,status", [
    ("all-fast", 0.01, "ok"), ("first-touch", 0.01, "failed"),
    ("first-touch", 0.75, "ok"), ("first-touch", 0.74, "failed")])
def test_real_run_on_one_node_fails_where_the_start_is_unmoved(monkeypatch, policy,
                                                               tolerance, status):
    """The real engine forced onto node 0 as both tiers: every page stays on the fast
    node, so first-touch's start leaves 384 of 512 pages unmoved (0.75 of them): within
    a tolerance of 0.75, not of 0.74. The model's prediction is all-fast's, 11 ns a
    lookup, with nothing to charge."""
    policies_or_skip()
    monkeypatch.setattr(bench, "engine_of", lambda params, topology: "real")
    p = params(policy=policy, share=0.25, fast=0, slow=0, tolerance=tolerance)
    m = bench.run(p)
    assert m.kernel == "embedding:real" and m.units == bench.units_of(embedding_workload.Epochs, True)
    assert (m.info["fast_node"], m.info["slow_node"]) == (0, 0)
    unmoved = 0 if policy == "all-fast" else 384
    assert (m.info["start_unmoved"], m.info["unmoved"], m.info["drifted"]) == (unmoved, 0, 0)
    assert m.status == status
    if status == "failed":
        assert m.error == ("tiering: 384 of 512 pages of the table buffer did not reach the "
                           "policy's first placement (a full node 0? busy pages?): the share "
                           "measured would not be the one asked for")
    for rep in m.reps:
        assert rep["predicted"] == pytest.approx(1e3 / 11, rel=1e-12)
        assert rep["throughput"] == rep["kernel_throughput"] > 0
        assert rep["fast_hits"] == rep["fast_share"] == 1.0
        assert rep["move_ms"] == rep["migrated"] == rep["pingpong"] == 0


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
    [sc] = analysis.tiering_scenarios(records)
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
    a, b = analysis.tiering_scenarios(records)
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


def test_linux_has_no_knee_and_the_command_prints_n_a(capsys):
    """Linux is not held to the share: within 5 % of all-fast at 0.5 and 0.25 (1.0 % and
    0.5 %), yet no knee; a held policy never within 5 % prints none."""
    from cxlbench import cli
    records = scenario_records() + [record("linux", 0.5, 99.0), record("linux", 0.25, 99.5),
                                     record("hemem", 1.0, 90.0), record("hemem", 0.25, 50.0)]
    [sc] = analysis.tiering_scenarios(records)
    linux = sc["policies"]["linux"]
    assert linux["slowdown"] == pytest.approx({0.5: 100 / 99 - 1, 0.25: 100 / 99.5 - 1})
    assert analysis.knee(linux["slowdown"]) == 0.25 and linux["knee"] is None
    assert sc["policies"]["hemem"]["knee"] is None
    assert sc["policies"]["first-touch"]["knee"] == 1.0
    lines = "\n".join(analysis_text.tiering_lines(sc)).splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("policy "))
    assert lines[head].split() == ["policy", "1", "0.5", "0.25", "knee", "gap", "moved", "MB"]
    rows = {line.split()[0]: line.split() for line in lines[head + 1:]}
    assert rows["linux"] == ["linux", "-", "1.0%", "0.5%", "n/a", f"{80 / 99.5 - 1:.1%}", "-"]
    assert rows["hemem"][4] == "none" and rows["first-touch"][4] == "1"
    assert rows["oracle"][4] == "0.5"


# ---- cxlbench tiering ---------------------------------------------------------------------
def invoke(*args):
    return CliRunner().invoke(main, ["tiering", *args])


def policy_rows(out: str, header: list[str]) -> dict[str, list[str]]:
    """The words of each policy's row of the CLI's table, its header checked."""
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("policy "))
    assert lines[head].split() == header
    rows = {}
    for line in lines[head + 1:]:
        if not line.strip():            # the table ends (the headline follows)
            break
        rows[line.split()[0]] = line.split()
    return rows


@one_node
def test_tiering_command_end_to_end(tmp_path):
    policies_or_skip()
    sets = ["repeat=1", "embedding.rows=4096", "embedding.batch=64", "epochs=3"]
    r = invoke("--policies", "all-fast,oracle,first-touch", "--shares", "1,0.5",
               *[a for s in sets for a in ("--set", s)], "--results-dir", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert "(6 cases, 0 failed)" in r.stderr       # all-slow runs too: a bound always
    out = r.stdout
    assert "model engine: PREDICTED from the tiers' figures, not measured" in out
    # The expected figures, from the model in closed form: 11 ns a lookup on the fast tier,
    # 27.5 on the slow.
    w = bench.workload(params())
    counts = [w.counts(e, 512, PAGE) for e in range(3)]
    profile = np.sum(counts, axis=0)
    oracle_pages = np.lexsort((np.arange(512), -profile))[:256]

    def time_of(fast_pages):
        hits = sum(int(c[fast_pages].sum()) for c in counts)
        return hits * 11.0 + (3 * 2048 - hits) * 27.5
    top = 3 * 2048 * 11.0
    t_ft, t_or = time_of(np.arange(256)), time_of(oracle_pages)
    assert f"all-fast {3 * 2048 / top * 1e3:.4g} M/s" in out
    rows = policy_rows(out, ["policy", "1", "0.5", "knee", "gap", "moved", "MB"])
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
    # Labels name what differs from the defaults and what varies within the job (share
    # 0.25 is the default, named as the job sweeps it).
    assert [c.split()[1:] for c in cases] == [
        ["tiering", "policy=all-fast"], ["tiering", "policy=all-slow"],
        ["tiering", "policy=oracle", "share=0.5"], ["tiering", "policy=oracle", "share=0.25"]]


def test_any_policy_subset_gets_both_bounds(tmp_path):
    """--policies oracle alone still runs all-fast and all-slow: slowdowns and knees are
    against them."""
    r = invoke("--policies", "oracle", "--shares", "0.5", "--results-dir", str(tmp_path),
               "--dry-run")
    assert r.exit_code == 0, r.output
    assert [c.split()[0] for c in r.stdout.splitlines()] == ["bounds/000", "bounds/001",
                                                             "oracle/000"]
    assert "without all-fast" not in r.stderr


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
    assert model.measured_tier(df, 0) == TierFigures(100.0, 18.0)
    assert model.measured_tier(df, 1) == TierFigures(250.0, 4.0)
    assert model.measured_tier(df, 2) is None          # a bandwidth, no latency
    matrix = pd.DataFrame([row("m/0", "matrix", "latency", 300.0, target=1),
                           row("m/1", "matrix", "bandwidth", 5.0, target=1)])
    assert model.measured_tier(matrix, 1) == TierFigures(300.0, 5.0)
    assert model.measured_tier(matrix, 0) is None


def loaded_rows(node, points, mix="read", **extra):
    """loaded_latency cases bound to `node`: (GB/s, ns) a case, each repeated twice."""
    return [run_row(f"ll{node}{mix}/{i}", "loaded_latency", metric, value + d,
                    mem=f"bind:{node}", mix=mix, **extra)
            for i, (gbs, ns) in enumerate(points)
            for metric, value in (("bandwidth", gbs), ("latency", ns)) for d in (-0.5, 0.5)]


def test_a_measured_tier_carries_its_loaded_latency_curve():
    """Each read-load case bound to the node is a point (its medians), by rising load; a
    latency below the one before (noise) is raised to it; other mixes, nodes and a load
    placed elsewhere are not the tier's."""
    import pandas as pd
    rows = measured(0, 1).to_dict("records")
    rows += loaded_rows(0, [(20.0, 150.0), (0.0, 100.0), (10.0, 98.0), (30.0, 400.0)])
    rows += loaded_rows(0, [(50.0, 1.0)], mix="write")
    rows += loaded_rows(0, [(60.0, 1.0)], **{"mem.load": "bind:1"})
    rows += loaded_rows(1, [(5.0, 300.0)])
    df = pd.DataFrame(rows)
    assert model.measured_tier(df, 0) == TierFigures(100.0, 18.0, curve=(
        (0.0, 100.0), (10.0, 100.0), (20.0, 150.0), (30.0, 400.0)))
    assert model.measured_tier(df, 1).curve == ((5.0, 300.0),)
    assert model.loaded_curve(measured(0), 0) == ()
    idle_only = pd.DataFrame(measured(0).to_dict("records") + loaded_rows(0, [(0.0, 100.0)]))
    assert model.loaded_curve(idle_only, 0) == ()      # one point at no load: no curve


def test_tiers_from_a_run_with_curves_and_an_option_over_one(monkeypatch):
    """The curve goes with the measured tier into the source; a figure set by hand on a
    tier leaves that tier's curve out (it would contradict it), not the other's."""
    import pandas as pd
    frame = pd.DataFrame(measured(0, 1).to_dict("records") +
                         loaded_rows(0, [(0.0, 100.0), (10.0, 120.0)]) +
                         loaded_rows(1, [(0.0, 250.0), (5.0, 400.0)]))
    monkeypatch.setattr(model, "_frame", lambda path: frame)
    tiers, source = model.tiers_for(tier_params(tiers_from="run-1"), None, 0, 1)
    assert tiers == (TierFigures(100.0, 18.0, ((0.0, 100.0), (10.0, 120.0))),
                     TierFigures(250.0, 9.0, ((0.0, 250.0), (5.0, 400.0))))
    assert source == ("fast: node 0 in run-1, its loaded-latency curve (2 points), "
                      "slow: node 1 in run-1, its loaded-latency curve (2 points)")
    tiers, source = model.tiers_for(tier_params(tiers_from="run-1", slow_latency=300.0),
                                    None, 0, 1)
    assert tiers[0].curve and tiers[1] == TierFigures(300.0, 9.0)
    assert source.endswith("slow: node 1 in run-1 with options")


def test_the_model_waits_once_per_lookup_however_many_pages_its_row_spans():
    """400-byte rows (dim 100): a tenth of them straddle two pages and count on both, yet
    each lookup waits one latency: all-fast stays latency-bound at 110 ns / 10 a lookup,
    as with 512-byte rows that never straddle."""
    for dim in (100, 128):
        m = bench.run(params(policy="all-fast", engine="model", dim=dim))
        assert m.reps[0]["kernel_throughput"] == pytest.approx(1000 / 11.0)


def test_tiers_from_a_one_node_run_scales_its_node_by_the_profile(monkeypatch):
    """A catalogue run of a machine of one node (`cxlbench run quick` there): the fast
    tier is its node, the slow one that node under the named profile (default the first),
    never two assumed tiers while a measured one was given."""
    monkeypatch.setattr(model, "_frame", lambda path: measured(0))
    tiers, source = model.tiers_for(tier_params(tiers_from="run-1", slow_tier="auto"),
                                    None, 0, None)
    first = next(iter(calibration.profiles().values()))
    assert tiers == (TierFigures(100.0, 18.0),
                     TierFigures(100.0 * first["latency"], 18.0 * first["bandwidth"]))
    assert source.startswith("fast: node 0 in run-1, slow: assumed: profile cxl-asic on "
                             "node 0 in run-1")
    tiers, source = model.tiers_for(tier_params(tiers_from="run-1",
                                                 slow_tier="remote-socket"), None, 0, None)
    assert tiers[1] == TierFigures(180.0, 9.0) and "profile remote-socket" in source
