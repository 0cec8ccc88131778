"""The cost of flushing a line, per instruction and the line's state."""
from __future__ import annotations

from .draw import bars


def flush(frame, runs):
    yield bars(frame, ("flush", "state"), "latency", key="flush", family="flush",
               title="Flush and write-back cost per line",
               measured="Time per 64-byte line (ns) to flush (or write and flush) a range, "
                        "one sfence at the end; instructions this CPU lacks are left out "
                        "(unsupported, not replaced)")


PLOTTERS = {"flush": flush}
