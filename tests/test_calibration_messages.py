"""What cxlbench says about the calibrations it reads (issue 46, item 8): a damaged or
incomplete newest calibration is named with what is wrong, and the newest whole one used
instead, saying so; a sweep that never left the caches sysfs reports gives no memory
figure, and the model does not use it; another machine's calibration, given by path, says
whose it is. Each calibration run is written here, in tmp_path, as cxlbench writes one
(run.json, results.csv, cases.jsonl), from test_model_calibration's rows: nothing is
measured, so each test takes a second or two."""
import csv
import json
import pathlib

import pytest

from cxlbench import analysis_text, results
from cxlbench.errors import ResultsWarning
from cxlbench.tiering import calibration
from cxlbench.topology import Topology

from .conftest import cxlbench
from .test_model_calibration import K, M, frame_rows
from .test_model_terms import pf_rows

# The development VM's caches, as a run's topology records them (sysfs): a 32M L3.
CACHES = [{"level": 1, "type": "Data", "size": 48 * K, "shared_cpus": "0"},
          {"level": 1, "type": "Instruction", "size": 32 * K, "shared_cpus": "0"},
          {"level": 2, "type": "Unified", "size": M, "shared_cpus": "0"},
          {"level": 3, "type": "Unified", "size": 32 * M, "shared_cpus": "0-1"}]
NODE = Topology.read(probe_gpus=False).memory_nodes[0]
HERE = results.machine_id()
PLAN = ("plan", "--model", "llama-3-8b", "--train", "--zero", "2", "--dp", "8",
        "--offload", "optimizer")


def rows(largest=64 * M) -> list[dict]:
    """A whole calibration's rows of this machine's first memory node: the chase swept to
    `largest` (16K, 1M, 64M: 100 ns at 64M, past the L3), gathers, streams, loaded
    latency and floors."""
    out = []
    for r in frame_rows() + pf_rows():      # every job of the calibration suite
        if r["mem"] != "bind:0":
            continue            # (node 1's sweep shares node 0's case ids there)
        if r["job"] == "sweep" and r["size"] > largest:
            continue
        out.append({**r, "mem": f"bind:{NODE}"})
    return out


def write_run(folder: pathlib.Path, machine: str = HERE, *, largest=64 * M,
              failed=(), caches=CACHES) -> pathlib.Path:
    """A calibration run as `cxlbench calibrate` leaves one: its cases, each case's rows
    and journal line (`failed`: those cases failed, without rows)."""
    table = [{**r, "run": folder.name} for r in rows(largest)]
    params = {k for r in table for k in r} - {"run", "job", "case", "benchmark", "value",
                                                "cpus_used", "repetition", "metric"}
    columns = results.columns_for(params)
    cases: dict[str, list[dict]] = {}
    for r in table:
        cases.setdefault(r["case"], []).append(r)
    meta = {"format_version": results.FORMAT_VERSION, "run_id": folder.name,
            "machine_id": machine, "suite": {"name": calibration.SUITE},
            "topology": {"cpu": {"caches": caches}}, "columns": columns,
            "cases": [{"id": c, "job": rs[0]["job"], "bench": rs[0]["benchmark"],
                       "params": {"mem": rs[0]["mem"]}} for c, rs in cases.items()]}
    journal = []
    kept = []
    for c, rs in cases.items():
        if c in failed:
            journal.append({"case": c, "status": "failed", "error": "worker killed by SIGKILL",
                            "params": {}, "summary": {}})
            continue
        kept += rs
        counts: dict[str, int] = {}
        for r in rs:
            counts[r["metric"]] = counts.get(r["metric"], 0) + 1
        journal.append({"case": c, "status": "ok", "params": {},
                        "summary": {m: {"n": n} for m, n in counts.items()}})
    return write_files(folder, meta, kept, journal)


def write_files(folder: pathlib.Path, meta: dict, rows: list[dict],
                journal: list[dict]) -> pathlib.Path:
    """A run's three files as cxlbench leaves them: run.json, results.csv (meta's
    columns) and cases.jsonl."""
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(meta, indent=2))
    with open(folder / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=meta["columns"], restval="")
        w.writeheader()
        w.writerows(rows)
    (folder / "cases.jsonl").write_text("".join(json.dumps(e) + "\n" for e in journal))
    return folder


def fresh():
    """The module's memos of runs read, forgotten (runs of the same paths differ between
    tests)."""
    for memo in vars(calibration).values():
        if hasattr(memo, "cache_clear"):
            memo.cache_clear()


def test_a_run_written_here_reads_back_as_a_calibration(tmp_path):
    run = write_run(tmp_path / HERE / "20261201-000000")
    fresh()
    cal = calibration.measured(NODE, tmp_path)
    assert cal is not None and cal.source == f"measured: {run}"
    assert [s for s, _ in cal.sweep] == [16 * K, M, 64 * M] and cal.in_cache == ""
    assert cal.idle_ns == pytest.approx(100.1)


