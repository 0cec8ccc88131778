"""Optimizer steps (issue 13, part 3): the fused Adam/AdamW kernel against numpy's step in
both precisions, every ISA and thread count; a wrong step caught; the checked sample
covering every thread's edges; presets scaled; the three buffers placed and the triad
bound measured beside the step."""
import json
import os
import platform

import numpy as np
import pytest

from cxlbench import native, results
from cxlbench.benchmarks import optimizer as optimizer_bench
from cxlbench.errors import CheckError
from cxlbench.workloads import optimizer

from .conftest import cxlbench

CPUS = sorted(os.sched_getaffinity(0))[:2]
ENTRY = native.driver("adam")


def test_option_names_match_the_header():
    assert optimizer.KINDS == native.ADAM_KINDS
    assert optimizer.PRECISIONS == native.PRECISIONS
    assert ENTRY.benchmark == "optimizer" and ENTRY.check == "stepped"


def params_for(**over):
    p = {name: opt.default for name, opt in optimizer_bench.OPTIONS.items()}
    p.update(over)
    return p


def arrays(n, precision, seed=4):
    """A State over plain aligned memory, filled as a case fills it."""
    class Buf:
        def __init__(self, size):
            self.raw = native.aligned_empty(size, np.uint8)

        def array(self, dtype):
            return self.raw.view(dtype)
    sizes = optimizer.sizes(n, precision)
    st = optimizer.State.of([Buf(sizes[k]) for k in optimizer_bench.BUFFERS], n, precision)
    st.fill(np.random.default_rng(seed))
    return st


def step(st, params, isa, cpus, t=1):
    idx = np.arange(st.n)
    before = (st.master(idx).copy(), st.grad(idx).copy(), st.m.copy(), st.v.copy())
    ns = native.adam(st.p, st.g, st.m, st.v, st.w, params["optim"], params["precision"], isa,
                     params["lr"], (params["beta1"], params["beta2"]), params["eps"],
                     params["weight_decay"], t, cpus)
    return idx, before, ns


@pytest.mark.parametrize("lr", [1e-5, 1e-6, 1.0])
@pytest.mark.parametrize("precision", optimizer.PRECISIONS)
def test_correct_steps_pass_at_any_learning_rate(lr, precision):
    """A fine-tuning rate moves a weight by a few of its last bits: the update's check
    allows what fp32 can tell apart."""
    params = params_for(optim="adamw", precision=precision, lr=lr)
    st = arrays(20000, precision)
    idx, before, _ = step(st, params, ENTRY.runnable_isas()[-1], CPUS[:1], t=3)
    optimizer.check_step(st, idx, before, params, 3)


@pytest.mark.parametrize("kind", optimizer.KINDS)
@pytest.mark.parametrize("precision", optimizer.PRECISIONS)
def test_kernel_steps_as_numpy_does(kind, precision):
    """n = 10007 leaves a tail after every vector width and a slice edge inside a line."""
    params = params_for(optim=kind, precision=precision)
    for isa in ENTRY.runnable_isas():
        for threads in (1, len(CPUS)):
            for t in (1, 7):
                st = arrays(10007, precision)
                idx, before, ns = step(st, params, isa, CPUS[:threads], t)
                optimizer.check_step(st, idx, before, params, t)
                assert ns > 0
                moved = np.abs(st.master(idx) - before[0])
                assert (moved > 0).mean() > 0.99      # the step moved the parameters


def test_a_wrong_step_is_caught():
    params = params_for(precision="fp32")
    st = arrays(5000, "fp32")
    idx, before, _ = step(st, params, ENTRY.runnable_isas()[-1], CPUS[:1], t=3)
    with pytest.raises(CheckError, match="numpy's step"):       # the bias correction of t=2
        optimizer.check_step(st, idx, before, params, 2)
    with pytest.raises(CheckError, match="numpy's step"):       # another learning rate
        optimizer.check_step(st, idx, before, {**params, "lr": 2e-3}, 3)
    optimizer.check_step(st, idx, before, params, 3)
    st.v[4321] *= np.float32(1.001)                             # one moment off
    with pytest.raises(CheckError, match="v of parameter 4321"):
        optimizer.check_step(st, idx, before, params, 3)


@pytest.mark.parametrize("precision", optimizer.PRECISIONS)
def test_adamw_without_its_decoupled_decay_is_caught(precision):
    """lr x weight decay moves a weight by 1e-5 of itself: within the new value's
    tolerance, so the update is checked on its own."""
    params = params_for(optim="adamw", precision=precision)
    st = arrays(5000, precision)
    idx, before, _ = step(st, {**params, "weight_decay": 0.0}, "scalar", CPUS[:1])
    with pytest.raises(CheckError, match="the update of parameter"):
        optimizer.check_step(st, idx, before, params, 1)


def test_bf16_parameters_truncated_instead_of_rounded_are_caught():
    params = params_for(precision="mixed")
    st = arrays(5000, "mixed")
    idx, before, _ = step(st, params, "scalar", CPUS[:1])
    optimizer.check_step(st, idx, before, params, 1)
    st.p[:] = (st.w.view(np.uint32) >> 16).astype(np.uint16)      # truncated
    with pytest.raises(CheckError, match="rounded to nearest even"):
        optimizer.check_step(st, idx, before, params, 1)


