"""Many runs at once (a fleet of machines, or one machine's history): the fleet's spread at
each measured point, and the runs off it. Beyond FLEET runs a figure draws the fleet's
median and range and names the runs off it, rather than a line or bar per run."""
from __future__ import annotations

import pandas as pd

FLEET = 6               # more runs than this in one figure: the fleet view
FENCE = 1.5             # Tukey's: beyond 1.5 interquartile ranges of the fleet's quartiles
# Units whose smaller values are better (a time); every other metric's larger values are.
LOWER_IS_BETTER = {"ns", "us", "µs", "ms", "s", "cycles"}


def point_key(frame: pd.DataFrame) -> pd.Series:
    """What one measured point is across runs: its case, metric and parameters."""
    return frame["case"] + "\0" + frame["metric"] + "\0" + frame["params"].map(repr)


def many(frame: pd.DataFrame) -> bool:
    return frame["label"].nunique() > FLEET


def slower_sign(unit: str) -> int:
    """+1 where a larger value is slower (a time), -1 where it is faster (a rate)."""
    return 1 if unit in LOWER_IS_BETTER else -1


def off(frame: pd.DataFrame, point: list[str]) -> pd.DataFrame:
    """The rows (one run at one point, the columns `point` naming it) off the fleet: beyond
    the fence of the runs' medians at that point and with the fleet's median outside their
    own confidence interval (so off by more than their noise). Adds fleet (the fleet's
    median there), slower (the signed fraction by which the run is slower than the fleet:
    negative where faster), sorted slowest first."""
    if frame.empty:
        return frame.assign(fleet=[], slower=[])
    g = frame.groupby(point, sort=False)["median"]
    q1, q3 = g.transform(lambda v: v.quantile(0.25)), g.transform(lambda v: v.quantile(0.75))
    fleet = g.transform("median")
    fence = FENCE * (q3 - q1)
    beyond = (frame["median"] < q1 - fence) | (frame["median"] > q3 + fence)
    noise = (fleet < frame["ci_low"]) | (fleet > frame["ci_high"])
    sign = frame["unit"].map(slower_sign)
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


def view(frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """For a figure that draws each run on its own (a heatmap each, a curve each): where
    there are many runs, one row per point instead, labelled as the fleet, its median the
    runs' median and its interval their range; with the caption's words for that and the
    runs off the fleet. Fewer runs: the frame as it is, and no words."""
    if frame.empty or not many(frame):
        return frame, ""
    runs = frame["label"].nunique()
    point = point_key(frame)
    rows = []
    for _, g in frame.groupby(point, sort=False):
        r = g.iloc[0].to_dict()
        r.update(label=f"fleet of {runs}", machine="fleet", run="fleet",
                 median=g["median"].median(), ci_low=g["median"].min(),
                 ci_high=g["median"].max(), n=int(g["n"].min()),
                 values=g["median"].tolist())
        rows.append(r)
    words = (f" Shown for the {runs} runs together: each value is the median of the runs' "
             "medians, and where whiskers are drawn they span the runs' range, not a "
             "confidence interval. " + named(off(frame.assign(_point=point), ["_point"])))
    return pd.DataFrame(rows, columns=frame.columns), words.rstrip()
