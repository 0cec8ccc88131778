"""A fleet's sbatch script made from hostile values (issue 46, items 3 and 8): every value
that reaches the script is quoted for bash where bash reads it, refused where sbatch
reads it (its #SBATCH lines, which it parses itself), and written escaped where the
script only says it. Each script is run by bash with srun, scontrol and sbatch stood in
for, and cxlbench itself (the Python the script names) stood in for by a stub recording
its arguments: nothing but the stubs runs, and cxlbench gets each value whole, as one
argument. No SLURM, and no real run, is needed."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cxlbench.cli import main
from cxlbench.errors import UserError
from cxlbench.fleet import script, status, submit, task

from .conftest import cxlbench

# Values a shell would run, split, expand or end early on, or a file name may hold; each
# is a suite's file name (it holds no /) and a --var value. "pwned" is made only by a
# command the value smuggled in.
HOSTILE = [
    "inj\ntouch pwned #",                   # the issue's: a line of its own, then a comment
    "$(touch pwned)", "`touch pwned`", "x; touch pwned", "x && touch pwned|cat",
    "it's", 'say "hi"', "a # b", "two  words\tand a tab", "cr\rtouch pwned",
    "--results-dir=elsewhere", "*", "~", "\\", "$HOME", "é", "-",
    "not UTF-8 \udcff\udcfe; touch pwned",   # bytes 0xff 0xfe, as a file name holds them
]

SUITE = """description = "${note}"
[vars]
note = "a tiny suite"
[lat]
bench = "chase"
size = "64K"
loads = 2000
"""

# Each records its arguments, NUL-separated (so a newline or any byte comes back as it
# went), into a file of its own under $ARGV_DIR.
RECORD = 'printf "%s\\0" "$@" > "$(mktemp "$ARGV_DIR/NAME.XXXXXX")"\n'
STUBS = {
    # a step on one machine: its command run here, as SLURM would there
    "srun": RECORD + 'while [[ $1 == -* ]]; do shift; done\nexec "$@"\n',
    "scontrol": RECORD + """case "$1 $2" in
  "show hostnames") tr , '\\n' <<< "$3" ;;
  "show hostlist") echo "$3" ;;
  "show config")
    [ -z "$DOWN" ] || { echo "slurm_load_ctl_conf error: Unable to contact slurm controller \
(connect failure)" >&2; exit 1; }
    echo "MaxArraySize            = ${MAX_ARRAY_SIZE:-1001}"
    echo "SchedulerParameters     = ${SCHEDULER_PARAMETERS:-(null)}" ;;
esac
""",
    "sinfo": RECORD + """case "$*" in
  *"%N %t"*) printf 'n1 idle\\nn2 idle\\n' ;;
  *"%N %f"*) printf 'n1 cxl\\nn2 cxl\\n' ;;
  *) echo "debug* n1,n2" ;;
