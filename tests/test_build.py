"""The C core builds for a non-x86 target with only its scalar variants."""
import re
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


@pytest.mark.slow
def test_a_plain_install_runs_and_finds_the_gpu_sources(tmp_path):
    """`pip install .` (a wheel, not editable): the commands run from outside the
    checkout, every module imports, and the GPU library's sources are the installed ones."""
    import os
    import sys
    root = NATIVE.parent
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                        str(tmp_path / "w"), str(root)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = (tmp_path / "w").glob("cxlbench-*.whl")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--target", str(tmp_path / "t"), str(wheel)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "t")}
    for args in (["-m", "cxlbench", "--help"], ["-m", "cxlbench", "list"],
                 ["-c", "import cxlbench.cli, cxlbench.tiering.engine; from cxlbench import "
                        "gpu; print(gpu.source_dir())"]):
        r = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                           cwd=tmp_path, env=env)
        assert r.returncode == 0, (args, r.stderr[-3000:])
    assert r.stdout.strip() == str(tmp_path / "t" / "cxlbench" / "gpu_src")
    # Where nvcc is, pip built the GPU library into the wheel; it is found with no nvcc.
    from cxlbench import gpu
    if gpu.nvcc() is None:
        return
    r = subprocess.run([sys.executable, "-c", "from cxlbench import gpu, gpu_build\n"
                        "gpu_build.nvcc = gpu.nvcc = None\nprint(gpu.built())"],
                       capture_output=True, text=True, cwd=tmp_path,
                       env={**env, "CXLBENCH_CACHE": str(tmp_path / "empty")})
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.fullmatch(re.escape(str(tmp_path / "t" / "cxlbench")) + r"/libcxbgpu-\w{16}-\w{8}\.so",
                        r.stdout.strip())
