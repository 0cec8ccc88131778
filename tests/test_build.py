"""The C core builds for a non-x86 target with only its scalar variants."""
import shutil
import subprocess
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parent.parent / "native"
CROSS = "aarch64-linux-gnu-gcc"


@pytest.mark.skipif(shutil.which(CROSS) is None,
                    reason=f"{CROSS} not installed (apt-get install gcc-aarch64-linux-gnu)")
@pytest.mark.parametrize("source", sorted(p.name for p in NATIVE.glob("*.c")))
def test_compiles_for_aarch64_without_warnings(source, tmp_path):
    r = subprocess.run([CROSS, "-O2", "-std=gnu11", "-Wall", "-Werror", "-fPIC", "-c",
                        str(NATIVE / source), "-o", str(tmp_path / "x.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_header_is_plain_enough_for_cdef():
    """build.py drops preprocessor lines; what is left must hold no macros or includes."""
    text = "\n".join(line for line in (NATIVE / "cxlbench.h").read_text().splitlines()
                     if not line.lstrip().startswith("#"))
    assert "__attribute__" not in text and "#" not in text


def test_every_package_is_installed():
    """pyproject's package list names every folder of Python under cxlbench/: a plain
    `pip install .` (not editable) installs only what it names, and a missing one breaks
    `import cxlbench` there alone."""
    from cxlbench.suite import tomllib
    root = NATIVE.parent
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(root).parts)
             for p in (root / "cxlbench").rglob("__init__.py")}
    assert found - listed == set()
