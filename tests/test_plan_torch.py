"""peers/plan_torch.py in-process on its smallest configuration: the planner's model states
(parameters, gradients, fp32 master weights, Adam's moments) are what torch holds, to the
byte or nearly, and the activation measurement behaves (positive, the same for every
layer, linear in the micro-batch and, flash attention keeping no score matrix, in the
sequence; only the layer's input under recomputation); and every row of the script's
table, activations included, within its target (the norms fused, as the plan counts
them)."""
import importlib.util
import json
import sys

import pytest

from .conftest import REPO

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def pt():
    spec = importlib.util.spec_from_file_location("plan_torch", REPO / "peers" / "plan_torch.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod        # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield mod
    torch.set_num_threads(threads)
    sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def default(pt):
    job = pt.make_job("default")
    return job, pt.measure(job)


def close(a, b, rel=0.05):
    return abs(a - b) <= rel * max(abs(b), 1)


def test_model_states_match_the_planner(pt, default):
    job, m = default
    parts = pt.plan_parts(job)
    assert m.parameters == pt.fp.params(job) * 2          # bf16, every parameter counted
    for name, got in (("parameters", m.parameters), ("gradients", m.gradients),
                      ("master weights", m.master), ("optimizer moments", m.moments)):
        assert close(got, parts[name].bytes), (name, got, parts[name].bytes)
    rows = {r.part: r for r in pt.compare("default", job, m)}
    for name in ("parameters", "gradients", "master weights", "optimizer moments"):
        assert not rows[name].missed and rows[name].verdict() == "ok"


def test_activations_per_layer_are_measured(pt, default):
    job, m = default
    assert len(m.layers) == job.layers
    assert min(m.layers) > 0 and min(m.layers) == max(m.layers)
    assert m.outside > 0
    # no parameter's or buffer's storage is counted
    assert all(s.nbytes > 0 for s in m.saved)


@pytest.mark.parametrize("field", ["micro_batch", "seq"])
def test_activations_are_linear_in_batch_and_sequence(pt, default, field):
    job, m = default
    doubled = pt.measure(pt.make_job("default", **{field: getattr(job, field) * 2}))
    assert close(doubled.per_layer, 2 * m.per_layer), (field, doubled.per_layer, m.per_layer)


def test_recompute_keeps_the_layer_input_only(pt):
    job = pt.make_job("recompute")
    m = pt.measure(job)
    assert m.layers == [job.seq * job.micro_batch * job.hidden * 2] * job.layers


def test_main_writes_rows(pt, tmp_path, capsys):
    out = tmp_path / "rows.json"
    rc = pt.main(["default", "mha", "--json", str(out)])
    assert rc == 0                      # every row within its target
    rows = json.loads(out.read_text())
    assert {r["part"] for r in rows} >= {"parameters", "gradients", "master weights",
                                         "optimizer moments", "activations/layer",
                                         "outside layers"}
    assert "activations/layer" in capsys.readouterr().out


def test_every_pipeline_stage_to_the_byte(pt):
    """Each stage at pp 2 and 4, its forwards in flight as 1F1B holds them: the layers'
    saved bytes are the plan's to the byte, the last stage's output layer within 1 %."""
    rows = pt.compare_stages("default")
    assert [r.part for r in rows] == [
        "pp 2 stage 0 activations", "pp 2 stage 1 activations", "pp 2 stage 1 output layer",
        *(f"pp 4 stage {s} activations" for s in range(4)), "pp 4 stage 3 output layer"]
    assert all(r.verdict() == "ok" for r in rows), [(r.part, r.ratio) for r in rows]
    acts = [r.torch for r in rows if r.part.startswith("pp 4") and "activations" in r.part]
    assert acts == [4 * acts[3], 3 * acts[3], 2 * acts[3], acts[3]]     # 4 - s in flight


def test_a_wrong_schedule_is_caught(pt, monkeypatch):
    """Planned as GPipe holds them (every micro-batch on every stage), measured as 1F1B
    runs them: the stages after the first miss, and the last one's output layer too."""
    real = pt.fp.footprint

    def gpipe(job, stage=0):
        import dataclasses
        return real(dataclasses.replace(job, schedule="gpipe"), stage)
    monkeypatch.setattr(pt.fp, "footprint", gpipe)
    monkeypatch.setattr(pt, "PIPELINES", (4,))
    rows = pt.compare_stages("default")
    assert [r.part for r in rows if r.missed] == [
        *(f"pp 4 stage {s} activations" for s in (1, 2, 3)), "pp 4 stage 3 output layer"]
