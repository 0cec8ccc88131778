"""The tier model in a report: the first screen's lines (how far the predictions were from
measurement, and where the tiers' figures came from when not measured) and the "Model
against measurement" section, its figures and each prediction beside its measurement."""
from __future__ import annotations

import pandas as pd

from ..paramtext import NOT_MEASURED, params_text, varying
from . import figures as _figures
from .document import Folded, Heading, Para, Table
from .figures.model import pct, summary_text, tiering_checks, tiering_words, workload_checks

TITLE = "Model against measurement"


def headline(frame: pd.DataFrame, runs) -> list[Para]:
    """One line per finding, none where the runs hold no prediction and no assumed tier."""
    lines = []
    checks = workload_checks(frame, runs)
    if checks:
        lines.append(f"Tier model against measurement: {summary_text(checks)}; tiers "
                     f"{'; '.join(checks['sources'])}.")
    checks = tiering_checks(frame, runs)
    if checks:
        lines.append(f"Tiering model against the real engine: {summary_text(checks)}.")
    lines += _tiering_tiers(frame, len(runs) > 1)
    return [Para(text, "headline") for text in lines]


def _tiering_tiers(frame: pd.DataFrame, many: bool) -> list[str]:
    """Each tiering run whose tiers were not all measured: where their figures came from,
    and whether its figures are the model engine's predictions."""
    tiering = frame[frame["benchmark"] == "tiering"].drop_duplicates(["label", "case"])
    out = []
    for label, g in tiering.groupby("label", sort=False):
        tiers = [(i.get("tiers") or {}, m) for i, m in zip(g["info"], g["machine"])]
        words = [tiering_words(t, m) for t, m in tiers
                 if set(t.get("kinds") or ["not recorded"]) - {"measured"}]
        if not words:
            continue
        model = g["kernel"].astype(str).str.endswith(":model").any()
        out.append(f"Tiering{' in ' + label if many else ''}: "
                   + "; ".join(dict.fromkeys(words))
                   + ("; the model engine's figures are predictions, not measurements"
                      if model else "") + ".")
    return out


def section(frame: pd.DataFrame, runs) -> list:
    """The section's figures, and a table of every case they show; nothing where the runs
    hold no prediction."""
    figures = _figures.across("model", frame, runs)
    if not figures:
        return []
    rows = [r for checks in (workload_checks(frame, runs), tiering_checks(frame, runs))
            if checks for r in checks["rows"]]
    return [Heading(2, TITLE), *figures,
            Folded(f"Each prediction beside its measurement ({len(rows)} cases)",
                   [prediction_table(rows)])]


def prediction_table(rows: list[dict]) -> Table:
    """analysis.model_checks rows: the prediction a single figure (no CI, no n), the
    measurement with both."""
    keys = {b: varying([r["parameters"] for r in rows if r["benchmark"] == b], NOT_MEASURED)
            for b in {r["benchmark"] for r in rows}}
    return Table(["case", "benchmark", "parameters", "metric", "unit", "predicted",
                  "measured (median)", "95 % CI", "n", "error", "tiers"],
                 [[r["case"], r["benchmark"], params_text(r["parameters"], keys[r["benchmark"]]),
                   r["metric"], r["unit"], r["predicted"], r["measured"],
                   f"[{r['ci_low']:.4g}, {r['ci_high']:.4g}]", r["n"],
                   f"{'+' if r['error'] > 0 else ''}{pct(r['error'])}", r["source"]]
                  for r in rows])
