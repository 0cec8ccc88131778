"""Suites are data: a TOML file with a [global] table of defaults and named jobs that
inherit from it (fio's model). List values sweep; every combination becomes a case.

    [global]
    mem = "bind:*"              # * = one case per node with memory
    [latency]
    bench = "chase"
    size = { from = "16K", to = "1G", factor = 2 }
    page = "thp"
"""
from __future__ import annotations

import itertools
import math
import re
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from . import benchmarks
from .errors import SuiteError, UserError
from .options import INT_MAX, PER_BUFFER, from_json, to_int, to_json
from .units import parse_size

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

RESERVED = {"bench"}            # job keys that are not options
RANGE_KEYS = {"from", "to", "factor", "step"}
TOP_LEVEL = {"description", "budget"}     # top-level keys that are not tables
# More cases than this is a typo (step where factor was meant), not a plan; --max-cases
# raises it. Counted before anything is built, so a typo costs no memory.
DEFAULT_MAX_CASES = 10000
RAISE_CAP = "raise the cap with --max-cases N"


@dataclass(frozen=True)
class Case:
    id: str                     # "<job>/<nnn>", stable for a given suite and machine
    job: str
    bench: str
    params: dict = field(hash=False)    # option values (a Placement for mem, mem.<buffer>)

    def label(self, also=()) -> str:
        """The parameters worth showing on a line of their own: size, mem, what differs
        from the defaults, leaving out the run-control options and what the case ignores,
        and the names in `also` (what varies within its job) whatever their values."""
        bench = benchmarks.get(self.bench)
        ignored = bench.ignored(self.params)
        shown = [k for k, v in self.params.items() if k in also or k not in ignored and (
                 k in ("size", "mem") or (v != bench.option(k).default and
                                          k not in ("repeat", "warmup", "tolerance", "timeout")))]
        return " ".join(f"{k}={bench.option(k).show(self.params[k])}" for k in shown)

    def to_dict(self) -> dict:
        """The case as run.json and the worker's input hold it (params to_json)."""
        return {"id": self.id, "job": self.job, "bench": self.bench,
                "params": to_json(self.params)}

    @classmethod
    def from_dict(cls, d: dict) -> "Case":
        """A case to_dict wrote, its params values again. UserError: an unknown benchmark."""
        return cls(d["id"], d["job"], d["bench"],
                   from_json(benchmarks.get(d["bench"]), d["params"]))


@dataclass
class Suite:
    name: str
    source: str                 # file path, or "--bench" for the ad-hoc form
    text: str
    data: dict


def find(name_or_path: str) -> Path:
    """A suite file: a path, suites/NAME.toml here, or a suite shipped with cxlbench."""
    p = Path(name_or_path)
    shipped = _shipped_dir()
    try:
        for where in (p, Path("suites") / f"{name_or_path}.toml",
                      shipped and shipped / f"{name_or_path}.toml"):
            if where and where.is_file():
                return Path(str(where))
        if p.is_dir():
            raise SuiteError(f"{p}: is a directory, not a suite file")
    except OSError as e:        # a name too long for the file system, say
        raise UserError(f"no suite {name_or_path!r}: {e.strerror}") from None
    raise UserError(f"no suite {name_or_path!r}: not a file, not suites/{name_or_path}.toml, "
                    f"and not one shipped with cxlbench ({', '.join(shipped_names())})")


def _shipped_dir():
    """The suites installed with the package; an editable install leaves them in the
    checkout, beside the package."""
    try:
        return resources.files("cxlbench.suites")
    except ModuleNotFoundError:
        checkout = Path(__file__).resolve().parent.parent / "suites"
        return checkout if checkout.is_dir() else None


def shipped_names() -> list[str]:
    where = _shipped_dir()
    if where is None:
        return []
    return sorted(p.name[:-5] for p in where.iterdir() if p.name.endswith(".toml"))


