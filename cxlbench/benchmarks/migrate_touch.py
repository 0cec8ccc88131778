"""What a thread sees when it touches pages while they migrate: one CPU moves a buffer's
pages (move_pages or mbind, in batches) while a second keeps touching one word of a page
at a time, each touch timed in C. The touches before the move give the baseline; those
overlapping it give the spike (the worst touch) and its length (first to last slow
touch); those in the tail after it, the latency on the pages' new node."""
from __future__ import annotations

import numpy as np

from .. import native
from ..options import Option, pick
from . import migrate
from .common import Measurement, measure, place, resolve_cpus

NAME = "migrate_touch"
DESCRIPTION = "touch latency while pages migrate: the spike (us) and its length"
OPTIONS = {
    **{k: v for k, v in migrate.OPTIONS.items() if k not in ("pages", "rest")},
    **pick("size", size=16 << 20),
    "access": Option("access", "choice", "read", "how the toucher touches: a load, or a "
                     "load and a store of the same value", choices=("read", "write"),
                     expand={"all": ("read", "write")}),
    "lead": Option("lead", "int", 5, "ms of touches before the move (the baseline)", min=1,
                   unit="ms"),
    "tail": Option("tail", "int", 2, "ms of touches after the move", min=0, unit="ms"),
}
MAX_SAMPLES = 4 << 20       # 64 MiB of samples; touches past this are counted only
SLOW_FACTOR, SLOW_FLOOR_NS = 10, 1000
TIMELINE_BINS = 200


def check(params: dict, topology) -> None:
    resolve_cpus({**params, "threads": 2})
    migrate.check(params, topology)


def analyse(samples: np.ndarray, move_start: int, move_end: int) -> dict[str, float]:
    """Touch samples (start ns, ns taken) -> the metrics of one move. Slow touches are
    those overlapping the move and taking over SLOW_FACTOR x the baseline."""
    start, took = samples[:, 0].astype(np.int64), samples[:, 1].astype(np.int64)
    # The second half of the lead (the first touches still miss in the toucher's caches),
    # or all of it where the toucher was descheduled then.
    lead = start + took <= move_start
    before = took[lead & (start >= move_start // 2)]
    before = before if before.size else took[lead]
    base = float(np.median(before)) if before.size else 0.0
    slow_ns = max(SLOW_FACTOR * base, SLOW_FLOOR_NS)
    during = (start + took > move_start) & (start < move_end)
    tail = start >= move_end
    # Only what was observed: a toucher descheduled for the whole lead, move or tail
    # leaves those metrics out of this repetition rather than reporting a made-up value.
    out = {"move_time": (move_end - move_start) / 1000}
    if before.size:
        out["touch_baseline"] = base
    if tail.any():
        out["touch_after"] = float(np.median(took[tail]))
    if during.any():
        slow = during & (took > slow_ns)
        out.update(touch_max=float(took[during].max()) / 1000,
                   touch_p99=float(np.percentile(took[during], 99)),
                   slow_touches=int(slow.sum()), stall=float(took[slow].sum()) / 1000,
                   spike_window=float((start[slow] + took[slow]).max() - start[slow].min())
                   / 1000 if slow.any() else 0.0)
    return out


def timeline(samples: np.ndarray, bins: int = TIMELINE_BINS) -> dict:
    """The worst touch per time bin: enough to plot the spike without every sample."""
    start, took = samples[:, 0], samples[:, 1]
    edges = np.linspace(0, float(start.max()) + 1, bins + 1)
    which = np.clip(np.searchsorted(edges, start, side="right") - 1, 0, bins - 1)
    worst = np.zeros(bins)
    np.maximum.at(worst, which, took)
    return {"t_us": [round(e / 1000, 3) for e in edges[:-1]],
            "max_ns": [int(w) for w in worst]}


def run(params: dict) -> Measurement:
    src, dst = params["from"], params["to"]
    cpus = resolve_cpus({**params, "threads": 2})
    (buf,) = place(migrate.buffer_params(params), cpus[:1])
    buf.alloc.fill_index(cpus[:1])
    check_move = migrate.Checker(buf, cpus[:1], max(src, dst) + 1)
    back = native.kernel(migrate.KERNELS[params["method"]])
    size = buf.alloc.map_size
    m = Measurement(kernel=back.key, isa="scalar", cpus=cpus,
                    units={"move_time": "us", "bandwidth": "GB/s", "touch_baseline": "ns",
                           "touch_max": "us", "touch_p99": "ns", "touch_after": "ns",
                           "slow_touches": "touches", "stall": "us", "spike_window": "us"},
                    info={"pages": check_move.pages, "from": src, "to": dst,
                          "mover_cpu": cpus[0], "toucher_cpu": cpus[1],
                          "slow": f"> max({SLOW_FACTOR} x baseline, {SLOW_FLOOR_NS} ns)"})
    if src == dst:
        m.info["note"] = "source and destination are the same node: a baseline, no page moves"
    # Written once here, so the toucher's sample stores never fault while it measures.
    samples = np.ones((MAX_SAMPLES, 2), dtype=np.uint64)

    def once() -> dict[str, float]:
        r = native.migrate_touch(buf.addr, size, dst, params["method"], params["batch"],
                                 params["access"] == "write", cpus,
                                 params["lead"] * 1_000_000, params["tail"] * 1_000_000,
                                 samples)
        check_move(dst, r.unmoved)
        # Untimed: the pages go home for the next repetition.
        check_move(src, native.run_kernel(back, "scalar", [buf.addr], size, src, cpus[:1],
                                          params["batch"]).checksum)
        m.info["touches"], m.info["samples_kept"] = r.touches, len(r.samples)
        m.info["timeline"] = {**timeline(r.samples), "move_start_us": r.move_start / 1000,
                              "move_end_us": r.move_end / 1000}
        return {**analyse(r.samples, r.move_start, r.move_end),
                "bandwidth": size / max(r.move_end - r.move_start, 1)}

    return measure(m, migrate.buffer_params(params), [buf], once)
