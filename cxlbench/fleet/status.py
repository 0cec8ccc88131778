"""Each machine of a fleet (each task, in an array fleet): pending, running (and the case
it is on), done, failed (and why), or unknown (SLURM did not answer), from what SLURM says
of the job that last ran on it and from its run folder's journal, which a finished case
reaches whole or not at all."""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .. import results
from ..errors import ResultsError, ResultsWarning, UserError
from . import record, slurm

LOG_LINES = 5       # the end of a failed machine's log shown with its reason


@dataclass
class Machine:
    node: str
    state: str                      # pending, running, done, failed, unknown
    job: str                        # the job that last ran (or waits to run) here
    run: Path | None = None         # its run folder, once the run started
    finished: int = 0               # cases in the run's journal
    cases: int | None = None        # cases in the run
    failed_cases: int = 0           # finished, but failed or unsupported
    case: str | None = None         # running: the case it is on
    reason: str | None = None       # pending: SLURM's; failed: why; unknown: SLURM's error
    log: Path | None = None
    log_tail: list[str] = field(default_factory=list)
    allocated: bool = True          # False: a job's machines SLURM has not chosen yet
    task: int | None = None         # an array fleet's task

    def to_dict(self) -> dict:
        return {**self.__dict__, "run": str(self.run) if self.run else None,
                "log": str(self.log) if self.log else None}


def machines(fleet: record.Fleet) -> list[Machine]:
    """Every machine of the fleet known so far, sorted by name: those its jobs were given
    or allocated, and those that started a run. Each job's allocation is written down
    (nodes-JOB, by the job as it starts, or here), so machines stay known after SLURM
    forgets the job; a ResultsWarning says where fewer are known than were asked for."""
    if not fleet.jobs:
        return []                       # its sbatch did not answer: no job known
    if fleet.array:
        return _tasks(fleet)
    runs = fleet.runs()
    info = {j["job"]: _ask(j) for j in fleet.jobs}
    last: dict[str, dict] = {}          # node -> the job that last covered it
    waiting = []                        # jobs pending on machines not yet chosen
    for j in fleet.jobs:
        now = info[j["job"]]
        if j["machines"] is not None:
            nodes = list(j["machines"])
        else:
            nodes = fleet.nodes(j["job"])
            if not nodes and isinstance(now, dict) and now["nodes"]:
                nodes = now["nodes"]
                fleet.keep_nodes(j["job"], nodes)
            nodes = nodes or _asked(fleet)
        if not nodes:
            waiting.append(j)
        for node in nodes:
            last[node] = j
    for node in runs:
        last.setdefault(node, fleet.jobs[0])
    out = [_machine(fleet, node, j, info[j["job"]], _run_of(j, node, runs))
           for node, j in sorted(last.items())]
    asked = fleet.data["options"].get("nodes")
    for j in waiting:
        if not any(m.job == j["job"] for m in out):
            m = _machine(fleet, f"({asked} unallocated)", j, info[j["job"]], None)
            m.allocated = False
            out.append(m)
    if asked and len(last) < asked and not any(not m.allocated for m in out):
        warnings.warn(f"job {fleet.jobs[0]['job']} asked for {asked} machines; only "
                      f"{len(last)} known ({', '.join(sorted(last))}): SLURM no longer "
                      f"knows the job and the others were not written down (nodes-"
                      f"{fleet.jobs[0]['job']} in {fleet.path}); they are not shown",
                      ResultsWarning, stacklevel=2)
    return out


def _tasks(fleet: record.Fleet) -> list[Machine]:
    """An array fleet's tasks, each as the machine it last ran on (or "(task N)" until
    SLURM gives it one): the newest job covering the task (the array, or a resume of it)
    says its state; the task's newest run, its progress."""
    runs = fleet.task_runs()
    started = {(a["task"], a["job"]): a for a in fleet.attempts()}
    last: dict[int, dict] = {}
    for j in fleet.jobs:
        for t in j.get("tasks") or []:
            last[t] = j
    info = {j["job"]: _ask(j) if j["machines"] is not None else _ask_array(j)
            for j in fleet.jobs}
    out = []
    for t in range(fleet.data["tasks"]):
        j = last.get(t, fleet.jobs[0])
        now = info[j["job"]]
        if isinstance(now, dict) and j["machines"] is None:
            now = now.get(t)             # this task's record of the array
        ran = runs.get(t, [])
        start = started.get((t, j["job"]))
        if j["machines"] is not None:    # resumed on its own machine by a gang job
            run = ran[-1][1] if ran else None
            node = next((n for n, r in j["machines"].items() if r and Path(r) == run),
                        ran[-1][0] if ran else None)
        else:
            # Where the task last ran: as it wrote down, else as SLURM says, else where
            # its newest run is (SLURM and the task both forgot); its run is its newest
            # there (a resume that landed elsewhere and failed early made none).
            node = start["node"] if start else None
            if node is None and isinstance(now, dict) and now["nodes"]:
                node = now["nodes"][0]
            if node is None and ran and not (isinstance(now, dict) and
                                             now["state"] in slurm.WAITING):
                node = ran[-1][0]
            run = next((r for n, r in reversed(ran) if n == node), None)
        log = fleet.path / "logs" / f"task-{t}-{j['job']}.log" \
            if j["machines"] is None else None          # a gang's: found by _machine
        m = _machine(fleet, node or f"(task {t})", j, now, run, log,
                     _task_ends(log).get(node or "") if log else None)
        m.task, m.allocated = t, node is not None
        out.append(m)
    return out


