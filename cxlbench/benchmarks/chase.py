"""Idle latency: one thread chases pointers around a random cycle, one pointer per line.

The buffer is walked one locality window at a time (`window`, default 256 KiB: multichase's
64 pages of 4 KiB), lines in random order within it, so consecutive loads land far enough
apart that prefetchers and open DRAM rows do not shorten an idle latency, while the
window's pages still fit the first-level TLB. `window=0` walks the whole buffer at random
(TLB misses included). Page size is its own knob (`page`).

Knobs: `lines_per_page` (TLB reach: lines visited in a page before moving to the next;
it replaces the window, its rounds running over every page of the buffer),
`chains` (memory-level parallelism: independent chains walked in lockstep), and `dist`
(the distribution of short rdtscp-timed batches: p50 to p99.99, each where enough batches
lie above it, and a histogram)."""
from __future__ import annotations

import numpy as np

from ..errors import CheckError, UserError
from ..memory import PAGE_SIZES, native
from ..options import Option, pick
from .common import Measurement, check_placement, measure, place, resolve_cpus

NAME = "chase"
TITLE = "Idle latency"
BUFFERS = ("chain",)                # the cycle walked
DESCRIPTION = "idle load-to-use latency: dependent loads around a random cycle (ns per load)"
OPTIONS = {
    **pick("size", "mem", "page", "cpus", "repeat", "warmup", "tolerance", "timeout",
           size=256 << 20),
    "loads": Option("loads", "int", 0, "loads per repetition; 0 picks max(lines, 2^20) "
                    "capped at 2^22", min=0),
    "seed": Option("seed", "int", 1, "seed of the random cycle", min=0),
    "window": Option("window", "size", 256 << 10, "locality window: lines are visited in "
                     "random order one window at a time; 0: the whole buffer", "bytes", min=0,
                     multiple=64),
    "lines_per_page": Option("lines_per_page", "int", 0, "lines visited in a page before "
                             "moving to another, round after round over every page (TLB "
                             "reach; replaces the window; a page's lines or more: one page "
                             "at a time); 0: off", min=0),
    "chains": Option("chains", "int", 1, "independent chains walked by one thread "
                     "(memory-level parallelism)", min=1, max=16),
    "dist": Option("dist", "bool", False, "time batches with rdtscp: percentiles and a "
                   "histogram"),
    "batch": Option("batch", "int", 16, "dependent loads per timed batch (with dist)",
                    min=1, max=4096),
}
# Building the cycle, a line, for the estimate (native chase_build: what the quick suite's
# 256 MiB-1 GiB cases took past placing and chasing on the EPYC VM, 40-90 ns a line).
CYCLE_S = 40e-9
PERCENTILES = {"p50": 50, "p90": 90, "p99": 99, "p99.9": 99.9, "p99.99": 99.99}
MIN_ABOVE = 100     # batches above a percentile, at the least, for it to be reported
COVERED = 0.25      # of the kernel's span, the least its timed batches may add up to
# The pooled distribution's quantiles kept for the report's CDF (those MIN_ABOVE decide).
CDF_Q = (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999,
         0.99995, 0.99999)


def validate(params: dict, topology) -> None:
    if params["dist"] and params["chains"] > 1:
        raise UserError("chase: dist and chains > 1 do not mix (the distribution is of one chain)")
    if params["size"] // 64 < 2 * params["chains"]:
        raise UserError(f"chase: {params['size']} bytes is too small for {params['chains']} chains")
    check_placement(params, resolve_cpus({**params, "threads": 1}), topology, BUFFERS)


