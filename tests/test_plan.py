"""`cxlbench plan`'s footprint against numbers worked out by hand and against DeepSpeed's
published ZeRO formulas; a formula changed on purpose must fail these checks."""
import json
import re

import pytest

from cxlbench.errors import UserError
from cxlbench.plan import footprint as fp
from cxlbench.plan import job as plan_job

from . import manual
from .conftest import cxlbench


def part(job, name):
    return next(p for p in fp.footprint(job) if p.name == name)


def test_parameter_counts_are_the_published_ones():
    # Llama 3 8B, by hand: embeddings 2 x 128256 x 4096; per layer q, o 4096^2 each, k, v
    # 4096 x 1024 each, MLP 3 x 4096 x 14336, two norms of 4096; 32 layers; a final norm.
    per_layer = 2 * 4096 ** 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert fp.params(plan_job.make("llama-3-8b")) == \
        2 * 128256 * 4096 + 32 * per_layer + 4096 == 8_030_261_248
    assert fp.params(plan_job.make("llama-3-70b")) == 70_553_706_496


def deepspeed_model_states(P: int, n: int, stage: int) -> int:
    """DeepSpeed's ZeRO paper (Rajbhandari et al. 2020), mixed-precision Adam: 2 B
    parameters, 2 B gradients and K = 12 B of optimizer state a parameter, per device."""
    return {0: 16 * P, 1: 4 * P + 12 * P // n, 2: 2 * P + 14 * P // n, 3: 16 * P // n}[stage]


def zero_matches(preset="llama-3-8b", n=8) -> list[int]:
    """The stages whose model states differ from DeepSpeed's formula."""
    P = fp.stage_params(plan_job.make(preset))
    return [z for z in range(4)
            if fp.model_states(plan_job.make(preset, zero=z, dp=n)) !=
            deepspeed_model_states(P, n, z)]


def test_model_states_follow_deepspeeds_zero_formulas():
    assert zero_matches() == []
    assert zero_matches("llama-3-70b", 64) == []


def test_a_planted_formula_error_is_caught(monkeypatch):
    monkeypatch.setitem(fp.MOMENTS, "adam", 3)           # a third moment: 4 B too many
    assert zero_matches() == [0, 1, 2, 3]
    monkeypatch.undo()
    monkeypatch.setattr(fp, "layer_params", lambda job: 2 * job.hidden ** 2)
    with pytest.raises(AssertionError):
        test_parameter_counts_are_the_published_ones()


def test_tensor_and_pipeline_parallel_split_the_stage():
    whole = fp.stage_params(plan_job.make("llama-3-8b"))
    layers = 32 * fp.layer_params(plan_job.make("llama-3-8b"))
    # stage 0 of 4 holds 8 layers and the input embedding; tp 2 halves it
    assert fp.stage_params(plan_job.make("llama-3-8b", pp=4, tp=2)) == \
        -(-(layers // 4 + 128256 * 4096) // 2)
    assert whole == layers + 2 * 128256 * 4096 + 4096


def test_activations_of_a_llama_layer_by_hand():
    s, b, h, a, kv, d, f = 4096, 2, 4096, 32, 8, 128, 14336
    # Tensor by tensor (bf16, 2 B): two norms' inputs 2 x 2h and fp32 1/rms 2 x 4; the norms'
    # outputs 2 x 2h; q 2ad, k and v 2 x 2 kv d, the attention output 2ad, flash's fp32
    # log-sum-exp 4a; gate, up, silu and their product 4 x 2f; a token each.
    token = 2 * 2 * h + 8 + 2 * 2 * h + 2 * a * d + 4 * kv * d + 2 * a * d + 4 * a + 8 * f
    flash = plan_job.make("llama-3-8b", micro_batch=2)
    assert part(flash, "activations").bytes == 32 * s * b * token
    # without flash the softmax's bf16 output, a x s a token, is kept too
    plain = plan_job.make("llama-3-8b", micro_batch=2, flash=False)
    assert part(plain, "activations").bytes == 32 * s * b * (token + 2 * a * s)
    # tp 4: the norms' tensors whole on each rank, the rest a quarter
    norms = 2 * 2 * h + 8 + 2 * 2 * h
    tp = plan_job.make("llama-3-8b", micro_batch=2, tp=4)
    assert part(tp, "activations").bytes == 32 * s * b * (norms + (token - norms) // 4)
    # full recompute: each layer's input, and in backward one layer's whole set again
    assert part(plan_job.make("llama-3-8b", recompute=True), "activations").bytes == \
        32 * 2 * s * h + s * token
    # the output layer: final norm input and 1/rms, projection input, bf16 log-softmax
    assert part(flash, "output activations").bytes == s * b * (2 * h + 4 + 2 * h + 2 * 128256)
    assert "output activations" not in [p.name for p in fp.footprint(
        plan_job.make("llama-3-8b", pp=2))]


def test_a_planted_activation_error_is_caught(monkeypatch):
    real = fp.activation_bytes
    monkeypatch.setattr(fp, "activation_bytes",
                        lambda job: (real(job)[0] - job.seq * job.micro_batch * 4 * job.heads,
                                     "no log-sum-exp"))
    with pytest.raises(AssertionError):
        test_activations_of_a_llama_layer_by_hand()


def test_first_stage_holds_pp_micro_batches_in_flight():
    one = part(plan_job.make("llama-3-8b", pp=4), "activations").bytes      # 1 micro-batch
    many = plan_job.make("llama-3-8b", pp=4, global_batch=8)                # 8 micro-batches
    assert many.micro_batches == 8
    assert part(many, "activations").bytes == 4 * one
    assert part(plan_job.make("llama-3-8b", pp=4, global_batch=2), "activations").bytes == 2 * one


def test_every_stage_holds_its_own_layers_and_micro_batches():
    """1F1B, 4 stages of 8 layers, 8 micro-batches: stage s holds 4 - s of them; the
    input embedding is stage 0's, the output one, the final norm and the output layer's
    activations the last's; a stage between holds neither."""
    job = plan_job.make("llama-3-8b", pp=4, global_batch=8)
    layers = 8 * fp.layer_params(job)
    emb = 128256 * 4096
    assert [fp.stage_params(job, s) for s in range(4)] == \
        [layers + emb, layers, layers, layers + emb + 4096]
    one = part(plan_job.make("llama-3-8b", pp=4), "activations").bytes
    acts = [next(p.bytes for p in fp.footprint(job, s) if p.name == "activations")
            for s in range(4)]
    assert acts == [4 * one, 3 * one, 2 * one, one]
    last = {p.name: p.bytes for p in fp.footprint(job, 3)}
    assert last["output activations"] == fp.output_bytes(job)[0]
    assert all("output activations" not in {p.name for p in fp.footprint(job, s)}
               for s in range(3))
    # the stage that decides the fit is the heaviest of all four, found by brute force
    totals = [fp.gpu_bytes(fp.footprint(job, s)) for s in range(4)]
    assert fp.heaviest_stage(job) == totals.index(max(totals)) == 0


def test_a_large_vocabulary_makes_the_last_stage_decide():
    """With a vocabulary of 1 M tokens the output layer outweighs stage 0's micro-batches:
    the last stage decides, and the plan is of it."""
    job = plan_job.make("llama-3-8b", pp=4, vocab=1 << 20)
    totals = [fp.gpu_bytes(fp.footprint(job, s)) for s in range(4)]
    assert fp.heaviest_stage(job) == totals.index(max(totals)) == 3


def test_plan_prints_each_stage_and_the_one_that_decides(tmp_path):
    r = cxlbench("plan", "--model", "llama-3-8b", "--pp", "4", "--global-batch", "8",
                 "--gpu-mem", "80G", "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "Per device (pipeline stage 0 of 4, the one that decides the GPU fit" in out
    header = next(line for line in out.splitlines() if line.strip().startswith("part") and
                  "stage 3" in line)
    assert header.split()[1:] == ["stage", "0", "stage", "1", "stage", "2", "stage", "3"]
    job = plan_job.make("llama-3-8b", pp=4, global_batch=8)
    totals = [fp.gpu_bytes(fp.footprint(job, s)) for s in range(4)]
    row = next(line for line in out.splitlines() if line.strip().startswith("total, gpu")
               and len(line.split()) == 6)
    assert [float(x) for x in row.split()[2:]] == [round(t / 2 ** 30, 2) for t in totals]
    assert f"largest over smallest {max(totals) / min(totals):.2f}x" in out
    j = json.loads(cxlbench("plan", "--model", "llama-3-8b", "--pp", "4", "--global-batch",
                            "8", "--json", "--results-dir", str(tmp_path)).stdout)
    assert j["stage"] == 0 and [s["gpu"] for s in j["stages"]] == totals


def test_schedules_hold_what_they_hold_in_flight():
    """GPipe: every micro-batch on every stage; interleaved 1F1B (v chunks): the first
    stage pp + (pp - 1) / v micro-batches' layers (Korthikanti et al. 2022), the last the
    output layer's for one."""
    one = part(plan_job.make("llama-3-8b", pp=4), "activations").bytes      # 8 layers x 1
    gpipe = plan_job.make("llama-3-8b", pp=4, global_batch=8, schedule="gpipe")
    assert [next(p.bytes for p in fp.footprint(gpipe, s) if p.name == "activations")
            for s in range(4)] == [8 * one] * 4
    assert {p.name: p.bytes for p in fp.footprint(gpipe, 3)}["output activations"] == \
        8 * fp.output_bytes(gpipe)[0]
    inter = plan_job.make("llama-3-8b", pp=4, global_batch=8, schedule="interleaved",
                          chunks=2)
    first = next(p.bytes for p in fp.footprint(inter, 0) if p.name == "activations")
    assert first * 2 == (4 * 2 + 3) * one              # (pp + (pp - 1) / v) x 8 layers
    assert {p.name: p.bytes for p in fp.footprint(inter, 3)}["output activations"] == \
        fp.output_bytes(inter)[0]


def test_a_split_of_ones_own_and_its_bounds():
    job = plan_job.make("llama-3-8b", pp=4, layers_per_stage=[6, 8, 8, 10])
    assert [fp.stage_layers(job, s) for s in range(4)] == [6, 8, 8, 10]
    totals = [fp.gpu_bytes(fp.footprint(job, s)) for s in range(4)]
    assert fp.heaviest_stage(job) == totals.index(max(totals))
    for bad, why in (({"layers_per_stage": [8, 8, 8]}, "one count a stage"),
                     ({"layers_per_stage": [8, 8, 8, 9]}, "adding up to the layers"),
                     ({"layers_per_stage": [8, 8, 8, 8], "schedule": "interleaved"},
                      "layers are split equally"),
                     ({"schedule": "interleaved", "chunks": 3}, "cannot split 32 layers")):
        with pytest.raises(UserError, match=why):
            plan_job.make("llama-3-8b", pp=4, **bad)


def test_the_balanced_split_is_the_best_split():
    """Every split of 32 layers into 4 stages of one or more, tried: none has a lighter
    heaviest stage than the one the plan offers, which holds all the layers."""
    import itertools
    from cxlbench.plan import balance
    job = plan_job.make("llama-3-8b", pp=4, global_batch=8)
    offered = balance.balanced_split(job)
    assert sum(offered.layers_per_stage) == 32 and min(offered.layers_per_stage) >= 1
    best = min(max(fp.gpu_bytes(fp.footprint(
        plan_job.make("llama-3-8b", pp=4, global_batch=8, layers_per_stage=[a, b - a, c - b,
                                                                            32 - c]), s))
        for s in range(4))
        for a, b, c in itertools.combinations(range(1, 32), 3))
    assert max(offered.stages_gpu) == best
    assert offered.step == max(offered.layers_per_stage) / 8
    # a split already balanced is offered nothing better; nor is interleaving, whose
    # split is fixed, or one stage
    assert balance.balanced_split(plan_job.make(
        "llama-3-8b", pp=4, global_batch=8, layers_per_stage=offered.layers_per_stage)) is None
    assert balance.balanced_split(plan_job.make("llama-3-8b", pp=4, schedule="interleaved")) \
        is None
    assert balance.balanced_split(plan_job.make("llama-3-8b")) is None


def test_a_first_stage_that_does_not_fit_and_the_split_that_does(tmp_path):
    """README's example: at 48 GiB a GPU stage 0 is over; the split the plan names fits,
    as the plan of that split says."""
    args = ["plan", "--model", "llama-3-8b", "--pp", "4", "--global-batch", "8",
            "--gpu-mem", "48G", "--results-dir", str(tmp_path)]
    out = cxlbench(*args).stdout
    assert "does NOT fit" in out
    split = re.search(r"so would --layers-per-stage ([\d,]+), which fits", out).group(1)
    assert f"memory-balanced split (--layers-per-stage {split})" in out
    again = cxlbench(*args, "--layers-per-stage", split).stdout
    assert "fits in its 48.0 GiB" in again.splitlines()[1]
    j = json.loads(cxlbench(*args, "--json").stdout)
    assert j["balance"][0]["layers_per_stage"] == [int(x) for x in split.split(",")]


def test_serving_stages_hold_their_layers_weights_and_kv_cache(tmp_path):
    """--serve --pp: each stage's weights and its layers' share of the KV-cache, the
    embeddings at the ends."""
    job = plan_job.make("llama-3-70b", train=False, context=32768, tp=8, pp=4, micro_batch=4)
    kv = [next(p.bytes for p in fp.footprint(job, s) if p.name == "KV-cache") for s in range(4)]
    assert kv == [kv[0]] * 4 and kv[0] == fp.kv_token_bytes(job) * 4 * 32768
    assert fp.kv_token_bytes(job) == 2 * 20 * 8 * 128 * 2 // 8      # 20 layers a stage
    out = cxlbench("plan", "--model", "llama-3-70b", "--serve", "--context", "32768", "--tp",
                   "8", "--pp", "4", "--micro-batch", "4", "--results-dir", str(tmp_path)).stdout
    assert "(serving: each stage its layers' weights and KV-cache; equal layers a stage)" in out


def test_many_stages_show_the_ends_and_the_middle():
    job = plan_job.make("llama-3-70b", pp=16)
    assert fp.shown_stages(job) == [0, 1, 2, 8, 13, 14, 15]


def test_kv_cache_per_token_and_in_total():
    job = plan_job.make("llama-3-70b", train=False, context=131072, micro_batch=4, tp=8)
    # 2 x 80 layers x 8 KV heads x 128 x 2 B = 320 KiB a token (kvcache.PRESETS), / 8 (tp)
    assert part(job, "KV-cache").bytes == 320 * 1024 // 8 * 4 * 131072
    shared = plan_job.make("llama-3-70b", train=False, context=1024, micro_batch=4,
                           prefix_shared=0.5)
    assert part(shared, "KV-cache").bytes == 320 * 1024 * (1024 + 3 * 512)
    assert [p.name for p in fp.footprint(job)] == ["parameters", "KV-cache"]


def test_offload_moves_optimizer_state_to_the_host():
    parts = {p.name: p.where for p in fp.footprint(
        plan_job.make("llama-3-8b", zero=2, dp=8, offload="optimizer"))}
    assert parts["master weights"] == parts["optimizer moments"] == "host"
    assert parts["parameters"] == parts["gradients"] == "gpu"


def test_embedding_tables_of_dlrm():
    job = plan_job.make("dlrm-dcnv2")
    assert part(job, "embedding tables").bytes == 204_184_588 * 128 * 4


def test_bad_jobs_are_refused_with_the_reason(tmp_path):
    with pytest.raises(UserError, match="no field batch"):
        plan_job.make("llama-3-8b", batch=4)
    with pytest.raises(UserError, match="pp: 3 stages cannot split 32 layers"):
        plan_job.make("llama-3-8b", pp=3)
    with pytest.raises(UserError, match=r"--zero \(zero\): 4 is above the maximum 3"):
        plan_job.make("llama-3-8b", zero=4)
    with pytest.raises(UserError, match="no preset 'llama-9'"):
        plan_job.make("llama-9")
    toml = tmp_path / "job.toml"
    toml.write_text('preset = "llama-3-8b"\nzero = 3\ndp = 16\n')
    assert plan_job.make(toml_path=str(toml), dp=32).dp == 32          # flags win
    assert plan_job.make(toml_path=str(toml)).zero == 3


def readme_plans(check: bool = False) -> list[str]:
    """README's plan commands; with --check (they need a calibration) or without."""
    found = re.findall(r"^\s*(cxlbench plan [^\n#]*)", manual.text(), re.M)
    return [c.strip() for c in found if ("--check" in c) == check]


@pytest.mark.parametrize("command", readme_plans())
def test_readme_plan_commands_print_a_plan(command):
    args = command.split()[1:]
    r = cxlbench(*args)
    assert r.returncode == 0, r.stderr
    assert re.match(r"(training|serving) ", r.stdout)
    assert re.search(r"total, (gpu|host)\s+[\d.]+", r.stdout)
    data = json.loads(cxlbench(*args, "--json").stdout)
    assert data["total"]["gpu"] == sum(p["bytes"] for p in data["parts"] if p["where"] == "gpu")
    assert data["answer"] and data["answer"][0] in r.stdout


def test_readme_shows_plan_commands():
    assert len(readme_plans()) >= 2 and readme_plans(check=True)
