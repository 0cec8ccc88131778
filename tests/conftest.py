import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cxlbench.tiering import calibration
from cxlbench.topology import Topology

from . import sysfs_fixtures
from .schema_check import check_json_output

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def machines(tmp_path_factory):
    """Each fixture machine's root, written once per session."""
    return {name: sysfs_fixtures.write(tmp_path_factory.mktemp(name), name)
            for name in sysfs_fixtures.MACHINES}


@pytest.fixture
def topo(machines):
    def read(name: str) -> Topology:
        root = machines[name]
        return Topology.read(root / "sys", root / "proc", probe_gpus=False)
    return read


@pytest.fixture(autouse=True)
def no_calibration(tmp_path_factory, monkeypatch):
    """The tier model's calibrations are looked for where the test says (a results dir of
    its own), never in the checkout's results/ a developer's runs left there."""
    monkeypatch.setenv(calibration.RESULTS_ENV, str(tmp_path_factory.mktemp("no-results")))


def cxlbench(*args, cwd=None, env=None, timeout=300):
    """The CLI as a user runs it: a process, its exit code, stdout and stderr."""
    full_env = {**os.environ, **(env or {})}
    r = subprocess.run([sys.executable, "-m", "cxlbench", *args], cwd=cwd, env=full_env,
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode == 0:
        check_json_output(args, r.stdout)   # every --json output to its published schema
    return r


def free_hugepages(kind: str) -> int:
    name = {"2m": "hugepages-2048kB", "1g": "hugepages-1048576kB"}[kind]
    try:
        return int(Path(f"/sys/devices/system/node/node0/hugepages/{name}/free_hugepages")
                   .read_text())
    except OSError:
        return 0


def last_json(stdout: str):
    return json.loads(stdout)


GPU_TESTS = []     # whether any test of the session is a GPU one (collection says)


def pytest_terminal_summary(terminalreporter):
    """One line on what the GPU tests checked here, where a skip among hundreds is missed:
    the library's build (with nvcc) and its kernels (on a GPU). Said only where GPU tests
    were collected, so a CPU-only session never builds the library to say it."""
    if not GPU_TESTS:
        return
    from cxlbench import gpu
    compiler = gpu.nvcc()
    if compiler is None and gpu.built() is None:
        terminalreporter.write_line("GPU library: NOT built or checked here (no nvcc); GPU "
                                    "kernels not run")
        return
    why = gpu.unavailable()
    terminalreporter.write_line(
        f"GPU library: {'built by ' + compiler if compiler else 'built at install, no nvcc'}; "
        f"GPU kernels {'run on this GPU' if not why else 'NOT run: ' + why}")


def pytest_collection_finish(session):
    """What is left to run once -m and -k have deselected: GPU tests among it or not."""
    GPU_TESTS[:] = [True] if any(item.get_closest_marker("gpu") or "test_gpu" in item.nodeid
                                 for item in session.items) else []


# Files whose tests time something and hold it to a bound, measure and compare figures,
# spin threads on every CPU, or run pytest-benchmark (which xdist turns off): marked
# `serial`, so tests/run runs them alone, before the rest runs on every CPU (pytest-xdist).
# Measured on 2 vCPUs, the files that run benchmarks or compilers of their own (the peer
# scripts, the builds, the guest and user fixtures) also ran faster alone: both workers
# busy made them slower than the parallel phase gained (755 s against 669 s in all).
# test_durability and test_caches run small test kernels and hold no figure to a bound:
# they run in parallel, but for the one test that counts heartbeats (marked serial itself).
SERIAL = {"test_speed", "test_fidelity", "test_coherence", "test_model_calibration",
          "test_crosshost", "test_kvcache", "test_run", "test_suite_input",
          "test_plan_input", "test_estimate", "test_migrate_touch",
          "test_pytest_plugin", "test_peer_scripts", "test_build", "test_gpu_build",
          "test_page_moves", "test_unprivileged", "test_emulate", "test_tuning",
          "test_tails"}
# Files whose tests mostly wait on a daemon (SLURM's controller, which checks time limits
# every 30 s): marked `beside`, so tests/run runs them in a pytest of their own beside the
# parallel phase (74 s of the serial phase's 353 on the 2-vCPU VM were these waits). The
# builds beside it too gained nothing: 239 + 269 s against 262 + 243 (the parallel phase
# took what they left the serial one).
BESIDE = {"test_fleet_slurm"}


def pytest_collection_modifyitems(items):
    """A test that boots a guest is slow too: `-m "not slow"` leaves the guests out. One
    that needs two memory nodes on this machine skips, with why, where it has fewer; one
    that needs a GPU, where the GPU library says why none can run. The SERIAL and BESIDE
    files' tests are marked so."""
    nodes = no_gpu = None
    for item in items:
        if item.path.stem in SERIAL:
            item.add_marker(pytest.mark.serial)
        if item.path.stem in BESIDE:
            item.add_marker(pytest.mark.beside)
        if item.get_closest_marker("gpu"):
            if no_gpu is None:
                from cxlbench import gpu
                no_gpu = gpu.unavailable() or ""
            if no_gpu:
                item.add_marker(pytest.mark.skip(reason=no_gpu))
        if item.get_closest_marker("qemu"):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("numa2"):
            nodes = Topology.read(probe_gpus=False).memory_nodes if nodes is None else nodes
            if len(nodes) < 2:
                item.add_marker(pytest.mark.skip(
                    reason=f"needs two memory nodes on this machine, it has {len(nodes)}"))