def plan(cwd: pathlib.Path, *extra: str):
    return cxlbench(*PLAN, "--results-dir", "results", *extra, cwd=cwd)


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning: ")]


def damage(run: pathlib.Path, how: str) -> str:
    """Damage a run as a crash, a full disk or a careless hand would; what the note must
    say of it."""
    if how == "run.json not JSON":
        (run / "run.json").write_text((run / "run.json").read_text()[:300])
        return "run.json: Expecting"
    if how == "results.csv missing":
        (run / "results.csv").unlink()
        return "results.csv is missing"
    if how == "a row cut short":
        lines = (run / "results.csv").read_text().splitlines(keepends=True)
        lines[3] = lines[3][:30] + "\n"
        (run / "results.csv").write_text("".join(lines))
        return "results.csv, line 4: 3 fields where the header has"
    if how == "a job missing":      # interrupted: the sweep's cases have no journal lines
        journal = (run / "cases.jsonl").read_text().splitlines(keepends=True)
        (run / "cases.jsonl").write_text("".join(j for j in journal if '"sweep/' not in j))
        return "sweep/000 did not finish"
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["run.json not JSON", "results.csv missing",
                                 "a row cut short", "a job missing", "a job failed"])
def test_a_damaged_newest_calibration_is_named_and_the_newest_whole_one_used(tmp_path, how):
    """Three runs: the oldest damaged too (older than the whole one: nothing to say of
    it), a whole one, the newest damaged. One line names the newest and what is wrong
    with it, and the whole one used instead; the plan's speed is the whole one's."""
    machine = tmp_path / "results" / HERE
    oldest = write_run(machine / "20261130-000000")
    (oldest / "results.csv").unlink()
    whole = write_run(machine / "20261201-000000")
    newest = write_run(machine / "20261202-000000",
                       failed=("sweep/001",) if how == "a job failed" else ())
    why = "sweep/001 failed: worker killed by SIGKILL" if how == "a job failed" else \
        damage(newest, how)
    r = plan(tmp_path)
    assert r.returncode == 0, r.stderr
    said = warnings_of(r.stderr)
    assert len(said) == 1, r.stderr         # one line: no note of the oldest, no row notes
    state = "incomplete" if how.startswith("a job") else "damaged"
    assert said[0].startswith(f"warning: calibration results/{HERE}/{newest.name} is {state} "
                              f"({why}"), said[0]
    assert said[0].endswith(f"); using results/{HERE}/{whole.name}, the newest whole one")
    assert "Traceback" not in r.stderr
    # the plan's figures: the whole run's (and the newest's whole jobs, where it has any)
    speed = next(line for line in r.stdout.splitlines() if "DRAM:" in line and "speed:" in line)
    assert f"results/{HERE}/{whole.name}" in speed


def test_only_damaged_calibrations_are_named_where_the_model_says_it_has_none(tmp_path):
    """No whole calibration left: the plan says which run is damaged and how to measure
    anew; a case's prediction, made in its worker, records why there is none."""
    run = write_run(tmp_path / "results" / HERE / "20261202-000000")
    (run / "results.csv").unlink()
    r = plan(tmp_path)
    assert r.returncode == 0, r.stderr
    assert warnings_of(r.stderr) == [
        f"warning: calibration results/{HERE}/{run.name} is damaged (results.csv is missing); "
        f"no whole calibration of node {NODE} here: cxlbench calibrate measures it anew"]
    assert "not predicted" in r.stdout
    fresh()
    with pytest.raises(calibration.Unusable, match="is damaged \\(results.csv is missing\\)"):
        calibration.measured(NODE, tmp_path / "results")
    unavailable = embedding_prediction(tmp_path)
    assert f"calibration {run} is damaged (results.csv is missing)" in unavailable


def embedding_prediction(home: pathlib.Path) -> str:
    """A small embedding case on this node, run where home/results holds the calibrations:
    why its prediction is not there (info.model_unavailable; the prediction must not be)."""
    before = set((home / "results" / HERE).iterdir())
    r = cxlbench("run", "--bench", "embedding", "--set", "rows=2048", "--set", "batch=64",
                 "--set", "repeat=1", "--set", f"mem=bind:{NODE}", "--results-dir",
                 "results", cwd=home)
    assert r.returncode == 0, r.stderr
    [made] = set((home / "results" / HERE).iterdir()) - before
    info = json.loads((made / "cases.jsonl").read_text().splitlines()[0])["info"]
    assert "model" not in info, info.get("model")
    return info.get("model_unavailable", "")


# --- (b) a sweep that stayed inside the caches -----------------------------------------------

