"""cffi builder (out-of-line API mode): compiles native/*.c into cxlbench._native.

The cdef is cxlbench.h itself, minus its preprocessor lines, so the header stays the one
description of the C API."""
import os
import pathlib
import sysconfig

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent
HEADER = HERE / "cxlbench.h"
SOURCES = sorted(p for p in HERE.glob("*.c"))


# -O2 without -march: the per-ISA variants carry their own target attributes, so one
# build runs on any CPU of the architecture. No errno from sqrt and the like (nothing reads
# it), so loops that take a square root vectorise.
CFLAGS = ["-O2", "-std=gnu11", "-Wall", "-Wno-unused-function", "-fno-math-errno"]


def _effective_flags() -> str:
    """The flags the compiler sees, in its order (the last -O wins): Python's own CFLAGS,
    the environment's CFLAGS and CPPFLAGS, CCSHARED (as setuptools builds the command),
    then ours. Recorded in run.json through cxb_build_info."""
    parts = [sysconfig.get_config_var("CFLAGS") or "", os.environ.get("CFLAGS", ""),
             os.environ.get("CPPFLAGS", ""), sysconfig.get_config_var("CCSHARED") or "",
             " ".join(CFLAGS)]
    return " ".join(" ".join(parts).split())


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _cdef_text() -> str:
    return "\n".join(line for line in HEADER.read_text().splitlines()
                     if not line.lstrip().startswith("#"))


ffibuilder = FFI()
ffibuilder.cdef(_cdef_text())
ffibuilder.set_source(
    "cxlbench._native",
    '#include "cxlbench.h"',
    sources=[str(p.relative_to(HERE.parent)) for p in SOURCES],
    include_dirs=[str(HERE.relative_to(HERE.parent))],
    extra_compile_args=CFLAGS,
    define_macros=[("CXB_CFLAGS", _c_string(_effective_flags()))],
    libraries=["pthread", "m"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
