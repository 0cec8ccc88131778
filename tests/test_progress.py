"""What `cxlbench run` says while it runs: SI-prefixed figures, each job's title and each
case's varying parameters, how long is left, and how busy the machine was."""
import pytest

from cxlbench import results, runner, suite, system

from cxlbench.benchmarks import loaded_latency
from cxlbench.results import Run, columns_for
from cxlbench.units import quantity, quantity_range, significant



@pytest.mark.parametrize("value,unit,text", [
    (10550, "us", "10.6 ms"), (0.293, "us", "293 ns"), (42.0, "us", "42.0 µs"),
    (2500, "ms", "2.50 s"), (89.44, "ns", "89.4 ns"), (999.7, "ns", "1.00 µs"),
    (3479, "tok/s", "3.48 k tok/s"), (21100, "tok/s", "21.1 k tok/s"),
    (116.4, "M/s", "116 M/s"), (0.5, "M/s", "0.500 M/s"), (1234, "M/s", "1.23 G/s"),
    (12.5, "Mops/s", "12.5 Mops/s"), (15.42, "GB/s", "15.4 GB/s"),
    (0.0123, "GB/s", "12.3 MB/s"), (0, "GB/s", "0 GB/s"), (1830, "MB", "1.83 GB"),
    (251000, "pages/s", "251 k pages/s"), (12345, "touches", "12.3 k touches"),
    (7.8, "loads", "7.80 loads"), (612, "cycles", "612 cycles"), (3, "pages", "3.00 pages"),
    (0.9234, "ratio", "0.923"), (1.234, "x", "1.23x"), (12.34, "%", "12.3%"),
    (0.998, "jain", "0.998 jain"), (12345, "widgets", "12300 widgets"),
])
def test_quantity_reads_as_people_write_it(value, unit, text):
    assert quantity(value, unit) == text


def test_three_significant_figures_without_exponents():
    assert [significant(v) for v in (12345, 0.0012345, 9.996, 1.0, -5)] == \
        ["12300", "0.00123", "10.0", "1.00", "-5.00"]


def test_a_range_takes_the_prefix_of_what_it_bounds():
    assert quantity_range(10200, 11000, "us", like=10550) == "[10.2, 11.0] ms"
    assert quantity_range(980, 1020, "ns", like=1001) == "[0.980, 1.02] µs"
    assert quantity_range(3400, 3500, "tok/s") == "[3.40, 3.50] k tok/s"
    assert quantity_range(1.2, 1.3, "x") == "[1.20, 1.30]x"


def test_describe_prefixes_the_median_and_its_interval_alike():
    entry = {"status": "ok", "seconds": 1.24, "summary": {"time": {
        "unit": "us", "median": 10550.0, "ci_low": 10200.0, "ci_high": 11000.0,
        "cv": 0.012, "n": 5, "noisy": False}}}
    assert runner.describe(entry) == "time 10.6 ms [10.2, 11.0] cv 1.2% n=5  (1.2 s)"


SUITE = {"lat": {"bench": "chase", "size": ["64K", "1M"], "page": ["4k", "thp"],
                 "repeat": 2},
         "one": {"bench": "chase", "size": "128K", "page": "thp", "repeat": 2}}


def cases() -> list[suite.Case]:
    return suite.expand(suite.Suite("t", "--bench", "", SUITE), [0])


def test_labels_name_what_varies_in_the_job_defaults_too():
    labels = runner.case_labels(cases())
    # page=4k is chase's default: Case.label() leaves it out, yet it tells lat/000 apart
    assert labels["lat/000"] == "page=4k size=64K" and "page" not in cases()[0].label()
    assert labels["lat/003"] == "page=thp size=1M"
    assert labels["one/000"] == ""                  # a job of one case: nothing varies


def test_a_job_title_names_what_its_cases_share():
    by_job = {"lat": cases()[:4], "one": cases()[4:]}
    assert runner.job_title("lat", by_job["lat"]) == "lat: chase, mem=local"
    assert runner.job_title("one", by_job["one"]) == "one: chase, size=128K mem=local page=thp"


def test_the_estimate_uses_the_job_mean_else_the_run_mean():
    took = {"a": [10.0, 20.0], "b": [40.0]}
    assert runner.seconds_left({"a": 2, "c": 1}, took) == pytest.approx(2 * 15 + 70 / 3)
    assert runner.seconds_left({"a": 3}, {}) is None


@pytest.mark.parametrize("seconds,text", [
    (1, "a few seconds left"), (38, "about 40 s left"), (130, "about 2 min left"),
    (3580, "about 1 h left"), (4800, "about 1 h 20 min left")])
def test_the_estimate_in_words(seconds, text):
    assert runner.eta_text(seconds) == text


def fake_proc(tmp_path, load1: float, busy: float = 0.0):
    """Readings of a /proc whose load average is load1, and in which other work took
    `busy` of the CPU time (a static /proc/stat has no time between two reads)."""
    (tmp_path / "loadavg").write_text(f"{load1} 0.5 0.5 1/100 42\n")
    (tmp_path / "stat").write_text("cpu  100 0 50 1000 0 0 0 0 0 0\n")
    return lambda: {**system.load(proc_root=tmp_path, interval=0), "busy": busy,
                    "steal": 0.0}


