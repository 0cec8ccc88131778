"""One case in its own process: `python -m cxlbench.worker` reads the case as JSON on
stdin and writes the Measurement as JSON on stdout. A crash or an OOM kill takes only
this process down; the runner records the case as failed and goes on."""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A worker outliving a killed `cxlbench run` (kill -9 leaves it no time to stop its
    children) would go on loading the machine: the kernel kills this process when its
    parent goes. Asked before anything heavy is imported; a parent gone before the request
    was made is caught by comparing the parent's pid."""
    parent = os.environ.get("CXLBENCH_PARENT_PID")
    if not parent:
        return                          # run by hand
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(parent):
        os._exit(1)


def main() -> int:
    die_with_parent()
    from . import benchmarks
    from .errors import CxlbenchError

    case = json.load(sys.stdin)
    try:
        result = benchmarks.get(case["bench"]).run(case["params"]).to_dict()
    except CxlbenchError as e:
        result = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
