"""Model against measurement: the calibrated tier model's prediction of each ML workload
case beside its measurement, and the tiering model engine's throughput beside the real
engine's. A prediction is one figure, not a sample: it is drawn without whiskers, and every
caption says where the tiers' figures came from (measured here, read from firmware, or
assumed from a named profile)."""
from __future__ import annotations

import re
from pathlib import PurePath

import matplotlib
import numpy as np
import pandas as pd

from ... import analysis
from ...tiering import calibration
from . import layout, words
from .draw import Figure

BANDS = (0.30, 0.15)        # shaded around predicted = measured, widest first


def pct(x: float) -> str:
    return f"{x * 100:.0f} %"


def tier_words(kind: str, source: str, machine: str) -> str:
    """One tier's figures (a calibration's kind and source) in the report's words."""
    if kind == "measured" and source.startswith("measured on "):
        return source           # another machine's run, already named as such
    if kind == "measured":
        paths = source.removeprefix("measured: ").split(", ")
        # A calibration named by path (calibration=) may be another machine's run.
        here = all(PurePath(p).parent.name == machine for p in paths)
        return f"measured {'here' if here else 'on another machine'} ({', '.join(paths)})"
    if kind == "hmat":
        return "read from firmware (HMAT)"
    if kind == "profile":
        name = re.search(r"profile (\S+)", source)
        return f"assumed: profile {name.group(1) if name else source}"
    return f"{kind} ({source})"


def tiering_words(tiers: dict, machine: str) -> str:
    """A tiering case's two tiers (its info["tiers"]) in the report's words. Its source
    reads "fast: KIND (SOURCE); slow: KIND (SOURCE)" where both are calibrations, after the
    tiers' figures where the benchmark put them first ("fast 128 ns 7.65 GB/s, slow ...
    (fast: ...)"), else (figures set by hand, HMAT or the built-in guesses) the
    roofline's own words."""
    if not tiers:
        return "not recorded (an older cxlbench)"
    kinds, source = tiers.get("kinds") or [], tiers.get("source") or "not recorded"
    inner = source.find("(fast: ")
    if inner > 0:           # the figures first, the calibrations in parentheses
        source = source[inner + 1:].removesuffix(")")
    fast, _, slow = source.removeprefix("fast: ").partition("; slow: ")
    if len(kinds) != 2 or "roofline" in kinds or not slow:
        return f"roofline figures ({source})"
    return ", ".join(f"{name} tier {tier_words(kind, part[len(kind) + 2:-1], machine)}"
                     for name, kind, part in zip(("fast", "slow"), kinds, (fast, slow)))


def _checked(frame: pd.DataFrame, runs) -> pd.DataFrame:
    """The rows that check the model: not a calibration run's (its cases are the model's
    inputs), each case named by its run where the report holds several."""
    inputs = {r.label for r in runs if r.suite == calibration.SUITE}
    frame = frame[~frame["label"].isin(inputs)]
    return frame.assign(case=frame["label"] + " " + frame["case"]) if len(runs) > 1 else frame


def _checks(pairs: list[tuple[pd.Series, dict]]) -> dict | None:
    """analysis.model_checks of (summary row, its model) pairs; each row of the result with
    the measured median's CI and n beside it (the whiskers)."""
    checks = analysis.model_checks([
        {"case": r["case"], "benchmark": r["benchmark"], "parameters": r["params"],
         "metric": r["metric"], "unit": r["unit"], "median": r["median"], "model": m,
         "noisy": r.get("noisy")}
        for r, m in pairs])
    if checks:
        measured = {(r["case"], r["metric"]): (r["ci_low"], r["ci_high"], r["n"])
                    for r, _ in pairs}
        for row in checks["rows"]:
            row["ci_low"], row["ci_high"], row["n"] = measured[row["case"], row["metric"]]
    return checks


def workload_checks(frame: pd.DataFrame, runs) -> dict | None:
    """Each ML workload case's prediction (info["model"]) against its measured median."""
    frame = _checked(frame, runs)
    frame = frame[frame["info"].map(lambda i: bool(i.get("model"))).astype(bool)]
    return _checks([(r, {**r["info"]["model"], "source": tier_words(
        r["info"]["model"]["kind"], r["info"]["model"]["source"], r["machine"])})
        for _, r in frame.iterrows()])


