"""What a run's figures say beyond each case: cache levels found in a latency sweep,
node matrices laid out as tables, and tiering's knees and gaps to the oracle."""
from __future__ import annotations

import json
import math
import statistics

from .benchmarks.tiering import OPTIONS as TIERING_OPTIONS
from .tiering.policies import KNOBS, POLICIES

# Thresholds in natural-log units of latency. Real hierarchies have 3-10x between the
# latencies of consecutive levels and 8x or more between their capacities (32K/256K,
# 48K/2M, 1M/32M, 128K/12M), so the limits below leave room for noise and smearing.
STEP = math.log(2)      # two levels differ in latency by at least this
APART = 4               # and in capacity by more than this
RISE = math.log(1.25)   # per octave: a gap rising more belongs to a step...
NOISE = 2.5             # ... or rising more than this many times the curve's noise,
CAP = math.log(1.3)     # though noise never hides a rise above this
FLAT = math.log(2)      # a level whose points spread more than this hides another
DEPART = math.log(1.5)  # a plateau left by this much within an octave ends right there


def cache_levels(points: list[tuple[int, float]]) -> list[dict]:
    """Cache capacities from (working-set size, latency) points of a chase sweep, smallest
    level first: [{"capacity": bytes or None, "latency": ns}], one per step the curve takes
    from a level to the next; None where the sweep cannot place that step within a factor
    of two (too coarse, too short, too noisy). The sweep must start inside L1.

    The curve (log latency against log size) is a plateau per level joined by rising
    steps: a random chase starts missing a level once the working set passes its capacity,
    sharply, or over an octave or two where page colouring, replacement and the
    program's other data smear the step. Points joined by gaps that do not rise form a
    plateau; plateaus too close in latency are one level; a level's capacity is the last
    size before a sharp step, or where a gradual step crosses the middle (geometric) of
    the two levels' latencies. A lone point between two steps may be a level of its own
    or part of a step: that step, and the labels of the levels after it, are not known."""
    by_size: dict[int, list[float]] = {}
    for s, v in points:
        if v and v > 0:
            by_size.setdefault(int(s), []).append(math.log(v))
    sizes = sorted(by_size)
    if len(sizes) < 3:
        return []
    c = _Curve(sizes, [statistics.median(by_size[s]) for s in sizes])
    plateaus = c.plateaus()
    while len(plateaus) > 1:
        rises = [c.level(b) - c.level(a) for a, b in zip(plateaus, plateaus[1:])]
        if min(rises) < STEP:       # noise or a TLB effect, not a level: join them
            i = rises.index(min(rises))
            plateaus[i:i + 2] = [list(range(plateaus[i][0], plateaus[i + 1][-1] + 1))]
            continue
        caps = [c.capacity(a, b) for a, b in zip(plateaus, plateaus[1:])]
        near = [(c1 / c0, i) for i, (c0, c1) in enumerate(zip(caps, caps[1:]))
                if c0 and c1 and c1 / c0 < APART]
        if not near:
            break
        del plateaus[min(near)[1] + 1]      # a level inside one step: part of the step
    # a level spread wider than any plateau may hold two: the labels after it are unsure
    out, unsure = [], not c.flat(plateaus[0])
    for lo, hi in zip(plateaus, plateaus[1:]):
        capacity = None if unsure else c.capacity(lo, hi)
        out.append({"capacity": capacity and int(capacity), "latency": math.exp(c.level(lo))})
        unsure = unsure or c.hidden(lo, hi) or not c.flat(hi)
    return out


