"""How long a suite's cases will take, before any runs: each case's start (a worker of
its own, and a CUDA context for a GPU case) and the work its benchmark's estimate() counts
from the case's options. The GPU benchmarks count from gpu.ASSUMED (a named profile's
published figures); a benchmark without estimate() leaves its cases unestimated, and the
total says how many."""
from __future__ import annotations

from dataclasses import dataclass

from . import benchmarks, gpu

# A case's worker started, the case's buffers placed and freed, the worker gone: 0.45 to
# 0.79 s a case (median 0.52) for ten 16 KiB-8 MiB chase cases on the 2-vCPU EPYC VM.
CASE_S = 0.55
# A GPU case's CUDA context and the library's load on top (assumed: 0.3-1.5 s on
# published H100/H200 figures, the slow end taken).
GPU_CASE_S = 1.5


def case_seconds(case) -> float | None:
    bench = benchmarks.get(case.bench)
    if bench.estimate is None:
        return None
    start = CASE_S + (GPU_CASE_S if case.bench.startswith("gpu_") else 0.0)
    return start + bench.estimate(case.params)


def duration(seconds: float) -> str:
    """'40 s', '3 min 20 s', '1 h 5 min'."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")


@dataclass
class Estimate:
    jobs: dict[str, tuple[int, float, int]]   # job -> (cases, seconds, cases unestimated)
    gpu: bool                                 # GPU cases among them

    @property
    def seconds(self) -> float:
        return sum(s for _, s, _ in self.jobs.values())

    @property
    def unestimated(self) -> int:
        return sum(u for _, _, u in self.jobs.values())

    def lines(self) -> list[str]:
        """A line a job, then the total, and where the figures come from."""
        out = []
        for job, (n, s, missing) in self.jobs.items():
            more = f" (+{missing} not estimated)" if missing else ""
            out.append(f"  {job}: {n} case{'s' if n != 1 else ''}, ~{duration(s)}{more}")
        total = f"estimated time: ~{duration(self.seconds)}"
        if self.unestimated:
            total += f", and {self.unestimated} cases with no estimate"
        out.append(total + (f" (a case's start {CASE_S} s, measured on a 2-vCPU VM; GPU "
                            f"cases' work from {gpu.ASSUMED['profile']})" if self.gpu else ""))
        return out


def of(cases) -> Estimate:
    jobs: dict[str, list] = {}
    for case in cases:
        n, s, missing = jobs.get(case.job, (0, 0.0, 0))
        t = case_seconds(case)
        jobs[case.job] = (n + 1, s + (t or 0.0), missing + (t is None))
    return Estimate(jobs, any(c.bench.startswith("gpu_") for c in cases))
