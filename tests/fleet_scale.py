"""Synthetic fleets on disk, and how long cxlbench takes to load and report them.

    python -m tests.fleet_scale --seed-run RUN --machines 1000 --repeat 11
    python -m tests.fleet_scale --seed-run RUN --machines 1 --copies 1610

A seed run (any real run folder) is copied to each synthetic machine, RESULTS/m0000/...:
its cases `--copies` times over (case ids renumbered), each case's rows `--repeat` times
over (the journal's counts raised to match), and every value scaled by the machine's own
factor and a little noise per row, so that summaries and comparisons have real spread.
`--slow K` machines (the last K) are 40 % slower. `--kinds K` makes K kinds of machine
(machine m is of kind m mod K: its CPU renamed, its figures 30 % further off per kind).
Then, each in a child process whose
peak memory is read from the kernel:

- load: every run loaded, twice, each in a fresh process (the second reads the columnar
  copy the first wrote);
- report: `cxlbench report RESULTS --latest -o OUT`.

Figures go to stdout, one line each, with the machine's CPU: on a shared 2-core VM,
compare them only with figures from the same run of this script."""
from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def build(seed: Path, root: Path, machines: int, copies: int, repeat: int,
          slow: int, kinds: int = 1) -> tuple[int, int]:
    """Write the fleet; (cases, rows) in all."""
    meta = json.loads((seed / "run.json").read_text())
    journal = [json.loads(line) for line in (seed / "cases.jsonl").read_text().splitlines()]
    lines = (seed / "results.csv").read_text().splitlines(keepends=True)
    header = next(csv.reader([lines[0]]))
    col_case, col_value = header.index("case"), header.index("value")
    by_case: dict[str, list[list[str]]] = {}
    for row in csv.reader(lines[1:]):
        by_case.setdefault(row[col_case], []).append(row)
    done = {e["case"]: e for e in journal}
    cases = [c for c in meta["cases"] if c["id"] in done]
    rng = np.random.default_rng(1)
    total_rows = 0
    for m in range(machines):
        name = f"m{m:04d}"
        run_id = meta["run_id"]
        out = root / name / run_id
        out.mkdir(parents=True)
        kind = m % kinds
        factor = float(rng.normal(1.0, 0.03)) * (1.4 if m >= machines - slow else 1.0) \
            * (1 + 0.3 * kind)
        topology = json.loads(json.dumps(meta.get("topology") or {}))
        if kind:
            cpu = topology.setdefault("cpu", {})
            cpu["model"] = f"{cpu.get('model') or 'CPU'} variant {kind}"
        new_cases, new_journal = [], []
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(header)
        n = 0
        for k in range(copies):
            for c in cases:
                nid = f"{c['job']}/{n:06d}" if copies > 1 else c["id"]
                n += 1
                new_cases.append({**c, "id": nid})
                e = json.loads(json.dumps(done[c["id"]]))
                e["case"], e["machine"] = nid, name
                rows = by_case.get(c["id"], [])
                noise = rng.normal(1.0, 0.01, len(rows) * repeat).tolist()
                for i, row in enumerate(rows * repeat):
                    r = list(row)
                    r[col_case] = nid
                    r[col_value] = repr(float(row[col_value]) * factor * noise[i])
                    w.writerow(r)
                own = factor * float(rng.normal(1.0, 0.001))   # each case's summary its own
                for s in e["summary"].values():
                    s["n"] *= repeat
                    for key in ("median", "ci_low", "ci_high"):
                        if isinstance(s.get(key), (int, float)):
                            s[key] *= own
                new_journal.append(e)
                total_rows += len(rows) * repeat
        (out / "run.json").write_text(json.dumps({**meta, "cases": new_cases,
                                                  "machine_id": name,
                                                  "topology": topology}))
        (out / "cases.jsonl").write_text("".join(json.dumps(e) + "\n" for e in new_journal))
        (out / "results.csv").write_text(buf.getvalue())
    return machines * len(cases) * copies, total_rows


LOAD = """
import sys, time
from pathlib import Path
from cxlbench.report.runs import load_runs
import pandas, pyarrow.parquet         # imported before the clock starts
t = time.perf_counter()
runs = load_runs([Path(sys.argv[1])], latest=True)
print(f"{time.perf_counter() - t:.2f} s, {sum(len(r.rows) for r in runs)} rows")
"""


def child(argv: list[str]) -> tuple[float, float, float, str]:
    """Run a child to its end; its (wall s, CPU s, peak GB of its own, stdout)."""
    import os
    import tempfile
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)       # this child's own rusage
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(argv)} failed:\n{err.read()[-3000:]}")
        return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 2**20, out.read()


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed-run", type=Path, required=True)
    ap.add_argument("--machines", type=int, default=1000)
    ap.add_argument("--copies", type=int, default=1, help="the seed's cases, times over")
    ap.add_argument("--repeat", type=int, default=1, help="each case's rows, times over")
    ap.add_argument("--slow", type=int, default=5, help="planted slow machines")
    ap.add_argument("--kinds", type=int, default=1, help="kinds of machine")
    ap.add_argument("--out", type=Path, default=Path("/tmp/cxlbench-fleet-scale"))
    ap.add_argument("--keep", action="store_true", help="keep the fleet and report")
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    fleet = a.out / "results"
    if a.build_only:
        t = time.perf_counter()
        cases, rows = build(a.seed_run, fleet, a.machines, a.copies, a.repeat,
                            min(a.slow, a.machines - 1), max(a.kinds, 1))
        size = sum(p.stat().st_size for p in fleet.rglob("*") if p.is_file())
        print(f"fleet: {a.machines} machines, {cases} cases, {rows} rows, "
              f"{size / 1e6:.0f} MB on disk, built in {time.perf_counter() - t:.0f} s; "
              f"CPU: {cpu_name()}")
        return
    shutil.rmtree(a.out, ignore_errors=True)
    # Built in a child: a child forked from a parent that holds the fleet in memory
    # would count the parent's pages in its own peak.
    print(child([sys.executable, "-m", "tests.fleet_scale", *sys.argv[1:], "--build-only"]
                )[3].strip())
    # Each load in a process of its own, as a report's: the first from the sources (and
    # writing the columnar copy), then from the copy.
    for what in ("sources (writing the copy)", "columnar copy"):
        wall, cpu, peak, out = child([sys.executable, "-c", LOAD, str(fleet)])
        print(f"load from the {what}: {out.strip()}; peak {peak:.2f} GB")
    report = a.out / "report"
    wall, cpu, peak, _ = child([sys.executable, "-m", "cxlbench", "report", str(fleet),
                                "--latest", "-o", str(report)])
    index = report / "report.html"
    pages = [p.stat().st_size for p in (report / "pages").glob("*.html")]
    print(f"report: {wall:.0f} s wall, {cpu:.0f} s CPU, peak {peak:.2f} GB; report.html "
          f"{index.stat().st_size / 1e6:.2f} MB"
          + (f", {len(pages)} pages of {sum(pages) / 1e6:.0f} MB, the largest "
             f"{max(pages) / 1e6:.2f} MB" if pages else ""))
    if not a.keep:
        shutil.rmtree(a.out, ignore_errors=True)


if __name__ == "__main__":
    main()