class _Curve:
    """A sweep as sizes and log latencies, and the tests cache_levels makes on it."""

    def __init__(self, sizes: list[int], y: list[float]):
        self.sizes, self.y = sizes, y
        n = len(y)
        # Noise: each point against its nearer neighbour or the line through both (beside
        # a step one side is level, inside a step the line fits); on a flat curve the
        # median of that is 0.45 sigma.
        self.noise = statistics.median(
            min(abs(y[i] - y[i - 1]), abs(y[i + 1] - y[i]),
                abs(y[i] - (y[i - 1] + y[i + 1]) / 2)) for i in range(1, n - 1)) / 0.45
        self.floor = min(NOISE * self.noise, CAP)
        self.tol = max(RISE, self.floor)    # how far a plateau's point may sit from its level

    def octaves(self, k: int) -> float:
        return math.log2(self.sizes[k + 1] / self.sizes[k])

    def rises(self, k: int) -> bool:
        return self.y[k + 1] - self.y[k] > max(RISE * self.octaves(k), self.floor)

    def plateaus(self) -> list[list[int]]:
        """Runs of points joined by gaps that do not rise. A point with a rise on both
        sides is inside a step; a lone point at either end may be a level."""
        runs = [[0]]
        for k in range(len(self.y) - 1):
            if self.rises(k):
                runs.append([k + 1])
            else:
                runs[-1].append(k + 1)
        return [r for r in runs if len(r) > 1 or r[0] in (0, len(self.y) - 1)]

    def level(self, p: list[int]) -> float:
        return statistics.median(self.y[i] for i in p)

    def flat(self, p: list[int]) -> bool:
        return max(self.y[i] for i in p) - min(self.y[i] for i in p) <= FLAT

    def step(self, lo: list[int], hi: list[int]) -> tuple[int, int]:
        """The step's first and last point: a plateau's end that already left its level
        (one noisy point, or the start of a gradual step) belongs to the step."""
        a, b = lo[-1], hi[0]
        while a > lo[0] and self.y[a] > self.level(lo) + self.tol:
            a -= 1
        while b < hi[-1] and self.y[b] < self.level(hi) - self.tol:
            b += 1
        return a, b

    def hidden(self, lo: list[int], hi: list[int]) -> bool:
        """Whether a level may hide inside the step: a point inside it alone over three
        octaves or more, or a part of it that rises less than two thirds as steeply as
        parts on either side."""
        a, b = self.step(lo, hi)
        s, y = self.sizes, self.y
        if any(s[k + 1] / s[k - 1] >= 8 for k in range(a + 1, b)):
            return True
        d = [(y[k + 1] - y[k]) / self.octaves(k) for k in range(a, b)]
        return any(d[j] < max(d[:j]) / 1.5 and d[j] < max(d[j + 1:]) / 1.5
                   for j in range(1, len(d) - 1))

    def capacity(self, lo: list[int], hi: list[int]) -> float | None:
        """The last size that fit before a sharp step, or where a gradual one crosses the
        middle of the two levels; the middle of the gap that holds it where that gap is
        wider than an octave; None where no place is within a factor of two."""
        a, b = self.step(lo, hi)
        s, y = self.sizes, self.y
        if b > a + 1 and (len(lo) == 1 or len(hi) == 1 or self.hidden(lo, hi)):
            # A level may hide inside the step (or a lone end point be part of it): only
            # a sharp departure from a plateau of two points or more, over one octave
            # (finer sweeps see a smeared step as several small rises), still places the
            # lower level, at the last size that fit.
            sharp = (len(lo) > 1 and abs(self.octaves(a) - 1) < 0.01
                     and y[a + 1] - y[a] >= max(DEPART, 2 * self.floor))
            return s[a] if sharp else None
        middle = (self.level(lo) + self.level(hi)) / 2
        k = next((k for k in range(a, b) if y[k + 1] >= middle), b - 1)
        r = s[k + 1] / s[k]
        if r > 2.01:
            return math.sqrt(s[k] * s[k + 1]) if r <= 4.01 else None
        if b == a + 1:
            return s[a]
        t = (middle - y[k]) / (y[k + 1] - y[k]) if y[k + 1] > y[k] else 0.5
        return s[k] * r ** min(1.0, max(0.0, t))


