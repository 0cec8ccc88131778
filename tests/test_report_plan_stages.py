"""`cxlbench report --plan` of a pipelined plan: one bar per pipeline stage with its GPU
parts stacked, the GPU's capacity as a line, the planned stage's host parts in the host
tiers' colours, each way to even the stages out by its stages' peaks; none for pp 1; and a
plan written before stages were counted still drawn as it was."""
import copy
import json

import pytest
from click.testing import CliRunner

from cxlbench.cli import main
from cxlbench.plan import job as plan_job
from cxlbench.plan import place, text
from cxlbench.report import plan as plan_section

from .test_plan_place import machine

GIB = 1 << 30


def planned(pp: int, **kw) -> dict:
    job = plan_job.make("llama-3-8b", pp=pp, global_batch=2 * pp, **kw)
    return text.as_dict(place.plan(job, machine(gpu=48 * GIB)))


@pytest.fixture(scope="module")
def pp4() -> dict:
    return planned(4)


def drawn(monkeypatch, data: dict) -> tuple[list, list]:
    """The section's blocks and the matplotlib figures it drew (png() kept them open)."""
    figures = []

    def keep(fig):
        figures.append(fig)
        return b"\x89PNG kept"
    monkeypatch.setattr(plan_section, "png", keep)
    return plan_section.section(data), figures


def stage_figure(blocks, figures):
    keys = [b.key for b in blocks if hasattr(b, "png")]
    return (figures[keys.index("plan-stages")], blocks[[getattr(b, "key", "") for b in
                                                        blocks].index("plan-stages")]) \
        if "plan-stages" in keys else (None, None)


def bars_at(ax) -> dict:
    """x position: the heights of the bars above 0 stacked there (GiB)."""
    out: dict = {}
    for p in ax.patches:
        if p.get_height() > 0:
            out.setdefault(round(p.get_x() + p.get_width() / 2, 6), []).append(p.get_height())
    return out


def flat_lines(ax) -> list[float]:
    return [line.get_ydata()[0] for line in ax.get_lines()
            if len(set(line.get_ydata())) == 1 and line.get_linestyle() == "--"]


def test_a_pp4_plan_draws_a_bar_per_stage_and_the_gpus_capacity(monkeypatch, pp4):
    blocks, figures = drawn(monkeypatch, pp4)
    fig, figure = stage_figure(blocks, figures)
    assert fig is not None
    first, second = fig.axes[:2]
    bars = bars_at(first)
    assert len(bars) == 4 == len(pp4["stages"])
    for x, st in zip(sorted(bars), pp4["stages"]):
        assert sum(bars[x]) == pytest.approx(st["gpu"] / GIB)       # the parts stacked
        assert len(bars[x]) == len(st["parts"])
    assert [t.get_text().split("\n")[0] for t in first.get_xticklabels()] == \
        [f"stage {s}" for s in range(4)]
    for ax in (first, second):                  # the capacity, in both panels
        assert flat_lines(ax) == [pytest.approx(48.0)]
    # the planned stage's host parts (checkpoint staging) below the axis, one rank's share
    below = [p for p in first.patches if p.get_height() < 0]
    staging = next(p for p in pp4["parts"] if p["name"] == "checkpoint staging")
    assert -sum(p.get_height() for p in below) == pytest.approx(staging["bytes"] / GIB)
    assert {p.get_facecolor()[:3] for p in below} <= {
        tuple(int(c[i:i + 2], 16) / 255 for i in (1, 3, 5))
        for c in (plan_section.COLOURS["DRAM"], plan_section.COLOURS["slow tier"])}
    # each way to even the stages out: a marker per stage at its peak
    markers = {line.get_label(): list(line.get_ydata()) for line in second.get_lines()
               if line.get_linestyle() == "None"}
    assert set(markers) == {o["option"] for o in pp4["balance"]}
    for o in pp4["balance"]:
        assert markers[o["option"]] == pytest.approx([b / GIB for b in o["stages_gpu"]])
    assert f"one GPU's capacity ({pp4['gpu']['source']})" in figure.caption
    assert "Stage 0 decides" in figure.caption
    table = next(b for b in blocks if type(b).__name__ == "Table")
    assert [row[0] for row in table.rows] == [o["option"] for o in pp4["balance"]]


