"""`cxlbench list`: what there is to run (kernels, drivers, benchmarks, suites), chosen by
name or pattern. select() gives the choice as a JSON-able dict (--json); render() gives it
as text wrapped to a terminal's width: an overview with no pattern, full entries with one."""
from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import json
import re
import textwrap

from . import benchmarks, suite
from .errors import UserError
from .memory import native      # imported at first use: `cxlbench` starts without the core
from .options import Option, json_value
from .topology import Topology

# Section -> the overview's heading for it, in the order listed.
TITLES = {"kernels": "kernels (native/kernels.c):",
          "drivers": "drivers (native/kernels.c: entry points with argument structs of "
                     "their own):",
          "benchmarks": "benchmarks:",
          "suites": "suites (cxlbench run NAME):"}
HINT = ("cxlbench list NAME shows one benchmark's options (or a kernel, driver or suite in "
        "full); a glob or part of a name (kv*, random) shows every match; --json gives "
        "the same as data")
MIN_WIDTH = 40      # narrower, and the indents leave no room for text
GLOB_CHARS = "*?["


def select(pattern: str | None = None, topology: Topology | None = None) -> dict:
    """Everything (pattern None), or what `pattern` names: the entries of that exact name
    in every section, else those its glob (or, without glob characters, its substring)
    matches. UserError naming the close matches where nothing does. `topology` gives the
    reasons a benchmark is skipped on this machine."""
    catalogue = _catalogue()
    chosen = catalogue if pattern is None else _match(pattern, catalogue)
    if chosen["benchmarks"] and topology is None:
        topology = Topology.read(probe_gpus=False)
    entries = {
        "kernels": [_entry(catalogue["kernels"][n]) for n in chosen["kernels"]],
        "drivers": [_entry(catalogue["drivers"][n]) for n in chosen["drivers"]],
        "benchmarks": [_benchmark(catalogue["benchmarks"][n], topology)
                       for n in chosen["benchmarks"]],
        "suites": [_suite(n) for n in chosen["suites"]],
    }
    return _plain({"pattern": pattern, **entries})


def render(selection: dict, width: int = 100, detail: bool | None = None) -> list[str]:
    """select()'s choice as lines no longer than `width` (at least MIN_WIDTH): one cut
    line per entry where no pattern chose it (or detail=False), else every entry in full."""
    width = max(width, MIN_WIDTH)
    if detail is None:
        detail = selection["pattern"] is not None
    if not detail:
        return _overview(selection, width)
    out: list[str] = []
    for section, draw in (("kernels", _draw_entry), ("drivers", _draw_entry),
                          ("benchmarks", _draw_benchmark), ("suites", _draw_suite)):
        for item in selection[section]:
            if out:
                out.append("")
            out += draw(item, width)
    return out


def _catalogue() -> dict[str, dict]:
    """Every name a user may list, by section, each with its record (a suite: its name).
    Test-only kernels stay hidden as benchmarks.available() hides test-only benchmarks."""
    shown = benchmarks.test_kernels_enabled()
    return {"kernels": {k.key: k for k in native.kernels() if shown or not k.test_only},
            "drivers": {d.key: d for d in native.drivers()},
            "benchmarks": benchmarks.available(),
            "suites": {name: name for name in suite.shipped_names()}}


def _match(pattern: str, catalogue: dict) -> dict[str, list[str]]:
    """The names `pattern` picks, by section: an exact name wins over a pattern, so
    `chase` is the benchmark (and the kernel of that key), not every chase_*."""
    exact = {s: [n for n in names if n == pattern] for s, names in catalogue.items()}
    if any(exact.values()):
        return exact
    if any(c in pattern for c in GLOB_CHARS):
        hits = {s: fnmatch.filter(names, pattern) for s, names in catalogue.items()}
    else:
        hits = {s: [n for n in names if pattern in n] for s, names in catalogue.items()}
    if any(hits.values()):
        return hits
    every = sorted({n for names in catalogue.values() for n in names})
    near = difflib.get_close_matches(pattern, every, n=5)
    hint = f" (did you mean {', '.join(near)}?)" if near else ""
    raise UserError(f"no kernel, driver, benchmark or suite is named or matches "
                    f"{pattern!r}{hint}: `cxlbench list` lists them all")


def _entry(e) -> dict:
    """A kernel's or driver's table row, and the variants this CPU runs."""
    row = dataclasses.asdict(e)
    del row["index"]        # the C table's order: no use to a reader
    return {"name": row.pop("key"), **row, "runs_here": e.runnable_isas()}


def _benchmark(b, topology: Topology) -> dict:
    """A benchmark, its buffers, why this machine skips it with its defaults (None: it
    runs) and every option."""
    defaults = {k: opt.default for k, opt in b.options.items()}
    return {"name": b.name, "description": b.description, "buffers": b.buffer_names(),
            "buffer_options": "mem" in b.options,   # mem.<buffer>, page.<buffer> place one
            "skipped_here": b.skip(defaults, topology) if b.skip else None,
            "options": [_option(opt) for opt in b.options.values()]}


