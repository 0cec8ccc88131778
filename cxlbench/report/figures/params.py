"""The parameters of a frame's rows as figures show them: threads=all resolved, each
buffer's placement filled in, the options a case ignores left out; which of them vary
between the rows and which all rows share."""
from __future__ import annotations

import pandas as pd

from ... import benchmarks
from ...options import split_buffer_option
from ...paramtext import NOT_MEASURED, resolved
from . import words

# Parameters a caption never lists as fixed (they are in the legend, on an axis, or noise).
QUIET = set(NOT_MEASURED) | {"cpus"}


def _params(frame: pd.DataFrame) -> list[dict]:
    """Each row's parameters, with threads="all" resolved to the CPUs it ran on, a
    buffer's mem.<buffer> or page.<buffer> that some rows set filled in on the others
    with the case's mem or page (what that buffer had), and the options the case ignores
    left out."""
    families = frame["benchmark"] if "benchmark" in frame else [None] * len(frame)
    # A fleet's rows share few distinct (parameters, CPUs, family): each worked out once,
    # the rows that share it given the same dict (frame keeps the keys' objects alive).
    keys = [(id(p), cpus, name)
            for p, cpus, name in zip(frame["params"], frame["cpus_used"], families)]
    first = {}
    for key, p in zip(keys, frame["params"]):
        first.setdefault(key, p)
    done = {key: resolved(p, key[1]) for key, p in first.items()}
    own = {k: split[0] for p in done.values() for k in p if (split := split_buffer_option(k))}
    for key, p in done.items():
        p = {**{k: p.get(base) for k, base in own.items()}, **p}
        ignored = _ignored(key[2], p)
        done[key] = {k: v for k, v in p.items() if k not in ignored}
    return [done[key] for key in keys]


def _distinct(ps: list[dict]) -> list[dict]:
    """The rows' parameter dicts, each object once (_params shares them)."""
    return list({id(p): p for p in ps}.values())


def _ignored(family: str, params: dict) -> dict:
    """The options a case ignores (a preset's own tables, another operation's knobs): a
    caption or legend naming them would say something untrue of the case."""
    bench = benchmarks.family(family) if family else None
    if bench is None:
        return {}
    try:        # a run made before an option existed lacks it: its default stands in
        return bench.ignored({**{k: o.default for k, o in bench.options.items()}, **params})
    except (KeyError, TypeError, ValueError):
        return {}


def _moving(ps: list[dict], exclude=()) -> list[str]:
    """The names whose value differs between the rows that have them: a row without one
    (a case that ignores the option) neither varies it nor fixes it."""
    names = sorted({k for p in ps for k in p} - set(exclude))
    return [k for k in names if len({repr(p[k]) for p in ps if k in p}) > 1]


def varying(frame: pd.DataFrame, exclude=()) -> list[str]:
    """Parameters whose value differs between the rows (the legend), in a stable order."""
    return _moving(_distinct(_params(frame)), QUIET | set(exclude))


def fixed(frame: pd.DataFrame, exclude=()) -> dict:
    """The parameters every row that has them shares, with their value."""
    ps = _distinct(_params(frame))
    names = sorted({k for p in ps for k in p} - QUIET - set(exclude))
    moving = set(_moving(ps))
    return {k: next(p[k] for p in ps if k in p) for k in names if k not in moving}


def series_names(frame: pd.DataFrame, exclude=(), runs: bool = True) -> list[str]:
    """A name per row, in words: the run's label where several runs are shown (and
    `runs`), then the values of the parameters that vary; '' where nothing does."""
    keys = varying(frame, exclude)
    multi = runs and frame["label"].nunique() > 1
    family = str(frame["benchmark"].iloc[0]) if "benchmark" in frame and len(frame) else None
    said: dict[int, str] = {}
    for p in _distinct(ps := _params(frame)):
        said[id(p)] = words.setting(p, [k for k in keys if k in p], family)
    return [", ".join(filter(None, (label if multi else "", said[id(p)])))
            for label, p in zip(frame["label"], ps)]


def swept(frame: pd.DataFrame, key: str, least: int = 3) -> pd.Series:
    """Whether each row is of a sweep of `key`: the rows of its job alike but for it take
    `least` values of it or more (a curve; fewer are bars)."""
    jobs = frame["job"] if "job" in frame else [""] * len(frame)
    names = [f"{job}\0{name}" for job, name in zip(jobs, series_names(frame, exclude=(key,)))]
    counts = frame.assign(_s=names).groupby("_s")["params"].agg(
        lambda ps: len({repr(p.get(key)) for p in ps}))
    return pd.Series([counts[n] >= least for n in names], index=frame.index)
