"""Runs as reports read them: which run directories the given paths name, and every case's
repetitions and summary (median, confidence interval) with its parameters, in one frame
with a label per run."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .. import results, stats
from ..results import is_prediction
from ..errors import ResultsError
from ..units import format_list, format_size
from .text import printable


@dataclass
class LoadedRun:
    path: Path
    meta: dict
    rows: pd.DataFrame          # one row per repetition and metric (results.csv)
    journal: dict[str, dict]    # finished cases by id: status, params, info, placement
    label: str = ""

    @property
    def machine(self) -> str:
        """The machine the run recorded (host name, or emulated-<topology>), not the name
        of the folder it was copied into."""
        return self.meta.get("machine_id") or self.path.parent.name

    @property
    def run_id(self) -> str:
        return self.meta.get("run_id", self.path.name)

    @property
    def suite(self) -> str:
        return (self.meta.get("suite") or {}).get("name") or "(ad hoc)"


UNAVAILABLE = "unavailable"


def facts(meta: dict) -> dict[str, object]:
    """What a run recorded about where and how it ran, by name, as reports show it and
    compare holds two runs' against each other. None: not recorded (an older cxlbench);
    "unavailable": recorded, but the system did not say (no cpufreq in a VM, say)."""
    topo = meta.get("topology") or {}
    machine, cpu = topo.get("machine") or {}, topo.get("cpu") or {}
    settings = {k: UNAVAILABLE if v is None else v
                for k, v in (meta.get("settings") or {}).items()}
    em, build, timer = meta.get("emulated"), meta.get("build") or {}, meta.get("timer") or {}
    nodes = "; ".join(
        f"{n['id']}: {('CPUs ' + format_list(n['cpus'])) if n.get('cpus') else 'no CPUs'}, "
        f"{format_size(n.get('mem_total') or 0, exact=False)}"
        + (f", tier {n['tier']}" if n.get("tier") is not None else "")
        for n in topo.get("nodes", []))
    return {
        "machine": meta.get("machine_id"),
        "hostname": machine.get("hostname"),
        "emulated": (f"{em.get('topology')} (QEMU {em.get('qemu', '?')}, {em.get('accel')})"
                     if em else "no"),
        "kernel": machine.get("kernel"),
        "kernel command line": settings.pop("kernel_cmdline", None),
        "arch": machine.get("arch"),
        "CPU": cpu.get("model"),
        "ISAs": ", ".join(cpu.get("isas", [])),
        "CPUs online": cpu.get("online"),
        "caches": ", ".join(f"L{c['level']} {c['type']} {format_size(c['size'])}"
                            for c in cpu.get("caches", []) if c.get("size")),
        "NUMA nodes": nodes,
        "CXL regions": ", ".join(f"{r['name']} -> node {r.get('node')}"
                                 for r in (topo.get("cxl") or {}).get("regions", [])) or "none",
        **settings,
        "cxlbench": " ".join(str(x) for x in (meta.get("cxlbench_version"),
                                             meta.get("git_describe")) if x),
        "compiler": build.get("compiler"),
        "compiler flags": build.get("cflags"),
        "TSC GHz": round(timer["tsc_hz"] / 1e9, 4) if timer.get("tsc_hz") else None,
    }


# Facts of the hardware: runs that differ in one come from different machines, whatever
# their host names (VMs of one name land on different hosts; labs reuse names). CPUs
# online (SMT, offlining) and node memory sizes (crashkernel=, hotplug) are settings of
# one machine: they show as differences, not as another machine.
HARDWARE = ("arch", "CPU", "ISAs", "caches")


def hardware(meta: dict) -> dict[str, object]:
    """The HARDWARE facts, and the node ids with whether each has CPUs."""
    f = facts(meta)
    nodes = ", ".join(f"{n['id']}{'' if n.get('cpus') else ' (no CPUs)'}"
                      for n in (meta.get("topology") or {}).get("nodes", []))
    return {**{k: f.get(k) for k in HARDWARE}, "nodes": nodes or None}


def machine_key(run: LoadedRun) -> tuple:
    """One value per machine: its recorded id and its hardware."""
    return (run.machine, *hardware(run.meta).values())


def fact_text(value) -> str:
    if value is None:
        return "not recorded"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "none"
    return str(value)


class LoadedRuns(list):
    """The runs loaded, in order; `skipped`: (path, why) for each run a folder search found
    that could not be read, left out so that one damaged run does not sink the rest."""

    def __init__(self, runs=(), skipped=()):
        super().__init__(runs)
        self.skipped: list[tuple[Path, str]] = list(skipped)


def find_runs(paths) -> dict[Path, bool]:
    """Run directories, each with whether it was named (True) or found by searching a folder
    such as results/ or results/<machine>/ (False). A folder holding run.json.tmp alone is a
    run interrupted as it was created: found too, so that the report says it left it out.
    A run reached twice (a symlink to it, or named and inside a folder named) is one run,
    under the path it was first reached by; named if either way named it."""
    found: dict[Path, bool] = {}
    first: dict[str, Path] = {}             # real path -> the path the run was first given

    def add(run: Path, named: bool) -> None:
        run = first.setdefault(os.path.realpath(run), run)
        found[run] = found.get(run, False) or named

    for p in map(Path, paths):
        if not p.exists():
            raise ResultsError(f"{p} does not exist")
        if (p / "run.json").exists() or p.name == "run.json":
            add(p if p.is_dir() else p.parent, True)
            continue
        below = sorted({f.parent for f in p.rglob("run.json*")
                        if f.name in ("run.json", "run.json.tmp")})
        if not below:
            raise ResultsError(f"{p} holds no cxlbench runs (no run.json below it)")
        for run in below:
            add(run, False)
    return found


# The columns of a run's rows the report reads (summary's): a fleet's other columns, a
# case's parameters on every repetition, would hold most of its memory for nothing.
ROW_COLUMNS = ["case", "metric", "value", "job", "benchmark", "kernel", "isa", "cpus_used",
               "placement_ok", "verified", "unit"]


def _load(path: Path) -> LoadedRun:
    rows = results.load(path, ROW_COLUMNS)
    meta, journal = rows.attrs["run"], rows.attrs["journal"]
    # Kept on the LoadedRun, not the frame: pandas deep-copies attrs into every frame derived
    # from it (each groupby group, each column), which made a report over 100 runs spend
    # four fifths of its time copying run.json.
    rows.attrs = {}
    return LoadedRun(path, meta, rows, journal)


def _why(path: Path, e: Exception) -> str:
    """The error without the run's path in front: the left-out list names the run."""
    text = str(e)
    return text[len(str(path)):].lstrip(":/ ") if text.startswith(str(path)) else text


