"""The benchmark registry: one Benchmark record per measurement family, made from each
module of this package that has a TITLE (or from the classes its BENCHMARKS names), so a new
benchmark is its own module and nothing else lists it. `cxlbench list`, suites, precheck,
the worker and the report all take a benchmark from here."""
from __future__ import annotations

import difflib
import importlib
import os
import pkgutil
import re
from dataclasses import dataclass
from typing import Callable

from ..errors import UserError
from ..options import Option, buffer_option, from_core, split_buffer_option
from .. import gpu
from ..topology import Topology, no_movable_command
from . import common

TEST_ENV = "CXLBENCH_TEST_KERNELS"


@dataclass(frozen=True)
class Benchmark:
    name: str
    description: str
    options: dict                   # name -> Option
    # Every buffer a case may place, by name (a callable: read from the kernel table at
    # first use); where the benchmark takes mem, mem.<buffer> and page.<buffer> place one.
    buffers: tuple[str, ...] | Callable[[], tuple[str, ...]]
    title: str                      # the report's heading for the family
    measure: Callable               # (params) -> Measurement, in the case's worker
    validate: Callable | None = None  # (params, topology) -> note | None; UserError: bad input
    skip: Callable | None = None    # (params, topology) -> why this machine cannot, or None
    test_only: bool = False
    buffers_of: Callable | None = None  # (params) -> the buffers this case places (None: all)
    unused: Callable | None = None  # (params) -> {option: why}: options this case ignores
    estimate: Callable | None = None  # (params) -> seconds of the case's own work

    def buffer_names(self) -> tuple[str, ...] | None:
        """Every buffer a case may place; None where the names come from the compiled core
        and it is not built (mem.<buffer> is then checked where the suite runs)."""
        return from_core(self.buffers)

    def option(self, key: str) -> Option:
        """The option `key` names: one of the table's, or a buffer's own mem.<buffer> or
        page.<buffer>. UserError saying what exists for any other."""
        if key in self.options:
            return self.options[key]
        split = split_buffer_option(key)
        if split is None:
            near = [n for n in self.options if n.endswith(f".{key}")] or \
                difflib.get_close_matches(key, self.options, n=3)
            hint = f"did you mean {' or '.join(near)}? " if near else ""
            raise UserError(f"option {key!r} is not an option of {self.name} ({hint}options: "
                            f"{', '.join(self.options)})")
        base, buffer = split
        if "mem" not in self.options:
            raise UserError(f"option {key!r}: {self.name} places its buffers itself (it takes "
                            f"no mem, so no {base}.<buffer>)")
        names = self.buffer_names()
        if names is not None and buffer not in names:
            raise UserError(f"option {key!r}: {self.name} has no buffer {buffer!r} (its "
                            f"buffers: {', '.join(names)}; {base}.<buffer> places one)")
        return buffer_option(self.options[base], key)

    def takes(self, key: str) -> bool:
        try:
            self.option(key)
            return True
        except UserError:
            return False

    def ignored(self, params: dict) -> dict[str, str]:
        """The options this case does not use (a preset's own tables, another op's knobs),
        each with why: set away from their defaults they would only make a second case
        measure the same thing, and legends and captions leave them out."""
        return self.unused(params) if self.unused else {}

    def set_but_ignored(self, params: dict) -> dict[str, tuple]:
        """{name: (value, why)} for the options set away from their defaults that this
        case would not use."""
        return {name: (params[name], reason) for name, reason in self.ignored(params).items()
                if name in params and params[name] != self.options[name].default}

    def case_buffers(self, params: dict) -> tuple[str, ...] | None:
        """The buffers this case places (bandwidth's: its kernel's streams)."""
        return self.buffers_of(params) if self.buffers_of else self.buffer_names()

    def run(self, params: dict):
        """The case's Measurement; one this machine cannot run is 'unsupported', with why."""
        if self.skip is not None:
            reason = self.skip(params, Topology.read(probe_gpus=False))
            if reason:
                return common.Measurement(self.name, "", [], {}, status="unsupported",
                                          error=reason)
        return self.measure(params)


