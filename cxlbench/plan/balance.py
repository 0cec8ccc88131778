"""Ways to even out a pipeline's stages, each with what it costs. Under 1F1B the first
stage holds pp micro-batches in flight and the input embedding, the last the output
layer: one stage decides whether the job fits while the others have room.

- a memory-balanced layer split (fewer layers on the heavy stages): the slowest stage's
  longer compute;
- BPipe's pairing (stage x's surplus activations held by stage pp - x - 1): bytes over
  the pair's GPU link;
- activation offload to the host (DRAM or the slow tier): bytes over the GPU's host link
  and the host tier's time to take and give them back, from this machine's calibration.

A micro-batch's activations moved away leave after its forward and come back before its
backward: of the n a stage holds in flight, m away at a time, each away for n - 1 of the
step's cycles, so about M m / (n - 1) of a step's M micro-batches make the trip."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .footprint import footprint, gpu_bytes, in_flight
from .job import Job
from .timing import LINK_GBS, Work, _streamed

GIB = 1 << 30


@dataclass(frozen=True)
class Option:
    name: str
    how: str                            # how to ask for it
    stages_gpu: tuple[int, ...]         # each stage's GPU bytes under it
    cost: str                           # what it costs, in words
    layers_per_stage: tuple[int, ...] = ()      # the split's (a split's option only)
    step: float | None = None           # a step's compute under it, over the split asked
    moved: float = 0.0                  # bytes a step over one GPU's link


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
    return Option("memory-balanced split", "--layers-per-stage " + ",".join(map(str, split)),
                  after, f"its slowest stage runs {max(split)} layers where the split asked "
                  f"runs {max(asked)}: about {step - 1:+.0%} a step (compute taken as layers; "
                  "the embeddings' and output layer's own not counted)", tuple(split), step)


def _activations(job: Job, stage: int) -> tuple[int, int]:
    """Stage `stage`'s micro-batches in flight and one's activation bytes (the output
    layer's with them on the last stage)."""
    n = in_flight(job, stage)
    parts = {p.name: p.bytes for p in footprint(job, stage)}
    return n, (parts.get("activations", 0) + parts.get("output activations", 0)) // n


def _trips(job: Job, n: int, m: int) -> float:
    """Micro-batches of a step that leave and come back, m of n away at a time."""
    return job.micro_batches * m / max(n - 1, 1)


def _movable(job: Job) -> bool:
    """Activations move micro-batch by micro-batch: training, 1F1B or GPipe (interleaved
    chunks are not counted here), a pipeline."""
    return job.train and job.pp > 1 and job.layers > 0 and job.schedule != "interleaved"


def bpipe(job: Job) -> Option | None:
    """BPipe (Kim et al. 2023): stage x and stage pp - 1 - x even out, the heavier's
    micro-batches' activations held by the lighter between forward and backward."""
    if not _movable(job):
        return None
    now = [gpu_bytes(footprint(job, s)) for s in range(job.pp)]
    after, moved = list(now), 0.0
    for x in range(job.pp // 2):
        pair = (x, job.pp - 1 - x)
        heavy, light = sorted(pair, key=lambda s: -now[s])
        n, a = _activations(job, heavy)
        m = min(n - 1, int((now[heavy] - now[light]) // (2 * a))) if a else 0
        after[heavy] -= m * a
        after[light] += m * a
        moved = max(moved, 2 * a * _trips(job, n, m))
    if max(after) >= max(now):
        return None
    return Option("BPipe pairing", "the framework's: stage x's activations held by stage "
                  "pp - 1 - x", tuple(after),
                  f"moves {moved / GIB:.1f} GiB a step between a pair's GPUs (its GPU link's "
                  "time is not known here)", moved=moved)


def offload(job: Job, machine) -> Option | None:
    """Activations of the stages over the target (the GPU's memory where given, else the
    next heaviest stage) kept in host memory between forward and backward, as few
    micro-batches as bring each under it (at least one stays: the one computing)."""
    if not _movable(job):
        return None
    now = [gpu_bytes(footprint(job, s)) for s in range(job.pp)]
    top = max(now)
    target = machine.gpu if machine.gpu is not None else \
        max((b for b in now if b < top), default=top)
    after, worst = list(now), (0.0, 0)
    for s in range(job.pp):
        if now[s] <= target:
            continue
        n, a = _activations(job, s)
        m = min(n - 1, -(-(now[s] - target) // a)) if a else 0
        after[s] -= m * a
        worst = max(worst, (2 * a * _trips(job, n, m), s))
    moved, stage = worst
    if not moved:
        return None
    words = f"moves {moved / GIB:.1f} GiB a step over stage {stage}'s host link: " \
            f"{moved / LINK_GBS * 1e-9 * 1e3:.0f} ms at {LINK_GBS:g} GB/s (assumed)"
    if machine.timed:
        work = Work("activation offload", (), "step", "", lambda share: _streamed(
            moved / 2, moved / 2, share))
        ns = [work.ns(machine, share) for share in (1.0, 0.0)]
        words += (f"; the host takes and gives them back in {ns[0] * 1e-6:.0f} ms in DRAM, "
                  f"{ns[1] * 1e-6:.0f} ms on the slow tier (calibrated model)")
    else:
        words += "; the host tiers' time: not calibrated here (cxlbench calibrate)"
    return Option("activation offload to the host", "the framework's: activations kept "
                  "in host memory between forward and backward", tuple(after),
                  words + "; whether it hides behind the GPU's compute is not known here",
                  moved=moved)


def options(job: Job, machine) -> list[Option]:
    """Each way that lowers the heaviest stage."""
    return [o for o in (balanced_split(job), bpipe(job), offload(job, machine)) if o]
