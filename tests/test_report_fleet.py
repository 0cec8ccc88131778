"""Reports over many runs (a fleet, or a machine's history): the fleet's median and range
instead of a line or bar per run, and the runs slower than the fleet by more than their
noise named. Built from copies of the committed example run."""
import io
import re

import pandas as pd
import pytest
from PIL import Image

from cxlbench import report
from cxlbench.report import fleet
from cxlbench.report import runs as runs_

from .test_report import _copy_run, _edit_meta, parse


def renumber(machine_dir):
    """A machine's matrix cases numbered from 100: the same points under other ids."""
    (run,) = machine_dir.iterdir()
    for name in ("run.json", "cases.jsonl", "results.csv"):
        f = run / name
        text = f.read_bytes().decode()
        f.write_bytes(re.sub(r"matrix/0(\d\d)", r"matrix/1\1", text).encode())


def rows(values, unit="ns", ci=0.01, label_of=lambda i: f"m{i:02}"):
    """Summary rows of one point, a run each: (median, CI half-width as a fraction)."""
    return pd.DataFrame([{"label": label_of(i), "median": v, "ci_low": v * (1 - ci),
                          "ci_high": v * (1 + ci), "unit": unit, "point": "p"}
                         for i, v in enumerate(values)])


def test_a_run_beyond_the_fence_and_its_noise_is_off_the_fleet():
    """Ten runs near 100 ns and one at 150: the one is off, 50 % slower; at GB/s the same
    numbers make it faster (a negative slower); a run as far off but with a confidence
    interval that holds the fleet's median is within its noise."""
    values = [100, 101, 99, 100.5, 99.5, 100, 102, 98, 100, 101, 150]
    off = fleet.off(rows(values), ["point"])
    assert list(off["label"]) == ["m10"] and off["slower"].iloc[0] == pytest.approx(0.5)
    assert fleet.off(rows(values, unit="GB/s"), ["point"])["slower"].iloc[0] == \
        pytest.approx(-0.5)
    assert fleet.off(rows(values, ci=0.5), ["point"]).empty       # noisy: not named
    assert fleet.off(rows([100] * 11), ["point"]).empty
    assert "m10 (+50%)" in fleet.named(off)
    assert fleet.named(fleet.off(rows(values, unit="GB/s"), ["point"])) == ""
    # a slowdown (x) is slower larger; pages or touches say nothing of speed: off, unnamed
    assert "m10 (+50%)" in fleet.named(fleet.off(rows(values, unit="x"), ["point"]))
    touches = fleet.off(rows(values, unit="touches"), ["point"])
    assert list(touches["label"]) == ["m10"] and fleet.named(touches) == ""


def test_few_runs_are_drawn_each_and_many_as_a_fleet():
    assert not fleet.many(rows([1.0] * fleet.FLEET))
    assert fleet.many(rows([1.0] * (fleet.FLEET + 1)))
    assert fleet.runs_text(["b", "a"]) == "a, b"
    assert fleet.runs_text([f"m{i:02}" for i in range(12)]) == "12 (m00 to m11)"


@pytest.fixture(scope="module")
def fleet_report(tmp_path_factory):
    """Eleven machines within 2 % of each other and one whose every value is 1.5 times
    theirs: slower at every latency, faster at every bandwidth. Each measured its own
    timer's overhead; lab-03's matrix sweep numbered its cases from 100 (as a machine of
    more nodes would number a bind:* sweep)."""
    tmp = tmp_path_factory.mktemp("fleet")
    root = tmp / "results"
    for i in range(11):
        run = _copy_run(root, f"lab-{i:02}", scale=1 + 0.002 * i)
        _edit_meta(run, lambda m: m["timer"].update(clock_overhead_ns=20.0 + i))
    _copy_run(root, "lab-slow", scale=1.5)
    renumber(root / "lab-03")
    html_path, md_path = report.build([root], tmp / "out")
    return root, html_path, md_path


