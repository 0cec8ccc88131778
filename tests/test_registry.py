"""The benchmark registry (issue 12, item 5): one record per benchmark, its skip filter
listed as 'unsupported' with the reason, and the report's titles and figures from it."""
from __future__ import annotations

from dataclasses import replace

import pytest
from click.testing import CliRunner

from cxlbench import benchmarks, runner
from cxlbench.benchmarks import Benchmark, common, interleave_sweep, matrix, random_bw
from cxlbench.cli import main
from cxlbench.errors import UserError
from cxlbench.report import figures
from cxlbench.suite import Case
from cxlbench.topology import Topology


def test_every_record_is_whole():
    for name, b in benchmarks._ALL.items():
        assert isinstance(b, Benchmark) and b.name == name
        assert b.options and b.description and b.title
        assert isinstance(b.buffer_names(), tuple)
    # Every plotter is a registered family's; selftest has none (the generic bars).
    assert set(figures.PLOTTERS) <= set(benchmarks._ALL) - {"selftest"}
    assert benchmarks.family("chase").title == "Idle latency"
    assert benchmarks.family("nonesuch") is None


def test_delegating_benchmarks_share_one_helper():
    for m in (matrix, interleave_sweep, random_bw):
        assert m.validate.__qualname__ == "cases_of_another.<locals>.validate"
        assert m.run.__qualname__ == "cases_of_another.<locals>.run"
        assert m.run.__module__ == common.__name__


def test_list_shows_buffers():
    def listed(name):
        out = CliRunner().invoke(main, ["list", name])
        assert out.exit_code == 0, out.output
        return " ".join(out.output.split())         # as read, whatever the wrapping
    assert "buffers: src, dst, a, b, c, data (mem.<buffer>" in listed("bandwidth")
    assert "buffers: chain, load (mem.<buffer>" in listed("loaded_latency")
    assert "buffers: chain, src (placed by the benchmark)" in listed("matrix")
    assert "kernel copy_nt (benchmark bandwidth) dst[i] = src[i], non-temporal stores read " \
        "8 B, written 8 B per 8 B step; buffers dst, src" in listed("copy_nt")


def test_skip_lists_the_case_unsupported(monkeypatch):
    """migrate's filter: a move on a one-node machine is skipped with the reason (listed,
    noted, the case 'unsupported'); from = to, the baseline, runs there."""
    checked = replace(benchmarks._ALL["migrate"],
                      validate=lambda p, t: (_ for _ in ()).throw(AssertionError("checked")))
    monkeypatch.setitem(benchmarks._ALL, "migrate", checked)
    topo = Topology.read(probe_gpus=False)
    monkeypatch.setattr(type(topo), "memory_nodes", property(lambda self: [0]))
    monkeypatch.setattr(Topology, "read", classmethod(lambda cls, **kw: topo))
    params = {"from": 0, "to": 1}
    why = ("moving pages needs two nodes with memory, this machine has one (node 0); "
           "from = to measures the no-move baseline")
    notes = benchmarks.precheck([Case("c1", "job", "migrate", params)], topo)
    assert notes == [f"c1: skipped: {why}"]
    m = benchmarks.get("migrate").run(params)
    assert (m.status, m.error) == ("unsupported", why)
    entry = runner.journal_entry(Case("c1", "job", "migrate", params), m.to_dict(), 0.1)
    assert runner.describe(entry) == f"UNSUPPORTED: {why}"
    assert benchmarks.get("migrate_touch").skip(params, topo) == why
    assert benchmarks.get("migrate").skip({"from": 0, "to": 0}, topo) is None
    out = CliRunner().invoke(main, ["list", "migrate"])
    assert f"skipped here with its defaults: {why}" in " ".join(out.output.split())


def test_two_node_machine_runs_the_move_and_refuses_a_missing_node(topo):
    two = topo("two_socket_cxl")
    migrate = benchmarks.get("migrate")
    assert migrate.skip({"from": 0, "to": 2}, two) is None
    params = {name: opt.default for name, opt in migrate.options.items()}
    with pytest.raises(UserError, match="node 5 does not exist"):
        benchmarks.precheck([Case("c1", "job", "migrate", {**params, "to": 5})], two)
