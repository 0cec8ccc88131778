"""Embedding-bag lookups and bag latency per skew and placement."""
from __future__ import annotations

from .draw import bars


def embedding(frame, runs):
    skew = ("dist", "alpha")
    yield bars(frame, skew, "lookups", key="embedding-lookups", family="embedding",
               title="Embedding-bag lookups per skew and placement",
               measured="Lookups per second (millions) of embedding bags pooled on pinned "
                        "threads, rows gathered from the stacked tables")
    yield bars(frame, skew, "bag_p99", key="embedding-bag-p99", family="embedding",
               title="Embedding-bag latency, 99th percentile",
               measured="The 99th percentile of single bags' time (µs), timed in C on about "
                        "1024 bags of each repetition")


PLOTTERS = {"embedding": embedding}
