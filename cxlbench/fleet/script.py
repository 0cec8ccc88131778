"""The sbatch script of a fleet job, in one of two forms:

- an array (the default): one task per machine, each allocated whole (--exclusive, all
  its memory), at most --max-running at once, each with its own time limit, so machines
  start as they free up and a failure ends one task. Each task runs `cxlbench fleet task`,
  which picks the run it makes or finishes (fleet/task.py);
- a gang: one job holding every machine at once, one step on each (suites that need
  several machines together).

Either way every machine's run is an ordinary `cxlbench run` writing
RESULTS/<machine>/<run-id>/ as a local run does. The job gets only the environment named
in its script (--export with a list), so a submitting shell's PYTHONPATH, OMP_* or
LD_PRELOAD does not reach the measurements. The script is kept in the fleet's folder,
so what ran is what the user reads.

Every value that reaches the script passes one of three functions here: sbatch_value
checks what stands on an #SBATCH line (sbatch reads those itself, word by word, so a value
is refused rather than quoted), shell_word quotes what bash reads, and _comment writes what
the script only says. A value reaches no line any other way."""
from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import asdict, dataclass, field

from .. import PACKAGE_PARENT, __version__
from ..errors import UserError

# What each value may hold, in SLURM's own words (beyond what sbatch_value refuses).
_NODELIST = re.compile(r"[A-Za-z0-9_.\-\[\],]+")
_WORD = re.compile(r"[A-Za-z0-9_.,\-]+")
_CONSTRAINT = re.compile(r"[A-Za-z0-9_.,\-&|*\[\]():!]+")
_TIME = re.compile(r"(\d+-)?\d+(:\d+){0,2}|\d+-\d+|UNLIMITED|INFINITE",
                   re.IGNORECASE | re.ASCII)
_PATH = re.compile(r"[A-Za-z0-9_./\-]+")
# sbatch reads the #SBATCH lines itself, not through a shell (get_argument in its
# opt.c): whitespace ends a word, quotes group and are taken away, \ escapes, an unquoted
# # starts a comment and a newline ends the line; the first line that is not a comment
# ends the #SBATCH lines. A value holding one of these would be cut short, or become
# options, or lines run as commands, of whoever chose it.
_SBATCH_SPECIAL = "'\"\\#"
_SBATCH_WHY = ("sbatch reads these lines word by word: whitespace ends a value, quotes and "
               "\\ are dropped, # starts a comment, a newline ends the line")
# sbatch options fleet sets, or whose setting would undo what it promises, each with why
# it is refused. sbatch takes any unambiguous prefix of a long option, so a prefix of one
# of these is refused too, and so are short options (-N4, -pdebug).
_REFUSED = {
    **{o: f"use fleet's {o}" for o in ("--nodes", "--nodelist", "--partition",
                                       "--constraint", "--time")},
    "--nodefile": "use fleet's --nodelist",
    **dict.fromkeys(("--exclusive", "--oversubscribe", "--mem", "--mem-per-cpu",
                     "--mem-per-gpu", "--cpus-per-task", "--cpus-per-gpu", "--overcommit",
                     "--ntasks", "--ntasks-per-node", "--ntasks-per-core",
                     "--ntasks-per-socket", "--ntasks-per-gpu"),
                    "fleet gives each machine whole to one task (--exclusive, --mem=0)"),
    **dict.fromkeys(("--output", "--error", "--input", "--chdir", "--job-name"),
                    "fleet names the job, its output files and its folder"),
    **dict.fromkeys(("--requeue", "--no-requeue"), "a fleet job is never requeued (its "
                    "script run again would start every machine's run afresh)"),
    **dict.fromkeys(("--export", "--export-file", "--get-user-env"),
                    "fleet passes the job exactly the environment it records: use --env "
                    "KEY=VALUE"),
    "--array": "fleet makes the array: use --max-running for its %K",
    "--exclude": "fleet excludes machines itself (those outside --nodelist)",
    "--wrap": "fleet writes the script: one run per machine",
    "--no-kill": "a machine that fails leaves the others running",
    "--clusters": "fleet asks this cluster's controller about its jobs",
}


def _misread(value: str, also: str = "") -> list[str]:
    """The characters of value sbatch would misread on an #SBATCH line (and those of
    also), each once: whitespace, quotes, \\, #, and anything unprintable (a control
    character, or a byte that is not UTF-8, which the script's text cannot hold)."""
    return list(dict.fromkeys(c for c in value if c.isspace() or not c.isprintable()
                              or c in _SBATCH_SPECIAL or c in also))


