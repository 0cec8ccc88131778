"""Building the GPU library (native/gpu/*.cu) with nvcc: at install time where nvcc is
(setup.py loads this file by path, before the package's dependencies are installed, so it
imports nothing of cxlbench's), else on first use into a cache (cxlbench/gpu.py). A built
library is named by a hash of its sources and flags, then one of the nvcc that built it:
finding one for these sources needs no nvcc (lab GPU hosts often have a driver and no
toolkit), and a reinstall with another nvcc replaces it rather than finding it built."""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
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


def tool(name: str) -> str | None:
    """A CUDA toolkit program (nvcc, cuobjdump): on PATH, else in /usr/local/cuda/bin."""
    found = shutil.which(name)
    if found:
        return found
    p = Path("/usr/local/cuda/bin") / name
    return str(p) if p.exists() else None


def nvcc() -> str | None:
    return tool("nvcc")


def sources_hash(sources: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(sources.glob("*")):
        if p.suffix in (".cu", ".h"):
            h.update(p.name.encode() + b"\0" + p.read_bytes())
    h.update(" ".join(NVCC_FLAGS).encode())
    return h.hexdigest()[:16]


def library_name(sources: Path, compiler: str) -> str:
    """The file name of the library this nvcc builds from these sources with these flags."""
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                                 timeout=60).stdout.strip().splitlines()[-1:]
    except (OSError, subprocess.SubprocessError):
        version = []
    tag = hashlib.sha256((version[0] if version else compiler).encode()).hexdigest()[:8]
    return f"{PREFIX}{sources_hash(sources)}-{tag}.so"


def _plain(path: Path) -> bool:
    """A plain file at path itself: a link left at a library's name is not one we built,
    and is never loaded (dlopen would run whatever it points at)."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def find(sources: Path, folders) -> Path | None:
    """A library built from these sources, by any nvcc: the first folder's that has one,
    its newest. No nvcc is asked; a folder that is a link (not made by cxlbench) is not
    looked in."""
    for folder in folders:
        if Path(folder).is_symlink():
            continue
        found = sorted((p for p in Path(folder).glob(f"{PREFIX}{sources_hash(sources)}-*.so")
                        if _plain(p)), key=lambda p: p.lstat().st_mtime, reverse=True)
        if found:
            return found[0]
    return None


def build(compiler: str, sources: Path, folder: Path) -> Path:
    """The library in `folder`, built now unless already there. nvcc writes into a folder
    made afresh for it (mkdtemp: nothing can stand at its output's name), and the library
    is renamed into place: a build interrupted or run twice at once leaves no half file,
    and a link left at the library's name is replaced, never written through or loaded."""
    out = folder / library_name(sources, compiler)
    if _plain(out):
        return out
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.mkdtemp(dir=folder, prefix=".build-")
    except OSError as e:
        raise BuildError(f"{folder}, which cannot be written ({e.strerror or e})",
                         unwritable=True) from None
    made = os.path.join(tmp, out.name)
    try:
        r = subprocess.run([compiler, *NVCC_FLAGS, "-I", str(sources), "-o", made,
                            *sorted(str(p) for p in sources.glob("*.cu"))],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildError(f"nvcc could not build the GPU library: {r.stderr.strip()[-2000:]}")
        os.replace(made, out)
    except OSError as e:        # nvcc would not start; the disk filled at the rename
        raise BuildError(f"nvcc could not build the GPU library: {e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
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
            try:
                old.unlink()
            except OSError:
                pass
    say(f"cxlbench: GPU library built: {out}")
    return out
