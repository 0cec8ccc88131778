"""Ping-pong, atomics, flush costs, migration baselines and vmstat deltas."""
import os

import numpy as np
import pytest

from cxlbench import native
from cxlbench.benchmarks import common, flush, migrate
from cxlbench.benchmarks.coherence import ATOMIC_MODES, Atomics, PingPong

two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")


def defaults(bench, **over):
    p = {name: opt.default for name, opt in bench.OPTIONS.items()}
    p.update(over)
    return p


@two_cpus
@pytest.mark.parametrize("mode", [0, 1])
def test_pingpong_counts_every_transfer(mode):
    a = native.Allocation(4096, "4k", "local")
    words = a.array(np.uint64)
    ns, per_thread = native.pingpong(a.addr, mode, 5000, sorted(os.sched_getaffinity(0))[:2])
    assert int(words[0]) == 2 * 5000 and ns > 0 and len(per_thread) == 2


@pytest.mark.parametrize("mode", range(len(ATOMIC_MODES)))
def test_atomic_totals(mode):
    cpus = sorted(os.sched_getaffinity(0))
    threads = (cpus * 3)[:3]                    # three threads, CPUs shared if need be
    a = native.Allocation(4096, "4k", "local")
    words = a.array(np.uint64)
    native.atomics(a.addr, mode, 20000, threads)
    assert int(words.sum()) == 3 * 20000


@two_cpus
def test_pingpong_and_atomics_benchmarks_carry_home_node():
    m = PingPong.run(defaults(PingPong, mode="cas", iterations=2000, repeat=2, mem="bind:0"))
    assert m.status == "ok" and m.placement["spec"] == "bind:0"
    assert m.placement["verified"][0]["counts"] == {"0": 1}
    m = Atomics.run(defaults(Atomics, mode="false_sharing", iterations=5000, repeat=2))
    assert m.status == "ok" and 0 < m.reps[0]["fairness"] <= 1.0


@pytest.mark.parametrize("mode", ["private", "false_sharing"])
def test_atomics_run_sizes_and_clips_for_many_cpus(monkeypatch, mode):
    """100 CPUs (this machine's, repeated): private lines need two pages, false sharing
    runs on 8 and says so in the case's record."""
    from cxlbench.benchmarks import coherence
    many = (sorted(os.sched_getaffinity(0)) * 100)[:100]
    monkeypatch.setattr(coherence, "resolve_cpus", lambda params: many)
    m = Atomics.run(defaults(Atomics, mode=mode, iterations=500, repeat=1, warmup=0))
    assert m.status == "ok", m.error
    assert m.placement["verified"][0]["counts"] == {"0": 2 if mode == "private" else 1}
    if mode == "private":
        assert m.info == {"threads": 100, "vmstat": m.info["vmstat"]}
    else:
        assert m.info["threads"] == 8 and m.cpus == many[:8]
        assert m.info["note"].startswith("false sharing fits 8 threads in a 64-byte line: "
                                         "runs 8 of the 100 CPUs")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) <= 8, reason="needs more CPUs than the "
                    "8 words of a line")