def sbatch_value(flag: str, value: str, also: str = "", why: str = "") -> str:
    """value, as it stands on an #SBATCH line; UserError naming flag and value where it
    holds what sbatch would misread there (or a character of also, with why)."""
    bad = _misread(value, also)
    if bad:
        held = ", ".join(f"the byte {ord(c) - 0xdc00:#x} (not UTF-8)"
                         if 0xdc80 <= ord(c) <= 0xdcff else ascii(c) for c in bad)
        raise UserError(f"{flag} {value!r} cannot stand on an #SBATCH line: it holds "
                        f"{held} ({_SBATCH_WHY}{why})")
    return value


def shell_word(value: str, what: str) -> str:
    """value as one word bash reads back whole, whatever it holds: shlex's quoting, or
    bash's $'...' with each byte escaped where it holds a newline, a control character
    or bytes that are not UTF-8 (so each command stays on its line and the script is
    text). UserError naming what where no argument can hold it (a NUL)."""
    if value.isprintable():
        return shlex.quote(value)
    try:
        raw = value.encode("utf-8", "surrogateescape")      # a file name's own bytes
    except UnicodeEncodeError:
        raw = b"\0"
    if b"\0" in raw:
        raise UserError(f"{what} {value!r}: no program's argument can hold a NUL (or a "
                        "lone surrogate): give it without")
    return "$'" + "".join(chr(b) if 32 <= b < 127 and b not in b"'\\" else f"\\x{b:02x}"
                          for b in raw) + "'"


def shell_join(words: list[str], what: str) -> str:
    return " ".join(shell_word(w, what) for w in words)


def _comment(text: str) -> str:
    """A line the script only says: anything unprintable (a newline above all, which
    would end the comment and make the rest a command) written as its escape."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


@dataclass
class Options:
    """Where and how long a fleet job runs, in SLURM's own words."""
    nodes: int | None = None
    nodelist: str | None = None
    partition: str | None = None
    constraint: str | None = None
    time: str | None = None
    sbatch_args: list[str] = field(default_factory=list)
    gang: bool = False                  # one job on every machine at once, not an array
    max_running: int | None = None      # an array's tasks running at once (%K)
    env: dict[str, str] = field(default_factory=dict)   # passed to the job beside job_env()'s
    hosts: int | None = None            # 2: two machines sharing one region, run together
    shared_dax: str | None = None       # the region's path (the same on both machines)

    def validate(self) -> "Options":
        """Refuse what sbatch would misread, or what fleet sets itself (UserError)."""
        self._validate_hosts()
        if self.nodes is not None and self.nodelist:
            raise UserError("give --nodes N or --nodelist a,b,c, not both (a node list "
                            "sets the count)")
        if self.nodes is None and not self.nodelist:
            raise UserError("give --nodes N (any N machines) or --nodelist a,b,c (these)")
        if self.nodes is not None and self.nodes < 1:
            raise UserError(f"--nodes {self.nodes}: at least 1")
        if self.max_running is not None:
            if self.gang:
                raise UserError("--max-running limits an array's tasks; a --gang job runs "
                                "on every machine at once")
            if self.max_running < 1:
                raise UserError(f"--max-running {self.max_running}: at least 1")
        for key, value in self.env.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) or key.startswith("SLURM"):
                raise UserError(f"--env {key}=...: not a variable name fleet passes (letters, "
                                "digits and _, not SLURM_*)")
            sbatch_value("--env", f"{key}={value}", also=",",
                         why=", and the --export list is split at commas")
        for flag, value, pattern in (("--nodelist", self.nodelist, _NODELIST),
                                     ("--partition", self.partition, _WORD),
                                     ("--constraint", self.constraint, _CONSTRAINT),
                                     ("--time", self.time, _TIME)):
            if value is not None and not pattern.fullmatch(sbatch_value(flag, value)):
                raise UserError(f"{flag} {value!r}: not a SLURM {flag[2:]} (no spaces or "
                                "quotes; see sbatch(1))")
        for arg in self.sbatch_args:
            if not arg.startswith("--"):
                raise UserError(f"--sbatch-arg {arg!r}: one long sbatch option without "
                                "spaces or quotes, its value after '=' (e.g. "
                                "--sbatch-arg=--qos=lab)")
            sbatch_value("--sbatch-arg", arg)
            name = arg.split("=", 1)[0]
            hit = name if name in _REFUSED else next(
                (o for o in _REFUSED if o.startswith(name)), None)
            if hit:
                said = "" if hit == name else f"sbatch could read {name} as {hit}: "
                raise UserError(f"--sbatch-arg {arg}: {said}{_REFUSED[hit]}")
        return self

    def _validate_hosts(self) -> None:
        """--hosts 2 --shared-dax PATH: two machines, one gang job, the region's path
        absolute and plain (it is written into the script)."""
        if self.hosts is None and self.shared_dax is None:
            return
        if self.hosts != 2:
            raise UserError(f"--hosts {self.hosts}: two hosts share a region (--hosts 2 "
                            "--shared-dax PATH)" if self.hosts is not None else
                            "--shared-dax names the region of --hosts 2")
        if not self.shared_dax:
            raise UserError("--hosts 2: name the region both machines map, --shared-dax "
                            "/dev/daxX.Y")
        if not self.shared_dax.startswith("/") or not _PATH.fullmatch(self.shared_dax):
            raise UserError(f"--shared-dax {self.shared_dax!r}: an absolute path of letters, "
                            "digits and / . _ - (such as /dev/dax0.0)")
        count = self.nodes if self.nodes is not None else \
            len(self.nodelist.split(",")) if self.nodelist and "[" not in self.nodelist \
            else None
        if count is not None and count != 2:
            raise UserError(f"--hosts 2: two machines (--nodes 2 or --nodelist a,b), not "
                            f"{count}")
        if self.max_running is not None:
            raise UserError("--hosts 2 runs both machines at once in one job: no "
                            "--max-running")

    @property
    def two_hosts(self) -> bool:
        return self.hosts == 2

    def to_dict(self) -> dict:
        return asdict(self)