def load(name_or_path: str, variables: dict[str, str] | None = None) -> Suite:
    """A suite file, its [vars] defaults overridden by `variables` (--var KEY=VALUE) and
    substituted where a value is "${KEY}" or contains it."""
    path = find(name_or_path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise SuiteError(f"{path}: cannot be read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise SuiteError(f"{path}: not UTF-8 text (line {line}: {e.reason})") from None
    text = text.removeprefix("\ufeff")      # a BOM that some Windows editors write
    try:
        data = tomllib.loads(text)
    except ValueError as e:     # TOMLDecodeError, or an integer of over 4300 digits
        raise SuiteError(f"{path}: not valid TOML: {e}") from None
    except RecursionError:
        raise SuiteError(f"{path}: not valid TOML: nested too deeply") from None
    defaults = data.pop("vars", {})
    if not isinstance(defaults, dict):
        raise SuiteError(f"{path}: vars must be a table ([vars])")
    for key in variables or {}:
        if key not in defaults:
            raise SuiteError(f"{path}: --var {key}: the suite declares no such variable "
                             f"(its [vars]: {', '.join(defaults) or 'none'})")
    values = {**defaults, **(variables or {})}
    try:
        data = _substitute(data, values, str(path))
    except RecursionError:
        raise SuiteError(f"{path}: values nested too deeply") from None
    return Suite(name=path.stem, source=str(path), text=text, data=data)


def budget(suite: Suite) -> float | None:
    """The suite's `budget`: the seconds its whole run may take (None where it sets none).
    A run estimated past it is refused; --fit scales its cases down to it."""
    value = suite.data.get("budget")
    if value is None:
        return None
    try:
        if isinstance(value, bool):
            raise ValueError
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):     # (an int past a float's range)
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise SuiteError(f"{suite.source}: budget = {value!r}: give the seconds the whole "
                         "run may take, a number above 0")
    return seconds


def _substitute(value, values: dict, where: str):
    if isinstance(value, dict):
        return {k: _substitute(v, values, where) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, values, where) for v in value]
    if isinstance(value, str) and "${" in value:
        for name in re.findall(r"\$\{(\w+)\}", value):
            if name not in values:
                raise SuiteError(f"{where}: ${{{name}}} is not declared in [vars]")
        whole = re.fullmatch(r"\$\{(\w+)\}", value)
        if whole:
            return values[whole.group(1)]
        return re.sub(r"\$\{(\w+)\}", lambda m: str(values[m.group(1)]), value)
    return value


def parse_pairs(items, flag: str) -> dict[str, str]:
    """Repeated KEY=VALUE arguments (--set, --var, --param) as a dict."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SuiteError(f"{flag} {item!r}: use KEY=VALUE")
        key = key.strip()
        if key in out:      # the last would win unsaid
            raise SuiteError(f"{flag} {key} is given twice ({out[key]!r} and "
                             f"{value.strip()!r}): give it once (a suite sweeps values)")
        out[key] = value.strip()
    return out


def adhoc(bench: str, sets: list[str]) -> Suite:
    """`--bench NAME --set KEY=VALUE ...` as a one-job suite."""
    job = {"bench": bench, **parse_pairs(sets, "--set")}
    return Suite(name=bench, source="--bench", text="", data={bench: job})


def job_names(suite: Suite) -> list[str]:
    """The suite's jobs, in order."""
    return [j for j, body in suite.data.items() if j not in TOP_LEVEL and j != "global"]


def only_jobs(suite: Suite, jobs: list[str]) -> Suite:
    """The suite with only these jobs (its name, defaults and text kept: a run of it is
    still a run of the suite, part of it)."""
    keep = {k: v for k, v in suite.data.items()
            if k in TOP_LEVEL or k == "global" or k in jobs}
    return Suite(suite.name, suite.source, suite.text, keep)


