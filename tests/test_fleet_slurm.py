"""`cxlbench fleet` against a real SLURM: a controller and a node daemon started here for
the session (this host as the one node, its real CPUs and memory), munge with a key of
its own, everything under a temporary folder and stopped afterwards. Skipped, with why,
where they cannot start (not root, packages missing: .ci/run installs slurmctld, slurmd
and munge)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from cxlbench import results
from cxlbench.lifetime import dying_with_us
from cxlbench.units import parse_list

from .conftest import cxlbench
from .test_fleet import GANG, NO_SLURM_ENV, sbatch_lines

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# Cases of a few tenths of a second each: the tests stop a run after its first case, and
# cases forked from the run's server start in 0.05 s, so with 20000 loads a run was over
# before the test could stop it.
SUITE = """
[global]
repeat = 2
warmup = 0
[lat]
bench = "chase"
size = ["64K", "128K", "256K", "512K"]
loads = 100000000
"""

NEEDED = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel",
          "squeue", "sinfo")


@dataclass
class Cluster:
    env: dict
    node: str
    folder: Path
    binds: bool             # task/affinity binds each task to its cores by default

    def scontrol(self, *args) -> str:
        out = subprocess.run(["scontrol", *args], env=self.env, capture_output=True,
                             text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return out.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _logs(folder: Path) -> str:
    return " | ".join(line for p in sorted(folder.glob("*.log"))
                      for line in p.read_text(errors="replace").splitlines()[-3:])


def _wait(predicate, seconds: float, what: str, step: float = 0.5):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"{what} within {seconds:g} s")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    missing = [d for d in NEEDED if shutil.which(d) is None]
    if missing:
        pytest.skip(f"SLURM is not installed ({', '.join(missing)} missing; apt-get install "
                    "slurmctld slurmd munge)")
    if os.geteuid() != 0:
        pytest.skip("slurmd runs jobs as their users: it needs root")
    d = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool", "munge"):
        (d / sub).mkdir()
    key, sock = d / "munge" / "munge.key", d / "munge" / "socket"
    subprocess.run(["mungekey", "-c", "-k", str(key)], check=True, capture_output=True)
    key.chmod(0o400)
    # `slurmd -C`: this host as SLURM sees it, its real CPUs and memory.
    node_line = subprocess.run(["slurmd", "-C"], capture_output=True, text=True,
                               check=True).stdout.splitlines()[0]
    node = node_line.split()[0].split("=", 1)[1]
    conf = d / "slurm.conf"
    lines = [
        "ClusterName=cxlbench-test", f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={sock}",
        "SlurmUser=root", "SlurmdUser=root",
        f"StateSaveLocation={d / 'state'}", f"SlurmdSpoolDir={d / 'spool'}",
        f"SlurmctldPidFile={d / 'slurmctld.pid'}", f"SlurmdPidFile={d / 'slurmd.pid'}",
        f"SlurmctldLogFile={d / 'slurmctld.log'}", f"SlurmdLogFile={d / 'slurmd.log'}",
        # No cgroups, no accounting database: what a CI container can run.
        "ProctrackType=proctrack/linuxproc",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
        "MpiDefault=none", "ReturnToService=2", "KillWait=2", "InactiveLimit=0",
        f"{node_line} NodeAddr=127.0.0.1 State=UNKNOWN",
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP"]
    # A site's default binding (each task to its cores) where task/affinity starts here:
    # a fleet's step must run on every CPU all the same.
    tasks = [["TaskPlugin=task/affinity", "TaskPluginParam=Cores"], ["TaskPlugin=task/none"]]
    env = {**os.environ, **NO_SLURM_ENV, "SLURM_CONF": str(conf)}
    logs = [open(d / f"{name}.out", "w") for name in ("munged", "slurmctld", "slurmd")]
    procs = [subprocess.Popen(dying_with_us(["munged", "-F", "-f", "-S", str(sock),
                                             f"--key-file={key}",
                                             f"--pid-file={d / 'munge' / 'pid'}",
                                             f"--seed-file={d / 'munge' / 'seed'}",
                                             f"--log-file={d / 'munged.log'}"]),
                              stdout=logs[0], stderr=subprocess.STDOUT)]
    try:
        try:
            _wait(sock.exists, 10, "munged made no socket")
        except AssertionError as e:
            pytest.skip(f"munge did not start here: {e}: {_logs(d)}")

        def idle():
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=env,
                                 capture_output=True, text=True, timeout=10)
            return out.stdout.strip() == "idle"
        for task in tasks:
            conf.write_text("\n".join(lines + task) + "\n")
            # The daemons die with this pytest, however it ends (tests/run ends a pytest run
            # beside the others by SIGTERM, which runs no teardown); jobs' slurmstepd may not.
            daemons = [subprocess.Popen(dying_with_us(["slurmctld", "-D", "-i", "-f",
                                                       str(conf)]), env=env,
                                        stdout=logs[1], stderr=subprocess.STDOUT),
                       subprocess.Popen(dying_with_us(["slurmd", "-D", "-N", node, "-f",
                                                       str(conf)]),
                                        env=env, stdout=logs[2], stderr=subprocess.STDOUT)]
            procs += daemons
            try:
                _wait(idle, 30, "the node was not idle")
                break
            except AssertionError as e:
                if task is tasks[-1]:
                    pytest.skip(f"SLURM did not start here: {e}: {_logs(d)}")
                for p in daemons:           # again without task/affinity
                    p.terminate()
                    p.wait(timeout=15)
                    procs.remove(p)
        yield Cluster(env=env, node=node, folder=d, binds="task/affinity" in task[0])
        # Jobs outlive slurmd (their slurmstepd goes on): none is left running.
        subprocess.run(["scancel", "--user", str(os.geteuid())], env=env, timeout=30)
        try:
            _wait(lambda: not subprocess.run(["squeue", "-h"], env=env, capture_output=True,
                                             text=True, timeout=10).stdout.strip(),
                  30, "jobs were still running")
        except AssertionError:
            pass                        # the daemons stop all the same
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs:
            f.close()


def fleet(cluster, *args):
    return cxlbench("fleet", *args, env=cluster.env, timeout=120)


def status(cluster, job, shared) -> list[dict]:
    r = fleet(cluster, "status", job, "--results", str(shared), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_dry_run_is_a_script_sbatch_accepts(cluster, tmp_path):
    (tmp_path / "tiny.toml").write_text(SUITE)
    r = fleet(cluster, "submit", *GANG, str(tmp_path / "tiny.toml"), "--nodelist", cluster.node,
              "--partition", "debug", "--time", "5", "--results", str(tmp_path / "r"),
              "--dry-run")
    assert r.returncode == 0, r.stderr
    (tmp_path / "job.sbatch").write_text(r.stdout)
    said = subprocess.run(["sbatch", "--test-only", str(tmp_path / "job.sbatch")],
                          env=cluster.env, capture_output=True, text=True, timeout=30)
    assert said.returncode == 0, said.stderr
    assert f"on nodes {cluster.node} in partition debug" in said.stderr


def test_submit_runs_each_machine_and_collect_reports(cluster, tmp_path):
    (tmp_path / "tiny.toml").write_text(SUITE)
    shared = tmp_path / "shared"
    r = fleet(cluster, "submit", *GANG, str(tmp_path / "tiny.toml"), "--nodes", "1",
              "--results", str(shared))
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    assert job.isdigit()
    (fleet_dir,) = (shared / "fleet").iterdir()
    text = (fleet_dir / "job.sbatch").read_text()
    assert "--nodes=1" in sbatch_lines(text) and "--exclusive" in sbatch_lines(text)
    (submitted,) = json.loads((fleet_dir / "fleet.json").read_text())["jobs"]
    assert (submitted["job"], submitted["cluster"]) == (job, "cxlbench-test")

    r = fleet(cluster, "collect", job, "--results", str(shared), "--interval", "1",
              "-o", str(tmp_path / "report"))
    assert r.returncode == 0, r.stderr
    assert "done" in r.stderr.splitlines()[-2]           # the last progress line
    (run_dir,) = [p.parent for p in shared.glob("*/*/run.json")]
    assert run_dir.parent.name == results.machine_id()   # as a local run files it
    meta = results.read_meta(run_dir)
    assert meta["slurm"] == {"job_id": job, "array_job_id": None, "array_task_id": None,
                             "node": cluster.node, "node_index": "0", "partition": "debug",
                             "cluster": "cxlbench-test"}
    assert len(results.Run.open(run_dir).finished()) == 4
    if cluster.binds:                   # the site's default binding did not reach the run
        assert parse_list(meta["topology"]["cpu"]["allowed"]) == \
            sorted(os.sched_getaffinity(0))
    assert f"{cluster.node}  done     job {job:<8} 4/4 cases" in r.stdout
    report = (tmp_path / "report" / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith(f"| {cluster.node} |"))
    assert f"| done | {job} |" in row and "| debug | cxlbench-test | 4/4 |" in row
    assert "Only one machine has results" in report
    assert "chase" in report.lower()                     # the runs' own report follows
    log = fleet_dir / "logs" / f"{cluster.node}-{job}.log"
    assert "lat/003" in log.read_text()
    assert (fleet_dir / f"nodes-{job}").read_text() == f"{cluster.node}\n"


def test_timeout_is_shown_failed_then_resumed(cluster, tmp_path):
    """A machine whose run hangs past the job's time limit: SLURM ends the job
    (TIMEOUT), status says so with the log's end, and resume finishes the same run."""
    (tmp_path / "tiny.toml").write_text(SUITE)
    shared = tmp_path / "shared"
    r = fleet(cluster, "submit", *GANG, str(tmp_path / "tiny.toml"), "--nodelist", cluster.node,
              "--time", "1", "--results", str(shared))
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()

    def started():
        dirs = [p.parent for p in shared.glob("*/*/cases.jsonl")]
        return dirs and (dirs[0] / "cases.jsonl").read_text().count("\n") >= 1 and dirs[0]
    run_dir = _wait(started, 60, "the run finished no case", 0.05)
    # The run hangs; SLURM's limits are whole minutes, checked every 30 s, so the limit
    # is cut to 0 now rather than waited for.
    holder = (run_dir / results.LOCK).read_text().split()
    os.kill(int(holder[1]), signal.SIGSTOP)
    cluster.scontrol("update", f"JobId={job}", "TimeLimit=0")
    # Failed as soon as its step ends; TIMEOUT once the job has ended (not COMPLETING).
    # Up to 30 s for the controller's check, more beside the parallel tests (tests/run):
    # a minute was once too little there.
    (m,) = _wait(lambda: [m for m in status(cluster, job, shared) if m["state"] == "failed"
                          and m["reason"].startswith("TIMEOUT")],
                 150, "the job did not time out", 1)
    assert m["node"] == cluster.node and m["run"] == str(run_dir)
    assert m["reason"].startswith("TIMEOUT (TimeLimit)")
    assert m["finished"] < m["cases"] == 4
    assert any("DUE TO TIME LIMIT" in line for line in m["log_tail"])
    r = fleet(cluster, "status", job, "--results", str(shared))
    assert f"{cluster.node}  failed   job {job}" in r.stdout and "TIMEOUT" in r.stdout

    r = fleet(cluster, "resume", job, "--results", str(shared), "--time", "5")
    assert r.returncode == 0, r.stderr
    again = r.stdout.strip()
    assert again.isdigit() and again != job
    (m,) = _wait(lambda: [m for m in status(cluster, job, shared) if m["state"] == "done"],
                 60, "the resumed run did not finish", 1)
    assert m["job"] == again and m["run"] == str(run_dir)
    run = results.Run.open(run_dir)
    assert len(run.finished()) == 4 and run.meta["slurm"]["job_id"] == job
    assert [s["job_id"] for s in run.meta["slurm_resumed"]] == [again]
    r = fleet(cluster, "resume", job, "--results", str(shared))
    assert r.returncode == 0 and "nothing to resume" in r.stderr


