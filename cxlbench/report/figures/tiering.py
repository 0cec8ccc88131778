"""Tiering policies: knee curves, the policy matrix, pages moved (the model engine's
predictions against the real engine are model.py's)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ... import analysis
from . import layout, words
from .draw import Figure, bars
from .model import tiering_words


def _tiering_scenarios(frame: pd.DataFrame, runs) -> list[tuple[str, dict]]:
    """analysis.tiering_scenarios of each run in the frame, with the run's label; a
    case that failed keeps its repetitions in the results, not in the scenarios. Each
    scenario's tiers are in the report's words (measured here, firmware, assumed)."""
    status = {(r.label, case): e.get("status") for r in runs for case, e in r.journal.items()}
    # the knee's threshold the run was analysed with (cxlbench tiering --knee)
    within = {r.label: next((sc.get("knee_within") for sc in
                             ((r.meta.get("analysis") or {}).get("tiering") or [])
                             if sc.get("knee_within") is not None), analysis.KNEE_SLOWDOWN)
              for r in runs}
    out = []
    for label, g in frame.groupby("label", sort=False):
        records = [{"benchmark": "tiering", "status": status.get((label, c), "ok"),
                    "metric": m, "parameters": p, "median": v, "unit": u, "kernel": k,
                    "tiers": tiering_words(i.get("tiers") or {}, machine)}
                   for c, m, p, v, u, k, i, machine in zip(
                       g["case"], g["metric"], g["params"], g["median"], g["unit"],
                       g["kernel"], g["info"], g["machine"])]
        out += [(label, sc) for sc in analysis.tiering_scenarios(records, within[label])]
    return out


def _scenario_title(label: str, sc: dict, many: bool) -> str:
    text = sc["workload"] + (", hot set shifting" if sc["phase"] == "shift" else "")
    text += " (model: predicted)" if sc["engine"] == "model" else ""
    return f"{label}: {text}" if many else text


def shares_and_policies(frame, runs):
    """Knee curves per scenario, the policy matrix at one share, and the MB each policy
    moved."""
    scenarios = _tiering_scenarios(frame, runs)
    many = len({label for label, _ in scenarios}) > 1
    for i, (label, sc) in enumerate(scenarios):
        within = f"within {sc['knee_within'] * 100:g} %"
        title = "Knee curves: " + _scenario_title(label, sc, many)
        bounds = [b.replace("_", "-") for b in ("all_fast", "all_slow") if sc[b]]
        grid = layout.grid(1, 6.5, [[*sc["policies"], *bounds]], title=title)
        ax = grid.axes[0]
        for name, row in sc["policies"].items():
            xs = sorted(row["throughput"])
            ax.plot(xs, [row["throughput"][x] for x in xs], marker="o", markersize=3,
                    label=name, **({"linestyle": "--", "color": "black"}
                                   if name == "oracle" else {}))
        for bound, style in (("all_fast", ":"), ("all_slow", "-.")):
            if sc[bound]:
                ax.axhline(sc[bound], color="grey", linestyle=style, linewidth=1,
                           label=bound.replace("_", "-"))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("fast-tier share of the workload's pages")
        ax.set_ylabel(f"throughput ({words.unit(sc['unit'])})")
        ax.grid(True, which="both", alpha=0.3)
        grid.legend()
        knees = ", ".join(f"{n} {r['knee']:g}" for n, r in sc["policies"].items()
                          if r["knee"] is not None) or f"none {within}"
        yield Figure(f"tiering-knee-{i}", "tiering", title,
                     "Throughput of the workload at each fast-tier share under each policy "
                     "(the static oracle dashed; all-fast and all-slow as lines). Knees (the "
                     f"smallest share {within} of all-fast from there up): " + knees + ". "
                     f"Tiers: {sc['tiers']}." + (" The model engine's figures are "
                                                 "predictions, not measurements."
                                                 if sc["engine"] == "model" else ""),
                     layout.png(grid.fig))
    yield _tiering_matrix(scenarios, many)
    yield bars(frame, ("policy",), "migrated", key="tiering-migrated", family="tiering",
               title="Pages moved per policy (MB)",
               measured="Megabytes each policy moved between the nodes over the run "
                        "(promotions and demotions)")


def _tiering_matrix(scenarios, many: bool) -> Figure | None:
    """Scenarios x policies: slowdown against all-fast at one share (of those measured,
    the nearest a quarter; a scenario without it a blank row), the best cell of each row
    marked among the policies held to the share, the oracle aside."""
    shares = set().union(*[sc["shares"] for _, sc in scenarios])
    if not shares:
        return None
    share = min(shares, key=lambda s: abs(math.log2(s) + 2) if s > 0 else 99)
    names = list(dict.fromkeys(n for _, sc in scenarios for n in sc["policies"]))
    rows = [_scenario_title(label, sc, many) for label, sc in scenarios]
    slow = np.array([[sc["policies"].get(n, {}).get("slowdown", {}).get(share, np.nan)
                      for n in names] for _, sc in scenarios], float) * 100
    if np.isnan(slow).all():
        return None
    title = f"Policy matrix at a fast share of {share:g}"
    grid = layout.grid(1, 1.1 * len(names) + 3.5, title=title,
                       panel_height=0.45 * len(rows) + 2)
    fig, ax = grid.fig, grid.axes[0]
    im = ax.imshow(slow, cmap="viridis_r", aspect="auto")
    light = np.nanmin(slow) + 0.5 * (np.nanmax(slow) - np.nanmin(slow))   # yellow end
    for i in range(len(rows)):
        held = scenarios[i][1]["policies"]
        online = [j for j, n in enumerate(names) if n != "oracle" and not np.isnan(slow[i, j])
                  and held[n]["held"]]
        best = min(online, key=lambda j: slow[i, j]) if online else None
        for j in range(len(names)):
            if not np.isnan(slow[i, j]):
                ax.text(j, i, f"{slow[i, j]:.0f}%" + (" *" if j == best else ""),
                        ha="center", va="center", fontsize=9,
                        color="black" if slow[i, j] < light else "white")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows)
    fig.colorbar(im, ax=ax, label="slowdown against all-fast (%)", shrink=0.8)
    return Figure("tiering-matrix", "tiering", title,
                  f"Slowdown of each policy against all-fast at a fast-tier share of {share:g} "
                  "(all-fast's throughput over the policy's, less 1: 100 % is half the "
                  "throughput; lower is better); * marks each row's best policy other than the oracle "
                  "(and Linux, which is not held to the share).",
                  layout.png(fig))


PLOTTERS = {"tiering": shares_and_policies}
