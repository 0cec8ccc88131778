"""`cxlbench fleet` in its default form, a SLURM job array of one task per machine, without
a SLURM cluster: task ids as SLURM writes them, the shared-folder check, the time limit,
the array's script (run by bash, srun stood in for), `fleet task` choosing its run and
keeping the pending tasks off measured machines, and status and resume over the answers
SLURM 22.05 gives (scontrol, sacct, sinfo and sbatch stood in for by scripts printing
them). tests/test_fleet_slurm.py runs an array against real daemons."""
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cxlbench import PACKAGE_PARENT, results, suite
from cxlbench.errors import UserError
from cxlbench.fleet import record, script, slurm, status, submit, task
from cxlbench.tiering import calibration

from .conftest import cxlbench
from .test_fleet import NO_SLURM_ENV, fake, sbatch_lines, srun_recorder, write_suite

PY = sys.executable

# ---------------------------------------------------------------------------------------
# SLURM stood in for. Every fake reads its answers from files in one folder (FAKE_SLURM):
#   show.json     {job id: the lines `scontrol show job -o ID` prints}; a job not there is
#                 "Invalid job id specified"; "down" in the folder: the controller is down
#   sacct.json    {job id: the lines sacct prints}; absent: no accounting
#   sinfo.json    [[partition as %P prints it ("debug*" the default), node list,
#                   {node: features}], ...]
#   states.json   {node: its state as sinfo's %t prints it}; a node not there is idle
#   updates.jsonl each `scontrol update`'s arguments, one line each
#   submitted.json each sbatch: [script path, its text]; job ids 100, 101 ...

COMMON = r"""
import re
from pathlib import Path
D = Path(os.environ["FAKE_SLURM"])

def expand(spec):
    out = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", spec):
        m = re.fullmatch(r"(.*)\[(.*)\]", part)
        if not m:
            out.append(part)
            continue
        for r in m[2].split(","):
            lo, _, hi = r.partition("-")
            out += [f"{m[1]}{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out

def compress(names):
    groups = {}
    for n in names:
        m = re.fullmatch(r"(.*?)(\d+)", n)
        groups.setdefault(m[1] if m else n, []).append(int(m[2]) if m else None)
    out = []
    for prefix, nums in groups.items():
        if None in nums:
            out.append(prefix)
            continue
        if len(nums) == 1:
            out.append(f"{prefix}{nums[0]}")
            continue
        runs = []
        for x in sorted(nums):
            if runs and x == runs[-1][1] + 1:
                runs[-1][1] = x
            else:
                runs.append([x, x])
        out.append(prefix + "[" + ",".join(str(a) if a == b else f"{a}-{b}"
                                           for a, b in runs) + "]")
    return ",".join(out)

def answers(name, default=None):
    try:
        return json.loads((D / name).read_text())
    except FileNotFoundError:
        return default
"""

SCONTROL = COMMON + r"""
a = sys.argv[1:]
if a[:2] == ["show", "hostnames"]:
    print("\n".join(expand(a[2])))
elif a[:2] == ["show", "hostlist"]:
    print(compress(a[2].split(",")))
elif a[:2] == ["show", "config"]:
    print("ClusterName             = c1")
elif a[:2] == ["show", "job"]:
    if (D / "down").exists():
        sys.exit("slurm_load_jobs error: Unable to contact slurm controller (connect failure)")
    text = answers("show.json", {}).get(a[-1])
    if text is None:
        sys.exit("slurm_load_jobs error: Invalid job id specified")
    print(text)
elif a[0] == "update":
    with open(D / "updates.jsonl", "a") as f:
        f.write(json.dumps(a) + "\n")
    said = answers("update.json")          # [exit code, what it prints on stderr]
    if said:
        print(said[1], file=sys.stderr)
        sys.exit(said[0])
else:
    sys.exit(f"scontrol (fake): {a} not stood in for")
"""

SACCT = COMMON + r"""
rows = answers("sacct.json")
if rows is None:
    sys.exit("sacct: error: Slurm accounting storage is disabled")
with open(D / "sacct-args.jsonl", "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
print(rows.get(sys.argv[sys.argv.index("-j") + 1], ""))
"""

SINFO = COMMON + r"""
a = sys.argv[1:]
part = a[a.index("-p") + 1] if "-p" in a else None
for name, nodes, features in answers("sinfo.json"):
    if part not in (None, name.rstrip("*")):
        continue
    if "-N" in a:
        states = answers("states.json", {})
        for n in expand(nodes):
            print(f"{n} {states.get(n, 'idle')}" if "%N %t" in a else
                  f"{n} {features.get(n, '(null)')}")
    else:
        print(f"{name} {nodes}")
"""

SBATCH = COMMON + r"""
done = answers("submitted.json", [])
done.append([sys.argv[-1], open(sys.argv[-1]).read()])
(D / "submitted.json").write_text(json.dumps(done))
print(99 + len(done))
"""


class Slurm:
    """The fake SLURM's folder, and the environment that finds its commands first."""

    def __init__(self, tmp_path: Path, partitions=(("debug*", "n[1-4]", {}),)):
        self.dir = tmp_path / "slurm"
        self.dir.mkdir()
        self.bin = tmp_path / "bin"
        for name, body in (("scontrol", SCONTROL), ("sacct", SACCT), ("sinfo", SINFO),
                           ("sbatch", SBATCH)):
            fake(self.bin, name, body)
        self.write("sinfo.json", [list(p) for p in partitions])
        self.env = {**NO_SLURM_ENV, "PATH": f"{self.bin}:{os.environ['PATH']}",
                    "FAKE_SLURM": str(self.dir)}

    def write(self, name, data) -> None:
        (self.dir / name).write_text(json.dumps(data))

    def show(self, **jobs: str) -> None:
        """What `scontrol show job -o ID` prints, by job: show(j100=...)."""
        self.write("show.json", {k[1:]: v for k, v in jobs.items()})

    def sacct(self, **jobs: str) -> None:
        self.write("sacct.json", {k[1:]: v for k, v in jobs.items()})

    def updates(self) -> list[list[str]]:
        try:
            return [json.loads(line) for line in
                    (self.dir / "updates.jsonl").read_text().splitlines()]
        except FileNotFoundError:
            return []

    def submitted(self) -> list[list[str]]:
        try:
            return json.loads((self.dir / "submitted.json").read_text())
        except FileNotFoundError:
            return []

    def use(self, monkeypatch) -> "Slurm":
        for key, value in self.env.items():
            monkeypatch.setenv(key, value)
        return self


def task_line(job, task, state, nodes="", reason="None", code="0:0", array=100):
    """One array task's record as `scontrol show job -o` prints it (22.05)."""
    return (f"JobId={job} ArrayJobId={array} ArrayTaskId={task} JobName=cxlbench-tiny "
            f"UserId=root(0) GroupId=root(0) Priority=1 JobState={state} Reason={reason} "
            f"Dependency=(null) Requeue=0 Restarts=0 BatchFlag=1 ExitCode={code} "
            f"RunTime=00:00:05 TimeLimit=00:15:00 Partition=debug NodeList={nodes} "
            f"BatchHost={nodes or '(null)'} NumNodes=1")


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """One finished run of the tiny suite, made once and copied where a test needs a run."""
    d = tmp_path_factory.mktemp("template")
    write_suite(d)
    r = cxlbench("run", str(d / "tiny.toml"), "--results-dir", str(d / "r"), env=NO_SLURM_ENV)
    assert r.returncode == 0, r.stderr
    (run,) = [p.parent for p in (d / "r").glob("*/*/run.json")]
    return run


