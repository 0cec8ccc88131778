"""Per-buffer placement (issue 12, item 1): mem.<buffer> and page.<buffer> in suites and
--set, checked against the benchmark's buffers, each buffer placed and verified on its
own, and the results carrying every buffer's spec and page counts. The two-node copy runs
in the cxl guest (test_emulate) and, on a host with two memory nodes, below (numa2)."""
import json

import pytest

from cxlbench import benchmarks, results, runner, suite
from cxlbench.benchmarks import common
from cxlbench.benchmarks.common import check_placement
from cxlbench.errors import PlacementError, SuiteError
from cxlbench.topology import Topology

from .conftest import cxlbench

FAST = ["--set", "repeat=2", "--set", "warmup=0", "--set", "passes=1"]


def expand(text: str, nodes=(0, 1)):
    s = suite.Suite("t", "t.toml", text, suite.tomllib.loads(text))
    return suite.expand(s, list(nodes))


def test_dotted_quoted_and_inline_keys_are_the_same_options():
    forms = ['mem.src = "bind:1"\nmem.dst = "bind:0"',
             '"mem.src" = "bind:1"\n"mem.dst" = "bind:0"',
             'mem = { src = "bind:1", dst = "bind:0" }']
    cases = [expand(f'[j]\nbench = "bandwidth"\nkernel = "copy"\n{form}') for form in forms]
    assert all(len(c) == 1 for c in cases)
    params = [c[0].params for c in cases]
    assert params[0] == params[1] == params[2]
    assert tuple(map(str, (params[0]["mem"], params[0]["mem.src"], params[0]["mem.dst"]))) == \
        ("local", "bind:1", "bind:0")


def test_overrides_sweep_and_leave_other_suites_alone():
    cases = expand('[j]\nbench = "bandwidth"\nkernel = "copy"\nmem.dst = "bind:*"\n'
                   'page.src = ["4k", "thp"]')
    assert [(str(c.params["mem.dst"]), c.params["page.src"]) for c in cases] == \
        [("bind:0", "4k"), ("bind:0", "thp"), ("bind:1", "4k"), ("bind:1", "thp")]
    assert "mem.dst=bind:0" in cases[0].label() and "page.src=thp" in cases[1].label()
    plain = expand('[j]\nbench = "bandwidth"\nkernel = "copy"')
    assert not any("." in k for k in plain[0].params)


def test_global_overrides_apply_where_the_buffer_exists():
    cases = expand('[global]\nmem.src = "bind:1"\n[bw]\nbench = "bandwidth"\n'
                   '[lat]\nbench = "chase"\n[mx]\nbench = "matrix"\ntarget = 0\ninitiator = 0')
    by_job = {c.job: c.params for c in cases}
    assert str(by_job["bw"]["mem.src"]) == "bind:1"
    assert "mem.src" not in by_job["lat"] and "mem.src" not in by_job["mx"]
    with pytest.raises(SuiteError, match=r"\[global\]: option 'mem.nope' is not an option of "
                       "any benchmark"):
        expand('[global]\nmem.nope = "bind:1"\n[lat]\nbench = "chase"')


@pytest.mark.parametrize("job, message", [
    ('bench = "bandwidth"\nmem.table = "bind:0"',
     r"option 'mem.table': bandwidth has no buffer 'table' \(its buffers: src, dst, a, b, "
     r"c, data; mem.<buffer> places one\)"),
    ('bench = "loaded_latency"\npage.data = "thp"',
     r"loaded_latency has no buffer 'data' \(its buffers: chain, load"),
    ('bench = "matrix"\nmem.src = "bind:0"',
     r"matrix places its buffers itself \(it takes no mem, so no mem.<buffer>\)"),
    ('bench = "chase"\nmem.chain = "bind:9x"', r"option 'mem.chain': malformed placement"),
    ('bench = "chase"\npage.chain = "3m"', r"option 'page.chain': '3m' is not one of"),
    ('bench = "chase"\n"size.chain" = "1M"', r"option 'size.chain' is not an option of chase"),
])
def test_bad_buffer_options_are_refused_naming_what_exists(job, message):
    with pytest.raises(SuiteError, match=message):
        expand(f"[j]\n{job}")


