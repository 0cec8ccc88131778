"""The report's figures: one plotter per benchmark family, each taking that family's rows of
the summary frame and giving figures with captions that say what was measured and how.
Each module here but draw (the shared helpers) names the families it plots in PLOTTERS,
{family: plotter}; a family without a plotter gets bars of its first metric (generic), so a
new benchmark shows up in reports before anyone writes a plot for it."""
from __future__ import annotations

import importlib
import pkgutil

import pandas as pd

from .draw import (Figure, _params, bars, caption, fixed, generic, heatmaps, lines,
                   params_text, series_names, varying)

__all__ = ["Figure", "PLOTTERS", "bars", "caption", "figures_for", "fixed", "generic",
           "heatmaps", "lines", "params_text", "series_names", "varying", "_params"]


def _plotters() -> dict:
    """Every module's PLOTTERS in one table; a family two modules claim is an error."""
    table: dict = {}
    for m in pkgutil.iter_modules(__path__):
        for family, plot in getattr(importlib.import_module(f"{__name__}.{m.name}"),
                                    "PLOTTERS", {}).items():
            if family in table:
                raise ImportError(f"figures for {family!r} in two modules ({m.name} and "
                                  f"{table[family].__module__})")
            table[family] = plot
    return table


PLOTTERS = _plotters()


def figures_for(family: str, frame: pd.DataFrame, runs) -> list[Figure]:
    """The figures of one family's rows: its plotter's, or the generic bars."""
    plot = PLOTTERS.get(family, generic)
    return [f for f in plot(frame, runs) if f is not None]