def estimate(params: dict, figures) -> float:
    """Seconds of the case's work at the node's figures: the buffer placed, its cycle
    built, and every repetition's loads at the working set's latency (chains share a
    repetition's loads)."""
    f = figures.of(params["mem"])
    size = params["size"]
    loads = params["loads"] or min(max(size // 64, 1 << 20), 1 << 22)
    reps = params["warmup"] + params["repeat"]
    return size / f.touch + size // 64 * CYCLE_S + \
        reps * loads * f.latency_ns(size) * 1e-9 / params["chains"]


def run(params: dict) -> Measurement:
    cpu = resolve_cpus({**params, "threads": 1})
    (buf,) = place(params, cpu, BUFFERS)
    size, chains = params["size"], params["chains"]
    lines = size // 64
    window = chase_window(params)
    order = native.chase_build(buf.alloc, size, window, PAGE_SIZES[buf.page],
                               params["seed"], params["lines_per_page"])
    loads = params["loads"] or min(max(lines, 1 << 20), 1 << 22)
    walker = Walker(buf.addr, order)
    info = {"loads": loads, "lines": lines, "window": min(window or size, size)}
    if params["dist"]:
        once, units = _distribution(walker, loads, params["batch"], cpu, info,
                                    params["warmup"])
    elif chains > 1:
        once, units = _parallel(walker, loads, chains, cpu)
    else:
        once, units = _single(walker, loads, cpu)
    m = Measurement(kernel="chase", isa="scalar", cpus=cpu, units=units, info=info)
    return measure(m, params, [buf], once)


def chase_window(params: dict) -> int:
    """The window chase_build gets: the option, or 0 (all) under the TLB knob."""
    return 0 if params.get("lines_per_page") else params["window"]


class Walker:
    """Positions on the cycle, and the check that each walk ended where the recorded
    order says (else loads were skipped or the links are wrong)."""

    def __init__(self, base: int, order: np.ndarray):
        self.base, self.order, self.lines = base, order, len(order)

    def addr(self, pos: int) -> int:
        return self.base + int(self.order[pos % self.lines]) * 64

    def expect(self, end: int, pos: int, loads: int) -> int:
        pos = (pos + loads) % self.lines
        if end != self.addr(pos):
            raise CheckError(f"chase ended at line {(end - self.base) // 64}, expected line "
                             f"{int(self.order[pos])} after {loads} loads")
        return pos


def _single(w: Walker, loads: int, cpu):
    kernel, pos = native.kernel("chase"), 0

    def once() -> dict[str, float]:
        nonlocal pos
        r = native.run_chase(kernel, cpu, loads, start=w.addr(pos))
        pos = w.expect(r.end, pos, loads)
        return {"latency": r.ns / loads}
    return once, {"latency": "ns"}


def _parallel(w: Walker, loads: int, chains: int, cpu):
    """N chains a fixed distance apart on the one cycle: their loads are independent."""
    one, mlp = native.kernel("chase"), native.kernel("chase_mlp")
    per_chain = max(loads // chains, 1)
    spacing = w.lines // chains
    starts = native.aligned_empty(chains, np.uint64)
    pos = [c * spacing for c in range(chains)]

    def once() -> dict[str, float]:
        starts[:] = [w.addr(p) for p in pos]
        r = native.run_chase(mlp, cpu, per_chain, starts=native.address(starts),
                             chains=chains)
        for c in range(chains):
            pos[c] = w.expect(int(starts[c]), pos[c], per_chain)
        latency = r.ns / (per_chain * chains)
        base = native.run_chase(one, cpu, per_chain, start=w.addr(pos[0]))
        pos[0] = w.expect(base.end, pos[0], per_chain)
        # achieved parallelism: how many loads were in flight, against a single chain
        return {"latency": latency, "parallelism": (base.ns / per_chain) / latency}
    return once, {"latency": "ns", "parallelism": "loads"}


def _distribution(w: Walker, loads: int, batch: int, cpu, info: dict, warmup: int):
    kernel, pos = native.kernel("chase_dist"), 0
    d = Distribution(loads, batch, info, warmup)

    def once() -> dict[str, float]:
        nonlocal pos
        r = native.run_chase(kernel, cpu, d.loads, start=w.addr(pos), batch=batch,
                             ticks=d.addr)
        pos = w.expect(r.end, pos, d.loads)
        return d.summarise(r.ns)
    return once, d.units


class Distribution:
    """A chase timed in short batches (multichase's and MIO's way): each batch's ticks less
    the timer's own cost, measured here before the run, in ns at the TSC rate measured
    against the kernel's CLOCK_MONOTONIC_RAW (never assumed), per load. A percentile is
    reported only where at least MIN_ABOVE batches of a repetition lie above it (fewer
    would decide it alone); info says what each stands on and what was left out, and
    keeps the quantiles of the timed repetitions' batches pooled (the report's CDF; the
    first `warmup` summaries are left out of it) and a histogram."""

    def __init__(self, loads: int, batch: int, info: dict, warmup: int = 0):
        timer = native.timer_calibrate(20)
        self.batch, self.batches = batch, max(loads // batch, 1)
        self.ticks = native.aligned_empty(self.batches, np.uint64)
        self.addr = native.address(self.ticks)
        if timer["tsc_available"]:
            self.scale, self.overhead = 1e9 / timer["tsc_hz"], timer["tsc_overhead_cycles"]
        else:
            self.scale, self.overhead = 1.0, timer["clock_overhead_ns"]
        self.names = supported(self.batches)
        self.info, self.pooled, self.warmup = info, [], warmup
        info.update(batch=batch, batches=self.batches,
                    timer="rdtscp" if timer["tsc_available"] else "CLOCK_MONOTONIC_RAW",
                    timer_overhead=self.overhead, tsc_hz=timer["tsc_hz"],
                    percentiles={name: _above(self.batches, q)
                                 for name, q in PERCENTILES.items()},
                    left_out=[name for name in PERCENTILES if name not in self.names])

    @property
    def loads(self) -> int:
        return self.batches * self.batch

    @property
    def units(self) -> dict[str, str]:
        return {"latency": "ns", **{name: "ns" for name in self.names}}

    def summarise(self, span_ns: int) -> dict[str, float]:
        """One repetition's figures from the ticks; span_ns, the kernel's own clock_gettime
        span around the batches, checks the ticks' unit."""
        timed = float(self.ticks.sum()) * self.scale
        if timed > span_ns * 1.05:
            raise CheckError(f"chase dist: batches add up to {timed / 1e6:.2f} ms inside a "
                             f"{span_ns / 1e6:.2f} ms run: the ticks are not in the unit "
                             f"assumed ({self.info['timer']})")
        # The batches fill most of the span: a timer pair and the loads, against a gap of
        # a store and a branch (46 % of it where one load from L1 is a batch, on an EPYC).
        if timed < span_ns * COVERED:
            raise CheckError(f"chase dist: batches add up to {timed / 1e6:.2f} ms of a "
                             f"{span_ns / 1e6:.2f} ms run: the timer ({self.info['timer']}) "
                             f"does not keep time with the clock here")
        per_load = np.maximum(self.ticks - self.overhead, 0) * self.scale / self.batch
        out = {"latency": float(per_load.mean())}
        out.update({name: float(np.percentile(per_load, PERCENTILES[name]))
                    for name in self.names})
        if self.warmup:
            self.warmup -= 1
            return out
        self.pooled.append(per_load)
        allv = np.concatenate(self.pooled)
        qs = [q for q in CDF_Q if _above(len(allv), q * 100) >= MIN_ABOVE]
        self.info["cdf"] = {"q": qs, "ns": [round(float(v), 3) for v in np.quantile(allv, qs)],
                            "samples": len(allv)}
        # log-spaced bins; batches at or under the timer's overhead read as 0: first bin
        edges = np.geomspace(max(allv.min(), 0.1), max(allv.max(), 0.2), 25)
        counts, _ = np.histogram(np.clip(allv, edges[0], edges[-1]), bins=edges)
        self.info["histogram"] = {"edges_ns": [round(float(e), 3) for e in edges],
                                  "counts": counts.tolist()}
        return out


def _above(samples: int, q: float) -> int:
    """Samples of `samples` above the q-th percentile."""
    return int(samples * (100 - q) / 100 + 1e-9)    # 99.9: not 0.0999..


def supported(samples: int) -> list[str]:
    """The percentiles `samples` batches a repetition decide: MIN_ABOVE or more above."""
    return [name for name, q in PERCENTILES.items() if _above(samples, q) >= MIN_ABOVE]
