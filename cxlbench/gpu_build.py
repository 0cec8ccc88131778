"""Building the GPU library (native/gpu/*.cu) with nvcc: at install time where nvcc is
(setup.py loads this file by path, before the package's dependencies are installed, so it
imports nothing of cxlbench's), else on first use into a cache (cxlbench/gpu.py). A built
library is named by a hash of its sources and the flags alone, so finding one needs no
nvcc: lab GPU hosts often have a driver and no toolkit."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

# SASS for A100 (sm_80) and H100/H200 (sm_90), and PTX for what comes after; the CUDA
# runtime linked in statically, so only the driver (libcuda) is needed where it runs.
NVCC_FLAGS = ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-cudart", "static",
              "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
              "-gencode", "arch=compute_90,code=compute_90"]
HEADER = "cxb_gpu.h"
PREFIX = "libcxbgpu-"
SKIP_ENV = "CXLBENCH_NO_GPU_BUILD"      # set: pip install does not build it


class BuildError(Exception):
    """nvcc failed, or the folder cannot be written (unwritable): the message says which."""

    def __init__(self, message: str, unwritable: bool = False):
        super().__init__(message)
        self.unwritable = unwritable


def nvcc() -> str | None:
    return shutil.which("nvcc") or next(
        (str(p) for p in (Path("/usr/local/cuda/bin/nvcc"),) if p.exists()), None)


def library_name(sources: Path) -> str:
    """The file name of the library built from these sources with these flags."""
    h = hashlib.sha256()
    for p in sorted(sources.glob("*")):
        if p.suffix in (".cu", ".h"):
            h.update(p.name.encode() + b"\0" + p.read_bytes())
    h.update(" ".join(NVCC_FLAGS).encode())
    return f"{PREFIX}{h.hexdigest()[:16]}.so"


def build(compiler: str, sources: Path, folder: Path) -> Path:
    """The library in `folder`, built now unless already there (written under a temporary
    name and renamed, so a build that is interrupted or runs twice at once leaves no half
    file)."""
    out = folder / library_name(sources)
    if out.exists():
        return out
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".so")
    except OSError as e:
        raise BuildError(f"{folder}, which cannot be written ({e.strerror or e})",
                         unwritable=True) from None
    os.close(fd)
    try:
        r = subprocess.run([compiler, *NVCC_FLAGS, "-I", str(sources), "-o", tmp,
                            *sorted(str(p) for p in sources.glob("*.cu"))],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildError(f"nvcc could not build the GPU library: {r.stderr.strip()[-2000:]}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def at_install(sources: Path, package: Path, say=print) -> Path | None:
    """pip install's step: the library built into the package folder where nvcc is, and
    older builds there removed. Never fails the install: where it cannot build, the library
    is built on first use instead, and `say` tells why."""
    if os.environ.get(SKIP_ENV):
        say(f"cxlbench: GPU library not built ({SKIP_ENV} is set)")
        return None
    compiler = nvcc()
    if compiler is None:
        say("cxlbench: GPU library not built (no nvcc): GPU benchmarks will need nvcc on "
            "first use, or a reinstall where nvcc is")
        return None
    try:
        out = build(compiler, sources, package)
    except BuildError as e:
        say(f"cxlbench: GPU library not built: {e}")
        return None
    for old in package.glob(f"{PREFIX}*.so"):
        if old != out:
            old.unlink()
    say(f"cxlbench: GPU library built: {out}")
    return out