def test_atomics_on_every_cpu_clip_false_sharing_with_a_note(tmp_path):
    """threads=all on a machine of more than 8 CPUs: every mode runs (false sharing on 8
    of them, noted on stderr and in the case's record), private lines on every CPU."""
    import json
    from .conftest import cxlbench
    r = cxlbench("run", "--bench", "atomics", "--set", "mode=all", "--set", "threads=all",
                 "--set", "iterations=2000", "--set", "repeat=1", "--set", "warmup=0",
                 "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    n = len(os.sched_getaffinity(0))
    note = f"false sharing fits 8 threads in a 64-byte line: runs 8 of the {n} CPUs"
    assert f"note: atomics/003: {note} threads=all gives" in r.stderr
    (journal,) = tmp_path.glob("*/*/cases.jsonl")
    entries = {e["case"]: e for e in map(json.loads, journal.read_text().splitlines())}
    assert entries["atomics/003"]["info"]["threads"] == 8
    assert note in entries["atomics/003"]["info"]["note"]
    assert entries["atomics/002"]["info"]["threads"] == n          # private: a line each


def test_unsupported_flush_is_reported_not_replaced(monkeypatch):
    monkeypatch.setattr(native, "flush_supported", lambda kind: kind != "clwb")
    m = flush.run(defaults(flush, flush="clwb", repeat=1))
    assert m.status == "unsupported" and "clwb is not supported" in m.error and not m.reps
    assert flush.run(defaults(flush, flush="clflush", repeat=1, size=64 << 10)).status == "ok"


def test_flush_refused_in_c_when_unsupported():
    for kind in native.FLUSH_KINDS:
        a = native.Allocation(64 << 10, "4k", "local")
        if native.flush_supported(kind):
            assert native.flush(a.addr, a.size, kind, True, False, 1) > 0
        else:
            with pytest.raises(native.NativeError, match="not supported"):
                native.flush(a.addr, a.size, kind, True, False, 1)


def test_migration_baseline_on_one_node():
    m = migrate.run(defaults(migrate, **{"from": 0, "to": 0, "size": 4 << 20, "repeat": 2}))
    assert m.status == "ok" and "baseline" in m.info["note"]
    assert m.info["pages"] == 1024


def test_vmstat_deltas_recorded(monkeypatch, tmp_path):
    fake = tmp_path / "vmstat"
    fake.write_text("nr_free_pages 5\npgmigrate_success 10\nnuma_hit 100\n")
    assert common.vmstat(str(fake)) == {"pgmigrate_success": 10, "numa_hit": 100}
    counts = iter([{"pgmigrate_success": 10, "numa_hit": 100},
                   {"pgmigrate_success": 14, "numa_hit": 100}])
    monkeypatch.setattr(common, "vmstat", lambda: next(counts))
    m = common.Measurement(kernel="k", isa="scalar", cpus=[0], units={})
    common.measure(m, {"repeat": 1, "warmup": 0, "mem": "local", "page": "4k"}, [], lambda: {})
    assert m.info["vmstat"] == {"pgmigrate_success": 4}


@pytest.mark.parametrize("method", ["move_pages", "mbind"])
def test_migration_batches_and_methods(method):
    m = migrate.run(defaults(migrate, **{"from": 0, "to": 0, "size": 1 << 20, "repeat": 1,
                                         "warmup": 0, "method": method, "batch": 64}))
    assert m.status == "ok" and m.kernel == migrate.KERNELS[method]
    rep = m.reps[0]
    assert rep["pages_per_s"] > 0 and rep["page_latency"] > 0
    assert abs(rep["pages_per_s"] * rep["page_latency"] / 1e6 - 1) < 1e-6


def test_migration_batch_sweep_expands():
    from cxlbench import suite
    cases = suite.expand(suite.adhoc("migrate", ["batch=all", "method=all", "from=*",
                                                 "to=*"]), [0, 1])
    assert len(cases) == 4 * 2 * 2 * 2
    assert {c.params["batch"] for c in cases} == {1, 64, 512, 4096}


def test_pingpong_pairs_from_topology(topo):
    from cxlbench import suite
    t = topo("two_socket_cxl")
    assert t.cpu_pairs() == ["0,1", "0,4"]
    cases = suite.expand(suite.adhoc("pingpong", ["cpus=*", "mem=bind:*"]), t.memory_nodes,
                         [0, 1], t.cpu_pairs())
    assert {(c.params["cpus"], str(c.params["mem"])) for c in cases} == {
        (pair, f"bind:{n}") for pair in ("0-1", "0,4") for n in (0, 1, 2)}


def test_pingpong_table_printed(tmp_path):
    from .conftest import cxlbench
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    r = cxlbench("run", "--bench", "pingpong", "--set", "cpus=*", "--set", "iterations=2000",
                 "--set", "repeat=2", "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "ping-pong (store, line homed local), ns one way, CPU x CPU" in r.stdout


def test_pingpong_matrix_analysis():
    from cxlbench import analysis
    recs = [{"benchmark": "pingpong", "status": "ok", "metric": "latency", "median": m,
             "cpus": cpus, "parameters": {"mem": "bind:1", "mode": "cas"}}
            for cpus, m in (([0, 1], 50.0), ([0, 4], 120.0))]
    (table,) = analysis.pingpong_matrices(recs)
    cells = {(a, b): x for a, b, x in table["cells"]}
    assert table["cpus"] == [0, 1, 4] and cells[(4, 0)] == 120.0 and cells[(1, 0)] == 50.0


def test_migration_of_untouched_pages_checks_and_rests():
    m = migrate.run(defaults(migrate, **{"from": 0, "to": 0, "size": 1 << 20, "repeat": 1,
                                         "warmup": 0, "pages": "untouched", "rest": 1}))
    assert m.status == "ok" and m.reps[0]["page_latency"] > 0