esac
""",
    "sbatch": RECORD + "echo 100\n",
    "python": RECORD,                       # cxlbench: the Python the script names
}


@pytest.fixture
def stubs(tmp_path, monkeypatch):
    """The stand-ins on PATH (and nothing of SLURM's beside them), this process's
    sys.executable the stub Python for the scripts made here; their argv's folder."""
    bin_dir, argv_dir = tmp_path / "bin", tmp_path / "argv"
    bin_dir.mkdir()
    argv_dir.mkdir()
    for name, body in STUBS.items():
        path = bin_dir / name
        path.write_text("#!/bin/bash\n" + body.replace("NAME", name))
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("ARGV_DIR", str(argv_dir))
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    return argv_dir


def calls(argv_dir: Path, name: str) -> list[list[str]]:
    """Each call of a stub: its arguments as the program got them (bytes that are not
    UTF-8 as Python's file names hold them)."""
    return [[os.fsdecode(a) for a in p.read_bytes().split(b"\0")[:-1]]
            for p in sorted(argv_dir.glob(f"{name}.*"), key=lambda p: p.stat().st_mtime_ns)]


def sbatch_reads(text: str) -> tuple[list[str], int]:
    """The options sbatch takes from a script's #SBATCH lines, read as sbatch reads them
    (SLURM's src/sbatch/opt.c, _opt_batch_script and get_argument: whitespace ends a
    word, quotes group, \\ escapes, an unquoted # ends the line; the first line that is
    not a comment ends the reading), and the number of lines read."""
    args: list[str] = []
    lines = text.split("\n")
    for n, line in enumerate(lines):
        if not line.startswith("#SBATCH"):
            if line.strip() and not line.strip().startswith("#"):
                return args, n                  # a command: sbatch reads no further
            continue
        rest = line[len("#SBATCH"):]
        i = 0
        while True:
            while i < len(rest) and rest[i].isspace():
                i += 1
            if i == len(rest):
                break
            word, quote, escaped = "", None, False
            while i < len(rest) and (quote or not rest[i].isspace()):
                c = rest[i]
                i += 1
                if escaped:
                    escaped = False
                elif c == "\\":
                    if rest[i:i + 1] == " ":     # an escaped space is kept in the word
                        word += " "
                        i += 1
                    else:
                        escaped = True
                    continue
                elif quote:
                    if c == quote:
                        quote = None
                        continue
                elif c in "'\"":
                    quote = c
                    continue
                elif c == "#":
                    i = len(rest)
                    break
                word += c
            assert quote is None, f"sbatch: unmatched {quote} in {line!r}"
            if word:
                args.append(word)
    return args, len(lines)


def check_sbatch_lines(text: str) -> list[str]:
    """Every #SBATCH line of the script is one whole option sbatch reads, and none comes
    after the script's first command; the options."""
    written = [line[len("#SBATCH "):] for line in text.split("\n")
               if line.startswith("#SBATCH")]
    read, stop = sbatch_reads(text)
    assert read == written
    assert all(not line.startswith("#SBATCH") for line in text.split("\n")[stop:])
    return read


def run_script(text: str, tmp_path: Path, nodes: str = "n1") -> Path:
    """bash runs the script as SLURM would start it on `nodes`, in a folder of its own;
    that folder."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "job.sh").write_text(text)
    done = subprocess.run(["bash", "job.sh"], cwd=work, capture_output=True, timeout=60,
                          env={**os.environ, "SLURM_JOB_NODELIST": nodes,
                               "SLURM_JOB_ID": "7", "SLURM_ARRAY_JOB_ID": "100",
                               "SLURM_ARRAY_TASK_ID": "0"})
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return work


def nothing_smuggled(tmp_path: Path) -> None:
    assert [str(p) for p in tmp_path.rglob("pwned")] == []


def hostile_suite(tmp_path: Path, value: str) -> Path:
    folder = tmp_path / "suites"
    folder.mkdir(exist_ok=True)
    path = folder / f"{value}.toml"
    path.write_text(SUITE)
    return path


def for_form(form: str) -> script.Options:
    return script.Options(nodes=1, gang=form == "gang", time="0:10:00",
                          env={"CXL_MARK": "$(touch${IFS}pwned);`touch${IFS}pwned`"})


# Folders a shell would run or split on, that sbatch reads as they are: quoted for bash.
SHELL_ONLY = ["$(touch${IFS}pwned)", "`touch${IFS}pwned`", "r;touch${IFS}pwned",
              "r&&touch${IFS}pwned|cat", "r>x<y", "é", "*", "$HOME"]


@pytest.mark.parametrize("value, folder", [(v, SHELL_ONLY[i % len(SHELL_ONLY)])
                                           for i, v in enumerate(HOSTILE)],
                         ids=[ascii(v) for v in HOSTILE])
def test_a_hostile_suite_name_and_variable_reach_cxlbench_whole(tmp_path, stubs, value,
                                                                folder):
    """The suite's file name and a --var value, whatever they hold, and a results folder
    only a shell would misread, reach cxlbench as one argument each; the job keeps all
    its #SBATCH lines; nothing else runs. The array form (the default), a gang, and an
    array's resume, each as submit makes it."""
    suite_file = hostile_suite(tmp_path, value)
    results_dir = tmp_path / folder / "results"
    fleets = {}
    for form in ("array", "gang"):
        fleet, text = submit.prepare(str(suite_file), {"note": value}, for_form(form),
                                     str(results_dir), local_results=True)
        fleets[form] = fleet
        assert (fleet.path / f"{value}.toml").read_text() == SUITE
        text.encode()                       # text, whatever bytes the name holds
        options = check_sbatch_lines(text)
        assert {"--exclusive", "--no-requeue", "--time=0:10:00", "--mem=0"} <= set(options)
        assert ("--array=0" in options) == (form == "array")
        env = fleet.data["environment"]
        assert env["CXL_MARK"] == "$(touch${IFS}pwned);`touch${IFS}pwned`"
        assert "--export=" + ",".join(f"{k}={v}" for k, v in env.items()) in options
        head = text[:text.index("#SBATCH")].splitlines()
        assert all(line.startswith("#") for line in head)       # said, never run
        assert f"--output={fleet.path}/" in "\n".join(options)
        run_script(text, tmp_path)
        ran = calls(stubs, "python")
        if form == "gang":                  # the job wrote its machines down, there
            assert (fleet.path / "nodes-7").read_text() == "n1\n"
        if form == "array":
            assert ran == [["-m", "cxlbench", "fleet", "task", str(fleet.path)]]
            # what the task becomes, from the fleet's record (no shell): the same words
            argv = task.command(fleet, 0, "101", "100", "n1")
        else:
            (argv,) = [[sys.executable, *a] for a in ran]
        assert argv == [sys.executable, "-m", "cxlbench", "run",
                        str(fleet.path / f"{value}.toml"), "--var", f"note={value}",
                        "--results-dir", str(results_dir)]
        for p in stubs.iterdir():
            p.unlink()
    # An array's resume of task 1 says the same name, escaped alike.
    again = submit.resume_script(fleets["array"], [status.Machine(
        node="n2", state="failed", job="100", task=1)])
    assert "--array=1" in check_sbatch_lines(again)
    run_script(again, tmp_path)
    assert calls(stubs, "python") == [["-m", "cxlbench", "fleet", "task",
                                       str(fleets["array"].path)]]
    nothing_smuggled(tmp_path)


# Folders sbatch would misread on the script's --output line: refused, naming them.
SBATCH_MISREADS = ["a b", "a\nb", "it's", 'a"b', "a#b", "a\\b", "50%j", "tab\there",
                   "bytes\udcff"]


@pytest.mark.parametrize("name", SBATCH_MISREADS, ids=[ascii(v) for v in SBATCH_MISREADS])
def test_a_results_folder_sbatch_would_misread_is_refused_before_anything_is_made(
        tmp_path, stubs, name):
    results_dir = tmp_path / name
    for dry_run in (True, False):
        with pytest.raises(UserError, match=re.escape(
                f"--results {str(results_dir)!r} cannot stand on an #SBATCH line")):
            submit.prepare(str(hostile_suite(tmp_path, "tiny")), {}, for_form("array"),
                           str(results_dir), dry_run=dry_run, local_results=True)
    assert not os.path.lexists(results_dir)


def invoke(*args: str):
    """`cxlbench fleet submit ... --dry-run` in this process: exit code and output."""
    r = CliRunner().invoke(main, ["fleet", "submit", *args, "--dry-run"])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r.exit_code, r.stdout, r.stderr


# An option's value sbatch would misread (or the shell, where the value is a path), with
# the flag the error names.
REFUSED_OPTIONS = [
    (["--partition", "lab\ntouch pwned"], "--partition"),
    (["--partition", "lab #x"], "--partition"),
    (["--partition", "la'b"], "--partition"),
    (["--constraint", "cxl\n#SBATCH --wrap=x"], "--constraint"),
    (["--constraint", "cxl#ddr5"], "--constraint"),
    (["--time", "1:00:00\ntouch pwned"], "--time"),
    (["--time", "١:٠٠"], "--time"),                   # digits, but not sbatch's
    (["--sbatch-arg=--qos=lab\ntouch pwned"], "--sbatch-arg"),
    (["--sbatch-arg=--comment=a#b"], "--sbatch-arg"),
    (["--sbatch-arg=--comment=a\\b"], "--sbatch-arg"),
    (["--sbatch-arg=--comment=$'x'"], "--sbatch-arg"),
    (["--env", "K=a#b"], "--env"),
    (["--env", "K=a\\b"], "--env"),
    (["--env", "K=a\nb"], "--env"),
    (["--env", "K=x,PATH=/evil"], "--env"),
    *[(["--hosts", "2", "--shared-dax", region], "--shared-dax") for region in (
        "/dev/dax0.0\ntouch pwned", "/dev/dax0.0;touch pwned", "/dev/$(touch pwned)",
        "/dev/dax 0", "dax0.0")],
]


@pytest.mark.parametrize("args, flag", REFUSED_OPTIONS)
def test_an_option_sbatch_would_misread_is_refused_naming_it(tmp_path, stubs, args, flag):
    code, out, err = invoke(str(hostile_suite(tmp_path, "tiny")), "--nodes", "1",
                            "--local-results", "--results", str(tmp_path / "r"), *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1, err
    value = args[-1].split("=", 1)[1] if flag == "--sbatch-arg" else args[-1]
    assert err.startswith(f"error: {flag} {value!r}")


def test_the_issues_suite_name_as_the_cli_writes_it(tmp_path):
    """The issue's probe as a user makes it: `fleet submit $'inj\\ntouch pwned #'.toml
    --dry-run` prints a script whose #SBATCH lines are all read (the array, exclusive,
    time limit and environment among them), which bash runs without touching pwned."""
    suite_file = hostile_suite(tmp_path, "inj\ntouch pwned #")
    r = cxlbench("fleet", "submit", suite_file.name, "--nodes", "2", "--local-results",
                 "--results", str(tmp_path / "r"), "--dry-run", cwd=suite_file.parent,
                 env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "# cxlbench fleet (suite inj\\ntouch pwned #): one run" in r.stdout
    options = check_sbatch_lines(r.stdout)
    assert [o.split("=")[0] for o in options] == [
        "--job-name", "--array", "--nodes", "--ntasks-per-node", "--exclusive", "--mem",
        "--no-requeue", "--time", "--export", "--chdir", "--output"]
    assert "--array=0-1" in options
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/bash\nprintf '%s\\n' \"$@\" > \"$ARGV\"\n")
    (bin_dir / "srun").chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(["bash", "-c", r.stdout], cwd=work, capture_output=True, text=True,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin",
                               "ARGV": str(tmp_path / "srun.txt")})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "srun.txt").read_text().endswith(
        f"\nfleet\ntask\n{(tmp_path / 'r').resolve()}/fleet/<stamp>\n")
    nothing_smuggled(tmp_path)


