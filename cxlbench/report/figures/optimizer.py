"""Optimizer steps: parameters per second, and the step against the triad."""
from __future__ import annotations

from .draw import bars


def optimizer(frame, runs):
    kind = ("optim", "precision")
    yield bars(frame, kind, "params", key="optimizer-params", family="optimizer",
               title="Optimizer step: parameters per second per placement",
               measured="Parameters (millions) a fused Adam/AdamW step updates per second, "
                        "on pinned threads")
    yield bars(frame, kind, "of_triad", key="optimizer-of-triad", family="optimizer",
               title="Optimizer step against the triad bound",
               measured="The step's memory traffic per second over the STREAM triad's on the "
                        "same buffers, timed in the same repetition (1: the step streams as "
                        "fast as the triad)")


PLOTTERS = {"optimizer": optimizer}
