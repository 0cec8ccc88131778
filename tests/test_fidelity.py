"""Kernels that report what they measured: the read kernel's accumulators live in
registers, generators and flushes are read back, the distribution's ticks are scaled by
the clock that took them, and the chase records its locality window."""
import os
import re
import shutil
import subprocess
from dataclasses import replace

import numpy as np
import pytest

from cxlbench import _native, native
from cxlbench.benchmarks import chase, flush, loaded_latency
from cxlbench.errors import CheckError
from cxlbench.memory import Buffer

from .conftest import cxlbench, last_json

TWO_CPUS = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                              reason="loaded latency needs 2 CPUs")


def defaults(bench, **over):
    return {**{name: opt.default for name, opt in bench.OPTIONS.items()}, **over}


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump not installed (binutils)")
@pytest.mark.parametrize("isa", ["S", "A2", "A5"])
def test_read_kernel_keeps_its_sums_in_registers(isa):
    """A store inside cxb_read_* means the accumulators were spilled: a load and a store
    around every add, which halved the kernel in L1 (31 against 73 GB/s)."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", _native.__file__],
                         capture_output=True, text=True, check=True).stdout
    body = re.search(rf"<cxb_read_{isa}>:\n(.*?)\n\n", out, re.S)
    if body is None:
        pytest.skip(f"cxb_read_{isa} is not in this build (not x86-64?)")
    code = body.group(1)
    assert re.search(r"\b(v?paddq|add)\b", code)               # the kernel is there
    spills = [line for line in code.splitlines()
              if re.search(r"\bv?mov\w*\s+%[xyz]mm\d+,\s*-?(0x[0-9a-f]+)?\(", line)
              or re.search(r"\bmov\s+%r\w+,\s*-?(0x[0-9a-f]+)?\(%r[sb]p\)", line)]
    assert not spills, "\n".join(spills)


@TWO_CPUS
@pytest.mark.parametrize("mix", ["read", "rw_2_1", "write_nt"])
def test_loaded_latency_checks_its_generators(mix):
    m = loaded_latency.run(defaults(loaded_latency, size=1 << 20, load_size=1 << 20,
                                    repeat=2, warmup=0, loads=20000, delay=0, mix=mix))
    assert m.status == "ok", m.error


@TWO_CPUS
def test_generator_check_catches_a_wrong_sum_and_a_missing_store():
    cpus = sorted(os.sched_getaffinity(0))[:2]
    load = Buffer(1 << 20, mem="local", page="4k", cpus=cpus[1:])
    load.alloc.fill_index(cpus[1:])
    check = loaded_latency.LoadCheck(load, 1 << 20, 1, "rw_1_1")
    ring = native.Allocation(1 << 20, "4k", "local")
    order = native.chase_build(ring, ring.size, 0, 4096, 1)
    start = ring.addr + int(order[0]) * 64
    r = native.loaded_latency(start, 50000, load.addr, 1 << 20, 1, "rw_1_1", 0, cpus, 5 << 32)
    assert r.batches[0] > 1
    check.check(r, 5 << 32)                                  # what the C side did: passes
    with pytest.raises(CheckError, match="read sum"):
        check.check(replace(r, sums=[r.sums[0] + 1]), 5 << 32)
    with pytest.raises(CheckError, match="written lines"):
        check.check(r, 6 << 32)                              # a store that did not happen


@pytest.mark.parametrize("kind,state,write", [("nt", "clean", False),
                                              ("clflush", "dirty", False),
                                              ("clflush", "clean", False),
                                              ("clflush", "dirty", True)])
def test_flush_lines_are_read_back(kind, state, write):
    if not native.flush_supported(kind):
        pytest.skip(f"{kind} is not supported by this CPU")
    m = flush.run(defaults(flush, flush=kind, state=state, write=write, size=64 << 10,
                           repeat=2, warmup=0))
    assert m.status == "ok", m.error


def test_flush_check_fails_on_lines_that_were_not_stored():
    lines = np.arange(16, dtype=np.uint64)
    words = lines[:, None] * np.uint64(8) + np.arange(8, dtype=np.uint64)   # index fill
    flush.check_lines(words.copy(), "clflush", "clean", False, 7)
    with pytest.raises(CheckError, match="does not hold"):
        flush.check_lines(words.copy(), "nt", "clean", False, 7 << 32)
    dirty = words.copy()
    dirty[:, 0] = np.uint64(7 << 32) + lines
    flush.check_lines(dirty, "clwb", "dirty", False, 7 << 32)
    dirty[3, 0] += np.uint64(1)
    with pytest.raises(CheckError, match="line 3"):
        flush.check_lines(dirty, "clwb", "dirty", False, 7 << 32)


@pytest.mark.parametrize("hide_tsc", ["0", "1"])
def test_distribution_uses_one_clock_decision(hide_tsc, tmp_path):
    """With the TSC hidden (as on a CPU without the invariant bit) the C kernel and the
    Python scale fall back to the monotonic clock together; the case's own check that
    the batches fit in the kernel's span passes either way."""
    r = cxlbench("run", "--bench", "chase", "--set", "size=1M", "--set", "repeat=2",
                 "--set", "loads=100000", "--set", "dist=true", "--json", "--results-dir",
                 str(tmp_path), env={"CXLBENCH_NO_TSC": hide_tsc})
    assert r.returncode == 0, r.stderr
    assert {x["metric"] for x in last_json(r.stdout)} >= {"p50", "p90"}
    run = next(tmp_path.glob("*/*/cases.jsonl")).read_text()
    want = "CLOCK_MONOTONIC_RAW" if hide_tsc == "1" else \
        ("rdtscp" if native.timer_calibrate(5)["tsc_available"] else "CLOCK_MONOTONIC_RAW")
    assert f'"timer": "{want}"' in run


def test_distribution_in_the_wrong_unit_fails(monkeypatch):
    """Python scaling rdtscp ticks as nanoseconds (the old split decision) is caught."""
    real = native.timer_calibrate(5)
    if not real["tsc_available"]:
        pytest.skip("no invariant TSC here: the kernel already uses the monotonic clock")
    monkeypatch.setattr(native, "timer_calibrate",
                        lambda ms: {**real, "tsc_available": False})
    with pytest.raises(CheckError, match="not in the unit"):
        chase.run(defaults(chase, size=1 << 20, repeat=1, warmup=0, loads=100000, dist=True))


def test_chase_records_its_window():
    small = dict(size=4 << 20, repeat=1, warmup=0, loads=20000)
    assert chase.run(defaults(chase, **small)).info["window"] == 256 << 10
    assert chase.run(defaults(chase, **small, window=0)).info["window"] == 4 << 20
    # the TLB knob's rounds run over every page of the buffer
    assert chase.run(defaults(chase, **small, lines_per_page=4)).info["window"] == 4 << 20
