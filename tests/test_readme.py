"""Every `cxlbench run` command README shows is taken as written: its options parse and its
cases expand (`--dry-run`), so a renamed option or a value README spells another way
fails here instead of on a reader's machine. A command may be refused only for what this
machine lacks (a second node, README's example folder), and says so."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cxlbench.options import to_int

from . import manual
from .conftest import REPO, cxlbench

# What README's examples assume of a lab machine that this one may not have.
MACHINE_REASONS = (r"node \d+ does not exist", r"path=/mnt/\S+ is not a directory")


def readme_runs() -> list[str]:
    """The `cxlbench run` lines of the code blocks of README and the manual, continuations
    joined and comments cut, and the `run` an emulated guest is given (`cxlbench emulate
    ... -- run ...`: expanded here as the guest would); those with placeholders (<run>,
    [SUITE]) left out."""
    out = []
    for line in manual.code_lines():
        command = re.sub(r"^cxlbench emulate .*? -- (run .*)", r"cxlbench \1", line)
        if command.startswith("cxlbench run") and not re.search(r"[<\[]", command):
            out.append(command)
    return list(dict.fromkeys(out))


def test_readme_shows_run_commands():
    assert len(readme_runs()) >= 10


@pytest.mark.parametrize("command", readme_runs())
def test_readme_run_command_expands(command, tmp_path):
    args = shlex.split(command)[1:]
    r = cxlbench(*args, "--dry-run", "--results-dir", str(tmp_path))
    if r.returncode == 2 and any(re.search(why, r.stderr) for why in MACHINE_REASONS):
        pytest.skip(f"needs what this machine lacks: {r.stderr.strip().splitlines()[-1]}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), "a dry run lists its cases"
    assert not list(Path(tmp_path).iterdir()), "a dry run writes nothing"


def test_counts_take_a_binary_suffix():
    """rows=4M as README writes it: 4 x 2^20, as sizes count; anything else is refused."""
    assert to_int("4M") == 4 << 20 and to_int("16K") == 16 << 10 and to_int("0x10") == 16
    for bad in ("4MB", "1.5", "four"):
        with pytest.raises(ValueError, match="is not an integer"):
            to_int(bad)


def test_ci_runs_readmes_test_command():
    """.ci/run installs and runs what README's second command says, nothing else."""
    line = next(x for x in (REPO / "README.md").read_text().splitlines()
                if "# the tests, all of them" in x)
    install, run = (c.strip() for c in line.split("#")[0].split("&&"))
    ci = (REPO / ".ci" / "run").read_text()
    assert install.replace("pip install", "pip install -q") in ci, install
    assert re.search(rf"^{re.escape(run)} \|\| rc=\$\?$", ci, re.M), run


@pytest.mark.slow
def test_tests_run_runs_each_phase_and_prints_its_time():
    """tests/run as README shows it, narrowed to two files and by -k to one serial and one
    parallel test: each phase runs its own (the serial one alone, the other under xdist),
    the beside and guests' phases select none and pass, the manual is built (docs/_build/html),
    and the phases' times close its output."""
    r = subprocess.run([str(REPO / "tests" / "run"), "-q", "-p", "no:cacheprovider",
                        "tests/test_estimate.py", "tests/test_readme.py", "-k",
                        "test_durations_read_as_people_say_them or "
                        "test_readme_shows_run_commands"],
                       cwd=REPO, capture_output=True, text=True, timeout=600,
                       env={**os.environ,
                            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    phases = re.split(r"^== ", r.stdout, flags=re.M)
    serial = next(p for p in phases if p.startswith("host, serial"))
    parallel = next(p for p in phases if p.startswith("host, parallel"))
    assert "1 passed" in serial and "-n" not in serial.splitlines()[0]
    assert "1 passed" in parallel and "-n " in parallel.splitlines()[0]
    times = r.stdout[r.stdout.index("== phase times"):]
    assert "== host, beside (beside host, parallel): pytest -m beside and not qemu" \
        in r.stdout                                     # none selected here: it passes
    for name in ("host, serial", "host, beside", "host, parallel", "guests", "docs"):
        assert re.search(rf"{name}\s+\d+ s  exit 0", times), times
    assert re.search(r"tests in all\s+\d+ s", times)
    assert (REPO / "docs" / "_build" / "html" / "index.html").is_file()


def test_tests_run_fast_is_the_host_phases_without_slow_tests():
    """README's local loop as it writes it: both host phases select `not slow` and no
    guest phase runs (here with -q and a -k before --fast: it may come anywhere)."""
    line = next(x for x in (REPO / "README.md").read_text().splitlines()
                if "# the local loop" in x)
    assert line.split("#")[0].split() == ["tests/run", "--fast"], line
    r = subprocess.run([str(REPO / "tests" / "run"), "-q", "-p", "no:cacheprovider",
                        "tests/test_readme.py", "--fast", "-k",
                        "test_readme_shows_run_commands"],
                       cwd=REPO, capture_output=True, text=True, timeout=600,
                       env={**os.environ,
                            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "== host, serial: pytest -m serial and not slow" in r.stdout
    assert "== host, parallel: pytest -m not serial and not beside and not slow -n" \
        in r.stdout
    assert "1 passed" in r.stdout and "guests" not in r.stdout
