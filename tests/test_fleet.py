"""`cxlbench fleet` without a SLURM cluster: the sbatch script as bash runs it (srun
stood in for by a recorder), the refusals, run.json's SLURM fields, and status and resume
over the answers SLURM 22.05 gives (scontrol and sbatch stood in for by scripts that
print them). tests/test_fleet_slurm.py runs the same against real daemons."""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cxlbench import PACKAGE_PARENT, results
from cxlbench.errors import ResultsError, ResultsWarning, UserError
from cxlbench.fleet import collect, record, script, slurm, status, submit

from . import manual
from .conftest import cxlbench

TINY = """
description = "${note}"
[vars]
size = "64K"
note = "a tiny suite"
[global]
repeat = 2
warmup = 0
[lat]
bench = "chase"
size = ["${size}", "128K"]
loads = 20000
"""

# A value a shell would split, expand or end early on: it must reach cxlbench whole.
NASTY = """tiny; echo "$HOME" 'it''s' `id` \\ *"""

NO_SLURM_ENV = {k: "" for k in slurm.ENV_FIELDS.values()}
# The one-job form these tests were written for; tmp_path stands for a shared folder.
GANG = ("--gang", "--local-results")


def write_suite(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


def fake(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\nimport json, os, sys\n{body}\n")
    path.chmod(0o755)


def srun_recorder(bin_dir: Path, out: Path) -> None:
    """srun that writes its arguments as JSON and then runs the command after its own
    options, as a one-machine job would."""
    fake(bin_dir, "srun", f"""
args = sys.argv[1:]
open({str(out)!r}, "w").write(json.dumps(args))
while args[0].startswith("-"):
    args.pop(0)
os.execvp(args[0], args)
""")


def sbatch_lines(text: str) -> list[str]:
    return [line.split(None, 1)[1] for line in text.splitlines() if line.startswith("#SBATCH")]


def test_dry_run_script_options_and_quoting(tmp_path):
    suite_file = write_suite(tmp_path)
    r = cxlbench("fleet", "submit", *GANG, str(suite_file),
                 "--nodelist", "n[1-2],gpu7",
                 "--partition", "lab", "--constraint", "cxl&ddr5", "--time", "1:30:00",
                 "--var", f"note={NASTY}", "--sbatch-arg=--qos=high",
                 "--results", str(tmp_path / "shared"), "--dry-run")
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert text.startswith("#!/bin/bash\n")
    shared = (tmp_path / "shared").resolve()
    assert sbatch_lines(text) == [
        "--job-name=cxlbench-tiny", "--nodelist=n[1-2],gpu7", "--ntasks-per-node=1",
        "--exclusive", "--mem=0", "--no-kill", "--no-requeue", "--partition=lab",
        "--constraint=cxl&ddr5",
        "--time=1:30:00",
        "--export=" + ",".join(f"{k}={v}" for k, v in script.job_env(
            script.Options(nodes=1)).items()),
        f"--chdir={PACKAGE_PARENT}", f"--output={shared}/fleet/<stamp>/job-%j.out",
        "--qos=high"]
    assert not (tmp_path / "shared").exists()          # a dry run writes nothing
    # bash itself reads the srun line: the variable arrives as one word, untouched.
    bin_dir, seen = tmp_path / "bin", tmp_path / "srun.json"
    fake(bin_dir, "srun", f"open({str(seen)!r}, 'w').write(json.dumps(sys.argv[1:]))")
    fake(bin_dir, "scontrol", "print('n1')")
    subprocess.run(["bash", "-c", text], check=True, capture_output=True,
                   env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                        "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_ID": "5"})
    argv = json.loads(seen.read_text())
    assert argv[argv.index("bash") + 3:] == [
        sys.executable, "-m", "cxlbench", "run", f"{shared}/fleet/<stamp>/tiny.toml",
        "--var", f"note={NASTY}", "--results-dir", str(shared)]


# srun as a step on one node: its arguments appended to steps.jsonl, then the step's
# command run here, as SLURM would on that node; the node FAIL_NODE names ends at once
# (exit code 2, srun's own word on stderr), the others only after it.
STEP_SRUN = """
args = sys.argv[1:]
node = next(a.split("=", 1)[1] for a in args if a.startswith("--nodelist="))
with open(os.environ["STEPS"], "a") as f:
    f.write(json.dumps(args) + "\\n")
if node == os.environ.get("FAIL_NODE"):
    print(f"srun: error: {node}: task 0: Exited with exit code 2", file=sys.stderr)
    sys.exit(2)
import time
time.sleep(1)
while args[0].startswith("-"):
    args.pop(0)
os.execvp(args[0], args)
"""


def test_each_machine_runs_its_own_step(tmp_path):
    """One step per machine, in parallel: one that fails leaves the others to finish;
    each step has the whole machine (no CPU or memory binding) and a log named by its
    SLURM node; the job writes its machines down, and ends with the failed step's code."""
    bin_dir, fleet_dir, steps = tmp_path / "bin", tmp_path / "fleet", tmp_path / "steps.jsonl"
    (fleet_dir / "logs").mkdir(parents=True)
    fake(bin_dir, "srun", STEP_SRUN)
    fake(bin_dir, "scontrol", "print('\\n'.join(sys.argv[3].split(',')))")
    marker = tmp_path / "finished"
    text = script.sbatch_script(
        name="t", options=script.Options(nodes=3).validate(), fleet_dir=str(fleet_dir),
        results_dir=str(tmp_path), comment="test",
        commands={None: [sys.executable, "-c", "import os, sys; open(sys.argv[1], 'a')"
                         ".write(os.environ.get('CXL_NODE', '?'))", str(marker)]})
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STEPS": str(steps),
           "SLURM_JOB_NODELIST": "n1,n2,n3", "SLURM_JOB_ID": "12", "FAIL_NODE": "n2",
           "CXL_NODE": "x"}
    done = subprocess.run(["bash", "-c", text], env=env, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert "cxlbench fleet: n2: srun exit code 2" in done.stderr
    assert marker.read_text() == "xx"                # n1's and n3's steps ran to the end
    assert (fleet_dir / "nodes-12").read_text() == "n1\nn2\nn3\n"
    started = [json.loads(line) for line in steps.read_text().splitlines()]
    assert sorted(a[2] for a in started) == ["--nodelist=n1", "--nodelist=n2",
                                             "--nodelist=n3"]
    for args in started:
        node = args[2].split("=")[1]
        assert args[:2] == ["--nodes=1", "--ntasks=1"]
        assert {"--kill-on-bad-exit=0", "--cpu-bind=none", "--mem-bind=none",
                f"--output={fleet_dir}/logs/{node}-%j.log"} <= set(args)
    # A machine without the Python that submitted says so, in its log, and fails.
    missing = text.replace(sys.executable, str(tmp_path / "no-python"))
    done = subprocess.run(["bash", "-c", missing], env={**env, "FAIL_NODE": ""},
                          capture_output=True, text=True)
    assert done.returncode == 3
    assert f"{tmp_path}/no-python: no such program on" in done.stderr


def test_nodes_count_and_no_optional_lines(tmp_path):
    text = script.sbatch_script(name="quick", options=script.Options(nodes=3).validate(),
                                fleet_dir="/r/fleet/x", results_dir="/r",
                                commands={None: ["true"]}, comment="suite quick")
    assert sbatch_lines(text) == ["--job-name=cxlbench-quick", "--nodes=3",
                                  "--ntasks-per-node=1", "--exclusive", "--mem=0",
                                  "--no-kill", "--no-requeue",
                                  "--export=" + ",".join(
                                      f"{k}={v}" for k, v in script.job_env(
                                          script.Options(nodes=3)).items()),
                                  f"--chdir={PACKAGE_PARENT}",
                                  "--output=/r/fleet/x/job-%j.out"]


@pytest.mark.parametrize("options, variables, message", [
    ({"nodes": 2, "nodelist": "a,b"}, {}, "not both"),
    ({}, {}, "give --nodes N"),
    ({"nodes": 0}, {}, "at least 1"),
    ({"nodes": -3}, {}, "--nodes -3: at least 1"),
    ({"nodes": 2, "max_running": -2}, {}, "--max-running -2: at least 1"),
    ({"nodes": 2, "hosts": 0, "shared_dax": "/dev/dax0.0"}, {}, "--hosts 0: two hosts"),
    ({"nodes": 2, "hosts": -1, "shared_dax": "/dev/dax0.0"}, {}, "--hosts -1: two hosts"),
    ({"nodes": 3, "hosts": 2, "shared_dax": "/dev/dax0.0"}, {}, "two machines (--nodes 2 "
                                                                "or --nodelist a,b), not 3"),
    ({"nodes": 1, "partition": "a b"}, {}, "--partition 'a b'"),
    ({"nodelist": "a;reboot"}, {}, "--nodelist 'a;reboot'"),
    ({"nodes": 1, "time": "soon"}, {}, "--time 'soon'"),
    ({"nodes": 1, "sbatch_args": ["--nodes=4"]}, {}, "use fleet's --nodes"),
    ({"nodes": 1, "sbatch_args": ["--output=x"]}, {}, "fleet names the job, its output"),
    # sbatch's short forms and prefixes of what fleet sets, and what undoes its promises.
    ({"nodes": 1, "sbatch_args": ["-N4"]}, {}, "one long sbatch option"),
    ({"nodes": 1, "sbatch_args": ["-wn1"]}, {}, "one long sbatch option"),
    ({"nodes": 1, "sbatch_args": ["-pdebug"]}, {}, "one long sbatch option"),
    ({"nodes": 1, "sbatch_args": ["-t10"]}, {}, "one long sbatch option"),
    ({"nodes": 1, "sbatch_args": ["--out=/x"]}, {}, "sbatch could read --out as --output"),
    ({"nodes": 1, "sbatch_args": ["--nodel=n1"]}, {}, "read --nodel as --nodelist: use "
                                                      "fleet's --nodelist"),
    ({"nodes": 1, "sbatch_args": ["--exclusive=user"]}, {}, "whole to one task"),
    ({"nodes": 1, "sbatch_args": ["--oversubscribe"]}, {}, "whole to one task"),
    ({"nodes": 1, "sbatch_args": ["--mem-per-cpu=1G"]}, {}, "whole to one task"),
    ({"nodes": 1, "sbatch_args": ["--cpus-per-task=4"]}, {}, "whole to one task"),
    ({"nodes": 1, "sbatch_args": ["--export=NONE"]}, {}, "use --env KEY=VALUE"),
    ({"nodes": 1, "sbatch_args": ["--get-user-env"]}, {}, "use --env KEY=VALUE"),
    ({"nodes": 1, "sbatch_args": ["--array=0-3"]}, {}, "use --max-running"),
    ({"nodes": 1, "sbatch_args": ["--exclude=n1"]}, {}, "excludes machines itself"),
    ({"nodes": 1, "max_running": 0}, {}, "--max-running 0: at least 1"),
    ({"nodes": 1, "max_running": 2, "gang": True}, {}, "a --gang job runs on every"),
    ({"nodes": 1, "env": {"SLURM_X": "1"}}, {}, "not SLURM_*"),
    ({"nodes": 1, "env": {"A-B": "1"}}, {}, "not a variable name"),
    ({"nodes": 1, "env": {"OMP": "1,2"}}, {}, "--env 'OMP=1,2' cannot stand on an "
                                              "#SBATCH line: it holds ','"),
    ({"nodes": 1, "sbatch_args": ["--requeue"]}, {}, "never requeued"),
    ({"nodes": 1, "sbatch_args": ["--clusters=other"]}, {}, "this cluster's controller"),
    ({"nodes": 1, "sbatch_args": ["--comment=two words"]}, {}, "it holds ' '"),
    ({"nodes": 1}, {"nosuch": "1"}, "declares no such variable"),
    ({"nodes": 1}, {"size": "banana"}, "option 'size': not a size: 'banana'"),
])
def test_bad_input_is_refused(tmp_path, options, variables, message):
    with pytest.raises(UserError, match=re.escape(message)):
        submit.prepare(str(write_suite(tmp_path)), variables, script.Options(**options),
                       str(tmp_path / "r"), dry_run=True)


def test_other_sbatch_options_pass(tmp_path):
    options = script.Options(nodes=1, sbatch_args=[
        "--qos=high", "--gpus-per-node=1", "--mem-bind=local", "--reservation=lab",
        "--begin=now+1hour", "--hold", "--account=lab"]).validate()
    text = script.sbatch_script(name="t", options=options, fleet_dir="/r/fleet/x",
                                results_dir="/r", commands={None: ["true"]}, comment="t")
    assert sbatch_lines(text)[-7:] == options.sbatch_args


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    r = cxlbench("fleet", "submit", *GANG, str(write_suite(tmp_path)), "--nodes", "2",
                 "--nodelist", "a,b", "--dry-run")
    assert r.returncode == 2 and r.stderr.startswith("error: give --nodes N or --nodelist")
    assert r.stderr.count("\n") == 1                 # one line, no traceback


def test_unknown_suite(tmp_path):
    r = cxlbench("fleet", "submit", *GANG, "no-such-suite", "--nodes", "1", "--dry-run")
    assert r.returncode == 2 and "no suite 'no-such-suite'" in r.stderr


def test_submit_without_slurm_says_so(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = cxlbench("fleet", "submit", *GANG, str(write_suite(tmp_path)), "--nodes", "1",
                 "--results", str(tmp_path / "r"), env={"PATH": str(empty)})
    assert r.returncode == 2 and "SLURM is not installed here: no sbatch" in r.stderr
    assert not (tmp_path / "r").exists()              # nothing made for a job never queued


def test_a_refused_job_leaves_no_fleet(tmp_path):
    bin_dir = tmp_path / "bin"
    fake(bin_dir, "sbatch", 'sys.exit("sbatch: error: Batch job submission failed: '
                            'Invalid partition name specified")')
    r = cxlbench("fleet", "submit", *GANG, str(write_suite(tmp_path)), "--nodes", "1",
                 "-p", "nope",
                 "--results", str(tmp_path / "r"),
                 env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert r.returncode == 1 and "Invalid partition name specified" in r.stderr
    assert list((tmp_path / "r" / "fleet").iterdir()) == []


def test_run_records_slurm_fields_and_resume_adds_its_job(tmp_path):
    env = {**NO_SLURM_ENV, "SLURM_JOB_ID": "77", "SLURMD_NODENAME": "n1",
           "SLURM_NODEID": "0", "SLURM_JOB_PARTITION": "lab", "SLURM_CLUSTER_NAME": "c1"}
    r = cxlbench("run", str(write_suite(tmp_path)), "--results-dir", str(tmp_path / "r"),
                 env=env)
    assert r.returncode == 0, r.stderr
    (run_dir,) = [p.parent for p in (tmp_path / "r").glob("*/*/run.json")]
    assert results.read_meta(run_dir)["slurm"] == {
        "job_id": "77", "array_job_id": None, "array_task_id": None, "node": "n1",
        "node_index": "0", "partition": "lab", "cluster": "c1"}
    # The last case unfinished, then resumed by another job's array task.
    journal = run_dir / "cases.jsonl"
    journal.write_text(journal.read_text().splitlines(keepends=True)[0])
    r = cxlbench("run", "--resume", str(run_dir),
                 env={**env, "SLURM_JOB_ID": "90", "SLURM_ARRAY_JOB_ID": "88",
                      "SLURM_ARRAY_TASK_ID": "2"})
    assert r.returncode == 0, r.stderr
    meta = results.read_meta(run_dir)
    assert meta["slurm"]["job_id"] == "77"
    assert [(s["job_id"], s["array_job_id"], s["array_task_id"])
            for s in meta["slurm_resumed"]] == [("90", "88", "2")]
    # A fleet of job 77 finds the run by its job; a run whose folder is named (by when
    # it began) days before the fleet is not read at all.
    fleet = record.create(tmp_path / "r", {})
    fleet.add_job("77", "c1", "job.sbatch", None)
    assert fleet.runs() == {"n1": run_dir}
    old = run_dir.parent / "20200101-000000"
    shutil.copytree(run_dir, old)
    (old / "run.json").write_text((old / "run.json").read_text().replace('"n1"', '"n2"'))
    assert fleet.runs() == {"n1": run_dir}
    # Job ids are unique within one cluster only: job 77 of another cluster sharing the
    # results folder is not this fleet's.
    other = run_dir.parent.parent.parent / "n3" / run_dir.name
    shutil.copytree(run_dir, other)
    (other / "run.json").write_text((other / "run.json").read_text()
                                    .replace('"n1"', '"n3"').replace('"c1"', '"c2"'))
    assert results.read_meta(other)["slurm"]["cluster"] == "c2"
    assert fleet.runs() == {"n1": run_dir}
    r = cxlbench("run", str(write_suite(tmp_path)), "--results-dir", str(tmp_path / "plain"),
                 env=NO_SLURM_ENV)
    assert r.returncode == 0, r.stderr
    (plain,) = [p.parent for p in (tmp_path / "plain").glob("*/*/run.json")]
    assert results.read_meta(plain)["slurm"] is None


def test_parse_scontrol_record():
    line = ("JobId=3 JobName=t.sbatch UserId=root(0) JobState=TIMEOUT Reason=TimeLimit "
            "ExitCode=143:0 CPUs/Task=1 NodeList=vm Command=/tmp/a b/job.sbatch "
            "WorkDir=/tmp/sl")
    rec = slurm.parse_show(line)
    assert rec["JobState"] == "TIMEOUT" and rec["Reason"] == "TimeLimit"
    assert rec["CPUs/Task"] == "1" and rec["Command"] == "/tmp/a b/job.sbatch"
    assert rec["WorkDir"] == "/tmp/sl"


# scontrol as SLURM 22.05 answers for a job that ran out of time on node vm.
SCONTROL = """
if sys.argv[1:3] == ["show", "hostnames"]:
    print("\\n".join(sys.argv[3].split(",")))
elif sys.argv[1:3] == ["show", "job"] and os.environ.get("FAKE_DOWN"):
    sys.exit("slurm_load_jobs error: Unable to contact slurm controller (connect failure)")
elif sys.argv[1:3] == ["show", "job"]:
    state, nodes = json.load(open(os.environ["FAKE_JOBS"])).get(sys.argv[-1], [None, None])
    if state is None:
        sys.exit("slurm_load_jobs error: Invalid job id specified")
    print(f"JobId={sys.argv[-1]} JobName=cxlbench-tiny UserId=root(0) JobState={state} "
          f"Reason={'TimeLimit' if state == 'TIMEOUT' else 'None'} ExitCode=0:15 "
          f"RunTime=00:00:24 TimeLimit=00:00:00 Partition=debug NodeList={nodes} BatchHost=vm")
"""

SBATCH = """
jobs = json.load(open(os.environ["FAKE_JOBS"]))
job = str(100 + len(jobs))
jobs[job] = ["RUNNING", os.environ.get("FAKE_NODES", "vm")]
json.dump(jobs, open(os.environ["FAKE_JOBS"], "w"))
print(job + ";cluster")
"""


def fake_slurm(tmp_path: Path) -> tuple[dict, Path]:
    """scontrol and sbatch answering as SLURM does, from jobs.json: {job: [state, nodes]};
    sacct as where there is no accounting."""
    bin_dir, jobs = tmp_path / "bin", tmp_path / "jobs.json"
    jobs.write_text("{}")
    fake(bin_dir, "scontrol", SCONTROL)
    fake(bin_dir, "sbatch", SBATCH)
    fake(bin_dir, "sacct", 'sys.exit("sacct: error: Slurm accounting storage is disabled")')
    return {**NO_SLURM_ENV, "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "FAKE_JOBS": str(jobs)}, jobs


def test_status_and_resume_over_slurms_answers(tmp_path):
    """A one-machine fleet whose job timed out partway: status says failed, with SLURM's
    reason and the log's end; resume writes a script that, run as SLURM would on that
    node, finishes the same run."""
    env, jobs = fake_slurm(tmp_path)
    bin_dir = tmp_path / "bin"
    shared = tmp_path / "shared"
    r = cxlbench("fleet", "submit", *GANG, str(write_suite(tmp_path)), "--nodelist", "vm",
                 "--results", str(shared), env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "100\n"
    (fleet_dir,) = (shared / "fleet").iterdir()
    record = json.loads((fleet_dir / "fleet.json").read_text())
    assert [j["job"] for j in record["jobs"]] == ["100"]
    assert (fleet_dir / "tiny.toml").read_text() == TINY
    assert "--nodelist=vm" in sbatch_lines((fleet_dir / "job.sbatch").read_text())

    r = cxlbench("fleet", "status", "100", "--results", str(shared), "--json", env=env)
    assert r.returncode == 0, r.stderr
    (m,) = json.loads(r.stdout)
    assert (m["node"], m["state"], m["job"], m["run"]) == ("vm", "running", "100", None)

    # The job's task: its run, cut short after the first case, and its log.
    task = {**env, "SLURM_JOB_ID": "100", "SLURMD_NODENAME": "vm"}
    r = cxlbench("run", str(fleet_dir / "tiny.toml"), "--results-dir", str(shared), env=task)
    assert r.returncode == 0, r.stderr
    (run_dir,) = [p.parent for p in shared.glob("*/*/run.json")]
    journal = run_dir / "cases.jsonl"
    journal.write_text(journal.read_text().splitlines(keepends=True)[0])
    (fleet_dir / "logs" / "vm-100.log").write_text(
        "[1/2] lat/000 chase ...\nslurmstepd: error: *** JOB 100 ON vm CANCELLED AT "
        "2026-12-01T13:53:30 DUE TO TIME LIMIT ***\n")
    jobs.write_text(json.dumps({"100": ["TIMEOUT", "vm"]}))
    r = cxlbench("fleet", "status", "100", "--results", str(shared), env=env)
    assert r.returncode == 0, r.stderr
    assert "vm  failed   job 100" in r.stdout
    assert "TIMEOUT (TimeLimit), exit code 0:15; 1 of 2 cases finished" in r.stdout
    assert "DUE TO TIME LIMIT" in r.stdout and str(run_dir) in r.stdout

    r = cxlbench("fleet", "resume", "100", "--results", str(shared), "--dry-run", env=env)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "--nodelist=vm" in sbatch_lines(text)
    resume = shlex.join([sys.executable, "-m", "cxlbench", "run", "--resume", str(run_dir)])
    assert f'vm) run_on "$n" {resume} & ;;' in text
    # Run the script as SLURM would on vm, srun running the command on this machine.
    seen = tmp_path / "srun.json"
    srun_recorder(bin_dir, seen)
    task["SLURM_JOB_NODELIST"] = "vm"
    done = subprocess.run(["bash", "-c", text], env={**task, "SLURM_JOB_ID": "101"},
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "resuming" in done.stderr and "1 of 2 cases already finished" in done.stderr
    assert len(results.Run.open(run_dir).finished()) == 2
    # A node the script does not name refuses, rather than run something else.
    other = subprocess.run(["bash", "-c", text], env={**task, "SLURM_JOB_NODELIST": "n9",
                                                       "SLURM_JOB_ID": "102"},
                           capture_output=True, text=True)
    assert other.returncode == 2 and "nothing to run on n9" in other.stderr

    r = cxlbench("fleet", "resume", "100", "--results", str(shared), env=env)
    assert r.returncode == 0, r.stderr
    assert "nothing to resume" in r.stderr       # the run finished meanwhile
    r = cxlbench("fleet", "status", "100", "--results", str(shared), "--json", env=env)
    (m,) = json.loads(r.stdout)
    assert (m["state"], m["finished"], m["cases"]) == ("done", 2, 2)


def test_status_of_an_unknown_job(tmp_path):
    r = cxlbench("fleet", "status", "4242", "--results", str(tmp_path))
    assert r.returncode == 2 and "no fleet of job 4242" in r.stderr


def test_collect_compares_each_machine_with_the_reference(tmp_path):
    """Two machines' runs of one job (this host standing in for n1 and n2): collect
    reports both, each against the one --against names, with their SLURM fields."""
    env, jobs = fake_slurm(tmp_path)
    shared = tmp_path / "shared"
    r = cxlbench("fleet", "submit", *GANG, str(write_suite(tmp_path)), "--nodes", "2",
                 "--results", str(shared), env={**env, "FAKE_NODES": "n1,n2"})
    assert r.returncode == 0, r.stderr
    for node in ("n1", "n2"):
        r = cxlbench("run", str(write_suite(tmp_path)), "--results-dir", str(shared),
                     env={**env, "SLURM_JOB_ID": "100", "SLURMD_NODENAME": node,
                          "SLURM_JOB_PARTITION": "lab"})
        assert r.returncode == 0, r.stderr
    jobs.write_text(json.dumps({"100": ["COMPLETED", "n1,n2"]}))
    r = cxlbench("fleet", "collect", "100", "--results", str(shared), "-o",
                 str(tmp_path / "out"), "--against", "n9", env=env)
    assert r.returncode == 2 and "--against n9: not a machine of the fleet" in r.stderr
    r = cxlbench("fleet", "collect", "100", "--results", str(shared), "-o",
                 str(tmp_path / "out"), "--against", "n2", "--interval", "0.1", env=env)
    assert r.returncode == 0, r.stderr
    assert "2 done" in r.stderr
    md = (tmp_path / "out" / "report.md").read_text()
    assert "### n1 against n2" in md and "n2 against n1" not in md
    assert "metrics compared" in md and "A is n2, B is n1." in md
    for node in ("n1", "n2"):
        assert f"| {node} | done | 100 |  |  | lab |" in md


def test_a_job_scontrol_forgot_is_read_from_sacct(tmp_path, monkeypatch):
    """After MinJobAge the controller forgets an ended job; sacct (where the cluster keeps
    accounting) still says how it ended, in its own words."""
    bin_dir = tmp_path / "bin"
    fake(bin_dir, "scontrol", 'sys.exit("slurm_load_jobs error: Invalid job id specified")')
    fake(bin_dir, "sacct", 'print({"7": "7|TIMEOUT|0:0|n1,n2|lab|00:01:00", '
                           '"8": "8|CANCELLED by 0|0:0|None assigned|lab|01:00:00"}'
                           '.get(sys.argv[sys.argv.index("-j") + 1], ""))')
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert slurm.job("7") == {"state": "TIMEOUT", "reason": None, "nodes": ["n1", "n2"],
                              "exit_code": "0:0", "partition": "lab", "time_limit": "00:01:00"}
    cancelled = slurm.job("8")
    assert (cancelled["state"], cancelled["reason"], cancelled["nodes"]) == \
        ("CANCELLED", "CANCELLED by 0", [])
    assert slurm.job("9") is None
    # No accounting: SLURM no longer knows the job; the database down: it did not answer.
    fake(bin_dir, "sacct", 'sys.exit("sacct: error: Slurm accounting storage is disabled")')
    assert slurm.job("7") is None
    fake(bin_dir, "sacct", 'sys.exit("sacct: error: Problem talking to the database: '
                           'Connection refused")')
    with pytest.raises(slurm.SlurmError, match="Problem talking to the database"):
        slurm.job("7")


# Accounting several clusters share, where job id 7 was used again: (cluster, start, row).
SACCT_SHARED = """
rows = [("c2", "2026-11-30T12:00:00", "7|FAILED|1:0|x1|p|1"),
        ("c1", "2025-01-01T00:00:00", "7|COMPLETED|0:0|old1|p|1"),
        ("c1", "2026-12-01T09:30:00", "7|TIMEOUT|0:0|n1,n2|lab|00:01:00")]
a = sys.argv
cluster = a[a.index("-M") + 1] if "-M" in a else None
since = a[a.index("-S") + 1] if "-S" in a else ""
print("\\n".join(row for c, start, row in rows if cluster in (None, c) and start >= since))
"""


def test_sacct_is_asked_for_the_job_on_its_cluster_since_it_was_submitted(
        tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    fake(bin_dir, "scontrol", 'sys.exit("slurm_load_jobs error: Invalid job id specified")')
    fake(bin_dir, "sacct", SACCT_SHARED)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    now = slurm.job("7", "c1", "2026-12-01T11:00:00+0100")
    assert (now["state"], now["nodes"]) == ("TIMEOUT", ["n1", "n2"])


def test_a_controller_that_does_not_answer_ends_nothing(tmp_path, monkeypatch):
    """scontrol failing for any reason but an unknown job id says nothing of the job:
    its machines show unknown, not failed; resume refuses (unless --force) rather than
    run them twice; collect asks again until SLURM answers."""
    env, jobs = fake_slurm(tmp_path)
    shared = tmp_path / "shared"
    r = cxlbench("fleet", "submit", *GANG, str(write_suite(tmp_path)), "--nodelist", "vm",
                 "--results", str(shared), env=env)
    assert r.returncode == 0, r.stderr
    env["FAKE_DOWN"] = "1"
    r = cxlbench("fleet", "status", "100", "--results", str(shared), "--json", env=env)
    assert r.returncode == 0, r.stderr
    (m,) = json.loads(r.stdout)
    assert m["state"] == "unknown", m
    assert m["reason"] == ("SLURM did not answer: scontrol show job 100: slurm_load_jobs "
                           "error: Unable to contact slurm controller (connect failure); "
                           "no run started")
    r = cxlbench("fleet", "resume", "100", "--results", str(shared), env=env)
    assert r.returncode == 2 and "SLURM did not say whether job 100 ended on vm" in r.stderr
    assert json.loads(jobs.read_text()).keys() == {"100"}          # nothing submitted
    r = cxlbench("fleet", "resume", "100", "--results", str(shared), "--force", "--dry-run",
                 env=env)
    assert r.returncode == 0 and "--nodelist=vm" in sbatch_lines(r.stdout)

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    said = []

    def progress(line):
        said.append(line)
        monkeypatch.delenv("FAKE_DOWN", raising=False)   # SLURM answers the next time: it ended
        jobs.write_text(json.dumps({"100": ["COMPLETED", "vm"]}))
    (m,) = collect.wait(record.find("100", shared), progress, interval=0.01)
    assert said == ["1 unknown", "1 failed"] and m.state == "failed"


def test_a_steps_end_is_read_from_the_jobs_output(tmp_path):
    """Each machine's own step ends apart: srun's word for its task or its node, or else
    the script's line for its step, is that machine's (and no other's)."""
    fleet = record.create(tmp_path, {})
    (fleet.path / "job-7.out").write_text(
        "srun: error: n1: task 0: Exited with exit code 2\n"
        "cxlbench fleet: n1: srun exit code 2\n"
        "srun: error: Node failure on n2\n"
        "srun: error: Task launch for StepId=7.2 failed on node n3: Invalid node name\n"
        "cxlbench fleet: n4: srun exit code 1\n")
    assert status._task_ends(fleet.path / "job-7.out") == {
        "n1": "Exited with exit code 2", "n2": "Node failure on n2",
        "n3": "Task launch for StepId=7.2 failed on node n3: Invalid node name",
        "n4": "srun exit code 1"}


@pytest.mark.parametrize("folder", ["/r/a b", "/r/it's", "/r/50%j", "/r/a\\b"])
def test_folders_sbatch_would_split_or_expand_are_refused(folder):
    with pytest.raises(UserError, match=f"--results {re.escape(repr(folder))} cannot "
                       "stand on an #SBATCH line"):
        script.sbatch_script(name="t", options=script.Options(nodes=1).validate(),
                             fleet_dir=f"{folder}/fleet/x", results_dir=folder,
                             commands={None: ["true"]}, comment="t")


def test_machines_stay_known_after_slurm_forgets_the_job(tmp_path):
    """--nodes 2: the job wrote its machines down as it started; once the controller
    forgets the job (no accounting), the machine that never started a run is still
    shown, and resumed. Where nothing was written down, status says machines are
    missing."""
    env, jobs = fake_slurm(tmp_path)
    shared = tmp_path / "shared"
    r = cxlbench("fleet", "submit", *GANG, str(write_suite(tmp_path)), "--nodes", "2",
                 "--results", str(shared), env={**env, "FAKE_NODES": "n1,n2"})
    assert r.returncode == 0, r.stderr
    (fleet_dir,) = (shared / "fleet").iterdir()
    (fleet_dir / "nodes-100").write_text("n1\nn2\n")         # as the job writes it
    r = cxlbench("run", str(write_suite(tmp_path)), "--results-dir", str(shared),
                 env={**env, "SLURM_JOB_ID": "100", "SLURMD_NODENAME": "n1"})
    assert r.returncode == 0, r.stderr
    (run_dir,) = [p.parent for p in shared.glob("*/*/run.json")]
    journal = run_dir / "cases.jsonl"
    journal.write_text(journal.read_text().splitlines(keepends=True)[0])
    jobs.write_text("{}")                                      # forgotten
    r = cxlbench("fleet", "status", "100", "--results", str(shared), "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert [(m["node"], m["state"], m["run"]) for m in json.loads(r.stdout)] == [
        ("n1", "failed", str(run_dir)), ("n2", "failed", None)]
    assert "warning" not in r.stderr
    r = cxlbench("fleet", "resume", "100", "--results", str(shared), "--dry-run", env=env)
    assert r.returncode == 0, r.stderr
    assert "--nodelist=n1,n2" in sbatch_lines(r.stdout)
    (fleet_dir / "nodes-100").unlink()
    r = cxlbench("fleet", "status", "100", "--results", str(shared), env=env)
    assert r.returncode == 0, r.stderr
    assert "warning: job 100 asked for 2 machines; only 1 known (n1)" in r.stderr


def test_status_writes_down_machines_slurm_gave(tmp_path):
    """A job SLURM gave machines but whose script never ran: status, seeing them while
    SLURM knows the job, writes them down for later."""
    env, jobs = fake_slurm(tmp_path)
    shared = tmp_path / "shared"
    r = cxlbench("fleet", "submit", *GANG, str(write_suite(tmp_path)), "--nodes", "2",
                 "--results", str(shared), env={**env, "FAKE_NODES": "n1,n2"})
    assert r.returncode == 0, r.stderr
    jobs.write_text(json.dumps({"100": ["NODE_FAIL", "n1,n2"]}))
    (fleet_dir,) = (shared / "fleet").iterdir()
    before = (fleet_dir / "fleet.json").read_text()
    r = cxlbench("fleet", "status", "100", "--results", str(shared), env=env)
    assert r.returncode == 0, r.stderr
    assert (fleet_dir / "nodes-100").read_text() == "n1\nn2\n"
    # fleet.json is left to submit and resume: status writing it could undo theirs.
    assert (fleet_dir / "fleet.json").read_text() == before


def test_no_job_is_lost_to_another_commands_save(tmp_path):
    """Two commands holding the same fleet: what the one records survives the other's
    record, which re-reads fleet.json under its lock before it writes."""
    first = record.create(tmp_path, {"options": {}})
    first.add_job("100", None, "job.sbatch", None)
    stale, other = record.find("100", tmp_path), record.find("100", tmp_path)
    other.add_job("101", None, "resume-1.sbatch", {"n1": None})
    stale.add_job("102", None, "resume-2.sbatch", {"n2": None})
    assert record.find("100", tmp_path).job_ids() == ["100", "101", "102"]
    with stale.locked():                # reentrant: add_job inside a held lock
        stale.add_job("103", None, "resume-3.sbatch", {"n3": None})
    assert (tmp_path / "fleet" / first.path.name / "fleet.lock").exists()
    # The lock is held against another process while the block runs.
    with stale.locked():
        probe = subprocess.run(
            [sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1]); "
             "fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)", str(first.path / "fleet.lock")],
            capture_output=True, text=True)
    assert probe.returncode != 0 and "BlockingIOError" in probe.stderr


def test_a_link_at_the_fleet_lock_or_a_script_is_not_written_through(tmp_path, monkeypatch):
    """The fleet's folder is in the shared results folder: a link planted at fleet.lock is
    refused, and one at a script's name is replaced, its target untouched."""
    fleet = record.create(tmp_path, {"options": {}})
    victim = tmp_path / "precious"
    victim.write_text("precious\n")
    (fleet.path / "fleet.lock").unlink(missing_ok=True)
    (fleet.path / "fleet.lock").symlink_to(victim)
    with pytest.raises(ResultsError, match="fleet.lock is a symbolic link, not cxlbench's "
                                           "fleet lock"):
        with fleet.locked():
            pass
    (fleet.path / "job.sbatch").symlink_to(victim)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))      # written, then no sbatch
    with pytest.raises(UserError, match="no sbatch on PATH"):
        submit.submit(fleet, "#!/bin/sh\n")
    assert victim.read_text() == "precious\n"


def test_collect_waits_for_a_resume_submitted_meanwhile(tmp_path, monkeypatch):
    env, jobs = fake_slurm(tmp_path)
    shared = tmp_path / "shared"
    r = cxlbench("fleet", "submit", *GANG, str(write_suite(tmp_path)), "--nodelist", "vm",
                 "--results", str(shared), env=env)
    assert r.returncode == 0, r.stderr
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    said = []

    def progress(line):
        said.append(line)
        if len(said) == 1:              # job 100 fails; another command resumes it
            jobs.write_text(json.dumps({"100": ["FAILED", "vm"], "101": ["RUNNING", "vm"]}))
            record.find("100", shared).add_job("101", None, "resume-1.sbatch", {"vm": None})
        else:
            jobs.write_text(json.dumps({"100": ["FAILED", "vm"], "101": ["FAILED", "vm"]}))
    (m,) = collect.wait(record.find("100", shared), progress, interval=0.01)
    assert said == ["1 running", "1 running", "1 failed"] and m.job == "101"


def test_sbatch_that_does_not_answer_keeps_the_fleet(tmp_path, monkeypatch):
    """sbatch timing out may have queued the job all the same: its folder stays."""
    bin_dir = tmp_path / "bin"
    fake(bin_dir, "sbatch", "import time; time.sleep(5)")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(slurm, "TIMEOUT", 0.5)
    fleet, text = submit.prepare(str(write_suite(tmp_path)), {},
                                 script.Options(nodes=1, gang=True), str(tmp_path / "r"),
                                 local_results=True)
    with pytest.raises(slurm.SlurmError, match="may be queued all the same"):
        submit.submit(fleet, text)
    assert (fleet.path / "job.sbatch").read_text() == text
    assert (fleet.path / "tiny.toml").exists()
    assert status.machines(record.find(str(fleet.path))) == []   # no job known yet


def test_an_unreadable_fleet_hides_no_other(tmp_path):
    older = record.create(tmp_path, {"options": {}})
    older.add_job("100", None, "job.sbatch", None)
    newer = record.create(tmp_path, {"options": {}})
    (newer.path / "fleet.json").write_text('{"format": 1, "jobs": [')   # cut short
    with pytest.warns(ResultsWarning, match=f"{newer.path.name}/fleet.json cannot be read"):
        assert record.find("100", tmp_path).path == older.path


def test_the_default_reference_is_a_machine_that_finished(tmp_path):
    def machine(node, state, finished):
        return status.Machine(node=node, state=state, job="1", run=tmp_path / node,
                              finished=finished, cases=4)
    found = [machine("n1", "failed", 2), machine("n2", "done", 4), machine("n3", "done", 4)]
    assert collect.reference(found, None).node == "n2"
    assert collect.reference(found, "n1").node == "n1"
    assert collect.reference(found[:1], None).node == "n1"     # none finished: the first


def test_force_resumes_no_machine_it_does_not_know(tmp_path):
    """--nodes 2, SLURM not answering before the job wrote its machines down: there is
    nothing --force could resume."""
    env, jobs = fake_slurm(tmp_path)
    shared = tmp_path / "shared"
    r = cxlbench("fleet", "submit", *GANG, str(write_suite(tmp_path)), "--nodes", "2",
                 "--results", str(shared), env=env)
    assert r.returncode == 0, r.stderr
    env["FAKE_DOWN"] = "1"
    r = cxlbench("fleet", "status", "100", "--results", str(shared), "--json", env=env)
    (m,) = json.loads(r.stdout)
    assert (m["node"], m["state"], m["allocated"]) == ("(2 unallocated)", "unknown", False)
    r = cxlbench("fleet", "resume", "100", "--results", str(shared), "--force", env=env)
    assert r.returncode == 2 and "job 100 has no machines known here" in r.stderr


def test_a_machine_whose_step_ended_while_the_job_runs_on(tmp_path):
    """One machine's step ended badly while the job runs on the others: that machine is
    failed at once, in srun's word, with the job's state (RUNNING, or COMPLETING)."""
    env, jobs = fake_slurm(tmp_path)
    shared = tmp_path / "shared"
    r = cxlbench("fleet", "submit", *GANG, str(write_suite(tmp_path)), "--nodelist", "n1,n2",
                 "--results", str(shared), env={**env, "FAKE_NODES": "n1,n2"})
    assert r.returncode == 0, r.stderr
    (fleet_dir,) = (shared / "fleet").iterdir()
    (fleet_dir / "job-100.out").write_text("srun: error: n2: task 0: Killed\n"
                                           "cxlbench fleet: n2: srun exit code 137\n")
    r = cxlbench("fleet", "status", "100", "--results", str(shared), "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert [(m["node"], m["state"], m["reason"]) for m in json.loads(r.stdout)] == [
        ("n1", "running", None),
        ("n2", "failed", "job 100 is RUNNING, but this machine's step ended; its task: "
                         "Killed; no run started")]


def test_readmes_fleet_commands_as_written(tmp_path):
    """README's fleet block, word for word: each submit line's script (--dry-run, no SLURM
    here: lab[1-4] expanded by cxlbench itself), and the other commands' options parsed
    as far as finding no fleet of job 4242."""
    text = manual.page("fleets.md")
    block = text.split("# Fleets: one suite on every machine of a SLURM cluster")[1]
    block = block.split("```")[1]
    lines = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert len(lines) == 5 and all(line.startswith("cxlbench fleet ") for line in lines)
    env = {**NO_SLURM_ENV, "PATH": "/usr/bin:/bin"}     # no sbatch, scontrol or sinfo
    for line in lines:
        args = shlex.split(line)[1:]
        if args[1] == "submit":
            r = cxlbench(*args, "--dry-run", env=env, cwd=tmp_path)
            assert r.returncode == 0, (line, r.stderr)
            found = sbatch_lines(r.stdout)
            assert "--partition=cxl" in found and "--nodes=1" in found
            if "--nodelist" in args:
                assert "--array=0-3" in found and "--time=1:00:00" in found
            else:
                assert "--array=0-999%100" in found
                assert any(x.startswith("--time=") for x in found)
                assert "# time limit " in r.stdout
        else:
            r = cxlbench(*args, env=env, cwd=tmp_path)
            assert r.returncode == 2 and "no fleet of job 4242" in r.stderr, (line, r.stderr)
