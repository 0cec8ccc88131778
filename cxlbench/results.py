"""Results on disk: results/<machine-id>/<run-id>/{run.json, results.csv, cases.jsonl}.

run.json holds the run's metadata and its expanded cases; results.csv holds tidy rows,
appended and flushed as each case finishes; cases.jsonl is the journal of finished cases
(status, error, verified placement) that `--resume` reads. The format carries a version:
older runs are upgraded on load, newer ones refused."""
from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import os
import re
import socket
from pathlib import Path

from .errors import ResultsError

FORMAT_VERSION = 1
# Upgrade steps: UPGRADES[v] turns version-v metadata into version v+1.
UPGRADES: dict = {}

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
            return "emulated-" + re.sub(r"[^A-Za-z0-9_.-]", "_", json.loads(emulated)["topology"])
        except (ValueError, KeyError, TypeError):
            return "emulated"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "machine"


def new_run_id() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def columns_for(param_names) -> list[str]:
    return FIRST_COLUMNS + sorted(set(param_names) - RESOLVED) + LAST_COLUMNS


class Run:
    """One run directory, opened for appending."""

    def __init__(self, path: Path, meta: dict):
        self.path, self.meta = path, meta
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
        meta = {"format_version": FORMAT_VERSION, "run_id": path.name, **meta}
        run = cls(path, meta)
        _write_atomic(path / "run.json", json.dumps(meta, indent=2, default=str))
        with open(path / "results.csv", "w", newline="") as f:
            csv.writer(f).writerow(run.columns)
        (path / "cases.jsonl").touch()
        return run

    @classmethod
    def open(cls, path: str | os.PathLike) -> "Run":
        path = Path(path)
        meta = read_meta(path)
        if not (path / "results.csv").exists():
            raise ResultsError(f"{path}: results.csv is missing")
        return cls(path, meta)

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


def read_meta(path: str | os.PathLike) -> dict:
    path = _run_dir(path)
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
    while version < FORMAT_VERSION:
        meta = UPGRADES[version](meta)
        version = meta["format_version"]
    return meta


def load(path: str | os.PathLike):
    """A run's results as a pandas DataFrame (one row per repetition and metric); the
    run's metadata is in df.attrs['run']."""
    import pandas as pd

    path = _run_dir(path)
    meta = read_meta(path)
    df = pd.read_csv(path / "results.csv")
    df.attrs["run"] = meta
    return df
