"""SLURM as cxlbench sees it: the fields a run records from its environment, and the
commands (sbatch, scontrol, sacct) run for a fleet. Every call is a subprocess here, so
the rest of the fleet code is plain data and testable without SLURM."""
from __future__ import annotations

import datetime
import os
import re
import shutil
import subprocess

from ..errors import CxlbenchError, UserError

# The environment a task of a SLURM job sees, by the name run.json records it under.
ENV_FIELDS = {"job_id": "SLURM_JOB_ID", "array_job_id": "SLURM_ARRAY_JOB_ID",
              "array_task_id": "SLURM_ARRAY_TASK_ID", "node": "SLURMD_NODENAME",
              "node_index": "SLURM_NODEID", "partition": "SLURM_JOB_PARTITION",
              "cluster": "SLURM_CLUSTER_NAME"}

# Job states in which the job holds (or waits for) its machines; any other is an end.
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
          "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD"}
WAITING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}


def run_fields(environ=os.environ) -> dict | None:
    """What run.json records about the SLURM job this process runs in (None outside one):
    job id, array job and task (None outside an array), node name and index, partition."""
    if not environ.get("SLURM_JOB_ID"):
        return None
    return {key: environ.get(name) or None for key, name in ENV_FIELDS.items()}


class SlurmError(CxlbenchError):
    """A SLURM command that ran and failed (the controller down, a job refused)."""


