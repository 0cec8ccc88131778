"""The speeds a fleet needs, printed by pytest-benchmark (its table at the end of the run),
not asserted: a timing is this machine's, and a shared CI machine's is noise. Targets (on
the 2-core development VM): a results table of 1 M rows loads in under 2 s; a report over
100 runs of the quick suite in under 30 s."""
import json
from pathlib import Path

import pytest

from cxlbench import report, results

from .test_durability import make_run
from .test_report import _copy_run

MILLION = 1_000_000


@pytest.fixture(scope="module")
def million_rows(tmp_path_factory):
    """A real three-case run, each case's rows repeated (and its journal line's counts
    raised to match) to a million rows in all."""
    run = make_run(tmp_path_factory.mktemp("million"))
    lines = (run / "results.csv").read_text().splitlines(keepends=True)
    times = -(-MILLION // (len(lines) - 1))
    with open(run / "results.csv", "w") as f:
        f.write(lines[0])
        for _ in range(times):
            f.writelines(lines[1:])
    entries = [json.loads(x) for x in (run / "cases.jsonl").read_text().splitlines()]
    for e in entries:
        for s in e["summary"].values():
            s["n"] *= times
    (run / "cases.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    return run, times * (len(lines) - 1)


@pytest.mark.slow
def test_speed_of_loading_a_million_rows(benchmark, million_rows):
    run, rows = million_rows
    df = benchmark.pedantic(results.load, args=(run,), rounds=3, iterations=1)
    assert len(df) == rows >= MILLION
    print(f"\n{rows} rows ({(run / 'results.csv').stat().st_size / 1e6:.0f} MB) loaded in "
          f"{benchmark.stats.stats.median:.2f} s (median of 3)")


@pytest.mark.slow
def test_speed_of_a_report_over_100_runs(benchmark, tmp_path):
    root = tmp_path / "results"
    for i in range(100):
        _copy_run(root, f"node{i:03}", scale=1 + 0.001 * (i % 7))
    out = tmp_path / "out"

    def build():
        return report.build([root], out, force=True)
    html_path, _ = benchmark.pedantic(build, rounds=2, iterations=1)
    print(f"\nreport over 100 runs: {benchmark.stats.stats.median:.1f} s (median of 2), "
          f"report.html {html_path.stat().st_size / 1e6:.2f} MB")


def synthetic_run(cases: int, metrics=("bandwidth", "latency")):
    """A run in memory of `cases` cases, each with 2, 3 or 5 repetitions of each metric, as
    a fleet's results load (rows, journal): what the report's summary is timed on."""
    import numpy as np
    import pandas as pd
    from pathlib import Path
    from cxlbench.report.runs import LoadedRun
    rng = np.random.default_rng(0)
    reps = rng.choice((2, 3, 5), cases)
    case = np.tile(np.repeat(np.arange(cases), reps), len(metrics))
    ids = np.array([f"job{c % 50}/{c:06d}" for c in range(cases)], dtype=object)
    rows = pd.DataFrame({"case": ids[case], "metric": np.repeat(metrics, reps.sum()),
                         "value": rng.lognormal(3, 0.2, len(case)),
                         "job": [f"job{c % 50}" for c in case], "benchmark": "bandwidth",
                         "kernel": "read", "isa": "avx512", "cpus_used": "0-1",
                         "placement_ok": True, "verified": "ok", "unit": "GB/s"})
    journal = {i: {"status": "ok", "params": {"size": c * 4096}, "info": {}}
               for c, i in enumerate(ids)}
    return LoadedRun(Path("synthetic/vm/run"), {"run_id": "run", "machine_id": "vm"}, rows,
                     journal, "vm")


@pytest.mark.slow
def test_speed_of_summarising_a_million_rows(benchmark):
    from cxlbench.report.runs import summary
    run = synthetic_run(180_000)
    out = benchmark.pedantic(summary, args=([run],), rounds=2, iterations=1)
    assert len(out) == 360_000 and len(run.rows) >= MILLION
    assert (out["n"] >= 2).all()
    print(f"\n{len(run.rows)} rows over 180000 cases ({len(out)} case-metric groups) "
          f"summarised in {benchmark.stats.stats.median:.2f} s (median of 2)")


@pytest.mark.slow
def test_fleet_scale_script_as_readme_gives_it(tmp_path):
    """README's fleet-scale command, small: it builds the fleet, loads it from the sources
    and from the columnar copy, reports on it, and prints each figure."""
    import subprocess
    import sys
    (tmp_path / "seed").mkdir()
    seed = make_run(tmp_path / "seed")
    r = subprocess.run([sys.executable, "-m", "tests.fleet_scale", "--seed-run", str(seed),
                        "--machines", "8", "--repeat", "2", "--slow", "1", "--kinds", "2",
                        "--out", str(tmp_path / "fleet")], capture_output=True, text=True,
                       cwd=Path(__file__).parent.parent, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("fleet: 8 machines, 24 cases, ")
    assert "load from the sources" in lines[1] and "load from the columnar copy" in lines[2]
    assert lines[3].startswith("report: ") and "report.html" in lines[3]
    # two kinds of 4 machines: a page each, and one per machine
    assert ", 10 pages of " in lines[3]
    assert not (tmp_path / "fleet").exists()             # gone without --keep
