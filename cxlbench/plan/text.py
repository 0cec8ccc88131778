"""A plan as the terminal prints it (the answer first: does it fit, where the host's part
goes, what the host's memory-bound work costs; then each part, placement and prediction
with its formula and source), and as --json gives it."""
from __future__ import annotations

import dataclasses
import math
import re

from ..errors import UserError
from ..tiering import calibration
from ..tiering.checked import UNTRUSTED
from ..units import quantity
from .footprint import gpu_bytes, params
from .job import Job
from .place import Plan, ratio
from .timing import CHECKED_BY, LINK_GBS, LINK_SOURCE

GIB = 1 << 30


def _gib(b: float) -> str:
    return f"{b / GIB:.1f} GiB"


def _ns(ns: float | None) -> str:
    return "-" if ns is None else quantity(ns * 1e-9, "s")


def shape(job: Job) -> str:
    if not job.layers:          # embedding tables alone (a recommender's sparse part)
        return (f"{'training' if job.train else 'serving'} {job.name}: {len(job.tables)} "
                f"embedding tables, {sum(job.tables) / 1e6:.1f} M rows x {job.table_dim} "
                f"{job.table_dtype}; batch {job.micro_batch} a rank x {job.host_ranks} "
                f"rank{'s' if job.host_ranks > 1 else ''} a host")
    if job.train:
        return (f"training {job.name}: {params(job) / 1e9:.2f} B parameters, {job.dtype} "
                f"(master {job.master}), {job.optimizer}; dp {job.dp} tp {job.tp} pp "
                f"{job.pp}, ZeRO {job.zero}, micro-batch {job.micro_batch} x "
                f"{job.micro_batches}, seq {job.seq}"
                + (", full recompute" if job.recompute else "")
                + (f", offload {job.offload}" if job.offload != "none" else ""))
    return (f"serving {job.name}: {params(job) / 1e9:.2f} B parameters, {job.dtype}; "
            f"tp {job.tp} pp {job.pp}, batch {job.micro_batch} x context {job.context}"
            + (f", {job.prefix_shared:.0%} of it a shared prefix" if job.prefix_shared else "")
            + (", KV-cache on the host" if job.offload == "kv" else ""))


def device(plan: Plan) -> str:
    """The device the plan's parts are of: the stage that decides the GPU fit."""
    if plan.job.pp == 1:
        return "one data-parallel rank"
    return (f"pipeline stage {plan.stage} of {plan.job.pp}, the one that decides the GPU "
            "fit, of one data-parallel rank")


def imbalance(plan: Plan) -> float | None:
    """The largest stage's GPU bytes over the smallest's (1F1B leaves the first stage the
    most micro-batches, the last the output layer)."""
    totals = [gpu_bytes(parts) for parts in plan.stages.values()]
    return max(totals) / min(totals) if totals and min(totals) else None


def stage_table(plan: Plan) -> list[str]:
    """Each pipeline stage's GPU parts side by side (the shown ones, where there are many)."""
    if not plan.stages:
        return []
    stages = list(plan.stages)
    names = [n for n in dict.fromkeys(x.name for parts in plan.stages.values()
                                      for x in parts if x.where == "gpu")]
    width = max(len("total, gpu"), *(len(n) for n in names))
    skipped = plan.job.pp - len(stages)
    job = plan.job
    held = {"1f1b": "1F1B: stage s holds pp - s micro-batches in flight",
            "gpipe": "GPipe: every stage holds every micro-batch",
            "interleaved": f"interleaved 1F1B over {job.chunks} chunks a device"}[job.schedule] \
        if job.train else "serving: each stage its layers' weights and KV-cache"
    split = "layers " + ",".join(map(str, job.layers_per_stage)) if job.layers_per_stage \
        else "equal layers a stage"
    lines = ["", f"Per pipeline stage, GPU GiB ({held}; {split}"
             + (f"; {skipped} stages between not shown" if skipped else "") + "):",
             f"  {'part':<{width}}" + "".join(f"  {'stage ' + str(s):>9}" for s in stages)]
    for n in names:
        held = [{x.name: x.bytes for x in plan.stages[s] if x.where == "gpu"}.get(n)
                for s in stages]
        lines.append(f"  {n:<{width}}" + "".join(
            f"  {'-' if b is None else format(b / GIB, '.2f'):>9}" for b in held))
    lines.append(f"  {'total, gpu':<{width}}" + "".join(
        f"  {gpu_bytes(plan.stages[s]) / GIB:9.2f}" for s in stages))
    ratio_ = imbalance(plan)
    lines.append(f"  stage {plan.stage} decides the GPU fit"
                 + (f"; largest over smallest {ratio_:.2f}x" if ratio_ else ""))
    return lines + balance_lines(plan)


