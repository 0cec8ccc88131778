"""The speeds a fleet needs, printed by pytest-benchmark (its table at the end of the run),
not asserted: a timing is this machine's, and a shared CI machine's is noise. Targets (on
the 2-core development VM): a results table of 1 M rows loads in under 2 s; a report over
100 runs of the quick suite in under 30 s."""
import json

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