def place(template: Path, results_dir: Path, seq: int, *, array_job="100", task=0,
          node="n1", job_id=None, finished=2, seconds=None, name=None) -> Path:
    """A copy of the template run in RESULTS/<this machine>/, made by the array task named
    (run.json's slurm fields), with `finished` of its 2 cases in the journal."""
    dest = Path(results_dir) / results.machine_id() / f"{template.name}-{seq:02d}"
    shutil.copytree(template, dest)
    meta = json.loads((dest / "run.json").read_text())
    meta["slurm"] = None if array_job is None else {
        "job_id": job_id or str(int(array_job) + 1 + task), "array_job_id": array_job,
        "array_task_id": str(task), "node": node, "node_index": "0", "partition": "debug",
        "cluster": None}
    if name:
        meta["suite"]["name"] = name
    (dest / "run.json").write_text(json.dumps(meta))
    lines = [json.loads(line) for line in (dest / "cases.jsonl").read_text().splitlines()]
    if seconds is not None:
        for line, s in zip(lines, seconds):
            line["seconds"] = s
    (dest / "cases.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines[:finished]))
    return dest


def submit_array(tmp_path, fake_slurm: Slurm, *args) -> Path:
    """`cxlbench fleet submit` of the tiny suite as an array; the fleet's folder."""
    shared = tmp_path / "shared"
    r = cxlbench("fleet", "submit", str(write_suite(tmp_path)), "--local-results",
                 "--results", str(shared), *args, env=fake_slurm.env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "100\n"
    (fleet_dir,) = (shared / "fleet").iterdir()
    return fleet_dir.resolve()


def by_task(found) -> dict:
    return {m["task"] if isinstance(m, dict) else m.task: m for m in found}


# --- 1. task ids as SLURM writes them, and the array's tasks as it tells them -----------

@pytest.mark.parametrize("spec, ids", [
    ("0-9%2", list(range(10))),
    ("[3,5-7]", [3, 5, 6, 7]),
    ("1-9:2", [1, 3, 5, 7, 9]),
    ("0-6:3%1", [0, 3, 6]),
    ("4", [4]),
    ("[2-9%2]", list(range(2, 10))),
    ("1-2%1", [1, 2]),
    ("0,2-4,7", [0, 2, 3, 4, 7]),
])
def test_task_ids_reads_slurms_forms(spec, ids):
    assert slurm.task_ids(spec) == ids


@pytest.mark.parametrize("ids, spec", [
    (range(3), "0-2"), ([3, 17], "3,17"), ([7, 0, 2, 3, 4, 0], "0,2-4,7"), ([5], "5"),
    ([1, 2], "1-2"), (range(1000), "0-999"), ([9, 8, 1, 11, 10, 3], "1,3,8-11"),
])
def test_task_spec_and_back(ids, spec):
    assert slurm.task_spec(ids) == spec
    assert slurm.task_ids(spec) == sorted(set(ids))
    assert slurm.task_ids(f"[{spec}%4]") == sorted(set(ids))        # as sacct writes it


def test_array_tasks_from_scontrol_one_record_a_task(tmp_path, monkeypatch):
    """Task 0 running, tasks 1-2 pending together under the %1 limit (one record for
    both, as SLURM keeps them): each task comes back on its own."""
    fs = Slurm(tmp_path).use(monkeypatch)
    fs.show(j100="\n".join([
        task_line(100, "1-2%1", "PENDING", reason="JobArrayTaskLimit"),
        task_line(101, 0, "RUNNING", nodes="n1")]))
    tasks = slurm.array_tasks("100")
    assert tasks == {
        0: {"state": "RUNNING", "reason": None, "nodes": ["n1"], "exit_code": "0:0",
            "job_id": "101"},
        1: {"state": "PENDING", "reason": "JobArrayTaskLimit", "nodes": [],
            "exit_code": "0:0", "job_id": "100"},
        2: {"state": "PENDING", "reason": "JobArrayTaskLimit", "nodes": [],
            "exit_code": "0:0", "job_id": "100"}}
    # A task on a node list SLURM writes compressed.
    fs.show(j100=task_line(100, "0", "RUNNING", nodes="n[3-4]"))
    assert slurm.array_tasks("100")[0]["nodes"] == ["n3", "n4"]


def test_array_tasks_from_sacct_once_the_controller_forgot(tmp_path, monkeypatch):
    fs = Slurm(tmp_path).use(monkeypatch)
    fs.show()                                             # "Invalid job id specified"
    fs.sacct(j100="\n".join(["100_0|COMPLETED|0:0|n1|101",
                             "100_1|FAILED|2:0|n2|102",
                             "100_10|CANCELLED by 0|0:0|None assigned|110",
                             "100_[2-9%2]|PENDING|0:0|None assigned|100",
                             "1000_0|COMPLETED|0:0|n9|1000"]))   # another job: not this one
    tasks = slurm.array_tasks("100", "c1", "2026-12-01T11:00:00+0000")
    assert sorted(tasks) == list(range(11))
    assert tasks[0] == {"state": "COMPLETED", "reason": None, "nodes": ["n1"],
                        "exit_code": "0:0", "job_id": "101"}
    assert (tasks[1]["state"], tasks[1]["exit_code"], tasks[1]["nodes"]) == \
        ("FAILED", "2:0", ["n2"])
    assert all(tasks[t]["state"] == "PENDING" and tasks[t]["nodes"] == []
               for t in range(2, 10))
    assert (tasks[10]["state"], tasks[10]["reason"], tasks[10]["nodes"]) == \
        ("CANCELLED", "CANCELLED by 0", [])
    (args,) = [json.loads(line) for line in
               (fs.dir / "sacct-args.jsonl").read_text().splitlines()]
    assert args[args.index("-j") + 1] == "100" and args[args.index("-M") + 1] == "c1"
    assert "-S" in args and args[-2:] == ["-o", "JobID,State,ExitCode,NodeList,JobIDRaw"]
    assert slurm.array_tasks("555") is None                # accounting has no such job
    (fs.dir / "sacct.json").unlink()                       # no accounting at all
    assert slurm.array_tasks("100") is None
    (fs.dir / "down").touch()                              # the controller down: an error
    with pytest.raises(slurm.SlurmError, match="Unable to contact slurm controller"):
        slurm.array_tasks("100")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))  # no SLURM here: not known
    assert slurm.array_tasks("100") is None


def test_sinfo_gives_the_partitions_machines(tmp_path, monkeypatch):
    Slurm(tmp_path, partitions=[("debug*", "n[1-4]", {"n1": "cxl,ddr5", "n3": "cxl"}),
                                ("big", "b[1-2]", {"b2": "ddr5"})]).use(monkeypatch)
    assert slurm.nodes_of(None) == ["n1", "n2", "n3", "n4"]
    assert slurm.nodes_of("big") == ["b1", "b2"]
    assert slurm.nodes_with("debug", "cxl") == ["n1", "n3"]
    assert slurm.nodes_with("debug", "ddr") == []          # a feature, not a prefix of one
    assert slurm.nodes_with(None, "ddr5") == ["n1", "b2"]