def _option(opt: Option) -> dict:
    """An option's fields, by Option's own names (so render can rebuild it), its choices
    read (None: from a core that is not built) and its default as JSON holds it."""
    fields = {f.name: getattr(opt, f.name) for f in dataclasses.fields(opt)}
    return {**fields, "default": json_value(opt.default), "choices": opt.allowed()}


def _suite(name: str) -> dict:
    """A shipped suite as written: its ${vars} unsubstituted, with the [vars] defaults."""
    s = suite.load(name)
    data = suite.tomllib.loads(s.text)      # load() substitutes and drops [vars]
    jobs = [{"name": job, "bench": data[job].get("bench"),
             "options": {k: v for k, v in data[job].items() if k != "bench"}}
            for job in suite.job_names(s)]
    return {"name": s.name, "description": data.get("description", ""),
            "jobs": jobs, "vars": data.get("vars", {}), "global": data.get("global", {})}


def _plain(value):
    """Tuples as lists, all the way down: what json.loads gives back, so a selection
    round-trips through --json unchanged."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _overview(selection: dict, width: int) -> list[str]:
    """Each section's heading and one line per entry, its description cut to fit."""
    out: list[str] = []
    for section, title in TITLES.items():
        items = selection[section]
        if not items:
            continue
        column = max(len(item["name"]) for item in items)
        out += _wrap(title, width)
        for item in items:
            out += _wrap(f"{item['name']:<{column}}  {item['description']}", width, 2,
                         cut=True)
        out.append("")
    return out + _wrap(HINT, width)


def _draw_entry(e: dict, width: int) -> list[str]:
    """A kernel's or driver's full entry (a kernel's has bytes per step and buffers)."""
    kind = "kernel" if "elem_bytes" in e else "driver"
    out = _wrap(f"{kind} {e['name']} (benchmark {e['benchmark']})", width)
    out += _wrap(e["description"], width, 2)
    if kind == "kernel":
        streams = f"; buffers {', '.join(e['buffers'])}" if e["buffers"] else ""
        allocate = "; its stores read each line first" if e["write_allocate"] else ""
        out += _wrap(f"read {e['bytes_read']} B, written {e['bytes_written']} B per "
                     f"{e['elem_bytes']} B step{streams}{allocate}", width, 2)
    check = e["check"] + (f" ({e['unchecked']})" if e["unchecked"] else "")
    needs = f"; needs {e['needs']}" if e["needs"] else ""
    out += _wrap(f"threads {e['min_threads']}..{e['max_threads'] or 'any'}; checked: "
                 f"{check}{needs}", width, 2)
    variants = ", ".join(i + ("" if i in e["runs_here"] else " (not on this CPU)")
                         for i in e["isas"])
    return out + _wrap(f"variants: {variants}", width, 2)


def _draw_benchmark(b: dict, width: int) -> list[str]:
    """A benchmark's full entry: description, buffers, skip reason and every option."""
    out = _wrap(f"benchmark {b['name']}: {b['description']}", width)
    names = ", ".join(b["buffers"] or ())
    how = ("mem.<buffer> and page.<buffer> place one" if b["buffer_options"]
           else "placed by the benchmark")
    out += _wrap(f"buffers: {names} ({how})" if names else "buffers: none", width, 2)
    if b["skipped_here"]:
        out += _wrap(f"skipped here with its defaults: {b['skipped_here']}", width, 2)
    out += _wrap("options:", width, 2)
    for opt in b["options"]:
        out += _wrap(Option(**opt).describe(), width, 4, more=11)  # under the kind column
    return out


def _draw_suite(s: dict, width: int) -> list[str]:
    """A suite's full entry, its tables as TOML writes them: [vars], [global], each job."""
    out = _wrap(f"suite {s['name']}: {s['description']}", width)
    tables = [("vars", s["vars"]), ("global", s["global"])]
    tables += [(job["name"], {"bench": job["bench"], **job["options"]}) for job in s["jobs"]]
    for name, body in tables:
        if body:
            pairs = ", ".join(f"{_toml_key(k)} = {_toml(v)}" for k, v in body.items())
            out += _wrap(f"[{name}] {pairs}", width, 2)
    return out


def _toml(value) -> str:
    """A suite's value as TOML writes it inline, so a listed job reads like its file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml, value)) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    return str(value)


def _toml_key(key: str) -> str:
    """A bare key where TOML allows one, else quoted ("mem.src")."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)


def _wrap(text: str, width: int, indent: int = 0, more: int = 4, cut: bool = False) -> list[str]:
    """`text` in lines of at most `width`, indented by `indent`, continuations `more`
    further; cut: one line, ending ' ...' where text was left off."""
    return textwrap.wrap(text, width, initial_indent=" " * indent,
                         subsequent_indent=" " * (indent + more), break_on_hyphens=False,
                         max_lines=1 if cut else None, placeholder=" ...")
