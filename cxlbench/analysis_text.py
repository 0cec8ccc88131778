"""A run's analysis as the terminal shows it after the summary: the cache levels each
latency sweep found, ping-pong tables, tiering's slowdowns, knees and gaps, and the node
matrices. Each function returns lines; `cxlbench run` echoes them."""
from __future__ import annotations

import statistics

from .analysis import KNEE_SLOWDOWN
from .units import format_size


def analysis_lines(found: dict) -> list[str]:
    out: list[str] = []
    for sweep in found["cache_levels"]:
        parts = [f"{row['level']} " + (format_size(row["detected"], exact=False)
                                       if row["detected"] else "not detected")
                 + (f" (sysfs {format_size(row['sysfs'])})" if "sysfs" in row else "")
                 for row in sweep["levels"]]
        out.append(f"cache levels from {sweep['job']} ({sweep['mem']}, {sweep['page']} pages): "
                   + ", ".join(parts))
    for table in found["pingpong"]:
        cells = {(a, b): x for a, b, x in table["cells"]}
        cpus = table["cpus"]
        out.append(f"\nping-pong ({table['mode']}, line homed {table['mem']}), ns one way, CPU x CPU")
        out.append("cpu  " + "".join(f"{c:>10}" for c in cpus))
        for a in cpus:
            out.append(f"{a:>4} " + "".join(
                f"{cells[(a, b)]:>10.4g}" if (a, b) in cells else f"{'-':>10}" for b in cpus))
    if found.get("model"):
        out += model_lines(found["model"])
    for scenario in found.get("tiering", []):
        out += tiering_lines(scenario)
    for metric, m in found["matrices"].items():
        cells = {(i, t): x for i, t, x in m["cells"]}
        out.append(f"\n{metric} matrix ({m['unit']}), initiator rows x target columns")
        out.append("node " + "".join(f"{t:>10}" for t in m["targets"]))
        for i in m["initiators"]:
            out.append(f"{i:>4} " + "".join(
                f"{cells[(i, t)]:>10.4g}" if (i, t) in cells else f"{'-':>10}"
                for t in m["targets"]))
    return out


def tiering_lines(sc: dict) -> list[str]:
    """Slowdown against all-fast at each share, the knee, and at the smallest share the
    gap to the oracle and the MB moved; for the real engine, the model's error."""
    out: list[str] = []
    unit = sc["unit"] or ""
    bounds = ", ".join(f"{name} {value:.4g} {unit}" for name, value in
                       (("all-fast", sc["all_fast"]), ("all-slow", sc["all_slow"])) if value)
    engine = {"model": "model engine: PREDICTED from the tiers' figures, "
                       "not measured", "real": "real engine: pages moved, time measured"}
    out.append(f"\ntiering: {sc['workload']}" + (", hot set shifting halfway"
                                                   if sc["phase"] == "shift" else "")
               + f" ({engine.get(sc['engine'], sc['engine'] + ' engines')})"
               + (f"; {bounds}" if bounds else ""))
    if sc.get("tiers"):
        out.append(f"tiers: {sc['tiers']}")
    if not sc["policies"]:
        return out
    if not sc["all_fast"]:
        out.append("(no all-fast case: slowdowns and knees need one)")
    shares, real = sc["shares"], sc["engine"] == "real"
    out.append("slowdown against all-fast at each fast share (all-fast's throughput over "
               "the policy's, less 1; below 0: faster, within noise); knee: the smallest share "
               f"within {sc.get('knee_within', KNEE_SLOWDOWN):.0%} "
               f"({'measured' if real else 'from the model'}); at {shares[-1]:g}: gap, the oracle's "
               "throughput over the policy's, and MB moved"
               + ("; model: the prediction's median error over the shares" if real else ""))
    w = max(12, *(len(name) for name in sc["policies"]))
    out.append(f"{'policy':<{w}} " + "".join(f"{s:>8g}" for s in shares)
               + f"{'knee':>8}{'gap':>8}{'moved MB':>10}" + (f"{'model':>8}" if real else ""))

    def knee_text(row: dict) -> str:
        if not row["held"]:
            return "n/a"        # not held to the share
        if not sc["all_fast"]:
            return "-"          # no baseline to be within the knee's slowdown of
        return "none" if row["knee"] is None else format(row["knee"], "g")

    def cell(value, width=8, spec=".1%"):
        # a space first: a value wider than its column pushes the line on, never joins
        # its neighbour (26147.8% beside 0 MB read as 026147.8%)
        return " " + (f"{value:>{width - 1}{spec}}" if value is not None else f"{'-':>{width - 1}}")
    for name, row in sc["policies"].items():
        errors = [row["predicted"][s] / t - 1 for s, t in row["throughput"].items()
                  if t and s in row["predicted"]]
        out.append(f"{name:<{w}} " + "".join(cell(row["slowdown"].get(s)) for s in shares)
                   + f"{knee_text(row):>8}"
                   + cell(row["gap"].get(shares[-1]))
                   + cell(row["migrated"].get(shares[-1]), 10, ".4g")
                   + (cell(statistics.median(errors) if errors else None) if real else ""))
    return out