def test_exclude_from_pending_reads_scontrols_answer(tmp_path, monkeypatch):
    """Running tasks cannot be changed and say so, which is no failure; anything else is
    SLURM's refusal, returned."""
    fs = Slurm(tmp_path).use(monkeypatch)
    assert slurm.exclude_from_pending("1", ["vm"]) is None
    fs.write("update.json", [1, "1_0: Job is no longer pending execution\n1_1-2: No error"])
    assert slurm.exclude_from_pending("1", ["n2", "n1", "n3"]) is None
    fs.write("update.json", [1, "slurm_update error: Invalid node name specified"])
    assert slurm.exclude_from_pending("1", ["x1"]) == \
        "slurm_update error: Invalid node name specified"
    assert fs.updates() == [["update", "JobId=1", "ExcNodeList=vm"],
                            ["update", "JobId=1", "ExcNodeList=n[1-3]"],
                            ["update", "JobId=1", "ExcNodeList=x1"]]


# --- 2. a results folder every machine sees ----------------------------------------------

MOUNTS = """/dev/vda / ext4 rw,relatime 0 0
tmpfs /dev/shm tmpfs rw 0 0
server:/export /shared nfs4 rw,vers=4.2 0 0
tmpfs /scratch tmpfs rw,size=1g 0 0
tmpfs /shared/fast tmpfs rw 0 0
"""


@pytest.mark.parametrize("path, why", [
    ("/tmp", "under /tmp"), ("/tmp/results", "under /tmp"), ("/var/tmp/x", "under /var/tmp"),
    ("/dev/shm", "under /dev/shm"), ("/dev/shm/r", "under /dev/shm"),
    ("/run/user/0/r", "under /run"), ("/scratch", "on tmpfs"), ("/scratch/me/r", "on tmpfs"),
    ("/shared/fast/r", "on tmpfs"),           # a tmpfs mounted inside the shared one
])
def test_node_local_results_are_refused(tmp_path, path, why):
    mounts = tmp_path / "mounts"
    mounts.write_text(MOUNTS)
    with pytest.raises(UserError, match=f"results folder {path} is node-local \\({why}\\)"):
        submit.check_shared(path, str(mounts))


@pytest.mark.parametrize("path", ["/home/me/results", "/shared/results", "/shared",
                                  "/scratchy/r", "/tmpdata/r", "/shared/faster/r"])
def test_shared_results_pass(tmp_path, path):
    mounts = tmp_path / "mounts"
    mounts.write_text(MOUNTS)
    submit.check_shared(path, str(mounts))
    # With no mount table to read, only the path is judged.
    submit.check_shared(path, str(tmp_path / "no-mounts"))


def test_submit_refuses_a_node_local_results_folder(tmp_path):
    """tmp_path stands in for a node-local folder: refused before anything is queued or
    written, in a dry run too, unless --local-results says this machine is the cluster."""
    shared = (tmp_path / "r").resolve()
    try:
        submit.check_shared(str(shared))
    except UserError:
        pass
    else:
        pytest.skip(f"{shared} is not node-local here")
    fs = Slurm(tmp_path)
    for extra in (["--dry-run"], [], ["--gang"]):
        r = cxlbench("fleet", "submit", str(write_suite(tmp_path)), "--nodes", "2",
                     "--results", str(shared), *extra, env=fs.env)
        assert r.returncode == 2, (extra, r.stderr)
        assert r.stderr.startswith(f"error: results folder {shared} is node-local")
        assert "--local-results" in r.stderr and r.stderr.count("\n") == 1
    assert not shared.exists() and fs.submitted() == []
    r = cxlbench("fleet", "submit", str(write_suite(tmp_path)), "--nodes", "2", "--dry-run",
                 "--results", str(shared), "--local-results", env=fs.env)
    assert r.returncode == 0, r.stderr


# --- 3. the time limit -----------------------------------------------------------------

def test_time_limit_assumed_then_from_the_newest_run_of_the_suite(tmp_path, template):
    s = suite.load(str(write_suite(tmp_path)), {})
    r = tmp_path / "r"
    limit, words = submit.time_limit(s, str(r))
    # 2 cases at 20 s: 40 s, doubled and 10 min: 680 s, up to the next 5 min.
    assert limit == "0:15:00"
    assert words == (f"2 cases, about 1 min at 20 s a case, assumed: no run of tiny in {r} "
                     "yet, on a machine of two memory nodes; twice that and 10 min")
    # A run of the suite (no SLURM fields: any run here counts) whose cases took 1000 s and
    # 1001 s: 2001 s, x2 + 600 = 4602 s, up to 80 min.
    older = place(template, r, 1, array_job=None, seconds=[5, 5])
    run = place(template, r, 2, array_job=None, seconds=[1000, 1001])
    place(template, r, 3, array_job=None, seconds=[9, 9], name="other")   # newer, not tiny
    limit, words = submit.time_limit(s, str(r))
    assert limit == "1:20:00", words
    assert words == (f"2 cases, about 33 min as the cases of run {run} took, on a machine "
                     "of two memory nodes; twice that and 10 min")
    assert str(older) not in words
    # A run whose machine ran more cases of a job (more memory nodes): as many counted.
    more = json.loads((run / "run.json").read_text())
    more["cases"] = more["cases"] + [{**c, "id": c["id"] + "x"} for c in more["cases"]]
    (run / "run.json").write_text(json.dumps(more))
    limit, words = submit.time_limit(s, str(r))
    assert words.startswith("4 cases, about 67 min") and "on the machine of that run" in words
    (run / "run.json").write_text(json.dumps({**more, "cases": more["cases"][:2]}))
    # Past a day, in SLURM's days-hours form: 80000 s x2 + 600 s -> 2680 min.
    place(template, r, 4, array_job=None, seconds=[40000, 40000])
    assert submit.time_limit(s, str(r))[0] == "1-20:40:00"
    # A run with no case finished says nothing: the newest that does is used.
    place(template, r, 5, array_job=None, finished=0)
    assert submit.time_limit(s, str(r))[0] == "1-20:40:00"


def test_time_limit_from_a_run_cxlbench_made(tmp_path):
    """A run of the suite in the results folder (made by `cxlbench run`, its journal's
    seconds then set) sets the next fleet's limit, which --dry-run shows with its why."""
    suite_file, shared = write_suite(tmp_path), tmp_path / "shared"
    r = cxlbench("run", str(suite_file), "--results-dir", str(shared), env=NO_SLURM_ENV)
    assert r.returncode == 0, r.stderr
    (run,) = [p.parent for p in shared.glob("*/*/run.json")]
    journal = run / "cases.jsonl"
    entries = [json.loads(line) for line in journal.read_text().splitlines()]
    for e, s in zip(entries, (300, 600)):
        e["seconds"] = s
    journal.write_text("".join(json.dumps(e) + "\n" for e in entries))
    r = cxlbench("fleet", "submit", str(suite_file), "--nodes", "2", "--dry-run",
                 "--local-results", "--results", str(shared), env=Slurm(tmp_path).env)
    assert r.returncode == 0, r.stderr
    # 2 cases at their mean, 450 s: 900 s, x2 + 600 s = 2400 s: 40 min.
    assert "--time=0:40:00" in sbatch_lines(r.stdout)
    assert (f"# time limit 0:40:00 a machine: 2 cases, about 15 min as the cases of run "
            f"{run.resolve()} took, on a machine of two memory nodes; twice that and 10 min "
            "(--time sets it)\n") in r.stdout


