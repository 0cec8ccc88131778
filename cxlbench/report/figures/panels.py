"""Which rows of a figure share a panel, and what tells the rows of a panel apart. Jobs
that differ in a setting other than the figure's axis get a panel each (never pooled
under one label); within a panel, the x positions are the axis parameters that vary
there (or, where none does, another varying setting but placement), and the legend
names only what varies among the rest: where that is more than a reader can tell apart
by colour, the panel is divided by one of those settings."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pandas as pd

from . import words
from .params import QUIET, _moving, _params
from ...options import split_buffer_option

PLACEMENT = ("mem", "page")
MOST_SERIES = 8         # lines or bars in one panel whose colours a reader tells apart


@dataclass
class Panel:
    rows: pd.DataFrame      # its rows of the figure's frame, their index kept
    title: str              # what sets it apart from the figure's other panels; '' alone
    axis: list[str]         # the parameters its x positions are
    groups: list[str]       # each row's x position in words ('' where it has none)
    series: list[str]       # each row's legend name in words ('' where nothing varies)


def _placement(key: str) -> bool:
    """Where memory is (mem, page and each buffer's): what a legend compares, so never
    what a panel's x positions are made of."""
    return key in PLACEMENT or bool(split_buffer_option(key))


def _constant(ps: list[dict], key: str):
    """The one value every row gives key, or None where one lacks it or they differ."""
    values = {repr(p.get(key, ...)) for p in ps}
    return ps[0][key] if len(values) == 1 and key in ps[0] else None


def split(frame: pd.DataFrame, axis=(), exclude=(), runs: bool = True,
          promote: bool = True) -> list[Panel]:
    """The figure's panels: a job's rows go with those of the jobs that fix the same
    settings (the axis and `exclude` aside) and vary the same axis parameters (a job at
    one point of the axis, with those that vary it). runs: the run's label starts a
    legend name where the frame holds several; promote: a panel whose axis parameters do
    not vary takes another setting (not placement) as its x positions."""
    family = str(frame["benchmark"].iloc[0]) if "benchmark" in frame and len(frame) else None
    ps = _params(frame)
    jobs = list(frame["job"]) if "job" in frame else [""] * len(ps)
    quiet = QUIET | set(exclude)
    moving = _moving(ps, quiet | set(axis))
    jobs_at = {job: [i for i, j in enumerate(jobs) if j == job] for job in dict.fromkeys(jobs)}
    shape = {}          # job: (the settings it fixes, the axis parameters it varies)
    for job, at in jobs_at.items():
        own = [ps[i] for i in at]
        fixed = {k: v for k in moving if (v := _constant(own, k)) is not None}
        varied = _moving(own, quiet)
        shape[job] = (repr(sorted(fixed.items(), key=str)), fixed,
                      tuple(a for a in axis if a in varied))
    panels: dict[tuple, list[int]] = {}
    fixes: dict[tuple, dict] = {}
    for job, (sig, fixed, varies) in shape.items():
        # A job at one point of the axis joins the jobs of its settings that vary the
        # axis, where they all vary the same parameters.
        kinds = {v for s, _, v in shape.values() if s == sig and v}
        key = (sig, varies or (kinds.pop() if len(kinds) == 1 else ()))
        panels.setdefault(key, []).extend(jobs_at[job])
        fixes[key] = fixed
    apart = _apart(list(fixes.values()))
    multi = runs and "label" in frame and frame["label"].nunique() > 1
    out: list[tuple] = []       # (rows, what sets them apart, axis, groups, series)

    def add(at: list[int], what: list[str], shown: list[str]) -> None:
        """The panel of rows `at` (what: the settings that set it apart, in words); where
        its series are more than MOST_SERIES, a panel per value of the setting of fewest
        values among theirs (placement last)."""
        own = [ps[i] for i in at]
        rest = [k for k in _moving(own, quiet) if k not in shown]
        labels = list(frame["label"].iloc[at]) if multi else [""] * len(own)
        series = [", ".join(filter(None, (lb, words.setting(p, rest, family))))
                  for lb, p in zip(labels, own)]
        if len(set(series)) > MOST_SERIES and rest:
            by = min(rest, key=lambda k: (_placement(k), len({repr(p.get(k)) for p in own})))
            for v in dict.fromkeys(repr(p.get(by)) for p in own):
                part = [i for i in at if repr(ps[i].get(by)) == v]
                add(part, [*what, words.setting(ps[part[0]], [by], family)], shown)
            return
        # a panel at one point of the axis says which: its one group is named
        out.append((at, what, shown, [words.setting(p, shown or axis, family) for p in own],
                    series))

    for key, at in panels.items():
        at = sorted(at)
        varied = _moving([ps[i] for i in at], quiet)
        shown = [a for a in axis if a in varied]
        if not shown and promote:
            shown = [k for k in varied if not _placement(k)][:1]
        fix = fixes[key]
        add(at, [words.setting(fix, [k for k in sorted(fix) if repr(fix[k]) in apart[k]],
                               family)], shown)
    # each panel's title: its jobs, then the settings that set it apart; none alone
    return [Panel(frame.iloc[at], "\n".join(filter(None, (
                      ", ".join(dict.fromkeys(jobs[i] for i in at)), *what)))
                  if len(out) > 1 else "", shown, groups, series)
            for at, what, shown, groups, series in out]


def _apart(fixes: list[dict]) -> dict[str, set[str]]:
    """Each setting's values (repr) that set a panel apart: all but the one most panels
    fixing the setting share, where one value is the most common."""
    out = {}
    for k in {k for f in fixes for k in f}:
        values = Counter(repr(f[k]) for f in fixes if k in f)
        (top, n), *rest = values.most_common()
        out[k] = set(values) - ({top} if not rest or rest[0][1] < n else set())
    return out
