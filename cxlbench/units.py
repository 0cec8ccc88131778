"""Parsing and printing of the quantities users type: sizes and CPU or node lists."""
from __future__ import annotations

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