def compare_with_sysfs(levels: list[dict], caches: list[dict]) -> list[dict]:
    """Detected levels next to the data/unified caches sysfs lists, in order; a level
    sysfs lists that the sweep did not show is "detected": None."""
    known = sorted((c for c in caches if c.get("type") in ("Data", "Unified")),
                   key=lambda c: c["level"])
    out = []
    for i in range(max(len(levels), len(known))):
        level = levels[i] if i < len(levels) else {"capacity": None, "latency": None}
        row = {"level": f"L{i + 1}", "detected": level["capacity"],
               "latency_ns": level["latency"] and round(level["latency"], 2)}
        if i < len(known):
            row["sysfs"] = known[i]["size"]
            if level["capacity"]:
                row["ratio"] = round(level["capacity"] / known[i]["size"], 3)
        out.append(row)
    return out


def sweep_cache_levels(records: list[dict], caches: list[dict]) -> list[dict]:
    """Cache levels of each chase sweep in a run's records (5 sizes or more, the other
    parameters equal), next to sysfs's caches."""
    sweeps: dict[tuple, list] = {}
    for r in records:
        if r["benchmark"] == "chase" and r["metric"] == "latency" and r["status"] == "ok":
            p = r["parameters"]
            key = (r["case"].split("/")[0],) + tuple(sorted(
                (k, str(v)) for k, v in p.items() if k not in ("size", "repeat", "warmup")))
            sweeps.setdefault(key, []).append((p["size"], r["median"]))
    out = []
    for key, points in sweeps.items():
        if len(points) >= 5:
            params = dict(key[1:])
            out.append({"job": key[0], "mem": params.get("mem"), "page": params.get("page"),
                        "levels": compare_with_sysfs(cache_levels(points), caches)})
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
        home = p.get("mem.line") or p.get("mem")      # the line's own placement, if given
        t = tables.setdefault((str(home), p.get("mode")), {"cells": {}})
        a, b = cpus
        t["cells"][(a, b)] = t["cells"][(b, a)] = r["median"]
    out = []
    for (mem, mode), t in tables.items():
        cpus = sorted({a for a, _ in t["cells"]})
        out.append({"mem": mem, "mode": mode, "cpus": cpus,
                    "cells": [[a, b, x] for (a, b), x in t["cells"].items()]})
    return out


# ---- tiering ---------------------------------------------------------------------------
KNEE_SLOWDOWN = 0.05    # the knee: the smallest fast share within 5 % of all-fast
BOUNDS = ("all-fast", "all-slow")
# Settings that tell a scenario's cases apart without changing what the bounds measure:
# how a case was repeated, and the real engine's time box (named in the policy's row).
NOT_SCENARIO = ("policy", "share", "engine", "repeat", "warmup", "timeout", "tolerance",
                "move_ms")


def tiering_scenarios(records: list[dict], within: float = KNEE_SLOWDOWN) -> list[dict]:
    """Tiering cases grouped into scenarios (the same workload and settings, policy and
    share apart), each with every policy's throughput, slowdown against all-fast and gap
    to the oracle at each share, and its knee: the smallest share from which on, at every
    larger share measured, the slowdown stays within KNEE_SLOWDOWN (None: not within it
    even at the largest; `within`: the slowdown a knee allows). Slowdown is all-fast's
    throughput over the policy's, less 1. Each scenario says where its tiers' figures came
    from (measured, HMAT, a profile: assumed)."""
    groups: dict[str, dict] = {}
    for r in records:
        if r["benchmark"] != "tiering" or r["status"] != "ok" or r["metric"] is None:
            continue
        p = r["parameters"]
        engine = r["kernel"].partition(":")[2]      # what ran: the real engine or the model
        key = json.dumps({**{k: v for k, v in sorted(p.items())
                             if k not in NOT_SCENARIO and k not in KNOBS},
                          "engine": engine}, default=str)
        # A policy's knobs and a time box set away from their defaults name it apart:
        # "hemem threshold=4", "memtis move_ms=5".
        own = [k for k, (policy, _, _) in KNOBS.items() if policy == p["policy"]]
        name = " ".join([p["policy"], *(f"{KNOBS[k][1] if k in KNOBS else k}={p[k]}"
                                        for k in (*own, "move_ms")
                                        if k in p and p[k] != TIERING_OPTIONS[k].default)])
        g = groups.setdefault(key, {"params": p, "cells": {}, "units": {}, "engines": set(),
                                    "held": {}, "tiers": r.get("tiers"), "within": within})
        g["engines"].add(engine)
        g["held"][name] = not POLICIES[p["policy"]].KERNEL
        share = 1.0 if p["policy"] == "all-fast" else 0.0 if p["policy"] == "all-slow" \
            else float(p["share"])
        g["cells"].setdefault((name, share), {})[r["metric"]] = r["median"]
        g["units"][r["metric"]] = r["unit"]
    return [_scenario(g) for g in groups.values()]