def test_a_time_limit_given_is_kept(tmp_path, monkeypatch):
    fs = Slurm(tmp_path).use(monkeypatch)
    suite_file = str(write_suite(tmp_path))
    fleet, text = submit.prepare(suite_file, {}, script.Options(nodes=2, time="2:00:00"),
                                 str(tmp_path / "r"), local_results=True)
    assert "--time=2:00:00" in sbatch_lines(text) and "time limit" not in text
    assert fleet.data["time_estimate"] is None
    assert fleet.data["options"]["time"] == "2:00:00"
    fleet, text = submit.prepare(suite_file, {}, script.Options(nodes=2),
                                 str(tmp_path / "r"), local_results=True)
    assert "--time=0:15:00" in sbatch_lines(text)
    assert fleet.data["options"]["time"] == "0:15:00"         # a resume keeps it
    assert fleet.data["time_estimate"].endswith("twice that and 10 min")
    assert f"# time limit 0:15:00 a machine: {fleet.data['time_estimate']} (--time sets " \
           "it)\n" in text
    assert fs.submitted() == []                               # prepared, not submitted


# --- 4. the array's script -------------------------------------------------------------

def job_env_of(text: str) -> dict:
    export = next(line for line in sbatch_lines(text) if line.startswith("--export="))
    return dict(pair.split("=", 1) for pair in export[len("--export="):].split(","))


