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

from .test_report import _copy_run, parse


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


def test_few_runs_are_drawn_each_and_many_as_a_fleet():
    assert not fleet.many(rows([1.0] * fleet.FLEET))
    assert fleet.many(rows([1.0] * (fleet.FLEET + 1)))
    assert fleet.runs_text(["b", "a"]) == "a, b"
    assert fleet.runs_text([f"m{i:02}" for i in range(12)]) == "12 (m00 to m11)"


@pytest.fixture(scope="module")
def fleet_report(tmp_path_factory):
    """Eleven machines within 2 % of each other and one whose every value is 1.5 times
    theirs: slower at every latency, faster at every bandwidth."""
    tmp = tmp_path_factory.mktemp("fleet")
    root = tmp / "results"
    for i in range(11):
        _copy_run(root, f"lab-{i:02}", scale=1 + 0.002 * i)
    _copy_run(root, "lab-slow", scale=1.5)
    html_path, md_path = report.build([root], tmp / "out")
    return root, html_path, md_path


def test_a_fleet_report_names_the_slow_machine_and_draws_every_figure_readably(fleet_report):
    root, html_path, md_path = fleet_report
    md = md_path.read_text()
    assert md.startswith("# cxlbench report: every-family on 12 machines (lab-00 to "
                         "lab-slow)")
    slow = md[md.index("## Runs slower than the fleet"):md.index("## Machine")]
    # 1.5 times a fleet whose median run is 1.01 times the example: 48 % slower
    assert re.search(r"\| lab-slow \| \d+ \| .* latency \| \+48% \|", slow)
    assert "lab-0" not in slow.split("| run |")[1]      # none of the eleven
    # one machine block for the twelve alike, not twelve
    assert "### 12 machines alike: lab-00, lab-01" in md
    # every figure small enough to read: no bar a run, no legend entry a run
    figures = list((html_path.parent / "figures").glob("*.png"))
    assert figures
    for f in figures:
        width, height = Image.open(io.BytesIO(f.read_bytes())).size
        assert width < 1500 and height < 1200, (f.name, width, height)
    assert "lab-slow (+48%)" in md        # named in a figure's caption
    assert "The fleet at each point" in md and "Medians per run" not in md
    parse(html_path)


def test_the_fleet_view_of_a_per_run_figure_is_one_row_a_point(fleet_report):
    root, *_ = fleet_report
    frame = report.summary(runs_.load_runs([root]))
    mat = frame[frame["benchmark"] == "matrix"].reset_index(drop=True)
    one, words = fleet.view(mat)
    points = mat.groupby(["case", "metric"]).ngroups
    assert len(one) == points and set(one["label"]) == {"fleet of 12"}
    first = mat[(mat["case"] == one["case"][0]) & (mat["metric"] == one["metric"][0])]
    assert one["median"][0] == pytest.approx(first["median"].median())
    assert one["ci_high"][0] == pytest.approx(first["median"].max())
    assert "span the runs' range" in words
    few = mat[mat["label"].isin(["lab-00", "lab-slow"])]
    assert fleet.view(few) == (few, "")
