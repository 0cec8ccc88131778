"""The tier model in reports: the "Model against measurement" figures, the first screen's
line of its median and worst error (the same figures as analysis.model_checks), the tiers'
source in words (measured here, firmware, an assumed profile), and predictions shown
without CI or n. Built from one real run of two embedding cases and two tiering cases on
the model engine (a few seconds), its journal then given what a calibrated machine, or
one with two memory nodes, would have recorded."""
import csv
import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from cxlbench import analysis, report, results, runner
from cxlbench.report import runs as runs_
from cxlbench.report.figures.model import pct, summary_text
from cxlbench.tiering import calibration

from .conftest import cxlbench
from .test_model_calibration import synthetic
from .test_report import parse

SUITE = """description = "the tier model in reports: for the tests"
[embedding]
bench = "embedding"
dim = 32
rows = 8192
alpha = [0.6, 1.2]
batch = 1024
repeat = 3
warmup = 0
[tiering]
bench = "tiering"
engine = "model"
policy = ["all-fast", "first-touch"]
share = 0.5
epochs = 2
"embedding.rows" = 4096
repeat = 1
warmup = 0
"""
# Each embedding case's prediction against its measured median: +10 % and -40 %.
OFF = {"embedding/000": 1.10, "embedding/001": 0.60}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """The run as this machine made it: no calibration, so no prediction recorded."""
    home = tmp_path_factory.mktemp("model-run")
    (home / "model.toml").write_text(SUITE)
    p = cxlbench("run", str(home / "model.toml"), "--results-dir", str(home / "results"),
                 cwd=home)
    assert p.returncode == 0, p.stderr
    (run,) = (home / "results").glob("*/*/run.json")
    return run.parent


def _copy(run: Path, dst: Path) -> Path:
    """A copy under dst/<machine>/<run id>, as results/ holds runs."""
    return Path(shutil.copytree(run, dst / run.parent.name / run.name))


