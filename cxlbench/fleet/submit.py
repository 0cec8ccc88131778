"""Submitting a fleet's jobs: the first (an array of one task a machine, or a gang job
on every machine at once), and each resume: an array of the failed tasks, or a job on
named machines each finishing its run with `cxlbench run --resume RUN` (or running the
suite afresh where no run started)."""
from __future__ import annotations

import os
import re
import shutil
import stat
import sys
from dataclasses import replace
from pathlib import Path

from .. import __version__, results, runner, shared_region, suite
from . import record, script, slurm, status
from ..errors import ResultsError, UserError


def run_command(suite_file: str, variables: dict[str, str], results_dir: str) -> list[str]:
    """What each machine of a gang runs: this cxlbench (this Python, so a virtual
    environment works; the script starts tasks in this cxlbench's folder) on the suite,
    into the shared results folder. An array's tasks run the same (fleet/task.py)."""
    return [sys.executable, "-m", "cxlbench", "run", suite_file,
            *[a for k, v in variables.items() for a in ("--var", f"{k}={v}")],
            "--results-dir", results_dir]


# Folders every machine has its own of: runs written there are never seen again.
NODE_LOCAL = ("/tmp", "/var/tmp", "/dev/shm", "/run")
NODE_LOCAL_FS = {"tmpfs", "ramfs", "devtmpfs"}


def check_shared(results_dir: str, mounts: str = "/proc/self/mounts") -> None:
    """Refuse a results folder that is node-local by its path or its file system (a
    compute node would write its run where the submitter never reads it). Each array
    task checks again on its machine that it sees the fleet's record."""
    path = Path(results_dir)
    under = next((d for d in NODE_LOCAL if path == Path(d) or Path(d) in path.parents), None)
    fs = None
    try:
        best = ""
        for line in Path(mounts).read_text().splitlines():
            fields = line.split()
            if len(fields) > 2 and (str(path) + "/").startswith(fields[1].rstrip("/") + "/") \
                    and len(fields[1]) >= len(best):
                best, fs = fields[1], fields[2]
    except OSError:
        pass
    if under or fs in NODE_LOCAL_FS:
        why = f"under {under}" if under else f"on {fs}"
        raise UserError(f"results folder {results_dir} is node-local ({why}): each machine "
                        "would write its run where nobody reads it. Give --results a folder "
                        "every machine mounts, or --local-results where this machine is "
                        "the whole cluster")


def check_folder(given: str, results_dir: str) -> None:
    """Refuse a results folder that is a file (or under one): nothing could be made
    there, dry run or not; and one whose name sbatch would misread (it stands in the
    script's #SBATCH lines)."""
    for path in (Path(results_dir), *Path(results_dir).parents):
        try:
            st = path.stat()
        except OSError:
            continue                # not there yet (made by the first run), or not seen
        if not stat.S_ISDIR(st.st_mode):
            raise UserError(f"--results {given}: {path} is a file, not a folder: give a "
                            "folder (made where it is missing)")
        break
    script.sbatch_value("--results", results_dir, *script.FOLDER_RULE)


WARNING = "warning: "        # a note of the script's that submit also says on stderr
ASSUMED_CASE_S = 20.0       # a case's seconds where no run of the suite recorded its job's
LOOKED_AT = 50              # newest run folders searched for a run of the suite


