"""Each case runs in a process of its own, forked from one server per run that imported the
benchmarks once (runner.Workers): a case that crashes, hangs or is interrupted takes only
its process down, and the next case still starts clean."""
import os
import signal
import time
from pathlib import Path

import pytest

from cxlbench import runner, suite
from cxlbench.topology import Topology


def case(bench: str, *sets: str):
    (c,) = suite.expand_for(suite.adhoc(bench, ["repeat=1", "warmup=0", *sets]),
                            Topology.read(probe_gpus=False))
    return c


def chase():
    return case("chase", "size=64K", "loads=1000")


def selftest(action: str, timeout: float = 60):
    return case("selftest", f"action={action}", f"timeout={timeout}")


def alive(pid: int) -> bool:
    """Running still (a zombie waiting to be reaped is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


@pytest.fixture
def workers(monkeypatch):
    monkeypatch.setenv("CXLBENCH_TEST_KERNELS", "1")
    with runner.Workers() as w:
        yield w


def test_cases_run_each_in_a_new_process_of_one_server(workers):
    pids, servers = set(), set()
    for _ in range(3):
        m = runner.run_worker(chase(), None, workers)
        assert m["status"] == "ok" and m["reps"][0]["latency"] > 0
        pids.add(workers.case_pid)
        servers.add(workers.proc.pid)
        assert not alive(workers.case_pid)
    assert len(pids) == 3 and len(servers) == 1 and servers.isdisjoint(pids)


def test_a_crash_fails_its_case_alone(workers):
    m = runner.run_worker(selftest("crash"), None, workers)
    assert m["status"] == "failed" and m["error"].startswith("worker killed by SIGSEGV")
    server = workers.proc.pid
    assert runner.run_worker(chase(), None, workers)["status"] == "ok"
    assert workers.proc.pid == server           # the server was not what crashed


def test_a_case_past_its_timeout_is_gone_before_the_next_starts(workers):
    m = runner.run_worker(selftest("sleep", timeout=1.5), None, workers)
    assert m == {"status": "failed", "error": "timed out after 1.5 s"}
    assert not alive(workers.case_pid)           # ended with its server
    assert workers.proc is None
    assert runner.run_worker(chase(), None, workers)["status"] == "ok"


def test_an_interrupted_case_ends_with_its_server(workers, monkeypatch):
    monkeypatch.setattr(runner, "HEARTBEAT_S", 0.5)

    def interrupt(so_far):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        runner.run_worker(selftest("sleep"), interrupt, workers)
    deadline = time.monotonic() + 5
    while alive(workers.case_pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(workers.case_pid) and workers.proc is None


def test_a_server_killed_between_cases_is_started_again(workers):
    assert runner.run_worker(chase(), None, workers)["status"] == "ok"
    first = workers.proc.pid
    os.kill(first, signal.SIGKILL)
    workers.proc.wait()
    assert runner.run_worker(chase(), None, workers)["status"] == "ok"
    assert workers.proc.pid != first


def test_a_server_that_cannot_start_says_why(workers, monkeypatch):
    # a Python that cannot import cxlbench: the server's own error is the case's
    monkeypatch.setattr(runner, "PACKAGE_PARENT", "/")
    monkeypatch.setenv("PYTHONPATH", "")
    monkeypatch.setattr(runner.sys, "executable", "/bin/false")
    m = runner.run_worker(chase(), None, workers)
    assert m["status"] == "failed" and m["error"].startswith("worker exited 1")
