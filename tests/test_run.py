"""`cxlbench run` as users and scripts use it: results on disk, the --json contract,
isolation of a crashing case, resume after SIGKILL, exit code 2 on bad input."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cxlbench import results
from cxlbench.errors import ResultsError
from cxlbench.units import format_list

from .conftest import cxlbench, free_hugepages

FAST = ["--set", "repeat=3", "--set", "warmup=1"]


def run_dirs(root: Path):
    return sorted(p.parent for p in root.glob("*/*/run.json"))


def test_adhoc_json_contract(tmp_path):
    r = cxlbench("run", "--bench", "chase", "--set", "size=1M", "--set", "page=thp",
                 "--set", "mem=bind:0", *FAST, "--json", "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    (rec,) = json.loads(r.stdout)
    for key in ("benchmark", "kernel", "parameters", "metric", "unit", "median", "ci_low",
                "ci_high", "cv", "n", "run_dir"):
        assert key in rec
    assert rec["benchmark"] == "chase" and rec["metric"] == "latency" and rec["unit"] == "ns"
    assert rec["n"] == 3 and rec["ci_low"] <= rec["median"] <= rec["ci_high"]
    assert rec["parameters"]["size"] == 1 << 20 and rec["parameters"]["mem"] == "bind:0"
    df = results.load(rec["run_dir"])
    assert len(df) == 3 and set(df["metric"]) == {"latency"}
    # 1 MiB with THP maps one whole 2 MiB page: 512 base pages, all on node 0
    assert df["verified"].iloc[0] == "0:512" and df["placement_ok"].all()
    meta = df.attrs["run"]
    assert meta["format_version"] == results.FORMAT_VERSION
    assert meta["timer"]["clock"] == "CLOCK_MONOTONIC_RAW"
    assert meta["topology"]["nodes"][0]["id"] == 0 and "thp_enabled" in meta["settings"]


def test_bandwidth_threads_and_isa(tmp_path):
    r = cxlbench("run", "--bench", "bandwidth", "--set", "size=8M", "--set", "threads=all",
                 "--set", "isa=scalar", *FAST, "--json", "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    (rec,) = json.loads(r.stdout)
    assert rec["kernel"] == "read" and rec["isa"] == "scalar" and rec["unit"] == "GB/s"
    df = results.load(rec["run_dir"])
    assert df["cpus_used"].iloc[0] == format_list(os.sched_getaffinity(0))


SUITE_WITH_CRASH = """
[global]
repeat = 2
warmup = 0
[before]
bench = "chase"
size = "64K"
[boom]
bench = "selftest"
[after]
bench = "chase"
size = "128K"
"""


def test_crashing_worker_fails_alone(tmp_path):
    suite_file = tmp_path / "crash.toml"
    suite_file.write_text(SUITE_WITH_CRASH)
    r = cxlbench("run", str(suite_file), "--json", "--results-dir", str(tmp_path / "r"),
                 env={"CXLBENCH_TEST_KERNELS": "1"})
    assert r.returncode == 1, r.stderr            # a failed case makes the run exit 1
    recs = {x["case"]: x for x in json.loads(r.stdout)}
    assert recs["boom/000"]["status"] == "failed"
    assert "SIGSEGV" in recs["boom/000"]["error"]
    assert recs["before/000"]["status"] == "ok" and recs["after/000"]["status"] == "ok"
    df = results.load(recs["after/000"]["run_dir"])
    assert sorted(set(df["case"])) == ["after/000", "before/000"]


def test_test_kernels_hidden_without_the_switch(tmp_path):
    r = cxlbench("run", "--bench", "selftest", "--results-dir", str(tmp_path))
    assert r.returncode == 2 and "unknown benchmark 'selftest'" in r.stderr


SLOW_SUITE = """
[global]
repeat = 4
warmup = 0
[lat]
bench = "chase"
size = ["256K", "512K", "1M", "2M", "4M", "8M"]
loads = 6000000
"""


def test_sigkill_then_resume_repeats_nothing(tmp_path):
    suite_file = tmp_path / "slow.toml"
    suite_file.write_text(SLOW_SUITE)
    root = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "cxlbench", "run", str(suite_file),
                             "--results-dir", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    journal = None
    while time.monotonic() < deadline:
        dirs = run_dirs(root)
        if dirs and (dirs[0] / "cases.jsonl").exists():
            journal = dirs[0] / "cases.jsonl"
            if len(journal.read_text().splitlines()) >= 2:
                break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert journal is not None, "the run never finished a case"
    before = [json.loads(x)["case"] for x in journal.read_text().splitlines()]
    assert 2 <= len(before) < 6, f"kill came too late: {before}"
    rows_before = results.load(journal.parent)
    rows_before = rows_before[rows_before["case"].isin(before)]

    r = cxlbench("run", "--resume", str(journal.parent), "--json")
    assert r.returncode == 0, r.stderr
    assert f"{len(before)} of 6 cases already finished" in r.stderr
    for case in before:
        assert f"] {case} " not in r.stderr, f"{case} ran again"
    after = [json.loads(x)["case"] for x in journal.read_text().splitlines()]
    assert sorted(after) == [f"lat/{i:03d}" for i in range(6)]
    df = results.load(journal.parent)
    assert df.groupby("case").size().tolist() == [4] * 6      # no duplicated repetitions
    kept = df[df["case"].isin(before)].reset_index(drop=True)
    assert kept["value"].tolist() == rows_before["value"].tolist()
    assert len(json.loads(r.stdout)) == 6


def test_newer_format_is_refused(tmp_path):
    r = cxlbench("run", "--bench", "chase", "--set", "size=64K", *FAST, "--json",
                 "--results-dir", str(tmp_path))
    run_dir = Path(json.loads(r.stdout)[0]["run_dir"])
    meta = json.loads((run_dir / "run.json").read_text())
    meta["format_version"] = results.FORMAT_VERSION + 1
    (run_dir / "run.json").write_text(json.dumps(meta))
    with pytest.raises(ResultsError, match="newer than this cxlbench reads"):
        results.load(run_dir)
    r = cxlbench("run", "--resume", str(run_dir))
    assert r.returncode == 2 and "upgrade cxlbench" in r.stderr


def _bad_inputs():
    cases = [
        (["mem=bind:99"], "node 99 does not exist"),
        (["mem=bind:0-"], "malformed placement"),
        (["mem=weighted:0=x"], "is not NODES=WEIGHT"),
        (["mem=weighted:0=0"], "outside 1..255"),
        (["size=64T"], "exceeds its free memory"),
        (["page=huge"], "is not one of 4k, thp, 2m, 1g"),
    ]
    need = free_hugepages("1g") + 1
    cases.append(([f"page=1g", f"size={need}G"], f"hugetlb pool on node 0 has {need - 1} free "
                   f"1g pages, {need} needed: raise /sys/devices/system/node/node0/hugepages/"
                   "hugepages-1048576kB/nr_hugepages"))
    return cases


@pytest.mark.parametrize("sets,message", _bad_inputs())
def test_bad_input_exits_2_with_a_clear_message(tmp_path, sets, message):
    args = [x for s in sets for x in ("--set", s)]
    r = cxlbench("run", "--bench", "chase", *args, "--results-dir", str(tmp_path))
    assert r.returncode == 2
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert not list(tmp_path.iterdir()), "a refused run left a directory behind"


def test_list_shows_kernels_benchmarks_suites_options():
    r = cxlbench("list")
    assert r.returncode == 0
    for text in ("read", "chase", "bandwidth", "quick", "interleave:0-3", "avx512"):
        assert text in r.stdout
    assert "crash" not in r.stdout


def test_quick_suite_end_to_end(tmp_path):
    """The README's main job: `cxlbench run` with suites/quick.toml."""
    t0 = time.monotonic()
    r = cxlbench("run", "--results-dir", str(tmp_path), timeout=600)
    print(f"cxlbench run (quick): {time.monotonic() - t0:.1f} s")
    assert r.returncode == 0, r.stderr
    (run_dir,) = run_dirs(tmp_path)
    df = results.load(run_dir)
    assert set(df["benchmark"]) == {"chase", "bandwidth", "loaded_latency"}
    lat = df[df["metric"] == "latency"].groupby("size")["value"].median()
    assert lat.index.min() == 16 << 10 and lat.index.max() == 1 << 30
    assert lat[1 << 30] > lat[16 << 10]           # memory is slower than L1
    assert "bandwidth" in r.stdout and "latency" in r.stdout
    assert "cache levels from latency" in r.stdout
    levels = df.attrs["run"]["analysis"]["cache_levels"][0]["levels"]
    assert levels[0]["level"] == "L1" and levels[0]["detected"] > 0
