"""The benchmarks: one module per measurement family, each with NAME, DESCRIPTION,
OPTIONS (from the option table) and run(params) -> Measurement, called in a worker."""
from __future__ import annotations

import os

from ..errors import UserError
from . import (bandwidth, chase, common, flush, interleave_sweep, loaded_latency, matrix,
               migrate, migrate_touch, random_bw, selftest)
from .coherence import Atomics, PingPong

_ALL = {m.NAME: m for m in (chase, bandwidth, random_bw, loaded_latency, matrix,
                            interleave_sweep, PingPong, Atomics, flush, migrate,
                            migrate_touch, selftest)}
TEST_ENV = "CXLBENCH_TEST_KERNELS"


def test_kernels_enabled() -> bool:
    return os.environ.get(TEST_ENV) == "1"


def available() -> dict:
    """Benchmarks a user may run; test-only ones appear under CXLBENCH_TEST_KERNELS=1."""
    return {name: m for name, m in _ALL.items()
            if not getattr(m, "TEST_ONLY", False) or test_kernels_enabled()}


def get(name: str):
    bench = available().get(name)
    if bench is None:
        raise UserError(f"unknown benchmark {name!r}: choose from {', '.join(available())}")
    return bench


def precheck(cases, topology) -> list[str]:
    """Every case's CPUs, ISA and placement, checked against `topology` (its CPUs too)
    before anything runs: bad input stops the run with one clear message instead of
    failing case by case. Returns a note for each case a check clipped to what fits."""
    notes = []
    with common.cpus_of(topology):
        for case in cases:
            check = getattr(get(case.bench), "check", None)
            try:
                note = check(case.params, topology) if check is not None else None
            except UserError as e:
                raise type(e)(f"{case.id}: {e}") from None
            if note:
                notes.append(f"{case.id}: {note}")
    return notes
