"""The optimizer step of training: one fused Adam or AdamW pass over the parameters, their
gradients and both moments (and in mixed precision the fp32 master copy), each in its
own buffer, so "parameters in DRAM, optimizer state on CXL" is one --set. Parameters per
second, GB/s of traffic (28 bytes a parameter either way), and beside them one pass of the
STREAM triad over the same three buffers in the same repetition. Both start from memory:
every buffer is evicted from the caches after it is filled. of_triad is the step's memory
traffic over the triad's, write-allocate reads counted on both sides (the triad's stores
pull their lines in; the step's fp32 stores go to lines it has just read). It exceeds 1
where a core's misses in flight, not the memory, set the limit: the triad spends a third
of them on allocating writes, the step's writes cost none. Every step is checked against
numpy's."""
from __future__ import annotations

import numpy as np

from ..memory import native
from ..options import Option, pick
from ..workloads import optimizer as workload
from ..workloads.optimizer import MEMORY, TRAFFIC, State, check_step, count, sample, sizes
from .bandwidth import Streams
from .common import workload_seconds, Measurement, check_placement, measure, place, predict, resolve_cpus

NAME = "optimizer"
TITLE = "Optimizer steps"
DESCRIPTION = "fused Adam/AdamW steps over placed parameters, gradients and optimizer state " \
              "(M params/s, GB/s, fraction of the triad on the same buffers)"
BUFFERS = ("params", "grads", "states")     # states: both moments (and the master copy)
OPTIONS = {**workload.OPTIONS,
           "cold": Option("cold", "bool", True, "evict every buffer before the step (false: "
                          "the step finds them where the fill left them, a state the caches "
                          "hold in the caches: the kernel's own work, as calibrate measures "
                          "it; the model predicts cold steps only)"),
           **pick("threads", "cpus", "mem", "page", "isa", "repeat", "warmup", "tolerance",
                  "timeout")}
unused = workload.unused


def validate(params: dict, topology) -> None:
    native.kernel("triad").choose_isa(params["isa"])
    check_placement(params, resolve_cpus(params), topology,
                    sizes(count(params), params["precision"]))


def estimate(params: dict, figures) -> float:
    """Seconds of the case's work (common.workload_seconds): the state placed, then each
    repetition's fresh random state (four draws a parameter, State.fill), its conversion,
    eviction and the step's traffic, and the triad's pass over the same buffers where
    asked."""
    n, precision = count(params), params["precision"]
    placed = sum(sizes(n, precision).values())
    per_rep = n * MEMORY[precision] + (placed if params["triad"] else 0) + placed   # evict
    return workload_seconds(params, figures, "params", placed, per_rep,
                            numpy_per_rep=placed, draws_per_rep=4 * n)


def run(params: dict) -> Measurement:
    n, precision = count(params), params["precision"]
    isa = native.kernel("triad").choose_isa(params["isa"])    # both have all three
    cpus = resolve_cpus(params)
    buffers = place(params, cpus, sizes(n, precision))
    st = State.of(buffers, n, precision)
    rng = np.random.default_rng(params["seed"])
    triad, triad_bytes = native.kernel("triad"), sizes(n, precision)["params"] // 4096 * 4096
    step, cold = 0, True

    def evict(bufs) -> None:
        """Untimed: the next timed region reads memory, not what a fill left cached."""
        nonlocal cold
        for b in bufs:
            cold &= native.evict(b.addr, b.size)

    def bound() -> float:
        """One pass of the triad a = b + s c over grads, params and states (clobbering
        them), from memory: its GB/s, the write-allocate reads of a counted."""
        streams = Streams(triad, [buffers[1], buffers[0], buffers[2]], cpus, triad_bytes)
        evict(buffers)
        r = native.run_kernel(triad, isa, [b.addr for b in (buffers[1], buffers[0], buffers[2])],
                              triad_bytes, 1, cpus, step + 2)
        streams.check(r, 1, step + 2)
        per_step = triad.bytes_read + 2 * triad.bytes_written
        return per_step * (triad_bytes // triad.elem_bytes) / r.ns

    def once() -> dict[str, float]:
        nonlocal step
        step += 1
        rep = {}
        if params["triad"] and triad_bytes:
            rep["triad"] = bound()
        st.fill(rng)            # a fresh step's values (and the triad's clobbered)
        idx = sample(n, len(cpus), rng)
        before = (st.master(idx).copy(), st.grad(idx).copy(), st.m[idx].copy(), st.v[idx].copy())
        if params["cold"]:
            evict(buffers)
        ns = native.adam(st.p, st.g, st.m, st.v, st.w, params["optim"], precision, isa,
                         params["lr"], (params["beta1"], params["beta2"]), params["eps"],
                         params["weight_decay"], step, cpus)
        check_step(st, idx, before, params, step)
        rep.update(params=n / ns * 1e3, bandwidth=n * TRAFFIC[precision] / ns)
        if "triad" in rep:
            rep["of_triad"] = n * MEMORY[precision] / ns / rep["triad"]
        return rep

    units = {"params": "M/s", "bandwidth": "GB/s"}
    if params["triad"] and triad_bytes:
        units.update(triad="GB/s", of_triad="ratio")
    m = Measurement(kernel=f"{params['optim']}-{precision}", isa=isa, cpus=cpus, units=units,
                    info={"params": n, "bytes_per_param": TRAFFIC[precision],
                          "threads": len(cpus), "triad_bytes": triad_bytes})
    m = measure(m, params, buffers, once)
    m.info["evicted"] = cold and params["cold"]  # False off x86-64: its tail may be cached
    if params["cold"]:
        predict(m, buffers[2], workload.step_demand(n, precision), "params", 1e3)
    return m

