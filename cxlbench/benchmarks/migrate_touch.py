"""What a thread sees when it touches pages while they migrate: one CPU moves a buffer's
pages (move_pages or mbind, in batches) while a second keeps touching one line at a time,
each touch timed in C. Every touch of a run of size / 64 is of a distinct line and the
buffer is flushed before the lead and after the move, so the touches before the move give
the baseline and those in the tail the latency on the pages' new node, both from memory
rather than the caches; those overlapping the move give the spike (the worst touch) and
its length (first to last slow touch). The clock's own cost (an empty timed touch) is taken
off every touch. A touch that spanned an involuntary context switch of the toucher (the
scheduler ran something else) is counted apart as preempted, not as a stall; a control
run as long as the move, in which nothing moves, gives the noise floor the spike stands
on. The move itself can preempt the toucher (move_pages queues per-CPU work on every CPU
that holds LRU batches): more preempted touches than in the control are the move's."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..memory import native
from ..options import Option, pick
from . import migrate
from .common import Measurement, measure, place, resolve_cpus

NAME = "migrate_touch"
TITLE = "Touches during page migration"
BUFFERS = migrate.BUFFERS
skip = migrate.skip
DESCRIPTION = "touch latency while pages migrate: the spike (us) and its length"
OPTIONS = {
    **{k: v for k, v in migrate.OPTIONS.items() if k not in ("pages", "rest")},
    **pick("size", size=16 << 20),
    "access": Option("access", "choice", "read", "how the toucher touches: a load, or a "
                     "load and a store of the same value", choices=("read", "write"),
                     expand={"all": ("read", "write")}),
    "lead": Option("lead", "int", 5, "ms of touches before the move (the baseline)", min=1,
                   max=3_600_000, unit="ms"),
    "tail": Option("tail", "int", 2, "ms of touches after the move (and the flush after "
                   "it): the latency on the new node", min=0, max=3_600_000,
                   unit="ms"),
}
MAX_SAMPLES = 4 << 20       # 64 MiB of samples; touches past this are counted only
SLOW_FACTOR, SLOW_FLOOR_NS = 10, 1000
TIMELINE_BINS = 200
UNITS = {"move_time": "us", "bandwidth": "GB/s", "touch_baseline": "ns", "touch_max": "us",
         "touch_p99": "ns", "touch_after": "ns", "slow_touches": "touches", "stall": "us",
         "spike_window": "us", "preempted": "touches", "preempted_time": "us",
         "control_max": "us", "control_slow": "touches", "control_preempted": "touches"}


@dataclass
class Touches:
    """One run's touches, in order: touch i is sample i."""
    start: np.ndarray       # ns since the toucher began
    end: np.ndarray         # start + the time measured
    took: np.ndarray        # ns, the clock's own cost taken off
    preempted: np.ndarray   # spanned an involuntary context switch of the toucher
    cold: np.ndarray        # its line and the line's 128-byte pair untouched since a flush
    move_start: int
    move_end: int
    tail_start: int         # the flush after the move done


def preempted(start: np.ndarray, took: np.ndarray, switches: np.ndarray, flush_gap: int,
              window: int | None = None, check_ns: int | None = None) -> np.ndarray:
    """Which touches spanned an involuntary context switch of the toucher. It counts its
    switches after every touch over check_ns (a switch out and back takes longer) and every
    `window` touches, so a slow touch's count holds its own switches and those of any gap
    between touches since the count before. A switch takes microseconds, a gap between
    touches nanoseconds, so a slow touch with c switches counted spanned one unless c gaps
    since the count before were longer. took: as measured, the timer included; flush_gap:
    the index of the touch before the flush, whose gap holds no counted switch. window
    and check_ns default to the C toucher's (CXB_TOUCH_*)."""
    window = native.TOUCH_WINDOW if window is None else window
    check_ns = native.TOUCH_CHECK_NS if check_ns is None else check_ns
    n = start.size
    gap = np.zeros(n, dtype=np.int64)
    gap[:-1] = start[1:] - start[:-1] - took[:-1]
    if 0 <= flush_gap < n:
        gap[flush_gap] = 0
    counted = np.flatnonzero((took > check_ns) | (np.arange(1, n + 1) % window == 0))
    previous = np.concatenate([[0], counted[:-1]])
    flag = np.zeros(n, dtype=bool)
    suspect = (switches[counted] > 0) & (took[counted] > check_ns)
    for at, since in zip(counted[suspect], previous[suspect]):
        flag[at] = np.count_nonzero(gap[since:at] > took[at]) < switches[at]
    return flag