def require(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise UserError(f"SLURM is not installed here: no {name} on PATH (fleets submit "
                        "through SLURM's sbatch; run on the cluster's login node)")
    return path


class SlurmTimeout(SlurmError):
    """A SLURM command that did not answer in time: what it asked may have been done."""


TIMEOUT = 60.0      # seconds a SLURM command may take


def _run(args: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([require(args[0]), *args[1:]], capture_output=True, text=True,
                              timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        raise SlurmTimeout(f"{' '.join(args)} did not answer in {TIMEOUT:g} s "
                           "(is slurmctld up?)") from None


def submit(script_path: str | os.PathLike) -> tuple[str, str | None]:
    """sbatch the script; its job id, and the cluster it went to (None if unknown): job
    ids are only unique within one cluster."""
    out = _run(["sbatch", "--parsable", str(script_path)])
    if out.returncode != 0:
        raise SlurmError(f"sbatch refused {script_path}: {_said(out)}")
    job, _, cluster = out.stdout.strip().partition(";")    # "JOBID" or "JOBID;CLUSTER"
    return job, cluster or _cluster()


def _cluster() -> str | None:
    """This cluster's name, where sbatch did not say it (it does only with -M)."""
    try:
        return _config().get("ClusterName") or None
    except SlurmError:
        return None


def _config() -> dict[str, str]:
    """`scontrol show config` as {key: value}; SlurmError where the controller does not
    answer."""
    out = _run(["scontrol", "show", "config"])
    if out.returncode != 0:
        raise SlurmError(f"scontrol show config: {_said(out)}")
    conf = {}
    for line in out.stdout.splitlines():
        key, _, value = line.partition("=")
        conf[key.strip()] = value.strip()
    return conf


# slurm.conf(5): an array's task ids run from 0 to one less than MaxArraySize, 1001 by
# default, 4000001 at most; SchedulerParameters' max_array_tasks may allow fewer tasks.
DEFAULT_MAX_ARRAY_SIZE = 1001
MAX_ARRAY_SIZE = 4000001


def array_limit() -> tuple[int, str]:
    """The most tasks an array of task ids 0 to N-1 may hold on this cluster, and the
    setting that says so; SlurmError (or UserError, SLURM not installed) where SLURM
    cannot be asked."""
    conf = _config()
    size = conf.get("MaxArraySize", "")
    if size.isdigit():
        limit, said = int(size), f"MaxArraySize = {size}"
    else:                       # (every scontrol prints it; a stand-in may not)
        limit, said = DEFAULT_MAX_ARRAY_SIZE, f"MaxArraySize's default {DEFAULT_MAX_ARRAY_SIZE}"
    tasks = re.search(r"(?:^|,)max_array_tasks=(\d+)", conf.get("SchedulerParameters", ""))
    if tasks and int(tasks[1]) < limit:
        limit, said = int(tasks[1]), f"SchedulerParameters' max_array_tasks={tasks[1]}"
    return limit, said


def parse_show(line: str) -> dict[str, str]:
    """One `scontrol show -o` record as {key: value}: words joined back where a value
    holds spaces (a command line, a path)."""
    out: dict[str, str] = {}
    key = None
    for word in line.strip().split(" "):
        name, sep, value = word.partition("=")
        if sep and name:
            key = name
            out[key] = value
        elif key is not None:
            out[key] += " " + word
    return out


def job(job_id: str, cluster: str | None = None, submitted: str | None = None
        ) -> dict | None:
    """A job as SLURM remembers it: {state, reason, nodes (list), exit_code, partition,
    time_limit}, from scontrol while the controller keeps it (MinJobAge, 300 s by default
    after the end), then from sacct where accounting is on; None where the controller
    has forgotten it and accounting does not know it, or where SLURM is not installed
    (results copied off the cluster still read). SlurmError where SLURM did not answer
    (the controller or the database down, a timeout): that says nothing of the job.
    cluster and submitted (as fleet.json records them) pick the job out of accounting
    that holds several clusters, or job ids used again."""
    if shutil.which("scontrol") is None:
        return None
    out = _run(["scontrol", "show", "job", "-o", str(job_id)])
    if out.returncode == 0 and out.stdout.strip():
        rec = parse_show(out.stdout.splitlines()[0])
        return {**_state(rec), "partition": rec.get("Partition"),
                "time_limit": rec.get("TimeLimit")}
    said = _sacct(job_id, cluster, submitted, out,
                  "JobIDRaw,State,ExitCode,NodeList,Partition,Timelimit")
    if said is None:
        return None
    rows = [r.split("|")[1:] for r in said.splitlines() if r.split("|")[0] == str(job_id)]
    if not rows:
        return None
    state, code, nodes, partition, limit = (rows[-1] + [""] * 5)[:5]
    word = state.split()[0] if state else "UNKNOWN"      # "CANCELLED by 0"
    return {"state": word, "reason": state if state != word else None,
            "nodes": hostnames(nodes) if nodes and nodes != "None assigned" else [],
            "exit_code": code, "partition": partition, "time_limit": limit}


def _state(rec: dict[str, str]) -> dict:
    """A job's (or array task's) state, reason, machines and exit code from its scontrol
    record."""
    nodes = rec.get("NodeList")
    return {"state": rec.get("JobState", "UNKNOWN").split()[0],
            "reason": None if rec.get("Reason") in (None, "None") else rec["Reason"],
            "nodes": hostnames(nodes) if nodes and nodes != "(null)" else [],
            "exit_code": rec.get("ExitCode")}


def _sacct(job_id: str, cluster: str | None, submitted: str | None,
           shown: subprocess.CompletedProcess, fields: str) -> str | None:
    """sacct's lines for a job scontrol answered it no longer keeps (shown: scontrol's
    answer); None where accounting does not know it; SlurmError where SLURM did not
    answer."""
    # Only this answer means the controller no longer keeps the job (it ended).
    if "Invalid job id specified" not in shown.stderr:
        raise SlurmError(f"scontrol show job {job_id}: {_said(shown)}")
    if shutil.which("sacct") is None:
        return None
    # sacct -j searches from the epoch, across job ids used again: from an hour before
    # the submission (clocks differ), on the job's cluster, the newest job of this id.
    out = _run(["sacct", "-n", "-P", "-X", "-j", str(job_id),
                *(["-M", cluster] if cluster else []),
                *(["-S", _local(submitted, -3600)] if submitted else []), "-o", fields])
    if out.returncode != 0:
        if "accounting storage is disabled" in out.stderr:
            return None
        raise SlurmError(f"sacct -j {job_id}: {_said(out)}")
    return out.stdout


def _local(stamp: str, shift: float) -> str:
    """A time fleet.json records (ISO 8601 with its zone) as sacct reads one: this
    host's local time, shifted by seconds."""
    when = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S%z").astimezone()
    return (when + datetime.timedelta(seconds=shift)).strftime("%Y-%m-%dT%H:%M:%S")


def _said(out: subprocess.CompletedProcess) -> str:
    """A failed command's last word (the error, after any warnings)."""
    lines = (out.stderr.strip() or out.stdout.strip()).splitlines()
    return lines[-1] if lines else f"exit code {out.returncode}"


def hostnames(nodelist: str) -> list[str]:
    """A SLURM node list (n[1-3],gpu7) as names, by scontrol where SLURM is installed
    (its word is final), else expanded here (one bracket a name, as most lists are)."""
    if "[" not in nodelist:
        return [n for n in nodelist.split(",") if n]
    said = "not one this host can expand without SLURM's scontrol"
    if shutil.which("scontrol") is not None:
        out = _run(["scontrol", "show", "hostnames", nodelist])
        if out.returncode == 0:
            return out.stdout.split()
        said = _said(out)               # (a host without SLURM's configuration, too)
    names = _expand(nodelist)
    if names is None:
        raise UserError(f"node list {nodelist!r}: {said}")
    return names


def task_ids(spec: str) -> list[int]:
    """An array's task ids as SLURM writes them ("0-9%2", "[3,5-7]", "1-9:2") as a list."""
    spec = spec.strip().strip("[]").split("%", 1)[0]
    out: list[int] = []
    for part in filter(None, spec.split(",")):
        lo, _, rest = part.partition("-")
        hi, _, step = rest.partition(":")
        out += range(int(lo), int(hi or lo) + 1, int(step or 1))
    return out


def task_spec(ids) -> str:
    """Task ids as sbatch's --array takes them, runs of consecutive ids as ranges."""
    ids = sorted(set(ids))
    parts, start = [], None
    for i, n in enumerate(ids):
        if start is None:
            start = n
        if i + 1 == len(ids) or ids[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ",".join(parts)


def array_tasks(job_id: str, cluster: str | None = None, submitted: str | None = None
                ) -> dict[int, dict] | None:
    """Each task of an array job as SLURM remembers it, by task id: {state, reason, nodes,
    exit_code}; pending tasks are kept together by SLURM ("ArrayTaskId=2-9%2") and come
    back one by one. From scontrol while the controller keeps the array, then sacct; None
    where neither knows it (or SLURM is not installed); SlurmError where SLURM did not
    answer."""
    if shutil.which("scontrol") is None:
        return None
    out = _run(["scontrol", "show", "job", "-o", str(job_id)])
    tasks: dict[int, dict] = {}
    if out.returncode == 0 and out.stdout.strip():
        for line in out.stdout.splitlines():
            rec = parse_show(line)
            if rec.get("ArrayJobId") != str(job_id) or "ArrayTaskId" not in rec:
                continue
            info = {**_state(rec), "job_id": rec.get("JobId")}
            for t in task_ids(rec["ArrayTaskId"]):
                tasks[t] = info
        return tasks
    said = _sacct(job_id, cluster, submitted, out, "JobID,State,ExitCode,NodeList,JobIDRaw")
    if said is None:
        return None
    for row in said.splitlines():
        jid, state, code, nodes, raw = (row.split("|") + [""] * 5)[:5]
        head, sep, spec = jid.partition("_")
        if head != str(job_id) or not sep:
            continue
        word = state.split()[0] if state else "UNKNOWN"
        info = {"state": word, "reason": state if state != word else None,
                "nodes": hostnames(nodes) if nodes and nodes != "None assigned" else [],
                "exit_code": code, "job_id": raw}
        for t in task_ids(spec):
            tasks[t] = info
    return tasks or None


def nodes_of(partition: str | None) -> list[str]:
    """The machines of a partition (the default one where None), from sinfo."""
    out = _run(["sinfo", "-h", "-o", "%P %N", *(["-p", partition] if partition else [])])
    if out.returncode != 0:
        raise SlurmError(f"sinfo: {_said(out)}")
    for line in out.stdout.splitlines():
        name, _, nodes = line.strip().partition(" ")
        if partition or name.endswith("*"):
            return hostnames(nodes) if nodes else []
    return []


def pending_excluded(array_job: str) -> list[str]:
    """The machines an array's pending tasks are kept off now ([] where none or where the
    array has none pending)."""
    out = _run(["scontrol", "show", "job", "-o", str(array_job)])
    if out.returncode != 0:
        raise SlurmError(f"scontrol show job {array_job}: {_said(out)}")
    for line in out.stdout.splitlines():
        rec = parse_show(line)
        if rec.get("JobState", "").split()[:1] == ["PENDING"]:
            listed = rec.get("ExcNodeList")
            return hostnames(listed) if listed and listed != "(null)" else []
    return []


def exclude_from_pending(array_job: str, nodes: list[str]) -> str | None:
    """Keep an array's tasks still pending off these machines; None, or SLURM's refusal
    (running tasks cannot be changed, and say so: not a failure here)."""
    out = _run(["scontrol", "update", f"JobId={array_job}", f"ExcNodeList={hostlist(nodes)}"])
    lines = (out.stderr + out.stdout).splitlines()
    # "A_0: Job is no longer pending execution" for each task already started or ended.
    refused = [line for line in lines if line.strip() and not any(
        ok in line for ok in ("No error", "no longer pending", "already finished"))]
    return "; ".join(refused) or None if out.returncode else None


# Node states (sinfo's %t, without its flags) in which a machine takes or will take jobs
# (boot: rebooting, back soon); a trailing * (not responding) makes any state unusable.
USABLE = {"idle", "alloc", "mix", "comp", "resv", "plnd", "boot"}


def unusable(partition: str | None) -> dict[str, str]:
    """The machines of a partition (the default one where None) that take no jobs now
    (down, drained or draining, failed, not responding), each with its state."""
    out = _run(["sinfo", "-h", "-N", "-o", "%N %t", *(["-p", partition] if partition else [])])
    if out.returncode != 0:
        raise SlurmError(f"sinfo: {_said(out)}")
    found: dict[str, str] = {}
    for line in out.stdout.splitlines():
        node, _, state = line.strip().partition(" ")
        if node and (state.endswith("*") or state.rstrip("~#!%$@^-") not in USABLE):
            found[node] = state
    return found


def nodes_with(partition: str | None, feature: str) -> list[str]:
    """The machines of a partition (any, where None) that have this feature."""
    out = _run(["sinfo", "-h", "-N", "-o", "%N %f", *(["-p", partition] if partition else [])])
    if out.returncode != 0:
        raise SlurmError(f"sinfo: {_said(out)}")
    found = []
    for line in out.stdout.splitlines():
        node, _, features = line.strip().partition(" ")
        if feature in features.split(",") and node not in found:
            found.append(node)
    return found


def hostlist(names: list[str]) -> str:
    """Names as SLURM's compressed node list (n[1-999]), or joined where it cannot."""
    if len(names) < 2 or shutil.which("scontrol") is None:
        return ",".join(names)
    out = _run(["scontrol", "show", "hostlist", ",".join(names)])
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() \
        else ",".join(names)


_ONE = re.compile(r"([^\[\],]*)\[([0-9,\-]+)\]([^\[\],]*)")
# SLURM's hostlist expands no range of more names (MAX_SLURM_NODES); nor does this a
# whole node list, which would otherwise take any memory and time a list asks for.
MAX_NAMES = 65536


def _expand(nodelist: str) -> list[str] | None:
    """lab[01-03,7],gpu9 as SLURM expands it (zero padding kept); None for what it is not
    sure of (two brackets in one name, a malformed range)."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]*(?:\[[^\]]*\][^,\[]*)*", nodelist):
        if not part:
            continue
        if "[" not in part:
            out.append(part)
            continue
        m = _ONE.fullmatch(part)
        if m is None:
            return None
        head, ranges, tail = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                return None
            if len(out) + int(hi or lo) - int(lo) >= MAX_NAMES:
                raise UserError(f"node list {nodelist!r}: more than {MAX_NAMES} machines, "
                                "the most SLURM expands in one range")
            width = len(lo)
            out += [f"{head}{i:0{width}d}{tail}" for i in range(int(lo), int(hi or lo) + 1)]
    return out
