"""`cxlbench plan`'s placement and predicted times: parts placed on DRAM first by the time a
byte loses on the slow tier, bytes conserved, each work's prediction against the tier
model's own arithmetic and the workloads' own demands, and the plan's words."""
import json
import math
import re

import numpy as np
import pytest

from cxlbench.errors import UserError
from cxlbench.plan import check, place, tiers, timing
from cxlbench.plan import job as plan_job
from cxlbench.plan.text import as_dict, render
from cxlbench.tiering import calibration, model
from cxlbench.topology import Topology
from cxlbench.workloads import kvcache, optimizer

from .conftest import REPO, cxlbench
from .test_model_calibration import synthetic

GIB = 1 << 30


def machine(dram=10 * GIB, slow=math.inf, calibrated=True, gpu=None) -> tiers.Machine:
    fast = synthetic() if calibrated else None
    slow_cal = calibration.profile_tier(fast, "cxl-asic", None) if calibrated else None
    return tiers.Machine(gpu, "test", (tiers.Tier("DRAM", (0,), dram, "test", fast),
                                       tiers.Tier("slow", (), slow, "test", slow_cal)), 2)


def offload(**kw):
    return plan_job.make("llama-3-8b", zero=2, dp=8, offload="optimizer", **kw)


def test_dram_fills_first_and_no_byte_is_lost():
    p = place.plan(offload(), machine())
    host = [x for x in p.placed if x.part.where == "host"]
    assert sum(x.fast for x in host) == pytest.approx(10 * GIB)
    for x in host:
        assert x.fast + x.slow == x.total == x.part.bytes * 8      # 8 ranks a host
    # touched once a checkpoint: last, so all of it on the slow tier
    staging = next(x for x in host if x.part.name == "checkpoint staging")
    assert staging.fast == 0 and "all on the slow tier" in staging.reason
    assert p.host("short") == 0
    assert p.host("DRAM") + p.host("slow") == sum(x.total for x in host)


def test_a_bounded_slow_tier_says_what_fit_nowhere():
    p = place.plan(offload(), machine(slow=100 * GIB))
    host_total = sum(x.total for x in p.placed if x.part.where == "host")
    assert p.host("DRAM") == pytest.approx(10 * GIB)
    assert p.host("slow") == pytest.approx(100 * GIB)       # what it holds, no more
    assert p.host("short") == pytest.approx(host_total - 110 * GIB)
    for x in p.placed:
        if x.part.where == "host":
            assert x.fast + x.slow + x.short == x.total
    text = render(p)
    assert f"Host: {host_total / GIB:.1f} GiB" in text and "fit nowhere" in text
    data = as_dict(p)
    assert data["host"]["slow"] == pytest.approx(100 * GIB)
    assert sum(x["short"] for x in data["parts"]) == pytest.approx(data["host"]["short"])


def test_the_part_losing_most_a_byte_goes_to_dram_first():
    """A job with offloaded optimizer state and embedding tables: the part whose bytes
    lose the most predicted time on the slow tier gets DRAM first, the other what is left,
    and the staging copy (once a checkpoint) is last."""
    job = plan_job.make("llama-3-8b", zero=2, dp=8, offload="optimizer",
                        tables=(50_000_000,) * 4, table_dim=128, pooling=(20,) * 4,
                        micro_batch=4)
    m = machine(dram=40 * GIB)
    p = place.plan(job, m)
    host = sorted((x for x in p.placed if x.part.where == "host"), key=lambda x: x.order)
    loss = {t.work.parts: (t.slow_ns - t.fast_ns) for t in p.timed}
    def per_byte(x):
        ((parts, ns),) = [(k, v) for k, v in loss.items() if x.part.name in k]
        return ns / sum(y.total for y in host if y.part.name in parts)
    steps = [x for x in host if x.part.name != "checkpoint staging"]
    assert [per_byte(x) for x in steps] == sorted((per_byte(x) for x in steps), reverse=True)
    assert host[-1].part.name == "checkpoint staging"
    first = host[0]
    assert first.fast == min(first.total, 40 * GIB)     # the first takes DRAM whole