def _edit_journal(run: Path, change) -> None:
    entries = [json.loads(x) for x in (run / "cases.jsonl").read_text().splitlines()]
    for e in entries:
        change(e)
    (run / "cases.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))


def _measured_source(run: Path) -> str:
    """A calibration's source as calibration.measured gives it: the runs it came from."""
    return f"measured: {run.parent / '20261201-000000'}"


@pytest.fixture(scope="module")
def predicted(recorded, tmp_path_factory) -> Path:
    """The run with each embedding case's prediction in its journal, as benchmarks.common.
    predict records it where the node is calibrated."""
    run = _copy(recorded, tmp_path_factory.mktemp("predicted"))

    def change(e):
        if e["case"] in OFF:
            e["info"]["model"] = {"metric": "lookups", "node": 0, "kind": "measured",
                                  "predicted": e["summary"]["lookups"]["median"] * OFF[e["case"]],
                                  "source": _measured_source(run)}
    _edit_journal(run, change)
    return run


def _assume_slow_tier(run: Path) -> None:
    """Each tiering case's tiers as benchmarks.tiering records a calibrated fast node
    beside the cxl-asic profile."""
    fast = dataclasses.replace(synthetic(), source=_measured_source(run))
    slow = calibration.profile_tier(fast, "cxl-asic", 1)
    source = "; ".join(f"{name}: {c.kind} ({c.source})"
                       for name, c in (("fast", fast), ("slow", slow)))

    def change(e):
        if e["bench"] == "tiering":
            e["info"]["tiers"].update(source=source, kinds=[fast.kind, slow.kind])
    _edit_journal(run, change)


def _real_engine(run: Path, factor: dict[str, float]) -> None:
    """The tiering cases as the real engine records them: kernel WORKLOAD:real, and the
    model's `predicted` throughput beside the measured (throughput x factor[case])."""
    with open(run / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    header = list(rows[0])
    out = []
    for r in rows:
        if r["benchmark"] == "tiering":
            r["kernel"] = r["kernel"].replace(":model", ":real")
            if r["metric"] == "throughput":
                out.append(r)
                r = {**r, "metric": "predicted",
                     "value": repr(float(r["value"]) * factor[r["case"]])}
        out.append(r)
    with open(run / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, header)
        w.writeheader()
        w.writerows(out)

    def change(e):
        if e["bench"] == "tiering":
            e["kernel"] = e["kernel"].replace(":model", ":real")
            e["info"]["engine"] = "real"
            s = e["summary"]["throughput"]
            e["summary"]["predicted"] = {**s, **{k: s[k] * factor[e["case"]]
                                                 for k in ("median", "ci_low", "ci_high")}}
    _edit_journal(run, change)


def _build(run: Path, out: Path):
    html_path, md_path = report.build([run], out)
    md = md_path.read_text()
    first_screen = md[:md.index("| label |")]       # what comes before the runs' table
    return parse(html_path), md, first_screen


def test_a_run_with_predictions_gets_the_figure_and_the_headline(predicted, tmp_path):
    page, md, first = _build(predicted, tmp_path / "out")
    assert "model" in page.figures
    assert (tmp_path / "out" / "figures" / "model.png").stat().st_size > 0
    manifest = json.loads((tmp_path / "out" / report.MANIFEST).read_text())
    assert "figures/model.png" in manifest["files"]
    assert "## Model against measurement" in md and "](figures/model.png)" in md
    # the headline's figures are analysis.model_checks' over the run's own summary
    run = results.Run.open(predicted)
    checks = analysis.model_checks(runner.summary_records(run, run.finished()))
    assert checks["worst_case"] == "embedding/001" and len(checks["rows"]) == 2
    assert f"median |error| {pct(checks['median_error'])}, worst " \
        f"{pct(checks['worst_error'])} (embedding/001" in summary_text(checks)
    assert ("Tier model against measurement: " + summary_text(checks).replace("|", "\\|")
            + "; tiers measured here (") in first
    assert pct(checks["worst_error"]) == "40 %"


def test_predictions_show_without_ci_or_n(predicted):
    loaded = runs_.load_runs([predicted])
    section = report.model.section(report.summary(loaded), loaded)
    (table,) = section[-1].blocks
    for row in table.rows:
        cells = dict(zip(table.headers, row))
        # the prediction a lone figure; the measurement with its interval and n
        assert isinstance(cells["predicted"], float) and cells["n"] == 3
        assert cells["95 % CI"].startswith("[")
    assert "predicted" in table.headers and "error" in table.headers


def test_a_run_without_predictions_has_no_model_section(recorded, tmp_path):
    page, md, first = _build(recorded, tmp_path / "out")
    assert "model" not in page.figures and "Model against measurement" not in md
    assert "Tier model" not in first
    assert not (tmp_path / "out" / "figures" / "model.png").exists()


def test_an_assumed_slow_tier_is_said_on_the_first_screen(recorded, tmp_path):
    run = _copy(recorded, tmp_path / "results")
    _assume_slow_tier(run)
    page, md, first = _build(run, tmp_path / "out")
    assert "slow tier assumed: profile cxl-asic" in first
    assert "fast tier measured here (" in first
    assert "the model engine's figures are predictions, not measurements" in first
    # and the knee curves' caption says where its tiers came from
    assert "Tiers: fast tier measured here" in md
    # the model engine's figures, in the table of every case: no CI, no n
    loaded = runs_.load_runs([run])
    frame = report.summary(loaded)
    for row in report.results_table(frame[frame["benchmark"] == "tiering"]).rows:
        assert row[5:] == ["", row[6], "", "", "predicted"]


def test_the_real_engine_against_its_prediction(recorded, tmp_path):
    run = _copy(recorded, tmp_path / "results")
    _real_engine(run, {"tiering/000": 1.05, "tiering/001": 1.25})
    page, md, first = _build(run, tmp_path / "out")
    assert "model-tiering" in page.figures and "model" not in page.figures
    assert ("Tiering model against the real engine: median \\|error\\| 15 %, worst 25 % "
            "(tiering/001) over 2 cases") in first
    # the share curve: measurement and model by fast share, a line a policy
    assert "model-tiering-shares" in page.figures
    assert "Tiering on two real tiers: measurement and model by fast share" in md
    assert "The model's median \\|error\\| 15 %, worst 25 % (tiering/001) over 2 cases" in md
    loaded = runs_.load_runs([run])
    frame = report.summary(loaded)
    rows = {(r[1], r[3]): r for r in report.results_table(frame).rows}
    assert rows["tiering/001", "predicted"][5:] == ["", "M/s", "", "", "predicted"]
    assert rows["tiering/001", "throughput"][5].startswith("[")


def test_a_comparison_does_not_test_predictions(recorded, tmp_path):
    a = _copy(recorded, tmp_path / "a")
    _real_engine(a, {"tiering/000": 1.0, "tiering/001": 1.0})
    b = _copy(recorded, tmp_path / "b")
    _real_engine(b, {"tiering/000": 2.0, "tiering/001": 2.0})
    _, _, table, _ = report.comparison(a, b)
    pred = table[table["metric"] == "predicted"]
    assert len(pred) == 2 and not pred["significant"].any()
    assert all(v.startswith("predicted: B/A 2.0") for v in pred["verdict"])


def test_another_machines_calibration_keeps_its_own_words():
    """A calibration read from another machine's run says whose it is, once (not
    "measured on another machine (measured on X ...)")."""
    from cxlbench.report.figures.model import tier_words
    src = "measured on lab7, not this machine: results/lab7/20261201-1"
    assert tier_words("measured", src, "vm") == src
    assert tier_words("measured", "measured: results/vm/R", "vm") == \
        "measured here (results/vm/R)"


def test_a_real_engines_tiers_read_as_measured_here():
    """The tiering benchmark puts the tiers' figures before their calibrations' sources:
    read past them, both tiers of this machine's own calibration are measured here (the
    report once said "fast tier measured on another machine (s 7.65 GB/s, ...")."""
    from cxlbench.report.figures.model import tiering_words
    runs = "/r/emulated-cxl/20261205-051243, /r/emulated-cxl/20261205-050806"
    source = (f"fast 128 ns 7.65 GB/s, slow 280 ns 0.0298 GB/s (fast: measured (measured: "
              f"{runs}); slow: measured (measured: {runs}))")
    words = tiering_words({"kinds": ["measured", "measured"], "source": source},
                          "emulated-cxl")
    assert words == f"fast tier measured here ({runs}), slow tier measured here ({runs})"