def test_check_adds_up_every_buffer_on_a_node(topo):
    """two_socket_cxl's node 2 has 14746 MiB free: two 6 GiB buffers fit there, a third
    does not, whichever spec put each buffer there."""
    t = topo("two_socket_cxl")
    base = {"mem": "bind:2", "page": "4k", "size": 6 << 30}
    check_placement(base, [0], t, ("dst", "src"))
    with pytest.raises(PlacementError, match=r"18G on node 2 exceeds its free memory"):
        check_placement(base, [0], t, ("a", "b", "c"))
    split = {**base, "mem": "bind:0", "mem.b": "bind:2", "mem.c": "interleave:2"}
    with pytest.raises(PlacementError, match=r"^buffer c \(mem=interleave:2 page=4k\): 18G "
                       r"on node 2 \(with the case's other buffers there\) exceeds"):
        check_placement({**split, "mem.a": "bind:2"}, [0], t, ("a", "b", "c"))
    check_placement(split, [0], t, ("a", "b", "c"))
    # node 0's 16 free 2 MiB pages: 12 for a and b, 6 more for c do not fit
    huge = {"mem": "bind:0", "page": "2m", "size": 12 << 20, "mem.c": "preferred:0"}
    check_placement(huge, [0], t, ("a", "b"))
    with pytest.raises(PlacementError, match=r"has 16 free 2m pages, 18 needed \(with the "
                       r"case's other buffers there\)"):
        check_placement(huge, [0], t, ("a", "b", "c"))


def test_precheck_notes_an_override_the_kernel_does_not_use():
    topo = Topology.read(probe_gpus=False)
    (case,) = suite.expand_for(suite.adhoc("bandwidth", ["kernel=copy", "mem.c=bind:0",
                                                         "size=1M"]), topo)
    assert benchmarks.precheck([case], topo) == \
        ["bandwidth/000: mem.c ignored: the case places only dst, src"]


