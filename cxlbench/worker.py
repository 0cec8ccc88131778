"""The cases' processes. `python -m cxlbench.worker --serve` imports the benchmarks once,
then forks a process for each case it is sent: the case runs there alone, its Measurement
written as JSON to a file the runner names, and the process ends. A crash, an OOM kill or
a timeout takes only that process down; the runner records the case as failed and goes on.

Forked from a process that has only imported, a case starts as a fresh process would,
without paying Python's, numpy's and cxlbench's imports each time: 0.3 s a case on the
2-vCPU VM, 9 s under TCG in a guest. `python -m cxlbench.worker` alone runs one case read
from stdin (Case.to_dict's form; its params become values here, each placement parsed
once) and writes the Measurement on stdout."""
from __future__ import annotations

import json
import os
import sys
import traceback

from .lifetime import die_with, die_with_parent

die_with_parent()                       # before the heavy imports below

from . import benchmarks, native  # noqa: E402
from .errors import CxlbenchError  # noqa: E402
from .suite import Case  # noqa: E402


def run_case(data: dict) -> dict:
    try:
        case = Case.from_dict(data)
        return benchmarks.get(case.bench).run(case.params).to_dict()
    except CxlbenchError as e:
        return {"status": "failed", "error": f"{type(e).__name__}: {e}"}


def main() -> int:
    json.dump(run_case(json.load(sys.stdin)), sys.stdout)
    return 0


def serve() -> int:
    """'ready' once imported; then a request a line on stdin ({"case", "out", "err"}: the
    case, and the files its process's stdout and stderr go to), and for each 'started
    PID' then 'ended CODE' on stdout (CODE as subprocess gives it: negative, the signal
    that killed it). One case runs at a time."""
    native.kernels()                    # the C core and its tables, once: no case's cost
    server = os.getpid()
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _case_process(request, server)
        print(f"started {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        print(f"ended {os.waitstatus_to_exitcode(status)}", flush=True)
    return 0


def _case_process(request: dict, server: int) -> None:
    """The forked process: its own stdout and stderr, the case, and out, never back into
    the server's loop."""
    code = 1
    try:
        die_with(server)                # which dies with the runner
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                                (1, request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            opened = os.open(path, flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        json.dump(run_case(request["case"]), sys.stdout)
        code = 0
    except BaseException:               # noqa: B036 (a traceback, as a fresh worker gives)
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:           # noqa: BLE001 (a full disk: the runner says so)
                pass
        os._exit(code)


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1:] == ["--serve"] else main())
