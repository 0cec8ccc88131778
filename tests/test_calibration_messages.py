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
import shutil

import pytest

from cxlbench import analysis_text, results
from cxlbench.errors import ResultsWarning, UserError
from cxlbench.tiering import calibration
from cxlbench.topology import Topology

from .conftest import cxlbench
from .test_model_calibration import K, M, frame_rows

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
    for r in frame_rows():
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
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(meta, indent=2))
    with open(folder / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, restval="")
        w.writeheader()
        w.writerows(kept)
    (folder / "cases.jsonl").write_text("".join(json.dumps(e) + "\n" for e in journal))
    return folder


def fresh():
    """The module's memos of runs read (a test rewrites a run between two reads)."""
    calibration._load.cache_clear()
    calibration._measured_from.cache_clear()


def test_a_run_written_here_reads_back_as_a_calibration(tmp_path):
    run = write_run(tmp_path / HERE / "20261201-000000")
    fresh()
    cal = calibration.measured(NODE, tmp_path)
    assert cal is not None and cal.source == f"measured: {run}"
    assert [s for s, _ in cal.sweep] == [16 * K, M, 64 * M] and cal.in_cache == ""
    assert cal.idle_ns == pytest.approx(100.1)
