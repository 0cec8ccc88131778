"""The calibrated tier model (cxlbench.tiering.calibration and model.predict_ns) and what
feeds it: LRU stack distances from C against an exact LRU cache simulated here, a node's
calibration read from a results frame built here, the slow-tier profiles, the model with
its caches planted out (the validation must catch it), and `cxlbench calibrate` measuring
each job once on a tiny suite written here. Nothing reads results/ of the checkout."""
import dataclasses
import json
import math
import pathlib
import re
import shutil
from collections import OrderedDict

import numpy as np
import pandas as pd
import pytest

from cxlbench import analysis, analysis_text, native
from cxlbench.errors import NativeError, UserError
from cxlbench.tiering import calibration, model
from cxlbench.tiering.calibration import GRANULARITIES, STREAM_OPS, Calibration
from cxlbench.topology import Topology
from cxlbench.units import format_size
from cxlbench.workloads import embedding as embedding_workload
from cxlbench.workloads import epochs

from .conftest import cxlbench

K, M = 1 << 10, 1 << 20


# --- 1. LRU stack distances against an exact LRU cache -------------------------------

def lru_hits(ids, capacity: int) -> list[bool]:
    """Whether each access hits a fully associative LRU cache of `capacity` units."""
    cache: OrderedDict = OrderedDict()
    hits = []
    for u in ids:
        u = int(u)
        if u in cache:
            cache.move_to_end(u)
            hits.append(True)
        else:
            hits.append(False)
            cache[u] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits


def brute_distances(ids) -> list[int]:
    """Distinct other units touched since each access's last access to its own (-1: none)."""
    last, out = {}, []
    for i, u in enumerate(map(int, ids)):
        out.append(len(set(map(int, ids[last[u] + 1:i]))) if u in last else -1)
        last[u] = i
    return out