def new_run(tmp_path, cs: list[suite.Case]) -> Run:
    params = {name for c in cs for name in c.params}
    return Run.create(tmp_path / "results", {"columns": columns_for(params),
                                             "cases": [c.to_dict() for c in cs]})


def test_the_load_is_recorded_at_both_ends_and_a_busy_machine_said(tmp_path):
    run, said = new_run(tmp_path, []), []
    busy = fake_proc(tmp_path, 1000.0, 0.6)
    runner.execute(run, said.append, read_load=busy)
    runner.execute(run, said.append, read_load=busy)        # a resume appends its own
    load = results.read_meta(run.path)["load"]
    assert [r["at"] for r in load] == ["start", "end", "start", "end"]
    assert all(r["load1"] == 1000.0 and r["busy"] == 0.6 and r["when"] for r in load)
    line = runner.busy_text(run)
    assert line == ("machine busy: other work on 60% of the CPU time at the start; other "
                    "work on 60% of the CPU time at the end; figures may be noisier than "
                    "this machine is")
    assert not any(s.startswith("machine busy") for s in said)     # the summary says it


def test_the_summary_flags_a_busy_run(tmp_path, monkeypatch):
    """`cxlbench run` prints busy_text's line below its summary table."""
    from click.testing import CliRunner
    from cxlbench.cli import main

    monkeypatch.setattr(runner, "busy_text", lambda run: "machine busy: load average 9.00 "
                        "on 2 CPUs at the start; figures may be noisier than this machine is")
    r = CliRunner().invoke(main, ["run", "--bench", "chase", "--set", "size=64K", "--set",
                                  "repeat=1", "--set", "loads=2000", "--results-dir",
                                  str(tmp_path)])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines.index("machine busy: load average 9.00 on 2 CPUs at the start; figures may "
                       "be noisier than this machine is") < lines.index("HEADLINE")


def test_a_quiet_machine_is_not_flagged(tmp_path):
    """...whatever its load average: at a run's end that counts the run's own work."""
    run, said = new_run(tmp_path, []), []
    runner.execute(run, said.append, read_load=fake_proc(tmp_path, 50.0))
    assert runner.busy_text(run) is None and said == []
    assert runner.busy_text(new_run(tmp_path, [])) is None      # no readings at all


def test_progress_names_each_job_each_case_and_what_is_left(tmp_path, monkeypatch):
    cs = cases()
    run, said = new_run(tmp_path, cs), []

    def worker(case, tick=None, workers=None):
        return {"status": "ok", "kernel": "chase", "isa": "scalar", "cpus": [0],
                "units": {"latency": "ns"}, "reps": [{"latency": 80.0}, {"latency": 90.0}]}
    monkeypatch.setattr(runner, "run_worker", worker)
    runner.execute(run, said.append, read_load=fake_proc(tmp_path, 0.0))
    assert said[0] == "lat: chase, mem=local"
    assert said[1] == "[1/5] lat/000 page=4k size=64K ..."
    assert said[2].startswith("    latency 85.0 ns [") and said[2].endswith(" left")
    assert said[9] == "one: chase, size=128K mem=local page=thp"
    assert said[10] == "[5/5] one/000 ..."
    assert " left" not in said[11]                  # the last case: nothing is left
    assert len(said) == 12 and len(run.finished()) == 5


def test_a_resume_titles_the_job_it_starts_in(tmp_path, monkeypatch):
    cs = cases()
    run, said = new_run(tmp_path, cs), []
    monkeypatch.setattr(runner, "run_worker", lambda case, tick=None, workers=None: {
        "status": "ok", "units": {"latency": "ns"}, "reps": [{"latency": 80.0}]})
    for c in cs[:2]:
        run.append(c.id, [], runner.journal_entry(c, {"status": "ok"}, 30.0))
    runner.execute(run, said.append, read_load=fake_proc(tmp_path, 0.0))
    assert said[:3] == ["resuming " + str(run.path) + ": 2 of 5 cases already finished",
                        "lat: chase, mem=local", "[3/5] lat/002 page=4k size=1M ..."]
    # lat's mean of 30 s, 30 s and a moment, for lat/003 and (no timing of its own) one/000
    assert said[3].endswith("; about 40 s left")


def test_idle_loaded_latency_reports_no_bandwidth():
    params = {name: opt.default for name, opt in loaded_latency.OPTIONS.items()}
    params.update(size=4 << 20, load_size=8 << 20, repeat=2, warmup=0, loads=20000,
                  delay="idle")
    m = loaded_latency.run(params)
    assert m.status == "ok" and m.units == {"latency": "ns"}
    assert all(set(rep) == {"latency"} and rep["latency"] > 0 for rep in m.reps)
    assert m.info["generators"] == 0
