"""Ways to even out a pipeline's stages, each with what it costs. Under 1F1B the first
stage holds pp micro-batches in flight and the input embedding, the last the output
layer: one stage decides whether the job fits while the others have room. So far: a
memory-balanced layer split (fewer layers on the heavy stages), at the price of the
slowest stage's longer compute. (BPipe's pairing and activation offload to the host are
issue 50's next parts.)"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .footprint import footprint, gpu_bytes
from .job import Job


@dataclass(frozen=True)
class Option:
    name: str
    layers_per_stage: tuple[int, ...]
    stages_gpu: tuple[int, ...]         # each stage's GPU bytes under it
    step: float                         # a step's time under it, over the equal split's
    cost: str                           # what it costs, in words


def _stage_gpu(job: Job, stage: int, layers: int) -> int:
    """Stage `stage`'s GPU bytes were it to hold `layers` layers (as the footprint counts
    them: linear in its layers)."""
    split = tuple(layers if s == stage else 0 for s in range(job.pp))
    return gpu_bytes(footprint(dataclasses.replace(job, layers_per_stage=split), stage))


def balanced_split(job: Job) -> Option | None:
    """The split of the layers whose heaviest stage is the lightest (each stage at least
    one layer), where it beats the split asked; None where there is no pipeline, the
    schedule fixes the split (interleaved) or no split does better."""
    if job.pp < 2 or not job.layers or job.schedule == "interleaved" or job.layers < job.pp:
        return None
    fixed = [_stage_gpu(job, s, 0) for s in range(job.pp)]
    per = [max(_stage_gpu(job, s, 1) - fixed[s], 1) for s in range(job.pp)]

    def counts(top: int) -> list[int]:
        """Layers each stage can take within `top` bytes."""
        return [(top - f) // c for f, c in zip(fixed, per)]

    lo, hi = max(f + c for f, c in zip(fixed, per)), max(fixed) + max(per) * job.layers
    while lo < hi:                      # the least bytes a stage within which all fit
        mid = (lo + hi) // 2
        if sum(min(n, job.layers) for n in counts(mid)) >= job.layers:
            hi = mid
        else:
            lo = mid + 1
    split = [min(n, job.layers) for n in counts(lo)]
    while sum(split) > job.layers:      # too many: take from the heaviest stage left
        s = max((s for s in range(job.pp) if split[s] > 1),
                key=lambda s: fixed[s] + split[s] * per[s])
        split[s] -= 1
    balanced = dataclasses.replace(job, layers_per_stage=tuple(split))
    now = [gpu_bytes(footprint(job, s)) for s in range(job.pp)]
    after = tuple(gpu_bytes(footprint(balanced, s)) for s in range(job.pp))
    if max(after) >= max(now):
        return None
    asked = [job.layers_per_stage[s] if job.layers_per_stage else job.layers // job.pp
             for s in range(job.pp)]
    step = max(split) / max(asked)
    return Option("memory-balanced split", tuple(split), after, step,
                  f"its slowest stage runs {max(split)} layers where the split asked runs "
                  f"{max(asked)}: about {step - 1:+.0%} a step (compute taken as layers; the "
                  "embeddings' and output layer's own not counted)")