def test_serving_kv_cache_splits_and_costs_between_the_tiers():
    job = plan_job.make("llama-3-8b", train=False, context=8192, micro_batch=8, offload="kv")
    p = place.plan(job, machine(dram=GIB))
    kv = next(x for x in p.placed if x.part.name == "KV-cache")
    assert kv.fast == GIB and "interleaved" in kv.reason
    timed = p.timed[0]
    assert timed.fast_ns < timed.ns < timed.slow_ns
    assert p.step_slow == pytest.approx(kv.slow / kv.total)


def test_optimizer_work_is_the_workloads_own_step():
    """The CPU step over fp32 master and gradients moves what the optimizer workload's
    fp32 step moves (28 B a parameter, in place), and predicts what the model does."""
    job = offload()
    p = place.plan(job, machine(dram=1e15))
    work = next(t for t in p.timed if t.work.name == "optimizer step (CPU)")
    n = next(x for x in p.placed if x.part.name == "optimizer moments").total // 8
    d, fast, scale = work.work.demand(1.0)
    ref = optimizer.step_demand(n, "fp32")
    assert (d.read, d.write, d.in_place) == (ref.read, ref.write, True)
    cal = synthetic()
    assert work.fast_ns == pytest.approx(model.predict_ns(ref, (cal, cal), 2))
    assert work.ns == work.fast_ns             # all of it in DRAM
    one, limit = cal.stream_rates(ref.read, ref.write, False, True)
    assert work.fast_ns == pytest.approx(max(ref.read / one / 2, (ref.read + ref.write) / limit))


@pytest.mark.parametrize("shared", [0.0, 0.9])
def test_kv_decode_work_is_the_kvcache_workloads_demand(shared):
    """A decode step over the host's cache charges what the kvcache workload's cold decode
    does for the same shape: every block of every sequence from memory (a shared prefix's
    blocks once a sequence), the new tokens written."""
    job = plan_job.make("llama-3-8b", train=False, context=4096, micro_batch=2, offload="kv",
                        prefix_shared=shared)
    p = place.plan(job, machine(dram=1e15))
    (work,) = p.timed
    params = {k: o.default for k, o in kvcache.OPTIONS.items()}
    # one step from 4095 tokens reads the blocks of 4096, as the plan's cache holds
    ref = kvcache.demand({**params, "op": "decode", "preset": "custom", "layers": 32,
                          "kv_heads": 8, "head_dim": 128, "block": 16, "batch": 2,
                          "seq_len": 4096 - 1, "steps": 1, "cold": True})
    d, _, scale = work.work.demand(1.0)
    assert d.block == ref.block
    assert len(d.reuse) * scale == pytest.approx(len(ref.reuse), rel=1e-9)
    assert d.write * scale == pytest.approx(ref.write)
    assert np.isinf(d.reuse).all()


def test_serving_reads_once_what_training_reads_twice():
    train = place.plan(plan_job.make("dlrm-dcnv2", micro_batch=1024), machine(dram=1e15))
    serve = place.plan(plan_job.make("dlrm-dcnv2", micro_batch=1024, train=False),
                       machine(dram=1e15))
    (t,), (s_,) = train.timed, serve.timed
    dt, _, kt = t.work.demand(1.0)
    ds, _, ks = s_.work.demand(1.0)
    assert len(dt.reuse) * kt == pytest.approx(2 * len(ds.reuse) * ks)
    assert ds.write == 0 and dt.write > 0 and "read once" in s_.work.formula


def test_checkpoint_staging_is_each_ranks_share_at_every_zero_stage():
    from cxlbench.plan import footprint as fp
    P = fp.stage_params(plan_job.make("llama-3-8b"))
    for zero in range(4):
        job = plan_job.make("llama-3-8b", zero=zero, dp=8)
        staging = next(p for p in fp.footprint(job) if p.name == "checkpoint staging")
        # 2 B parameters, 4 B master, 8 B moments, each rank an eighth of them
        assert staging.bytes == pytest.approx(14 * P / 8, abs=16), zero