def load_runs(paths, suite: str | None = None, latest: bool = False) -> LoadedRuns:
    """The runs the paths name or hold (find_runs); `suite` keeps that suite's runs, `latest`
    the newest per machine. A run found by searching that cannot be read (ResultsError) is
    left out and listed in LoadedRuns.skipped; one named directly is an error, and so is leaving
    out every run."""
    found = find_runs(paths)
    skipped: list[tuple[Path, str]] = []

    def read(path: Path, how):
        try:
            return how(path)
        except ResultsError as e:
            if found[path]:
                raise
            skipped.append((path, _why(path, e)))
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            # Damage deeper than results.py checks (a run.json field of the wrong shape):
            # a run found by searching is left out all the same.
            if found[path]:
                raise ResultsError(f"{path} is damaged: {type(e).__name__}: {e}") from None
            skipped.append((path, f"damaged: {type(e).__name__}: {e}"))
        return None

    chosen = list(found)
    if suite is not None:
        chosen = [p for p in chosen
                  if ((read(p, results.read_meta) or {}).get("suite") or {}).get("name") == suite]
    if latest:                          # the newest run of each machine that can be read
        newest: dict[str, LoadedRun] = {}
        for p in sorted(chosen, reverse=True):
            if p.parent.name not in newest:
                run = read(p, _load)
                if run is not None:
                    newest[p.parent.name] = run
        loaded = [newest[m] for m in sorted(newest)]
    else:
        loaded = [read(p, _load) for p in chosen]
    runs = LoadedRuns([r for r in loaded if r is not None], skipped)
    if not runs:
        what = "no run" if suite is None else f"no run of suite {suite!r}"
        where = ", ".join(map(str, paths))
        if not skipped:
            raise ResultsError(f"{what} in {where}")
        raise ResultsError(f"{what} in {where} could be read: "
                           + "; ".join(f"{p}: {why}" for p, why in skipped))
    _label(runs)
    return runs


def _label(runs: list[LoadedRun]) -> None:
    """Machine names where they tell the runs apart, else run ids, else both."""
    for key in (lambda r: r.machine, lambda r: r.run_id, lambda r: f"{r.machine}/{r.run_id}"):
        labels = [key(r) for r in runs]
        if len(set(labels)) == len(labels):
            break
    else:
        labels = [f"{r.machine}/{r.run_id} #{i + 1}" for i, r in enumerate(runs)]
    for r, label in zip(runs, labels):
        r.label = printable(label)      # shown in figures and held in pandas' Arrow text