def test_a_pp1_plan_draws_no_stage_figure(monkeypatch):
    data = planned(1)
    assert data["stages"] == []
    blocks, figures = drawn(monkeypatch, data)
    assert stage_figure(blocks, figures) == (None, None)
    assert [b.key for b in blocks if hasattr(b, "png")] == ["plan-bytes", "plan-time"]
    assert not any(type(b).__name__ == "Table" and b.headers[0].startswith("way")
                   for b in blocks)


def test_many_stages_draw_the_ones_the_plan_shows(monkeypatch):
    data = planned(16)
    blocks, figures = drawn(monkeypatch, data)
    fig, figure = stage_figure(blocks, figures)
    assert len(bars_at(fig.axes[0])) == len(data["stages"]) == 7
    assert "16 stages; the 9 between those drawn are not drawn" in figure.caption


def test_an_unknown_capacity_draws_no_line(monkeypatch, pp4):
    data = copy.deepcopy(pp4)
    data["gpu"]["capacity"] = None
    blocks, figures = drawn(monkeypatch, data)
    fig, figure = stage_figure(blocks, figures)
    assert not any(flat_lines(ax) for ax in fig.axes)
    assert "capacity is not known" in figure.caption


def test_a_plan_from_before_stages_still_renders(tmp_path, pp4):
    """A plan written before stages were counted: no stage, stages, imbalance, balance,
    gpu, nor a part's host_bytes. Its section is drawn as before, without the figure."""
    old = copy.deepcopy(pp4)
    for key in ("stage", "stages", "imbalance", "balance", "gpu"):
        old.pop(key)
    for p in old["parts"]:
        p.pop("host_bytes")
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    blocks = plan_section.section(plan_section.load(str(path)))
    assert [b.key for b in blocks if hasattr(b, "png")] == ["plan-bytes", "plan-time"]
    # stages without the rest (a plan between the two): drawn, no line, no second panel
    mid = {**old, "stages": pp4["stages"]}
    path.write_text(json.dumps(mid))
    blocks = plan_section.section(plan_section.load(str(path)))
    figure = next(b for b in blocks if getattr(b, "key", "") == "plan-stages")
    assert figure.png.startswith(b"\x89PNG") and "capacity is not known" in figure.caption


@pytest.mark.parametrize("change, named", [
    (lambda d: d["stages"][1].update(gpu="big"), "stages[1].gpu"),
    (lambda d: d["stages"][0]["parts"].update(activations=-1), 'stages[0].parts["activations"]'),
    (lambda d: d["stages"][0].update(parts=[1]), "stages[0].parts"),
    (lambda d: d["stages"][2].update(stage=1.5), "stages[2].stage"),
    (lambda d: d["balance"][0].update(stages_gpu=[1, "x"]), "balance[0].stages_gpu[1]"),
    (lambda d: d["gpu"].update(capacity="48G"), "gpu.capacity"),
    (lambda d: d.update(stage=-1), "stage"),
])
def test_a_stages_bad_value_is_refused_naming_it(tmp_path, pp4, change, named):
    data = copy.deepcopy(pp4)
    change(data)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    r = CliRunner().invoke(main, ["report", str(tmp_path / "no-run"), "-o",
                                  str(tmp_path / "out"), "--plan", str(path)])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert named in r.stderr and "not a plan" in r.stderr, r.stderr


def test_the_cli_draws_a_pp4_plan(tmp_path, pp4):
    """report --plan of a pp 4 plan writes the stage figure beside the report."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(pp4))
    runs = plan_section.__file__.rsplit("/cxlbench/", 1)[0] + "/tests/data/runs/vm"
    r = CliRunner().invoke(main, ["report", runs, "-o", str(tmp_path / "out"), "--plan",
                                  str(path)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "figures" / "plan-stages.png").read_bytes() \
        .startswith(b"\x89PNG")
    assert "GPU bytes per pipeline stage" in (tmp_path / "out" / "report.md").read_text()
