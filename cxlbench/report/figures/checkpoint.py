"""Checkpoint snapshots per destination, alone and beside a training step."""
from __future__ import annotations

import pandas as pd

from .draw import _metric, bars
from .params import _params


def _as_metric(frame: pd.DataFrame, metric: str, name: str, **params) -> pd.DataFrame:
    """The rows of `metric` as rows of `name`, with `params` added to each row's."""
    sub = _metric(frame, metric)
    return sub.assign(metric=name, params=[{**p, **params} for p in sub["params"]])


def checkpoint(frame, runs):
    ps = _params(frame)
    where = ("mem.dst",) if any("mem.dst" in p for p in ps) else ("mem",)
    quiet = frame[[p.get("interfere", "none") == "none" for p in frame["params"]]]
    yield bars(quiet if len(quiet) else frame, where, "bandwidth", key="checkpoint-bandwidth",
               family="checkpoint",
               title="Checkpoint snapshot GB/s per destination",
               measured="Snapshot bytes per second (GB/s) copied from src to dst in chunks "
                        "(each byte read once and written once), alone on the machine")
    busy = frame[[p.get("interfere", "none") != "none" for p in frame["params"]]]
    if busy.empty:
        return
    both = pd.concat([_as_metric(busy, "bandwidth", "bandwidth", snapshot="snapshot alone"),
                      _as_metric(busy, "bandwidth_shared", "bandwidth",
                                 snapshot="snapshot beside the step")], ignore_index=True)
    yield bars(both, where, "bandwidth", key="checkpoint-interference", family="checkpoint",
               title="Checkpoint GB/s with and without a training step beside it",
               measured="Snapshot GB/s alone and while a training-like step (interfere) runs "
                        "on the other CPUs, both timed in the same repetition")
    slow = pd.concat([_as_metric(busy, "step_slowdown", "slowdown",
                                 slowed="the step's slowdown"),
                      _as_metric(busy, "snapshot_slowdown", "slowdown",
                                 slowed="the snapshot's slowdown")], ignore_index=True)
    yield bars(slow, where, "slowdown", key="checkpoint-slowdown", family="checkpoint",
               title="What the training step and the snapshot lose to each other",
               measured="Time under interference over time alone (×): the step's mean step "
                        "time during the snapshot, and the snapshot's time, each against "
                        "its own run alone in the same repetition")


PLOTTERS = {"checkpoint": checkpoint}
