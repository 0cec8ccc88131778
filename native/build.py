"""cffi builder (out-of-line API mode): compiles native/*.c into cxlbench._native.

The cdef is cxlbench.h itself, minus its preprocessor lines, so the header stays the one
description of the C API."""
import pathlib

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent
HEADER = HERE / "cxlbench.h"
SOURCES = sorted(p for p in HERE.glob("*.c"))


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
    # -O2 without -march: the per-ISA variants carry their own target attributes, so one
    # build runs on any CPU of the architecture.
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wno-unused-function"],
    libraries=["pthread"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