def touches(r: native.TouchResult, lines: int) -> Touches:
    """A run's samples with the timer's cost taken off, preempted touches flagged, and
    the cold touches marked: the first half of the `lines` after each flush (lead and
    tail). The walk reaches a line's 128-byte pair 32 sweeps (half the lines) after the
    line itself, and the adjacent-line prefetcher may have fetched it with its pair."""
    start, raw = r.samples[:, 0].astype(np.int64), r.samples[:, 1].astype(np.int64)
    tail = int(np.searchsorted(start, r.tail_start))
    index, fresh = np.arange(start.size), lines // 2
    return Touches(start, start + raw, np.maximum(raw - r.timer_ns, 0),
                   preempted(start, raw, r.switches, tail - 1),
                   (index < fresh) | ((index >= tail) & (index < tail + fresh)),
                   r.move_start, r.move_end, r.tail_start)


def spike(t: Touches, slow_ns: float) -> dict[str, float]:
    """The touches overlapping the move (or the control's wait): the worst, p99, slow ones
    and their sum and span, preempted ones counted apart."""
    during = (t.end > t.move_start) & (t.start < t.move_end)
    seen, lost = during & ~t.preempted, during & t.preempted
    out = {"preempted": int(lost.sum()), "preempted_time": float(t.took[lost].sum()) / 1000}
    if seen.any():
        slow = seen & (t.took > slow_ns)
        out.update(touch_max=float(t.took[seen].max()) / 1000,
                   touch_p99=float(np.percentile(t.took[seen], 99)),
                   slow_touches=int(slow.sum()), stall=float(t.took[slow].sum()) / 1000,
                   spike_window=float(t.end[slow].max() - t.start[slow].min()) / 1000
                   if slow.any() else 0.0)
    return out


def analyse(t: Touches) -> dict[str, float]:
    """A move's touches -> its metrics. The baseline and the latency after are medians of
    cold touches not preempted; slow touches are those overlapping the move, not preempted,
    and taking over SLOW_FACTOR x the baseline."""
    fair = t.cold & ~t.preempted
    before = t.took[fair & (t.end <= t.move_start)]
    after = t.took[fair & (t.start >= t.tail_start)]
    # Only what was observed: a toucher descheduled for the whole lead, move or tail
    # leaves those metrics out of this repetition rather than reporting a made-up value.
    out = {"move_time": (t.move_end - t.move_start) / 1000}
    if before.size:
        out["touch_baseline"] = float(np.median(before))
    if after.size:
        out["touch_after"] = float(np.median(after))
    return {**out, **spike(t, slow_threshold(out))}


def slow_threshold(metrics: dict[str, float]) -> float:
    return max(SLOW_FACTOR * metrics.get("touch_baseline", 0.0), SLOW_FLOOR_NS)


def control(t: Touches, slow_ns: float) -> dict[str, float]:
    """A control run's touches over its wait, judged by the move's threshold: the noise
    floor the move's spike stands on."""
    d = spike(t, slow_ns)
    out = {"control_preempted": d["preempted"]}
    if "touch_max" in d:
        out.update(control_max=d["touch_max"], control_slow=d["slow_touches"])
    return out


