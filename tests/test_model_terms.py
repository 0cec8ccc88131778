"""The tier model's terms of issue 48, each with a case that fails without it: the embedding
kernel's own prefetched gathers (read from a calibration run, and charged where a
workload's lookups are), the page walks huge pages save, every element type's own floor,
the slower tier's prefetched gathers, the KV-cache's part-filled last block, and a
calibration job the suite changed measured again. Nothing is measured: synthetic
calibrations and frames."""
import collections
import dataclasses

import numpy as np
import pandas as pd
import pytest

from cxlbench.tiering import calibration, model
from cxlbench.tiering.calibration import ROWS
from cxlbench.workloads import kvcache, optimizer

from .test_model_calibration import K, M, embedding_demand, frame_rows, results_frame, synthetic

G = 1 << 30


def pf_ns(r: int, ws: float, huge: bool = False) -> float:
    """A prefetched lookup's ns: 2 ns of work, then what memory adds past 1 MiB, more for
    bigger rows; 4 KiB pages pay walks past 16 MiB (huge pages do not)."""
    memory = 0.0 if ws <= M else 4.0 * (r / 64) ** 0.5
    walks = 0.0 if huge or ws <= 16 * M else 6.0
    return 2.0 + memory + walks


SIZES = [16 * K * 4 ** i for i in range(10)]     # 16K .. 4G
SPARSE = 3.0        # pf_rows' sparse gathers: a miss among 7 hits costs 3 times its excess