def balance_lines(plan: Plan) -> list[str]:
    """The ways to even the stages out, each with its stages' peaks and its cost."""
    if not plan.balancing:
        return []
    now, gpu = gpu_bytes(plan.stages[plan.stage]), plan.machine.gpu
    lines = ["", "To even the stages out (each alone):"]
    for o in plan.balancing:
        peak = max(o.stages_gpu)
        fit = "" if gpu is None else (f"; fits in the GPU's {_gib(gpu)}" if peak <= gpu
                                      else f"; still over the GPU's {_gib(gpu)}")
        shown = o.stages_gpu if len(o.stages_gpu) <= 8 else \
            [o.stages_gpu[s] for s in plan.stages]
        lines.append(f"  {o.name} ({o.how}): stages {', '.join(f'{b / GIB:.1f}' for b in shown)}"
                     f" GiB, the largest {_gib(peak)} against {_gib(now)} now{fit}; {o.cost}")
    return lines


def _fitting_split(plan: Plan) -> Option | None:
    """The balanced split, where it makes the job fit the GPU."""
    return next((o for o in plan.balancing if o.layers_per_stage and plan.machine.gpu
                 is not None and max(o.stages_gpu) <= plan.machine.gpu), None)


def answer(plan: Plan) -> list[str]:
    """The first lines: the GPU's fit, the host's split, the host work's time."""
    m, job = plan.machine, plan.job
    lines = []
    if plan.gpu_total:
        fit = plan.gpu_fits
        lines.append(f"GPU: {_gib(plan.gpu_total)} a GPU; " + (
            m.gpu_source if fit is None else
            f"fits in its {_gib(m.gpu)} ({m.gpu_source})" if fit else
            f"does NOT fit in its {_gib(m.gpu)} ({m.gpu_source}): over by "
            f"{_gib(plan.gpu_total - m.gpu)}; --zero 3, --offload, --recompute or a smaller "
            "micro-batch would lower it" + (
                f"; so would {split.how}, which fits (below)"
                if (split := _fitting_split(plan)) else "")))
    short, slow = plan.host("short"), plan.host("slow")
    host = plan.host("DRAM") + slow + short
    if host:
        ranks = job.host_ranks
        lines.append(
            f"Host: {_gib(host)} for its {ranks} rank{'s' if ranks > 1 else ''}: "
            f"{_gib(plan.host('DRAM'))} in DRAM"
            + (f", {_gib(slow)} on the slow tier ({_slow_words(plan)})" if slow else "")
            + (f"; {_gib(short)} fit nowhere: the host is too small" if short else ""))
    steps = [t for t in plan.timed if t.work.per != "checkpoint"]
    doubt = [c for c in (_checked(plan, t) for t in steps) if c and not c.trusted]
    if steps and m.timed and doubt:
        lines.append(f"Host memory-bound work: {doubt[0].untrusted()}")
    elif steps and m.timed:
        placed = sum(t.ns for t in steps)
        fast = sum(t.fast_ns for t in steps)
        per = "decode step" if any(t.work.per == "decode step" for t in steps) else "step"
        lines.append(f"Host memory-bound work: {_ns(placed)} a {per} as placed" + (
            ", all in DRAM" if plan.step_slow == 0 else
            f" with {plan.step_slow:.0%} of its bytes on the slow tier ({_ns(fast)} were "
            f"it all in DRAM, {placed / fast:.2f}x)"))
    elif steps:
        lines.append("Host memory-bound work: not predicted: node "
                     f"{m.host[0].nodes[0]} has no calibration here (`cxlbench calibrate` "
                     "measures it, about five minutes)")
    return lines