def _ask_array(job: dict) -> dict | slurm.SlurmError | None:
    try:
        return slurm.array_tasks(job["job"], job.get("cluster"), job.get("submitted"))
    except slurm.SlurmError as e:
        return e


def _ask(job: dict) -> dict | slurm.SlurmError | None:
    """What SLURM says of the job, or why it said nothing (kept apart from an end)."""
    try:
        return slurm.job(job["job"], job.get("cluster"), job.get("submitted"))
    except slurm.SlurmError as e:
        return e


def _asked(fleet: record.Fleet) -> list[str]:
    nodelist = fleet.data["options"].get("nodelist")
    try:
        return slurm.hostnames(nodelist) if nodelist else []
    except (UserError, slurm.SlurmError):   # n[1-4] without SLURM here: from the runs
        return []


# Each machine's end, in the job's output, where it ended badly while others may run on:
# srun's word for its task, for its node, or the script's own line for its step.
_TASK_END = [re.compile(r"srun: error: (?P<node>\S+): tasks? [\d,-]+: (?P<how>.+)"),
             re.compile(r"srun: error: (?P<how>Node failure on (?P<node>\S+))"),
             re.compile(r"srun: error: (?P<how>Task launch for \S+ failed on node "
                        r"(?P<node>[^\s:]+).*)"),
             re.compile(r"cxlbench fleet: (?P<node>[^\s/]+): (?P<how>srun exit code \d+)")]


def _task_ends(output: Path) -> dict[str, str]:
    """Each node whose step ended badly, with the first word for how ("Exited with exit
    code 2", "Killed", "Node failure"), from a job's output file."""
    try:
        text = output.read_text(errors="replace")
    except OSError:
        return {}
    ends: dict[str, str] = {}
    for line in text.splitlines():
        for pattern in _TASK_END:
            m = pattern.match(line)
            if m:
                ends.setdefault(m["node"], m["how"].strip())
                break
    return ends


def _run_of(job: dict, node: str, runs: dict[str, Path]) -> Path | None:
    planned = (job["machines"] or {}).get(node)
    return Path(planned) if planned else runs.get(node)


def _machine(fleet: record.Fleet, node: str, job: dict,
             now: dict | slurm.SlurmError | None, run: Path | None,
             log: Path | None = None, ended: str | None = None) -> Machine:
    """One machine's state. log: its output (a gang's: logs/<node>-<job>.log); ended: how
    its step ended, where its output said (a gang's: from the job's output)."""
    m = Machine(node=node, state="pending", job=job["job"], run=run)
    if run is not None:
        _progress(m, run)
    if m.cases is not None and m.finished == m.cases:
        m.state = "done"
        return m
    if isinstance(now, slurm.SlurmError):
        # Not an end: resume and collect wait for SLURM to say one.
        m.state, m.reason = "unknown", f"SLURM did not answer: {now}; {_progress_words(m)}"
        return m
    if now is not None and now["state"] in slurm.WAITING:
        m.state, m.reason = "pending", now["reason"]
        return m
    if log is None:
        ended = _task_ends(fleet.path / f"job-{job['job']}.out").get(node)
    if now is not None and now["state"] in slurm.ACTIVE and not ended:
        m.state = "running"
        return m
    m.state = "failed"
    if now is None:
        why = f"SLURM does not know job {job['job']} (any more, or here)"
    elif now["state"] in slurm.ACTIVE:
        # RUNNING for the others, or COMPLETING: its end state is not told until it ends.
        why = f"job {job['job']} is {now['state']}, but this machine's step ended"
    else:
        why = now["state"] + (f" ({now['reason']})" if now["reason"] else "") + \
            (f", exit code {now['exit_code']}" if now.get("exit_code") not in
             (None, "", "0:0") else "")
    if ended:
        why += f"; its task: {ended}"
    m.reason = f"{why}; {_progress_words(m)}"
    m.log = log or fleet.log(node, job["job"])
    m.log_tail = _tail(m.log)
    return m


def _progress_words(m: Machine) -> str:
    return (f"{m.finished} of {m.cases} cases finished" if m.cases is not None
            else "no run started")


def _progress(m: Machine, path: Path) -> None:
    try:        # (the journal alone: a fleet's polls must not parse every run's rows)
        run = results.Run.open(path)
        done = run.journal()
    except ResultsError as e:
        m.reason = str(e)
        return
    ids = [c["id"] for c in run.meta["cases"]]
    m.finished, m.cases = len(done), len(ids)
    # As `cxlbench run` counts them: an instruction the CPU lacks is a finding.
    m.failed_cases = sum(1 for e in done.values() if e["status"] not in ("ok", "unsupported"))
    m.case = next((c for c in ids if c not in done), None)


def _tail(path: Path) -> list[str]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in lines if line.strip()][-LOG_LINES:]
