"""Results on disk: results/<machine-id>/<run-id>/{run.json, results.csv, cases.jsonl}.

run.json holds the run's metadata and its expanded cases; results.csv holds tidy rows,
appended and flushed as each case finishes; cases.jsonl is the journal of finished cases
(status, error, verified placement) that `--resume` reads. The format carries a version:
older runs are upgraded as they are read (and on disk before `--resume` appends to them),
newer ones refused."""
from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import os
import re
import socket
from bisect import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import ResultsError

FORMAT_VERSION = 2

FIRST_COLUMNS = ["run", "job", "case", "benchmark", "kernel", "isa"]
LAST_COLUMNS = ["cpus_used", "placement_method", "verified", "placement_ok", "vmstat",
                "repetition", "metric", "unit", "value"]
# Parameters that already have a column of their own (resolved, not as asked).
RESOLVED = {"kernel", "isa"}


def machine_id() -> str:
    """The host name; emulated guests file their runs apart, under emulated-<topology>."""
    emulated = os.environ.get("CXLBENCH_EMULATED")
    if emulated:
        try:
            return _machine_id(None, json.loads(emulated)["topology"])
        except (ValueError, KeyError, TypeError):
            return "emulated"
    return _machine_id(socket.gethostname(), None)


def _machine_id(hostname: str | None, emulated_topology: str | None) -> str:
    if emulated_topology is not None:
        return "emulated-" + re.sub(r"[^A-Za-z0-9_.-]", "_", str(emulated_topology))
    return re.sub(r"[^A-Za-z0-9_.-]", "_", hostname or "") or "machine"


def new_run_id() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def columns_for(param_names) -> list[str]:
    return FIRST_COLUMNS + sorted(set(param_names) - RESOLVED) + LAST_COLUMNS


class Run:
    """One run directory. `stored_version` is the format its files are in; what Run gives
    (meta, journal) is always in FORMAT_VERSION, and upgrade_files() rewrites the files
    before anything is appended to them."""

    def __init__(self, path: Path, meta: dict, stored_version: int = FORMAT_VERSION):
        self.path, self.meta, self.stored_version = path, meta, stored_version
        self.columns: list[str] = meta["columns"]

    # ---- creating and opening -------------------------------------------------------
    @classmethod
    def create(cls, root: str | os.PathLike, meta: dict) -> "Run":
        base = Path(root) / machine_id()
        base.mkdir(parents=True, exist_ok=True)
        run_id = new_run_id()
        for n in range(1000):
            path = base / (run_id if n == 0 else f"{run_id}-{n}")
            try:
                path.mkdir()
                break
            except FileExistsError:
                continue
        meta = {"format_version": FORMAT_VERSION, "run_id": path.name,
                "machine_id": base.name, **meta}
        run = cls(path, meta)
        _write_atomic(path / "run.json", json.dumps(meta, indent=2, default=str))
        with open(path / "results.csv", "w", newline="") as f:
            csv.writer(f).writerow(run.columns)
        (path / "cases.jsonl").touch()
        return run

    @classmethod
    def open(cls, path: str | os.PathLike) -> "Run":
        path = _run_dir(path)
        raw, version = _read_stored(path)
        if not (path / "results.csv").exists():
            raise ResultsError(f"{path}: results.csv is missing")
        return cls(path, _upgrade_meta(raw, version), version)

    def table_text(self) -> str:
        """table() as CSV text."""
        header, rows = self.table()
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(header)
        w.writerows(rows)
        return buf.getvalue()

    def upgrade_files(self) -> list[str]:
        """Rewrite an older run's files in this format, so rows appended now match the
        ones already there. Returns what each step changed (empty: nothing to do). The
        journal and rows go first and run.json last: every step is safe to repeat, so a
        kill in between leaves a run that upgrades again."""
        if self.stored_version == FORMAT_VERSION:
            return []
        _write_atomic(self.path / "results.csv", self.table_text())
        _write_atomic(self.path / "cases.jsonl", "".join(
            json.dumps(e, default=str) + "\n" for e in self.finished().values()))
        steps = [UPGRADES[v].what for v in range(self.stored_version, FORMAT_VERSION)]
        self.update_meta(upgraded_from=self.stored_version)
        self.stored_version = FORMAT_VERSION
        return steps

    def table(self) -> tuple[list[str], list[list[str]]]:
        """results.csv's header and rows, upgraded to this format."""
        with open(self.path / "results.csv", newline="") as f:
            reader = csv.reader(f)
            header, rows = next(reader, []), list(reader)
        meta = self.meta
        for v in range(self.stored_version, FORMAT_VERSION):
            header, rows = UPGRADES[v].table(meta, header, rows)
        return header, rows

    # ---- journal ----------------------------------------------------------------------
    def finished(self) -> dict[str, dict]:
        """Journal entries of finished cases, by case id. A line cut short by a kill is
        ignored: that case did not finish."""
        done = {}
        for line in (self.path / "cases.jsonl").read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            for v in range(self.stored_version, FORMAT_VERSION):
                entry = UPGRADES[v].journal(entry)
            done[entry["case"]] = entry
        return done

    def drop_unfinished_rows(self) -> int:
        """Rows of a case killed before its journal line are removed, so resuming does
        not count them twice. Returns how many rows went."""
        done = set(self.finished())
        text = (self.path / "results.csv").read_text()
        reader = csv.reader(io.StringIO(text))
        header = next(reader, None)
        keep, dropped = [], 0
        case_col = header.index("case") if header else 0
        for row in reader:
            if len(row) == len(header) and row[case_col] in done:
                keep.append(row)
            else:
                dropped += 1
        if dropped:
            buf = io.StringIO()
            w = csv.writer(buf)
            w.writerow(header)
            w.writerows(keep)
            _write_atomic(self.path / "results.csv", buf.getvalue())
        return dropped

    def append(self, case_id: str, rows: list[dict], entry: dict) -> None:
        """Rows first, then the journal line; each in one write and flushed to disk."""
        if self.stored_version != FORMAT_VERSION:
            raise ResultsError(f"{self.path} is in results format {self.stored_version}: "
                               "upgrade_files() before appending")
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=self.columns, extrasaction="ignore")
        w.writerows(rows)
        _append(self.path / "results.csv", buf.getvalue())
        _append(self.path / "cases.jsonl", json.dumps({"case": case_id, **entry}, default=str)
                + "\n")

    def update_meta(self, **fields) -> None:
        self.meta.update(fields)
        _write_atomic(self.path / "run.json", json.dumps(self.meta, indent=2, default=str))