def test_a_bf16_parameter_not_rounded_from_its_master_copy_is_caught():
    params = params_for(precision="mixed", optim="adamw")
    st = arrays(3000, "mixed")
    idx, before, _ = step(st, params, "scalar", CPUS[:1])
    optimizer.check_step(st, idx, before, params, 1)
    st.p[17] += np.uint16(3)                        # three bf16 steps away
    with pytest.raises(CheckError, match="bf16 parameter 17"):
        optimizer.check_step(st, idx, before, params, 1)


def test_bf16_rounding_is_to_nearest_even():
    x = np.array([1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -2.5, 3.0e-3], dtype=np.float32)
    got = optimizer.from_bf16(optimizer.to_bf16(x))
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even is 1; 1 + 3 * 2^-8 goes up
    assert got.tolist()[:4] == [1.0, 1.0, 1.0 + 2 ** -6, -2.5]
    assert abs(got[4] - x[4]) <= x[4] * 2 ** -8


def test_the_checked_sample_holds_every_slice_edge():
    n, threads = 50_000_003, 3
    idx = optimizer.sample(n, threads, np.random.default_rng(1))
    lines = -(-n // 16)
    for t in range(1, threads):
        edge = lines * t // threads * 16
        assert {edge - 1, edge} <= set(idx[(idx > edge - 70) & (idx < edge + 70)].tolist())
    assert idx[-1] == n - 1 and idx[0] >= 0 and len(idx) < 2 * optimizer.SAMPLE
    assert (np.diff(idx) > 0).all()
    assert len(optimizer.sample(1000, 2, np.random.default_rng(1))) == 1000


def test_presets_scale_and_custom_counts():
    assert optimizer.count(params_for()) == 1 << 24
    assert optimizer.count(params_for(preset="llama-2-7b", scale=1e-3)) == 6_738_416
    assert optimizer.count(params_for(preset="opt-1.3b", scale=1e-9)) == 4096   # the floor
    at = 112 + optimizer.STAGGER        # whole lines, then 4 KiB: no power-of-two apart
    assert optimizer.sizes(100, "fp32") == {"params": 400, "grads": 400, "states": at * 8}
    assert optimizer.sizes(100, "mixed") == {"params": 200, "grads": 200, "states": at * 12}


def test_case_places_three_buffers_and_measures_the_triad_beside_the_step(tmp_path):
    r = cxlbench("run", "--bench", "optimizer", "--set", "params=70001", "--set",
                 "precision=mixed", "--set", "mem.states=bind:0", "--set", "page.states=thp",
                 "--set", "repeat=3", "--set", "warmup=0", "--json", "--results-dir",
                 str(tmp_path))
    assert r.returncode == 0, r.stderr
    recs = {x["metric"]: x for x in json.loads(r.stdout)}
    assert set(recs) == {"params", "bandwidth", "triad", "of_triad"}
    assert all(x["status"] == "ok" and x["median"] > 0 for x in recs.values())
    df = results.load(recs["params"]["run_dir"])
    (entry,) = df.attrs["journal"].values()
    verified = {v["buffer"]: v for v in entry["placement"]["verified"]}
    assert set(verified) == {"params", "grads", "states"}
    assert verified["states"]["spec"] == "bind:0" and verified["states"]["page"] == "thp"
    assert entry["info"]["params"] == 70001 and entry["info"]["bytes_per_param"] == 28
    assert entry["info"]["evicted"] is (platform.machine() == "x86_64")   # evicted before each
    out = tmp_path / "report"
    r = cxlbench("report", recs["params"]["run_dir"], "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "Optimizer steps" in (out / "report.md").read_text()


def test_a_kernel_that_steps_wrongly_fails_the_case(monkeypatch):
    real = native.adam

    def twice(*args):       # the step taken twice: a kernel that loops once too often
        real(*args)
        return real(*args)
    monkeypatch.setattr(native, "adam", twice)
    params = params_for(params=8192, repeat=1, warmup=0, triad=False, cpus=str(CPUS[0]))
    with pytest.raises(CheckError, match="numpy's step"):
        optimizer_bench.run(params)


def test_bad_input_is_one_line():
    r = cxlbench("run", "--bench", "optimizer", "--set", "scale=0.5", "--dry-run")
    assert r.returncode == 2 and "scale=0.5 would not be used: scale shrinks a preset" in r.stderr
    r = cxlbench("run", "--bench", "optimizer", "--set", "preset=llama-2-7b", "--set",
                 "params=5000", "--dry-run")
    assert r.returncode == 2 and "params=5000 would not be used: preset=llama-2-7b" in r.stderr
    r = cxlbench("run", "--bench", "optimizer", "--set", "mem.moments=bind:0", "--dry-run")
    assert r.returncode == 2 and "no buffer 'moments'" in r.stderr
    r = cxlbench("run", "--bench", "optimizer", "--set", "preset=llama-2-70b", "--dry-run")
    assert r.returncode == 2 and "exceeds" in r.stderr         # 1.9 TB of fp32 state


def test_arrays_the_kernel_would_misread_are_refused():
    st = arrays(1000, "fp32")
    with pytest.raises(ValueError, match="float32"):
        native.adam(st.p.astype(np.float64), st.g, st.m, st.v, None, "adam", "fp32",
                    "scalar", 1e-3, (0.9, 0.999), 1e-8, 0.0, 1, CPUS[:1])
    with pytest.raises(ValueError, match="uint16"):     # mixed wants bf16 bits
        native.adam(st.p, st.g, st.m, st.v, st.m, "adam", "mixed", "scalar", 1e-3,
                    (0.9, 0.999), 1e-8, 0.0, 1, CPUS[:1])