def streams():
    """(name, ids, nids): random and structured streams of a few hundred to a few thousand
    accesses."""
    rng = np.random.default_rng(7)
    out = []
    for n, nids in ((300, 10), (2000, 64), (3000, 500)):
        out.append((f"uniform-{n}-{nids}", rng.integers(0, nids, n), nids))
    for a, nids in ((1.2, 200), (1.6, 50), (2.5, 1000)):
        out.append((f"zipf-{a}-{nids}", (rng.zipf(a, 2500) - 1) % nids, nids))
    for length in (7, 16, 40, 100):
        out.append((f"scan-{length}", np.tile(np.arange(length), 2000 // length), length))
    # a hot set with scans through it: stack distances of all sizes
    hot = rng.integers(0, 8, 1500)
    scan = np.arange(8, 408)
    mixed = np.concatenate([hot[:500], scan, hot[500:1000], scan[::-1], hot[1000:]])
    out.append(("hot+scan", mixed, 408))
    return out


CAPACITIES = (1, 2, 3, 8, 16, 33, 64, 200)


@pytest.mark.parametrize("name,ids,nids", streams(), ids=[s[0] for s in streams()])
def test_stack_distances_give_an_exact_lru_cache_its_hits(name, ids, nids):
    d = native.stack_distances(ids, nids)
    assert d.shape == ids.shape and d.dtype == np.int64
    assert ((d == -1) == ~pd.Series(ids).duplicated().to_numpy()).all()     # first accesses
    for c in CAPACITIES:
        hits = lru_hits(ids, c)
        model_hits = (d >= 0) & (d < c)
        assert sum(hits) == int(model_hits.sum()), (name, c)
        assert hits == list(model_hits), (name, c)      # access by access, not only in sum


@pytest.mark.parametrize("name,ids,nids", [s for s in streams() if len(s[1]) <= 600],
                         ids=[s[0] for s in streams() if len(s[1]) <= 600])
def test_stack_distances_are_the_distinct_units_between(name, ids, nids):
    assert list(native.stack_distances(ids, nids)) == brute_distances(ids)


def test_stack_distances_of_cyclic_scans_in_closed_form():
    """A scan of L units repeated: every access after the first pass has distance L-1, so
    an LRU cache of L units hits all of them and one of L-1 none (LRU's scan pathology)."""
    for length in (5, 64, 300):
        ids = np.tile(np.arange(length), 6)
        d = native.stack_distances(ids, length)
        assert (d[:length] == -1).all() and (d[length:] == length - 1).all()
        assert sum(lru_hits(ids, length)) == 5 * length
        assert sum(lru_hits(ids, length - 1)) == 0


@pytest.mark.parametrize("ids,nids,want", [
    ([0, 1, 2, 0, 1, 1, 3, 0], 4, [-1, -1, -1, 2, 2, 0, -1, 2]),
    ([5, 5, 5], 6, [-1, 0, 0]),
    ([0, 1, 0, 1, 0, 1], 2, [-1, -1, 1, 1, 1, 1]),
    ([3, 2, 1, 0, 0, 1, 2, 3], 4, [-1, -1, -1, -1, 0, 1, 2, 3]),
    ([], 3, []),
    ([0], 1, [-1]),
])
def test_stack_distances_by_hand(ids, nids, want):
    assert list(native.stack_distances(np.array(ids, dtype=np.int64), nids)) == want


def test_stack_distances_take_any_integer_dtype_and_a_view():
    ids = np.array([0, 1, 2, 0, 1, 1, 3, 0] * 2, dtype=np.int32)[::2]    # strided, int32
    assert list(native.stack_distances(ids, 4)) == brute_distances(ids)


@pytest.mark.parametrize("ids,nids,unit", [([0, 4], 4, "4"), ([-1], 4, "-1"),
                                           ([0, 1, 2, 99], 50, "99")])
def test_stack_distances_refuse_a_unit_out_of_range(ids, nids, unit):
    with pytest.raises(NativeError) as e:
        native.stack_distances(np.array(ids), nids)
    text = str(e.value)
    assert "cxb_stack_distances" in text and f"unit {unit}" in text
    assert f"0..{nids - 1}" in text


def test_stack_distances_with_no_units_refuse_every_access():
    with pytest.raises(NativeError):
        native.stack_distances(np.array([0, 0]), 0)


def test_working_sets_take_the_data_or_the_pages_whichever_is_larger_within_the_footprint():
    """Units of 256 B, 16 to a 4 KiB page. Data distance x 256 B, or page distance x 4 KiB
    where rows of other pages came between; a first access is the whole footprint."""
    ids = np.array([0, 1, 2, 0, 1, 1, 3, 0])        # all on page 0
    got = epochs.working_sets(ids, 4, 256, 4096, 1 << 20)
    assert got.dtype == np.float64
    assert np.array_equal(got, [1 << 20] * 3 + [512, 512, 0, 1 << 20, 512])
    # rows 16 apart: each on a page of its own, so the TLB's distance is the larger
    far = np.array([0, 16, 32, 0])
    assert epochs.working_sets(far, 48, 256, 4096, 1 << 20)[-1] == 2 * 4096
    # on 2 MiB pages the three rows share one: the data distance alone
    assert epochs.working_sets(far, 48, 256, 2 << 20, 1 << 20)[-1] == 2 * 256
    # never beyond the footprint the accesses are drawn from
    assert epochs.working_sets(far, 48, 256, 4096, 4096)[-1] == 4096


# --- synthetic calibrations ------------------------------------------------------------

SIZES = [16 * K << i for i in range(13)]        # 16K .. 64M
MLP = 4.0        # one thread's random reads: this many misses in flight


def level_ns(size: float) -> float:
    """32K L1 at 1 ns, 1M L2 at 5 ns, 8M L3 at 30 ns, memory 100 ns."""
    return 1.0 if size <= 32 * K else 5.0 if size <= M else 30.0 if size <= 8 * M else 100.0


def synthetic(sweep=None, threads=2, floors=None) -> Calibration:
    sweep = sweep or tuple((float(s), level_ns(s)) for s in SIZES)
    gather = {g: tuple((float(s), g * MLP / level_ns(s)) for s in SIZES) for g in GRANULARITIES}
    return Calibration(
        node=0, kind="measured", source="synthetic", threads=threads, sweep=sweep,
        gather=gather, gather_all={g: gather[g][-1][1] * threads for g in GRANULARITIES},
        stream={(op, t): (12.0 if op == "read" else 8.0) * min(t, 1.5)
                for op in STREAM_OPS for t in (1, threads)},
        chains=((2, 50.0), (4, 25.0)), curve=((0.0, 100.0), (10.0, 150.0)),
        floors=floors or {})


def test_levels_of_a_synthetic_sweep():
    assert synthetic().levels() == [(32 * K, 1.0), (M, 5.0), (8 * M, 30.0), (64 * M, 100.0)]


def test_levels_leave_out_a_lone_point_between_two():
    sweep = ((16 * K, 1.0), (32 * K, 1.0), (64 * K, 2.5), (128 * K, 5.0), (256 * K, 5.0),
             (512 * K, 5.0), (M, 100.0), (2 * M, 100.0))
    assert synthetic(sweep).levels() == [(32 * K, 1.0), (512 * K, 5.0), (2 * M, 100.0)]


def test_memory_share_is_none_inside_the_caches_and_all_at_memory():
    cal = synthetic()
    inside = np.array([1.0, 16 * K, 32 * K, 100 * K, M, 4 * M, 8 * M])
    assert np.array_equal(cal.memory_share(inside), np.zeros(len(inside)))
    beyond = np.array([16 * M, 64 * M, 1 << 40, np.inf])
    assert np.array_equal(cal.memory_share(beyond), np.ones(len(beyond)))
    between = cal.memory_share(np.array([math.sqrt(8 * M * 16 * M)]))[0]
    assert 0.4 < between < 0.6         # halfway in log size between L3's last and memory


def test_access_ns_follows_the_gathers_and_the_memory_level():
    cal = synthetic()
    # a 64 B read reused within L1 costs 1 ns / MLP; one from memory 100 ns / MLP
    assert cal.access_ns(64, np.array([16 * K]))[0] == pytest.approx(1.0 / MLP)
    assert cal.access_ns(64, np.array([np.inf]))[0] == pytest.approx(100.0 / MLP)
    assert cal.access_ns(4096, np.array([2 * M]))[0] == pytest.approx(30.0 / MLP)
    # a block between two sizes: the same per-line latency here, so the same ns
    assert cal.access_ns(128, np.array([np.inf]))[0] == pytest.approx(100.0 / MLP, rel=1e-9)


# --- 3. profiles -------------------------------------------------------------------------

def test_profile_tier_scales_memory_and_says_it_is_assumed():
    fast = synthetic()
    p = calibration.profiles()["cxl-asic"]
    slow = calibration.profile_tier(fast, "cxl-asic", 1)
    assert slow.kind == "profile" and slow.node == 1
    assert "cxl-asic" in slow.source and "assumed" in slow.source
    assert slow.idle_ns == pytest.approx(fast.idle_ns * p["latency"], rel=0.01)
    assert slow.bandwidth == pytest.approx(fast.bandwidth * p["bandwidth"], rel=0.01)
    # the caches are the CPU's: a working set within L3 costs what it did
    assert slow.levels()[:-1] == fast.levels()[:-1]
    assert slow.access_ns(64, np.array([M]))[0] == pytest.approx(
        fast.access_ns(64, np.array([M]))[0])
    assert slow.access_ns(64, np.array([np.inf]))[0] == pytest.approx(
        fast.access_ns(64, np.array([np.inf]))[0] * p["latency"])
    assert [ns for _, ns in slow.chains] == pytest.approx(
        [ns * p["latency"] for _, ns in fast.chains])
    # one thread's stream is latency bound: it falls with the latency, within the bandwidth
    assert slow.stream[("read", 1)] <= fast.stream[("read", 1)] / p["latency"] * 1.0001
    assert fast.kind == "measured" and slow.idle_ns > fast.idle_ns   # fast not changed


def test_an_unknown_profile_names_the_profiles():
    with pytest.raises(UserError) as e:
        calibration.profile_tier(synthetic(), "no-such-device", 1)
    assert "no-such-device" in str(e.value)
    for name in calibration.profiles():
        assert name in str(e.value)


def test_every_profile_is_complete_and_cited():
    table = calibration.profiles()
    assert table and next(iter(table)) == "cxl-asic"        # the default first
    for name, p in table.items():
        assert isinstance(p.get("description"), str) and p["description"].strip(), name
        assert p["latency"] > 1, name
        assert 0 < p["bandwidth"] <= 1, name
        assert isinstance(p.get("source"), str) and p["source"].strip(), name


# --- 4. the model with its caches planted out, caught by the validation ----------------

def embedding_demand(**over) -> epochs.Demand:
    params = {k: o.default for k, o in embedding_workload.OPTIONS.items()}
    params.update({"rows": 4096, "dim": 32, "alpha": 1.05, "batch": 128, **over})
    return embedding_workload.demand(params)


def caches_ignored(d: epochs.Demand) -> epochs.Demand:
    """The planted bug: every access charged as a first access (reuse all inf)."""
    return epochs.Demand(**{**d.__dict__, "reuse": np.full(len(d.reuse), np.inf)})


CASES = [dict(rows=4096, alpha=1.05), dict(rows=4096, alpha=1.2), dict(rows=16384, alpha=1.05),
         dict(rows=16384, alpha=1.2), dict(rows=2048, alpha=0.9, seed=3),
         dict(rows=8192, alpha=1.1, seed=5)]


def test_embedding_demand_has_reuse_and_first_accesses():
    d = embedding_demand()
    assert d.units == 128 * 32 and d.block == 32 * 4 and d.floor
    assert len(d.reuse) == d.units
    table = 4096 * d.block
    first = d.reuse == table            # a first access: the whole table's working set
    assert 0 < first.sum() < d.units                       # hot rows come back
    assert (d.reuse <= table).all() and (d.reuse[~first] % d.block == 0).all()


def test_caches_ignored_is_far_from_the_cache_aware_prediction():
    cal = synthetic(floors={("fp32", 32, 1): 2.0})
    for over in CASES:
        d = embedding_demand(**over)
        aware = model.predict_ns(d, (cal, cal), 1)
        ignored = model.predict_ns(caches_ignored(d), (cal, cal), 1)
        assert ignored > 1.3 * aware, over
        # bounds: every access from L1 at the least, every one from memory at the most
        floor = cal.floor_ns(d.block, "fp32", 32, 1) * d.units
        assert cal.access_ns(d.block, np.array([0.0]))[0] * d.units + floor <= aware
        assert aware < cal.access_ns(d.block, np.array([np.inf]))[0] * d.units + floor
        # with no first access left, the all-memory figure is what it charges
        assert ignored == pytest.approx(
            cal.access_ns(d.block, np.array([np.inf]))[0] * d.units + floor)


def records(predict) -> list[dict]:
    """Summary records of embedding cases measured as the cache-aware model says (give or
    take up to 4 %), each with the model's figure `predict(demand)` (ns) as lookups."""
    out = []
    noise = [0.04, -0.03, 0.02, -0.04, 0.01, 0.0]
    cal = synthetic(floors={("fp32", 32, 1): 2.0})
    for i, (over, e) in enumerate(zip(CASES, noise)):
        d = embedding_demand(**over)
        measured = d.units / model.predict_ns(d, (cal, cal), 1) * 1e3 * (1 + e)
        out.append({"case": f"emb/{i:03d}", "benchmark": "embedding",
                    "parameters": {"mem": "bind:0", **over}, "metric": "lookups",
                    "unit": "M/s", "median": measured,
                    "model": {"metric": "lookups", "predicted": d.units / predict(d, cal) * 1e3,
                              "node": 0, "kind": cal.kind, "source": cal.source}})
        # a metric the model did not predict, beside it: left out of the checks
        out.append({"case": f"emb/{i:03d}", "benchmark": "embedding",
                    "parameters": {"mem": "bind:0", **over}, "metric": "bandwidth",
                    "unit": "GB/s", "median": 1.0, "model": out[-1]["model"]})
    out.append({"case": "sweep/000", "benchmark": "chase", "parameters": {}, "metric": "latency",
                "unit": "ns", "median": 3.0})
    return out


def test_model_checks_pass_the_model_and_catch_the_planted_bug():
    target = 0.15       # the issue's: median |error| within 15 %

    good = analysis.model_checks(records(lambda d, cal: model.predict_ns(d, (cal, cal), 1)))
    assert len(good["rows"]) == len(CASES)
    assert {r["metric"] for r in good["rows"]} == {"lookups"}
    assert good["median_error"] < 0.05 and good["worst_error"] <= 0.0417
    assert good["worst_case"] == "emb/003"          # measured 4 % under: error +4.17 %
    assert good["sources"] == ["synthetic"]
    for r in good["rows"]:
        assert r["error"] == pytest.approx(r["predicted"] / r["measured"] - 1)

    bad = analysis.model_checks(records(
        lambda d, cal: model.predict_ns(caches_ignored(d), (cal, cal), 1)))
    assert bad["median_error"] > target
    assert all(r["error"] < -target for r in bad["rows"])     # it predicts too few lookups

    text = "\n".join(analysis_text.model_lines(bad))
    assert f"median |error| {bad['median_error']:.0%}" in text
    assert all(f"emb/{i:03d}" in text for i in range(len(CASES)))


def test_model_checks_without_a_prediction_is_none():
    assert analysis.model_checks([r for r in records(lambda d, cal: 1.0)
                                  if r["benchmark"] == "chase"]) is None
    unmeasured = records(lambda d, cal: 1.0)
    for r in unmeasured:
        r["median"] = 0.0       # no error can be computed against nothing measured
    assert analysis.model_checks(unmeasured) is None


# --- 5. from_frame on a frame built here -------------------------------------------------

def frame_rows():
    """Rows shaped as results.load's frame: two repetitions a case (their medians what the
    calibration keeps), all-thread cases on CPUs 0-3, and node 1's rows beside node 0's."""
    rows = []

    def add(bench, metric, job, i, values, cpus="0", mem="bind:0", **cols):
        for rep, v in enumerate(values):
            rows.append({"benchmark": bench, "metric": metric, "mem": mem,
                         "case": f"{job}/{i:03d}", "job": job, "value": v, "cpus_used": cpus,
                         "repetition": rep, **cols})

    for i, (size, ns) in enumerate(((16 * K, 1.0), (M, 5.0), (64 * M, 100.0))):
        add("chase", "latency", "sweep", i, (ns, ns + 0.2), size=float(size), chains=1.0,
            dist="False", kernel="chase")
        add("chase", "latency", "sweep", i, (ns * 3,) * 2, mem="bind:1", size=float(size),
            chains=1.0, dist="False", kernel="chase")
    for i, (c, ns) in enumerate(((2, 52.0), (8, 14.0))):
        add("chase", "latency", "chains", i, (ns, ns), size=float(256 * M), chains=float(c),
            dist="False", kernel="chase")
        add("chase", "parallelism", "chains", i, (c * 0.9,) * 2, size=float(256 * M),
            chains=float(c), dist="False", kernel="chase")
    i = 0
    for g in GRANULARITIES:
        for size in (16 * K, 64 * M):
            add("random_bw", "bandwidth", "gather", i, (g / 10.0, g / 10.0 + 2),
                granularity=float(g), size=float(size), threads="1", kernel=f"random_{g}")
            i += 1
        add("random_bw", "bandwidth", "gather_all", GRANULARITIES.index(g), (g / 2.0,) * 2,
            cpus="0-3", granularity=float(g), size=float(1 << 30), threads="all",
            kernel=f"random_{g}")
    i = 0
    for op in STREAM_OPS:
        for t, cpus in (("1", "0"), ("all", "0-3")):
            base = 10.0 * (1 + STREAM_OPS.index(op)) * (3 if t == "all" else 1)
            add("bandwidth", "bandwidth", "stream", i, (base, base + 1), cpus=cpus,
                kernel=op, threads=t, size=float(512 * M))
            if op in ("write", "copy"):      # counted with the allocating reads
                add("bandwidth", "bandwidth_memory", "stream", i, (2 * base,) * 2, cpus=cpus,
                    kernel=op, threads=t, size=float(512 * M))
            i += 1
    for i, (load, ns) in enumerate(((0.0, 100.0), (5.0, 130.0), (9.0, 125.0))):
        add("loaded_latency", "latency", "loaded", i, (ns,), cpus="0-1", mix="read",
            threads="all", size=float(256 * M), kernel="chase+read")
        add("loaded_latency", "bandwidth", "loaded", i, (load,), cpus="0-1", mix="read",
            threads="all", size=float(256 * M), kernel="chase+read")
    for i, (dim, t, cpus, lookups) in enumerate(((32, "1", "0", 200.0), (32, "all", "0-3", 640.0),
                                                 (64, "1", "0", 100.0))):
        add("embedding", "lookups", "floor", i, (lookups, lookups), cpus=cpus, rows=64.0,
            dim=float(dim), threads=t, dist="zipf", kernel="embedding_bag")
        add("embedding", "bandwidth", "floor", i, (1.0, 1.0), cpus=cpus, rows=64.0,
            dim=float(dim), threads=t, dist="zipf", kernel="embedding_bag")
    return rows


def results_frame(rows=None) -> pd.DataFrame:
    return pd.DataFrame(frame_rows() if rows is None else rows)


def test_from_frame_reads_a_results_frame():
    cal = calibration.from_frame(results_frame(), 0, "measured: here")
    assert cal is not None
    assert (cal.node, cal.kind, cal.source) == (0, "measured", "measured: here")
    assert cal.threads == 4                                      # cpus_used 0-3
    assert [s for s, _ in cal.sweep] == [16 * K, M, 64 * M]
    assert [ns for _, ns in cal.sweep] == pytest.approx([1.1, 5.1, 100.1])   # node 0's medians
    assert cal.idle_ns == pytest.approx(100.1)
    assert cal.chains == ((2, 52.0), (8, 14.0))
    assert cal.mlp == pytest.approx(100.1 / 14.0)
    for g in GRANULARITIES:
        assert cal.gather[g] == ((16 * K, g / 10 + 1), (64 * M, g / 10 + 1))
        assert cal.gather_all[g] == g / 2
    for n, op in enumerate(STREAM_OPS):
        base = 10.0 * (1 + n)
        factor = 2 if op in ("write", "copy") else 1     # their memory traffic
        assert cal.stream[(op, 1)] == pytest.approx(factor * base + (0 if factor == 2 else 0.5))
        assert cal.stream[(op, 4)] == pytest.approx(
            factor * 3 * base + (0 if factor == 2 else 0.5))
    assert set(cal.stream) == {(op, t) for op in STREAM_OPS for t in (1, 4)}
    assert cal.bandwidth == pytest.approx(30.5)
    # the loaded curve by rising load, each latency at least the one before
    assert cal.curve == ((0.0, 100.0), (5.0, 130.0), (9.0, 130.0))
    # floors: ns a lookup on each thread (1e3 / M lookups/s, times the threads)
    assert cal.floors == {("fp32", 32, 1): pytest.approx(5.0),
                          ("fp32", 32, 4): pytest.approx(6.25),
                          ("fp32", 64, 1): pytest.approx(10.0)}


def test_from_frame_of_the_other_node():
    cal = calibration.from_frame(results_frame(), 1, "x")
    assert cal is None          # node 1 has only a sweep here


def test_from_frame_needs_every_stream():
    rows = frame_rows()
    assert calibration.from_frame(results_frame(
        [r for r in rows if r["benchmark"] != "bandwidth"]), 0, "x") is None
    no_all_copy_nt = [r for r in rows if not (r["benchmark"] == "bandwidth" and
                                              r["kernel"] == "copy_nt" and r["threads"] == "all")]
    assert calibration.from_frame(results_frame(no_all_copy_nt), 0, "x") is None
    no_memory_write = [r for r in rows if r["metric"] != "bandwidth_memory"
                       or r["kernel"] != "write"]
    assert calibration.from_frame(results_frame(no_memory_write), 0, "x") is None


def test_from_frame_needs_the_sweep_and_every_gather():
    rows = frame_rows()
    one_sweep_point = [r for r in rows if not (r["job"] == "sweep" and r["case"] != "sweep/000")]
    assert calibration.from_frame(results_frame(one_sweep_point), 0, "x") is None
    no_4k = [r for r in rows if r.get("granularity") != 4096.0]
    assert calibration.from_frame(results_frame(no_4k), 0, "x") is None


def test_from_frame_without_the_optional_cases():
    """No chains, loaded latency or floor: still a calibration, those left empty."""
    rows = [r for r in frame_rows() if r["job"] not in ("chains", "loaded", "floor")]
    cal = calibration.from_frame(results_frame(rows), 0, "x")
    assert cal is not None
    assert cal.chains == () and cal.curve == () and cal.floors == {}
    assert cal.floor_ns(128, "fp32", 32, 1) == 0.0
    assert cal.mlp == 1.0


# --- 2. `cxlbench calibrate`: each job measured once -------------------------------------

def past_the_caches() -> str:
    """A working set past this machine's last cache (as sysfs reports it) for the tiny
    sweep's last point: the model does not use a calibration whose sweep never left the
    caches (64M where sysfs reports none)."""
    caches = Topology.read(probe_gpus=False).cpu.get("caches")
    return format_size(calibration.in_cache(((1.0, 0.0),), caches)[1] or 64 * M)


TINY = """\
description = "the calibration suite, tiny: for the tests"

[vars]
node = 0

[global]
mem = "bind:${node}"
repeat = 1
warmup = 0

[sweep]
bench = "chase"
size = ["16K", "1M", "%s"]
loads = 4096

[chains]
bench = "chase"
size = "1M"
chains = [2]
loads = 4096

[gather]
bench = "random_bw"
granularity = [64, 256, 4096]
size = { from = "16K", to = "256K", factor = 16 }
passes = 1

[gather_all]
bench = "random_bw"
granularity = [64, 256, 4096]
size = "256K"
threads = "all"
passes = 1

[gather_pf]
bench = "embedding"
dist = "uniform"
dim = [16, 64, 256]
size = { from = "16K", to = "256K", factor = 16 }
batch = 64
threads = 1

[gather_pf_thp]
bench = "embedding"
dist = "uniform"
dim = [16, 64, 256]
size = { from = "16K", to = "256K", factor = 16 }
batch = 64
threads = 1
page = "thp"

[gather_pf_all]
bench = "embedding"
dist = "uniform"
dim = [16, 64, 256]
size = "256K"
batch = 64
threads = "all"

[gather_sparse]
bench = "embedding"
dist = "uniform"
far = 0.25
dim = [16, 64, 256]
size = "256K"
batch = 64
threads = 1

[stream]
bench = "bandwidth"
kernel = ["read", "write", "write_nt", "copy", "copy_nt"]
size = "4M"
passes = 1
threads = [1, "all"]

[loaded]
bench = "loaded_latency"
size = "256K"
load_size = "256K"
mix = "read"
delay = ["idle", 0]
loads = 1000

[adam_warm]
bench = "optimizer"
precision = "mixed"
params = 16384
cold = false
triad = false
threads = [1, "all"]
""" % past_the_caches()

FLOOR = """
[floor]
bench = "embedding"
rows = 64
dim = [32]
batch = 256
threads = [1, "all"]
"""


def test_the_tiny_suite_has_the_real_suites_jobs(tmp_path):
    from cxlbench import suite
    real = suite.job_names(suite.load(calibration.SUITE))
    path = tmp_path / "calibrate.toml"
    path.write_text(TINY + FLOOR)
    assert suite.job_names(suite.load(str(path))) == real


def run_dirs(results: pathlib.Path) -> set[pathlib.Path]:
    return {p.parent for p in results.glob("*/*/run.json")}


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """Three `cxlbench calibrate` calls in a fresh folder, results under its ./results:
    a suite without [floor] (everything measured), the whole suite (floor only), the whole
    suite again (nothing). Each suite file is named calibrate.toml: a calibration run is
    one of the suite named so."""
    home = tmp_path_factory.mktemp("calibrate")
    (home / "partial").mkdir()
    (home / "whole").mkdir()
    (home / "partial" / "calibrate.toml").write_text(TINY)
    (home / "whole" / "calibrate.toml").write_text(TINY + FLOOR)
    results = home / "results"
    node = Topology.read(probe_gpus=False).memory_nodes[0]
    calls = []
    for which in ("partial", "whole", "whole"):
        before = run_dirs(results)
        p = cxlbench("calibrate", "--node", str(node), "--suite",
                     str(home / which / "calibrate.toml"), cwd=home, timeout=600)
        calls.append({"proc": p, "new": sorted(run_dirs(results) - before)})
    return {"home": home, "results": results, "node": node, "calls": calls}


def cases_of(run: pathlib.Path) -> list[str]:
    return [c["id"] for c in json.loads((run / "run.json").read_text())["cases"]]


@pytest.mark.slow
def test_calibrate_measures_each_job_once(calibrated):
    a, b, c = calibrated["calls"]
    node = calibrated["node"]
    for call in (a, b, c):
        assert call["proc"].returncode == 0, call["proc"].stderr[-3000:]

    # a: nothing measured yet, so every job of the partial suite, in one new run
    assert len(a["new"]) == 1
    run_a = a["new"][0]
    assert run_a.parent.parent == calibrated["results"]
    assert "nothing measured yet" in a["proc"].stderr
    jobs_a = {case.split("/")[0] for case in cases_of(run_a)}
    assert jobs_a == {"sweep", "chains", "gather", "gather_all", "gather_pf", "gather_pf_thp",
                      "gather_pf_all", "gather_sparse", "stream", "loaded", "adam_warm"}
    assert f"node {node}: measured" in a["proc"].stdout
    assert "own work a lookup, one thread: not measured" in a["proc"].stdout

    # b: the whole suite, of which only floor is missing: a run of floor's cases alone
    assert len(b["new"]) == 1
    run_b = b["new"][0]
    assert "floor missing from earlier runs" in b["proc"].stderr
    assert cases_of(run_b) and all(c.startswith("floor/") for c in cases_of(run_b))
    assert len(cases_of(run_b)) == 2
    assert re.search(r"own work a lookup, one thread: fp32 dim 32 [0-9.]+ ns",
                     b["proc"].stdout)
    # both runs feed the calibration, each job from the run that has it
    source = re.search(r"node \d+: measured \(measured: (.*)\)", b["proc"].stdout).group(1)
    assert run_a.name in source and run_b.name in source

    # c: everything there already: nothing run, the earlier runs reused
    assert c["new"] == []
    assert "measured already" in c["proc"].stderr
    assert "calibrating" not in c["proc"].stderr
    assert run_a.name in c["proc"].stderr and run_b.name in c["proc"].stderr
    assert b["proc"].stdout.splitlines()[-6:] == c["proc"].stdout.splitlines()[-6:]

    # what the command printed is what the library reads back
    runs = calibration.find_runs(calibrated["results"], _machine(run_a))
    assert runs == sorted([str(run_a), str(run_b)], reverse=True)
    assert calibration.jobs_of([str(r) for r in runs], node) == {
        "sweep", "chains", "gather", "gather_all", "gather_pf", "gather_pf_thp",
        "gather_pf_all", "gather_sparse", "stream", "loaded", "adam_warm", "floor"}
    cal = calibration.measured(node, calibrated["results"], _machine(run_a))
    assert cal is not None and cal.kind == "measured"
    assert len(cal.sweep) == 3 and all(len(cal.gather[g]) == 2 for g in GRANULARITIES)
    assert {t for _, _, t in cal.floors} == {1, cal.threads}
    assert {(d, dim) for d, dim, _ in cal.floors} == {("fp32", 32)}
    # the sparse mixes are their own figures, not points of the prefetched curves
    assert all(len(curve) == 2 for curve in cal.prefetched.values())
    assert set(cal.sparse) == {64, 256, 1024}
    assert all(len(p) == 1 and p[0][0] == 0.25 and p[0][1] >= 1.0
               for p in cal.sparse.values())


def _machine(run: pathlib.Path) -> str:
    return run.parent.name


@pytest.mark.slow
def test_floor_cases_are_predicted_from_the_calibration_under_dot_results(calibrated):
    """Run b's floor cases ran in a folder whose ./results held run a's calibration (and
    nothing else): their prediction must come from it."""
    a, b, _ = calibrated["calls"]
    mine = {p.name for p in run_dirs(calibrated["results"])}
    models = []
    for line in (b["new"][0] / "cases.jsonl").read_text().splitlines():
        entry = json.loads(line)
        models.append((entry.get("info") or {}).get("model"))
    assert models and all(models)
    for m in models:
        named = re.findall(r"\d{8}-\d{6}", m["source"])
        assert named and set(named) <= mine, m["source"]
        # the same work on the default profile's slower tier: the one-node slowdown
        assert m["slower"]["profile"] == next(iter(calibration.profiles()))
        assert m["slower"]["slowdown"] >= 0 and "assumed: profile" in m["slower"]["source"]


@pytest.mark.slow
def test_calibrate_reuses_a_suite_file_of_any_name(tmp_path):
    (tmp_path / "tiny.toml").write_text(
        '[vars]\nnode = 0\n\n[global]\nmem = "bind:${node}"\nrepeat = 1\nwarmup = 0\n\n'
        '[sweep]\nbench = "chase"\nsize = ["16K", "64K"]\nloads = 4096\n')
    node = Topology.read(probe_gpus=False).memory_nodes[0]
    results = tmp_path / "results"
    calls = []
    for _ in range(2):
        before = run_dirs(results)
        p = cxlbench("calibrate", "--node", str(node), "--results-dir", str(results),
                     "--suite", str(tmp_path / "tiny.toml"), cwd=tmp_path)
        calls.append((p, run_dirs(results) - before))
    (first, new_first), (second, new_second) = calls
    assert len(new_first) == 1 and "nothing measured yet" in first.stderr
    # the sweep alone is no calibration (rc 2 both times), but it is measured only once
    assert new_second == set() and "measured already" in second.stderr, second.stderr


# --- share curves the model draws ---------------------------------------------------------

def many_cores(threads=64) -> Calibration:
    """A lab machine's node: one thread streams 12 GB/s, every CPU together 200 GB/s (the
    memory, not the cores, the limit)."""
    base = synthetic(threads=threads)
    stream = {(op, t): (12.0 if t == 1 else 200.0) for op, t in base.stream}
    return dataclasses.replace(base, stream=stream)


def test_interleaving_a_bandwidth_bound_step_beats_all_fast_where_the_fast_tier_saturates():
    """Adam over 64 cores: all-fast is bound by the fast tier's 200 GB/s; a share of the
    pages on a CXL device (a quarter of that bandwidth) adds its own, so a share below 1
    runs faster, and all-slow is far slower. On one of its cores nothing saturates and
    every share below 1 is slower."""
    from cxlbench.tiering.policies.interleave import Interleave
    from cxlbench.workloads import optimizer
    work = optimizer.Epochs({"params": 1 << 20}, 1, 2, "none")
    pages = -(-work.sizes()["state"] // 4096)
    demand = work.demand(0, 4096)
    fast = many_cores()
    tiers = (fast, calibration.profile_tier(fast, "cxl-asic", 1))
    for threads, expands in ((64, True), (1, False)):

        def ns(share):
            mask = Interleave(pages, int(share * pages)).initial()
            return model.predict_ns(demand, tiers, threads, mask)
        curve = {share: ns(share) for share in (1.0, 0.9, 0.8, 0.5)}
        best = min(curve, key=curve.get)
        assert (best < 1.0) == expands, curve
        assert ns(1e-9) > curve[1.0]                # all-slow: the slowest


def test_a_skewed_embeddings_knee_falls_below_one_where_its_hot_set_fits():
    """Zipf 1.2 over rows of a page each (page heat is row heat), a profile's slow tier:
    the oracle's knee (within 5 % of all-fast) falls at 0.75 of the pages, where the rows
    that most lookups miss the caches on fit; uniform lookups have no knee below 1."""
    from cxlbench.tiering.policies.oracle import Oracle
    from cxlbench.workloads import embedding
    fast = synthetic()
    tiers = (fast, calibration.profile_tier(fast, "cxl-asic", 1))
    knees = {}
    for dist in ("zipf", "uniform"):
        work = embedding.Epochs({"rows": 4096, "dim": 1024, "batch": 512, "dist": dist,
                                 "alpha": 1.2}, 1, 2, "none")
        pages = -(-work.sizes()["table"] // 4096)
        profile = np.sum([work.counts(e, pages, 4096) for e in range(2)], axis=0)

        def ns(share):
            mask = Oracle(pages, int(share * pages), profile=profile).initial()
            return sum(model.predict_ns(work.demand(e, 4096), tiers, 1, mask)
                       for e in range(2))
        top = ns(1.0)
        knees[dist] = analysis.knee({s: ns(s) / top - 1 for s in (0.9, 0.75, 0.5, 0.25)})
    assert knees == {"zipf": 0.75, "uniform": None}


@pytest.mark.slow
def test_tiering_says_where_its_tiers_come_from_and_how_far_the_model_was(calibrated):
    """On this one-node machine, with the calibration above: the fast tier measured, the
    slow one the profile asked for (assumed); the model's error is not known until a run
    checked it, then it is (a small embedding run whose cases it predicted)."""
    home, node = calibrated["home"], calibrated["node"]
    small = ("--set", "embedding.rows=4096", "--set", "embedding.batch=256",
             "--set", "slow_tier=cxl-asic-slow")
    p = cxlbench("tiering", "--policies", "all-fast,first-touch", "--shares", "0.5",
                 "--engine", "model", *small, cwd=home)
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout
    assert f"model tiers: fast node {node}: measured (measured: " in out
    assert "profile (assumed: profile cxl-asic-slow" in out
    assert "model error: not checked on this machine yet (cxlbench run model-check)" in out
    assert out.index("model tiers:") < out.index("slowdown against all-fast")
    assert "(from the model)" in out
    # a run the model predicted: its table, then tiering names its error
    p = cxlbench("run", "--bench", "embedding", "--set", "rows=2048", "--set", "batch=64",
                 "--set", f"mem=bind:{node}", "--set", "repeat=2", cwd=home)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "model against measurement: median |error|" in p.stdout
    p = cxlbench("tiering", "--policies", "all-fast", "--engine", "model", *small, cwd=home)
    assert "model error on the measured tier: median " in p.stdout


def test_tiering_without_a_calibration_says_its_tiers_are_assumed(tmp_path):
    p = cxlbench("tiering", "--policies", "all-fast", "--engine", "model", "--set",
                 "embedding.rows=4096", "--set", "embedding.batch=256", "--results-dir",
                 str(tmp_path), cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "model tiers: ASSUMED (no calibration of node" in p.stdout
    assert "cxlbench calibrate measures it" in p.stdout


def test_the_model_check_suite_is_the_issues_grid():
    """README's `cxlbench run model-check` (listed, not run: about twelve minutes): tables
    of 1 MiB to 4 GiB at two row sizes, Zipf 0.6-1.2, one thread and all, the largest
    again on huge pages, KV decode, Adam in both precisions, both checkpoint stores."""
    p = cxlbench("run", "model-check", "--dry-run")
    assert p.returncode == 0, p.stderr
    cases = p.stdout.splitlines()
    jobs = {}
    for line in cases:
        jobs.setdefault(line.split("/")[0], []).append(line)
    assert {k: len(v) for k, v in jobs.items()} == {
        "embedding_32": 24, "embedding_256": 24, "embedding_thp": 4, "kv_decode": 8,
        "adam": 4, "checkpoint": 4}
    assert any("rows=33554432" in c and "dim=32" in c for c in jobs["embedding_32"])   # 4 GiB
    assert any("precision=mixed" in c for c in jobs["adam"])


@pytest.mark.slow
def test_an_interrupted_job_is_no_calibration_and_a_damaged_run_is_skipped(calibrated):
    """A newer run whose sweep was cut short (its journal lacks a case) does not count:
    calibrate would measure the sweep again, and the sweep comes from the older, whole
    run. A folder with a damaged run.json is passed over, not an error."""
    node = calibrated["node"]
    first = calibrated["calls"][0]["new"][0]          # every job but the floor
    machine = first.parent
    cut = machine / "29991231-000000"
    shutil.copytree(first, cut)
    journal = (cut / "cases.jsonl").read_text().splitlines()
    (cut / "cases.jsonl").write_text(
        "\n".join(line for line in journal if '"sweep/000"' not in line) + "\n")
    bad = machine / "29991231-000001"
    bad.mkdir()
    (bad / "run.json").write_text("{")
    try:
        runs = calibration.find_runs(machine.parent, machine.name)
        assert str(bad) not in runs and runs[0] == str(cut)
        assert "sweep" not in calibration.jobs_of([str(cut)], node)
        assert "gather" in calibration.jobs_of([str(cut)], node)
        frame, used = calibration.merged([str(cut), str(first)])
        sweep = frame[frame["job"] == "sweep"]
        assert set(sweep["run"]) == {first.name}         # the whole one's
        assert str(cut) in used                          # its whole jobs still count
    finally:
        shutil.rmtree(cut)
        shutil.rmtree(bad)


def test_a_block_under_a_line_costs_a_line():
    cal = synthetic()
    at = np.array([np.inf, 16 * K])
    assert np.array_equal(cal.access_ns(32, at), cal.access_ns(64, at))


@pytest.mark.slow
def test_readme_plan_check_commands_put_predictions_beside_measurements(calibrated):
    """README's `cxlbench plan ... --check` as written, against the tiny calibration: the
    plan's host work run by the kernels, each with a prediction beside its measurement."""
    from .test_plan import readme_plans
    for command in readme_plans(check=True):
        p = cxlbench(*command.split()[1:], cwd=calibrated["home"], timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        table = p.stdout[p.stdout.index("Predicted against measured"):]
        rows = re.findall(r"^  (\S+/000)\s+(.+?)\s{2,}\S+=\d+\s+([\d.e+]+)\s+([\d.e+]+)\s+"
                          r"([+-]\d+)%", table, re.M)
        assert {case.split("_")[0] for case, *_ in rows} == {"optimizer", "checkpoint"}
        for case, work, predicted, measured, error in rows:
            assert float(predicted) > 0 and float(measured) > 0
            # the printed figures are rounded: their error within a point of the one shown
            assert abs(int(error) - (float(predicted) / float(measured) - 1) * 100) <= 1
