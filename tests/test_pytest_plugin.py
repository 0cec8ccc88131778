"""The pytest plugin (cxlbench.pytest_plugin, entry point pytest11): inner test files run
by pytester. placed_array places, verifies and records; `tier` yields one case per memory
node with readable ids (this machine, and the multi-node and CXL fixture trees through
--cxlbench-root); a placement that cannot be met skips with its reason, a malformed one or
one undone during the test fails; a project's own `tier` fixture is left alone."""
import json
import subprocess
import sys

import pytest

# Imported here, once: pytester's in-process runs put sys.modules back after each, and
# numpy and the compiled core cannot be loaded twice in one process.
import numpy  # noqa: F401
from cxlbench import memory, native  # noqa: F401
from cxlbench.topology import Topology

pytest_plugins = ["pytester"]

NODES = Topology.read(probe_gpus=False).memory_nodes


def test_placed_array_is_placed_verified_and_zeroed(pytester):
    pytester.makepyfile("""
        import numpy as np
        from cxlbench import memory

        def test_it(placed_array):
            a = placed_array((256, 1024), "float32", mem="bind:0")
            assert a.shape == (256, 1024) and a.dtype == np.float32 and not a.any()
            v = memory.verify(a)
            assert v.ok and v.counts_text() == "0:256"
            b = placed_array(1000, np.int64)        # local: the CPUs' node
            assert b.shape == (1000,) and memory.verify(b).ok
            a[:] = 1                                # writable, its own memory
            assert a.sum() == 256 * 1024 and not b.any()
    """)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_tier_runs_once_per_memory_node_of_this_machine(pytester):
    pytester.makepyfile("""
        from cxlbench import memory

        def test_on(tier, placed_array):
            a = placed_array(4096 * 8, "uint8")         # mem defaults to the tier
            assert memory.verify(a).counts == {tier.node: 8}
            assert tier.mem == f"bind:{tier.node}"
    """)
    r = pytester.runpytest("-v", "-p", "no:cacheprovider")
    r.assert_outcomes(passed=len(NODES))
    r.stdout.fnmatch_lines([f"*test_on[[]node{n}-*[]] PASSED*" for n in NODES])


@pytest.fixture
def fixture_root(machines):
    """--cxlbench-root for a sysfs fixture machine."""
    return lambda name: f"--cxlbench-root={machines[name]}"


TIER_TEST = """
    def test_on(tier):
        assert tier.kind in ("dram", "cxl")
"""


@pytest.mark.parametrize("machine, ids", [
    ("vm", ["node0-dram"]),
    ("two_socket_cxl", ["node0-dram", "node1-dram", "node2-cxl"]),
    ("interleaved_cxl", ["node0-dram", "node1-cxl"]),
    ("lab", ["node0-dram", "node1-dram", "node2-cxl", "node3-cxl"]),
])
def test_tier_ids_on_multi_node_and_cxl_machines(pytester, fixture_root, machine, ids):
    pytester.makepyfile(TIER_TEST)
    r = pytester.runpytest("--collect-only", "-q", fixture_root(machine))
    r.stdout.fnmatch_lines([f"*test_on[[]{i}[]]" for i in ids])
    assert sum("test_on[" in line for line in r.outlines) == len(ids)


@pytest.mark.parametrize("pick, ids", [
    ("cxl", ["node2-cxl", "node3-cxl"]),
    ("dram", ["node0-dram", "node1-dram"]),
    ("0,3", ["node0-dram", "node3-cxl"]),
    ("1-2", ["node1-dram", "node2-cxl"]),
    ("0,cxl", ["node0-dram", "node2-cxl", "node3-cxl"]),
])
def test_tiers_picked_on_the_command_line(pytester, fixture_root, pick, ids):
    pytester.makepyfile(TIER_TEST)
    r = pytester.runpytest("--collect-only", "-q", fixture_root("lab"),
                           f"--cxlbench-tiers={pick}")
    assert [line.split("[")[1].rstrip("]") for line in r.outlines
            if "test_on[" in line] == ids


def test_a_tier_the_machine_lacks_is_a_usage_error(pytester, fixture_root):
    pytester.makepyfile(TIER_TEST)
    r = pytester.runpytest("--collect-only", fixture_root("two_socket_cxl"),
                           "--cxlbench-tiers=0,7")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--cxlbench-tiers: no memory node 7 on this machine (memory "
                            "nodes here: node0-dram, node1-dram, node2-cxl)*"])
    r = pytester.runpytest("--collect-only", fixture_root("vm"), "--cxlbench-tiers=hbm")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*'hbm' is neither a node list nor one of dram, cxl*"])


