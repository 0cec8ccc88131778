"""What a run's figures say beyond each case: cache levels found in a latency sweep, and
node matrices laid out as tables."""
from __future__ import annotations

import math

PLATEAU = 1.25      # points within this factor of a level's fastest belong to that level


def cache_levels(points: list[tuple[int, float]]) -> list[dict]:
    """Cache capacities from (working-set size, latency) points of a chase sweep.

    Points group into plateaus (each level's latency) and the points between them. A
    sharp step (no point between two plateaus) puts the capacity at the last size that
    still fit; a gradual one at the size where latency crosses the geometric middle of
    the two plateaus, interpolated on a log scale."""
    points = sorted(points)
    groups: list[list[tuple[int, float]]] = []
    for size, lat in points:
        if groups and lat <= PLATEAU * min(v for _, v in groups[-1]):
            groups[-1].append((size, lat))
        else:
            groups.append([(size, lat)])
    plateaus = [i for i, g in enumerate(groups) if len(g) >= 2]
    levels = []
    for lo, hi in zip(plateaus, plateaus[1:]):
        below, above = groups[lo], groups[hi]
        level = min(v for _, v in below)
        if hi == lo + 1:
            capacity = below[-1][0]
        else:
            between = below[-1:] + [p for g in groups[lo + 1:hi] for p in g] + above[:1]
            middle = math.sqrt(level * min(v for _, v in above))
            capacity = below[-1][0]
            for (s0, l0), (s1, l1) in zip(between, between[1:]):
                if l0 <= middle <= l1:
                    t = (math.log(middle) - math.log(l0)) / (math.log(l1) - math.log(l0))
                    capacity = int(s0 * (s1 / s0) ** t)
                    break
        levels.append({"capacity": capacity, "latency": level})
    return levels


def compare_with_sysfs(levels: list[dict], caches: list[dict]) -> list[dict]:
    """Pair detected levels with the data/unified caches sysfs lists, in order."""
    known = sorted((c for c in caches if c.get("type") in ("Data", "Unified")),
                   key=lambda c: c["level"])
    out = []
    for i, level in enumerate(levels):
        row = {"level": f"L{i + 1}", "detected": level["capacity"],
               "latency_ns": round(level["latency"], 2)}
        if i < len(known):
            row["sysfs"] = known[i]["size"]
            row["ratio"] = round(level["capacity"] / known[i]["size"], 3)
        out.append(row)
    return out


def matrices(records: list[dict]) -> dict[str, dict]:
    """Matrix cases as {metric: {"unit", "initiators", "targets", "cells"}}."""
    out: dict[str, dict] = {}
    for r in records:
        if r["benchmark"] != "matrix" or r["status"] != "ok" or r["metric"] is None:
            continue
        if r["metric"] not in ("latency", "bandwidth"):
            continue
        m = out.setdefault(r["metric"], {"unit": r["unit"], "cells": {}})
        p = r["parameters"]
        m["cells"][(p["initiator"], p["target"])] = r["median"]
    for m in out.values():
        m["initiators"] = sorted({i for i, _ in m["cells"]})
        m["targets"] = sorted({t for _, t in m["cells"]})
    return out


def pingpong_matrices(records: list[dict]) -> list[dict]:
    """Ping-pong cases as CPU x CPU tables, one per home placement and mode (symmetric:
    a transfer a->b is measured together with b->a)."""
    tables: dict[tuple, dict] = {}
    for r in records:
        if r["benchmark"] != "pingpong" or r["status"] != "ok" or r["metric"] != "latency":
            continue
        p = r["parameters"]
        cpus = r.get("cpus") or []
        if len(cpus) != 2:
            continue
        t = tables.setdefault((str(p.get("mem")), p.get("mode")), {"cells": {}})
        a, b = cpus
        t["cells"][(a, b)] = t["cells"][(b, a)] = r["median"]
    out = []
    for (mem, mode), t in tables.items():
        cpus = sorted({a for a, _ in t["cells"]})
        out.append({"mem": mem, "mode": mode, "cpus": cpus,
                    "cells": [[a, b, x] for (a, b), x in t["cells"].items()]})
    return out
