"""The footprint as the terminal prints it, and as --json gives it."""
from __future__ import annotations

from .footprint import Part, footprint, params
from .job import Job

GIB = 1 << 30


def as_dict(job: Job) -> dict:
    parts = footprint(job)
    return {"job": dict(job.__dict__),
            "parameters": params(job),
            "device": "pipeline stage 0 of one data-parallel rank",
            "parts": [p.__dict__ for p in parts],
            "total": {where: sum(p.bytes for p in parts if p.where == where)
                      for where in ("gpu", "host")}}


def render(job: Job) -> str:
    parts: list[Part] = footprint(job)
    if job.train:
        shape = (f"training {job.name}: {params(job) / 1e9:.2f} B parameters, {job.dtype} "
                 f"(master {job.master}), {job.optimizer}; dp {job.dp} tp {job.tp} pp "
                 f"{job.pp}, ZeRO {job.zero}, micro-batch {job.micro_batch} x "
                 f"{job.micro_batches}, seq {job.seq}"
                 + (", full recompute" if job.recompute else "")
                 + (f", offload {job.offload}" if job.offload != "none" else ""))
    else:
        shape = (f"serving {job.name}: {params(job) / 1e9:.2f} B parameters, {job.dtype}; "
                 f"tp {job.tp} pp {job.pp}, batch {job.micro_batch} x context {job.context}"
                 + (f", {job.prefix_shared:.0%} of it a shared prefix"
                    if job.prefix_shared else ""))
    width = max(len(p.name) for p in parts)
    lines = [shape, "per device (pipeline stage 0 of one data-parallel rank):",
             f"  {'part':<{width}}  {'GiB':>8}  where  formula"]
    lines += [f"  {p.name:<{width}}  {p.bytes / GIB:8.2f}  {p.where:<5}  {p.formula}"
              for p in parts]
    for where in ("gpu", "host"):
        total = sum(p.bytes for p in parts if p.where == where)
        if total:
            lines.append(f"  {'total, ' + where:<{width}}  {total / GIB:8.2f}")
    return "\n".join(lines)
