"""Embedding-bag lookups against table size where sizes are swept (the calibration's
prefetched gathers, a line per row size and page), and lookups and bag latency per skew
and placement for the rest."""
from __future__ import annotations

from .draw import _metric, bars, lines
from .params import swept

MEASURED = ("Lookups per second (millions) of embedding bags pooled on pinned threads, rows "
            "gathered from the stacked tables")


def embedding(frame, runs):
    curve = swept(frame, "size")        # tables sized in bytes, over working sets
    yield lines(_metric(frame[curve], "lookups"), "size", "lookups", xlabel="table (working set)",
                logx=True, logy=True, xsize=True, key="embedding-sweep", family="embedding",
                measured=MEASURED, title="Embedding-bag lookups against table size")
    skew = ("dist", "alpha")
    yield bars(frame[~curve], skew, "lookups", key="embedding-lookups", family="embedding",
               title="Embedding-bag lookups per skew and placement", measured=MEASURED)
    yield bars(frame[~curve], skew, "bag_p99", key="embedding-bag-p99", family="embedding",
               title="Embedding-bag latency, 99th percentile",
               measured="The 99th percentile of single bags' time (µs), timed in C on about "
                        "1024 bags of each repetition")


PLOTTERS = {"embedding": embedding}