def model_lines(checks: dict) -> list[str]:
    """The calibrated model against each measured case, worst error named first."""
    out = [f"\nmodel against measurement: median |error| {checks['median_error']:.0%}, worst "
           f"{checks['worst_error']:.0%} ({checks['worst_case']}"
           + (", its measurement noisy" if checks.get("worst_noisy") else "") + ")"]
    if "steady_median_error" in checks:
        out.append(f"  over the {checks['steady']} measurements that were not noisy: median "
                   f"{checks['steady_median_error']:.0%}, worst "
                   f"{checks['steady_worst_error']:.0%} ({checks['steady_worst_case']})")
    out.append("  tiers: " + "; ".join(checks["sources"]))
    # only the parameters that differ between a benchmark's cases say which is which
    rows = checks["rows"]
    varying = {}
    for r in rows:
        varying.setdefault(r["benchmark"], []).append(r["parameters"])
    varying = {b: [k for k in ps[0] if k != "mem" and len({str(p.get(k)) for p in ps}) > 1]
               for b, ps in varying.items()}
    out.append(f"  {'case':<18} {'predicted':>14} {'measured':>14} {'error':>7}  parameters")
    for r in rows:
        params = " ".join(f"{k}={r['parameters'][k]}" for k in varying[r["benchmark"]]
                          if k in r["parameters"])
        out.append(f"  {r['case']:<18} {r['predicted']:>9.4g} {r['unit']:<4} "
                   f"{r['measured']:>9.4g} {r['unit']:<4} {r['error']:>+7.0%}"
                   + (" noisy" if r["noisy"] else "      ") + f"  {params}")
    return out


def kernel_lines(cal) -> list[str]:
    """The kernels' own figures: the embedding kernel's prefetched gathers at the largest
    working set, on 4 KiB pages and huge; the streaming kernels' own work; then which
    figures each workload is charged by."""
    def at(huge: bool) -> str:
        return ", ".join(f"{r} B rows {cal.prefetched[(r, huge)][-1][1]:.3g}"
                         for r, h in sorted(cal.prefetched) if h == huge) + " ns"
    out = []
    if any(not h for _, h in cal.prefetched):
        largest = format_size(int(max(s for c in cal.prefetched.values() for s, _ in c)),
                              exact=False)
        out.append(f"  prefetched row gathers (the embedding kernel's) at {largest}, a lookup "
                   f"on one thread: {at(False)}"
                   + (f"; on huge pages {at(True)}" if any(h for _, h in cal.prefetched)
                      else ""))
    if cal.sparse:
        out.append("  a miss among hits (sparse gathers), times a dense stream's excess: " +
                   "; ".join(f"{r} B rows " + ", ".join(
                       f"1 in {round(1 / far)} missing {excess:.2g}x" for far, excess in points)
                       for r, points in sorted(cal.sparse.items())))
    gathers = ("its prefetched gathers" + (", a miss among hits dearer" if cal.sparse else
                                           " (sparse misses not calibrated)")) if out else \
        "random reads (prefetched gathers not calibrated: cxlbench calibrate measures them)"
    if cal.compute:
        out.append("  streaming kernels' own work, one thread (data in the caches): " + ", ".join(
            f"{k} {ns:.3g} ns a parameter" for (k, t), ns in sorted(cal.compute.items())
            if t == 1))
    steps = "the streams, or its own work where that is longer" if cal.compute else \
        "the streams (its own work not calibrated)"
    out.append(f"  charged: embedding lookups by {gathers} and its work per element type; "
               f"KV-cache blocks by random reads; optimizer steps by {steps}; checkpoints "
               "by the streams")
    return out


def calibration_lines(cal) -> list[str]:
    """A node's calibration (tiering.calibration.Calibration) in words and units, its
    source first. A sweep that never left the caches gives no memory figure: its last
    level is named as the cache it is, and its reads as at the largest working set."""
    levels = cal.levels()
    caches = ", ".join(f"{format_size(size, exact=False)} at {ns:.3g} ns"
                       for size, ns in levels[:-1])
    floors = "; ".join(
        f"{dt} " + ", ".join(f"dim {dim} {ns:.3g}" for (d, dim, t), ns in
                             sorted(cal.floors.items()) if d == dt and t == 1) + " ns"
        for dt in dict.fromkeys(d for d, _, t in sorted(cal.floors) if t == 1))
    streams = (f"{cal.bandwidth:.4g} GB/s read with {cal.threads} CPUs, "
               f"{cal.stream[('read', 1)]:.4g} GB/s on one")
    if cal.in_cache:
        largest = format_size(int(cal.sweep[-1][0]), exact=False)
        memory = (f"  no memory figure: {cal.in_cache} (its {cal.idle_ns:.4g} ns is that "
                  f"cache's; --var largest={format_size(cal.past_cache)} sweeps past it); "
                  f"streams: {streams}")
        caches += (", " if caches else "") + f"then {largest} at {cal.idle_ns:.3g} ns, still cached"
        gathers = f"random reads at the largest working set ({largest}, cached), one thread: "
    else:
        memory = f"  memory: {cal.idle_ns:.4g} ns idle, {streams}; {cal.mlp:.3g} misses in " \
                 "flight a thread"
        gathers = "random reads from memory, one thread: "
    return [f"node {cal.node}: {cal.kind} ({cal.source})",
            memory,
            f"  caches (from the sweep): {caches or 'none seen'}",
            "  " + gathers + ", ".join(
                f"{g} B {cal.gather[g][-1][1]:.3g} GB/s" for g in sorted(cal.gather)),
            f"  embedding kernel's own work a lookup, one thread: {floors or 'not measured'}",
            *kernel_lines(cal),
            f"  loaded-latency curve: {len(cal.curve)} points" +
            (f", up to {cal.curve[-1][0]:.3g} GB/s at {cal.curve[-1][1]:.4g} ns"
             if cal.curve else "")]