def time_limit(s: suite.Suite, results_dir: str) -> tuple[str, str]:
    """A time limit for one machine's run of the suite, and how it was reached: each
    case as long as its job's cases took in the newest run of this suite here (else
    ASSUMED_CASE_S), as many cases a job as on a machine of two memory nodes or as that
    run had (a machine of more nodes runs more), doubled, plus 10 minutes."""
    left: dict[str, int] = {}
    for c in suite.expand(s, [0, 1], [0], ["0,1"]):
        left[c.job] = left.get(c.job, 0) + 1
    took, counts, source = _recorded(s.name, Path(results_dir))
    machine = "a machine of two memory nodes"
    if any(counts.get(j, 0) > n for j, n in left.items()):
        left = {j: max(n, counts.get(j, 0)) for j, n in left.items()}
        machine = "the machine of that run"
    est = runner.seconds_left(left, took)
    if est is None:
        est = sum(left.values()) * ASSUMED_CASE_S
        source = (f"at {ASSUMED_CASE_S:g} s a case, assumed: no run of {s.name} in "
                  f"{results_dir} yet")
    minutes = -(-(2 * est + 600) // 300) * 5            # up to the next 5 minutes
    days, rest = divmod(int(minutes), 24 * 60)
    limit = (f"{days}-" if days else "") + f"{rest // 60}:{rest % 60:02d}:00"
    return limit, (f"{sum(left.values())} cases, about {est / 60:.0f} min {source}, on "
                   f"{machine}; twice that and 10 min")


def _recorded(name: str, results_dir: Path
              ) -> tuple[dict[str, list[float]], dict[str, int], str]:
    """Each job's case seconds in the newest run of the suite named, its cases a job, and
    which run."""
    metas = sorted(results_dir.glob("*/*/run.json"), key=lambda p: p.parent.name,
                   reverse=True)[:LOOKED_AT]
    for meta_path in metas:
        try:
            if (results.read_meta(meta_path.parent).get("suite") or {}).get("name") != name:
                continue
            run = results.Run.open(meta_path.parent)
            entries = run.finished().values()
        except ResultsError:
            continue
        took: dict[str, list[float]] = {}
        for e in entries:
            if isinstance(e.get("seconds"), (int, float)):
                took.setdefault(e["case"].rsplit("/", 1)[0], []).append(e["seconds"])
        if took:
            counts: dict[str, int] = {}
            for c in run.meta["cases"]:
                counts[c["job"]] = counts.get(c["job"], 0) + 1
            return took, counts, f"as the cases of run {meta_path.parent} took"
    return {}, {}, ""


def _pool(options: script.Options, dry_run: bool
          ) -> tuple[list[str] | None, list[str], dict[str, str], str]:
    """The machines an array may use, those of its partition it must not (a node list's
    others, those down or drained), those down or drained with their state, and where
    the pool is not known, why: a node list's machines, or the partition's (those with a
    --constraint of one feature); (None, [], {}, why) where SLURM cannot say. A machine
    that takes no jobs is left out of the pool, or tasks would wait for it, kept off the
    machines measured, for ever."""
    try:
        every = slurm.nodes_of(options.partition)
        if options.nodelist:
            pool = slurm.hostnames(options.nodelist)
        elif options.constraint and not re.fullmatch(r"[A-Za-z0-9_.\-]+", options.constraint):
            # an expression: SLURM alone can tell
            return None, [], {}, f"--constraint {options.constraint} is SLURM's to match"
        elif options.constraint:        # of the partition the array runs in
            having = set(slurm.nodes_with(options.partition, options.constraint))
            pool = [n for n in every if n in having]
        else:
            pool = every
        members = set(pool)
        down = {n: state for n, state in slurm.unusable(options.partition).items()
                if n in members}
        usable = [n for n in pool if n not in down]
        kept = set(usable)
        exclude = [n for n in every if n not in kept] if options.nodelist else \
            [n for n in every if n in down]
        return usable or None, exclude, down, ""
    except (UserError, slurm.SlurmError) as e:
        if dry_run and not options.nodelist:
            return None, [], {}, _unasked(e, "sinfo")
        if dry_run:
            return slurm.hostnames(options.nodelist), [], {}, ""
        raise


def _array_fits(options: script.Options, count: int) -> tuple[str, ...]:
    """Refuse an array of more tasks than the cluster takes in one (its MaxArraySize, or
    max_array_tasks), naming the limit; where SLURM cannot say, past the most SLURM ever
    takes, and a warning past its default. The warning, or ()."""
    given = f"--nodes {options.nodes}" if options.nodes is not None else \
        f"--nodelist {options.nodelist} ({count} machines)"
    try:
        limit, said = slurm.array_limit()
    except (UserError, slurm.SlurmError) as e:
        why = _unasked(e, "scontrol")
        if count > slurm.MAX_ARRAY_SIZE:
            raise UserError(f"{given}: an array of {count} tasks, past the most SLURM takes in "
                            f"one ({slurm.MAX_ARRAY_SIZE}, MaxArraySize's largest)") from None
        if count > slurm.DEFAULT_MAX_ARRAY_SIZE:
            return (f"{WARNING}{given}: an array of {count} tasks, past SLURM's default "
                    f"MaxArraySize of {slurm.DEFAULT_MAX_ARRAY_SIZE}; this cluster's was not "
                    f"read here ({why}), and sbatch refuses an array past it",)
        return ()
    if limit == 0:
        raise UserError(f"this cluster runs no job arrays ({said}): submit with --gang")
    if count > limit:
        raise UserError(f"{given}: an array of {count} tasks, past the {limit} this cluster "
                        f"takes in one ({said}): give at most {limit} machines (and the rest "
                        "in a fleet of their own), or ask its administrators to raise it")
    return ()


def _unasked(e: Exception, command: str) -> str:
    """Why SLURM's command did not say, in a few words."""
    return f"SLURM is not installed here: no {command}" if shutil.which(command) is None \
        else str(e)


def _states(down: dict[str, str], most: int = 10) -> str:
    """'n3 (down*), n4 (drain)', the first `most`, and a count of the rest."""
    shown = ", ".join(f"{n} ({state})" for n, state in list(down.items())[:most])
    return shown + (f" and {len(down) - most} more" if len(down) > most else "")


def prepare(suite_name: str, variables: dict[str, str], options: script.Options,
            results_dir: str, dry_run: bool = False, local_results: bool = False):
    """The fleet (None for a dry run) and the text of its first job's script. The suite is
    loaded here, so a bad name, file, variable or option is refused before anything is
    queued, and copied into the fleet's folder, so that every machine runs the same text
    whatever happens to the file meanwhile."""
    if options.hosts is not None or options.shared_dax is not None:
        options = replace(options, gang=True)   # both hosts at once, in one job
    options.validate()
    s = suite.load(suite_name, variables)
    # Its options checked now rather than after the queue: the wildcards (every node, the
    # CPU pairs) stand in for any machine's; each run checks its own machine's nodes.
    suite.expand(s, [0], [0], ["0,1"])
    source = suite.find(suite_name)
    results_abs = str(Path(results_dir).resolve())
    check_folder(results_dir, results_abs)
    if not local_results:
        check_shared(results_abs)
    # The region is a path on the machines the job lands on: refused here only where
    # something is already at it that is no region (a user's file, a link).
    if options.shared_dax is not None and os.path.lexists(options.shared_dax):
        shared_region.check(options.shared_dax)
    estimate = None
    if options.time is None:
        limit, estimate = time_limit(s, results_abs)
        options = replace(options, time=limit)
    env = script.job_env(options)
    pool, exclude, down, unknown = (None, [], {}, "") if options.gang else \
        _pool(options, dry_run)
    count = options.nodes if options.nodes is not None else len(pool or [])
    if down and not pool:
        raise UserError(f"no machine of the pool takes jobs now: {_states(down)}")
    if not options.gang and count < 1:
        raise UserError(f"--nodelist {options.nodelist}: no machines")
    too_many = () if options.gang else _array_fits(options, count)
    if not dry_run:
        slurm.require("sbatch")             # before a fleet folder is made for nothing
    data = {"suite": s.name, "source": str(source), "variables": variables,
            "options": options.to_dict(), "form": "gang" if options.gang else "array",
            "tasks": None if options.gang else count, "pool": pool, "exclude": exclude,
            "environment": env, "time_estimate": estimate, "python": sys.executable,
            "cxlbench_version": __version__}
    if dry_run:
        fleet, fleet_dir = None, f"{results_abs}/{record.FOLDER}/<stamp>"
    else:
        fleet = record.create(results_abs, data)
        fleet_dir = str(fleet.path)
        shutil.copyfile(source, fleet.path / f"{s.name}.toml")
    comment = f"suite {s.name}"
    notes = (f"time limit {options.time} a machine: {estimate} (--time sets it)",) \
        if estimate else ()
    if down:
        notes += (f"left out of the pool, taking no jobs now: {_states(down)}",)
    if options.two_hosts:
        notes += (f"two hosts sharing {options.shared_dax}: host 0 and host 1 by their place "
                  "in the job's node list, SLURM's job id the session both name",)
    if pool and count > len(pool):
        notes += (f"{WARNING}{count} tasks on a pool of {len(pool)} machines: some machines "
                  "are measured more than once",)
    elif unknown and options.nodes is not None:
        notes += (f"{count} tasks, one a machine: the machines of the pool were not counted "
                  f"here ({unknown}); past that count, some are measured more than once",)
    notes += too_many
    if options.gang:
        command = run_command(f"{fleet_dir}/{s.name}.toml", variables, results_abs)
        text = script.sbatch_script(name=s.name, options=options, fleet_dir=fleet_dir,
                                    results_dir=results_abs, commands={None: command},
                                    comment=comment, env=env, notes=notes)
    else:
        text = script.sbatch_script(name=s.name, options=options, fleet_dir=fleet_dir,
                                    results_dir=results_abs, comment=comment, env=env,
                                    notes=notes, tasks=slurm.task_spec(range(count)),
                                    exclude=slurm.hostlist(exclude) or None)
    return fleet, text


def submit(fleet: record.Fleet, text: str) -> str:
    """The first job: its script submitted and recorded; its id."""
    tasks = list(range(fleet.data["tasks"])) if fleet.array else None
    return _submit(fleet, "job.sbatch", text, None, tasks)


def _submit(fleet: record.Fleet, name: str, text: str,
            machines: dict[str, Path | None] | None, tasks: list[int] | None) -> str:
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
                  {node: str(run) if run else None for node, run in machines.items()},
                  tasks)
    return job


