"""The option table: every option declared once, with type, default, bounds, unit and help.
Suite validation, `--set`, `cxlbench list` and the results' columns all come from here.
A case's params hold values (a Placement for mem and mem.<buffer>); to_json and from_json
turn them into what JSON and the results' cells hold and back."""
from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass
from typing import Callable

from .errors import UserError
from .placement import PAGE_SIZES, Placement
from .units import MAX_CPUS, format_list, format_size, parse_list, parse_size

# The C side takes int options as int64_t, uint64_t or size_t: an int option without a
# max of its own stops at the bound all three take, before it can overflow in a worker.
INT_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class Option:
    name: str
    kind: str                 # size, int, float, bool, choice, placement, cpus, path
    default: object
    help: str
    unit: str | None = None
    min: float | None = None
    max: float | None = None
    choices: tuple | Callable[[], tuple] = ()   # a callable: read at first use (see allowed)
    multiple: int | None = None   # sizes must be a multiple of this
    words: tuple = ()             # int options: words allowed besides numbers ("all", "idle")
    expand: dict | None = None    # a word that a suite expands into several values (a sweep)
    nodes: str | None = None      # node options: "*" expands to the "memory" or "cpu" nodes

    def convert(self, raw) -> object:
        """A raw value (TOML value, --set text, or a value run.json recorded) -> its value
        (a placement's: a Placement; one given already passes). ValueError on bad input."""
        kind = self.kind
        if isinstance(raw, (list, dict)):
            raise ValueError(f"a {'list' if isinstance(raw, list) else 'table'} where one "
                             "value was expected")
        if kind == "size":
            value = parse_size(raw)
        elif kind == "int":
            value = str(raw) if str(raw) in self.words else to_int(raw)
        elif kind == "float":
            value = _to_float(raw)
        elif kind == "bool":
            value = _to_bool(raw)
        elif kind == "choice":
            value, allowed = str(raw), self.allowed()
            if allowed is not None and value not in allowed:
                raise ValueError(f"{value!r} is not one of {', '.join(map(str, allowed))}")
        elif kind == "placement":
            value = Placement.of(raw)
        elif kind == "cpus":
            value = "" if raw in ("", None) else format_list(parse_list(raw))
        elif kind == "path":    # absolute, so a worker or a resume reads the same file
            if any(_control(c) for c in str(raw)):
                # NUL: no open takes it; a line break or escape: no message could name
                # the path in one line (and a fleet's script would have to carry it)
                raise ValueError(f"{raw!r} holds a control character (a line break, a tab, "
                                 "NUL...): give a path without one")
            value = "" if raw in ("", None) else os.path.abspath(os.path.expanduser(str(raw)))
        else:
            raise AssertionError(f"option {self.name} has unknown kind {kind}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            top = INT_MAX if self.max is None and kind in ("int", "size") else self.max
            if self.min is not None and value < self.min:
                raise ValueError(f"{self.show(value)} is below the minimum {self.show(self.min)}")
            if top is not None and value > top:
                raise ValueError(f"{self.show(value)} is above the maximum {self.show(top)}")
            if self.multiple and value % self.multiple:
                raise ValueError(f"{self.show(value)} is not a multiple of {self.multiple} bytes")
        return value

    def but(self, **changes) -> "Option":
        """This option with some of its fields changed (a default, a name, a bound)."""
        return dataclasses.replace(self, **changes)

    def allowed(self) -> tuple | None:
        """The choices. Those read from the compiled core (the kernel table) are None where
        it is not built: the value is then checked where the suite runs."""
        return from_core(self.choices)

    def show(self, value) -> str:
        return format_size(int(value)) if self.kind == "size" else str(value)

    def kind_text(self) -> str:
        """What values it takes: its kind (or choices), unit and bounds ("size, bytes, >= 4K")."""
        parts = [self.kind if self.kind != "choice" else "|".join(map(str, self.allowed() or ()))]
        if self.words:
            parts[0] += "|" + "|".join(self.words)
        if self.unit:
            parts.append(self.unit)
        bounds = [f">= {self.show(self.min)}" if self.min is not None else "",
                  f"<= {self.show(self.max)}" if self.max is not None else ""]
        return ", ".join(parts + [b for b in bounds if b])

    def default_text(self) -> str:
        return self.show(self.default) if self.default not in ("", None) else "-"

    def describe(self) -> str:
        return f"{self.name:<10} {self.kind_text():<34} default {self.default_text():<8} {self.help}"


def _control(c: str) -> bool:
    """A control character: C0 and C1 (NUL, tab, line breaks, escapes), DEL, and Unicode's
    line and paragraph separators."""
    return ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 or c in "\u2028\u2029"


def from_core(names: tuple | Callable[[], tuple]) -> tuple | None:
    """`names`, or what the callable reads from the compiled core at first use: None where
    the core is not built."""
    if not callable(names):
        return names
    try:
        return tuple(names())
    except ImportError:
        return None


def to_int(raw) -> int:
    """An integer; a count may carry a size's binary suffix, as rows are written
    (rows=4M: 4 x 2^20 rows)."""
    if isinstance(raw, bool):
        raise ValueError(f"{raw!r} is not an integer")
    if isinstance(raw, int):
        return raw
    try:
        return int(str(raw), 0)
    except ValueError:
        pass
    if isinstance(raw, str) and re.fullmatch(r"\s*\d+\s*[KMGTkmgt]\s*", raw):
        return parse_size(raw)
    raise ValueError(f"{raw!r} is not an integer (a count may take K, M, G or T: 4M is "
                     "4 x 2^20)")


def _to_float(raw) -> float:
    """A finite float: NaN passes every min and max comparison, and inf is no timeout."""
    if isinstance(raw, bool):
        raise ValueError(f"{raw!r} is not a number")
    try:
        value = float(raw)
    except (ValueError, OverflowError):   # OverflowError: an int too large for a float
        raise ValueError(f"{raw!r} is not a number") from None
    except TypeError:       # a TOML date or time, a JSON null: said as the file has it
        raise ValueError(f"{'null' if raw is None else raw} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{raw!r} is not a finite number")
    return value


def _to_bool(raw) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{raw!r} is not true or false")


# Options shared by benchmarks. A benchmark picks the ones it takes and adds its own.
COMMON = {o.name: o for o in [
    Option("size", "size", 1 << 30, "working-set bytes per buffer", "bytes", min=4096,
           multiple=64),
    Option("mem", "placement", Placement("local"), "where pages go: local, bind:N, "
           "preferred:N, interleave:0-3, weighted:0=3,2=1"),
    Option("page", "choice", "4k", "page size: 4k, transparent huge pages, hugetlb 2m or 1g",
           choices=tuple(PAGE_SIZES)),
    Option("cpus", "cpus", "", "CPUs to run on (list like 0-3,8); default: those allowed"),
    Option("threads", "int", 1, "threads, pinned one per CPU from cpus; or all", min=1,
           max=MAX_CPUS, words=("all",)),
    Option("isa", "choice", "auto", "kernel variant; auto picks the widest this CPU runs",
           choices=("auto", "scalar", "avx2", "avx512")),
    Option("repeat", "int", 5, "timed repetitions", min=1, max=10000),
    Option("warmup", "int", 1, "untimed repetitions before them", min=0, max=1000),
    Option("tolerance", "float", 0.01, "misplaced page fraction that fails a case", min=0, max=1),
    # A week: longer is no timeout, and a huge one overflows the wait on the worker.
    Option("timeout", "float", 600.0, "seconds before the case's worker is killed", "s",
           min=1, max=7 * 24 * 3600),
]}


# Options one buffer of a case may take for itself: mem.<buffer>, page.<buffer>.
PER_BUFFER = ("mem", "page")


def split_buffer_option(key: str) -> tuple[str, str] | None:
    """'mem.src' -> ('mem', 'src'); None for a key that is not a per-buffer option."""
    base, dot, buffer = key.partition(".")
    return (base, buffer) if dot and base in PER_BUFFER and buffer else None


def buffer_option(base: Option, key: str) -> Option:
    """The option `key` (mem.<buffer>, page.<buffer>): `base`'s kind and checks, and no
    default: a buffer without one takes the case's mem and page."""
    return base.but(name=key, default=None,
                    help=f"{base.name} of buffer {key.partition('.')[2]} alone")


def buffer_spec(params: dict, buffer: str) -> tuple[Placement, str]:
    """(placement, page) of one buffer of a case: its own mem.<buffer> and page.<buffer>,
    else the case's mem and page."""
    return (Placement.of(params.get(f"mem.{buffer}") or params["mem"]),
            params.get(f"page.{buffer}") or params["page"])


def json_value(value):
    """One param's value as JSON holds it: a Placement as its canonical text, any other
    value as it is."""
    return str(value) if isinstance(value, Placement) else value


def to_json(params: dict) -> dict:
    """A case's params as run.json's cases, the journal, the worker's input and the
    results' cells hold them."""
    return {key: json_value(value) for key, value in params.items()}


def from_json(bench, params: dict) -> dict:
    """to_json's params as values again: the placements among `bench`'s options parsed
    (a key `bench` does not take stays as recorded)."""
    def kind(key: str) -> str | None:
        try:
            return bench.option(key).kind
        except UserError:
            return None
    return {key: Placement.of(value) if kind(key) == "placement" else value
            for key, value in params.items()}


def pick(*names: str, **overrides) -> dict[str, Option]:
    """COMMON options by name; overrides replace defaults: pick('size', size=256<<20)."""
    out = {}
    for name in names:
        opt = COMMON[name]
        if name in overrides:
            opt = opt.but(default=overrides[name])
        out[name] = opt
    return out
