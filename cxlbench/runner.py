"""Runs cases, each in a worker process, and appends their rows as each one finishes.

A case that crashes, is OOM-killed or times out fails alone; the run goes on. A run killed
outright resumes with `cxlbench run --resume RUN`, skipping the cases its journal lists."""
from __future__ import annotations

import collections
import json
import math
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

from . import (PACKAGE_PARENT, __version__, benchmarks, lifetime, native, paramtext, results,
               stats, system)
from .errors import StorageError, UserError
from .fleet import slurm
from .options import json_value, to_json
from .results import Run, columns_for
from .suite import Case, Suite
from .topology import Topology
from .units import duration, format_list, quantity, scale, significant


def git_describe() -> str | None:
    try:
        out = subprocess.run(["git", "-C", PACKAGE_PARENT, "describe", "--always", "--dirty",
                              "--tags"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def start(suite: Suite, cases: list[Case], topo: Topology, root: str, found=None,
          fitted: dict | None = None) -> Run:
    """The run's folder and run.json; `found`: the cases' estimate (estimate.Estimate),
    kept so each case's journal line holds its estimate beside what it took; `fitted`:
    what --fit changed in which case (estimate.fit)."""
    params = {name for c in cases for name in c.params}
    meta = {
        "cxlbench_version": __version__,
        "git_describe": git_describe(),
        "command": sys.argv,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "suite": {"name": suite.name, "source": suite.source, "text": suite.text,
                  "jobs": suite.data},
        "emulated": topo.machine.get("emulated"),
        "slurm": slurm.run_fields(),          # the job, node and partition, under SLURM
        "build": native.build_info(),
        "libc": system.libc_copy(),     # what copy_libc and write_libc run here
        # What shapes tails that cxlbench leaves as it finds it: the prefetchers, and
        # every CPU's governor (topology's "governor" is CPU 0's).
        "settings": {**topo.settings, **system.read_settings(),
                     "prefetchers": system.prefetchers(), "governors": system.governors()},
        "topology": topo.to_dict(),
        "timer": native.timer_calibrate(),
        "kernels": [k.__dict__ for k in native.kernels()],
        "columns": columns_for(params),
        "cases": [c.to_dict() for c in cases],
    }
    if found is not None:
        meta["estimates"] = found.record()
    if fitted:
        meta["fitted"] = fitted        # option values halved: plain numbers
    return Run.create(root, meta)


def record_resume(run: Run) -> None:
    """A run resumed under SLURM keeps the job that started it in "slurm" and adds the
    job that resumes it to "slurm_resumed"."""
    fields = slurm.run_fields()
    if fields is not None:
        run.update_meta(slurm_resumed=[*run.meta.get("slurm_resumed", []), fields])


# A case running longer than this says so, this often: a long case is not a hung one.
HEARTBEAT_S = 60.0


class Workers:
    """The process each case is forked from (`python -m cxlbench.worker --serve`: its
    imports paid once a run, not once a case), started before the first case and again
    after one is lost. A case past its timeout, or a run interrupted, ends the server, and
    the case's process with it (it dies with its parent)."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.started_s = 0.0        # what starting the server took in the last run()
        self.case_pid: int | None = None     # the last case's process
        self.dir = tempfile.mkdtemp(prefix="cxlbench-case-")
        self.pending = b""

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        """The server, waited for until it has imported."""
        if self.proc is not None and self.proc.poll() is None:
            return
        t0 = time.monotonic()
        with open(os.path.join(self.dir, "server.err"), "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cxlbench.worker", "--serve"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=err, cwd=PACKAGE_PARENT,
                env=lifetime.child_env())                       # it dies with us
        self.pending = b""
        self._reply(math.inf)
        self.started_s = time.monotonic() - t0

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)
            self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def run(self, case: Case, timeout: float, tick=None) -> tuple[int | None, str, str]:
        """The case's exit code (None: it ran past `timeout`, and was killed), its stdout
        and the tail of its stderr; tick(seconds so far) every HEARTBEAT_S meanwhile."""
        out, err = (os.path.join(self.dir, f"case.{s}") for s in ("out", "err"))
        for path in (out, err):
            if os.path.exists(path):
                os.unlink(path)
        self.started_s = 0.0
        try:
            self.start()
            request = {"case": case.to_dict(), "out": out, "err": err}
            t0 = time.monotonic()
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            started = self._reply(timeout, t0)
            if started and started.startswith("started "):
                self.case_pid = int(started.split()[1])
                ended = self._reply(timeout, t0, tick)
            else:                   # past the timeout (None), or the server gone
                self.case_pid, ended = None, started
        except OSError:             # a broken pipe: the server is gone
            ended = ""
        except BaseException:       # interrupted: the case goes with the server
            self.stop()
            raise
        if ended is None:
            self.stop()
            _wait_gone(self.case_pid)
            return None, "", ""
        if not ended.startswith("ended "):   # the server itself is gone
            self.stop()
            return 1, "", _tail(os.path.join(self.dir, "server.err"), 4000) or \
                "the worker's server ended"
        return int(ended.split()[1]), _read(out), _tail(err, 8000)

    def _reply(self, timeout: float, t0: float | None = None, tick=None) -> str | None:
        """The server's next line ('' where it ended); None once `timeout` s have passed
        since t0."""
        t0 = time.monotonic() if t0 is None else t0
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            so_far = time.monotonic() - t0
            if so_far >= timeout:
                return None
            ready, _, _ = select.select([fd], [], [], min(HEARTBEAT_S, timeout - so_far))
            if not ready:
                if tick and time.monotonic() - t0 < timeout:
                    tick(time.monotonic() - t0)
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                return ""
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode()


def _wait_gone(pid: int | None, wait: float = 5.0) -> None:
    """Until the case's process, killed with its server, has gone (or is a zombie): the
    next case must not share the machine with it."""
    deadline = time.monotonic() + wait
    while pid and time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in "ZX":
                    return
        except OSError:
            return
        time.sleep(0.01)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _tail(path: str, size: int) -> str:
    """The last `size` bytes of a file (a case's stderr may be long)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def run_worker(case: Case, tick: Callable[[float], None] | None = None,
               workers: Workers | None = None) -> dict:
    """The case's Measurement as a dict, or a failure saying how its process died; while
    it runs, tick(seconds so far) every HEARTBEAT_S. Forked from `workers`' server, or
    from one of its own."""
    if workers is None:
        with Workers() as own:
            return run_worker(case, tick, own)
    timeout = case.params.get("timeout", 600)
    ooms = oom_kills()
    code, out, err = workers.run(case, timeout, tick)
    if code is None:
        return {"status": "failed", "error": f"timed out after {timeout:g} s"}
    if code < 0:
        sig = signal.Signals(-code).name
        oom = sig == "SIGKILL" and oom_kills() != ooms
        hint = " (the kernel's OOM killer ran meanwhile: out of memory)" if oom else ""
        tail = err.strip().splitlines()[-16:]    # with PYTHONFAULTHANDLER=1: where
        return {"status": "failed", "error": f"worker killed by {sig}{hint}" +
                (": " + " | ".join(tail) if tail else "")}
    try:
        return finite_or_failed(json.loads(out))
    except json.JSONDecodeError:
        tail = err.strip().splitlines()[-5:]
        return {"status": "failed", "error": f"worker exited {code}: " + " | ".join(tail)}


def _stop(proc: subprocess.Popen) -> None:
    """The process killed and reaped."""
    proc.kill()
    try:
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def finite_or_failed(m: dict) -> dict:
    """A measurement whose values are all finite numbers, or a failed case saying which
    was not: a NaN or an infinity (a time of 0 ns divided into bytes) is a broken
    measurement, and would make the run's table unreadable."""
    for rep in m.get("reps", []):
        for metric, value in rep.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                return {**m, "status": "failed", "reps": [],
                        "error": f"{metric} came out as {value!r}, not a finite number"}
    return m


def oom_kills() -> tuple[int, int]:
    """The kernel's OOM-kill counters, machine-wide (/proc/vmstat) and for this process's
    cgroup (cgroup v2 memory.events): a worker's SIGKILL is put down to memory only when
    one of them moved. Counters a kernel lacks read as 0."""
    def counter(path: str, key: str) -> int:
        try:
            with open(path) as f:
                for line in f:
                    name, _, value = line.partition(" ")
                    if name == key:
                        return int(value)
        except (OSError, ValueError):
            pass
        return 0
    cgroup = ""
    try:
        with open("/proc/self/cgroup") as f:
            cgroup = next((line.split("::", 1)[1].strip() for line in f
                           if line.startswith("0::")), "")
    except OSError:
        pass
    return (counter("/proc/vmstat", "oom_kill"),
            counter(f"/sys/fs/cgroup{cgroup.rstrip('/')}/memory.events", "oom_kill"))


def rows_for(run: Run, case: Case, m: dict) -> list[dict]:
    verified = m.get("placement", {}).get("verified", [])
    counts = " ".join(f"{v['buffer']}={v['text']}" for v in verified)   # src=0:512 dst=1:512
    base = {**to_json(case.params), "run": run.meta["run_id"], "job": case.job,
            "case": case.id, "benchmark": case.bench, "kernel": m.get("kernel"),
            "isa": m.get("isa"), "cpus_used": format_list(m.get("cpus", [])),
            "placement_method": m.get("placement", {}).get("method"), "verified": counts,
            "placement_ok": all(v["ok"] for v in verified),
            "vmstat": ";".join(f"{k}:{v}" for k, v in (m.get("info") or {}).get("vmstat", {}).items())}
    return [{**base, "repetition": i, "metric": metric, "unit": m["units"][metric],
             "value": value}
            for i, rep in enumerate(m.get("reps", [])) for metric, value in rep.items()]


def journal_entry(case: Case, m: dict, seconds: float, estimate_s: float | None = None) -> dict:
    summary = {}
    for metric, unit in m.get("units", {}).items():
        values = [rep[metric] for rep in m.get("reps", []) if metric in rep]
        if values:
            summary[metric] = {"unit": unit, **stats.summarize(values)}
    return {"status": m.get("status", "failed"), "error": m.get("error"),
            "machine": results.machine_id(),    # a run resumed elsewhere: who measured it
            "bench": case.bench, "kernel": m.get("kernel"), "isa": m.get("isa"),
            "cpus": m.get("cpus"), "params": to_json(case.params), "summary": summary,
            "placement": m.get("placement"), "info": m.get("info"), "seconds": round(seconds, 3),
            **({"estimate_s": estimate_s} if estimate_s is not None else {})}


def execute(run: Run, echo: Callable[[str], None],
            read_load: Callable[[], dict] = system.load,
            read_siblings: Callable[..., object] = system.sibling_load) -> dict[str, dict]:
    """Run every case the journal does not list yet, saying as it goes which (each job's
    title, then each case's varying parameters), what it measured and about how long is
    left. How busy the machine was at the start and the end, its SMT siblings' share
    too, goes into run.json (the summary says so where it was busy: busy_text). Returns
    the journal by case id."""
    # As run.json records them: the parent hands their params on (to the worker, into the
    # results) as they are, and the worker reads them as values (Case.from_dict).
    cases = [Case(c["id"], c["job"], c["bench"], c["params"]) for c in run.meta["cases"]]
    record_load(run, "start", read_load, read_siblings)
    done = run.finished()
    if done:
        echo(f"resuming {run.path}: {len(done)} of {len(cases)} cases already finished")
    labels, jobs = case_labels(cases), by_job(cases)
    guess = run.meta.get("estimates", {}).get("cases", {})     # case id -> seconds
    took: dict[str, list[float]] = {}       # job -> seconds of its cases timed so far
    left = collections.Counter(c.job for c in cases if c.id not in done)
    pairs: list[tuple[float, float]] = []   # (estimated, took) of the cases timed so far
    for c in cases:                         # a resume's finished cases are timings too
        if c.id in done and isinstance(done[c.id].get("seconds"), (int, float)):
            took.setdefault(c.job, []).append(done[c.id]["seconds"])
            if guess.get(c.id):
                pairs.append((guess[c.id], done[c.id]["seconds"]))
    with Workers() as workers:
        width, job = len(str(len(cases))), None
        for position, case in enumerate(cases, 1):
            if case.id in done:
                continue
            if case.job != job:
                job = case.job
                echo(job_title(job, jobs[job]))
            echo(" ".join(filter(None, (f"[{position:>{width}}/{len(cases)}]", case.id,
                                        labels[case.id], "..."))))
            t0, expected = time.monotonic(), guess.get(case.id)
            m = run_worker(case, lambda so_far, expected=expected: echo(
                f"    still running: {duration(so_far)} so far" +
                (f", estimated {duration(expected)}" if expected else "")), workers)
            seconds = time.monotonic() - t0 - workers.started_s   # the imports: no case's
            entry = journal_entry(case, m, seconds, guess.get(case.id))
            run.append(case.id, rows_for(run, case, m), entry)
            took.setdefault(case.job, []).append(seconds)
            if guess.get(case.id):
                pairs.append((guess[case.id], seconds))
            left[case.job] -= 1
            pending = [c for c in cases[position:] if c.id not in done]
            eta = seconds_left(left, took, pending, guess, pairs) \
                if sum(left.values()) else None
            echo("    " + describe(entry) + (f"; {eta_text(eta)}" if eta is not None else ""))
    try:
        record_load(run, "end", read_load, read_siblings)
    except StorageError:        # every case is in: a full disk costs only this reading
        pass
    return run.finished()


def by_job(cases: list[Case]) -> dict[str, list[Case]]:
    """The cases of each job, in order."""
    jobs: dict[str, list[Case]] = {}
    for c in cases:
        jobs.setdefault(c.job, []).append(c)
    return jobs


def varying_keys(cases: list[Case]) -> dict[str, list[str]]:
    """Case id -> the parameters that vary within its job, defaults included: what tells
    a case apart from the rest of its job."""
    out = {}
    for job_cases in by_job(cases).values():
        keys = paramtext.varying([to_json(c.params) for c in job_cases])
        out.update({c.id: keys for c in job_cases})
    return out


def case_labels(cases: list[Case]) -> dict[str, str]:
    """Case id -> 'k=v ...' of its varying_keys, as the end-of-run summary names them:
    a case in the progress lines."""
    keys = varying_keys(cases)
    return {c.id: paramtext.params_text(to_json(c.params), keys[c.id]) for c in cases}


def job_title(job: str, cases: list[Case], isa: str | None = None) -> str:
    """'latency: chase, mem=local page=4k': the job, its benchmark and what every case of
    it shares, where that is the placement, the size, or not the benchmark's default
    (run-control options aside); `isa`: the one its cases ran with, once known."""
    bench = cases[0].bench
    module = benchmarks.available().get(bench)
    opts = module.options if module else {}
    params = [to_json(c.params) for c in cases]
    apart = set(paramtext.varying(params))
    first = params[0]
    shared = [k for k, v in first.items()
              if k not in apart and k not in paramtext.NOT_MEASURED
              and (k in ("size", "mem") or k not in opts or v != json_value(opts[k].default))]
    what = f"{bench}, isa {isa}" if isa and "isa" in opts else bench
    text = paramtext.params_text(first, shared)
    return f"{job}: {what}" + (f", {text}" if text else "")


def seconds_left(left: dict[str, int], took: dict[str, list[float]], pending=(),
                 guess: dict | None = None, pairs=()) -> float | None:
    """About how long the cases still to run take (left: job -> how many): each its job's
    mean so far, as a job's cases are alike; a job not yet timed, its cases' estimates
    (`guess`, for `pending`) scaled by how the timed cases compared with theirs (`pairs`:
    estimated, took), else the mean of every case timed; None before any case is."""
    every = [s for times in took.values() for s in times]
    if not every:
        return None
    overall = statistics.fmean(every)
    scale = sum(t for _, t in pairs) / sum(e for e, _ in pairs) if pairs else 1.0
    guessed: dict[str, list[float]] = {}
    for c in pending:
        guessed.setdefault(c.job, []).append((guess or {}).get(c.id))
    out = 0.0
    for j, n in left.items():
        if took.get(j):
            out += n * statistics.fmean(took[j])
        elif guessed.get(j) and all(g for g in guessed[j]):
            out += scale * sum(guessed[j])
        else:
            out += n * overall
    return out


def eta_text(seconds: float) -> str:
    """'about 40 s left', 'about 2 min left', 'about 1 h 20 min left': as precise as an
    estimate from past cases deserves."""
    if seconds < 2.5:
        return "a few seconds left"
    if seconds < 57.5:
        return f"about {max(5, round(seconds / 5) * 5)} s left"
    if seconds < 59.5 * 60:
        return f"about {round(seconds / 60)} min left"
    hours, minutes = divmod(round(seconds / 600) * 10, 60)
    return f"about {hours} h" + (f" {minutes} min" if minutes else "") + " left"


def record_load(run: Run, at: str, read_load: Callable[[], dict] = system.load,
                read_siblings: Callable[..., object] = system.sibling_load) -> None:
    """Add how busy the machine is now (at: "start" or "end" of this execute) to run.json's
    "load" list, with how busy the SMT siblings of the CPUs the run measured on were
    (system.sibling_load; before any case has run, every CPU's siblings); a resume
    appends its own readings."""
    reading = {"at": at, "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **read_load(),
               "smt_siblings": read_siblings(cpus=cpus_used(run))}
    run.update_meta(load=[*run.meta.get("load", []), reading])


def cpus_used(run: Run) -> list[int] | None:
    """The CPUs the finished cases ran on, from the journal; None before any did."""
    found = {c for e in run.finished().values() for c in (e.get("cpus") or [])
             if isinstance(c, int)}
    return sorted(found) or None


def busy_text(run: Run) -> str | None:
    """The line warning that other work competed with the measurements, from run.json's
    load readings (system.busy's reasons, each with when it was read); None where no
    reading says busy, or the run has none (made before cxlbench took them)."""
    why: list[str] = []
    for reading in run.meta.get("load") or []:
        # The load average counts this run's own work (and an earlier run's): what
        # other work took while the run's workers slept is the busy share.
        reason = system.busy(reading, load_average=False) if isinstance(reading, dict) \
            else None
        if reason and f"{reason} at the {reading.get('at')}" not in why:
            why.append(f"{reason} at the {reading.get('at')}")
    if not why:
        return None
    return f"machine busy: {'; '.join(why)}; figures may be noisier than this machine is"


def check_resumable(run: Run) -> None:
    """A resume runs what run.json lists, so its cases get the checks a suite's do, before
    anything runs or is rewritten: ids that name one case each, values each option takes
    in the form cxlbench records them (a hand-edited run.json is anyone's), and the
    options of this cxlbench's benchmarks (a run made by another cxlbench holds cases
    expanded with that one's: where they have changed, say so, rather than fail those
    cases one by one; finished cases too, whose values the summary's analysis reads); and
    what else the summary after it reads of run.json."""
    meta = run.meta
    lacking = [what for what, ok in (
        ("the suite's name", isinstance((meta.get("suite") or {}).get("name"), str)),
        ("the CPU's caches", isinstance(((meta.get("topology") or {}).get("cpu") or {})
                                        .get("caches"), list)),
        ("the emulated topology's name", not meta.get("emulated")
         or isinstance(meta["emulated"].get("topology"), str))) if not ok]
    if lacking:
        raise UserError(f"cannot resume {run.path}: run.json lacks {' and '.join(lacking)}, "
                        "which cxlbench records as a run starts: a damaged run; start a new "
                        "one")
    ids = collections.Counter(c["id"] for c in meta["cases"])
    twice = sorted(i for i, n in ids.items() if n > 1)
    if twice:
        raise UserError(f"cannot resume {run.path}: run.json lists {len(twice)} case id(s) "
                        f"more than once ({', '.join(map(_shown, twice[:5]))}): a damaged "
                        "run, which could never finish")
    done = run.finished()
    checked = set()         # (benchmark, option, value) seen: a large run repeats them
    for case in (Case(c["id"], c["job"], c["bench"], c["params"]) for c in meta["cases"]):
        left = case.id not in done
        try:
            bench = benchmarks.get(case.bench)
        except UserError as e:
            if not left:
                continue    # finished: its figures stand, whatever has become of it
            raise UserError(f"cannot resume {run.path}: {_shown(case.id)}: {e}") from None
        for key, value in case.params.items():
            seen = (case.bench, key, json.dumps(value, sort_keys=True), left)
            if not bench.takes(key) or seen in checked:
                continue            # (an option gone is said below, with the others)
            checked.add(seen)
            # A finished case's values go into the summary and its analysis: values an
            # option takes; one still to run's, exactly as cxlbench records them.
            try:
                recorded = json_value(bench.option(key).convert(value))
                ok, why = not left or recorded == value, \
                    f"{value!r} is not a value cxlbench records"
            except (ValueError, UserError) as e:
                ok, why = False, str(e)
            if not ok:
                raise UserError(f"cannot resume {run.path}: run.json's case {_shown(case.id)}: "
                                f"option {key!r}: {why}")
        missing = set(bench.options) - set(case.params)
        dropped = {k for k in case.params if not bench.takes(k)}
        if missing or dropped:
            made = " ".join(str(x) for x in (run.meta.get("cxlbench_version"),
                                             run.meta.get("git_describe")) if x)
            change = "; ".join(f"{what}: {', '.join(map(_shown, sorted(names)))}"
                               for what, names in (("new options", missing),
                                                   ("options gone", dropped)) if names)
            raise UserError(f"cannot resume {run.path}: its {case.bench} cases were expanded "
                            f"by cxlbench {made}, whose {case.bench} options differ from this "
                            f"one's ({change}); finish it with that cxlbench, or start a new run")


def _shown(name: str) -> str:
    """A name from run.json as a message gives it: quoted where it holds a line break or
    another character a terminal would act on."""
    return name if name.isprintable() else repr(name)


def machine_identity(topo: dict) -> dict:
    """Which machine a topology (as run.json records it) is: its host, CPU model and node
    layout (each node's CPUs, and which have no memory)."""
    def get(d, key):
        return d.get(key) if isinstance(d, dict) else None
    nodes = get(topo, "nodes")
    layout = None
    if isinstance(nodes, list):
        layout = " ".join(f"{get(n, 'id')}:{format_list(get(n, 'cpus') or []) or 'no CPUs'}"
                          f"{'' if get(n, 'mem_total') else ' no memory'}" for n in nodes)
    return {"host": get(get(topo, "machine"), "hostname"), "CPU": get(get(topo, "cpu"), "model"),
            "nodes": layout}


def check_machine(run: Run, topo: Topology, other_machine: bool) -> dict | None:
    """A resume measures on this machine: one that started on another would file this
    machine's figures under that one's name, so it is refused, unless other_machine.
    Returns what run.json's "resumed_elsewhere" is to record of this machine (None: the
    same machine); every journal line names the machine of its case (journal_entry)."""
    was = {"machine id": run.meta.get("machine_id"),
           **machine_identity(run.meta.get("topology") or {})}
    now = {"machine id": results.machine_id(), **machine_identity(topo.to_dict())}
    differs = [f"{key} {was[key]!r}, here {now[key]!r}" for key in was
               if was[key] is not None and was[key] != now[key]]
    if not differs:
        return None
    if not other_machine:
        raise UserError(f"cannot resume {run.path} here: it was started on another machine "
                        f"({'; '.join(differs)}), and this machine's figures would be filed "
                        "under that one's; start a new run here, or add --other-machine to "
                        "finish it here with the mix recorded")
    return {**now, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def describe(entry: dict) -> str:
    """The line after a case: each metric's median, SI-prefixed, its 95% CI in the same
    prefix, cv and n; or why it failed."""
    if entry["status"] == "unsupported":
        return f"UNSUPPORTED: {entry['error']}"
    if entry["status"] != "ok":
        return f"FAILED: {entry['error']}"
    parts = []
    for metric, s in entry["summary"].items():
        if results.is_prediction(metric, entry.get("kernel")):
            parts.append(f"{metric} {quantity(s['median'], s['unit'])} predicted")
            continue
        flag = "  NOISY" if s["noisy"] else ""
        divisor, _ = scale(s["median"], s["unit"])
        parts.append(f"{metric} {quantity(s['median'], s['unit'])} "
                     f"[{significant(s['ci_low'] / divisor)}, "
                     f"{significant(s['ci_high'] / divisor)}] cv {s['cv']:.1%} n={s['n']}{flag}")
    return "; ".join(parts) + f"  ({entry['seconds']:.1f} s)"


def timing_text(meta: dict, journal: dict[str, dict]) -> str | None:
    """The finished cases' time against their estimates: 'cases took 4 min 10 s, estimated
    ~3 min 50 s; half the estimates within 15 % of what their case took' (None where no
    case was estimated)."""
    pairs = [(e["estimate_s"], e["seconds"]) for e in journal.values()
             if e.get("estimate_s") and isinstance(e.get("seconds"), (int, float))
             and e["seconds"] > 0]
    if not pairs:
        return None
    median = statistics.median(abs(est - took) / took for est, took in pairs)
    some = "" if len(pairs) == len(journal) else f"{len(pairs)} estimated "
    return (f"{some}cases took {duration(sum(t for _, t in pairs))}, estimated "
            f"~{duration(sum(e for e, _ in pairs))}; half the estimates within {median:.0%} "
            "of what their case took")


SUMMARY_KEYS = {*results.SUMMARY_FIELDS, "n"}


def summary_records(run: Run, journal: dict[str, dict]) -> list[dict]:
    """The --json summary: one object per case and metric, in case order; `fitted`: what
    --fit (or a guest) scaled down in it."""
    out = []
    fitted = run.meta.get("fitted") or {}
    for c in run.meta["cases"]:
        entry = journal.get(c["id"])
        if entry is None:
            continue
        common = {"case": c["id"], "benchmark": c["bench"], "kernel": entry.get("kernel"),
                  "isa": entry.get("isa"), "cpus": entry.get("cpus"), "parameters": c["params"],
                  "status": entry["status"],
                  "error": entry.get("error"), "run_dir": str(run.path),
                  "model": (entry.get("info") or {}).get("model"),
                  "tiers": ((entry.get("info") or {}).get("tiers") or {}).get("source"),
                  # the settings a probe chose (tuning.py), where an option was auto
                  "tuned": ((entry.get("info") or {}).get("tuned") or {}).get("chosen"),
                  "fitted": (fitted.get(c["id"]) or {}).get("changed")}
        # (a hand-made line's metric may have its count alone: nothing to show of it)
        summary = {m: s for m, s in entry["summary"].items() if SUMMARY_KEYS <= set(s)}
        if not summary:
            out.append({**common, "metric": None, "unit": None, "median": None,
                        "ci_low": None, "ci_high": None, "cv": None, "n": 0})
        for metric, s in summary.items():
            out.append({**common, "metric": metric, "unit": s["unit"], "median": s["median"],
                        "ci_low": s["ci_low"], "ci_high": s["ci_high"], "cv": s["cv"],
                        "n": s["n"], "noisy": s["noisy"]})
    return out