def _options(fleet: record.Fleet, time_limit: str | None, **changes) -> script.Options:
    options = script.Options(**fleet.data["options"])
    return replace(options, time=time_limit or options.time, **changes).validate()


def resume_script(fleet: record.Fleet, chosen: list[status.Machine],
                  time_limit: str | None = None, same_machines: bool = False) -> str:
    """The script resuming these machines (or an array's tasks): in an array fleet, an
    array of just these tasks, each landing on a machine the fleet has not measured
    where the pool has one; on the same machines (a gang fleet, or same_machines), a job
    on exactly those machines, each finishing its own run."""
    if fleet.data["options"].get("hosts"):
        raise UserError("a fleet of two hosts sharing a region is not resumed: each host "
                        "would finish a different part of the suite, and the two must run "
                        "the same cases in step. Submit it again")
    results_dir = fleet.data["results"]
    env = fleet.data.get("environment") or script.job_env(script.Options(
        **fleet.data["options"]))
    comment = f"suite {fleet.data['suite']}, resumed"
    if fleet.array and not same_machines:
        return script.sbatch_script(
            name=fleet.data["suite"], options=_options(fleet, time_limit),
            fleet_dir=str(fleet.path), results_dir=results_dir, comment=comment, env=env,
            tasks=slurm.task_spec(m.task for m in chosen),
            exclude=slurm.hostlist(fleet.excluded()) or None)
    machines = _machines(chosen)
    options = _options(fleet, time_limit, nodes=None, nodelist=",".join(machines), gang=True,
                       max_running=None)
    # This cxlbench finishes the runs, as `cxlbench run --resume` would here; it refuses a
    # run whose benchmarks' options have changed since.
    fresh = run_command(str(fleet.path / f"{fleet.data['suite']}.toml"),
                        fleet.data["variables"], results_dir)
    # A task's fresh run says which task it is, as an array's would: status and collect
    # find a task's runs by run.json's array task.
    task_of = {m.node: m.task for m in chosen if fleet.array}
    commands = {node: [sys.executable, "-m", "cxlbench", "run", "--resume", str(run)]
                if run else
                ["/usr/bin/env", f"SLURM_ARRAY_TASK_ID={task_of[node]}", *fresh]
                if node in task_of else fresh
                for node, run in machines.items()}
    return script.sbatch_script(name=fleet.data["suite"], options=options,
                                fleet_dir=str(fleet.path), results_dir=results_dir,
                                commands=commands, comment=comment, env=env)