def test_copy_places_and_verifies_each_buffer_on_its_own(tmp_path):
    """On this machine's node 0, by two different specs and page sizes: each buffer's spec,
    page and counts are in the journal and the verified column; report and resume accept
    the run."""
    r = cxlbench("run", "--bench", "bandwidth", "--set", "kernel=copy", "--set", "size=4M",
                 "--set", "mem.src=bind:0", "--set", "page.src=thp", "--set", "mem.dst=local",
                 *FAST, "--json", "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    (rec,) = [x for x in json.loads(r.stdout) if x["metric"] == "bandwidth"]
    assert rec["status"] == "ok" and rec["parameters"]["mem.src"] == "bind:0"
    df = results.load(rec["run_dir"])
    assert {"mem.src", "mem.dst", "page.src"} <= set(df.columns)
    assert "page.dst" not in df.columns
    (verified,) = set(df["verified"])
    assert results.verified_counts(verified) == {"dst": {"0": 1024}, "src": {"0": 1024}}
    (entry,) = df.attrs["journal"].values()
    by_buffer = {v["buffer"]: v for v in entry["placement"]["verified"]}
    assert (by_buffer["src"]["spec"], by_buffer["src"]["page"]) == ("bind:0", "thp")
    assert (by_buffer["dst"]["spec"], by_buffer["dst"]["page"]) == ("local", "4k")
    assert by_buffer["src"]["huge"] >= 0.99 and by_buffer["dst"]["huge"] == 0.0
    run = results.Run.open(rec["run_dir"])
    runner.check_resumable(run)         # mem.src is an option, not one "gone"
    out = tmp_path / "report"
    r = cxlbench("report", rec["run_dir"], "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "mem.src=bind:0" in (out / "report.md").read_text()


def test_an_unknown_buffer_is_exit_2_naming_the_buffers(tmp_path):
    r = cxlbench("run", "--bench", "bandwidth", "--set", "kernel=copy", "--set",
                 "mem.table=bind:0", "--results-dir", str(tmp_path))
    assert r.returncode == 2 and not list(tmp_path.iterdir())
    assert r.stderr.strip() == ("error: --bench bandwidth: option 'mem.table': bandwidth has "
                                "no buffer 'table' (its buffers: src, dst, a, b, c, data; "
                                "mem.<buffer> places one)")


def test_loaded_latency_load_buffer_placed_apart(tmp_path):
    r = cxlbench("run", "--bench", "loaded_latency", "--set", "size=1M", "--set",
                 "load_size=1M", "--set", "delay=0", "--set", "loads=20000", "--set",
                 "mem.load=bind:0", "--set", "page.chain=thp", "--set", "repeat=2",
                 "--set", "warmup=0", "--json", "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)[0]
    df = results.load(rec["run_dir"])
    (entry,) = df.attrs["journal"].values()
    assert [(v["buffer"], v["spec"], v["page"]) for v in entry["placement"]["verified"]] == \
        [("chain", "local", "thp"), ("load", "bind:0", "4k")]


@pytest.mark.numa2
def test_copy_between_two_host_nodes(tmp_path):
    """On a lab machine: the source on the first node with memory, the destination on the
    second, each verified there."""
    first, second = Topology.read(probe_gpus=False).memory_nodes[:2]
    r = cxlbench("run", "--bench", "bandwidth", "--set", "kernel=copy", "--set", "size=16M",
                 "--set", f"mem.src=bind:{first}", "--set", f"mem.dst=bind:{second}", *FAST,
                 "--json", "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    df = results.load(json.loads(r.stdout)[0]["run_dir"])
    counts = results.verified_counts(df["verified"].iloc[0])
    assert counts == {"dst": {str(second): 4096}, "src": {str(first): 4096}}


def test_case_params_of_old_runs_have_no_buffer_options():
    """The runs in tests/data were made before per-buffer options: they load unchanged."""
    from pathlib import Path
    for run_json in Path(__file__).parent.glob("data/runs/*/*/run.json"):
        df = results.load(run_json.parent)
        assert not any(c.startswith(("mem.", "page.")) for c in df.columns)
        for v in set(df["verified"]):
            assert all(k.startswith("b") for k in results.verified_counts(v)), v


def test_hugetlb_buffers_are_counted_in_whole_pages(topo):
    """Node 0 of two_socket_cxl has 16 free 2 MiB pages: three buffers of 10.5 MiB take 6
    pages each, 18 in all (their bytes alone would round to 16)."""
    t = topo("two_socket_cxl")
    params = {"mem": "bind:0", "page": "2m", "size": 21 << 19}
    with pytest.raises(PlacementError, match="16 free 2m pages, 18 needed"):
        check_placement(params, [0], t, ("a", "b", "c"))
    check_placement({**params, "size": 10 << 20}, [0], t, ("a", "b", "c"))   # 15 pages


def test_loaded_latency_counts_chain_and_load_together(topo):
    from cxlbench.benchmarks import loaded_latency
    t = topo("two_socket_cxl")          # node 2: 14746 MiB free
    params = {name: opt.default for name, opt in loaded_latency.OPTIONS.items()}
    params.update(mem="bind:2", size=8 << 30, load_size=8 << 30, delay=0, cpus="0-3")
    with common.cpus_of(t):
        with pytest.raises(PlacementError, match="16G on node 2 \\(with the case's other"):
            loaded_latency.validate(params, t)
        loaded_latency.validate({**params, "load_size": 6 << 30}, t)
    assert benchmarks.get("loaded_latency").case_buffers({"delay": "idle"}) == ("chain",)


def test_case_ids_do_not_depend_on_the_order_of_lines():
    a = expand('[j]\nbench = "bandwidth"\nkernel = "copy"\nmem.src = ["bind:0", "local"]\n'
               'mem.dst = ["bind:1", "local"]')
    b = expand('[j]\nbench = "bandwidth"\nkernel = "copy"\nmem.dst = ["bind:1", "local"]\n'
               'mem.src = ["bind:0", "local"]')
    assert [c.to_dict() for c in a] == [c.to_dict() for c in b]


def test_a_case_parses_each_placement_once_per_process(monkeypatch):
    """mem and mem.src are parsed once each where the suite expands, not again by the
    pre-run check; the worker gets them as text and parses each once. check_request runs
    in both: once per spec in the parent, once per buffer in the worker."""
    import io
    import sys
    from cxlbench import memory, worker
    from cxlbench.placement import Placement
    parsed, checked = [], []
    parse, check = Placement.parse.__func__, memory.check_request

    def counting_parse(cls, text):
        parsed.append(str(text))
        return parse(cls, text)

    def counting_check(placement, *args, **kwargs):
        checked.append(str(placement))
        return check(placement, *args, **kwargs)
    monkeypatch.setattr(Placement, "parse", classmethod(counting_parse))
    monkeypatch.setattr(memory, "check_request", counting_check)
    monkeypatch.setattr(common, "check_request", counting_check)
    topo = Topology.read(probe_gpus=False)
    (case,) = suite.expand_for(suite.adhoc("bandwidth", ["kernel=copy", "size=1M", "mem=local",
                                                         "mem.src=bind:0", *FAST[1::2]]), topo)
    assert isinstance(case.params["mem.src"], Placement)
    benchmarks.precheck([case], topo)
    assert sorted(parsed) == ["bind:0", "local"] and sorted(checked) == ["bind:0", "local"]
    text = json.dumps(case.to_dict())
    assert json.loads(text)["params"]["mem.src"] == "bind:0"
    parsed.clear()
    checked.clear()
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    monkeypatch.setattr(sys, "stdout", out := io.StringIO())
    worker.main()
    assert json.loads(out.getvalue())["status"] == "ok"
    assert sorted(parsed) == ["bind:0", "local"] and sorted(checked) == ["bind:0", "local"]


def test_pingpong_tables_and_figures_key_on_the_lines_own_placement():
    from cxlbench import analysis
    import pandas as pd
    from cxlbench.report import figures
    recs = [{"benchmark": "pingpong", "status": "ok", "metric": "latency", "cpus": [0, 1],
             "median": v, "parameters": {"mem": "local", "mode": "store", **extra}}
            for v, extra in ((40.0, {}), (45.0, {"mem.line": "bind:0"}))]
    tables = analysis.pingpong_matrices(recs)
    assert sorted(t["mem"] for t in tables) == ["bind:0", "local"]
    frame = pd.DataFrame({"params": [r["parameters"] for r in recs], "cpus_used": ["0,1"] * 2})
    assert [p["mem.line"] for p in figures._params(frame)] == ["local", "bind:0"]
