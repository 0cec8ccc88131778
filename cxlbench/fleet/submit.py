"""Submitting a fleet's jobs: the first, running the suite on every machine, and each
resume, running on the machines whose runs are unfinished `cxlbench run --resume RUN`
(or the suite afresh where no run started)."""
from __future__ import annotations

import shutil
import sys
from dataclasses import replace
from pathlib import Path

from .. import __version__, results, suite
from . import record, script, slurm, status
from ..errors import UserError


def run_command(suite_file: str, variables: dict[str, str], results_dir: str) -> list[str]:
    """What each machine runs: this cxlbench (this Python, so a virtual environment works;
    the script starts tasks in this cxlbench's folder) on the suite, into the shared
    results folder."""
    return [sys.executable, "-m", "cxlbench", "run", suite_file,
            *[a for k, v in variables.items() for a in ("--var", f"{k}={v}")],
            "--results-dir", results_dir]


def prepare(suite_name: str, variables: dict[str, str], options: script.Options,
            results_dir: str, dry_run: bool = False):
    """The fleet (None for a dry run) and the text of its first job's script. The suite is
    loaded here, so a bad name, file, variable or option is refused before anything is
    queued, and copied into the fleet's folder, so that every machine runs the same text
    whatever happens to the file meanwhile."""
    options.validate()
    s = suite.load(suite_name, variables)
    # Its options checked now rather than after the queue: the wildcards (every node, the
    # CPU pairs) stand in for any machine's; each run checks its own machine's nodes.
    suite.expand(s, [0], [0], ["0,1"])
    source = suite.find(suite_name)
    results_abs = str(Path(results_dir).resolve())
    if dry_run:
        fleet, fleet_dir = None, f"{results_abs}/{record.FOLDER}/<stamp>"
    else:
        slurm.require("sbatch")             # before a fleet folder is made for nothing
        fleet = record.create(results_abs, {
            "suite": s.name, "source": str(source), "variables": variables,
            "options": options.to_dict(), "python": sys.executable,
            "cxlbench_version": __version__})
        fleet_dir = str(fleet.path)
        shutil.copyfile(source, fleet.path / f"{s.name}.toml")
    command = run_command(f"{fleet_dir}/{s.name}.toml", variables, results_abs)
    text = script.sbatch_script(name=s.name, options=options, fleet_dir=fleet_dir,
                                results_dir=results_abs, commands={None: command},
                                comment=f"suite {s.name}")
    return fleet, text


def submit(fleet: record.Fleet, text: str) -> str:
    """The first job: its script submitted and recorded; its id."""
    return _submit(fleet, "job.sbatch", text, None)


def _submit(fleet: record.Fleet, name: str, text: str,
            machines: dict[str, Path | None] | None) -> str:
    """Write the script into the fleet's folder, sbatch it, record the job; its id. A
    script sbatch refuses is not kept, nor a fleet folder left without a job."""
    path = fleet.path / name
    results._write_atomic(path, text)           # never through a link left at its name
    try:
        job, cluster = slurm.submit(path)
    except slurm.SlurmTimeout as e:
        # The controller may have queued it all the same: its folder stays for it.
        raise slurm.SlurmError(f"{e}; the job may be queued all the same (see squeue "
                               f"--me), so {path} and its folder are kept") from None
    except Exception:
        if fleet.jobs:
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(fleet.path, ignore_errors=True)
        raise
    fleet.add_job(job, cluster, name, None if machines is None else
                  {node: str(run) if run else None for node, run in machines.items()})
    return job


def resume_script(fleet: record.Fleet, machines: dict[str, Path | None],
                  time_limit: str | None = None) -> str:
    """A job on exactly these machines, each finishing its own run."""
    options = script.Options(**fleet.data["options"])
    options = replace(options, nodes=None, nodelist=",".join(machines),
                      time=time_limit or options.time).validate()
    results_dir = fleet.data["results"]
    # This cxlbench finishes the runs, as `cxlbench run --resume` would here; it refuses a
    # run whose benchmarks' options have changed since.
    fresh = run_command(str(fleet.path / f"{fleet.data['suite']}.toml"),
                        fleet.data["variables"], results_dir)
    commands = {node: [sys.executable, "-m", "cxlbench", "run", "--resume", str(run)]
                if run else fresh
                for node, run in machines.items()}
    return script.sbatch_script(name=fleet.data["suite"], options=options,
                                fleet_dir=str(fleet.path), results_dir=results_dir,
                                commands=commands,
                                comment=f"suite {fleet.data['suite']}, resumed")


def resumable(fleet: record.Fleet, force: bool = False) -> dict[str, Path | None]:
    """The machines to resume, each with its unfinished run (None: none started); refuses
    while a job of the fleet still holds or awaits machines, or (unless forced) while
    SLURM does not answer how one ended: a job still running would be run twice."""
    machines = status.machines(fleet)
    busy = [m for m in machines if m.state in ("pending", "running")]
    if busy:
        raise UserError(f"job {busy[0].job} is still {busy[0].state} on "
                        f"{', '.join(m.node for m in busy)}: wait for it to end (or scancel "
                        "it) before resuming")
    unknown = [m for m in machines if m.state == "unknown"]
    if unknown and not force:
        raise UserError(f"SLURM did not say whether job {unknown[0].job} ended on "
                        f"{', '.join(m.node for m in unknown)} ({unknown[0].reason}): try "
                        "again when it answers, or --force if you know the job has ended")
    never = [m for m in machines if m.state in ("failed", "unknown") and not m.allocated]
    if never:
        raise UserError(f"job {never[0].job} " + ("ended before SLURM gave it machines"
                        if never[0].state == "failed" else "has no machines known here")
                        + f" ({never[0].reason}): submit the suite again")
    return {m.node: m.run for m in machines if m.state in ("failed", "unknown")}


def resume(fleet: record.Fleet, machines: dict[str, Path | None],
           time_limit: str | None = None) -> str:
    """The resume job submitted and recorded; its id."""
    n = sum(1 for j in fleet.jobs if j["machines"] is not None) + 1
    return _submit(fleet, f"resume-{n}.sbatch", resume_script(fleet, machines, time_limit),
                   machines)