def _record(m) -> Benchmark:
    """A module's (or class's) NAME, DESCRIPTION, OPTIONS, BUFFERS, TITLE, run, and the
    validate, skip, buffers_of, unused and estimate it may have."""
    return Benchmark(m.NAME, m.DESCRIPTION, m.OPTIONS, m.BUFFERS, m.TITLE, m.run,
                     getattr(m, "validate", None), getattr(m, "skip", None),
                     getattr(m, "TEST_ONLY", False), getattr(m, "buffers_of", None),
                     getattr(m, "unused", None), getattr(m, "estimate", None))


def _discover() -> dict[str, Benchmark]:
    """Every record, listed the CPU's families first, then the GPU's, then test-only."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for m in getattr(module, "BENCHMARKS", (module,)):
            if hasattr(m, "run") and not hasattr(m, "TITLE"):
                raise ImportError(f"{module.__name__}: a benchmark needs a TITLE (its "
                                  "report heading) to be registered")
            if hasattr(m, "TITLE"):
                found.append(_record(m))
    found.sort(key=lambda b: (b.test_only, b.name.startswith("gpu_"), b.name))
    return {b.name: b for b in found}


_ALL = _discover()


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
    notes = _ignored_settings(cases)
    with common.cpus_of(topology):
        for case in cases:
            bench = get(case.bench)
            reason = bench.skip(case.params, topology) if bench.skip is not None else None
            if reason:
                notes.append(f"{case.id}: skipped: {reason}")
                continue
            try:
                note = (bench.validate(case.params, topology)
                        if bench.validate is not None else None)
            except UserError as e:
                raise type(e)(f"{case.id}: {e}") from None
            if note:
                notes.append(f"{case.id}: {note}")
            # mem.c over kernels copy and triad, say: it changes nothing for the copy
            mine = bench.case_buffers(case.params) or ()
            unused = [k for k in case.params
                      if (split := split_buffer_option(k)) and split[1] not in mine]
            if unused:
                notes.append(f"{case.id}: {', '.join(unused)} ignored: the case places only "
                             f"{', '.join(mine)}")
    return notes + _pinning_note(notes, topology)


def _pinning_note(notes: list[str], topology) -> list[str]:
    """Once, where GPU cases skip because a node's memory is all movable (CXL memory as
    dax/kmem onlines it): the one command that makes those nodes pinnable."""
    nodes = sorted({int(n) for note in notes
                    for found in re.findall(rf"node ([\d, ]+) {gpu.MOVABLE_ONLY}", note)
                    for n in found.split(", ")})
    if not nodes:
        return []
    return [f"GPU cases that pin host memory skip on node {', '.join(map(str, nodes))}, "
            f"whose memory is all movable (pageable copies from it are not affected). To "
            f"make it pinnable, as root: {no_movable_command(topology, nodes)}"]


def _ignored_settings(cases) -> list[str]:
    """An option a job sets that none of its cases would use is a mistake (a --set the
    benchmark ignores, a preset's own tables): UserError, one line grouped by why. One
    that only some cases ignore is a sweep across them (dist=[uniform, zipf] beside
    alpha): a note, and the progress lines and legends of those cases leave it out."""
    by_job: dict[str, list] = {}
    for case in cases:
        by_job.setdefault(case.job, []).append(case)
    notes = []
    for job, members in by_job.items():
        bench = get(members[0].bench)
        each = [bench.set_but_ignored(c.params) for c in members]
        everywhere = [n for n in each[0] if all(n in e for e in each)]
        if everywhere:
            why: dict[str, list[str]] = {}
            for n in everywhere:
                value, reason = each[0][n]
                why.setdefault(reason, []).append(f"{n}={value}")
            raise UserError(f"{members[0].id}: {bench.name}: " + "; ".join(
                f"{', '.join(names)} would not be used: {reason}"
                for reason, names in why.items()))
        for n in dict.fromkeys(n for e in each for n in e):
            hits = [e[n][1] for e in each if n in e]
            notes.append(f"{job}: {n} is not used by {len(hits)} of its {len(members)} cases "
                         f"({hits[0]})")
    return notes