def test_array_script_and_its_task_run_by_bash(tmp_path, monkeypatch):
    """--nodelist n[1-3] --max-running 2: an array of 3 tasks, 2 at once, one machine
    each, kept off the partition's other machine; the job gets only the environment
    fleet names. bash running the script as task 0 on n1 (srun running its command
    here) becomes `fleet task`, which writes its start down, keeps the pending tasks off
    n1, and makes the task's run."""
    fs = Slurm(tmp_path, partitions=[("debug*", "n[1-4]", {}), ("big", "b[1-2]", {})])
    monkeypatch.setenv("HOME", "/home/me")
    fs.env["HOME"] = "/home/me"
    fleet_dir = submit_array(tmp_path, fs, "--nodelist", "n[1-3]", "--max-running", "2",
                             "--env", "CXL_MARK=7")
    shared = (tmp_path / "shared").resolve()
    text = (fleet_dir / "job.sbatch").read_text()
    assert fs.submitted() == [[str(fleet_dir / "job.sbatch"), text]]
    env = script.job_env(script.Options(nodes=1, env={"CXL_MARK": "7"}))
    assert env == {"PATH": f"{os.path.dirname(PY)}:/usr/local/bin:/usr/bin:/bin",
                   "LANG": "C.UTF-8", "HOME": "/home/me", "CXL_MARK": "7"}
    assert sbatch_lines(text) == [
        "--job-name=cxlbench-tiny", "--array=0-2%2", "--nodes=1", "--exclude=n4",
        "--ntasks-per-node=1", "--exclusive", "--mem=0", "--no-requeue", "--time=0:15:00",
        "--export=" + ",".join(f"{k}={v}" for k, v in env.items()),
        f"--chdir={PACKAGE_PARENT}", f"--output={fleet_dir}/logs/task-%a-%A.log"]
    assert "\nexport SLURM_EXPORT_ENV=ALL\n" in text
    data = json.loads((fleet_dir / "fleet.json").read_text())
    assert (data["form"], data["tasks"], data["pool"], data["exclude"]) == \
        ("array", 3, ["n1", "n2", "n3"], ["n4"])
    assert [(j["job"], j["cluster"], j["machines"], j["tasks"]) for j in data["jobs"]] == \
        [("100", "c1", None, [0, 1, 2])]

    # The job as SLURM starts task 0 on n1: only the exported variables and SLURM's.
    seen = tmp_path / "srun.json"
    srun_recorder(fs.bin, seen)
    job = {**job_env_of(text), "FAKE_SLURM": str(fs.dir), "SLURM_JOB_ID": "101",
           "SLURM_ARRAY_JOB_ID": "100", "SLURM_ARRAY_TASK_ID": "0", "SLURMD_NODENAME": "n1",
           "SLURM_JOB_PARTITION": "debug",
           calibration.RESULTS_ENV: os.environ[calibration.RESULTS_ENV]}
    job["PATH"] = f"{fs.bin}:{job['PATH']}"
    done = subprocess.run(["bash", "-c", text], env=job, cwd=PACKAGE_PARENT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(seen.read_text()) == [
        "--nodes=1", "--ntasks=1", "--kill-on-bad-exit=0", "--cpu-bind=none",
        "--mem-bind=none", PY, "-m", "cxlbench", "fleet", "task", str(fleet_dir)]
    start = json.loads((fleet_dir / "tasks" / "0-100.json").read_text())
    assert {k: start[k] for k in ("task", "job", "node", "job_id", "resumed")} == \
        {"task": 0, "job": "100", "node": "n1", "job_id": "101", "resumed": None}
    assert {"CXL_MARK", "PATH", "LANG", "HOME"} <= set(start["env"])
    assert not any(k.startswith("SLURM") for k in start["env"])
    assert fs.updates() == [["update", "JobId=100", "ExcNodeList=n[1,4]"]]
    (run,) = [p.parent for p in shared.glob("*/*/run.json")]
    meta = results.read_meta(run)
    assert (meta["slurm"]["array_job_id"], meta["slurm"]["array_task_id"],
            meta["slurm"]["node"], meta["slurm"]["job_id"]) == ("100", "0", "n1", "101")
    assert meta["suite"]["source"] == str(fleet_dir / "tiny.toml")
    assert len(results.Run.open(run).finished()) == 2


def test_array_of_any_n_machines_and_of_a_feature(tmp_path, monkeypatch):
    """--nodes 3: three tasks, any of the default partition's machines, none excluded;
    --constraint of one feature (with its partition): the pool is the machines having it."""
    Slurm(tmp_path, partitions=[("lab", "c[1-2]", {"c2": "cxl"}),
                                ("debug*", "n[1-5]", {"n2": "cxl,ddr5", "n5": "cxl"})]
          ).use(monkeypatch)
    suite_file = str(write_suite(tmp_path))
    fleet, text = submit.prepare(suite_file, {}, script.Options(nodes=3), str(tmp_path / "r"),
                                 local_results=True)
    lines = sbatch_lines(text)
    assert "--array=0-2" in lines and "--nodes=1" in lines
    assert not [line for line in lines if line.startswith(("--exclude", "--nodelist",
                                                           "--no-kill"))]
    assert (fleet.data["pool"], fleet.data["exclude"], fleet.data["tasks"]) == \
        (["n1", "n2", "n3", "n4", "n5"], [], 3)
    fleet, text = submit.prepare(suite_file, {}, script.Options(
        nodes=2, constraint="cxl", partition="debug"), str(tmp_path / "r"), local_results=True)
    assert fleet.data["pool"] == ["n2", "n5"]
    assert {"--constraint=cxl", "--partition=debug", "--array=0-1"} <= set(sbatch_lines(text))
    # A constraint SLURM alone can read: the pool is not known here.
    fleet, _ = submit.prepare(suite_file, {}, script.Options(nodes=2, constraint="cxl&ddr5"),
                              str(tmp_path / "r"), local_results=True)
    assert fleet.data["pool"] is None
    # --gang: one job on every machine, as before.
    fleet, text = submit.prepare(suite_file, {}, script.Options(nodes=2, gang=True),
                                 str(tmp_path / "r"), local_results=True)
    assert fleet.data["form"] == "gang" and "--no-kill" in sbatch_lines(text)
    assert not any(line.startswith("--array") for line in sbatch_lines(text))


def test_a_feature_pool_is_the_default_partitions(tmp_path, monkeypatch):
    """The array runs in the default partition: its pool, the machines _spread and resume
    keep its tasks on, must be that partition's. A pool holding another partition's
    machine makes resume exclude every machine the tasks can run on (SLURM then holds
    them forever, BadConstraints), believing that one is left."""
    Slurm(tmp_path, partitions=[("debug*", "n[1-2]", {"n1": "cxl", "n2": "cxl"}),
                                ("big", "b1", {"b1": "cxl"})]).use(monkeypatch)
    pool, exclude, _, _ = submit._pool(script.Options(nodes=2, constraint="cxl"), False)
    assert pool == ["n1", "n2"]


def test_machines_that_take_no_jobs_are_left_out_of_the_pool(tmp_path, monkeypatch):
    """Down, drained, draining or silent machines: out of the pool and the task count,
    kept off by --exclude and named in the script; otherwise tasks would wait for them
    (kept off the machines measured) for ever. A machine powered down to save energy
    (idle~) or allocated is in."""
    fs = Slurm(tmp_path, partitions=[("debug*", "n[1-6]", {})]).use(monkeypatch)
    fs.write("states.json", {"n2": "down*", "n3": "drain", "n4": "idle~", "n5": "alloc",
                             "n6": "drng"})
    assert slurm.unusable(None) == {"n2": "down*", "n3": "drain", "n6": "drng"}
    suite_file = str(write_suite(tmp_path))
    fleet, text = submit.prepare(suite_file, {}, script.Options(nodes=3), str(tmp_path / "r"),
                                 local_results=True)
    assert (fleet.data["pool"], fleet.data["exclude"], fleet.data["tasks"]) == \
        (["n1", "n4", "n5"], ["n2", "n3", "n6"], 3)
    lines = sbatch_lines(text)
    assert "--array=0-2" in lines and any(x.startswith("--exclude=n") for x in lines)
    assert "left out of the pool, taking no jobs now: n2 (down*), n3 (drain), n6 (drng)" \
        in text and submit.WARNING not in text
    _, text = submit.prepare(suite_file, {}, script.Options(nodes=4), str(tmp_path / "r"),
                             local_results=True)
    assert f"{submit.WARNING}4 tasks on a pool of 3 machines" in text
    # a node list: its machines that take jobs; every other machine kept off
    fleet, _ = submit.prepare(suite_file, {}, script.Options(nodelist="n[1-3]"),
                              str(tmp_path / "r"), local_results=True)
    assert (fleet.data["pool"], fleet.data["tasks"]) == (["n1"], 1)
    assert fleet.data["exclude"] == ["n2", "n3", "n4", "n5", "n6"]
    fs.write("states.json", {f"n{i}": "down" for i in range(1, 7)})
    with pytest.raises(UserError, match=r"no machine of the pool takes jobs now: n1 \(down\)"):
        submit.prepare(suite_file, {}, script.Options(nodelist="n[1-3]"), str(tmp_path / "r"),
                       local_results=True)
    with pytest.raises(UserError, match="no machine of the pool takes jobs now"):
        submit.prepare(suite_file, {}, script.Options(nodes=2), str(tmp_path / "r"),
                       local_results=True)


# --- 5. fleet task: the run a task makes or finishes -----------------------------------

def array_fleet(tmp_path, *, tasks=2, pool=("n1", "n2", "n3"), exclude=("n9",),
                jobs=(("100", None),)) -> record.Fleet:
    """An array fleet as prepare and submit record one, without SLURM."""
    tmp_path.mkdir(exist_ok=True)
    shared = tmp_path / "shared"
    options = script.Options(nodes=tasks, time="0:15:00", max_running=1)
    fleet = record.create(shared, {
        "suite": "tiny", "source": str(write_suite(tmp_path)), "variables": {},
        "options": options.to_dict(), "form": "array", "tasks": tasks,
        "pool": list(pool) if pool is not None else None, "exclude": list(exclude),
        "environment": script.job_env(options), "time_estimate": None, "python": PY,
        "cxlbench_version": "test"})
    shutil.copyfile(tmp_path / "tiny.toml", fleet.path / "tiny.toml")
    for job, machines in jobs:
        fleet.add_job(job, None, "job.sbatch", machines, list(range(tasks)))
    return fleet


def test_task_main_refuses_an_unseen_fleet_and_outside_an_array(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=f"{tmp_path}/gone/fleet.json is not seen on n7: the "
                                        "results folder must be on a file system every "
                                        "machine mounts"):
        task.main(str(tmp_path / "gone"), {"SLURMD_NODENAME": "n7",
                                           "SLURM_ARRAY_TASK_ID": "0",
                                           "SLURM_ARRAY_JOB_ID": "100"})
    fleet = array_fleet(tmp_path)
    for environ in ({"SLURM_JOB_ID": "5", "SLURMD_NODENAME": "n1"},
                    {"SLURM_ARRAY_TASK_ID": "0", "SLURMD_NODENAME": "n1"},
                    {"SLURM_ARRAY_TASK_ID": "x", "SLURM_ARRAY_JOB_ID": "100"}):
        with pytest.raises(UserError, match="inside a fleet's array job"):
            task.main(str(fleet.path), environ)
    assert not (fleet.path / "tasks").exists()
    # The CLI says it in one line, exit code 2.
    r = cxlbench("fleet", "task", str(tmp_path / "gone"), cwd=tmp_path,
                 env={**NO_SLURM_ENV, "SLURMD_NODENAME": "n7"})
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "not seen on n7" in r.stderr


def test_a_machine_that_cannot_see_the_fleet_keeps_the_pending_tasks_off(tmp_path,
                                                                         monkeypatch):
    """A machine without the shared folder would fail every task SLURM hands it: the task
    that finds so adds it to the pending tasks' excluded machines, keeping those there."""
    fs = Slurm(tmp_path).use(monkeypatch)
    fs.show(j100=task_line(100, "1-3%1", "PENDING", reason="JobArrayTaskLimit")
            + " ExcNodeList=n2")
    with pytest.raises(UserError, match="not seen on n7: .*; the array's pending tasks are "
                                        "kept off n7"):
        task.main(str(tmp_path / "gone"), {"SLURMD_NODENAME": "n7",
                                           "SLURM_ARRAY_TASK_ID": "0",
                                           "SLURM_ARRAY_JOB_ID": "100"})
    assert fs.updates() == [["update", "JobId=100", "ExcNodeList=n[2,7]"]]
    # Already kept off: nothing to change, nothing said.
    fs.show(j100=task_line(100, "1-3%1", "PENDING") + " ExcNodeList=n[2,7]")
    with pytest.raises(UserError) as e:
        task.main(str(tmp_path / "gone"), {"SLURMD_NODENAME": "n7",
                                           "SLURM_ARRAY_TASK_ID": "0",
                                           "SLURM_ARRAY_JOB_ID": "100"})
    assert "kept off" not in str(e.value) and len(fs.updates()) == 1


def test_task_command_starts_afresh_or_finishes_its_run_here(tmp_path, monkeypatch,
                                                             template):
    fs = Slurm(tmp_path).use(monkeypatch)
    fleet = array_fleet(tmp_path)
    shared = fleet.results_dir
    fresh = [PY, "-m", "cxlbench", "run", str(fleet.path / "tiny.toml"), "--results-dir",
             str(shared)]
    environ = {"SLURM_JOB_ID": "101", "SLURMD_NODENAME": "n1", "CXL_MARK": "1", "PATH": "/b"}
    assert task.main(str(fleet.path), {**environ, "SLURM_ARRAY_TASK_ID": "0",
                                       "SLURM_ARRAY_JOB_ID": "100"}) == fresh
    assert json.loads((fleet.path / "tasks" / "0-100.json").read_text()) == {
        "task": 0, "job": "100", "node": "n1", "job_id": "101", "resumed": None,
        "env": ["CXL_MARK", "PATH"]}
    # Runs that are not this task's unfinished run on this machine: not resumed.
    place(template, shared, 1, task=0, node="n1", finished=2)              # finished
    place(template, shared, 2, task=0, node="n2", finished=1)              # another machine
    place(template, shared, 3, task=1, node="n1", finished=1)              # another task
    place(template, shared, 4, array_job="99", task=0, node="n1", finished=1)   # other job
    assert task.command(fleet, 0, "103", "100", "n1", environ) == fresh
    # Its unfinished run on this machine: finished, not begun again; the newest of two.
    place(template, shared, 5, task=0, node="n1", finished=1)
    mine = place(template, shared, 6, task=0, node="n1", finished=0)
    assert task.command(fleet, 0, "104", "100", "n1", environ) == \
        [PY, "-m", "cxlbench", "run", "--resume", str(mine)]
    assert json.loads((fleet.path / "tasks" / "0-100.json").read_text())["resumed"] == \
        str(mine)
    # Task 1, whose unfinished run is n1's, starts afresh on n3.
    assert task.command(fleet, 1, "105", "100", "n3", environ) == fresh
    assert fs.updates()[-1] == ["update", "JobId=100", "ExcNodeList=n[1,3,9]"]


def test_spread_keeps_pending_tasks_off_measured_machines(tmp_path, monkeypatch, capsys):
    fs = Slurm(tmp_path).use(monkeypatch)
    fleet = array_fleet(tmp_path, tasks=3)
    fleet.attempt(0, "100", {"node": "n1"})
    task._spread(fleet, "100")
    fleet.attempt(1, "100", {"node": "n2"})
    fleet.attempt(1, "77", {"node": "n7"})         # a node outside the pool: not excluded
    task._spread(fleet, "100")
    assert fs.updates() == [["update", "JobId=100", "ExcNodeList=n[1,9]"],
                            ["update", "JobId=100", "ExcNodeList=n[1-2,9]"]]
    # SLURM saying the started tasks cannot change is no news; a refusal is a note only.
    fs.write("update.json", [1, "100_0: Job is no longer pending execution\n"
                                "100_1-2: No error"])
    task._spread(fleet, "100")
    assert capsys.readouterr().err == ""
    fs.write("update.json", [1, "slurm_update error: Invalid node name specified"])
    task._spread(fleet, "100")
    assert capsys.readouterr().err == ("cxlbench fleet: job 100's pending tasks not kept "
                                       "off measured machines: slurm_update error: Invalid "
                                       "node name specified\n")
    # Every machine of the pool measured: excluding them all would hold the tasks forever.
    before = len(fs.updates())
    fleet.attempt(2, "100", {"node": "n3"})
    task._spread(fleet, "100")
    assert len(fs.updates()) == before
    # No pool known at submission: SLURM chooses, nothing is excluded.
    unknown = array_fleet(tmp_path / "other", pool=None)
    unknown.attempt(0, "100", {"node": "n1"})
    task._spread(unknown, "100")
    assert len(fs.updates()) == before


def test_spread_reaches_every_array_of_the_fleet(tmp_path, monkeypatch, capsys):
    """A resume's task keeps the first array's pending tasks off its machine too (and the
    other way round); an array SLURM has forgotten is passed over without a word."""
    fs = Slurm(tmp_path).use(monkeypatch)
    fleet = array_fleet(tmp_path, tasks=3, jobs=(("100", None), ("104", None)))
    fleet.attempt(1, "104", {"node": "n2"})
    task._spread(fleet, "104")
    assert fs.updates() == [["update", "JobId=104", "ExcNodeList=n[2,9]"],
                            ["update", "JobId=100", "ExcNodeList=n[2,9]"]]
    fs.write("update.json", [1, "slurm_update error: Invalid job id specified"])
    task._spread(fleet, "100")
    assert "job 100's" in capsys.readouterr().err           # its own array: said
    fleet.attempt(0, "100", {"node": "n1"})
    task._spread(fleet, "104")
    assert capsys.readouterr().err.count("cxlbench fleet:") == 1   # only 104 is said


def test_task_command_spreads_once_written_down(tmp_path, monkeypatch):
    """The task's own machine counts as measured when it spreads the others."""
    fs = Slurm(tmp_path).use(monkeypatch)
    fleet = array_fleet(tmp_path, exclude=())
    task.command(fleet, 0, "101", "100", "n2", {})
    assert fs.updates() == [["update", "JobId=100", "ExcNodeList=n2"]]
    task.command(fleet, 1, "102", "100", "n1", {})
    assert fs.updates()[-1] == ["update", "JobId=100", "ExcNodeList=n[1-2]"]


# --- 6. status of an array fleet ---------------------------------------------------------

def running_fleet(tmp_path, template, fs: Slurm) -> tuple[Path, dict]:
    """Five tasks on n[1-6], one at a time: 0 running on n1 (one case done), 1 failed on
    n2 (one case done, its log), 2 done on n3, 3-4 pending."""
    fs.write("sinfo.json", [["debug*", "n[1-6]", {}]])
    fleet_dir = submit_array(tmp_path, fs, "--nodes", "5", "--max-running", "1")
    shared = (tmp_path / "shared").resolve()
    fleet = record.find(str(fleet_dir))
    runs = {}
    for t, node, finished in ((0, "n1", 1), (1, "n2", 1), (2, "n3", 2)):
        fleet.attempt(t, "100", {"node": node, "job_id": str(101 + t), "resumed": None})
        runs[t] = place(template, shared, t, task=t, node=node, finished=finished)
    (fleet_dir / "logs" / "task-1-100.log").write_text(
        "[1/2] lat/000 chase ...\n[2/2] lat/001 chase ...\n"
        "error: the benchmark died\nsrun: error: n2: task 0: Exited with exit code 2\n")
    fs.show(j100="\n".join([
        task_line(100, "3-4%1", "PENDING", reason="JobArrayTaskLimit"),
        task_line(101, 0, "RUNNING", nodes="n1"),
        task_line(102, 1, "FAILED", nodes="n2", reason="NonZeroExitCode", code="2:0"),
        task_line(103, 2, "COMPLETED", nodes="n3")]))
    return fleet_dir, runs


def test_status_of_an_array(tmp_path, template):
    fs = Slurm(tmp_path)
    fleet_dir, runs = running_fleet(tmp_path, template, fs)
    r = cxlbench("fleet", "status", "100", "--results", str(tmp_path / "shared"), "--json",
                 env=fs.env)
    assert r.returncode == 0, r.stderr
    found = by_task(json.loads(r.stdout))
    assert sorted(found) == [0, 1, 2, 3, 4]
    assert [(found[t]["node"], found[t]["state"], found[t]["job"], found[t]["allocated"])
            for t in range(5)] == [
        ("n1", "running", "100", True), ("n2", "failed", "100", True),
        ("n3", "done", "100", True), ("(task 3)", "pending", "100", False),
        ("(task 4)", "pending", "100", False)]
    assert (found[0]["run"], found[0]["finished"], found[0]["cases"], found[0]["case"]) == \
        (str(runs[0]), 1, 2, "lat/001")
    # SLURM's state and code, then srun's word for the task from its log.
    assert found[1]["reason"] == "FAILED (NonZeroExitCode), exit code 2:0; its task: Exited " \
                                 "with exit code 2; 1 of 2 cases finished"
    assert found[1]["log"] == str(fleet_dir / "logs" / "task-1-100.log")
    assert found[1]["log_tail"][-2:] == ["error: the benchmark died",
                                         "srun: error: n2: task 0: Exited with exit code 2"]
    assert found[1]["run"] == str(runs[1])
    assert (found[2]["finished"], found[2]["cases"]) == (2, 2)
    assert found[3]["reason"] == found[4]["reason"] == "JobArrayTaskLimit"
    r = cxlbench("fleet", "status", "100", "--results", str(tmp_path / "shared"), env=fs.env)
    assert r.returncode == 0, r.stderr
    assert "(task 3)  pending  job 100_3" in r.stdout
    assert "n2        failed   job 100_1" in r.stdout
    assert "| error: the benchmark died" in r.stdout


def test_a_tasks_step_ended_while_slurm_still_says_running(tmp_path, template, monkeypatch):
    """srun's word for the task's end, in the task's log, before SLURM's state changes."""
    fs = Slurm(tmp_path)
    fleet_dir, runs = running_fleet(tmp_path, template, fs)
    fs.use(monkeypatch)
    (fleet_dir / "logs" / "task-0-100.log").write_text(
        "srun: error: n1: task 0: Killed\n")
    (m,) = [m for m in status.machines(record.find(str(fleet_dir))) if m.task == 0]
    assert (m.state, m.reason) == ("failed", "job 100 is RUNNING, but this machine's step "
                                             "ended; its task: Killed; 1 of 2 cases finished")


def test_status_once_slurm_forgot_the_array(tmp_path, template, monkeypatch):
    fs = Slurm(tmp_path)
    fleet_dir, runs = running_fleet(tmp_path, template, fs)
    fs.use(monkeypatch)
    fleet = record.find(str(fleet_dir))
    fs.show()                                 # the controller forgot it; no accounting
    found = by_task(status.machines(fleet))
    assert [(found[t].node, found[t].state) for t in range(5)] == [
        ("n1", "failed"), ("n2", "failed"), ("n3", "done"), ("(task 3)", "failed"),
        ("(task 4)", "failed")]
    assert found[0].reason == "SLURM does not know job 100 (any more, or here); 1 of 2 " \
                              "cases finished"
    assert found[0].run == runs[0] and found[0].log == fleet_dir / "logs" / "task-0-100.log"
    assert found[3].reason.endswith("no run started")
    # A run with no start written down (the task's record lost) is still the task's.
    (fleet_dir / "tasks" / "0-100.json").unlink()
    assert by_task(status.machines(fleet))[0].node == "n1"
    # Accounting says how each ended.
    fs.sacct(j100="\n".join(["100_0|TIMEOUT|0:0|n1|101", "100_1|FAILED|2:0|n2|102",
                             "100_2|COMPLETED|0:0|n3|103", "100_3|RUNNING|0:0|n4|104",
                             "100_4|PENDING|0:0|None assigned|100"]))
    found = by_task(status.machines(fleet))
    assert [(found[t].node, found[t].state) for t in range(5)] == [
        ("n1", "failed"), ("n2", "failed"), ("n3", "done"), ("n4", "running"),
        ("(task 4)", "pending")]            # (task 3's machine as accounting says)
    assert found[0].reason.startswith("TIMEOUT; 1 of 2")
    # SLURM not answering is no end.
    (fs.dir / "down").touch()
    found = by_task(status.machines(fleet))
    assert [found[t].state for t in range(5)] == ["unknown", "unknown", "done", "unknown",
                                                  "unknown"]
    assert found[0].reason.startswith("SLURM did not answer: scontrol show job 100: ")


# --- 7. resume of an array fleet -------------------------------------------------------

def test_resume_is_an_array_of_the_failed_tasks_off_measured_machines(tmp_path, template):
    """Task 1 failed while task 0 runs and 3-4 wait: the resume is an array of task 1
    alone, with the fleet's %1, kept off the machines measured while others are left."""
    fs = Slurm(tmp_path)
    fleet_dir, runs = running_fleet(tmp_path, template, fs)
    shared = str(tmp_path / "shared")
    r = cxlbench("fleet", "resume", "100", "--results", shared, "--dry-run", env=fs.env)
    assert r.returncode == 0, r.stderr
    lines = sbatch_lines(r.stdout)
    assert "--array=1%1" in lines and "--nodes=1" in lines and "--exclude=n[1-3]" in lines
    assert "--time=0:15:00" in lines                         # the fleet's, kept
    assert not [line for line in lines if line.startswith(("--nodelist", "--no-kill"))]
    assert shlex.join([PY, "-m", "cxlbench", "fleet", "task", str(fleet_dir)]) in r.stdout
    r = cxlbench("fleet", "resume", "100", "--results", shared, "--time", "1:00:00",
                 env=fs.env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "101\n" and "job 101 resumes task 1 (n2)" in r.stderr
    text = (fleet_dir / "resume-1.sbatch").read_text()
    assert {"--array=1%1", "--time=1:00:00", "--exclude=n[1-3]"} <= set(sbatch_lines(text))
    assert fs.submitted()[-1] == [str(fleet_dir / "resume-1.sbatch"), text]
    data = json.loads((fleet_dir / "fleet.json").read_text())
    assert [(j["job"], j["script"], j["machines"], j["tasks"]) for j in data["jobs"]] == [
        ("100", "job.sbatch", None, [0, 1, 2, 3, 4]),
        ("101", "resume-1.sbatch", None, [1])]
    # Status follows task 1 to the resume, pending until SLURM gives it a machine.
    fs.show(j100=fs_show(fs)["100"], j101=task_line(101, "1", "PENDING", reason="Priority",
                                                    array=101))
    r = cxlbench("fleet", "status", "100", "--results", shared, "--json", env=fs.env)
    found = by_task(json.loads(r.stdout))
    assert (found[1]["node"], found[1]["state"], found[1]["job"], found[1]["reason"]) == \
        ("(task 1)", "pending", "101", "Priority")
    assert found[0]["job"] == "100" and found[0]["state"] == "running"
    # Nothing failed now: nothing to resume.
    r = cxlbench("fleet", "resume", "100", "--results", shared, env=fs.env)
    assert r.returncode == 0 and "nothing to resume" in r.stderr
    assert len(fs.submitted()) == 2


def fs_show(fs: Slurm) -> dict:
    return json.loads((fs.dir / "show.json").read_text())


def test_resume_where_every_machine_is_measured_excludes_none(tmp_path, template,
                                                              monkeypatch):
    fs = Slurm(tmp_path)
    fleet_dir, runs = running_fleet(tmp_path, template, fs)
    fs.use(monkeypatch)
    fleet = record.find(str(fleet_dir))
    for t, node in ((3, "n4"), (4, "n5")):
        fleet.attempt(t, "100", {"node": node})
    fleet.attempt(0, "77", {"node": "n6"})         # another job's start: not this fleet's
    fleet.data["pool"] = ["n1", "n2", "n3", "n4", "n5"]
    chosen = [m for m in status.machines(fleet) if m.task == 1]
    text = submit.resume_script(fleet, chosen)
    assert not [line for line in sbatch_lines(text) if line.startswith("--exclude")]
    # What the fleet excluded at submission stays excluded.
    fleet.data["exclude"] = ["n6"]
    text = submit.resume_script(fleet, chosen)
    assert "--exclude=n6" in sbatch_lines(text)


def test_resume_on_the_same_machines(tmp_path, template):
    """--same-machines: one job holding the failed tasks' machines, each finishing its
    own run; a task that never had a machine cannot be resumed so."""
    fs = Slurm(tmp_path)
    fleet_dir, runs = running_fleet(tmp_path, template, fs)
    shared = str(tmp_path / "shared")
    show = fs_show(fs)["100"].splitlines()
    fs.show(j100="\n".join(show[1:] + [
        task_line(104, 3, "TIMEOUT", nodes="n4", reason="TimeLimit"),
        task_line(100, 4, "PENDING", reason="JobArrayTaskLimit")]))
    fleet = record.find(str(fleet_dir))
    fleet.attempt(3, "100", {"node": "n4"})             # started on n4, no run yet
    r = cxlbench("fleet", "resume", "100", "--results", shared, "--same-machines",
                 "--dry-run", env=fs.env)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    lines = sbatch_lines(text)
    assert "--nodelist=n2,n4" in lines and "--no-kill" in lines
    assert not [line for line in lines if line.startswith(("--array", "--exclude"))]
    resume = shlex.join([PY, "-m", "cxlbench", "run", "--resume", str(runs[1])])
    assert f'n2) run_on "$n" {resume} & ;;' in text
    # A fresh run says which task it is, as an array task's run.json would.
    fresh = shlex.join(["/usr/bin/env", "SLURM_ARRAY_TASK_ID=3", *submit.run_command(
        str(fleet_dir / "tiny.toml"), {}, str((tmp_path / "shared").resolve()))])
    assert f'n4) run_on "$n" {fresh} & ;;' in text
    r = cxlbench("fleet", "resume", "100", "--results", shared, "--same-machines", env=fs.env)
    assert r.returncode == 0, r.stderr
    data = json.loads((fleet_dir / "fleet.json").read_text())
    assert (data["jobs"][-1]["machines"], data["jobs"][-1]["tasks"]) == \
        ({"n2": str(runs[1]), "n4": None}, [1, 3])
    # A task SLURM cancelled before it had a machine: not on "the same" one.
    fs.show(j100="\n".join(show[1:] + [
        task_line(100, "3-4", "CANCELLED", reason="None")]))
    data["jobs"] = data["jobs"][:1]
    (fleet_dir / "fleet.json").write_text(json.dumps(data))
    (fleet_dir / "tasks" / "3-100.json").unlink()
    r = cxlbench("fleet", "resume", "100", "--results", shared, "--same-machines",
                 "--dry-run", env=fs.env)
    assert r.returncode == 2
    assert "task 3 never started on a machine: resume it without --same-machines" in r.stderr
    r = cxlbench("fleet", "resume", "100", "--results", shared, "--dry-run", env=fs.env)
    assert r.returncode == 0 and "--array=1,3-4%1" in sbatch_lines(r.stdout)


def test_resume_waits_for_slurm_to_answer(tmp_path, template):
    fs = Slurm(tmp_path)
    fleet_dir, runs = running_fleet(tmp_path, template, fs)
    shared = str(tmp_path / "shared")
    (fs.dir / "down").touch()
    r = cxlbench("fleet", "resume", "100", "--results", shared, env=fs.env)
    assert r.returncode == 2 and "SLURM did not say whether job 100 ended on n1" in r.stderr
    assert len(fs.submitted()) == 1
    r = cxlbench("fleet", "resume", "100", "--results", shared, "--force", "--dry-run",
                 env=fs.env)
    assert r.returncode == 0, r.stderr
    assert "--array=0-1,3-4%1" in sbatch_lines(r.stdout)


def test_same_machines_never_resumes_a_run_on_another_machine(tmp_path, template,
                                                              monkeypatch):
    """Task 1 failed on n2 partway (run R); its resume landed on n5 and failed there
    before its run began (a suite n5 refuses, a folder n5 does not see). --same-machines
    must not send n5 `run --resume R`: `cxlbench run` refuses to resume there a run n2
    started, so the job could never succeed."""
    fs = Slurm(tmp_path)
    fleet_dir, runs = running_fleet(tmp_path, template, fs)
    fs.use(monkeypatch)
    fleet = record.find(str(fleet_dir))
    fleet.add_job("101", "c1", "resume-1.sbatch", None, [1])
    fleet.attempt(1, "101", {"node": "n5", "job_id": "106", "resumed": None})
    fs.show(j100=fs_show(fs)["100"],
            j101=task_line(106, 1, "FAILED", nodes="n5", reason="NonZeroExitCode",
                           code="2:0", array=101))
    chosen = submit.resumable(fleet)
    (m,) = [m for m in chosen if m.task == 1]
    text = submit.resume_script(fleet, [m], same_machines=True)
    resume = shlex.join([PY, "-m", "cxlbench", "run", "--resume", str(runs[1])])
    assert f'n5) run_on "$n" {resume}' not in text