def _checked(plan: Plan, t):
    """The model's error on this machine's checked cases of the work's kind (None: none
    checked here)."""
    return plan.machine.checked.get(CHECKED_BY.get(t.work.name))


def _time(plan: Plan, t, ns: float | None) -> str:
    """A predicted time, or "untrusted" where the model missed this work's kind here."""
    c = _checked(plan, t)
    return "untrusted" if c and not c.trusted else _ns(ns)


def _slow_words(plan: Plan) -> str:
    """The slow tier in a few words: its nodes, or none, and where its speed came from
    (a profile by its name and factors; the whole source is under the tables)."""
    t = plan.machine.host[1]
    nodes = f"node{'s' if len(t.nodes) > 1 else ''} {','.join(map(str, t.nodes))}" \
        if t.nodes else "none here"
    if t.cal is None:
        return nodes
    found = re.search(r"profile (\S+)", t.cal.source) if t.cal.kind == "profile" else None
    if found and found.group(1) in calibration.profiles():
        p = calibration.profiles()[found.group(1)]
        return (f"{nodes}; assumed: profile {found.group(1)}, {p['latency']:g}x latency, "
                f"{p['bandwidth']:g}x bandwidth")
    return f"{nodes}; {t.cal.kind}"


def render(plan: Plan) -> str:
    job, m = plan.job, plan.machine
    lines = [shape(job), *("  " + line for line in answer(plan)), ""]
    width = max(len("total, host"), *(len(p.part.name) for p in plan.placed))
    lines += [f"Per device ({device(plan)}):",
              f"  {'part':<{width}}  {'GiB':>8}  where  formula"]
    lines += [f"  {p.part.name:<{width}}  {p.part.bytes / GIB:8.2f}  {p.part.where:<5}  "
              f"{p.part.formula}" for p in plan.placed]
    for where in ("gpu", "host"):
        total = sum(p.part.bytes for p in plan.placed if p.part.where == where)
        if total:
            lines.append(f"  {'total, ' + where:<{width}}  {total / GIB:8.2f}")
    lines += stage_table(plan)
    host = sorted((p for p in plan.placed if p.part.where == "host"), key=lambda p: p.order)
    if host:
        lines += ["", f"Placement on one host ({job.host_ranks} rank"
                  f"{'s' if job.host_ranks > 1 else ''}), in turn: DRAM first to the part "
                  "losing the most predicted time a byte on the slow tier:",
                  f"  {'part':<{width}}  {'GiB':>8}  {'DRAM':>8}  {'slow':>8}  why"]
        lines += [f"  {p.part.name:<{width}}  {p.total / GIB:8.2f}  {p.fast / GIB:8.2f}  "
                  f"{p.slow / GIB:8.2f}  {p.reason}" for p in host]
    if plan.timed:
        w = max(len(t.work.name) for t in plan.timed)
        lines += ["", "Predicted time of the host's memory-bound work (calibrated tier model):",
                  f"  {'work':<{w}}  {'per':<11}  {'placed':>9}  {'all DRAM':>9}  "
                  f"{'all slow':>9}  what it moves"]
        lines += [f"  {t.work.name:<{w}}  {t.work.per:<11}  {_time(plan, t, t.ns):>9}  "
                  f"{_time(plan, t, t.fast_ns):>9}  {_time(plan, t, t.slow_ns):>9}  "
                  f"{t.work.formula}"
                  + (f"; link {t.work.link_bytes / GIB:.2f} GiB a GPU" if t.work.link_bytes
                     else "") for t in plan.timed]
        checks = {c.benchmark: c for c in (_checked(plan, t) for t in plan.timed) if c}
        lines += [f"  model error here: {c.words()}"
                  + ("" if c.trusted else f": past {UNTRUSTED:.0%}, its times withheld")
                  for c in checks.values()]
        if not checks:
            lines.append("  model error here: no checked case of these kinds on this "
                         "machine (cxlbench run model-check measures them)")
        lines += [f"  {t.work.name}: {_ns(t.best[1])} with {t.best[0]:.0%} in DRAM "
                  f"(interleaved {ratio(t.best[0], 1 - t.best[0])} DRAM:slow), "
                  f"{1 - t.best[1] / t.ns:.0%} less than as placed: both tiers' bandwidth "
                  "at once" for t in plan.timed
                  if t.best and _time(plan, t, t.ns) != "untrusted"]
    lines += ["", "Where the figures come from:"]
    for t in m.host:
        lines.append(f"  {t.name}: {_gib(t.capacity) if t.capacity != float('inf') else 'unbounded'}"
                     f" ({t.capacity_source}); speed: {t.speed_source}")
    lines.append(f"  GPU: {m.gpu_source}")
    if any(t.work.link_bytes for t in plan.timed):
        lines.append(f"  host-GPU link: {LINK_GBS:g} GB/s ({LINK_SOURCE})")
    return "\n".join(lines)


