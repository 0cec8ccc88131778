"""Parsing and printing of the quantities users type (sizes, CPU or node lists) and
printing of the ones cxlbench measures, SI-prefixed for the console."""
from __future__ import annotations

import math
import re

_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(I?B)?\s*$", re.IGNORECASE)
# Beyond this no machine has the bytes, and the C side's size_t arithmetic (size times
# streams or threads) would wrap: refuse it while it is text.
MAX_SIZE = (1 << 63) - 1
# The most numbers a list may reach, so '0-10000000' is refused before it is built:
# Linux numbers at most MAX_NUMNODES nodes (NODES_SHIFT=10) and NR_CPUS CPUs (8192 max).
MAX_NODES = 1024
MAX_CPUS = 8192
_COUNTED = {MAX_NODES: "nodes", MAX_CPUS: "CPUs"}


def parse_size(text: str | int) -> int:
    """'64K', '1G', '4096' or 4096 -> bytes (binary multiples)."""
    if isinstance(text, bool):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"size cannot be negative: {text}")
        value = text
    else:
        m = _SIZE.match(str(text))
        if not m:
            raise ValueError(f"not a size: {text!r} (use a number with K, M, G or T)")
        value = int(m.group(1)) * _SUFFIX[m.group(2).upper()]
    if value > MAX_SIZE:
        raise ValueError(f"size {text!r} is above {MAX_SIZE} bytes (2^63 - 1), more than "
                         "any machine has")
    return value


def format_size(n: int, exact: bool = True) -> str:
    """Bytes -> the shortest binary form: 16384 -> '16K'; exact=False rounds, 802980 ->
    '784K'."""
    for suffix in ("T", "G", "M", "K"):
        unit = _SUFFIX[suffix]
        if n >= unit and (n % unit == 0 or not exact):
            return f"{n // unit}{suffix}" if n % unit == 0 else f"{n / unit:.3g}{suffix}"
    return str(n)


def parse_list(text: str | int, *, limit: int = MAX_CPUS) -> list[int]:
    """numactl's list syntax: '0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]. Every number is
    below `limit` (MAX_CPUS for CPU lists, MAX_NODES for node lists)."""
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ValueError(f"not a list of numbers: {text!r} (use forms like 0-3,8)")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ValueError(f"range {part!r} runs backwards")
        if hi >= limit:
            raise ValueError(f"{part!r} goes beyond {limit - 1}: Linux numbers at most "
                             f"{limit} {_COUNTED.get(limit, 'of them')}")
        out.extend(range(lo, hi + 1))
        if len(out) > limit:        # some number repeats: say so before the list grows more
            break
    if len(set(out)) != len(out):
        raise ValueError(f"list {text!r} names a number twice")
    return out


def format_list(values) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8'."""
    values = sorted(values)
    parts, i = [], 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        parts.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(parts)


# How each unit the benchmarks report scales: its power of ten in its ladder's base unit,
# and the ladder's rungs (power of ten, text), smallest first. A unit at its ladder's foot
# only scales up: M/s is already millions a second, a count has no fractions to prefix.
_TIME = ((-9, "ns"), (-6, "µs"), (-3, "ms"), (0, "s"))
_BYTES_PER_S = ((6, "MB/s"), (9, "GB/s"), (12, "TB/s"))
_BYTES = ((3, "kB"), (6, "MB"), (9, "GB"), (12, "TB"))


def _counted(unit: str) -> tuple:
    """A count or a rate of things: 3480 tok/s reads '3.48 k tok/s'."""
    return ((0, unit), (3, f"k {unit}"), (6, f"M {unit}"), (9, f"G {unit}"))


_LADDERS = {
    "ns": (-9, _TIME), "us": (-6, _TIME), "µs": (-6, _TIME), "ms": (-3, _TIME),
    "s": (0, _TIME),
    "MB/s": (6, _BYTES_PER_S), "GB/s": (9, _BYTES_PER_S),
    "MB": (6, _BYTES), "GB": (9, _BYTES),
    "M/s": (6, ((6, "M/s"), (9, "G/s"))),
    "Mops/s": (6, ((6, "Mops/s"), (9, "Gops/s"))),
    **{u: (0, _counted(u)) for u in ("tok/s", "pages/s", "pages", "touches", "loads",
                                     "cycles")},
}
# Never scaled: a ratio needs no word after it; x and % sit on the number.
_BARE = {"ratio": "", "x": "x", "%": "%"}


def significant(value: float, digits: int = 3) -> str:
    """value to `digits` significant figures in plain notation (12345 -> '12300', never
    '1.23e+04'), trailing zeros kept: they say how precise it is (11.0)."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    exponent = math.floor(math.log10(abs(value)))
    decimals = digits - 1 - exponent
    rounded = round(value, decimals)
    if rounded and math.floor(math.log10(abs(rounded))) > exponent:    # 9.996 -> 10.0
        decimals -= 1
    return f"{rounded:.{max(decimals, 0)}f}"


def scale(like: float, unit: str) -> tuple[float, str]:
    """What to divide values in `unit` by, and the unit then written, for `like` to read
    with 1 to 3 digits before the point (0.293 us: 0.001 and 'ns'). A unit without a
    ladder stays as given."""
    if unit in _BARE:
        return 1, _BARE[unit]
    if unit not in _LADDERS or not math.isfinite(like):
        return 1, unit
    power, rungs = _LADDERS[unit]
    if like == 0:
        i = next(i for i, (p, _) in enumerate(rungs) if p == power)
    else:
        digits = math.floor(math.log10(abs(like))) + power      # where like's first digit is
        i = max([i for i, (p, _) in enumerate(rungs) if p <= digits], default=0)
        if i + 1 < len(rungs) and \
                abs(float(significant(like / _ten(rungs[i][0] - power)))) >= 1000:
            i += 1          # 999.7 ns rounds to 1000: 1.00 µs
    return _ten(rungs[i][0] - power), rungs[i][1]


def _ten(power: int) -> float:
    """10 ** power, exact where it can be (an int), so 10550 / 1000 stays 10.55."""
    return 10 ** power if power >= 0 else 10.0 ** power


def _joined(number: str, shown: str) -> str:
    """'10.6 ms', '1.23x', '0.412' (a ratio)."""
    return number + ("" if shown in ("", "x", "%") else " ") + shown


def quantity(value: float, unit: str) -> str:
    """A measured value as the console prints it: 3 significant figures, SI-prefixed
    (10550 us -> '10.6 ms', 3479 tok/s -> '3.48 k tok/s')."""
    divisor, shown = scale(value, unit)
    return _joined(significant(value / divisor), shown)


def quantity_range(low: float, high: float, unit: str, like: float | None = None) -> str:
    """'[10.2, 11.0] ms': both ends in the prefix `like` (the median they bound; by
    default the larger end) takes, so they read beside it."""
    divisor, shown = scale(max(abs(low), abs(high)) if like is None else like, unit)
    return _joined(f"[{significant(low / divisor)}, {significant(high / divisor)}]", shown)


def duration(seconds: float) -> str:
    """'40 s', '3 min 20 s', '1 h 5 min'."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")
