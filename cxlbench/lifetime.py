"""Child processes that die with cxlbench: `kill -9` of a run leaves it no time to stop
its workers or its QEMU guest, which would go on loading the machine. The kernel kills
them instead when their parent goes (PR_SET_PDEATHSIG)."""
from __future__ import annotations

import ctypes
import os
import signal
from typing import Callable

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """Called in the child: SIGKILL when `parent` ends. A parent gone before the request
    was made is caught by comparing the parent's pid (the child then belongs to init)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def preexec() -> Callable[[], None]:
    """A subprocess preexec_fn that makes the child die with this process (PDEATHSIG
    survives exec)."""
    parent = os.getpid()
    return lambda: die_with_parent(parent)