def tiering_checks(frame: pd.DataFrame, runs) -> dict | None:
    """Each tiering case on the real engine: the model's throughput for the same placements
    and moves (its `predicted` metric) against the measured throughput."""
    frame = _checked(frame, runs)
    real = frame[(frame["benchmark"] == "tiering")
                 & frame["kernel"].astype(str).str.endswith(":real")]
    predicted = real[real["metric"] == "predicted"].set_index("case")["median"]
    return _checks([(r, {"metric": "throughput", "predicted": float(predicted[r["case"]]),
                         "kind": "+".join((r["info"].get("tiers") or {}).get("kinds") or []),
                         "source": tiering_words(r["info"].get("tiers") or {}, r["machine"])})
                    for _, r in real.iterrows()
                    if r["metric"] == "throughput" and r["case"] in predicted.index])


def summary_text(checks: dict) -> str:
    """The median and worst error, and where some measurements were noisy, the same over
    the steady ones (a noisy median says more about the machine than about the model)."""
    text = (f"median |error| {pct(checks['median_error'])}, worst "
            f"{pct(checks['worst_error'])} ({checks['worst_case']}"
            f"{', its measurement noisy' if checks.get('worst_noisy') else ''}) over "
            f"{len(checks['rows'])} cases")
    if "steady_median_error" in checks:
        text += (f" (over the {checks['steady']} measured without noise: median "
                 f"{pct(checks['steady_median_error'])}, worst "
                 f"{pct(checks['steady_worst_error'])}, {checks['steady_worst_case']})")
    return text


def _scatter(checks: dict, group, *, key: str, title: str, what: str) -> Figure:
    """Predicted against measured, log-log, around the line of equality with its bands
    shaded; a colour per group(row), the worst case named."""
    rows = checks["rows"]
    both = [v for r in rows for v in (r["measured"], r["predicted"]) if v > 0]    # log axes
    lo, hi = min(both) / 1.5, max(both) * 1.5
    groups = [group(r) for r in rows]
    bands = [f"within ±{pct(band)}" for band in BANDS]
    grid = layout.grid(1, 5.6, [[*bands, "predicted = measured", *dict.fromkeys(groups)]],
                       panel_height=5.2, title=title)
    ax = grid.axes[0]
    xs = np.geomspace(lo, hi, 64)
    for band, shade, name in zip(BANDS, (0.10, 0.20), bands):
        ax.fill_between(xs, xs * (1 - band), xs * (1 + band), color="tab:green", alpha=shade,
                        linewidth=0, label=name)
    ax.plot(xs, xs, color="black", linestyle=":", linewidth=1, label="predicted = measured")
    for i, name in enumerate(dict.fromkeys(groups)):
        sel = [r for r, g in zip(rows, groups) if g == name]
        x = np.array([r["measured"] for r in sel], float)
        whiskers = np.clip([x - [r["ci_low"] for r in sel], [r["ci_high"] for r in sel] - x],
                           0, None)
        ax.errorbar(x, [r["predicted"] for r in sel], xerr=whiskers, fmt="o", markersize=5,
                    capsize=2, color=f"C{i % 10}", label=name)
    worst = next(r for r in rows if r["case"] == checks["worst_case"])
    # named on the side of the point away from the nearer edge, inside the axes
    left = np.log(worst["measured"] / lo) > np.log(hi / worst["measured"])
    ax.annotate(f"{worst['case']} ({worst['error']:+.0%})", (worst["measured"],
                worst["predicted"]), xytext=(-6 if left else 6, 6), textcoords="offset points",
                fontsize=9, ha="right" if left else "left", va="bottom")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    # plain numbers, not 6x10^1; within a decade the minor ticks carry them
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        if hi / lo < 10:
            axis.set_minor_formatter(plain)
    ax.set_aspect("equal")
    units = {r["unit"] for r in rows}
    unit = f"({words.unit(units.pop())})" if len(units) == 1 else "(each case's own unit)"
    ax.set_xlabel(f"measured {unit}")
    ax.set_ylabel(f"predicted {unit}")
    ax.grid(True, which="both", alpha=0.3)
    grid.legend()                   # beside the plot, clear of its points
    n = sorted({int(r["n"]) for r in rows})
    reps = f"n={n[0]}" if len(n) == 1 else f"n={n[0]}-{n[-1]}"
    return Figure(key, "model", title,
                  f"{what}, against its measured median (horizontal whiskers: the 95 % "
                  f"distribution-free confidence interval of the median of {reps} "
                  f"repetitions). Dotted: predicted = measured; shaded: within "
                  f"±{pct(BANDS[1])} and ±{pct(BANDS[0])}. The model's "
                  f"{summary_text(checks)}. Tiers: {'; '.join(checks['sources'])}.",
                  layout.png(grid.fig))