def as_dict(plan: Plan) -> dict:
    """The plan as --json prints it: strict JSON (no NaN or infinity, which JSON lacks)."""
    job, m = plan.job, plan.machine
    return _finite({
        "shape": shape(job), "answer": answer(plan),
        "job": dataclasses.asdict(job), "parameters": params(job),
        "device": device(plan), "stage": plan.stage,
        "stages": [{"stage": s, "gpu": gpu_bytes(parts),
                    "parts": {x.name: x.bytes for x in parts if x.where == "gpu"}}
                   for s, parts in plan.stages.items()],
        "imbalance": imbalance(plan),
        "balance": [{"option": o.name, "how": o.how, "stages_gpu": list(o.stages_gpu),
                     "layers_per_stage": list(o.layers_per_stage), "step_time": o.step,
                     "moved": o.moved, "cost": o.cost} for o in plan.balancing],
        "parts": [{**dataclasses.asdict(p.part), "host_bytes": p.total if
                   p.part.where == "host" else 0, "dram": p.fast, "slow": p.slow,
                   "short": p.short, "why": p.reason} for p in plan.placed],
        "total": {where: sum(p.part.bytes for p in plan.placed if p.part.where == where)
                  for where in ("gpu", "host")},
        "gpu": {"capacity": m.gpu, "source": m.gpu_source, "fits": plan.gpu_fits},
        "host": {"ranks": job.host_ranks, "dram": plan.host("DRAM"),
                 "slow": plan.host("slow"), "short": plan.host("short"),
                 "step_slow_share": plan.step_slow,
                 "tiers": [{"name": t.name, "nodes": list(t.nodes),
                            "capacity": None if t.capacity == float("inf") else t.capacity,
                            "capacity_source": t.capacity_source,
                            "speed": t.cal.kind if t.cal else None,
                            "speed_source": t.speed_source} for t in m.host]},
        "work": [{"name": t.work.name, "per": t.work.per, "formula": t.work.formula,
                  "dram_share": t.share, "ns": t.ns, "all_dram_ns": t.fast_ns,
                  "all_slow_ns": t.slow_ns, "link_bytes": t.work.link_bytes,
                  "better": {"dram_share": t.best[0], "ns": t.best[1]} if t.best else None}
                 for t in plan.timed],
        "curve": [{"slow_share": s, "ns": ns} for s, ns in plan.curve],
    })


def _finite(value, where: str = "plan"):
    """`value`, every float in it finite; UserError naming the first that is not (its
    inputs are bounded, so one would be the model's fault, said rather than printed)."""
    if isinstance(value, dict):
        return {k: _finite(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"{where} is {value}, not a finite number: the plan cannot be "
                        "written as JSON (please report this job)")
    return value