def test_offload_always_keeps_the_cpu_steps_weights_on_the_host():
    from cxlbench.plan import footprint as fp
    for master in ("fp32", "none"):
        job = plan_job.make("llama-3-8b", dtype="fp32", master=master, zero=2, dp=8,
                            offload="optimizer")
        parts = {p.name: p for p in fp.footprint(job)}
        assert parts["master weights"].where == "host"
        assert parts["master weights"].bytes == 4 * fp.stage_params(job) // 8


def test_predictions_scale_with_the_work_past_the_sample():
    short = place.plan(plan_job.make("llama-3-8b", train=False, context=65536, micro_batch=4,
                                     offload="kv"), machine(dram=1e15)).timed[0]
    long = place.plan(plan_job.make("llama-3-8b", train=False, context=131072, micro_batch=4,
                                    offload="kv"), machine(dram=1e15)).timed[0]
    assert long.fast_ns == pytest.approx(2 * short.fast_ns, rel=0.01)


def test_hot_share_closed_forms():
    assert timing.hot_share(0.25, 1000, 0.0) == pytest.approx(0.25)      # uniform
    assert timing.hot_share(0.1, 10 ** 6, 1.0) == pytest.approx(
        (1 + math.log(10 ** 5)) / (1 + math.log(10 ** 6)))
    skewed = timing.hot_share(0.01, 10 ** 6, 1.05)
    assert 0.6 < skewed < 1 and timing.hot_share(1.0, 10 ** 6, 1.05) == pytest.approx(1.0)


def test_embedding_tables_put_their_hottest_rows_in_dram():
    job = plan_job.make("dlrm-dcnv2", micro_batch=8192, dp=8)
    p = place.plan(job, machine(dram=10 * GIB))
    tables = next(x for x in p.placed if x.part.name == "embedding tables")
    assert tables.total == tables.part.bytes            # one set of tables a host
    look = next(t for t in p.timed if t.work.name == "embedding lookups")
    # a tenth of the bytes in DRAM holds well over a tenth of the Zipf lookups
    d, fast, _ = look.work.demand(tables.fast / tables.total)
    assert (d.pages == 0).mean() > 2 * tables.fast / tables.total
    assert look.fast_ns < look.ns < look.slow_ns


def test_the_curve_runs_from_all_dram_to_all_slow():
    p = place.plan(offload(), machine())
    steps = [t for t in p.timed if t.work.per != "checkpoint"]
    assert p.curve[0] == (0.0, pytest.approx(sum(t.fast_ns for t in steps)))
    assert p.curve[-1] == (1.0, pytest.approx(sum(t.slow_ns for t in steps)))


def test_without_a_calibration_nothing_is_timed_and_the_plan_says_so():
    p = place.plan(offload(), machine(calibrated=False))
    assert all(t.ns is None for t in p.timed) and p.curve == []
    assert "not predicted: node 0 has no calibration here" in render(p)


def test_gpu_fit_is_judged_only_against_a_known_gpu():
    job = plan_job.make("llama-3-8b", zero=3, dp=8, micro_batch=1)
    assert place.plan(job, machine(gpu=80 * GIB)).gpu_fits is True
    small = place.plan(job, machine(gpu=4 * GIB))
    assert small.gpu_fits is False and "does NOT fit" in render(small)
    assert place.plan(job, machine()).gpu_fits is None


