"""Many runs at once (a fleet of machines, or one machine's history): the fleet's spread at
each measured point, and the runs off it. Beyond FLEET runs a figure draws the fleet's
median and range and names the runs off it, rather than a line or bar per run."""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

FLEET = 6               # more runs than this in one figure: the fleet view
FENCE = 1.5             # Tukey's: beyond 1.5 interquartile ranges of the fleet's quartiles
# Units of a time or a slowdown (smaller is better); a rate (a unit per second) is better
# larger; any other unit (pages, touches, a ratio) has no side, and no run is called slower.
TIMES = {"ns", "us", "µs", "ms", "s", "cycles", "x"}


def point_key(frame: pd.DataFrame) -> pd.Series:
    """What one measured point is across runs: the benchmark, metric and unit, the case's
    parameters and the CPUs it ran on; not the case id, which numbers a sweep's cases as
    each machine expands it (bind:* on two nodes and on four)."""
    params = frame["params"].map(lambda p: json.dumps(p, sort_keys=True, default=str))
    return (frame["benchmark"].astype(str) + "\0" + frame["metric"] + "\0" +
            frame["unit"].astype(str) + "\0" + params + "\0" + frame["cpus_used"].astype(str))


def many(frame: pd.DataFrame) -> bool:
    return frame["label"].nunique() > FLEET


def slower_sign(unit: str) -> int:
    """+1 where a larger value is slower (a time), -1 where it is faster (a rate), 0 where
    the unit does not say."""
    unit = str(unit)
    return 1 if unit in TIMES else -1 if unit.endswith("/s") else 0


def off(frame: pd.DataFrame, point: list[str]) -> pd.DataFrame:
    """The rows (one run at one point, the columns `point` naming it) off the fleet: beyond
    the fence of the runs' medians at that point and with the fleet's median outside their
    own confidence interval (so off by more than their noise; with few repetitions that
    interval is narrow, and says little). Adds fleet (the fleet's median there) and slower
    (the fraction by which the run is slower than the fleet: negative where faster, NaN
    where the unit has no side), sorted slowest first."""
    if frame.empty:
        return frame.assign(fleet=[], slower=[])
    g = frame.groupby(point, sort=False)["median"]
    q1, q3 = g.transform(lambda v: v.quantile(0.25)), g.transform(lambda v: v.quantile(0.75))
    fleet = g.transform("median")
    fence = FENCE * (q3 - q1)
    beyond = (frame["median"] < q1 - fence) | (frame["median"] > q3 + fence)
    noise = (fleet < frame["ci_low"]) | (fleet > frame["ci_high"])
    sign = frame["unit"].map(slower_sign).replace(0, np.nan)
    slower = sign * (frame["median"] / fleet - 1)
    out = frame.assign(fleet=fleet, slower=slower)[beyond & noise & (fleet != 0)]
    return out.sort_values("slower", ascending=False)


def named(outliers: pd.DataFrame, most: int = 8) -> str:
    """A sentence naming the runs slower than the fleet (each at its worst point), or ''."""
    slow = outliers[outliers["slower"] > 0].drop_duplicates("label")
    if slow.empty:
        return ""
    names = [f"{r['label']} ({r['slower']:+.0%})" for _, r in slow.head(most).iterrows()]
    more = f" and {len(slow) - most} more" if len(slow) > most else ""
    return (f"Slower than the fleet by more than their noise (beyond {FENCE:g} interquartile "
            f"ranges of the fleet and with the fleet's median outside their own confidence "
            f"interval; each at its worst point): {', '.join(names)}{more}.")


def runs_text(labels: list[str]) -> str:
    """The runs a caption names: all of them, or a fleet's count and ends."""
    labels = sorted(set(labels))
    if len(labels) <= FLEET:
        return ", ".join(labels)
    return f"{len(labels)} ({labels[0]} to {labels[-1]})"


@dataclass
class View:
    """What a figure drawing each run on its own (a heatmap each, a curve each) draws."""
    frame: pd.DataFrame
    labels: list[str] | None    # the runs whose fleet the frame's rows are; None: not one
    words: str                  # the caption's naming of the runs off the fleet, or ''


def view(frame: pd.DataFrame) -> View:
    """Where there are many runs, one row per point, its median the runs' median and its
    interval their range, placement_ok only where every run's was; fewer runs: the frame
    as it is."""
    if frame.empty or not many(frame):
        return View(frame, None, "")
    labels = sorted(set(frame["label"]))
    point = point_key(frame)
    rows = []
    for _, g in frame.groupby(point, sort=False):
        r = g.iloc[0].to_dict()
        r.update(label=f"fleet of {len(labels)}", machine="fleet", run="fleet",
                 median=g["median"].median(), ci_low=g["median"].min(),
                 ci_high=g["median"].max(), n=int(g["n"].min()),
                 placement_ok=bool(g["placement_ok"].astype(bool).all()),
                 values=g["median"].tolist())
        rows.append(r)
    words = named(off(frame.assign(_point=point), ["_point"]))
    return View(pd.DataFrame(rows, columns=frame.columns), labels, words)