def prefetched(**over):
    """A synthetic calibration with the prefetched gathers of pf_ns and fp32's floors at
    2 ns (the floor is the curve's in-cache figure)."""
    curves = {(r, h): tuple((float(s), pf_ns(r, s, h)) for s in SIZES)
              for r in ROWS for h in (False, True)}
    floors = {("fp32", r // 4, t): 2.0 for r in ROWS for t in (1, 2)}
    cal = synthetic(floors=floors)
    return dataclasses.replace(cal, prefetched=curves,
                               prefetched_all={(r, h): 40.0 for r in ROWS
                                               for h in (False, True)}, **over)


# --- reading them ------------------------------------------------------------------------

def pf_rows() -> list[dict]:
    """The prefetched gathers' rows as a calibration run holds them: uniform lookups over
    tables of `size` bytes, one thread on 4 KiB pages and THP, and every CPU; and floors of
    int8 beside fp32's."""
    rows = []

    def add(job, i, value, cpus="0", **cols):
        for rep in range(2):
            rows.append({"benchmark": "embedding", "metric": "lookups", "mem": "bind:0",
                         "case": f"{job}/{i:03d}", "job": job, "value": value,
                         "cpus_used": cpus, "repetition": rep, "kernel": "embedding_bag",
                         **cols})
    i = 0
    for page, job in ((None, "gather_pf"), ("thp", "gather_pf_thp")):
        for dim in (16, 64, 256):
            for size in (16 * K, 64 * M):
                ns = pf_ns(dim * 4, size, page == "thp")
                add(job, i, 1e3 / ns, dist="uniform", dim=float(dim), size=float(size),
                    threads="1", page=page)
                i += 1
    for page, rate in ((None, 100.0), ("thp", 300.0)):
        for dim in (16, 64, 256):
            add("gather_pf_all", dim + (1 if page else 0), rate, cpus="0-3", dist="uniform",
                dim=float(dim), size=float(64 * M), threads="all", page=page)
    for dim in (16, 64, 256):      # 1 in 8 lookups over the table, each 3 times the excess
        hot, dense = pf_ns(dim * 4, 16 * K), pf_ns(dim * 4, 64 * M)
        ns = hot + 0.125 * SPARSE * (dense - hot)
        add("gather_sparse", 40 + dim, 1e3 / ns, dist="uniform", far=0.125, dim=float(dim),
            size=float(64 * M), threads="1", page=None)
    add("floor", 9, 50.0, rows=64.0, dim=32.0, threads="1", dist="zipf", dtype="int8")
    for i, (kernel, t, cpus, rate) in enumerate((("adam-mixed", "1", "0", 1000.0),
                                                 ("adam-mixed", "all", "0-3", 2000.0))):
        rows += [{**r, "benchmark": "optimizer", "metric": "params", "job": "adam_warm",
                  "case": f"adam_warm/{i:03d}", "kernel": kernel, "threads": t, "cold": False,
                  "cpus_used": cpus, "value": rate} for r in rows[:1]]
    return rows


def test_from_frame_reads_the_prefetched_gathers_and_each_dtypes_floor():
    cal = calibration.from_frame(results_frame(frame_rows() + pf_rows()), 0, "here")
    assert set(cal.prefetched) == {(r, h) for r in ROWS for h in (False, True)}
    for r in ROWS:
        for h in (False, True):     # ns a lookup: 1e3 / M lookups/s, by working set
            sizes, ns = zip(*cal.prefetched[(r, h)])
            assert sizes == (16 * K, 64 * M)
            assert ns == pytest.approx((pf_ns(r, 16 * K, h), pf_ns(r, 64 * M, h)))
        # GB/s of rows, every CPU, on either page size
        assert cal.prefetched_all[(r, False)] == pytest.approx(r / 1e3 * 100.0)
        assert cal.prefetched_all[(r, True)] == pytest.approx(r / 1e3 * 300.0)
    assert cal.floors[("int8", 32, 1)] == pytest.approx(20.0)
    assert cal.floors[("fp32", 32, 1)] == pytest.approx(5.0)      # its rows lack a dtype
    # the sparse mixes: their own figure, not points of the curves above
    assert cal.sparse == {r: ((0.125, pytest.approx(SPARSE)),) for r in ROWS}
    # the warm optimizer steps: ns a parameter on each thread
    assert cal.compute == {("adam-mixed", 1): pytest.approx(1.0),
                           ("adam-mixed", 4): pytest.approx(2.0)}


def test_a_prefetched_curve_never_falls_as_the_working_set_grows():
    """One case's unlucky moment (a busy host, a probe's poor pick) pooled with its
    neighbours: the least-squares rising fit."""
    rows = pf_rows()
    for r in rows:          # 64 B rows on 4 KiB pages: 16 KiB slower than 64 MiB
        if r["job"] == "gather_pf" and r["dim"] == 16.0:
            r["value"] = 1e3 / (9.0 if r["size"] == 16 * K else 5.0)
    cal = calibration.from_frame(results_frame(frame_rows() + rows), 0, "here")
    assert [ns for _, ns in cal.prefetched[(64, False)]] == pytest.approx([7.0, 7.0])
    assert calibration.rising([1.0, 3.0, 2.0, 4.0, 0.5]) == pytest.approx(
        [1.0, 2.375, 2.375, 2.375, 2.375])
    assert calibration.rising([]) == []


def test_without_the_prefetched_gathers_the_random_reads_are_charged():
    cal = calibration.from_frame(results_frame(), 0, "here")
    assert cal.prefetched == {} and cal.lookup_ns(128, "fp32", 32, 1, np.array([M])) is None
    d = embedding_demand()
    assert model.predict_ns(d, (cal, cal), 1) > 0


# --- charging them -----------------------------------------------------------------------

def test_lookups_are_charged_as_the_kernels_prefetched_gathers():
    """An embedding demand costs the prefetched curve at each lookup's working set, not
    the plain random reads' (which keep fewer misses in flight) plus a floor."""
    cal = prefetched()
    plain = dataclasses.replace(cal, prefetched={}, prefetched_all={})
    d = embedding_demand(rows=1 << 22, dim=64, alpha=0.6)      # 1 GiB of 256 B rows
    want = sum(pf_ns(256, ws) for ws in d.reuse)
    assert model.predict_ns(d, (cal, cal), 1) == pytest.approx(want, rel=0.02)
    assert abs(model.predict_ns(d, (plain, plain), 1) / want - 1) > 0.3


def test_a_kernel_that_does_not_prefetch_is_charged_the_random_reads():
    """prefetch=0 (the probe's pick on some tables): plain random reads and the floor,
    not the prefetched curve."""
    cal = prefetched()
    on = embedding_demand(rows=1 << 22, dim=64, alpha=0.6)
    off = embedding_demand(rows=1 << 22, dim=64, alpha=0.6, prefetch=0)
    assert on.prefetch > 0 and off.prefetch == 0
    plain = dataclasses.replace(cal, prefetched={}, prefetched_all={})
    assert model.predict_ns(off, (cal, cal), 1) == pytest.approx(
        model.predict_ns(off, (plain, plain), 1))
    assert model.predict_ns(off, (cal, cal), 1) != pytest.approx(
        model.predict_ns(on, (cal, cal), 1), rel=0.1)


def test_a_miss_among_hits_costs_more_than_in_a_dense_stream():
    """Where only a share of the lookups miss, the kernel's prefetch window holds fewer
    misses: each costs its excess over a hit times what gather_sparse measured at that
    share (log-log toward 1 where all miss, held below the smallest share). A table
    whose lookups all go as deep (uniform, whatever its size) is charged as before."""
    cal = prefetched(sparse={r: ((0.125, SPARSE),) for r in ROWS})
    dense = prefetched()

    base = embedding_demand(rows=1 << 22, dim=64, alpha=0.6)       # 256 B rows

    def demand(ws):
        return dataclasses.replace(base, reuse=ws, units=len(ws))
    mix = demand(np.where(np.arange(8000) % 8 == 0, float(G), 16.0 * K))    # 1 in 8 miss
    hot, far = pf_ns(256, 16 * K), pf_ns(256, G)
    assert model.predict_ns(mix, (dense, dense), 1) == pytest.approx(
        7000 * hot + 1000 * far, rel=0.02)
    assert model.predict_ns(mix, (cal, cal), 1) == pytest.approx(
        7000 * hot + 1000 * (hot + SPARSE * (far - hot)), rel=0.02)
    # not on huge pages (their misses walk no page tables: the ml suite's tables on them
    # were put 1.5-2x too slow with it)
    huge = dataclasses.replace(mix, page=2 * M)
    assert model.predict_ns(huge, (cal, cal), 1) == pytest.approx(
        model.predict_ns(huge, (dense, dense), 1))
    for ws in (float(G), 16.0 * M):     # every lookup as deep: no excess
        uniform = demand(np.full(4000, ws))
        assert model.predict_ns(uniform, (cal, cal), 1) == pytest.approx(
            model.predict_ns(uniform, (dense, dense), 1))
    # between the share measured and all missing, log-log; below it, held
    assert cal.sparse_excess(256, 0.5) == pytest.approx(SPARSE ** (1 / 3))
    assert cal.sparse_excess(256, 0.01) == pytest.approx(SPARSE)
    assert cal.sparse_excess(256, 1.0) == 1.0 and dense.sparse_excess(256, 0.01) == 1.0


def test_the_share_from_memory_is_read_off_the_kernels_own_curve():
    """Where the chase sees no last-level cache the gathers find (a VM's), memory's
    share of a lookup follows the prefetched curve, from its smallest working set's
    cost (none) to its largest's (all)."""
    cal = prefetched()
    share = cal.lookup_share(256, np.array([16.0 * K, 512.0 * K, 4.0 * G]))
    assert share == pytest.approx([0.0, 0.0, 1.0])
    middle = cal.lookup_share(256, np.array([8.0 * M]))[0]         # memory, no walks yet
    assert 0.5 < middle < 1.0


def test_huge_pages_save_the_walks_and_never_cost_more():
    cal = prefetched()
    big = np.array([float(G)])
    four_k = cal.lookup_ns(256, "fp32", 64, 1, big)[0]
    huge = cal.lookup_ns(256, "fp32", 64, 1, big, huge=True)[0]
    assert four_k - huge == pytest.approx(6.0)          # the walks' share
    small = np.array([float(4 * M)])                    # inside the TLB's reach: alike
    assert cal.lookup_ns(256, "fp32", 64, 1, small, huge=True)[0] == pytest.approx(
        cal.lookup_ns(256, "fp32", 64, 1, small)[0])
    # a huge-page curve slower than 4 KiB pages' (noise) is held to the 4 KiB figure
    worse = {k: tuple((s, ns + 50.0 if k[1] else ns) for s, ns in c)
             for k, c in cal.prefetched.items()}
    slow = dataclasses.replace(cal, prefetched=worse)
    assert slow.lookup_ns(256, "fp32", 64, 1, big, huge=True)[0] == pytest.approx(four_k)
    # through the demand: a table on 2 MiB pages is predicted faster than on 4 KiB
    on = {p: embedding_demand(rows=1 << 22, dim=64, alpha=0.6, page=p) for p in ("4k", "thp")}
    assert on["thp"].page == 2 * M and on["4k"].page == 4096
    assert model.predict_ns(on["thp"], (cal, cal), 1) < 0.8 * model.predict_ns(
        on["4k"], (cal, cal), 1)


def test_each_dtype_pays_its_own_work_in_place_of_fp32s():
    """A row of another type costs as the fp32 row of as many elements (the kernel's
    loads and conversions set the pace), with the type's own work in place of fp32's."""
    floors = {**prefetched().floors, ("int8", 256, 1): 9.0, ("int8", 32, 1): 3.0}
    cal = prefetched(floors=floors)
    ws = np.array([float(G)])
    row = 256 + 8                                       # int8 of dim 256, scale and bias
    fp32_of_256 = cal.lookup_ns(1024, "fp32", 256, 1, ws)[0]
    assert cal.lookup_ns(row, "int8", 256, 1, ws)[0] == pytest.approx(fp32_of_256 - 2.0 + 9.0)
    # a type never measured: its work charged as fp32's (of its row's bytes)
    assert cal.lookup_ns(264, "bf16", 132, 1, ws)[0] == pytest.approx(
        cal.lookup_ns(528, "fp32", 132, 1, ws)[0])
    # and without the prefetched gathers, the floor by type too
    plain = dataclasses.replace(cal, prefetched={})
    assert plain.floor_ns(row, "int8", 256, 1) > plain.floor_ns(row, "fp32", 66, 1) + 6.0


def test_a_slower_tier_stretches_what_memory_adds_not_the_kernels_work():
    cal = prefetched()
    slow = calibration.profile_tier(cal, "cxl-asic", 1)
    lat = calibration.profiles()["cxl-asic"]["latency"]
    cached, far = np.array([16.0 * K]), np.array([float(G)])
    assert slow.lookup_ns(64, "fp32", 16, 1, cached)[0] == pytest.approx(
        cal.lookup_ns(64, "fp32", 16, 1, cached)[0])
    fast_far = cal.lookup_ns(64, "fp32", 16, 1, far)[0]
    assert slow.lookup_ns(64, "fp32", 16, 1, far)[0] == pytest.approx(
        2.0 + (fast_far - 2.0) * lat, rel=1e-6)


# --- a streaming kernel's own work ------------------------------------------------------------

def test_an_optimizer_steps_own_work_bounds_it_however_fast_its_streams():
    cal = synthetic()
    d = optimizer.step_demand(1 << 20, "mixed")
    assert d.kernel == "adam-mixed"
    streams = model.predict_ns(d, (cal, cal), 1)
    slow = dataclasses.replace(cal, compute={("adam-mixed", 1): 2 * streams / d.units})
    assert model.predict_ns(d, (slow, slow), 1) == pytest.approx(2 * streams)
    quick = dataclasses.replace(cal, compute={("adam-mixed", 1): 0.5 * streams / d.units})
    assert model.predict_ns(d, (quick, quick), 1) == pytest.approx(streams)
    other = dataclasses.replace(cal, compute={("adam-fp32", 1): 2 * streams / d.units})
    assert model.predict_ns(d, (other, other), 1) == pytest.approx(streams)


# --- the KV-cache's last block --------------------------------------------------------------

def kv_params(**over) -> dict:
    p = {k: o.default for k, o in kvcache.OPTIONS.items()}
    return {**p, "op": "decode", "preset": "custom", "layers": 2, "kv_heads": 2,
            "head_dim": 64, "block": 16, "batch": 2, "seq_len": 40, "steps": 3, **over}


def test_kv_decode_reads_a_part_filled_block_by_its_tokens():
    lay = kvcache.layout(kv_params())
    d = kvcache.demand(kv_params())
    per_seq = 2 * 2                                     # layers x K and V
    # steps of 41, 42, 43 tokens: two whole blocks and 9, 10, 11 tokens each
    assert len(d.blocks) == len(d.reuse) == 3 * 2 * per_seq * 3
    assert d.blocks.sum() == 2 * per_seq * (41 + 42 + 43) * lay.token_bytes
    assert set(d.blocks.tolist()) == {lay.block_bytes} | {n * lay.token_bytes
                                                         for n in (9, 10, 11)}
    cal = synthetic()
    whole = dataclasses.replace(d, blocks=None)
    assert model.predict_ns(d, (cal, cal), 1) < model.predict_ns(whole, (cal, cal), 1)


def test_a_block_boundary_step_has_no_part_block():
    d = kvcache.demand(kv_params(seq_len=31, steps=1))          # 32 tokens: two blocks
    assert set(d.blocks.tolist()) == {kvcache.layout(kv_params()).block_bytes}


# --- a changed job measured again -----------------------------------------------------------

def test_a_calibration_job_the_suite_changed_is_measured_again(monkeypatch):
    meta = {"cases": [{"id": "floor/000", "job": "floor",
                       "params": {"mem": "bind:0", "dim": 32, "dtype": "fp32", "threads": 1}}]}
    monkeypatch.setattr(calibration, "_read", lambda run: calibration._Read(
        pd.DataFrame(), {("floor", "bind:0")}, {}, "", meta))
    Case = collections.namedtuple("Case", "job params")
    same = [Case("floor", {"mem": "bind:0", "dim": 32, "dtype": "fp32", "threads": 1,
                           "size": 0})]       # an option added since the run: not counted
    assert calibration.jobs_of(["run"], 0, same) == {"floor"}
    fp16 = Case("floor", {"mem": "bind:0", "dim": 32, "dtype": "fp16", "threads": 1})
    assert calibration.jobs_of(["run"], 0, same + [fp16]) == set()
    assert calibration.jobs_of(["run"], 0) == {"floor"}         # no suite given: as before