def test_pending_then_cancelled(cluster, tmp_path):
    """A job still waiting shows its machines pending with SLURM's reason, and resume
    waits for it; cancelled before it started, it shows failed with no run."""
    (tmp_path / "tiny.toml").write_text(SUITE)
    shared = tmp_path / "shared"
    r = fleet(cluster, "submit", *GANG, str(tmp_path / "tiny.toml"), "--nodes", "1",
              "--sbatch-arg=--begin=now+1hour", "--results", str(shared))
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    (m,) = status(cluster, job, shared)
    assert (m["node"], m["state"], m["reason"]) == ("(1 unallocated)", "pending", "BeginTime")
    r = fleet(cluster, "resume", job, "--results", str(shared))
    assert r.returncode == 2 and f"job {job} is still pending" in r.stderr
    subprocess.run(["scancel", job], env=cluster.env, check=True, timeout=30)
    (m,) = _wait(lambda: [m for m in status(cluster, job, shared) if m["state"] == "failed"],
                 30, "the job was not cancelled", 0.5)
    assert m["reason"].startswith("CANCELLED") and m["reason"].endswith("no run started")
    r = fleet(cluster, "resume", job, "--results", str(shared))
    assert r.returncode == 2 and "ended before SLURM gave it machines" in r.stderr