def test_a_mark_narrows_the_tiers_and_an_empty_choice_skips(pytester, fixture_root):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.cxlbench_tiers("cxl")
        def test_far(tier):
            assert tier.kind == "cxl"
    """)
    r = pytester.runpytest("-v", fixture_root("two_socket_cxl"))
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*test_far[[]node2-cxl[]] PASSED*"])
    r = pytester.runpytest("-rs", fixture_root("vm"))          # no CXL node there
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["*no memory node matches --cxlbench-tiers / the cxlbench_tiers "
                            "mark*"])


def test_extra_info_holds_the_tier_and_the_verified_placement(pytester):
    pytester.makepyfile("""
        import numpy as np

        def test_sum(benchmark, tier, placed_array):
            a = placed_array((64, 1024), "float64")
            benchmark(np.sum, a)
    """)
    r = pytester.runpytest("-p", "no:cacheprovider", "--benchmark-json=out.json",
                           "--benchmark-max-time=0.05")
    r.assert_outcomes(passed=len(NODES))
    runs = json.loads((pytester.path / "out.json").read_text())["benchmarks"]
    assert [b["param"] for b in runs] == [f"node{n}-dram" for n in NODES]
    info = runs[0]["extra_info"]
    assert info["cxlbench_tier"] == {"node": NODES[0], "kind": "dram",
                                     "mem": f"bind:{NODES[0]}",
                                     "memory_tier": info["cxlbench_tier"]["memory_tier"],
                                     "mem_total": info["cxlbench_tier"]["mem_total"]}
    (placed,) = info["cxlbench_placement"]
    assert placed["mem"] == f"bind:{NODES[0]}" and placed["page"] == "4k"
    assert placed["shape"] == [64, 1024] and placed["dtype"] == "float64"
    assert placed["bytes"] == 64 * 1024 * 8
    for when in ("verified", "verified_after"):     # before the rounds, and after them
        assert placed[when]["ok"] and placed[when]["counts"] == {str(NODES[0]): 128}


def test_placements_that_cannot_be_met_skip_with_the_reason(pytester):
    pytester.makepyfile("""
        def test_missing_node(placed_array):
            placed_array(10, mem="bind:9")

        def test_too_big(placed_array):
            placed_array(1 << 50, "uint8", mem="bind:0")

        def test_no_hugetlb_pool(placed_array):
            placed_array((1 << 30) * 64, "uint8", page="1g")
    """)
    r = pytester.runpytest("-rs", "-p", "no:cacheprovider")
    r.assert_outcomes(skipped=3)
    r.stdout.fnmatch_lines([
        "*placed_array((10,), float64, mem=bind:9, page=4k): node 9 does not exist (this "
        "machine has nodes *)",
        "*placed_array((1125899906842624,), uint8, mem=bind:0, page=4k): 1024T on node 0 "
        "exceeds its free memory*",
        "*page=1g): hugetlb pool on node * has * free 1g pages, 64 needed: raise "
        "/sys/devices/system/node/node*/hugepages/hugepages-1048576kB/nr_hugepages*",
    ], consecutive=False)
    assert "Traceback" not in r.stdout.str() and "cxlbench/memory.py" not in r.stdout.str()


def test_malformed_requests_fail_without_a_traceback(pytester):
    pytester.makepyfile("""
        def test_spec(placed_array):
            placed_array(10, mem="bnd:1")

        def test_page(placed_array):
            placed_array(10, page="64k")

        def test_dtype(placed_array):
            placed_array(10, dtype="no-such-type")

        def test_shape(placed_array):
            placed_array((-5, 4))
    """)
    r = pytester.runpytest("-p", "no:cacheprovider")
    r.assert_outcomes(failed=4)
    r.stdout.fnmatch_lines([
        "placed_array: malformed placement 'bnd:1': unknown policy 'bnd'*",
        "placed_array: unknown page size '64k': use one of 4k, thp, 2m, 1g",
        "placed_array: data type 'no-such-type' not understood",
        "placed_array: negative dimension in shape (-5, 4)",
    ], consecutive=False)
    assert "During handling" not in r.stdout.str()


def test_pages_that_moved_during_the_test_are_an_error(pytester):
    """Verified again at teardown: here the test makes the second look see its pages on
    another node, as NUMA balancing or demotion would leave them."""
    pytester.makepyfile("""
        import dataclasses
        from cxlbench import memory

        def test_moved(placed_array):
            a = placed_array(4096 * 4, "uint8", mem="bind:0")
            buf = memory._buffer_of(a)
            first = buf.verify()
            buf.verify = lambda: dataclasses.replace(first, counts={0: 0, 5: 4}, placed=False,
                                                     deviation=1.0)
    """)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    r.assert_outcomes(passed=1, errors=1)
    r.stdout.fnmatch_lines(["*placed_array((16384,), uint8, mem=bind:0, page=4k): buffer "
                            "array0: placement bind:0 not honoured after the test: pages per "
                            "node 5:4, 100.0% misplaced*"])


def test_a_projects_own_tier_fixture_is_left_alone(pytester, fixture_root):
    pytester.makeconftest("""
        import pytest

        @pytest.fixture
        def tier():
            return "gold"
    """)
    pytester.makepyfile("""
        def test_mine(tier):
            assert tier == "gold"
    """)
    r = pytester.runpytest("-v", fixture_root("lab"))
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*test_mine PASSED*"])


def test_the_plugin_is_registered_and_imports_nothing_heavy():
    code = ("import sys, cxlbench.pytest_plugin; "
            "heavy = [m for m in ('numpy', 'cxlbench.native', 'cxlbench._native', "
            "'cxlbench.topology', 'cxlbench.memory', 'cffi') if m in sys.modules]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
    from importlib.metadata import entry_points
    assert [e.value for e in entry_points(group="pytest11") if e.name == "cxlbench"] == \
        ["cxlbench.pytest_plugin"]
