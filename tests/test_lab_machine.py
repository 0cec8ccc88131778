"""Every shipped suite on a lab machine's shape (2 sockets x 96 cores x 2 threads, two
CPU-less CXL nodes): cases expand and pass their prechecks against that topology, with
sweeps that do not fit clipped and noted; and the C core's thread limits past 64."""
import os

import numpy as np
import pytest

from cxlbench import benchmarks, native, suite
from cxlbench.benchmarks import common
from cxlbench.benchmarks.coherence import ATOMIC_MODES, LINE_WORDS, Atomics
from cxlbench.errors import UserError


@pytest.fixture
def lab(topo):
    return topo("lab")


@pytest.mark.parametrize("name", suite.shipped_names())
def test_every_shipped_suite_passes_its_precheck(lab, name):
    cases = suite.expand_for(suite.load(name), lab)
    notes = benchmarks.precheck(cases, lab)
    # The GPU's cases skip, with the reason, where no GPU is (here, say).
    skipped = [f"{c.id}: skipped: {why}" for c in cases if c.bench.startswith("gpu_")
               and (why := benchmarks.get(c.bench).skip(c.params, lab))]
    assert [n for n in notes if "skipped" in n] == skipped
    notes = [n for n in notes if n not in skipped]
    clipped = [c for c in cases if c.bench == "atomics" and c.params["threads"] == "all"
               and c.params["mode"] == "false_sharing"]
    assert len(notes) == len(clipped)
    for case, note in zip(clipped, notes):
        assert note == (f"{case.id}: false sharing fits 8 threads in a 64-byte line: runs 8 "
                        f"of the 384 CPUs threads=all gives")


def test_full_suite_covers_the_lab_machine(lab):
    cases = suite.expand_for(suite.load("full"), lab)
    benchmarks.precheck(cases, lab)
    assert {str(c.params["mem"]) for c in cases if c.bench == "chase"} == {f"bind:{n}" for n in range(4)}
    assert {c.params["cpus"] for c in cases if c.bench == "pingpong"} == {"0-1", "0,96"}
    assert {c.params["initiator"] for c in cases if c.bench == "matrix"} == {0, 1}
    assert {(c.params["from"], c.params["to"]) for c in cases if c.bench == "migrate"} == {
        (a, b) for a in range(4) for b in range(4)}
    assert sum(c.bench == "atomics" and c.params["mode"] == "false_sharing" for c in cases) == 8


def test_checks_see_the_checked_machines_cpus(lab):
    params = {name: opt.default for name, opt in Atomics.OPTIONS.items()}
    with common.cpus_of(lab):
        assert len(common.resolve_cpus({"threads": "all"})) == 384
        for mode in ATOMIC_MODES:
            cpus, note = Atomics.clipped_cpus({**params, "mode": mode})
            assert len(cpus) == (LINE_WORDS if mode == "false_sharing" else 384)
            assert (note is not None) == (mode == "false_sharing")
        cpus, note = Atomics.clipped_cpus({**params, "mode": "false_sharing", "threads": 4})
        assert cpus == [0, 1, 2, 3] and note is None
        # an explicit count that cannot run is refused, not recorded as what it was not
        with pytest.raises(UserError, match="fits 8 threads .* not threads=16"):
            Atomics.clipped_cpus({**params, "mode": "false_sharing", "threads": 16})
    assert common.resolve_cpus({"threads": "all"}) == sorted(os.sched_getaffinity(0))


def test_what_does_not_exist_still_refuses_the_suite(lab):
    cases = suite.expand_for(suite.adhoc("chase", ["cpus=400"]), lab)
    with pytest.raises(UserError, match=r"chase/000: CPUs 400 are not available here "
                                        r"\(allowed: 0-383\)"):
        benchmarks.precheck(cases, lab)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_atomics_past_64_threads(mode):
    """100 threads (CPUs shared): coherence.c took at most 64; the private mode needs a
    line per thread, so the buffer is two pages."""
    threads = (sorted(os.sched_getaffinity(0)) * 100)[:100]
    a = native.Allocation(8192, "4k", "local")
    words = a.array(np.uint64)
    ns, per_thread = native.atomics(a.addr, mode, 200, threads)
    assert int(words.sum()) == 100 * 200 and len(per_thread) == 100 and ns > 0
    if mode == 2:
        assert all(int(w) == 200 for w in words[:100 * 8:8])   # one counter per line


def test_false_sharing_past_a_line_refused_in_c():
    a = native.Allocation(4096, "4k", "local")
    cpus = (sorted(os.sched_getaffinity(0)) * 9)[:9]
    with pytest.raises(native.NativeError, match="false sharing fits 8 threads in a line"):
        native.atomics(a.addr, 3, 10, cpus)


def test_cpus_past_cpu_setsize_reach_the_kernel():
    """CPU 2000 does not exist here: the kernel refuses the pin, not a 1024-CPU set."""
    a = native.Allocation(4096, "4k", "local")
    with pytest.raises(native.NativeError, match="cannot pin a thread to CPU 2000"):
        native.atomics(a.addr, 0, 10, [2000])