TEXT = ("case", "job", "benchmark", "kernel", "isa", "verified", "metric", "unit")
SUMMARY_COLUMNS = ["label", "machine", "run", "case", "job", "benchmark", "kernel", "isa",
                   "cpus_used", "placement_ok", "verified", "params", "info", "metric",
                   "predicted", "unit", "values", "median", "ci_low", "ci_high", "n", "cv",
                   "noisy"]


def _run_summary(run: LoadedRun) -> pd.DataFrame:
    """summary()'s rows of one run: its (case, metric) groups in the order they first
    appear, each group's statistics computed for all groups at once (stats.summarize_groups)
    and each case's parameters looked up once."""
    rows = run.rows
    # (case, metric) groups numbered in order of first appearance: the pair's two codes
    # as one number, then numbered again (a MultiIndex does the same, slower)
    case_codes, _ = pd.factorize(rows["case"])
    metric_codes, metrics = pd.factorize(rows["metric"])
    pair = case_codes.astype(np.int64) * max(len(metrics), 1) + metric_codes
    keep = (case_codes >= 0) & (metric_codes >= 0)    # a row without a case or metric: none
    codes = np.full(len(pair), -1, dtype=np.int64)
    codes[keep] = pd.factorize(pair[keep])[0]
    rows, codes = rows[keep], codes[keep]
    values = rows["value"].to_numpy(dtype=float)
    s = stats.summarize_groups(values, codes)
    first = rows.drop_duplicates(["case", "metric"])     # the groups' order, as codes'
    # a case's parameters from its journal line, else from run.json's list of cases
    by_id = {c["id"]: c["params"] for c in reversed(run.meta.get("cases", []))}
    params = {case: (run.journal.get(case) or {}).get("params", by_id.get(case, {}))
              for case in first["case"].unique()}
    order = np.argsort(codes, kind="stable")            # each group's values in row order
    split = np.split(values[order], np.cumsum(s["n"].to_numpy())[:-1])
    predicted = {key: is_prediction(*key)
                 for key in set(zip(first["metric"], first["kernel"]))}
    # A folder's name may stand in for machine or run id: an undecodable byte in it
    # cannot be held as Arrow text (UTF-8), so it is shown as \xNN.
    col = {k: first[k].tolist() for k in TEXT}
    return pd.DataFrame({
        "label": run.label, "machine": printable(run.machine), "run": printable(run.run_id),
        **{k: col[k] for k in ("case", "job", "benchmark", "kernel", "isa")},
        "cpus_used": [str(c) for c in first["cpus_used"]],
        "placement_ok": first["placement_ok"].astype(bool).to_numpy(),
        "verified": col["verified"],
        "params": [params[c] for c in first["case"]],
        "info": [(run.journal.get(c) or {}).get("info") or {} for c in first["case"]],
        "metric": col["metric"],
        "predicted": [predicted[k] for k in zip(first["metric"], first["kernel"])],
        "unit": col["unit"], "values": [v.tolist() for v in split],
        **{k: s[k].to_numpy() for k in ("median", "ci_low", "ci_high", "n", "cv", "noisy")}},
        columns=SUMMARY_COLUMNS)


def summary(runs: list[LoadedRun]) -> pd.DataFrame:
    """One row per run, case and metric: median, CI, n and CV of the repetitions, with the
    case's parameters (column `params`, a dict) and where it ran; `predicted` where the
    value is a prediction (is_prediction)."""
    frames = [_run_summary(run) for run in runs if not run.rows.empty]
    if not frames:
        return pd.DataFrame([], columns=SUMMARY_COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    for k in TEXT:      # a column's type from all runs' values (text, where one run has none)
        out[k] = pd.Series(out[k].tolist())
    return out


def not_ok(runs: list[LoadedRun]) -> list[dict]:
    """Cases that failed, were unsupported, or never finished, with why."""
    out = []
    for run in runs:
        for c in run.meta.get("cases", []):
            entry = run.journal.get(c["id"])
            if entry is None:
                out.append({"label": run.label, "case": c["id"], "status": "not run",
                            "error": "the run stopped before this case (resume it)"})
            elif entry["status"] != "ok":
                out.append({"label": run.label, "case": c["id"], "status": entry["status"],
                            "error": entry.get("error") or ""})
    return out
