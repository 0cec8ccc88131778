"""Every `cxlbench run` command README shows is taken as written: its options parse and its
cases expand (`--dry-run`), so a renamed option or a value README spells another way
fails here instead of on a reader's machine. A command may be refused only for what this
machine lacks (a second node, README's example folder), and says so."""
import re
import shlex
from pathlib import Path

import pytest

from cxlbench.options import to_int

from .conftest import REPO, cxlbench

# What README's examples assume of a lab machine that this one may not have.
MACHINE_REASONS = (r"node \d+ does not exist", r"path=/mnt/\S+ is not a directory")


def readme_runs() -> list[str]:
    """The `cxlbench run` lines of README's code blocks, continuations joined and
    comments cut; those with placeholders (<run>, [SUITE]) left out."""
    text = (REPO / "README.md").read_text()
    out = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            command = re.split(r"\s+#", line.strip())[0].strip()
            if command.startswith("cxlbench run") and not re.search(r"[<\[]", command):
                out.append(command)
    return out


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
