"""The report's figures: one plotter per benchmark family, each taking that family's rows of
the summary frame and giving figures with captions that say what was measured and how.
Each module here but the shared helpers (draw, layout, panels, params, words) names the
families it plots in PLOTTERS, {family: plotter}; a family without a plotter gets bars of
its first metric (generic), so a new benchmark shows up in reports before anyone writes a
plot for it. Every figure is drawn in layout.FONTS. A module may also name
figures drawn over every family's rows in ACROSS, {name: plotter} (the model against
measurement: its cases come from several benchmarks), which the report places itself."""
from __future__ import annotations

import importlib
import pkgutil

import matplotlib.pyplot as plt
import pandas as pd

from ...paramtext import params_text
from .draw import Figure, bars, caption, generic, heatmaps, lines
from .layout import FONTS
from .params import _params, fixed, series_names, varying

__all__ = ["ACROSS", "Figure", "PLOTTERS", "across", "bars", "caption", "figures_for", "fixed",
           "generic", "heatmaps", "lines", "params_text", "series_names", "varying", "_params"]


def _plotters(kind: str) -> dict:
    """Every module's `kind` table (PLOTTERS or ACROSS) in one; a name two modules claim is
    an error."""
    table: dict = {}
    for m in pkgutil.iter_modules(__path__):
        for family, plot in getattr(importlib.import_module(f"{__name__}.{m.name}"),
                                    kind, {}).items():
            if family in table:
                raise ImportError(f"figures for {family!r} in two modules ({m.name} and "
                                  f"{table[family].__module__})")
            table[family] = plot
    return table


PLOTTERS = _plotters("PLOTTERS")
ACROSS = _plotters("ACROSS")


def figures_for(family: str, frame: pd.DataFrame, runs) -> list[Figure]:
    """The figures of one family's rows: its plotter's, or the generic bars."""
    plot = PLOTTERS.get(family, generic)
    with plt.rc_context(FONTS):
        return [f for f in plot(frame, runs) if f is not None]


def across(name: str, frame: pd.DataFrame, runs) -> list[Figure]:
    """The figures ACROSS[name] draws over the rows of every family."""
    with plt.rc_context(FONTS):
        return [f for f in ACROSS[name](frame, runs) if f is not None]