def job_env(options: Options, environ=None) -> dict[str, str]:
    """All the environment a fleet job gets beside SLURM's own variables: a PATH to this
    Python and the system's tools, a fixed locale, HOME, then --env's; recorded in
    fleet.json and written in the script."""
    environ = os.environ if environ is None else environ
    python = sbatch_value("this Python's folder", os.path.dirname(sys.executable), also=",:",
                          why=", the --export list is split at commas and PATH at colons")
    env = {"PATH": f"{python}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    home = environ.get("HOME", "")
    if home and not _misread(home, ","):     # else left out: the job's HOME is SLURM's
        env["HOME"] = home
    return {**env, **options.env}


# A folder on an #SBATCH line: % in a file name there is one of sbatch's patterns.
FOLDER_RULE = ("%", ", and a % in a file name is a pattern (%j: the job id)")


def sbatch_script(*, name: str, options: Options, fleet_dir: str, results_dir: str,
                  comment: str, env: dict[str, str] | None = None,
                  notes: tuple[str, ...] = (),
                  commands: dict[str | None, list[str]] | None = None,
                  tasks: str | None = None, exclude: str | None = None) -> str:
    """The script's text. An array (tasks: its task ids, "0-999" or "3,17"; exclude: the
    machines it may not use) runs `cxlbench fleet task` in each task; a gang runs
    commands: the command each machine runs, by node name, or under None the one every
    machine runs. Every value goes through sbatch_value, shell_word or _comment."""
    sbatch_value("--results", results_dir, *FOLDER_RULE)
    sbatch_value("--results", fleet_dir, *FOLDER_RULE)
    sbatch_value("cxlbench's own folder", PACKAGE_PARENT, *FOLDER_RULE)
    array = tasks is not None
    env = job_env(options) if env is None else env
    for key, value in env.items():
        sbatch_value("the job's environment:", f"{key}={value}", also=",",
                     why=", and the --export list is split at commas")
    lines = ["#!/bin/bash",
             _comment(f"# cxlbench fleet ({comment}): one run per machine under "
                      f"{results_dir}/<machine>/<run-id>/"),
             f"# written by cxlbench {__version__}; kept here so that what ran can be read.",
             *(_comment(f"# {note}") for note in notes),
             _comment(f"# the job's environment: SLURM's variables, and only "
                      f"{', '.join(env)} from here")]
    # (flag, value) of each #SBATCH line; checked as one below.
    sbatch = [("--job-name", f"cxlbench-{_name(name)}")]
    if array:
        limit = f"%{options.max_running}" if options.max_running else ""
        sbatch += [("--array", f"{tasks}{limit}"), ("--nodes", "1")]
        if exclude:
            sbatch.append(("--exclude", exclude))
    elif options.nodelist:
        sbatch.append(("--nodelist", options.nodelist))
    else:
        sbatch.append(("--nodes", str(options.nodes)))
    # One task per machine, the machine to itself: nothing else runs beside a benchmark.
    sbatch += [("--ntasks-per-node", "1"), ("--exclusive", None), ("--mem", "0")]
    if not array:
        sbatch.append(("--no-kill", None))   # a node that fails leaves the others running
    # Requeued, a gang's script would start every machine's run again from its first case;
    # an array task's would pick its run again, but a requeue is SLURM's choice of when.
    sbatch.append(("--no-requeue", None))
    for flag in ("partition", "constraint", "time"):
        value = getattr(options, flag)
        if value:
            sbatch.append((f"--{flag}", value))
    # Only these variables (and SLURM's): not the submitting shell's whole environment.
    sbatch.append(("--export", ",".join(f"{k}={v}" for k, v in env.items())))
    # Tasks start in this cxlbench's folder, as its workers do: `python -m cxlbench` then
    # runs this same cxlbench, installed or a checkout (on a file system every machine sees).
    sbatch.append(("--chdir", PACKAGE_PARENT))
    sbatch.append(("--output", f"{fleet_dir}/logs/task-%a-%A.log" if array
                   else f"{fleet_dir}/job-%j.out"))
    sbatch += [(sbatch_value("--sbatch-arg", arg), None) for arg in options.sbatch_args]
    lines += [f"#SBATCH {flag}" if value is None else
              f"#SBATCH {flag}={sbatch_value(flag, value)}" for flag, value in sbatch]
    # Steps get the job's environment as it is here (the list above), not --export again.
    lines += ["", "export SLURM_EXPORT_ENV=ALL"]
    if array:
        task = [sys.executable, "-m", "cxlbench", "fleet", "task", fleet_dir]
        # One step on the task's machine, on every CPU and memory node (a site's default
        # binding would put a one-task step on one core). fleet task checks the fleet's
        # folder is seen here, picks the run to make or finish, and becomes it.
        lines += ["exec srun --nodes=1 --ntasks=1 --kill-on-bad-exit=0 --cpu-bind=none "
                  f"--mem-bind=none {shell_join(task, 'the task command')}"]
        return "\n".join(lines) + "\n"
    lines += _RUN.replace("FLEET", shell_word(fleet_dir, "--results")).splitlines()
    assert commands is not None
    if options.two_hosts:
        # Host 0 and host 1 by their place in the job's node list; SLURM's job id the
        # session both name (benchmarks/crosshost.py).
        region = shell_word(options.shared_dax, "--shared-dax")
        lines += [f"export CXLBENCH_SHARED_REGION={region}",
                  '[ "$(echo $nodes | wc -w)" -eq 2 ] || { echo "cxlbench fleet: --hosts 2 '
                  'got $nodes" >&2; exit 3; }', "h=0", "for n in $nodes; do"]
        # A resume of two hosts is refused (submit.resume): one command for both.
        lines += [f"  (CXLBENCH_SHARED_HOST=$h run_on \"$n\" "
                  f"{shell_join(commands[None], 'the run command')}) &"]
        lines += ['  pids+=("$!")', "  h=$((h + 1))", "done"]
    elif set(commands) == {None}:
        lines += ["for n in $nodes; do",
                  f"  run_on \"$n\" {shell_join(commands[None], 'the run command')} &",
                  '  pids+=("$!")', "done"]
    else:
        # A resume: each machine its own command (the run it finishes).
        lines += ["for n in $nodes; do", '  case "$n" in']
        lines += [f"    {shell_word(node, 'machine')}) run_on \"$n\" "
                  f"{shell_join(cmd, 'the run command')} & ;;"
                  for node, cmd in commands.items()]
        lines += ['    *) echo "cxlbench fleet: nothing to run on $n" >&2; rc=2; continue ;;',
                  "  esac", '  pids+=("$!")', "done"]
    lines += ['for p in "${pids[@]}"; do wait "$p" || rc=$?; done', 'exit "$rc"']
    return "\n".join(lines) + "\n"


# The job's body. One step per machine, started in the background and waited for: a
# step spanning every node would end every machine's run when one node fails (--no-kill
# does not reach srun) or, with slurm.conf's WaitTime, when the first machine finishes.
# Each step runs on its node, on every CPU (--cpu-bind=none: a site's default binding
# would put a one-task step on one core) and memory node; its log is named by SLURM's
# node name (srun's %N is the host's). A step that ends badly says so here, in the job's
# output, at once; the job's exit code is the last such step's.
_RUN = r"""fleet=FLEET     # the fleet's folder
# This job's machines, kept where `fleet status` finds them once SLURM forgets the job.
nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
if [ -z "$nodes" ]; then
  echo "cxlbench fleet: no machines in SLURM_JOB_NODELIST=$SLURM_JOB_NODELIST" >&2; exit 3
fi
printf '%s\n' $nodes > "$fleet/nodes-$SLURM_JOB_ID.tmp" &&
  mv "$fleet/nodes-$SLURM_JOB_ID.tmp" "$fleet/nodes-$SLURM_JOB_ID"

run_on() {
  local n=$1 code
  shift
  srun --nodes=1 --ntasks=1 --nodelist="$n" --kill-on-bad-exit=0 --cpu-bind=none \
    --mem-bind=none --output="$fleet/logs/$n-%j.log" bash -c "$on_node" "$@"
  code=$?
  [ "$code" -eq 0 ] || echo "cxlbench fleet: $n: srun exit code $code" >&2
  return "$code"
}
# On the machine: its Python must be there (the same path on every machine).
on_node='[ -x "$0" ] || { echo "cxlbench fleet: $0: no such program on $(hostname)" >&2;
  exit 3; }; exec "$0" "$@"'
pids=()
rc=0"""


def _name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text) or "suite"
