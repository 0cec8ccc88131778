"""Test-only: a kernel that crashes, to prove that a case fails alone."""
from __future__ import annotations

from .. import native
from ..options import pick
from .common import Measurement

NAME = "selftest"
DESCRIPTION = "test-only kernels (CXLBENCH_TEST_KERNELS=1)"
TEST_ONLY = True
OPTIONS = {**pick("repeat", "warmup", "timeout")}


def run(params: dict) -> Measurement:
    native.run_kernel(native.kernel("crash"), "scalar", [], 0, 1, [])
    raise AssertionError("the crash kernel returned")
