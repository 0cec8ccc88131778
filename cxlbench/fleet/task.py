"""`cxlbench fleet task FLEET`: what one array task does on the machine SLURM gave it,
before it becomes an ordinary `cxlbench run`.

- It reads the fleet's record: a results folder the compute nodes do not share stops
  here, with the reason, rather than leaving runs where nobody looks.
- It writes its start down (tasks/<task>-<job>.json): the machine, the run it resumes,
  the names of the variables it was given.
- It keeps the array's pending tasks off the machines the fleet has measured, while
  other machines of the pool are left, so that each task measures a machine of its own.
- It finishes this task's unfinished run where one is on this machine (a resumed task
  landing where it ran before), and otherwise runs the suite afresh: a run started on
  another machine stays that machine's, as a partial run.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from .. import results
from ..errors import UserError
from . import record, slurm, submit


def command(fleet: record.Fleet, task: int, job: str, array_job: str, node: str,
            environ=os.environ) -> list[str]:
    """The command this task becomes, after writing its start down and spreading the
    pending tasks."""
    mine = results.machine_id()
    unfinished = [path for ran_on, path in fleet.task_runs(mine).get(task, [])
                  if ran_on == node and not _finished(path)]
    resumed = unfinished[-1] if unfinished else None
    with fleet.locked():
        fleet.attempt(task, array_job, {
            "node": node, "job_id": job, "resumed": str(resumed) if resumed else None,
            "env": sorted(k for k in environ if not k.startswith("SLURM"))})
        _spread(fleet, array_job)
    if resumed is not None:
        return [sys.executable, "-m", "cxlbench", "run", "--resume", str(resumed)]
    return submit.run_command(str(fleet.path / f"{fleet.data['suite']}.toml"),
                              fleet.data["variables"], fleet.data["results"])


def _finished(path: Path) -> bool:
    try:
        run = results.Run.open(path)
        return len(run.finished()) == len(run.meta["cases"])
    except Exception:               # unreadable: not one to resume
        return True


def _spread(fleet: record.Fleet, array_job: str) -> None:
    """Exclude the machines measured so far from the pending tasks of this array and of
    the fleet's other arrays (a resume's beside the first's), where the pool (the
    machines fleet.json says the arrays may use) has others left: with none left, SLURM
    would hold the tasks forever (BadConstraints), so they may measure a machine again
    instead."""
    if not fleet.data.get("pool"):
        return                          # not known at submission: SLURM chooses
    excluded = fleet.excluded()
    if set(excluded) == set(fleet.data.get("exclude") or []):
        return                          # every machine measured: the tasks may go anywhere
    arrays = dict.fromkeys([array_job, *(j["job"] for j in reversed(fleet.jobs)
                                         if j["machines"] is None)])
    for job in arrays:
        said = slurm.exclude_from_pending(job, excluded)
        # An ended array SLURM has forgotten has nothing pending; a refusal is a note:
        # the task measures all the same.
        if said and (job == array_job or "Invalid job id" not in said):
            print(f"cxlbench fleet: job {job}'s pending tasks not kept off measured "
                  f"machines: {said}", file=sys.stderr)


def main(fleet_dir: str, environ=os.environ) -> list[str]:
    """The command for the task SLURM's variables name, or UserError."""
    try:
        fleet = record.find(fleet_dir)
    except Exception:
        node = environ.get("SLURMD_NODENAME")
        raise UserError(f"{fleet_dir}/{record.RECORD} is not seen on {node or 'this machine'}"
                        ": the results folder must be on a file system every machine mounts"
                        + _keep_off(node, environ.get("SLURM_ARRAY_JOB_ID"))) from None
    try:
        task, array_job = int(environ["SLURM_ARRAY_TASK_ID"]), environ["SLURM_ARRAY_JOB_ID"]
    except (KeyError, ValueError):
        raise UserError("fleet task runs inside a fleet's array job (SLURM_ARRAY_TASK_ID "
                        "and SLURM_ARRAY_JOB_ID unset)") from None
    node = environ.get("SLURMD_NODENAME") or results.machine_id()
    return command(fleet, task, environ.get("SLURM_JOB_ID", ""), array_job, node, environ)


def _keep_off(node: str | None, array_job: str | None) -> str:
    """Keep the array's pending tasks off a machine that cannot run one (it would fail
    them one after another as fast as SLURM hands them out); the words that say so, or
    '' where SLURM would not (the fleet's record, and so its pool, is not at hand here)."""
    if not node or not array_job:
        return ""
    try:
        now = slurm.pending_excluded(array_job)
        if node in now or slurm.exclude_from_pending(array_job, sorted({*now, node})):
            return ""
    except Exception:               # (UserError, SlurmError: no SLURM to ask)
        return ""
    return f"; the array's pending tasks are kept off {node}"