def timeline(t: Touches, bins: int = TIMELINE_BINS, span: float | None = None) -> dict:
    """The worst touch per time bin, preempted ones apart: enough to plot the spike
    without every sample."""
    span = span or float(t.start.max()) + 1
    edges = np.linspace(0, span, bins + 1)
    which = np.clip(np.searchsorted(edges, t.start, side="right") - 1, 0, bins - 1)
    worst, inside = {}, t.start < span
    for name, sel in (("max_ns", inside & ~t.preempted), ("preempted_ns", inside & t.preempted)):
        w = np.zeros(bins)
        np.maximum.at(w, which[sel], t.took[sel])
        worst[name] = [int(v) for v in w]
    return {"t_us": [round(e / 1000, 3) for e in edges[:-1]], **worst}


def validate(params: dict, topology) -> None:
    resolve_cpus({**params, "threads": 2})
    migrate.validate(params, topology)


def estimate(params: dict, figures) -> float:
    """Seconds of the case's work: migrate's (the buffer placed and moved back and forth
    each repetition), plus each repetition's touches before and after its move."""
    reps = params.get("warmup", 0) + params.get("repeat", 1)
    return migrate.estimate({**params, "pages": "written", "rest": 0, "warmup": 0,
                             "repeat": reps}, figures) + \
        reps * (params["lead"] + params["tail"]) / 1000


def run(params: dict) -> Measurement:
    src, dst = params["from"], params["to"]
    cpus = resolve_cpus({**params, "threads": 2})
    (buf,) = place(migrate.buffer_params(params), cpus[:1], migrate.BUFFERS)
    buf.alloc.fill_index(cpus[:1])
    check_move = migrate.Checker(buf, cpus[:1])
    size = buf.alloc.map_size
    lines = size // 64
    m = Measurement(kernel=migrate.KERNELS[params["method"]], isa="scalar", cpus=cpus,
                    units=UNITS,
                    info={"pages": check_move.pages, "from": src, "to": dst,
                          "mover_cpu": cpus[0], "toucher_cpu": cpus[1],
                          "slow": f"> max({SLOW_FACTOR} x baseline, {SLOW_FLOOR_NS} ns)",
                          "timer": "CLOCK_MONOTONIC_RAW, less timer_ns (an empty timed "
                                   "touch) on every touch",
                          "distinct_lines": lines})
    if src == dst:
        m.info["note"] = "source and destination are the same node: a baseline, no page moves"
    # Written once here, so the toucher's stores never fault while it measures.
    samples = np.ones((MAX_SAMPLES, 2), dtype=np.uint64)
    switches = np.ones(MAX_SAMPLES, dtype=np.uint8)

    def touch(control_ns: int = 0) -> tuple[native.TouchResult, Touches]:
        r = native.migrate_touch(buf.addr, size, dst, params["method"], params["batch"],
                                 params["access"] == "write", cpus,
                                 params["lead"] * 1_000_000, params["tail"] * 1_000_000,
                                 samples, switches, control_ns)
        return r, touches(r, lines)

    def once() -> dict[str, float]:
        r, t = touch()
        check_move(dst, r.unmoved)
        migrate.move(buf, src, params, check_move)  # home for the next repetition, untimed
        out = analyse(t)
        m.info.update(touches=r.touches, samples_kept=len(r.samples), timer_ns=r.timer_ns,
                      switches={"voluntary": r.voluntary, "involuntary": r.involuntary})
        span = float(t.start.max()) + 1
        m.info["timeline"] = {**timeline(t, span=span), "move_start_us": r.move_start / 1000,
                              "move_end_us": r.move_end / 1000}
        # The same span with nothing moving: what the scheduler and the machine add alone.
        c, ct = touch(max(r.move_end - r.move_start, 1))
        m.info["control"] = {"switches": {"voluntary": c.voluntary,
                                          "involuntary": c.involuntary},
                             "timeline": {**timeline(ct, span=span),
                                          "move_start_us": c.move_start / 1000,
                                          "move_end_us": c.move_end / 1000}}
        return {**out, **control(ct, slow_threshold(out)),
                "bandwidth": size / max(r.move_end - r.move_start, 1)}

    return measure(m, migrate.buffer_params(params), [buf], once)
