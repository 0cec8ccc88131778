"""Test-only: a kernel that crashes, to prove that a case fails alone; or a worker that
sleeps, for tests that kill a run or its worker part-way."""
from __future__ import annotations

import time

from ..memory import native
from ..options import Option, pick
from .common import Measurement

NAME = "selftest"
TITLE = "selftest"
BUFFERS = ()
DESCRIPTION = "test-only kernels (CXLBENCH_TEST_KERNELS=1)"
TEST_ONLY = True
OPTIONS = {**pick("repeat", "warmup", "timeout"),
           "action": Option("action", "choice", "crash", "crash in C, or sleep for a minute",
                            choices=("crash", "sleep"))}


def run(params: dict) -> Measurement:
    if params.get("action") == "sleep":
        time.sleep(60)
        raise AssertionError("the sleeping worker was not stopped")
    native.run_kernel(native.kernel("crash"), "scalar", [], 0, 1, [])
    raise AssertionError("the crash kernel returned")