def test_a_fleet_report_names_the_slow_machine_and_draws_every_figure_readably(fleet_report):
    root, html_path, md_path = fleet_report
    md = md_path.read_text()
    assert md.startswith("# cxlbench report: every-family on 12 machines (lab-00 to "
                         "lab-slow)")
    # the index: the answer in a sentence, then the slow machine linked to its page
    assert "> 12 machines of 1 kind; 1 slower than their kind's fleet at some point by " \
           "more than their noise, the slowest first: lab-slow." in md
    slow = md[md.index("## Machines slower than their kind"):md.index("## Every machine")]
    # 1.5 times a fleet whose median run is 1.01 times the example: 48 % slower
    assert re.search(r"\| \[lab-slow\]\(pages/machine-lab-slow\.md\) \| kind 1 \| \d+ \| "
                     r".* latency \| \+48% \|", slow)
    assert "lab-0" not in slow                          # none of the eleven
    out = html_path.parent
    kind = (out / "pages" / "kind-1.md").read_text()
    # one machine block for the twelve alike, not twelve, their timers measured apart
    assert "### 12 machines alike: lab-00, lab-01" in kind
    assert "its overhead measured on each machine from 20 to 30.5 ns" in kind
    # every figure small enough to read: no bar a run, no legend entry a run
    figures = list((out / "figures").glob("*.png"))
    assert figures and all(f.name.startswith("kind-1-") for f in figures)
    for f in figures:
        width, height = Image.open(io.BytesIO(f.read_bytes())).size
        assert width < 1500 and height < 1200, (f.name, width, height)
    assert "lab-slow (+48%)" in kind        # named in a figure's caption
    assert "The fleet at each point" in kind and "Medians per run" not in kind
    # a machine's every case on its own page, not twelve machines' on the kind's
    assert "Each machine's every case is on its own page" in kind
    assert ": every case (" not in kind
    assert "](../figures/kind-1-" in kind   # the page's Markdown finds its figures
    for page in [html_path, *(out / "pages").glob("*.html")]:
        parse(page)


def test_the_fleet_view_of_a_per_run_figure_is_one_row_a_point(fleet_report):
    """One row a point however each machine numbered its cases; its median the runs'
    median, its interval their range, its placement verified only where every run's was;
    the heatmap's caption says so, and names the slow machine."""
    root, *_ = fleet_report
    frame = report.summary(runs_.load_runs([root]))
    mat = frame[frame["benchmark"] == "matrix"].reset_index(drop=True)
    mat.loc[mat["label"] == "lab-05", "placement_ok"] = False
    v = fleet.view(mat)
    one = v.frame
    points = mat[mat["label"] == "lab-00"].groupby(["case", "metric"]).ngroups
    assert len(one) == points and set(one["label"]) == {"fleet of 12"}
    assert v.labels == sorted(set(mat["label"])) and "lab-slow (+48%)" in v.words
    first = mat[(mat["params"] == one["params"][0]) & (mat["metric"] == one["metric"][0])]
    assert len(first) == 12
    assert one["median"][0] == pytest.approx(first["median"].median())
    assert one["ci_high"][0] == pytest.approx(first["median"].max())
    assert not one["placement_ok"].any()
    from cxlbench.report import figures
    fig = next(figures.PLOTTERS["matrix"](mat, []))
    assert "cells hold the median of the runs' medians" in fig.caption
    assert "confidence interval of the median" not in fig.caption
    assert "Placement check FAILED" in fig.caption and "Runs: 12 (lab-00 to " in fig.caption
    few = mat[mat["label"].isin(["lab-00", "lab-slow"])]
    assert fleet.view(few).frame is few and fleet.view(few).labels is None


def test_fleet_figures_say_what_their_marks_are(fleet_report):
    root, *_ = fleet_report
    from cxlbench.report import figures
    frame = report.summary(runs_.load_runs([root]))
    chase = frame[frame["benchmark"] == "chase"].reset_index(drop=True)
    bw = frame[frame["benchmark"] == "bandwidth"].reset_index(drop=True)
    (lat, *_) = figures.figures_for("chase", chase, [])
    assert "bands: their interquartile range, whiskers: their range" in lat.caption and "Dashed: runs off the fleet" in lat.caption
    (bars, *_) = figures.figures_for("bandwidth", bw, [])
    assert "boxes: the runs' medians" in bars.caption
    for fig in (lat, bars):
        assert "confidence interval of the median" not in fig.caption
