"""What a run folder guarantees whatever stops it: whole lines or nothing, one process at a
time, a resume that neither loses nor doubles a case, damaged files refused in one line,
workers that die with their parent, and a full disk that stops a run cleanly."""
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cxlbench import results, runner, stats
from cxlbench.cli import main
from cxlbench.report import run_table
from cxlbench.report.runs import load_runs
from cxlbench.errors import ResultsError, ResultsWarning, StorageError

from .conftest import cxlbench

THREE = """
[global]
repeat = 2
warmup = 0
[lat]
bench = "chase"
size = ["64K", "128K", "256K"]
loads = 20000
"""
TEST_KERNELS = {"CXLBENCH_TEST_KERNELS": "1"}


def make_run(tmp_path, suite=THREE) -> Path:
    suite_file = tmp_path / "three.toml"
    suite_file.write_text(suite)
    r = cxlbench("run", str(suite_file), "--results-dir", str(tmp_path / "r"))
    assert r.returncode == 0, r.stderr
    (run_dir,) = [p.parent for p in (tmp_path / "r").glob("*/*/run.json")]
    return run_dir


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished three-case run, copied by each test that damages it."""
    return make_run(tmp_path_factory.mktemp("finished"))


@pytest.fixture
def run_dir(finished, tmp_path):
    copy = tmp_path / "run"
    copy.mkdir()
    for name in results.FILES:
        (copy / name).write_bytes((finished / name).read_bytes())
    return copy


def journal_cases(run_dir: Path) -> list[str]:
    return [json.loads(x)["case"] for x in (run_dir / "cases.jsonl").read_text().splitlines()]


# ---- 2: a journal line cut short --------------------------------------------------------

def test_resume_after_a_cut_journal_line_runs_that_case_once(run_dir):
    text = (run_dir / "cases.jsonl").read_bytes()
    (run_dir / "cases.jsonl").write_bytes(text[:text.index(b"\n") + 1 + 200])  # 2nd line cut
    r = cxlbench("run", "--resume", str(run_dir), "--json")
    assert r.returncode == 0, r.stderr
    assert "journal line(s) cut short" in r.stderr and "rows of cases that did not finish" in r.stderr
    assert sorted(journal_cases(run_dir)) == ["lat/000", "lat/001", "lat/002"]
    assert len(json.loads(r.stdout)) == 3
    df = results.load(run_dir)
    assert df.groupby("case").size().tolist() == [2, 2, 2]
    # a second resume finds nothing to do
    again = cxlbench("run", "--resume", str(run_dir), "--json")
    assert again.returncode == 0 and "3 of 3 cases already finished" in again.stderr
    assert "] lat/" not in again.stderr


def test_a_case_with_rows_missing_runs_again(run_dir):
    lines = (run_dir / "results.csv").read_text().splitlines(keepends=True)
    (run_dir / "results.csv").write_text("".join(lines[:-1]))      # lat/002 lost a row
    run = results.Run.open(run_dir)
    notes = run.repair()
    assert "dropped lat/002 has 1 rows where its journal line says 2: it did not finish" \
        in notes
    assert sorted(run.finished()) == ["lat/000", "lat/001"]
    assert set(results.load(run_dir)["case"]) == {"lat/000", "lat/001"}
    assert run.repair() == []                                     # repaired is repaired


def test_short_writes_still_append_whole_lines(run_dir, monkeypatch):
    real_write = os.write
    monkeypatch.setattr(results.os, "write", lambda fd, data: real_write(fd, bytes(data[:7])))
    rows = (run_dir / "results.csv").read_text().splitlines(keepends=True)
    lines = (run_dir / "cases.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "results.csv").write_text("".join(rows[:-2]))         # lat/002 not run yet
    (run_dir / "cases.jsonl").write_text("".join(lines[:-1]))
    run = results.Run.open(run_dir)
    row = {c: "1" for c in run.columns} | {"case": "lat/002", "metric": "latency"}
    run.append("lat/002", [row, row], {"status": "ok", "summary": {"latency": {"n": 2}}})
    monkeypatch.undo()
    assert "lat/002" in run.finished()
    assert (run_dir / "cases.jsonl").read_text().endswith("}\n")
    assert (results.load(run_dir)["case"] == "lat/002").sum() == 2
    assert run.repair() == []


def test_a_failed_write_is_cut_back_and_says_so(run_dir, monkeypatch):
    """Rows written, then the journal runs out of room part-way: both files go back to
    their length before the case."""
    sizes = {n: (run_dir / n).stat().st_size for n in ("results.csv", "cases.jsonl")}
    real_write, calls = os.write, []

    def full_disk(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, data)              # the rows
        if len(calls) == 2:
            return real_write(fd, bytes(data[:10]))  # part of the journal line
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(results.os, "write", full_disk)
    run = results.Run.open(run_dir)
    row = {c: "1" for c in run.columns}
    with pytest.raises(StorageError, match="No space left on device"):
        run.append("extra/000", [row], {"status": "ok", "summary": {}})
    monkeypatch.undo()
    assert {n: (run_dir / n).stat().st_size for n in sizes} == sizes


# ---- 3: one process per run folder -------------------------------------------------------

def test_a_second_process_on_a_run_folder_is_refused(run_dir):
    lines = (run_dir / "cases.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "cases.jsonl").write_text(lines[0])          # two cases left to run
    holder = results.Run.open(run_dir, lock=True)
    r = cxlbench("run", "--resume", str(run_dir))
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: {run_dir} is in use by cxlbench pid {os.getpid()} on "
        f"{os.uname().nodename}; wait for it to finish, or stop it, before resuming"]
    assert journal_cases(run_dir) == ["lat/000"]                 # nothing ran
    os.close(holder._lock_fd)                                      # the holder ends
    r = cxlbench("run", "--resume", str(run_dir))
    assert r.returncode == 0, r.stderr
    assert sorted(journal_cases(run_dir)) == ["lat/000", "lat/001", "lat/002"]


# ---- 4: a results folder that cannot be written, a full disk ----------------------------

@pytest.mark.parametrize("where", ["/proc/cxlbench-results", "FILE"])
def test_unwritable_results_folder_is_refused_before_anything_runs(tmp_path, where):
    if where == "FILE":
        where = tmp_path / "a-file"
        where.write_text("not a folder")
    r = cxlbench("run", "--bench", "chase", "--set", "size=64K", "--results-dir", str(where))
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"error: cannot write results to {where}:")


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs, where the test may mount one (root, in CI)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)])


def _fill(disk: Path) -> None:
    """Write a file until the disk has no room left."""
    with open(disk / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC


MANY = THREE.replace('size = ["64K", "128K", "256K"]', 'size = { from = "64K", to = "768K", step = "64K" }')


def test_full_disk_stops_the_run_cleanly_and_it_resumes(tmp_path, tiny_disk):
    """The disk fills once the run has started: appends within a page already held
    succeed, and the case whose journal line needs a new page stops the run."""
    suite_file = tmp_path / "many.toml"
    suite_file.write_text(MANY)
    proc = subprocess.Popen([sys.executable, "-m", "cxlbench", "run", str(suite_file),
                             "--results-dir", str(tiny_disk / "r")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(tiny_disk.glob("r/*/*/run.json")):
        time.sleep(0.01)
    _fill(tiny_disk)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    assert "Traceback" not in err and "No space left on device" in err
    assert "cases saved; make room, then resume with" in err
    (run_dir,) = [p.parent for p in tiny_disk.glob("r/*/*/run.json")]
    saved = journal_cases(run_dir)
    assert len(saved) < 12          # an empty journal needs a page for its first line
    assert results.Run.open(run_dir).repair() == []       # whole lines, nothing to mend
    (tiny_disk / "filler").unlink()
    again = cxlbench("run", "--resume", str(run_dir))
    assert again.returncode == 0, again.stderr
    assert sorted(journal_cases(run_dir)) == [f"lat/{i:03d}" for i in range(12)]
    assert results.load(run_dir).groupby("case").size().tolist() == [2] * 12


def test_a_full_disk_refuses_the_run_before_it_starts(tmp_path, tiny_disk):
    _fill(tiny_disk)
    r = cxlbench("run", "--bench", "chase", "--set", "size=64K",
                 "--results-dir", str(tiny_disk / "r"))
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    where = tiny_disk / "r" / results.machine_id()
    assert line.startswith(f"error: cannot write results to {where}: No space left")


def test_a_run_that_cannot_be_created_leaves_nothing(tiny_disk):
    (tiny_disk / "r").mkdir()
    _fill(tiny_disk)
    (tiny_disk / "filler").write_bytes(b"\0" * (os.stat(tiny_disk / "filler").st_size
                                                - 3 * 4096))   # room for 3 small files
    meta = {"columns": ["run", "case", "metric", "value"], "cases": [],
            "big": "x" * 100_000}                               # run.json does not fit
    with pytest.raises(ResultsError, match="cannot start a run in .*No space left"):
        results.Run.create(tiny_disk / "r", meta)
    (machine,) = (tiny_disk / "r").iterdir()
    assert list(machine.iterdir()) == []


# ---- 5: damaged files --------------------------------------------------------------------

def _damage(run_dir: Path, how: str) -> None:
    meta = json.loads((run_dir / "run.json").read_text())
    if how == "empty results.csv":
        (run_dir / "results.csv").write_text("")
    elif how == "garbage results.csv":
        (run_dir / "results.csv").write_bytes(b"\x00\xff garbage,\n1,2,3\n")
    elif how == "missing results.csv":
        (run_dir / "results.csv").unlink()
    elif how == "missing cases.jsonl":
        (run_dir / "cases.jsonl").unlink()
    elif how == "run.json a list":
        (run_dir / "run.json").write_text("[1, 2]")
    elif how == "format_version 0":
        (run_dir / "run.json").write_text(json.dumps({**meta, "format_version": 0}))
    elif how == "cases not a list":
        (run_dir / "run.json").write_text(json.dumps({**meta, "cases": {"a": 1}}))
    elif how == "value not a number":
        text = (run_dir / "results.csv").read_text()
        (run_dir / "results.csv").write_text(text.replace(",latency,ns,", ",latency,ns,x", 1))
    elif how == "only run.json.tmp":
        (run_dir / "run.json").rename(run_dir / "run.json.tmp")


DAMAGE = {"empty results.csv": "results.csv is empty or damaged",
          "garbage results.csv": "results.csv is not a cxlbench results table",
          "missing results.csv": "results.csv is missing",
          "missing cases.jsonl": "cases.jsonl is missing",
          "run.json a list": "run.json is damaged: not a JSON object",
          "format_version 0": "format_version 0 is not one cxlbench has written",
          "cases not a list": "'cases' is missing or not a list",
          "value not a number": "is not a finite number",
          "only run.json.tmp": "interrupted as it was created"}


@pytest.mark.parametrize("how", list(DAMAGE))
def test_damaged_files_are_refused_in_one_line(run_dir, how):
    _damage(run_dir, how)
    with pytest.raises(ResultsError, match=DAMAGE[how]):
        results.load(run_dir)
    r = cxlbench("run", "--resume", str(run_dir))
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: ") and DAMAGE[how] in line


def test_a_row_cut_short_is_left_out_with_a_warning(run_dir):
    text = (run_dir / "results.csv").read_text()
    (run_dir / "results.csv").write_text(text[:-3])            # the last value loses digits
    with pytest.warns(ResultsWarning) as said:
        df = results.load(run_dir)
    assert [str(w.message).split(": left out ")[1] for w in said] == [
        "its last row was cut short",
        "lat/002 has 1 rows where its journal line says 2: it did not finish",
        "1 rows of cases that did not finish"]
    # lat/002 lost a row: it did not finish whole, so none of its rows count
    assert len(df) == 4 and set(df["case"]) == {"lat/000", "lat/001"}


# ---- 6 and 12: workers die with their parent; SIGKILL is not called out of memory ------

def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _workers(pid: int) -> list[int]:
    """The case processes of the run pid: children of its worker server (the child of
    pid that runs cxlbench.worker, not git describe or nvidia-smi)."""
    out = []
    for child in _children(pid):
        try:
            if b"cxlbench.worker" in Path(f"/proc/{child}/cmdline").read_bytes():
                out += _children(child)
        except OSError:
            pass
    return out


def _start_sleeping_run(tmp_path, *args):
    proc = subprocess.Popen([sys.executable, "-m", "cxlbench", "run", "--bench", "selftest",
                             "--set", "action=sleep", "--set", "repeat=1", *args,
                             "--results-dir", str(tmp_path / "r")],
                            env={**os.environ, **TEST_KERNELS},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _workers(proc.pid):
        time.sleep(0.05)
    (worker,) = _workers(proc.pid)
    time.sleep(1.0)                     # past the worker's imports: it is sleeping
    return proc, worker


def test_a_worker_dies_with_its_parent(tmp_path):
    proc, worker = _start_sleeping_run(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{worker}").exists():
        state = Path(f"/proc/{worker}/stat").read_text().split()[2] \
            if Path(f"/proc/{worker}/stat").exists() else "gone"
        if state == "Z":                          # dead, waiting for init to reap it
            break
        time.sleep(0.05)
    else:
        assert not Path(f"/proc/{worker}").exists(), "the worker outlived its parent"


def test_a_killed_worker_is_not_called_out_of_memory(tmp_path):
    proc, worker = _start_sleeping_run(tmp_path)
    os.kill(worker, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "FAILED: worker killed by SIGKILL" in err and "out of memory" not in err


def test_oom_is_named_only_when_the_counters_moved(monkeypatch):
    counts = iter([(5, 0), (6, 0)])
    monkeypatch.setattr(runner, "oom_kills", lambda: next(counts))
    # a case process the kernel killed (SIGKILL) as soon as it started
    monkeypatch.setattr(runner.Workers, "run", lambda self, case, timeout, tick: (-9, "", ""))
    case = runner.Case("x/000", "x", "chase", {"timeout": 10})
    assert "OOM killer" in runner.run_worker(case)["error"]
    counts = iter([(5, 1), (5, 1)])
    assert runner.run_worker(case)["error"] == "worker killed by SIGKILL"


@pytest.mark.serial      # it counts heartbeats a second apart
def test_a_long_case_says_it_is_still_running_until_its_timeout_kills_it(monkeypatch):
    """A case that runs past HEARTBEAT_S says so each time (a long case is not a hung
    one: the run's progress line goes quiet otherwise), and its timeout still holds."""
    monkeypatch.setenv("CXLBENCH_TEST_KERNELS", "1")
    monkeypatch.setattr(runner, "HEARTBEAT_S", 1.0)
    case = runner.Case("x/000", "x", "selftest", {"action": "sleep", "repeat": 1,
                                                  "warmup": 0, "timeout": 3.5})
    ticks = []
    t0 = time.monotonic()
    m = runner.run_worker(case, ticks.append)
    assert m == {"status": "failed", "error": "timed out after 3.5 s"}
    assert 3.5 <= time.monotonic() - t0 < 30
    # ticks at about 1, 2 and 3 s (a loaded machine may run a slice late: two at least)
    assert 2 <= len(ticks) <= 3 and ticks == sorted(ticks) and 0.9 < ticks[0] < ticks[-1] < 3.5


# ---- 7: the median's interval at the largest repeat -------------------------------------

def test_median_ci_at_the_largest_repeat():
    # n = 10000: the binomial(10000, 1/2) bounds are the 4902nd and 5099th values, which
    # the normal approximation (5000 -+ 1.96 * 50) also gives.
    lo, hi, coverage = stats.median_ci(range(10000))
    assert (lo, hi) == (4901, 5098) and 0.95 <= coverage < 0.96
    assert stats.summarize([float(i % 97) for i in range(10000)])["n"] == 10000


# ---- what the review found: damage the first tests did not try ------------------------

def test_a_new_run_is_locked_while_it_runs(tmp_path):
    proc, worker = _start_sleeping_run(tmp_path)
    try:
        (run_dir,) = [p.parent for p in (tmp_path / "r").glob("*/*/run.json")]
        r = cxlbench("run", "--resume", str(run_dir), env=TEST_KERNELS)
        assert r.returncode == 2 and f"is in use by cxlbench pid {proc.pid}" in r.stderr
    finally:
        proc.kill()
        proc.wait()


def test_duplicated_journal_lines_and_rows_run_the_case_again(run_dir):
    """Two processes that both ran lat/002 (before there was a lock): doubled rows."""
    rows = (run_dir / "results.csv").read_text().splitlines(keepends=True)
    lines = (run_dir / "cases.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "results.csv").write_text("".join(rows + rows[-2:]))
    (run_dir / "cases.jsonl").write_text("".join(lines + lines[-1:]))
    run = results.Run.open(run_dir)
    assert sorted(run.finished()) == ["lat/000", "lat/001"]
    assert any("lat/002 has 4 rows" in n for n in run.repair())
    assert len(results.load(run_dir)) == 4


@pytest.mark.parametrize("entry", [
    {"case": "lat/002", "status": "ok", "summary": {"latency": {"n": "2"}}},
    {"case": "lat/002", "summary": {"latency": {"n": 2}}},                 # no status
    {"case": "lat/002", "status": "ok", "summary": {}, "params": 5},
    {"case": "zz/000", "status": "ok", "summary": {}},                     # no such case
    ["lat/002"],
])
def test_journal_lines_that_are_not_entries_are_dropped(run_dir, entry):
    lines = (run_dir / "cases.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "cases.jsonl").write_text("".join(lines[:2]) + json.dumps(entry) + "\n")
    run = results.Run.open(run_dir)
    assert sorted(run.finished()) == ["lat/000", "lat/001"]
    assert "dropped 1 journal line(s) cut short or damaged" in run.repair()
    r = cxlbench("run", "--resume", str(run_dir))
    assert r.returncode == 0, r.stderr
    assert sorted(journal_cases(run_dir)) == ["lat/000", "lat/001", "lat/002"]


def test_a_header_that_is_not_the_columns_is_refused_before_appending(run_dir):
    text = (run_dir / "results.csv").read_text()
    header, rest = text.split("\n", 1)
    cols = header.split(",")
    k, i = cols.index("kernel"), cols.index("isa")
    cols[k], cols[i] = cols[i], cols[k]
    (run_dir / "results.csv").write_text(",".join(cols) + "\n" + rest)
    r = cxlbench("run", "--resume", str(run_dir))
    assert r.returncode == 2 and "its header is not the columns run.json lists" in r.stderr


def test_a_bom_before_the_header_is_read_through(run_dir):
    (run_dir / "results.csv").write_bytes(b"\xef\xbb\xbf" + (run_dir / "results.csv")
                                          .read_bytes())
    assert len(results.load(run_dir)) == 6
    assert results.Run.open(run_dir).repair() == []


@pytest.mark.parametrize("how", ["nan", "inf", "deep", "long number", "topology a string"])
def test_more_damage_is_one_line(run_dir, how):
    if how in ("nan", "inf"):
        text = (run_dir / "results.csv").read_text().splitlines(keepends=True)
        row = text[1].rsplit(",", 1)[0] + f",{how}\n"
        (run_dir / "results.csv").write_text("".join([text[0], row, *text[2:]]))
    elif how == "deep":
        (run_dir / "run.json").write_text("[" * 100000)
    elif how == "long number":
        (run_dir / "run.json").write_text('{"format_version": ' + "9" * 5000 + "}")
    else:
        meta = json.loads((run_dir / "run.json").read_text())
        (run_dir / "run.json").write_text(json.dumps({**meta, "topology": "x"}))
    with pytest.raises(ResultsError):
        results.load(run_dir)
    for args in (["run", "--resume", str(run_dir)],
                 ["report", str(run_dir), "-o", str(run_dir.parent / "out")]):
        r = cxlbench(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) <= 2      # report's progress line + error


def test_resume_checks_options_of_cases_repair_will_run_again(small_run_of_format_1):
    """A format-1 run whose rows are gone: every case runs again, and this cxlbench's
    chase has options the old one did not, so the resume refuses before touching it,
    rather than record the cases as failed."""
    run_dir = small_run_of_format_1
    header = (run_dir / "results.csv").read_text().splitlines(keepends=True)[0]
    (run_dir / "results.csv").write_text(header)
    journal = (run_dir / "cases.jsonl").read_text()
    r = cxlbench("run", "--resume", str(run_dir))
    assert r.returncode == 2 and "options differ from this one's" in r.stderr
    assert (run_dir / "cases.jsonl").read_text() == journal


@pytest.fixture
def small_run_of_format_1(tmp_path):
    import shutil
    from .test_report import EXAMPLE
    run_dir = tmp_path / "vm" / EXAMPLE.name
    shutil.copytree(EXAMPLE, run_dir)
    return run_dir


def test_non_finite_kernel_values_fail_the_case():
    m = {"status": "ok", "units": {"bandwidth": "GB/s"},
         "reps": [{"bandwidth": 1.0}, {"bandwidth": float("inf")}]}
    out = runner.finite_or_failed(m)
    assert out["status"] == "failed" and out["reps"] == []
    assert out["error"] == "bandwidth came out as inf, not a finite number"
    assert runner.finite_or_failed({**m, "reps": [{"bandwidth": 2.0}]})["status"] == "ok"


# ---- reading: a whole run by pandas alone, anything else row by row ---------------------

def _careful(run_dir: Path):
    """The frame and journal as the row-by-row path reads them."""
    import io

    import pandas as pd
    journal, header, rows, _ = results.Run.open(run_dir)._consistent()
    return pd.read_csv(io.StringIO(results._csv_text([header, *rows]))), journal


def _quoted_newline(run_dir: Path) -> None:
    """A text field holding a CR LF inside its quotes (the csv module writes it so)."""
    import csv
    import io
    with open(run_dir / "results.csv", newline="") as f:
        rows = list(csv.reader(f))
    rows[1][rows[0].index("verified")] = "two\r\nlines"
    buf = io.StringIO(newline="")
    csv.writer(buf).writerows(rows)
    (run_dir / "results.csv").write_text(buf.getvalue(), newline="")


@pytest.mark.parametrize("how", ["as written", "LF line ends", "a quoted CR LF"])
def test_a_whole_run_is_read_by_pandas_alone_as_the_careful_path_reads_it(run_dir, how):
    if how == "LF line ends":
        data = (run_dir / "results.csv").read_bytes()
        (run_dir / "results.csv").write_bytes(data.replace(b"\r\n", b"\n"))
    elif how == "a quoted CR LF":
        _quoted_newline(run_dir)
    fast = results.Run.open(run_dir)._frame_whole()
    assert fast is not None
    df, journal = _careful(run_dir)
    assert fast[0].equals(df) and fast[1] == journal
    assert results.load(run_dir).equals(df)


def _edit_rows(run_dir: Path, change) -> None:
    lines = (run_dir / "results.csv").read_text().splitlines(keepends=True)
    (run_dir / "results.csv").write_text("".join(change(lines)))


UNUSUAL = {
    "last row cut": lambda d: _edit_rows(d, lambda ls: [*ls[:-1], ls[-1][:-3]]),
    "a spreadsheet's BOM": lambda d: _edit_rows(d, lambda ls: ["\ufeff" + ls[0], *ls[1:]]),
    "a row short of its value": lambda d: _edit_rows(
        d, lambda ls: [ls[0], ls[1].rsplit(",", 1)[0] + "\n", *ls[2:]]),
    "a row with a field more": lambda d: _edit_rows(
        d, lambda ls: [ls[0], ls[1].rstrip("\r\n") + ",7\r\n", *ls[2:]]),
    "a row twice": lambda d: _edit_rows(d, lambda ls: [*ls, ls[-1]]),
    "a blank line": lambda d: _edit_rows(d, lambda ls: [ls[0], "  \r\n", *ls[1:]]),
    "values true and false": lambda d: _edit_rows(d, lambda ls: [ls[0], *(
        x.rsplit(",", 1)[0] + (",True\r\n" if i % 2 else ",False\r\n")
        for i, x in enumerate(ls[1:]))]),
    "an infinite value": lambda d: _edit_rows(
        d, lambda ls: [ls[0], ls[1].rsplit(",", 1)[0] + ",inf\n", *ls[2:]]),
    "a damaged journal line": lambda d: (d / "cases.jsonl").write_text(
        (d / "cases.jsonl").read_text() + "{not json\n"),
}


@pytest.mark.parametrize("how", list(UNUSUAL))
def test_anything_unusual_is_left_to_the_careful_path(run_dir, how):
    """What pandas would read without a word (a short row filled with NaN, a duplicate
    row, a line cut short) is left to the row-by-row path, which says what it drops or
    refuses the run."""
    UNUSUAL[how](run_dir)
    assert results.Run.open(run_dir)._frame_whole() is None


# ---- trust at the edges: links, other machines, dry runs, hand-edited run.json ----------

def _snapshot(run_dir: Path) -> dict:
    """Every file of the run but the lock, which a refused resume may have made."""
    return {p.name: (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(run_dir.iterdir()) if p.name != ".lock"}


def _one_left(run_dir: Path) -> None:
    """lat/002 not finished: its journal line and rows gone, so a resume has work."""
    rows = (run_dir / "results.csv").read_text().splitlines(keepends=True)
    lines = (run_dir / "cases.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "results.csv").write_text("".join(rows[:-2]))
    (run_dir / "cases.jsonl").write_text("".join(lines[:-1]))


@pytest.mark.parametrize("how", ["symlink", "hard link", "fifo"])
def test_resume_never_writes_through_what_stands_at_the_lock(run_dir, tmp_path, how):
    """Anyone who can write to a shared results folder could plant a link at .lock: the
    resume must not truncate and write the file it points at."""
    victim = tmp_path / "precious"
    victim.write_text("precious\n")
    (run_dir / ".lock").unlink(missing_ok=True)
    if how == "symlink":
        (run_dir / ".lock").symlink_to(victim)
    elif how == "hard link":
        os.link(victim, run_dir / ".lock")
    else:
        os.mkfifo(run_dir / ".lock")
    _one_left(run_dir)
    r = cxlbench("run", "--resume", str(run_dir), timeout=60)
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert f"{run_dir / '.lock'}" in line and "not cxlbench's lock file" in line
    assert victim.read_text() == "precious\n"
    assert journal_cases(run_dir) == ["lat/000", "lat/001"]          # nothing ran


@pytest.mark.parametrize("name", ["results.csv", "cases.jsonl", "run.json"])
def test_resume_refuses_a_link_at_a_run_file(run_dir, tmp_path, name):
    _one_left(run_dir)
    elsewhere = tmp_path / f"elsewhere-{name}"
    elsewhere.write_bytes((run_dir / name).read_bytes())
    (run_dir / name).unlink()
    (run_dir / name).symlink_to(elsewhere)
    before = elsewhere.read_bytes()
    r = cxlbench("run", "--resume", str(run_dir))
    assert r.returncode == 2, r.stderr
    assert f"{run_dir / name} is a symbolic link" in r.stderr
    assert elsewhere.read_bytes() == before


def test_a_link_planted_at_a_temporary_name_is_replaced_not_followed(run_dir, tmp_path):
    """run.json is rewritten through run.json.tmp: a link left there goes, its target
    stays as it was."""
    _one_left(run_dir)
    victim = tmp_path / "precious"
    victim.write_text("precious\n")
    (run_dir / "run.json.tmp").symlink_to(victim)
    r = cxlbench("run", "--resume", str(run_dir))
    assert r.returncode == 0, r.stderr
    assert victim.read_text() == "precious\n"
    assert not (run_dir / "run.json.tmp").exists()
    assert sorted(journal_cases(run_dir)) == ["lat/000", "lat/001", "lat/002"]


@pytest.mark.parametrize("what", ["dangling", "loop", "file", "folder"])
def test_a_link_at_the_machine_folder_is_refused_naming_it(tmp_path, what):
    root = tmp_path / "r"
    root.mkdir()
    base = root / results.machine_id()
    target = {"dangling": tmp_path / "gone", "loop": base, "file": tmp_path / "a-file",
              "folder": tmp_path / "their-folder"}[what]
    if what == "file":
        target.write_text("x")
    elif what == "folder":
        target.mkdir()
    base.symlink_to(target)
    r = cxlbench("run", "--bench", "chase", "--set", "size=64K", "--results-dir", str(root))
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"error: cannot write results to {base}: it is a symbolic link "
                           f"to {target}")
    said = {"dangling": "points at nothing", "loop": "loops", "file": "points at a file",
            "folder": "link, or give another --results-dir"}[what]
    assert said in line
    if what == "folder":
        assert list(target.iterdir()) == []          # no run was made through the link


def test_a_file_at_the_machine_folder_is_named(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    (root / results.machine_id()).write_text("x")
    r = cxlbench("run", "--bench", "chase", "--set", "size=64K", "--results-dir", str(root))
    assert r.returncode == 2
    assert (f"cannot write results to {root / results.machine_id()}: it is a file, not a "
            "folder") in r.stderr


def _as_if_from(run_dir: Path, host: str) -> None:
    meta = json.loads((run_dir / "run.json").read_text())
    meta["machine_id"] = host
    meta["topology"]["machine"]["hostname"] = host
    meta["topology"]["cpu"]["model"] = "Lab CPU 9000"
    (run_dir / "run.json").write_text(json.dumps(meta))


def test_a_resume_on_another_machine_is_refused(run_dir):
    _one_left(run_dir)
    _as_if_from(run_dir, "lab7")
    before = _snapshot(run_dir)
    r = cxlbench("run", "--resume", str(run_dir))
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "started on another machine" in line and "'lab7'" in line
    assert f"'{results.machine_id()}'" in line and "--other-machine" in line
    assert _snapshot(run_dir) == before


def test_other_machine_finishes_it_and_records_the_mix(run_dir):
    _one_left(run_dir)
    _as_if_from(run_dir, "lab7")
    r = cxlbench("run", "--resume", str(run_dir), "--other-machine")
    assert r.returncode == 0, r.stderr
    assert "was started on another machine" in r.stderr
    meta = json.loads((run_dir / "run.json").read_text())
    (here,) = meta["resumed_elsewhere"]
    assert here["machine id"] == results.machine_id() and here["CPU"] != "Lab CPU 9000"
    entries = {json.loads(x)["case"]: json.loads(x)
               for x in (run_dir / "cases.jsonl").read_text().splitlines()}
    assert entries["lat/002"]["machine"] == results.machine_id()
    (row,) = run_table(load_runs([run_dir])).rows
    assert row[1] == f"lab7, then {results.machine_id()} (resumed there)"
    # the run is still lab7's: a later resume here needs the flag again
    _one_left(run_dir)
    r = cxlbench("run", "--resume", str(run_dir))
    assert r.returncode == 2 and "'lab7'" in r.stderr


def test_resume_dry_run_lists_what_is_left_and_changes_nothing(run_dir):
    _one_left(run_dir)
    (run_dir / ".lock").unlink(missing_ok=True)
    before = _snapshot(run_dir)
    r = cxlbench("run", "--resume", str(run_dir), "--dry-run")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:2] == ["lat/002", "chase"] and len(r.stdout.splitlines()) == 1
    assert "2 of 3 cases finished" in r.stderr
    assert _snapshot(run_dir) == before and not (run_dir / ".lock").exists()


@pytest.mark.parametrize("args", [["--var", "node=1"], ["--results-dir", "elsewhere"],
                                  ["--max-cases", "5"], ["--set", "size=1M"]])
def test_resume_refuses_what_it_would_ignore(run_dir, args):
    _one_left(run_dir)
    before = _snapshot(run_dir)
    r = cxlbench("run", "--resume", str(run_dir), *args)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: --resume re-runs the recorded suite") and args[0] in line
    assert _snapshot(run_dir) == before


def _edit_case(run_dir: Path, **params) -> None:
    meta = json.loads((run_dir / "run.json").read_text())
    meta["cases"][2]["params"].update(params)
    (run_dir / "run.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("edit, message", [
    ({"repeat": 1000000000}, "option 'repeat': 1000000000 is above the maximum 10000"),
    ({"size": "abc"}, "option 'size': "),
    ({"timeout": float("nan")}, "option 'timeout': nan is not a finite number"),
    ({"size": "1M"}, "option 'size': '1M' is not a value cxlbench records"),
    ({"duplicate": True}, "lists 1 case id(s) more than once (lat/001)"),
])
def test_a_resumed_run_s_cases_are_checked_as_a_suite_s(run_dir, edit, message):
    _one_left(run_dir)
    if "duplicate" in edit:
        meta = json.loads((run_dir / "run.json").read_text())
        meta["cases"][2]["id"] = "lat/001"
        (run_dir / "run.json").write_text(json.dumps(meta))
    else:
        _edit_case(run_dir, **edit)
    before = _snapshot(run_dir)
    r = cxlbench("run", "--resume", str(run_dir))
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"error: cannot resume {run_dir}") and message in line, line
    assert _snapshot(run_dir) == before


def test_a_header_cut_short_is_rebuilt_from_run_json(run_dir):
    """Killed as the run was made: results.csv holds part of its header, and the run
    resumes from its columns (run.json lists them) rather than being refused."""
    header = (run_dir / "results.csv").read_text().splitlines()[0]
    (run_dir / "results.csv").write_text(header[:len(header) // 2])
    (run_dir / "cases.jsonl").write_text("")
    r = cxlbench("run", "--resume", str(run_dir))
    assert r.returncode == 0, r.stderr
    assert "dropped its header row, cut short, from run.json's columns" in r.stderr
    assert results.load(run_dir).groupby("case").size().tolist() == [2, 2, 2]
    # a header that is no prefix of the columns is damage, still refused
    (run_dir / "results.csv").write_text("nonsense,header")
    assert cxlbench("run", "--resume", str(run_dir)).returncode == 2


def test_sigterm_says_how_to_resume(tmp_path):
    suite_file = tmp_path / "many.toml"
    suite_file.write_text(MANY)
    root = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "cxlbench", "run", str(suite_file),
                             "--results-dir", str(root)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(root.glob("*/*/cases.jsonl")):
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    (run_dir,) = [p.parent for p in root.glob("*/*/run.json")]
    assert "terminated (SIGTERM); finished cases are saved" in err
    assert f"cxlbench run --resume {run_dir}" in err
    assert cxlbench("run", "--resume", str(run_dir)).returncode == 0


@pytest.mark.parametrize("change", [
    {"case": ["lat/002"]},                                  # a list where an id was
    {"info": True},                                         # the summary reads info's model
    {"kernel": 5}, {"cpus": "0-3"}, {"estimate_s": "x"}, {"seconds": None},
    {"summary": {"latency": {"n": 2, "unit": 5}}},
    {"summary": {"latency": {"n": 2, "unit": "ns", "median": "1.5"}}},
    {"info": {"tiers": ["x"]}},
], ids=lambda change: ",".join(change))
def test_journal_lines_of_the_wrong_types_are_dropped(run_dir, change):
    """A line whose fields are not of the types the runner writes is damaged: dropped (its
    case runs again), never read into a summary or a report."""
    lines = (run_dir / "cases.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "cases.jsonl").write_text(
        "".join(lines[:2]) + json.dumps({**json.loads(lines[2]), **change}) + "\n")
    run = results.Run.open(run_dir)
    assert sorted(run.finished()) == ["lat/000", "lat/001"]
    assert "dropped 1 journal line(s) cut short or damaged" in run.repair()


@pytest.mark.parametrize("damage, said", [
    (lambda m: m.pop("suite"), "run.json lacks the suite's name, which cxlbench records as a "
                               "run starts"),
    (lambda m: m["topology"]["cpu"].pop("caches"), "run.json lacks the CPU's caches"),
    (lambda m: m.update(emulated={"qemu": "7.2"}), "run.json lacks the emulated topology's "
                                                   "name"),
    (lambda m: m["topology"].update(nodes=None), "run.json is damaged: its topology's 'nodes' "
                                                 "has the wrong type"),
    (lambda m: m["topology"]["nodes"][0].update(id="0"), "its topology's nodes are not {id, "
                                                         "cpus, mem_total...}"),
    (lambda m: m["topology"]["cpu"]["caches"].append({"level": "L1"}), "its topology's CPU "
                                                                       "caches are not"),
    (lambda m: m.update(estimates={"cases": {"lat/000": "1 s"}}), "run.json is damaged: its "
                                                                  "estimates or fitted cases"),
    (lambda m: m.update(load=5), "run.json is damaged: 'load' has the wrong type"),
    # a finished case's values go into the summary's analysis
    (lambda m: m["cases"][1]["params"].update(size=None), "run.json's case lat/001: option "
                                                          "'size': not a size: None"),
], ids=["no-suite", "no-caches", "emulated-unnamed", "nodes-null", "node-id-text",
        "cache-level-text", "estimate-text", "load-a-number", "finished-size-null"])
def test_what_a_resume_and_its_summary_read_of_run_json_is_checked_first(run_dir, damage,
                                                                          said):
    """A resume of a finished run (nothing left to measure) still repairs, summarises and
    analyses it from run.json: what those read is refused, in one line, before anything
    is rewritten, not met as a traceback after."""
    meta = json.loads((run_dir / "run.json").read_text())
    damage(meta)
    (run_dir / "run.json").write_text(json.dumps(meta))
    before = {name: (run_dir / name).read_bytes() for name in results.FILES}
    r = CliRunner().invoke(main, ["run", "--resume", str(run_dir)])
    assert r.exit_code == 2 and r.stderr.startswith("error: "), (r.output, r.exc_info)
    assert said in r.stderr and "\n" not in r.stderr.strip()
    assert {name: (run_dir / name).read_bytes() for name in results.FILES} == before


def test_a_recorded_option_of_null_is_refused_on_resume(run_dir):
    """A case left to run whose run.json value is null (a float option here) is refused
    naming the option, before anything runs."""
    lines = (run_dir / "cases.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "cases.jsonl").write_text("".join(lines[:-1]))     # lat/002 left to run
    meta = json.loads((run_dir / "run.json").read_text())
    meta["cases"][2]["params"]["timeout"] = None
    (run_dir / "run.json").write_text(json.dumps(meta))
    r = CliRunner().invoke(main, ["run", "--resume", str(run_dir), "--dry-run"])
    assert r.exit_code == 2, r.output
    assert "run.json's case lat/002: option 'timeout': null is not a number" in r.stderr