def test_a_machine_that_refuses_the_suite_shows_why(cluster, tmp_path):
    """A suite this machine cannot run (a node it lacks: checked on the machine, not at
    submission) fails there with cxlbench's own words, and no run."""
    (tmp_path / "far.toml").write_text(SUITE.replace('bench = "chase"',
                                                     'bench = "chase"\nmem = "bind:7"'))
    shared = tmp_path / "shared"
    r = fleet(cluster, "submit", *GANG, str(tmp_path / "far.toml"), "--nodes", "1",
              "--results", str(shared))
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    (m,) = _wait(lambda: [m for m in status(cluster, job, shared) if m["state"] == "failed"
                          and m["reason"].startswith("FAILED")],
                 30, "the job did not fail", 0.5)
    assert m["node"] == cluster.node and m["run"] is None
    assert m["reason"] == ("FAILED (NonZeroExitCode), exit code 2:0; its task: Exited with "
                           "exit code 2; no run started"), m["reason"]
    assert any("error:" in line and "7" in line for line in m["log_tail"]), m["log_tail"]


def test_array_runs_a_task_a_machine_in_turn_and_resumes_the_failed_one_alone(
        cluster, tmp_path):
    """An array fleet of two tasks, one running at a time, on the one machine here: the
    script carries the time limit and only the environment fleet records; the first task
    is made to time out while the second waits; the second then runs and finishes; the
    resume is an array of the first task alone, which lands on the machine of its run and
    finishes that run."""
    (tmp_path / "tiny.toml").write_text(SUITE)
    shared = tmp_path / "shared"
    leaky = {**cluster.env, "OMP_NUM_THREADS": "3", "PYTHONPATH": str(tmp_path / "leak")}
    r = cxlbench("fleet", "submit", str(tmp_path / "tiny.toml"), "--nodes", "2",
                 "--max-running", "1", "--local-results", "--env", "CXLBENCH_MARK=7",
                 "--results", str(shared), env=leaky, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "warning: 2 tasks on a pool of 1 machines" in r.stderr      # in turn, here
    job = r.stdout.strip()
    (fleet_dir,) = (shared / "fleet").iterdir()
    lines = sbatch_lines((fleet_dir / "job.sbatch").read_text())
    assert "--array=0-1%1" in lines and "--nodes=1" in lines and "--exclusive" in lines
    # No --time given: the estimate (4 cases, none recorded: 20 s each, x2 + 10 min).
    assert "--time=0:15:00" in lines
    export = next(line for line in lines if line.startswith("--export="))
    assert "CXLBENCH_MARK=7" in export and "PYTHONPATH" not in export

    def first_started():
        dirs = [p.parent for p in shared.glob("*/*/cases.jsonl")]
        return len(dirs) == 1 and (dirs[0] / "cases.jsonl").read_text().count("\n") >= 1 \
            and dirs[0]
    first = _wait(first_started, 60, "task 0 finished no case", 0.05)
    holder = (first / results.LOCK).read_text().split()
    os.kill(int(holder[1]), signal.SIGSTOP)
    found = status(cluster, job, shared)
    assert [(m["task"], m["state"]) for m in found] == [(0, "running"), (1, "pending")]
    assert found[1]["node"] == "(task 1)" and found[1]["reason"] == "JobArrayTaskLimit"
    cluster.scontrol("update", f"JobId={job}_0", "TimeLimit=0")

    found = _wait(lambda: [m for m in status(cluster, job, shared)
                           if m["task"] == 1 and m["state"] == "done"] and
                  status(cluster, job, shared), 180, "task 1 did not finish", 1)
    t0, t1 = found
    assert t0["state"] == "failed" and t0["reason"].startswith("TIMEOUT"), t0
    assert t0["run"] == str(first) and t0["finished"] < 4
    assert t1["node"] == cluster.node and t1["run"] != str(first)
    # Each task wrote down its start: the machine, and the names of what it was given.
    starts = [json.loads(p.read_text()) for p in sorted((fleet_dir / "tasks").iterdir())]
    assert [(s["task"], s["node"], s["resumed"]) for s in starts] == \
        [(0, cluster.node, None), (1, cluster.node, None)]
    assert "CXLBENCH_MARK" in starts[0]["env"]
    assert not {"OMP_NUM_THREADS", "PYTHONPATH"} & set(starts[0]["env"])

    r = fleet(cluster, "resume", job, "--results", str(shared), "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "--array=0%1" in sbatch_lines(r.stdout)       # its limit kept
    r = fleet(cluster, "resume", job, "--results", str(shared))
    assert r.returncode == 0, r.stderr
    again = r.stdout.strip()
    assert f"resumes task 0 ({cluster.node})" in r.stderr
    found = _wait(lambda: [m for m in status(cluster, job, shared) if m["task"] == 0
                           and m["state"] == "done"], 180, "the resumed task did not finish", 1)
    assert found[0]["run"] == str(first) and found[0]["job"] == again
    run = results.Run.open(first)
    assert len(run.finished()) == 4
    assert run.meta["slurm"]["array_task_id"] == "0"
    assert [s["array_job_id"] for s in run.meta["slurm_resumed"]] == [again]
    assert len(results.Run.open(Path(t1["run"])).finished()) == 4      # untouched
    r = fleet(cluster, "resume", job, "--results", str(shared))
    assert r.returncode == 0 and "nothing to resume" in r.stderr
    r = fleet(cluster, "status", job, "--results", str(shared))
    assert f"job {again}_0" in r.stdout and f"job {job}_1" in r.stdout
