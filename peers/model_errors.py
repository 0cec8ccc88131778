"""The calibrated model of this checkout against runs already measured: each modelled case
(embedding, kvcache, optimizer, checkpoint) of the runs given predicted again from its
recorded options and choices, beside its measured median; per job and in all, the median
and worst |error|. The measurements stay as they were; only the model is this code's, so
two checkouts of the model compare on the very same measurements.

    python peers/model_errors.py RUN [RUN...] [--calibration RUN] [--results-dir DIR]
                                 [--repeats]

The tiers: the node each case's own prediction named (or it was bound to), from
--calibration where given, else this machine's calibrations under --results-dir (default:
the run's own results folder)."""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import statistics
import sys

from cxlbench.benchmarks import checkpoint
from cxlbench.tiering import calibration, model
from cxlbench.workloads import embedding, kvcache, optimizer

# bench -> (the case's demand from its options and info, the metric, units a ns each)
DEMANDS = {
    "embedding": (lambda p, i: embedding.demand(p), "lookups", 1e3),
    "kvcache": (lambda p, i: kvcache.demand(p), "tokens", 1e9),
    "optimizer": (lambda p, i: optimizer.step_demand(i["params"], p["precision"]), "params", 1e3),
    "checkpoint": (lambda p, i: checkpoint.demand({**p, "store": i["store"]}, i["bytes"]),
                   "bandwidth", 1.0),
}


def errors(run: pathlib.Path, tiers) -> list[dict]:
    out = []
    for line in (run / "cases.jsonl").read_text().splitlines():
        case = json.loads(line)
        bench, params = case.get("bench"), case.get("params") or {}
        # the node the run's own prediction named (a case placed locally: its CPUs'),
        # else the one it was bound to
        node = ((case.get("info") or {}).get("model") or {}).get("node")
        if node is None and str(params.get("mem", "")).startswith("bind:"):
            node = int(str(params["mem"]).split(":")[1])
        if case.get("status") != "ok" or bench not in DEMANDS or node is None:
            continue
        how, metric, per_ns = DEMANDS[bench]
        demand = how(params, case.get("info") or {})
        if demand is None:
            continue
        cal = tiers(int(node))
        predicted = demand.units / model.predict_ns(demand, (cal, cal), len(case["cpus"])) \
            * per_ns
        measured = case["summary"][metric]["median"]
        out.append({"case": case["case"], "job": case["case"].split("/")[0],
                    "predicted": predicted, "measured": measured,
                    "error": predicted / measured - 1,
                    "noisy": case["summary"][metric].get("noisy", False)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=pathlib.Path)
    ap.add_argument("--calibration", default="")
    ap.add_argument("--results-dir", default="")
    ap.add_argument("--repeats", action="store_true",
                    help="the runs measured the same cases: judge each by their geometric "
                         "mean (noisy: they differ by more than 10 %%)")
    a = ap.parse_args()
    found = {}

    def tiers(node: int):
        if node not in found:
            found[node] = calibration.measured(
                node, a.results_dir or a.runs[0].parent.parent, path=a.calibration)
            if found[node] is None:
                sys.exit(f"no calibration of node {node} (cxlbench calibrate)")
        return found[node]

    rows = [r for run in a.runs for r in errors(run, tiers)]
    if a.repeats:       # the same cases measured again: each by the geometric mean
        by: dict[str, list[dict]] = {}
        for r in rows:
            by.setdefault(r["case"], []).append(r)
        rows = []
        for case, rs in by.items():
            measured = math.exp(statistics.fmean(math.log(r["measured"]) for r in rs))
            spread = max(r["measured"] for r in rs) / min(r["measured"] for r in rs) - 1
            rows.append({**rs[0], "measured": measured, "noisy": spread > 0.1,
                         "error": rs[0]["predicted"] / measured - 1})
    if not rows:
        print("no modelled case in these runs")
        return 1
    jobs: dict[str, list[float]] = {}
    print(f"{'case':<22} {'predicted':>10} {'measured':>10} {'error':>7}")
    for r in rows:
        jobs.setdefault(r["job"], []).append(abs(r["error"]))
        print(f"{r['case']:<22} {r['predicted']:>10.4g} {r['measured']:>10.4g} "
              f"{r['error']:>+7.0%}" + ("  noisy" if r["noisy"] else ""))
    print(f"\n{'job':<16} {'cases':>5} {'median':>7} {'worst':>7}")
    for job, e in [*jobs.items(), ("all", [abs(r["error"]) for r in rows])]:
        print(f"{job:<16} {len(e):>5} {statistics.median(e):>7.0%} {max(e):>7.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
