"""Child processes that die with cxlbench: `kill -9` of a run leaves it no time to stop its
workers or its QEMU guest, which would go on loading the machine. The kernel kills them
instead when their parent goes (PR_SET_PDEATHSIG). Set in the child itself, not by a
preexec_fn: the parent has threads (numpy's), and code run between fork and exec there
may deadlock."""
from __future__ import annotations

import ctypes
import os
import shutil
import signal

PR_SET_PDEATHSIG = 1
PARENT_ENV = "CXLBENCH_PARENT_PID"


def child_env() -> dict[str, str]:
    """The environment for a worker: this process's, naming this process as its parent."""
    return {**os.environ, PARENT_ENV: str(os.getpid())}


def die_with_parent() -> None:
    """Called first thing in a worker: SIGKILL when the parent named in the environment
    ends. Nothing when run by hand."""
    parent = os.environ.get(PARENT_ENV)
    if parent:
        die_with(int(parent))


def die_with(parent: int) -> None:
    """SIGKILL when `parent` ends. A parent gone before the request was made is caught by
    comparing the parent's pid (the process then belongs to another)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def dying_with_us(cmd: list[str]) -> list[str]:
    """A command (QEMU) run through util-linux's setpriv, which sets the same signal and
    then execs it (it survives exec); as it is where setpriv is missing."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *cmd] if setpriv else cmd