def expand(suite: Suite, memory_nodes: list[int], cpu_nodes: list[int] | None = None,
           cpu_pairs: list[str] | None = None,
           max_cases: int = DEFAULT_MAX_CASES) -> list[Case]:
    """Every case of the suite. `*` stands for every node with memory (or, for options
    naming an initiator, every node with CPUs; for ping-pong's CPUs, the default pairs).
    A suite of more than `max_cases` cases is refused before they are built."""
    nodes = {"memory": memory_nodes, "cpu": memory_nodes if cpu_nodes is None else cpu_nodes,
             "pairs": cpu_pairs or []}
    data = dict(suite.data)
    glob = data.pop("global", {})
    where = suite.source
    if not isinstance(glob, dict):
        raise SuiteError(f"{where}: [global] must be a table")
    glob = _dotted_keys(glob)
    for key in glob:
        if not any(b.takes(key) for b in benchmarks.available().values()):
            raise SuiteError(f"{where}: [global]: option {key!r} is not an option of any "
                             f"benchmark")
    cases: list[Case] = []
    for job, body in data.items():
        if job in TOP_LEVEL:
            continue
        if not isinstance(body, dict):
            raise SuiteError(f"{where}: {job!r} must be a job table ([{job}])")
        cases += _expand_job(where, job, glob, _dotted_keys(body), nodes, len(cases),
                             max_cases)
    if not cases:
        raise SuiteError(f"{where}: no jobs")
    return cases


def expand_for(suite: Suite, topology, max_cases: int = DEFAULT_MAX_CASES) -> list[Case]:
    """expand() with `topology`'s wildcards: its memory nodes, CPU nodes and CPU pairs."""
    return expand(suite, topology.memory_nodes, [n.id for n in topology.nodes if n.cpus],
                  topology.cpu_pairs(), max_cases)


def _expand_job(where: str, job: str, glob: dict, body: dict, nodes: dict, done: int,
                max_cases: int) -> list[Case]:
    """The job's cases, counted before they are built: `done` cases came before it."""
    ctx = f"--bench {job}" if where == "--bench" else f"{where}: job {job!r}"
    bench_name = body.get("bench")
    if not bench_name:
        raise SuiteError(f"{ctx}: names no benchmark (add bench = \"chase\", for example)")
    if not isinstance(bench_name, str):
        raise SuiteError(f"{ctx}: bench = {bench_name!r}: name one benchmark (a job runs "
                         "one; give each benchmark its own job)")
    try:
        bench = benchmarks.get(bench_name)
    except UserError as e:
        raise SuiteError(f"{ctx}: {e}") from None
    # The table's options, then the buffers' own mem.<buffer> and page.<buffer> where
    # given (a buffer without its own takes the case's). Every key of the job must be the
    # benchmark's; [global] ones apply where they are.
    options = dict(bench.options)
    for key in sorted({*body, *glob}):
        if key not in RESERVED and key not in options:
            try:
                options[key] = bench.option(key)
            except UserError as e:
                if key in body:
                    raise SuiteError(f"{ctx}: {e}") from None

    def check_count(n: int) -> None:
        if done + n > max_cases:
            before = f" after {done} in the jobs before it" if done else ""
            raise SuiteError(f"{ctx}: expands to {n} cases or more{before}, more than the "
                             f"{max_cases} a suite may have: narrow its sweeps, or "
                             f"{RAISE_CAP}")

    axes, count = [], 1         # count: the product of the axes' lengths so far
    for name, opt in options.items():
        raw = body.get(name, glob.get(name, opt.default))
        values = []
        for item in _as_list(raw):
            for v in _unfold(item, opt, nodes, f"{ctx}: option {name!r}", max_cases):
                try:
                    values.append(opt.convert(v))
                except (ValueError, UserError) as e:
                    raise SuiteError(f"{ctx}: option {name!r}: {e}") from None
            check_count(count * len(values))
        if not values:
            raise SuiteError(f"{ctx}: option {name!r} sweeps over no values")
        count *= len(values)
        axes.append([(name, v) for v in values])
    return [Case(f"{job}/{i:03d}", job, bench_name, dict(combo))
            for i, combo in enumerate(itertools.product(*axes))]


def _dotted_keys(table: dict) -> dict:
    """TOML reads `mem.src = "bind:0"` (or `mem = { src = "bind:0" }`) as a table under
    mem: the options mem.src, mem.dst... it means; likewise a workload's own options
    (`kvcache.batch = 8`). A quoted "mem.src" is one already; a range's keys stay a range
    (and are refused as one)."""
    spaces = {*PER_BUFFER, *(name.partition(".")[0] for b in benchmarks.available().values()
                             for name in b.options if "." in name)}
    out = {}
    for key, value in table.items():
        if key in spaces and isinstance(value, dict) and not set(value) <= RANGE_KEYS:
            out.update({f"{key}.{sub}": v for sub, v in value.items()})
        else:
            out[key] = value
    return out