def model_against_measurement(frame, runs):
    """The ML workloads' cases, then (where there are) the tiering cases on the real
    engine."""
    checks = workload_checks(frame, runs)
    if checks:
        yield _scatter(checks,
                       lambda r: f"{r['benchmark']}: {words.metric(r['metric'], r['unit'])}",
                       key="model", title="Model against measurement: " + summary_text(checks),
                       what="Each ML workload case's rate as the calibrated tier model "
                            "predicted it (one figure, not a sample: no whiskers)")
    curves = share_curves(frame, runs)
    if curves is not None:
        yield curves
    checks = tiering_checks(frame, runs)
    if checks:
        yield _scatter(checks, lambda r: r["parameters"].get("policy", "?"),
                       key="model-tiering",
                       title="Tiering, model against the real engine: " + summary_text(checks),
                       what="Each tiering case on the real engine (pages placed and moved, "
                            "the workload timed), coloured by policy: the model's throughput "
                            "for the same placements and moves (the median of its "
                            "repetitions' predictions, not a sample: no whiskers)")


def share_curves(frame: pd.DataFrame, runs) -> Figure | None:
    """Each workload tiered on the real engine: its measured throughput by fast share, a
    line a policy (whiskers: the median's CI), and the model's for the same placements
    and moves dashed beside it. None where no real case recorded a prediction."""
    frame = _checked(frame, runs)
    real = frame[(frame["benchmark"] == "tiering")
                 & frame["kernel"].astype(str).str.endswith(":real")]
    predicted = real[real["metric"] == "predicted"].set_index("case")["median"]
    rows = real[(real["metric"] == "throughput") & real["case"].isin(predicted.index)]
    if rows.empty:
        return None
    rows = rows.assign(workload=rows["params"].map(lambda p: str(p.get("workload", "?"))),
                       policy=rows["params"].map(lambda p: str(p.get("policy", "?"))),
                       share=rows.apply(_share, axis=1),
                       model=rows["case"].map(predicted))
    works = list(dict.fromkeys(rows["workload"]))
    policies = list(dict.fromkeys(rows["policy"]))
    names = [*policies, "measured (whiskers: 95 % CI of the median)", "model (dashed)"]
    title = "Tiering on two real tiers: measurement and model by fast share"
    grid = layout.grid(len(works), 5.0, [names] * len(works), title=title)
    for ax, work in zip(grid.axes, works):
        mine = rows[rows["workload"] == work]
        for i, policy in enumerate(policies):
            line = mine[mine["policy"] == policy].sort_values("share")
            if line.empty:
                continue
            x, y = line["share"].to_numpy(float), line["median"].to_numpy(float)
            whiskers = np.clip([y - line["ci_low"].to_numpy(float),
                                line["ci_high"].to_numpy(float) - y], 0, None)
            ax.errorbar(x, y, yerr=whiskers, fmt="-o", markersize=4, capsize=2,
                        color=f"C{i % 10}", label=policy)
            ax.plot(x, line["model"].to_numpy(float), linestyle="--", marker="x",
                    color=f"C{i % 10}")
        ax.plot([], [], "-o", color="gray", label=names[-2])
        ax.plot([], [], "--x", color="gray", label=names[-1])
        unit = mine["unit"].iloc[0]
        grid.title(ax, work)
        ax.set_xlabel("fast share (of the tiered buffer's pages)")
        ax.set_ylabel(f"throughput ({words.unit(unit)})")
        ax.set_ylim(bottom=0)
        ax.set_xlim(-0.04, 1.04)        # all-slow to all-fast, whatever shares ran
        ax.grid(True, alpha=0.3)
    grid.legend()
    checks = tiering_checks(frame, runs)
    return Figure("model-tiering-shares", "model", title,
                  "Each workload tiered on the real engine (pages placed and moved between "
                  "two nodes, the workload timed): its measured throughput at each fast "
                  "share, a line a policy, and dashed, the calibrated model's throughput for "
                  "the same placements and moves (its tiers: "
                  f"{'; '.join(checks['sources']) if checks else 'not recorded'}). The "
                  f"model's {summary_text(checks) if checks else 'error: not computed'}. "
                  "Under emulation the clock shows the emulator's mechanics, not a device's: "
                  "what this checks is how a share moves the figure.",
                  layout.png(grid.fig))


def _share(row: pd.Series) -> float:
    """A tiering case's fast share: the bounds' 1 and 0, else its share option."""
    policy = row["params"].get("policy")
    return 1.0 if policy == "all-fast" else 0.0 if policy == "all-slow" else \
        float(row["params"].get("share", float("nan")))


ACROSS = {"model": model_against_measurement}
