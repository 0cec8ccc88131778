"""`cxlbench plan --check`: the kernels behind the plan's host work, each at a size this
machine can hold (its shape kept: the optimizer's arrays, the KV-cache's blocks, the
staging copy's stores, the tables' rows), bound to the DRAM node and, where this machine
has one, to the slow node; each case's prediction from the calibrated model the plan's
times come from, beside its measurement. What is checked is the model's cost of each
kernel; the plan then adds passes the kernel does not run (embedding's backward, the
staging copy's source on another tier). A slow tier assumed from a profile has no node to
run on: its share stays the model's. Work no kernel here runs (parameters sent to a GPU,
SGD or Adagrad steps, 8-bit KV) has no case."""
from __future__ import annotations

from . import timing
from .footprint import kv_token_bytes, stage_layers
from .job import DTYPE_BYTES, Job
from .place import Plan

CHECK_BYTES = 512 << 20     # each case's working set at most (half the calibration's streams)


def _jobs(job: Job, plan: Plan, node: int, tag: str) -> dict[str, dict]:
    """The benchmark jobs for the plan's work, bound to `node`."""
    names = {t.work.name for t in plan.timed}
    out = {}
    bind = f"bind:{node}"
    if timing.OPTIMIZER in names and job.optimizer in ("adam", "adamw"):
        # fp32 master and gradients on the host, as the CPU step takes them: 16 B held a
        # parameter (weights, gradient, two moments).
        n = next(p.total for p in plan.placed if p.part.name == "optimizer moments") // 8
        out[f"optimizer_{tag}"] = {
            "bench": "optimizer", "params": max(4096, int(min(n, CHECK_BYTES // 16))),
            "optim": "adamw" if job.optimizer == "adamw" else "adam", "precision": "fp32",
            "triad": False, "mem": bind}
    if timing.DECODE in names and job.dtype in ("bf16", "fp16"):
        # the kvcache kernel's tokens are 16-bit, as the plan's are here
        seq = max(job.kv_block, min(job.context,
                                    CHECK_BYTES // (kv_token_bytes(job, plan.stage)
                                                    * job.micro_batch)))
        out[f"kvcache_{tag}"] = {
            "bench": "kvcache", "preset": "custom", "layers": stage_layers(job, plan.stage),
            "kv_heads": max(1, job.kv_heads // min(job.tp, job.kv_heads)),
            "head_dim": job.head_dim, "block": job.kv_block,
            "batch": job.micro_batch, "seq_len": seq, "steps": 2, "mem.cache": bind}
    if timing.LOOKUPS in names:
        # One table of the job's rows as large as a case may be, looked up uniformly: every
        # lookup from memory, as the plan charges them (its Zipf decides only which tier).
        row = job.table_dim * DTYPE_BYTES[job.table_dtype]
        pooling = job.pooling or (1,) * len(job.tables)
        out[f"embedding_{tag}"] = {
            "bench": "embedding", "rows": int(min(sum(job.tables), CHECK_BYTES // row)),
            "dim": job.table_dim, "dtype": job.table_dtype,
            "pooling": max(1, round(sum(pooling) / len(pooling))), "dist": "uniform",
            "mem.table": bind}
    if timing.STAGING in names:
        size = next(p.total for p in plan.placed if p.part.name == "checkpoint staging")
        out[f"checkpoint_{tag}"] = {
            "bench": "checkpoint", "size": int(min(size, CHECK_BYTES)) // 4096 * 4096,
            "store": "nt", "mem.src": bind, "mem.dst": bind}
    return out


WORK_OF = {"optimizer": timing.OPTIMIZER, "kvcache": timing.DECODE,
           "checkpoint": timing.STAGING, "embedding": timing.LOOKUPS}
SIZE_OF = {"optimizer": "params", "kvcache": "seq_len", "checkpoint": "size",
           "embedding": "rows"}


def suite_text(plan: Plan) -> str | None:
    """The check as a suite file (TOML): a job per work and host node; None where no
    kernel here runs any of the plan's work."""
    job = plan.job
    fast, slow = plan.machine.host
    jobs = _jobs(job, plan, fast.nodes[0], "dram")
    if slow.nodes:
        jobs.update(_jobs(job, plan, slow.nodes[0], "slow"))
    if not jobs:
        return None
    lines = [f'description = "cxlbench plan --check: the host work of {job.name} run by '
             f'the real kernels, each at most {CHECK_BYTES >> 20} MiB, beside the tier '
             'model\'s prediction"', "", "[global]", "repeat = 3", "warmup = 1",
             'threads = "all"']
    for name, body in jobs.items():
        lines += ["", f"[{name}]"]
        lines += [f"{key} = {_toml(value)}" for key, value in body.items()]
    return "\n".join(lines) + "\n"


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else str(value)


def table(checks: dict | None) -> list[str]:
    """The plan's checked work, predicted against measured (analysis.model_checks)."""
    if not checks:
        return ["check: no case was predicted (see the run's summary above)"]
    rows = checks["rows"]
    width = max(len(r["case"]) for r in rows)
    lines = ["Predicted against measured, the plan's work at a checkable size:",
             f"  {'case':<{width}}  {'work':<24}  {'size':<18}  {'predicted':>11}  "
             f"{'measured':>11}  error"]
    for r in rows:
        work = WORK_OF.get(r["benchmark"], r["benchmark"])
        key = SIZE_OF.get(r["benchmark"], "")
        size = f"{key}={r['parameters'].get(key)}" if key else ""
        lines.append(f"  {r['case']:<{width}}  {work:<24}  {size:<18}  {r['predicted']:>11.4g}  "
                     f"{r['measured']:>11.4g}  {r['error']:+.0%}  ({r['unit']}"
                     f"{', noisy' if r['noisy'] else ''})")
    lines.append(f"  median |error| {checks['median_error']:.0%}, worst "
                 f"{checks['worst_error']:.0%} ({checks['worst_case']}); tiers: "
                 f"{'; '.join(checks['sources'])}")
    return lines
