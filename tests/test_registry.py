"""The benchmark registry (issue 12, item 5): one record per benchmark, its skip filter
listed as 'unsupported' with the reason, and the report's titles and figures from it."""
from __future__ import annotations

from dataclasses import replace

from click.testing import CliRunner

from cxlbench import benchmarks, runner
from cxlbench.benchmarks import Benchmark, common, interleave_sweep, matrix, random_bw
from cxlbench.cli import main
from cxlbench.report import figures
from cxlbench.suite import Case
from cxlbench.topology import Topology


def test_every_record_is_whole():
    for name, b in benchmarks._ALL.items():
        assert isinstance(b, Benchmark) and b.name == name == b.NAME
        assert b.OPTIONS is b.options and b.description and b.title
        assert isinstance(b.buffers, tuple)
        assert b.figures is None or callable(getattr(figures, b.figures))
    assert benchmarks.family("chase").title == "Idle latency"
    assert benchmarks.family("nonesuch") is None


def test_delegating_benchmarks_share_one_helper():
    for m in (matrix, interleave_sweep, random_bw):
        assert m.check.__qualname__ == "delegated.<locals>.check"
        assert m.run.__qualname__ == "delegated.<locals>.run"
        assert m.run.__module__ == common.__name__


def test_list_shows_buffers():
    out = CliRunner().invoke(main, ["list"])
    assert out.exit_code == 0, out.output
    assert "buffers: a, b, c" in out.output and "buffers: chain, load" in out.output


def _two_nodes(params, topology):
    if len(topology.memory_nodes) < 2 and params["from"] != params["to"]:
        return "needs two memory nodes"
    return None


def test_skip_lists_the_case_unsupported(monkeypatch):
    failing = replace(benchmarks._ALL["migrate"], skip=_two_nodes,
                      check=lambda p, t: (_ for _ in ()).throw(AssertionError("checked")))
    monkeypatch.setitem(benchmarks._ALL, "migrate", failing)
    topo = Topology.read(probe_gpus=False)
    monkeypatch.setattr(type(topo), "memory_nodes", property(lambda self: [0]))
    monkeypatch.setattr(Topology, "read", classmethod(lambda cls, **kw: topo))
    params = {"from": 0, "to": 1}
    notes = benchmarks.precheck([Case("c1", "job", "migrate", params)], topo)
    assert notes == ["c1: skipped: needs two memory nodes"]
    m = benchmarks.get("migrate").run(params)
    assert (m.status, m.error) == ("unsupported", "needs two memory nodes")
    entry = runner.journal_entry(Case("c1", "job", "migrate", params), m.to_dict(), 0.1)
    assert runner.describe(entry) == "UNSUPPORTED: needs two memory nodes"
