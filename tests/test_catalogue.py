"""The CPU catalogue: chase knobs, random access, loaded latency, matrices, interleave
sweeps, cache-level detection, suites and their variables."""
import json

import numpy as np
import pytest

from cxlbench import analysis, native, suite
from cxlbench.benchmarks import (bandwidth, chase, interleave_sweep, loaded_latency, matrix,
                                 random_bw)

from .conftest import cxlbench


def defaults(bench, **over):
    p = {name: opt.default for name, opt in bench.OPTIONS.items()}
    p.update(over)
    return p


def test_tlb_knob_interleaves_pages():
    a = native.Allocation(1 << 20, "4k", "local")
    order = native.chase_build(a, a.size, 0, 4096, seed=3, run_lines=1)
    assert sorted(order.tolist()) == list(range(a.size // 64))       # still one cycle
    pages = order // 64
    assert len(set(pages[:256].tolist())) == 256      # one line per page, every page, then again
    order4 = native.chase_build(a, a.size, 0, 4096, seed=3, run_lines=4)
    assert len(set((order4[:4] // 64).tolist())) == 1 and order4[4] // 64 != order4[0] // 64
    for whole in (64, 1000):        # a page's lines or more: one page at a time, not random
        pages = native.chase_build(a, a.size, 0, 4096, seed=3, run_lines=whole) // 64
        assert (pages.reshape(-1, 64) == pages.reshape(-1, 64)[:, :1]).all()


def test_chase_knobs_run_and_check():
    base = defaults(chase, size=4 << 20, repeat=2, warmup=1, loads=20000)
    m = chase.run({**base, "lines_per_page": 2})
    assert m.status == "ok" and m.reps[0]["latency"] > 0
    m = chase.run({**base, "chains": 8})
    assert set(m.reps[0]) == {"latency", "parallelism"} and m.reps[0]["parallelism"] > 0


def test_distribution_percentiles_ordered_and_histogram():
    m = chase.run(defaults(chase, size=8 << 20, repeat=3, warmup=0, loads=64000, dist=True,
                           batch=16))
    for rep in m.reps:
        assert 0 < rep["p50"] <= rep["p90"]
    # 4000 batches a repetition: p99's 40 above it, and fewer, decide nothing
    assert m.info["left_out"] == ["p99", "p99.9", "p99.99"] and "p99" not in m.reps[0]
    assert m.info["percentiles"]["p90"] == 400
    hist = m.info["histogram"]
    assert sum(hist["counts"]) == 3 * m.info["batches"]
    assert hist["edges_ns"] == sorted(hist["edges_ns"])


@pytest.mark.parametrize("granularity", random_bw.GRANULARITIES)
@pytest.mark.parametrize("isa", native.ISAS)
def test_random_bw_checked_every_isa(granularity, isa):
    if not native.isa_supported(isa):
        pytest.skip(f"this CPU cannot run {isa}")
    m = random_bw.run(defaults(random_bw, granularity=granularity, isa=isa, size=3 << 20,
                               repeat=1, warmup=0, passes=2))
    assert m.status == "ok" and m.kernel == f"random_{granularity}" and m.isa == isa


def test_loaded_latency_idle_and_loaded():
    import os
    base = defaults(loaded_latency, size=4 << 20, load_size=8 << 20, repeat=2, warmup=0,
                    loads=20000)
    idle = loaded_latency.run({**base, "delay": "idle"})
    assert idle.status == "ok" and set(idle.reps[0]) == {"latency"}     # no load to report
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: no room for a load generator")
    for mix in native.LOAD_MODES:
        loaded = loaded_latency.run({**base, "delay": 0, "mix": mix})
        assert loaded.status == "ok" and loaded.reps[0]["bandwidth"] > 0, mix
        assert loaded.info["generators"] >= 1


def test_loaded_latency_sweep_expands():
    (*_, last) = cases = suite.expand(suite.adhoc("loaded_latency", ["mix=all"]), [0])
    assert len(cases) == len(native.LOAD_MODES) * len(loaded_latency.DELAYS)
    assert cases[0].params["delay"] == "idle" and last.params["delay"] == 0


def test_matrix_expands_on_two_socket_fixture(topo):
    t = topo("two_socket_cxl")
    cpu_nodes = [n.id for n in t.nodes if n.cpus]
    cases = suite.expand(suite.adhoc("matrix", ["measure=all"]), t.memory_nodes, cpu_nodes)
    cells = {(c.params["measure"], c.params["initiator"], c.params["target"]) for c in cases}
    assert cells == {(m, i, j) for m in ("latency", "bandwidth") for i in (0, 1)
                     for j in (0, 1, 2)}
    bench, p = matrix._delegate({**cases[0].params, "initiator": 1, "target": 2}, t)
    assert p["cpus"] == "4-7" and str(p["mem"]) == "bind:2"
    bench, p = matrix._delegate({**cases[0].params, "measure": "bandwidth", "initiator": 0,
                                 "target": 2}, t)
    assert bench is bandwidth and p["kernel"] == "read" and p["threads"] == "all"


def test_matrix_refuses_cpu_less_initiator(topo):
    from cxlbench.errors import UserError
    with pytest.raises(UserError, match="initiator node 2 has no CPUs"):
        matrix._delegate(defaults(matrix, initiator=2, target=0), topo("two_socket_cxl"))


def test_interleave_sweep_placements(topo):
    t = topo("two_socket_cxl")
    cases = suite.expand(suite.adhoc("interleave_sweep", ["nodes=0,2"]), t.memory_nodes)
    assert len(cases) == 8 * 4
    specs = {}
    for c in cases:
        bench, p = interleave_sweep._delegate(c.params, t)
        specs[(c.params["ratio"], c.params["measure"])] = (bench.NAME, str(p["mem"]),
                                                           p.get("kernel"))
    assert specs[("1:0", "read")] == ("bandwidth", "bind:0", "read")
    assert specs[("9:1", "triad")] == ("bandwidth", "weighted:0=9,2=1", "triad")
    assert specs[("1:2", "latency")] == ("chase", "weighted:0=1,2=2", None)
    assert specs[("0:1", "loaded")] == ("loaded_latency", "bind:2", None)
    # on one node every ratio is that node
    assert str(interleave_sweep.placement("3:1", 0, 0)) == "bind:0"


def test_matrix_and_sweep_run_on_this_machine(tmp_path):
    r = cxlbench("run", "--bench", "matrix", "--set", "measure=all", "--set", "size=8M",
                 "--set", "repeat=2", "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "latency matrix (ns)" in r.stdout and "bandwidth matrix (GB/s)" in r.stdout
    r = cxlbench("run", "--bench", "interleave_sweep", "--set", "measure=read",
                 "--set", "size=8M", "--set", "repeat=1", "--set", "warmup=0", "--json",
                 "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    recs = json.loads(r.stdout)
    assert len(recs) == 8 and all(x["status"] == "ok" for x in recs)


def test_cache_levels_sharp_and_gradual():
    pts = [(16 << 10, 1.1), (32 << 10, 1.15), (64 << 10, 3.9), (128 << 10, 3.9),
           (256 << 10, 3.95), (512 << 10, 5.0), (1 << 20, 9.0), (2 << 20, 13.5),
           (4 << 20, 14.0), (8 << 20, 90.0), (16 << 20, 93.0)]
    levels = analysis.cache_levels(pts)
    assert [lv["capacity"] for lv in levels][0] == 32 << 10          # sharp: last that fit
    assert 700 << 10 < levels[1]["capacity"] < 900 << 10            # gradual: interpolated
    assert levels[2]["capacity"] == 4 << 20
    rows = analysis.compare_with_sysfs(levels, [
        {"level": 1, "type": "Data", "size": 32 << 10},
        {"level": 1, "type": "Instruction", "size": 32 << 10},
        {"level": 2, "type": "Unified", "size": 1 << 20}])
    assert [r["level"] for r in rows] == ["L1", "L2", "L3"]
    assert rows[0]["ratio"] == 1.0 and "sysfs" not in rows[2]



def test_suite_variables(tmp_path):
    p = tmp_path / "v.toml"
    p.write_text('[vars]\nnode = 0\n[j]\nbench = "chase"\nmem = "bind:${node}"\n'
                 'size = "${sz}"\n')
    with pytest.raises(Exception, match=r"\$\{sz\} is not declared"):
        suite.load(str(p))
    p.write_text('[vars]\nnode = 0\nsz = "64K"\n[j]\nbench = "chase"\nmem = "bind:${node}"\n'
                 'size = "${sz}"\n')
    (case,) = suite.expand(suite.load(str(p), {"node": "2"}), [0, 2])
    assert str(case.params["mem"]) == "bind:2" and case.params["size"] == 64 << 10
    with pytest.raises(Exception, match="declares no such variable"):
        suite.load(str(p), {"nodes": "1"})


@pytest.mark.parametrize("sets,message", [
    (["--bench", "chase", "--set", "chains=17"], "17 is above the maximum 16"),
    (["--bench", "chase", "--set", "dist=maybe"], "'maybe' is not true or false"),
    (["--bench", "chase", "--set", "dist=true", "--set", "chains=2"], "do not mix"),
    (["--bench", "random_bw", "--set", "granularity=128"], "not one of 64, 256, 4096"),
    (["--bench", "loaded_latency", "--set", "mix=sometimes"], "is not one of read"),
    (["--bench", "loaded_latency", "--set", "delay=-1"], "below the minimum 0"),
    (["--bench", "interleave_sweep", "--set", "ratio=5:1"], "'5:1' is not one of"),
    (["--bench", "matrix", "--set", "target=9"], "node 9 does not exist"),
    (["--bench", "bandwidth", "--set", "kernel=scan"], "'scan' is not one of read"),
])
def test_option_errors_are_clear(tmp_path, sets, message):
    r = cxlbench("run", *sets, "--results-dir", str(tmp_path))
    assert r.returncode == 2, r.stdout
    assert message in r.stderr and "Traceback" not in r.stderr
