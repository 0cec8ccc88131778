"""The model's error where its answer is given (issue 48, item 5): a plan's predicted times
carry the error of the same model on this machine's checked cases of the same kind, and
past 30 % are withheld as "not trustworthy here"; the headline's modelled slowdowns
likewise. Runs are written here as cxlbench writes them; nothing is measured."""
import dataclasses
import pathlib

import pytest

from cxlbench import results
from cxlbench.plan import place, text as plan_text
from cxlbench.plan import job as plan_job
from cxlbench.tiering import checked

from .conftest import cxlbench
from .test_calibration_messages import HERE, write_files, write_run
from .test_plan_place import machine


def write_checked(folder: pathlib.Path, errors: dict[str, list[float]],
                  machine_id: str = HERE) -> pathlib.Path:
    """A run whose cases recorded the model's prediction beside their measurement: for
    each benchmark, a case per error (predicted = measured x (1 + error))."""
    journal, rows, cases = [], [], []
    metric = {"embedding": "lookups", "optimizer": "params", "checkpoint": "bandwidth",
              "kvcache": "tokens"}
    for bench, errs in errors.items():
        for i, e in enumerate(errs):
            case = f"{bench}_job/{i:03d}"
            cases.append({"id": case, "job": f"{bench}_job", "bench": bench,
                          "params": {"mem": "bind:0"}})
            rows.append({"run": folder.name, "job": f"{bench}_job", "case": case,
                         "benchmark": bench, "metric": metric[bench], "value": 100.0,
                         "repetition": 0, "mem": "bind:0"})
            journal.append({"case": case, "status": "ok", "bench": bench, "params": {},
                            "summary": {metric[bench]: {"n": 1, "median": 100.0}},
                            "info": {"model": {"metric": metric[bench],
                                               "predicted": 100.0 * (1 + e)}}})
    columns = results.columns_for({"mem"})
    meta = {"format_version": results.FORMAT_VERSION, "run_id": folder.name,
            "machine_id": machine_id, "suite": {"name": "model-check"},
            "topology": {"cpu": {"caches": []}}, "columns": columns, "cases": cases}
    return write_files(folder, meta, rows, journal)


def test_errors_per_benchmark_from_the_newest_run_that_checked_it(tmp_path):
    old = write_checked(tmp_path / HERE / "20261201-000000",
                        {"optimizer": [0.5, 0.6], "checkpoint": [0.1]})
    new = write_checked(tmp_path / HERE / "20261202-000000", {"optimizer": [0.05, -0.1, 0.2]})
    write_checked(tmp_path / "another" / "20261203-000000", {"checkpoint": [0.9]}, "another")
    found = checked.errors(tmp_path, HERE)
    assert set(found) == {"optimizer", "checkpoint"}
    assert found["optimizer"].error == pytest.approx(0.1) and found["optimizer"].cases == 3
    assert found["optimizer"].run == str(new) and found["optimizer"].trusted
    assert found["checkpoint"].run == str(old) and found["checkpoint"].error == pytest.approx(0.1)
    assert checked.errors(tmp_path / "none", HERE) == {}


def offloaded_plan(checks: dict) -> str:
    job = plan_job.make("llama-3-8b", zero=2, dp=8, offload="optimizer")
    return plan_text.render(place.plan(job, dataclasses.replace(machine(), checked=checks)))


def test_a_plans_times_carry_the_models_error_here_and_are_withheld_past_30_percent():
    ok = checked.Checked("optimizer", 0.12, 4, "results/vm/run-a")
    text = offloaded_plan({"optimizer": ok})
    assert "model error here: the model was 12% off (median) this machine's 4 measured " \
           "optimizer cases (results/vm/run-a)" in text
    assert "untrusted" not in text and "not trustworthy" not in text
    bad = checked.Checked("optimizer", 0.45, 4, "results/vm/run-b")
    text = offloaded_plan({"optimizer": bad})
    step = next(line for line in text.splitlines() if line.strip().startswith("optimizer step"))
    assert step.split()[4:7] == ["untrusted"] * 3, step
    assert "Host memory-bound work: not trustworthy here: the model was 45% off (median) " \
           "this machine's 4 measured optimizer cases (results/vm/run-b), past 30%" in text
    assert "past 30%, its times withheld" in text
    text = offloaded_plan({})
    assert "model error here: no checked case of these kinds on this machine" in text


def test_the_plan_reads_the_errors_of_this_machines_runs(tmp_path):
    """`cxlbench plan` with a calibration and a checked run in its results folder."""
    write_run(tmp_path / "results" / HERE / "20261201-000000")
    write_checked(tmp_path / "results" / HERE / "20261202-000000", {"optimizer": [0.5, 0.7]})
    r = cxlbench("plan", "--model", "llama-3-8b", "--train", "--zero", "2", "--dp", "8",
                 "--offload", "optimizer", "--results-dir", "results", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Host memory-bound work: not trustworthy here: the model was 60% off" in r.stdout