def test_capacities_come_from_the_topology_with_their_source():
    topo = Topology.read()
    m = tiers.machine(topo, dram="64G", slow_mem="1T", gpu_mem="80G")
    assert m.host[0].capacity == 64 * GIB and m.host[1].capacity == 1024 * GIB
    assert m.gpu == 80 * GIB
    auto = tiers.machine(topo)
    node = next(n for n in topo.nodes if n.cpus)
    if not topo.far_memory_nodes:
        assert auto.host[1].capacity == math.inf and "assumed" in auto.host[1].capacity_source
    assert auto.host[0].capacity == pytest.approx(node.mem_total * (1 - tiers.RESERVE)) or \
        len([n for n in topo.nodes if n.cpus]) > 1
    with pytest.raises(UserError, match="--dram lots"):
        tiers.machine(topo, dram="lots")


def test_check_suite_holds_the_plans_work_at_a_checkable_size():
    import tomllib
    job = plan_job.make("llama-3-8b", zero=2, dp=8, offload="optimizer")
    text = check.suite_text(place.plan(job, machine()))
    data = tomllib.loads(text)
    assert data["optimizer_dram"]["params"] * 16 <= check.CHECK_BYTES
    assert data["optimizer_dram"]["mem"] == "bind:0"
    assert data["checkpoint_dram"]["size"] <= check.CHECK_BYTES
    serve = plan_job.make("llama-3-8b", train=False, context=131072, micro_batch=4,
                          offload="kv")
    kv = tomllib.loads(check.suite_text(place.plan(serve, machine())))["kvcache_dram"]
    assert kv["layers"] * 2 * 8 * 128 * 2 * kv["seq_len"] * kv["batch"] <= check.CHECK_BYTES