def _scenario(g: dict) -> dict:
    cells = g["cells"]
    top = cells.get(("all-fast", 1.0), {}).get("throughput")
    bottom = cells.get(("all-slow", 0.0), {}).get("throughput")
    oracle = {s: c["throughput"] for (pol, s), c in cells.items() if pol == "oracle"}
    policies: dict[str, dict] = {}
    for (pol, share), c in sorted(cells.items(), key=lambda kv: -kv[0][1]):
        if pol in BOUNDS:
            continue
        row = policies.setdefault(pol, {"throughput": {}, "slowdown": {}, "gap": {},
                                        "fast_hits": {}, "migrated": {}, "predicted": {}})
        t = c.get("throughput")
        row["throughput"][share] = t
        for metric in ("fast_hits", "migrated", "predicted"):
            if metric in c:
                row[metric][share] = c[metric]
        if t and top:
            row["slowdown"][share] = top / t - 1
        if t and oracle.get(share):
            row["gap"][share] = oracle[share] / t - 1
    for name, row in policies.items():
        # Linux is not held to the share: its pages only start there (fast_share says
        # where they went), so it has no knee.
        row["held"] = g["held"][name]
        row["knee"] = knee(row["slowdown"], g["within"]) if row["held"] else None
    p = g["params"]
    return {"workload": p.get("workload"), "phase": p.get("phase"),
            "engine": "+".join(sorted(g["engines"])),
            "params": {k: v for k, v in p.items() if k not in ("policy", "share")},
            "all_fast": top, "all_slow": bottom, "unit": g["units"].get("throughput"),
            "tiers": g["tiers"], "knee_within": g["within"],
            "shares": sorted({s for row in policies.values() for s in row["throughput"]},
                             reverse=True),
            "policies": policies}


def knee(slowdown: dict[float, float], within: float = KNEE_SLOWDOWN) -> float | None:
    """The smallest share from which on every larger share's slowdown is within
    `within`."""
    best = None
    for share in sorted(slowdown, reverse=True):
        if slowdown[share] > within:
            break
        best = share
    return best


def model_checks(records: list[dict]) -> dict | None:
    """Each case the calibrated model predicted beside its measurement: the prediction,
    the measured median and the error (predicted / measured - 1); with the median and
    worst |error| over them. None where no case was predicted."""
    rows = []
    for r in records:
        m = r.get("model")
        if not m or r["metric"] != m["metric"] or not r.get("median"):
            continue
        rows.append({"case": r["case"], "benchmark": r["benchmark"],
                     "parameters": r["parameters"], "metric": r["metric"], "unit": r["unit"],
                     "predicted": m["predicted"], "measured": r["median"],
                     "error": m["predicted"] / r["median"] - 1, "source": m["source"],
                     "kind": m["kind"], "noisy": bool(r.get("noisy"))})
    if not rows:
        return None
    worst = max(rows, key=lambda x: abs(x["error"]))
    steady = [x for x in rows if not x["noisy"]]
    out = {"rows": rows, "median_error": statistics.median(abs(x["error"]) for x in rows),
           "worst_error": abs(worst["error"]), "worst_case": worst["case"],
           "worst_noisy": worst["noisy"], "sources": sorted({x["source"] for x in rows}),
           "steady": len(steady)}
    if steady and len(steady) < len(rows):
        # A noisy measurement's median says more about the machine than about the model.
        top = max(steady, key=lambda x: abs(x["error"]))
        out.update(steady_median_error=statistics.median(abs(x["error"]) for x in steady),
                   steady_worst_error=abs(top["error"]), steady_worst_case=top["case"])
    return out