def test_an_array_past_the_clusters_limit_is_refused_naming_it(tmp_path, stubs, monkeypatch):
    """--nodes N writes an array of task ids 0 to N-1: past the cluster's MaxArraySize (or
    max_array_tasks) it is refused naming the setting; where SLURM cannot be asked, the
    default is said, and past the most SLURM ever takes it is refused; a pool smaller
    than N, or one not counted, is said."""
    common = [str(hostile_suite(tmp_path, "tiny")), "--local-results",
              "--results", str(tmp_path / "r")]
    code, out, err = invoke(*common, "--nodes", "1002")
    assert code == 2 and err == ("error: --nodes 1002: an array of 1002 tasks, past the 1001 "
                                 "this cluster takes in one (MaxArraySize = 1001): give at "
                                 "most 1001 machines (and the rest in a fleet of their own), "
                                 "or ask its administrators to raise it\n")
    code, out, err = invoke(*common, "--nodes", "1001")
    assert code == 0 and "#SBATCH --array=0-1000\n" in out
    assert err == ("warning: 1001 tasks on a pool of 2 machines: some machines are measured "
                   "more than once\n")
    monkeypatch.setenv("SCHEDULER_PARAMETERS", "bf_continue,max_array_tasks=100")
    code, out, err = invoke(*common, "--nodes", "101")
    assert code == 2 and "past the 100 this cluster takes in one (SchedulerParameters' " \
                         "max_array_tasks=100)" in err
    monkeypatch.setenv("MAX_ARRAY_SIZE", "0")
    code, out, err = invoke(*common, "--nodes", "2")
    assert code == 2 and err == ("error: this cluster runs no job arrays (MaxArraySize = 0): "
                                 "submit with --gang\n")
    assert invoke(*common, "--nodes", "2", "--gang")[0] == 0
    # The controller down: the default said.
    monkeypatch.setenv("DOWN", "1")
    code, out, err = invoke(*common, "--nodes", "1500")
    assert code == 0 and (
        "warning: --nodes 1500: an array of 1500 tasks, past SLURM's default MaxArraySize of "
        "1001; this cluster's was not read here (scontrol show config: slurm_load_ctl_conf "
        "error: Unable to contact slurm controller (connect failure)), and sbatch refuses an "
        "array past it\n") in err
    # No SLURM here (a PATH of an empty folder: CI machines have SLURM in /usr/bin): the
    # issue's --nodes 100000 is said against what is known.
    (tmp_path / "no-slurm").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm"))
    code, out, err = invoke(*common, "--nodes", "100000")
    assert code == 0 and "#SBATCH --array=0-99999\n" in out
    assert err == ("warning: --nodes 100000: an array of 100000 tasks, past SLURM's default "
                   "MaxArraySize of 1001; this cluster's was not read here (SLURM is not "
                   "installed here: no scontrol), and sbatch refuses an array past it\n")
    assert "\n# 100000 tasks, one a machine: the machines of the pool were not counted here " \
           "(SLURM is not installed here: no sinfo); past that count, some are measured " \
           "more than once\n" in out
    code, out, err = invoke(*common, "--nodes", "4000002")
    assert code == 2 and "past the most SLURM takes in one (4000001" in err
    # A node list is not expanded past what SLURM expands (nor held in memory).
    code, out, err = invoke(*common, "--nodelist", "n[0-99999999]")
    assert code == 2 and err == ("error: node list 'n[0-99999999]': more than 65536 "
                                 "machines, the most SLURM expands in one range\n")


def test_a_results_path_that_is_a_file_is_refused_by_the_dry_run_too(tmp_path, stubs):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    suite = str(hostile_suite(tmp_path, "tiny"))
    for given in (afile, afile / "sub"):
        for dry_run in (["--dry-run"], []):
            r = CliRunner().invoke(main, ["fleet", "submit", suite, "--nodes", "1",
                                          "--results", str(given), "--local-results",
                                          *dry_run])
            assert r.exit_code == 2, r.output
            assert r.stderr == (f"error: --results {given}: {afile} is a file, not a folder: "
                                "give a folder (made where it is missing)\n")
    assert afile.read_text() == "mine" and calls(stubs, "sbatch") == []