def test_plan_json_carries_placement_and_times():
    r = cxlbench("plan", "--model", "llama-3-8b", "--zero", "2", "--dp", "8", "--offload",
                 "optimizer", "--dram", "64G", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    host = [p for p in data["parts"] if p["where"] == "host"]
    assert sum(p["dram"] for p in host) == pytest.approx(64 * GIB)
    assert all(p["dram"] + p["slow"] == pytest.approx(p["host_bytes"]) for p in host)
    assert data["host"]["tiers"][0]["capacity_source"] == "given (--dram)"


def test_check_without_a_calibration_is_refused_with_the_way_out(tmp_path):
    r = cxlbench("plan", "--model", "llama-3-8b", "--zero", "2", "--dp", "8", "--offload",
                 "optimizer", "--check", "--results-dir", str(tmp_path))
    assert r.returncode != 0 and "cxlbench calibrate" in r.stderr
    assert not list(tmp_path.glob("*/*/run.json"))


def test_report_shows_a_plan_with_its_figures(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(as_dict(place.plan(offload(), machine()))))
    run = sorted((REPO / "tests/data/first-look/vm").glob("*/run.json"))[0].parent
    out = tmp_path / "report"
    r = cxlbench("report", str(run), "-o", str(out), "--plan", str(plan))
    assert r.returncode == 0, r.stderr
    md = (out / "report.md").read_text()
    assert "## Plan: training llama-3-8b" in md and "host gradients" in md
    assert {"plan-bytes.png", "plan-time.png"} <= {p.name for p in (out / "figures").iterdir()}
    bad = tmp_path / "bad.json"
    bad.write_text('{"parts": []}')
    r = cxlbench("report", str(run), "-o", str(tmp_path / "r2"), "--plan", str(bad))
    assert r.returncode != 0 and "not a plan" in r.stderr


def test_a_split_faster_than_all_dram_is_named():
    """Streams on both tiers at once can beat DRAM alone (the curve's dip at 20 %): the
    plan names the split and its time, the model's own for that share."""
    m = machine(dram=1e15)
    t = next(t for t in place.plan(offload(), m).timed if t.work.name.startswith("optimizer"))
    assert t.share == 1.0 and t.best is not None
    share, ns = t.best
    assert share < 1 and ns < t.ns * (1 - place.BETTER)
    assert ns == pytest.approx(t.work.ns(m, share))
    assert "both tiers' bandwidth at once" in render(place.plan(offload(), m))


# ---- evening out the pipeline's stages (issue 50) ------------------------------------------

def stage_totals(job):
    from cxlbench.plan import footprint as fp
    return [fp.gpu_bytes(fp.footprint(job, s)) for s in range(job.pp)]


def test_bpipe_pairs_even_out_by_whole_micro_batches():
    """Llama 3 8B, pp 4, 8 micro-batches: stage 0 (4 in flight, 5.1 GiB each) is 14.3 GiB
    over stage 3, so one micro-batch moves to it; stages 1 and 2 differ by less than two
    micro-batches' and stay; 8 x 1 / 3 of the step's micro-batches make the trip."""
    from cxlbench.plan import balance
    job = plan_job.make("llama-3-8b", pp=4, global_batch=8)
    now = stage_totals(job)
    a = next(p.bytes for p in balance.footprint(job, 0) if p.name == "activations") // 4
    o = balance.bpipe(job)
    assert list(o.stages_gpu) == [now[0] - a, now[1], now[2], now[3] + a]
    assert o.moved == pytest.approx(2 * a * 8 * 1 / 3)
    assert sum(o.stages_gpu) == sum(now)                # moved, not lost
    assert balance.bpipe(plan_job.make("llama-3-8b", pp=4, schedule="interleaved")) is None


def test_offload_moves_as_few_micro_batches_as_bring_the_stage_under():
    from cxlbench.plan import balance
    job = plan_job.make("llama-3-8b", pp=4, global_batch=8)
    now = stage_totals(job)
    a = next(p.bytes for p in balance.footprint(job, 0) if p.name == "activations") // 4
    gpu = 48 * GIB
    o = balance.offload(job, machine(gpu=gpu, calibrated=False))
    m = -(-(now[0] - gpu) // a)                          # 2: one would leave it over
    assert m == 2 and now[0] - (m - 1) * a > gpu >= o.stages_gpu[0] == now[0] - m * a
    assert list(o.stages_gpu[1:]) == now[1:]
    assert o.moved == pytest.approx(2 * a * 8 * m / 3)
    assert f"{o.moved / 53e9 * 1e3:.0f} ms at 53 GB/s (assumed)" in o.cost
    assert "not calibrated here" in o.cost
    # calibrated: the host takes and gives back the same bytes as a stream would, faster
    # in DRAM than on the slow tier
    timed = balance.offload(job, machine(gpu=gpu))
    ms = [float(x) for x in re.findall(r"in (\d+) ms in DRAM, (\d+) ms on the slow", timed.cost)[0]]
    want = [timing.Work("x", (), "step", "", lambda s: timing._streamed(
        o.moved / 2, o.moved / 2, s)).ns(machine(gpu=gpu), share) * 1e-6 for share in (1.0, 0.0)]
    assert ms == [round(w) for w in want] and ms[0] < ms[1]
    # without a GPU size, down to the next heaviest stage
    loose = balance.offload(job, machine(calibrated=False))
    assert max(loose.stages_gpu) <= sorted(now)[-2] + a


def test_the_plan_prints_each_way_and_whether_it_fits(tmp_path):
    out = cxlbench("plan", "--model", "llama-3-8b", "--pp", "4", "--global-batch", "8",
                   "--gpu-mem", "48G", "--results-dir", str(tmp_path)).stdout
    ways = out.split("To even the stages out (each alone):")[1].strip().splitlines()[:3]
    assert [w.split(" (")[0].strip() for w in ways] == [
        "memory-balanced split", "BPipe pairing", "activation offload to the host"]
    assert "fits in the GPU's 48.0 GiB" in ways[0] and "still over" in ways[1] and \
        "fits in the GPU's 48.0 GiB" in ways[2]
    j = json.loads(cxlbench("plan", "--model", "llama-3-8b", "--pp", "4", "--global-batch",
                            "8", "--gpu-mem", "48G", "--json", "--results-dir",
                            str(tmp_path)).stdout)
    assert [b["option"] for b in j["balance"]] == ["memory-balanced split", "BPipe pairing",
                                                   "activation offload to the host"]
