"""Case parameters as people read them: sizes as sizes, threads=all as the count it ran
with, and, of a group of cases, which parameters tell them apart. Shared by the end-of-run
summary and the reports (no plotting here, so `cxlbench run` does not load matplotlib)."""
from __future__ import annotations

from .units import format_size, parse_list

# Parameters that change how long or how carefully a case runs, not what it measures:
# cases that differ only in these are still the same measurement.
NOT_MEASURED = ("repeat", "warmup", "timeout", "tolerance")
SIZES = ("size", "slice", "load_size", "window", "chunk", "step_size", "stride",
         "checkpoint.size", "message")  # kind "size"


def value_text(name: str, value) -> str:
    if name in SIZES and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_size(int(value))
    return str(value)


def params_text(params: dict, keys) -> str:
    """'k=v k=v' for the keys named, sizes written as sizes."""
    return " ".join(f"{k}={value_text(k, params.get(k))}" for k in keys)


def resolved(params: dict, cpus) -> dict:
    """The parameters with threads="all" replaced by the number of CPUs it ran on (a
    list, or numactl's text such as '0-3'); unchanged where that is not known. A case
    with a load (load_size: loaded latency, interference) counts its load's threads, not
    the one CPU that measures beside them."""
    if params.get("threads") != "all" or cpus is None or str(cpus) in ("", "nan"):
        return params
    count = len(cpus) if isinstance(cpus, (list, tuple)) else len(parse_list(str(cpus)))
    return {**params, "threads": count - ("load_size" in params)}


def varying(params: list[dict], exclude=()) -> list[str]:
    """The names whose value differs between the parameter dicts, sorted."""
    names = sorted({k for p in params for k in p} - set(exclude))
    return [k for k in names if len({repr(p.get(k)) for p in params}) > 1]