def _as_list(raw) -> list:
    return list(raw) if isinstance(raw, list) else [raw]


def _unfold(item, opt, nodes: dict, ctx, max_cases: int) -> list:
    """Ranges ({from, to, factor|step}), sweep words (delay = "sweep") and node wildcards
    (bind:*, target = "*") become value lists."""
    if isinstance(item, dict):
        return _range(item, opt, ctx, max_cases)
    if opt.expand and isinstance(item, str) and item in opt.expand:
        return list(opt.expand[item])
    wildcard = opt.kind == "placement" or opt.nodes
    if wildcard and isinstance(item, str) and "*" in item:
        which = opt.nodes or "memory"
        if not nodes[which]:
            raise SuiteError(f"{ctx}: {item!r} found no {'CPU pairs' if which == 'pairs' else 'nodes with ' + which}")
        return [item.replace("*", str(n)) for n in nodes[which]]
    return [item]


def _range(spec: dict, opt, ctx, max_cases: int) -> list:
    """A range's values, counted before any is made: a typo (step = 2 where factor = 2
    was meant) must be refused in milliseconds, not fill memory."""
    if opt.kind not in ("size", "int", "float"):
        raise SuiteError(f"{ctx}: a table where a value was expected (ranges are for sizes "
                         "and numbers)")
    if set(spec) - RANGE_KEYS or "from" not in spec or "to" not in spec:
        raise SuiteError(f"{ctx}: a range is {{ from = A, to = B, factor = F }} or "
                         f"{{ from = A, to = B, step = S }}")
    parse = parse_size if opt.kind == "size" else to_int
    try:
        lo, hi = parse(spec["from"]), parse(spec["to"])
        step = parse(spec["step"]) if "step" in spec else None
    except ValueError as e:
        raise SuiteError(f"{ctx}: bad range: {e}") from None
    factor = spec.get("factor")
    if (factor is None) == (step is None):
        raise SuiteError(f"{ctx}: a range takes exactly one of factor and step")
    if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float))
                               or not math.isfinite(factor)):
        raise SuiteError(f"{ctx}: the range's factor {factor!r} is not a finite number")
    if max(abs(lo), abs(hi), abs(step or 0)) > INT_MAX:
        raise SuiteError(f"{ctx}: the range's from, to and step must be within 2^63 - 1")
    if (factor is not None and factor <= 1) or (step is not None and step <= 0) or hi < lo:
        raise SuiteError(f"{ctx}: the range {spec} does not climb from 'from' to 'to'")
    show = opt.show
    if step is not None:
        count = (hi - lo) // step + 1
        # Sizes sweep by factors: a step below a line, or one no larger than the start
        # with far too many values, is a factor written as a step.
        hint = " (did you mean factor = 2?)"
        if opt.kind == "size" and step < 64:
            raise SuiteError(f"{ctx}: a size range's step of {step} bytes is below a 64-byte "
                             f"line{hint}")
        if count > max_cases:
            hint = hint if opt.kind == "size" and step <= lo else ""
            raise SuiteError(f"{ctx}: the range from {show(lo)} to {show(hi)} in steps of "
                             f"{show(step)} has {count} values, more than the {max_cases} "
                             f"cases a suite may have{hint}: {RAISE_CAP}")
        return list(range(lo, hi + 1, step))
    out, v = [], lo
    while True:
        if len(out) == max_cases:
            raise SuiteError(f"{ctx}: the range from {show(lo)} to {show(hi)} by a factor of "
                             f"{factor} has more than {max_cases} values, the cases a suite "
                             f"may have: {RAISE_CAP}")
        out.append(v)
        grown = v * factor      # compared before int(): an inf ends the range too
        if grown > hi:
            return out
        if int(grown) <= v:     # from = 0, or a factor too close to 1 to add 1: forever
            raise SuiteError(f"{ctx}: the range stalls at {show(v)}: a factor of {factor} "
                             "does not grow it")
        v = int(grown)