def _machines(chosen: list[status.Machine]) -> dict[str, Path | None]:
    """Each chosen machine by name, with the run it finishes; refused where a task has no
    machine yet, or two tasks the same one (an array may measure a machine twice)."""
    machines: dict[str, Path | None] = {}
    for m in chosen:
        if not m.allocated:
            raise UserError(f"task {m.task} never started on a machine: resume it without "
                            "--same-machines")
        if m.node in machines:
            raise UserError(f"two tasks ran on {m.node}: resume them without "
                            "--same-machines, or one at a time")
        machines[m.node] = m.run
    return machines


def resumable(fleet: record.Fleet, force: bool = False) -> list[status.Machine]:
    """The machines (an array fleet's tasks) to resume: those that failed, and with force
    those SLURM does not answer for. A gang fleet waits while any of its jobs still holds
    or awaits machines; an array's tasks are resumed while others run, but not while
    SLURM does not say how one ended (it would run twice)."""
    machines = status.machines(fleet)
    busy = [m for m in machines if m.state in ("pending", "running")]
    if busy and not fleet.array:
        raise UserError(f"job {busy[0].job} is still {busy[0].state} on "
                        f"{', '.join(m.node for m in busy)}: wait for it to end (or scancel "
                        "it) before resuming")
    unknown = [m for m in machines if m.state == "unknown"]
    if unknown and not force:
        raise UserError(f"SLURM did not say whether job {unknown[0].job} ended on "
                        f"{', '.join(m.node for m in unknown)} ({unknown[0].reason}): try "
                        "again when it answers, or --force if you know the job has ended")
    never = [m for m in machines if m.state in ("failed", "unknown") and not m.allocated]
    if never and not fleet.array:
        raise UserError(f"job {never[0].job} " + ("ended before SLURM gave it machines"
                        if never[0].state == "failed" else "has no machines known here")
                        + f" ({never[0].reason}): submit the suite again")
    return [m for m in machines if m.state in ("failed", "unknown")]


def resume(fleet: record.Fleet, chosen: list[status.Machine],
           time_limit: str | None = None, same_machines: bool = False) -> str:
    """The resume job submitted and recorded; its id."""
    n = len(fleet.jobs)             # the first job, then resume-1, resume-2 ...
    text = resume_script(fleet, chosen, time_limit, same_machines)
    gang = not fleet.array or same_machines
    return _submit(fleet, f"resume-{n}.sbatch", text, _machines(chosen) if gang else None,
                   [m.task for m in chosen] if fleet.array else None)
