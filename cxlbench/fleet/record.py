"""A fleet's folder, RESULTS/fleet/<stamp>/, beside the runs it makes: the suite as
submitted, each job's sbatch script, fleet.json (the suite, the options, and every job
submitted for it, the first and each resume; changed under fleet.lock), nodes-<job>, the
machines each job was given, and logs/<node>-<job>.log, each machine's output. The runs
themselves are ordinary run folders, RESULTS/<machine>/<run-id>/, whose run.json names
the SLURM job and node that made them.

An array fleet (fleet.json's "form") also keeps tasks/<task>-<job>.json: each task's start
on a machine (which machine, whether it resumed a run, the names of the variables it saw),
written by the task itself, so that a task is known by its machine before its run exists
and a resume can tell the machine it ran on from the one it lands on."""
from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .. import results
from ..errors import ResultsError, ResultsWarning, StorageError, UserError

FOLDER = "fleet"
RECORD = "fleet.json"
LOCK = "fleet.lock"
FORMAT = 1


@dataclass
class Fleet:
    path: Path
    data: dict
    _lock: IO | None = field(default=None, repr=False, compare=False)

    @property
    def results_dir(self) -> Path:
        return Path(self.data["results"])

    @property
    def jobs(self) -> list[dict]:
        return self.data["jobs"]

    def job_ids(self) -> list[str]:
        return [j["job"] for j in self.jobs]

    @property
    def array(self) -> bool:
        """One array task per machine (else one gang job on every machine at once)."""
        return self.data.get("form") == "array"

    def attempt(self, task: int, job: str, fields: dict) -> None:
        """Write down a task's start on its machine (fields: node, resumed, env ...)."""
        (self.path / "tasks").mkdir(exist_ok=True)
        results._write_atomic(self.path / "tasks" / f"{task}-{job}.json",
                              json.dumps({"task": task, "job": job, **fields}))

    def excluded(self) -> list[str]:
        """The machines an array's tasks yet to start are kept off: those outside its pool,
        and those of the pool it has measured while others are left (none left, they may
        measure one again rather than wait forever)."""
        pool = set(self.data.get("pool") or [])
        measured = {a["node"] for a in self.attempts() if a.get("node")} & pool
        outside = set(self.data.get("exclude") or [])
        return sorted(outside | measured if pool - measured else outside)

    def attempts(self) -> list[dict]:
        """Every task start written down, in the order the jobs were submitted."""
        order = {j: i for i, j in enumerate(self.job_ids())}
        found = []
        for path in (self.path / "tasks").glob("*.json"):
            try:
                found.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue                    # a start half written: its run still counts
        return sorted(found, key=lambda a: (order.get(a.get("job"), -1), a.get("task", -1)))

    def log(self, node: str, job: str) -> Path:
        return self.path / "logs" / f"{node}-{job}.log"

    def nodes(self, job: str) -> list[str]:
        """The machines SLURM gave the job, as the job wrote them down when it started
        (or status did, seeing them first); [] until then."""
        try:
            return (self.path / f"nodes-{job}").read_text().split()
        except OSError:
            return []

    def keep_nodes(self, job: str, nodes: list[str]) -> None:
        """Write the job's machines down where the job has not (it never started): SLURM
        forgets them MinJobAge after the job ends."""
        if not (self.path / f"nodes-{job}").exists():
            try:
                results._write_atomic(self.path / f"nodes-{job}",
                                      "".join(f"{n}\n" for n in nodes))
            except StorageError:
                pass                    # status reads the same now without it

    def reload(self) -> None:
        """fleet.json as it is now: another command may have added a job."""
        self.data = _open(self.path).data

    @contextlib.contextmanager
    def locked(self):
        """fleet.json re-read, and held against other commands (flock on fleet.lock,
        across hosts where NFS runs the lock manager) while the block runs: what one
        adds is not lost to another's save, and two resumes do not pick the same
        machines. Reentrant."""
        if self._lock is not None:
            yield
            return
        try:        # (a plain file of its own: the folder is shared, see results._open_ours)
            self._lock = open(results._open_ours(self.path / LOCK, os.O_RDWR | os.O_CREAT,
                                                 "cxlbench's fleet lock"), "r+")
            fcntl.flock(self._lock, fcntl.LOCK_EX)
        except OSError as e:
            self._lock = None
            raise StorageError(f"cannot lock {self.path / LOCK}: {e.strerror or e}") \
                from None
        try:
            self.reload()
            yield
        finally:
            self._lock.close()              # releases the lock
            self._lock = None

    def add_job(self, job: str, cluster: str | None, script: str,
                machines: dict[str, str | None] | None,
                tasks: list[int] | None = None) -> None:
        """Record a submitted job; machines: for a resume on named machines, each node with
        the run it finishes (None: none started there, it runs the suite afresh); tasks:
        in an array fleet, the tasks the job runs."""
        with self.locked():
            self.jobs.append({"job": job, "cluster": cluster, "script": script,
                              "machines": machines, "tasks": tasks,
                              "submitted": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
            self._save()

    def _save(self) -> None:
        results._write_atomic(self.path / RECORD, json.dumps(self.data, indent=1))

    def runs(self) -> dict[str, Path]:
        """Each node's run started by a job of this fleet (its run.json names the job), by
        node name; where a node has several, the newest."""
        return {slurm["node"]: path for path, slurm in self.started_runs()}

    def task_runs(self, machine: str = "*") -> dict[int, list[tuple[str, Path]]]:
        """An array fleet's runs by task: each (node, run folder), oldest first; machine:
        only those filed under RESULTS/<machine>/."""
        found: dict[int, list[tuple[str, Path]]] = {}
        for path, slurm in self.started_runs(machine):
            try:
                found.setdefault(int(slurm.get("array_task_id")), []).append(
                    (slurm["node"], path))
            except (TypeError, ValueError):
                continue                    # started by a gang job of the fleet
        return found

    def started_runs(self, machine: str = "*") -> list[tuple[Path, dict]]:
        """Every run a job of this fleet started (its run.json names the job, or the
        array job), with run.json's SLURM fields, oldest first."""
        # A job id names one job within one cluster only (None: not known, not checked).
        clusters = {j["job"]: j.get("cluster") for j in self.jobs}
        since = self._day_before()
        found = []
        # Run folders are named by when they began: oldest first, whichever machine.
        for meta_path in sorted(self.results_dir.glob(f"{machine}/*/run.json"),
                                key=lambda p: (p.parent.name, str(p))):
            if since and meta_path.parent.name[:8] < since:
                continue                   # named (by the time it began) before the fleet
            try:
                slurm = results.read_meta(meta_path.parent).get("slurm") or {}
            except ResultsError:
                continue                   # not a run of ours to judge here
            job = slurm.get("array_job_id") or slurm.get("job_id")
            if job in clusters and slurm.get("node") and (
                    None in (clusters[job], slurm.get("cluster"))
                    or clusters[job] == slurm.get("cluster")):
                found.append((meta_path.parent, slurm))
        return found

    def _day_before(self) -> str | None:
        """YYYYMMDD of the day before this fleet began: its runs began after it, and their
        folders are named by the time (a day apart for the machines' clocks and zones), so
        an older run's run.json need not be read."""
        try:
            began = datetime.datetime.strptime(self.path.name[:8], "%Y%m%d")
        except ValueError:
            return None
        return (began - datetime.timedelta(days=1)).strftime("%Y%m%d")


def create(results_dir: str | os.PathLike, data: dict) -> Fleet:
    """A new fleet folder under results_dir/fleet/, named by the time."""
    root = Path(results_dir).resolve()
    try:
        path = results.new_folder(root / FOLDER)
        (path / "logs").mkdir()
    except OSError as e:
        raise ResultsError(f"cannot write in {root / FOLDER}: {e.strerror or e}") from None
    fleet = Fleet(path, {"format": FORMAT, "results": str(root), "jobs": [], **data})
    fleet._save()
    return fleet


def find(job_or_path: str, results_dir: str | os.PathLike = "results") -> Fleet:
    """The fleet a job id belongs to (searched in results_dir/fleet/), or the fleet
    folder named."""
    given = Path(job_or_path)
    if (given / RECORD).is_file():
        return _open(given)
    folder = Path(results_dir) / FOLDER
    for record in sorted(folder.glob(f"*/{RECORD}"), reverse=True):
        try:
            fleet = _open(record.parent)
        except ResultsError as e:           # one fleet's record hides no other fleet
            warnings.warn(f"{e}: skipped", ResultsWarning, stacklevel=2)
            continue
        if job_or_path in fleet.job_ids():
            return fleet
    raise UserError(f"no fleet of job {job_or_path} in {folder} (give the results folder "
                    "with --results, or the fleet's folder)")


def _open(path: Path) -> Fleet:
    try:
        data = json.loads((path / RECORD).read_text())
    except (OSError, ValueError) as e:
        raise ResultsError(f"{path / RECORD} cannot be read: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or \
            not isinstance(data.get("jobs"), list):
        raise ResultsError(f"{path / RECORD} is not a fleet record this cxlbench reads")
    return Fleet(path.resolve(), data)
