"""The benchmark registry: one Benchmark record per measurement family. `cxlbench list`,
suites, precheck, the worker and the report all take a benchmark from here."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from ..errors import UserError
from ..topology import Topology
from . import (bandwidth, chase, common, flush, interleave_sweep, loaded_latency, matrix,
               migrate, migrate_touch, random_bw, selftest)
from .coherence import Atomics, PingPong

TEST_ENV = "CXLBENCH_TEST_KERNELS"


@dataclass(frozen=True)
class Benchmark:
    name: str
    description: str
    options: dict                   # name -> Option
    buffers: tuple[str, ...]        # the buffers a case places, the most any case does
    title: str                      # the report's heading for the family
    measure: Callable               # (params) -> Measurement, in the case's worker
    check: Callable | None = None   # (params, topology) -> note | None; UserError: bad input
    skip: Callable | None = None    # (params, topology) -> why this machine cannot, or None
    figures: str | None = None      # its figure function in report/figures.py (None: generic)
    test_only: bool = False

    # The module-style names suites, runner and cli read.
    NAME = property(lambda self: self.name)
    DESCRIPTION = property(lambda self: self.description)
    OPTIONS = property(lambda self: self.options)

    def run(self, params: dict):
        """The case's Measurement; one this machine cannot run is 'unsupported', with why."""
        if self.skip is not None:
            reason = self.skip(params, Topology.read(probe_gpus=False))
            if reason:
                return common.Measurement(self.name, "", [], {}, status="unsupported",
                                          error=reason)
        return self.measure(params)


def _record(m, title: str, buffers: tuple[str, ...], skip=None) -> Benchmark:
    return Benchmark(m.NAME, m.DESCRIPTION, m.OPTIONS, buffers, title, m.run,
                     getattr(m, "check", None), skip,
                     None if getattr(m, "TEST_ONLY", False) else m.NAME,
                     getattr(m, "TEST_ONLY", False))


_ALL = {b.name: b for b in (
    _record(chase, "Idle latency", ("chain",)),
    # bandwidth: one buffer per kernel stream (read 1, copy 2, triad 3); the sweep likewise.
    _record(bandwidth, "Bandwidth", ("a", "b", "c")),
    _record(random_bw, "Random-access bandwidth", ("data",)),
    _record(loaded_latency, "Loaded latency", ("chain", "load")),
    _record(matrix, "Node matrices", ("data",)),
    _record(interleave_sweep, "Weighted interleave", ("a", "b", "c")),
    _record(PingPong, "Cache-line transfer (ping-pong)", ("line",)),
    _record(Atomics, "Atomics and sharing", ("lines",)),
    _record(flush, "Flush and persistence", ("lines",)),
    _record(migrate, "Page migration", ("pages",)),
    _record(migrate_touch, "Touches during page migration", ("pages",)),
    _record(selftest, "selftest", ()),
)}


def test_kernels_enabled() -> bool:
    return os.environ.get(TEST_ENV) == "1"


def family(name: str) -> Benchmark | None:
    """The record of a family in results (test-only ones included), None if unknown."""
    return _ALL.get(name)


def available() -> dict[str, Benchmark]:
    """Benchmarks a user may run; test-only ones appear under CXLBENCH_TEST_KERNELS=1."""
    return {name: b for name, b in _ALL.items() if not b.test_only or test_kernels_enabled()}


def get(name: str) -> Benchmark:
    bench = available().get(name)
    if bench is None:
        raise UserError(f"unknown benchmark {name!r}: choose from {', '.join(available())}")
    return bench


def precheck(cases, topology) -> list[str]:
    """Every case's CPUs, ISA and placement, checked against `topology` (its CPUs too)
    before anything runs: bad input stops the run with one clear message instead of
    failing case by case. Returns a note for each case a check clipped to what fits, and
    for each this machine cannot run (it runs as 'unsupported', with the reason)."""
    notes = []
    with common.cpus_of(topology):
        for case in cases:
            bench = get(case.bench)
            reason = bench.skip(case.params, topology) if bench.skip is not None else None
            if reason:
                notes.append(f"{case.id}: skipped: {reason}")
                continue
            try:
                note = bench.check(case.params, topology) if bench.check is not None else None
            except UserError as e:
                raise type(e)(f"{case.id}: {e}") from None
            if note:
                notes.append(f"{case.id}: {note}")
    return notes