IN_CACHE = (f"no memory figure for node {NODE}: the largest working set swept, 1M, fits in "
            f"the 32M L3 sysfs reports, so its 5.1 ns is that cache's latency, not memory's; "
            f"the model does not use it (cxlbench calibrate --node {NODE} --again --var "
            f"largest=128M sweeps past the cache)")


def test_a_sweep_inside_the_last_cache_gives_no_memory_figure(tmp_path):
    """`calibrate --var largest=1M` on a 32M L3: calibrate (every job there already, so
    nothing runs) says the largest working set stayed in the L3 and does not call its
    latency memory's; the plan's model does not use it, saying why."""
    run = write_run(tmp_path / "results" / HERE / "20261201-000000", largest=M)
    r = cxlbench("calibrate", "--node", str(NODE), "--results-dir", "results", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"error: results/{HERE}/{run.name}: {IN_CACHE}\n" in r.stderr
    assert "memory:" not in r.stdout and "Traceback" not in r.stderr
    r = plan(tmp_path)
    assert r.returncode == 0, r.stderr
    assert warnings_of(r.stderr) == [f"warning: results/{HERE}/{run.name}: {IN_CACHE}"]
    assert "speed: measured" not in r.stdout and "not predicted" in r.stdout


def test_a_sweep_inside_the_last_cache_is_shown_as_the_caches_and_not_predicted_from(tmp_path):
    run = write_run(tmp_path / "results" / HERE / "20261201-000000", largest=M)
    fresh()
    with pytest.raises(calibration.Unusable) as e:
        calibration.measured(NODE, tmp_path / "results")
    assert str(e.value) == f"{run}: {IN_CACHE}"
    lines = analysis_text.calibration_lines(e.value.calibration)
    assert lines[1].startswith("  no memory figure: the largest working set swept, 1M, fits "
                               "in the 32M L3 sysfs reports (its 5.1 ns is that cache's; "
                               "--var largest=128M sweeps past it)")
    assert lines[2] == "  caches (from the sweep): 16.0K at 1.1 ns, then 1M at 5.1 ns, still cached"
    assert not any("memory:" in line or "from memory" in line for line in lines)
    # the tiers the model takes (plan, tiering): none, said once
    with pytest.warns(ResultsWarning, match="no memory figure"):
        assert calibration.tiers(NODE, None, None, results_dir=tmp_path / "results") is None
    # named by path, it is refused outright
    with pytest.raises(calibration.Unusable, match="no memory figure"):
        calibration.tiers(NODE, None, None, path=str(run))
    # a case's prediction (in its worker) is not made, and says why
    assert IN_CACHE in embedding_prediction(tmp_path)


def test_a_sweep_past_the_last_cache_or_without_caches_recorded_is_memory(tmp_path):
    """The same run swept to 64M (past the 32M L3), or with no caches in its topology, is
    a calibration as before: no note, memory's figure."""
    write_run(tmp_path / "a" / HERE / "20261201-000000")
    write_run(tmp_path / "b" / HERE / "20261201-000000", largest=M, caches=[])
    fresh()
    assert calibration.measured(NODE, tmp_path / "a").idle_ns == pytest.approx(100.1)
    assert calibration.measured(NODE, tmp_path / "b").in_cache == ""


# --- (c) another machine's calibration, named by path ----------------------------------------

def test_another_machines_calibration_says_whose_it_is(tmp_path):
    run = write_run(tmp_path / "results" / "other-box" / "20261201-000000", "other-box")
    r = plan(tmp_path, "--calibration", f"results/other-box/{run.name}")
    assert r.returncode == 0, r.stderr
    assert (f"speed: measured on other-box, not this machine: results/other-box/{run.name}"
            in r.stdout), r.stdout
    fresh()
    fast, slow = calibration.tiers(NODE, None, None, path=str(run))
    assert fast.kind == "measured"
    assert fast.source == f"measured on other-box, not this machine: {run}"
    # this machine's own, by path: measured, as before
    mine = write_run(tmp_path / "results" / HERE / "20261201-000000")
    assert calibration.tiers(NODE, None, None, path=str(mine))[0].source == f"measured: {mine}"


def test_calibrate_refuses_a_sweep_that_would_stay_in_the_cache_before_it_runs(tmp_path):
    """`calibrate --var largest=` at or below the last-level cache sysfs reports would
    measure that cache: refused before any case runs, naming the cache and a size past it."""
    cache = calibration.last_level(Topology.read(probe_gpus=False).cpu.get("caches"))
    if cache is None:
        pytest.skip("sysfs reports no cache sizes here")
    r = cxlbench("calibrate", "--var", "largest=16K", "--results-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "largest=16K" in r.stderr and cache[0] in r.stderr and "not memory" in r.stderr
    assert not (tmp_path / "r").exists()            # nothing ran, nothing was written