def _append(path: Path, text: str) -> None:
    if not text:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _run_dir(path: str | os.PathLike) -> Path:
    path = Path(path)
    if path.is_file():
        path = path.parent
    if not (path / "run.json").exists():
        raise ResultsError(f"{path} is not a cxlbench run directory (no run.json)")
    return path


def _read_stored(path: Path) -> tuple[dict, int]:
    """run.json as stored, and its format version; newer formats are refused."""
    try:
        meta = json.loads((path / "run.json").read_text())
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path / 'run.json'} is damaged: {e}") from None
    version = meta.get("format_version")
    if not isinstance(version, int):
        raise ResultsError(f"{path / 'run.json'} has no format_version")
    if version > FORMAT_VERSION:
        raise ResultsError(f"{path} was written in results format {version}, newer than this "
                           f"cxlbench reads ({FORMAT_VERSION}): upgrade cxlbench to read it")
    return meta, version


def _upgrade_meta(meta: dict, version: int) -> dict:
    for v in range(version, FORMAT_VERSION):
        meta = {**UPGRADES[v].meta(meta), "format_version": v + 1}
    return meta


def read_meta(path: str | os.PathLike) -> dict:
    """run.json, upgraded to this format."""
    return _upgrade_meta(*_read_stored(_run_dir(path)))


def load(path: str | os.PathLike):
    """A run's results as a pandas DataFrame (one row per repetition and metric); the
    run's metadata is in df.attrs['run']. Older formats are upgraded in memory."""
    import pandas as pd

    run = Run.open(path)
    if run.stored_version == FORMAT_VERSION:
        df = pd.read_csv(run.path / "results.csv")
    else:
        df = pd.read_csv(io.StringIO(run.table_text()))
    df.attrs["run"] = run.meta
    return df


# ---- upgrade steps -------------------------------------------------------------------

@dataclass(frozen=True)
class Upgrade:
    """One format step, for each of a run's three files. Steps are frozen in time: they
    name the columns and fields of their own version, not today's constants, and each is
    safe to apply to a file that has had it already."""
    what: str
    meta: Callable[[dict], dict]
    table: Callable[[dict, list, list], tuple[list, list]]   # (upgraded meta, header, rows)
    journal: Callable[[dict], dict]


def _v1_params(bench: str, params: dict) -> dict:
    if bench != "matrix" or "metric" not in params:
        return params
    return {("measure" if k == "metric" else k): v for k, v in params.items()}


def _v1_columns(columns: list[str], add_measure: bool) -> list[str]:
    """The first of two `metric` columns was the matrix option's; `measure` joins the
    parameters (sorted, between `isa` and `cpus_used`) where a matrix case needs it."""
    cols = list(columns)
    if cols.count("metric") > 1:
        cols.remove("metric")
    if add_measure and "measure" not in cols:
        lo, hi = cols.index("isa") + 1, cols.index("cpus_used")
        cols.insert(lo + bisect(cols[lo:hi], "measure"), "measure")
    return cols


def _v1_meta(meta: dict) -> dict:
    cases = [{**c, "params": _v1_params(c["bench"], c["params"])} for c in meta["cases"]]
    suite = dict(meta.get("suite") or {})
    jobs = suite.get("jobs")
    if isinstance(jobs, dict):
        suite["jobs"] = {name: _v1_params(body.get("bench"), body)
                         if isinstance(body, dict) else body for name, body in jobs.items()}
    emulated = meta.get("emulated") or {}
    hostname = ((meta.get("topology") or {}).get("machine") or {}).get("hostname")
    return {**meta, "cases": cases, "suite": suite,
            "columns": _v1_columns(meta["columns"], any(c["bench"] == "matrix" for c in cases)),
            "machine_id": meta.get("machine_id") or _machine_id(hostname,
                                                                emulated.get("topology"))}


def _v1_table(meta: dict, header: list, rows: list) -> tuple[list, list]:
    measure = {c["id"]: c["params"]["measure"] for c in meta["cases"] if c["bench"] == "matrix"}
    new = _v1_columns(header, bool(measure))
    out = []
    for row in rows:
        d = dict(zip(header, row))          # of two `metric` cells the later (measured) wins
        if d.get("case") in measure:
            d["measure"] = measure[d["case"]]
        out.append([d.get(c, "") for c in new])
    return new, out


def _v1_journal(entry: dict) -> dict:
    if "params" not in entry:
        return entry
    return {**entry, "params": _v1_params(entry.get("bench"), entry["params"])}


# UPGRADES[v] turns a version-v run into version v+1.
UPGRADES: dict[int, Upgrade] = {
    1: Upgrade("matrix's option `metric` is now `measure` (results.csv had two `metric` "
               "columns); the run records its machine id",
               _v1_meta, _v1_table, _v1_journal),
}
