"""Results on disk: results/<machine-id>/<run-id>/{run.json, results.csv, cases.jsonl}.

run.json holds the run's metadata and its expanded cases; results.csv holds tidy rows,
appended and flushed as each case finishes; cases.jsonl is the journal of finished cases
(status, error, verified placement) that `--resume` reads. The format carries a version:
older runs are upgraded as they are read (and on disk before `--resume` appends to them),
newer ones refused.

What a run folder guarantees: a case's rows and its journal line are appended whole or not
at all (a failed write is cut back); run.json is replaced atomically; one process at a time
holds the folder (flock on .lock); and repair() makes rows and journal agree again after a
crash or a cut file, so a resumed run neither loses nor doubles a case. Damaged files are
refused with ResultsError naming the file, never loaded as data."""
from __future__ import annotations

import collections
import contextlib
import csv
import datetime as _dt
import errno
import fcntl
import io
import json
import math
import os
import re
import shutil
import socket
import stat
import tempfile
import warnings
from bisect import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import columnar
from .ownfiles import fsync_dir as _fsync_dir, open_ours as _open_ours, \
    write_atomic as _write_atomic
from .errors import ResultsError, ResultsWarning, StorageError

FORMAT_VERSION = 3

FIRST_COLUMNS = ["run", "job", "case", "benchmark", "kernel", "isa"]
LAST_COLUMNS = ["cpus_used", "placement_method", "verified", "placement_ok", "vmstat",
                "repetition", "metric", "unit", "value"]
# Parameters that already have a column of their own (resolved, not as asked).
RESOLVED = {"kernel", "isa"}
FILES = ("run.json", "results.csv", "cases.jsonl")
LOCK = ".lock"


def machine_id() -> str:
    """The host name; emulated guests file their runs apart, under emulated-<topology>."""
    emulated = os.environ.get("CXLBENCH_EMULATED")
    if emulated:
        try:
            marker = json.loads(emulated)
            # Two guests of one topology (shared-cxl) file apart, each by its host.
            host = f"-host{int(marker['host'])}" if "host" in marker else ""
            return _machine_id(None, f"{marker['topology']}{host}")
        except (ValueError, KeyError, TypeError):
            return "emulated"
    return _machine_id(socket.gethostname(), None)


def _machine_id(hostname: str | None, emulated_topology: str | None) -> str:
    if emulated_topology is not None:
        return "emulated-" + re.sub(r"[^A-Za-z0-9_.-]", "_", str(emulated_topology))
    return re.sub(r"[^A-Za-z0-9_.-]", "_", hostname or "") or "machine"


def new_run_id() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def new_folder(base: Path) -> Path:
    """A new folder in base named by the time (a run's id), -1, -2... where one is taken."""
    base.mkdir(parents=True, exist_ok=True)
    stamp = new_run_id()
    for n in range(1000):
        path = base / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise ResultsError(f"{base} has no free folder name for {stamp}")


def columns_for(param_names) -> list[str]:
    return FIRST_COLUMNS + sorted(set(param_names) - RESOLVED) + LAST_COLUMNS


def verified_counts(text: str) -> dict[str, dict[str, int]]:
    """The `verified` column as {buffer: {node: pages}}: 'src=0:512 dst=1:510;other:2' ->
    {'src': {'0': 512}, 'dst': {'1': 510, 'other': 2}}. Runs made before buffers were
    named hold one unnamed entry per buffer: 'b0', 'b1'... ."""
    out = {}
    if not isinstance(text, str):          # a case without buffers: pandas reads NaN
        return out
    for i, part in enumerate(text.split()):
        name, _, counts = part.rpartition("=")
        out[name or f"b{i}"] = {node: int(n) for node, _, n in
                                (c.partition(":") for c in counts.split(";") if c)}
    return out


class Run:
    """One run directory. `stored_version` is the format its files are in; what Run gives
    (meta, journal, rows) is always in FORMAT_VERSION and consistent: only the rows of
    cases whose journal line says they finished with exactly those rows. repair() writes
    that view back before anything is appended."""

    def __init__(self, path: Path, meta: dict, stored_version: int = FORMAT_VERSION,
                 lock_fd: int | None = None):
        self.path, self.meta, self.stored_version = path, meta, stored_version
        self.columns: list[str] = meta["columns"]
        self._lock_fd = lock_fd         # kept open: closing it would release the lock

    # ---- creating and opening -------------------------------------------------------
    @classmethod
    def create(cls, root: str | os.PathLike, meta: dict) -> "Run":
        """A new run folder, locked by this process, its files in place and empty."""
        base = machine_folder(root)
        path = new_folder(base)
        meta = {"format_version": FORMAT_VERSION, "run_id": path.name,
                "machine_id": base.name, **meta}
        try:
            fd = _lock(path)            # before run.json: no resume can take it meanwhile
            _write_atomic(path / "results.csv", _csv_text([meta["columns"]]))
            _write_atomic(path / "cases.jsonl", "")
            _write_atomic(path / "run.json", json.dumps(meta, indent=2, default=str))
        except BaseException as e:
            # Nothing has run yet: leave no half-made run behind for report to trip on.
            shutil.rmtree(path, ignore_errors=True)
            if isinstance(e, (ResultsError, StorageError)):
                raise ResultsError(f"cannot start a run in {base}: {e}") from None
            raise
        return cls(path, meta, lock_fd=fd)

    @classmethod
    def open(cls, path: str | os.PathLike, lock: bool = False) -> "Run":
        """An existing run. lock: hold the folder (see _lock) before reading anything, as a
        process that will write to it must."""
        path = _run_dir(path)
        if lock:    # a writer: never through a link left at one of our names
            for name in FILES:
                if (path / name).is_symlink():
                    raise ResultsError(f"{path / name} is a symbolic link, not a file "
                                       "cxlbench wrote: remove it")
        fd = _lock(path) if lock else None
        try:
            raw, version = _read_stored(path)
            for name in FILES[1:]:
                if not (path / name).is_file():
                    raise ResultsError(f"{path / name} is missing")
            meta = _upgrade_meta(raw, version, path / "run.json")
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        return cls(path, meta, version, fd)

    # ---- reading ----------------------------------------------------------------------
    def _consistent(self) -> tuple[dict[str, dict], list[str], list[list[str]], list[str]]:
        """The journal, header and rows as they should be, read (and upgraded) from the
        files, writing nothing, and what differs from the files, one line each: journal
        lines cut short or damaged and a last row cut short are dropped; a case whose rows
        do not number what its journal line says loses the line (it did not finish
        whole); rows of cases without a journal line are dropped."""
        known = {c["id"] for c in self.meta["cases"]}
        done, bad = _journal(self.path / "cases.jsonl", self.stored_version, known)
        header, rows, cut = _read_table(self.path / "results.csv", self.columns)
        for v in range(self.stored_version, FORMAT_VERSION):
            with _naming(self.path / "results.csv"):
                header, rows = UPGRADES[v].table(self.meta, header, rows)
        if header != self.columns:
            raise ResultsError(f"{self.path / 'results.csv'}: its header is not the columns "
                               "run.json lists")
        notes = [f"{bad} journal line(s) cut short or damaged" for _ in [1] if bad]
        if cut:
            notes.append(cut)
        case_col = header.index("case")
        counts = collections.Counter(row[case_col] for row in rows)
        for case in [c for c, e in done.items() if counts[c] != _rows_expected(e)]:
            notes.append(f"{case} has {counts[case]} rows where its journal line says "
                         f"{_rows_expected(done.pop(case))}: it did not finish")
        keep = [row for row in rows if row[case_col] in done]
        if len(keep) < len(rows):
            notes.append(f"{len(rows) - len(keep)} rows of cases that did not finish")
        return done, header, keep, notes

    def finished(self) -> dict[str, dict]:
        """Journal entries of the cases that finished, whole, by case id."""
        return self._consistent()[0]

    def journal(self) -> dict[str, dict]:
        """The journal's entries by case id, as written, not checked against results.csv
        (whose rows a case writes before its line): a run's progress, read without its
        rows; finished() is the checked view."""
        return _journal(self.path / "cases.jsonl", self.stored_version,
                        {c["id"] for c in self.meta["cases"]})[0]

    def frame(self, columns: list[str] | None = None):
        """The rows of finished cases as a pandas DataFrame, upgraded to this format; what is
        left out is said in a ResultsWarning. df.attrs holds run.json ('run') and the
        journal of finished cases ('journal'). columns: only these (those the run has)."""
        import pandas as pd

        fast = columnar.read(self.path, columns) \
            if self.stored_version == FORMAT_VERSION else None
        if fast is None:
            taken = columnar.stamp(self.path)
            fast = self._frame_whole()
            # A whole run's copy, for the next reader (a run still going would outdate it).
            if fast is not None and taken and len(fast[1]) == len(self.meta["cases"]):
                columnar.write(self.path, *fast, taken)
        if fast is not None:
            df, journal = fast
        else:
            journal, header, rows, notes = self._consistent()
            for note in notes:
                warnings.warn(f"{self.path}: left out {note}", ResultsWarning, stacklevel=3)
            df = pd.read_csv(io.StringIO(_csv_text([header, *rows])), low_memory=False)
        if columns is not None:
            df = df[[c for c in columns if c in df.columns]]
        df.attrs.update(run=self.meta, journal=journal)
        return df

    def _frame_whole(self):
        """(frame, journal) read by pandas' C parser straight from the file, where the run
        is whole: this format, no row or journal line cut short or damaged, every value a
        finite number, each finished case's rows all there and no others. None for
        anything else, which the careful path (_consistent, a row at a time in Python, ten
        times slower) then reads, repairs in memory and says what it left out. The same
        frame either way: the careful path's rows are these, written out and parsed by
        the same parser."""
        import numpy as np
        import pandas as pd

        if self.stored_version != FORMAT_VERSION:
            return None
        try:
            data = (self.path / "results.csv").read_bytes()
        except OSError:
            return None
        if not data.endswith(b"\n") or data.startswith(b"\xef\xbb\xbf"):
            return None                     # cut short, or a spreadsheet's BOM
        try:        # (a blank line kept, as a row of NaN: the careful path judges it)
            # (the whole file typed at once: in chunks a column could come out part
            # numbers, part text, and pandas warn of it)
            df = pd.read_csv(io.BytesIO(data), on_bad_lines="error", skip_blank_lines=False,
                             low_memory=False)
        except (ValueError, UnicodeDecodeError, pd.errors.ParserError):
            return None
        if list(df.columns) != self.columns:
            return None                     # (pandas renames a repeated column)
        if df["value"].dtype.kind not in "iuf" or not np.isfinite(df["value"]).all():
            return None                     # (a row short of fields has no value)
        done, bad = _journal(self.path / "cases.jsonl", FORMAT_VERSION,
                             {c["id"] for c in self.meta["cases"]})
        counts = df["case"].astype(str).value_counts().to_dict()
        if bad or counts != {c: _rows_expected(e) for c, e in done.items()
                             if _rows_expected(e)}:
            return None
        return df, done

    # ---- writing ------------------------------------------------------------------------
    def repair(self) -> list[str]:
        """Write the consistent view (see _consistent) and the current format back before
        a resume appends, after whatever stopped the run. Rows first, then the journal,
        then run.json, each replaced whole: a crash in between leaves a run that repairs
        again. Returns what was done, one line each (empty: nothing)."""
        done, header, rows, notes = self._consistent()
        notes = [f"dropped {note}" for note in notes]
        old = self.stored_version
        if notes or old != FORMAT_VERSION:
            _write_atomic(self.path / "results.csv", _csv_text([header, *rows]))
            _write_atomic(self.path / "cases.jsonl", _journal_text(done.values()))
        if old != FORMAT_VERSION:
            self.update_meta(upgraded_from=old)
            self.stored_version = FORMAT_VERSION
            notes += [f"upgraded from results format {v}: {UPGRADES[v].what}"
                      for v in range(old, FORMAT_VERSION)]
        return notes

    def append(self, case_id: str, rows: list[dict], entry: dict) -> None:
        """Rows first, then the journal line, each written whole and flushed to disk. If
        either cannot be (a full disk, an interrupt), both files are cut back to where
        they were, so the case did not finish rather than half-finished."""
        if self.stored_version != FORMAT_VERSION:
            raise ResultsError(f"{self.path} is in results format {self.stored_version}: "
                               "repair() before appending")
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=self.columns, extrasaction="ignore")
        w.writerows(rows)
        writes = [(self.path / "results.csv", buf.getvalue()),
                  (self.path / "cases.jsonl", _journal_text([{"case": case_id, **entry}]))]
        fds = []
        try:
            for path, _ in writes:
                try:
                    fds.append(_open_ours(path, os.O_WRONLY | os.O_APPEND))
                except OSError as e:
                    raise StorageError(f"cannot write {path}: {e.strerror or e}") from None
            sizes = [os.fstat(fd).st_size for fd in fds]
            try:
                for fd, (path, text) in zip(fds, writes):
                    _append(fd, text)
            except BaseException as e:
                for fd, size in zip(fds, sizes):
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, size)
                if isinstance(e, OSError):
                    raise StorageError(f"cannot write {path}: {e.strerror or e}") from None
                raise
        finally:
            for fd in fds:
                os.close(fd)

    def update_meta(self, **fields) -> None:
        self.meta.update(fields)
        _write_atomic(self.path / "run.json", json.dumps(self.meta, indent=2, default=str))


def _lock(path: Path) -> int:
    """Hold a run folder for this process until it exits: two processes resuming one run
    would run its remaining cases twice, competing for the CPUs. flock goes with the
    process however it ends (on NFS it holds across hosts only where the lock manager
    runs: not with -o nolock or local_lock). The file names the holder for the other
    process's message. Returns the descriptor to keep open.

    A results folder may be shared (a fleet's is): the lock is written only where it is a
    plain file of its own, never through a link someone left at its name."""
    try:
        fd = _open_ours(path / LOCK, os.O_RDWR | os.O_CREAT, "cxlbench's lock file")
    except OSError as e:
        raise ResultsError(f"cannot write in {path}: {e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
        os.close(fd)
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise ResultsError(f"cannot lock {path}: {e.strerror}") from None
        raise ResultsError(f"{path} is in use by cxlbench {holder}; wait for it to "
                           "finish, or stop it, before resuming") from None
    with contextlib.suppress(OSError):      # the note only words the other's message
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
    return fd


def _csv_text(rows) -> str:
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    return buf.getvalue()


def _journal_text(entries) -> str:
    return "".join(json.dumps(e, default=str) + "\n" for e in entries)


def _append(fd: int, text: str) -> None:
    """All of text or an OSError: write() may write less than it was given."""
    data = memoryview(text.encode())
    while data:
        n = os.write(fd, data)
        if n <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        data = data[n:]
    os.fsync(fd)


def machine_folder(root: str | os.PathLike) -> Path:
    """root/<machine>, made if need be, where this machine's runs go. A link there is
    refused (a shared results folder is anyone's to plant one in), and so is anything
    else that is not a folder, each named with what is there."""
    base = Path(root) / machine_id()
    if base.is_symlink():
        state = ("it loops" if _loops(base) else "it points at nothing" if not base.exists()
                 else "it points at a file" if not base.is_dir() else "")
        raise ResultsError(f"cannot write results to {base}: it is a symbolic link to "
                           f"{os.readlink(base)}"
                           f"{' (' + state + ')' if state else ''}: cxlbench writes runs only "
                           "into a folder of its own there; remove the link, or give another "
                           "--results-dir")
    for p in (Path(root), base):
        if p.exists() and not p.is_dir():
            raise ResultsError(f"cannot write results to {p}: it is a file, not a folder: "
                               "move it away, or give another --results-dir")
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ResultsError(f"cannot write results to {e.filename or root}: "
                           f"{e.strerror or e}") from None
    return base


def _loops(path: Path) -> bool:
    try:
        path.stat()
    except OSError as e:
        return e.errno == errno.ELOOP
    return False


def check_writable(root: str | os.PathLike) -> Path:
    """The folder this machine's runs go in, made and tried with a file, before anything
    runs: a results folder that cannot be written is bad input, said in one line."""
    base = machine_folder(root)
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=base)    # O_EXCL, no link
        try:
            os.write(fd, b"x")      # a full disk makes the file but holds no byte
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as e:
        raise ResultsError(f"cannot write results to {base}: {e.strerror or e}") from None
    return base


def _read_table(path: Path, columns: list[str]) -> tuple[list[str], list[list[str]], str]:
    """results.csv's header and rows, checked: ResultsError for anything that is not a
    cxlbench table; a last row without its newline (cut short) is left out, and the
    third value says so. A header cut short (a kill as the run was made) is the header
    run.json's `columns` give, with no rows."""
    try:    # (newline="": a CR within a quoted field is the field's, as pandas reads it)
        with open(path, encoding="utf-8-sig", newline="") as f:     # (a spreadsheet's BOM)
            text = f.read()
    except FileNotFoundError:
        raise ResultsError(f"{path} is missing") from None
    except UnicodeDecodeError:
        raise ResultsError(f"{path} is not a cxlbench results table (not UTF-8 text)") from None
    except OSError as e:
        raise ResultsError(f"{path} cannot be read: {e.strerror}") from None
    if "\n" not in text:
        if text and _csv_text([columns]).startswith(text):
            return columns, [], "its header row, cut short, from run.json's columns"
        raise ResultsError(f"{path} is empty or damaged: it has no whole header row")
    cut = "" if text.endswith("\n") else "its last row was cut short"
    if cut:
        text = text[:text.rindex("\n") + 1]
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
        if not {"case", "metric", "value"} <= set(header):
            raise ResultsError(f"{path} is not a cxlbench results table (its header has no "
                               "case, metric and value columns)")
        value_col, rows = header.index("value"), []
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                raise ResultsError(f"{path}, line {reader.line_num}: {len(row)} fields where "
                                   f"the header has {len(header)}")
            try:
                finite = math.isfinite(float(row[value_col]))
            except ValueError:
                finite = False
            if not finite:
                raise ResultsError(f"{path}, line {reader.line_num}: the value "
                                   f"{row[value_col][:40]!r} is not a finite number")
            rows.append(row)
    except csv.Error as e:
        raise ResultsError(f"{path}, line {reader.line_num}: {e}") from None
    return header, rows, cut


def _journal(path: Path, version: int, known: set[str]) -> tuple[dict[str, dict], int]:
    """cases.jsonl's entries by case id (in this format), and how many lines were not
    entries of the run's `known` cases: cut short by a kill, or damaged."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise ResultsError(f"{path} is missing") from None
    except OSError as e:
        raise ResultsError(f"{path} cannot be read: {e.strerror}") from None
    done, bad = {}, 0
    with columnar.paused_gc():
        for line in text.splitlines(keepends=True):
            try:
                entry = json.loads(line) if line.endswith("\n") else None
            except (ValueError, RecursionError):
                entry = None
            if not _is_entry(entry, known):
                bad += line.strip() != ""
                continue
            for v in range(version, FORMAT_VERSION):
                entry = UPGRADES[v].journal(entry)
            done[entry["case"]] = entry
    return done, bad


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# A journal line's fields as journal_entry writes them, each with the types its readers
# (resume, the summary, reports) take where it has them (hand-made runs lack some); a
# summary's metric: its count n, and where given its unit, numbers and noisy flag.
_NONE = type(None)
ENTRY_FIELDS = {"error": (str, _NONE), "kernel": (str, _NONE), "isa": (str, _NONE),
                "cpus": (list, _NONE), "params": (dict,), "placement": (dict, _NONE),
                "info": (dict, _NONE), "seconds": (int, float), "estimate_s": (int, float, _NONE)}
SUMMARY_FIELDS = {"unit": (str,), "median": (int, float), "ci_low": (int, float),
                  "ci_high": (int, float), "cv": (int, float), "noisy": (bool,)}


def _is_entry(entry, known: set[str]) -> bool:
    """A journal line as the runner writes it, of one of the run's cases: what resume,
    summaries and reports read from it has the type they expect."""
    if not (isinstance(entry, dict) and isinstance(entry.get("case"), str)
            and entry["case"] in known and isinstance(entry.get("status"), str)
            and isinstance(entry.get("summary"), dict) and not _mistyped(entry, ENTRY_FIELDS)):
        return False
    if not (all(type(c) is int for c in entry.get("cpus") or ())
            and isinstance((entry.get("info") or {}).get("tiers") or {}, dict)):
        return False
    return all(isinstance(s, dict) and type(s.get("n")) is int and s["n"] >= 0
               and not _mistyped(s, SUMMARY_FIELDS) for s in entry["summary"].values())


def _mistyped(d: dict, fields: dict) -> str | None:
    """The first of `fields` that d has but not of its types (a bool is no number)."""
    return next((k for k, kinds in fields.items() if k in d and not (
        isinstance(d[k], kinds) and (bool in kinds or not isinstance(d[k], bool)))), None)


def _rows_expected(entry: dict) -> int:
    """Rows a journal entry's case wrote: one per repetition and metric."""
    return sum(s["n"] for s in entry["summary"].values())


def _run_dir(path: str | os.PathLike) -> Path:
    path = Path(path)
    if path.is_file():
        path = path.parent
    if not (path / "run.json").exists():
        if (path / "run.json.tmp").exists():
            raise ResultsError(f"{path}: interrupted as it was created (run.json.tmp, no "
                               "run.json): it holds no results")
        raise ResultsError(f"{path} is not a cxlbench run directory (no run.json)")
    return path


def _read_stored(path: Path) -> tuple[dict, int]:
    """run.json as stored, and its format version; damaged, unknown and newer formats are
    refused."""
    where = path / "run.json"
    try:
        with columnar.paused_gc():
            meta = json.loads(where.read_text(encoding="utf-8"))
    except RecursionError:
        raise ResultsError(f"{where} is damaged: nested too deeply") from None
    except ValueError as e:             # JSON, UTF-8, a number too long to read
        raise ResultsError(f"{where} is damaged: {e}") from None
    except OSError as e:
        raise ResultsError(f"{where} cannot be read: {e.strerror}") from None
    if not isinstance(meta, dict):
        raise ResultsError(f"{where} is damaged: not a JSON object")
    if "format_version" not in meta:
        raise ResultsError(f"{where} has no format_version")
    version = meta["format_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        shown = json.dumps(version)     # as the file spells it: "x", 2.5, true, null
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise ResultsError(f"{where} is damaged: its format_version is {shown}, not a whole "
                           f"number (cxlbench writes 1 to {FORMAT_VERSION})")
    if version > FORMAT_VERSION:
        raise ResultsError(f"{path} was written in results format {version}, newer than this "
                           f"cxlbench reads ({FORMAT_VERSION}): upgrade cxlbench to read it")
    if version < 1:
        raise ResultsError(f"{where}: format_version {version} is not one cxlbench has "
                           f"written (1 to {FORMAT_VERSION})")
    for key, kind in (("run_id", str), ("columns", list), ("cases", list)):
        if not isinstance(meta.get(key), kind):
            raise ResultsError(f"{where} is damaged: {key!r} is missing or not a "
                               f"{'string' if kind is str else 'list'}")
    # Read by reports and resumes where present; older runs may lack some.
    for key, kinds in (("machine_id", str), ("started", str), ("command", list),
                       ("suite", dict), ("topology", dict), ("emulated", (dict, type(None))),
                       ("settings", dict), ("timer", dict), ("build", dict),
                       ("estimates", dict), ("fitted", dict), ("analysis", dict),
                       ("load", list), ("slurm_resumed", list), ("resumed_elsewhere", list)):
        if key in meta and not isinstance(meta[key], kinds):
            raise ResultsError(f"{where} is damaged: {key!r} has the wrong type")
    if "topology" in meta and (why := _topology_damage(meta["topology"])):
        raise ResultsError(f"{where} is damaged: its topology's {why}")
    # what a resume's progress and summary compute with: each case's estimate, each
    # fitted case's changes
    guessed = (meta.get("estimates") or {}).get("cases", {})
    if not isinstance(guessed, dict) or not all(
            v is None or _number(v) for v in guessed.values()) or \
            not all(isinstance(v, dict) for v in (meta.get("fitted") or {}).values()):
        raise ResultsError(f"{where} is damaged: its estimates or fitted cases have the "
                           "wrong type")
    if not all(isinstance(c, str) for c in meta["columns"]) or \
            not {"case", "metric", "value"} <= set(meta["columns"]):
        raise ResultsError(f"{where} is damaged: 'columns' lacks case, metric and value")
    for c in meta["cases"]:
        if not (isinstance(c, dict) and all(isinstance(c.get(k), str) for k in
                                            ("id", "job", "bench"))
                and isinstance(c.get("params"), dict)):
            raise ResultsError(f"{where} is damaged: a case is not {{id, job, bench, params}}")
    return meta, version


_INT = (int,)
# The recorded topology (Topology.to_dict) as its readers (the headline, the analysis,
# reports) take it: each field's types where it is there (a hand-made run lacks some).
TOPOLOGY_FIELDS = {"nodes": (list,), "cpu": (dict,), "machine": (dict,), "tiers": (dict,),
                   "settings": (dict,), "cxl": (dict,), "dax": (list,), "gpus": (list,)}
NODE_FIELDS = {"id": _INT, "cpus": (list,), "mem_total": _INT, "mem_free": _INT,
               "distances": (dict,), "hugepages": (dict,), "hmat": (dict,),
               "tier": (int, _NONE), "far_memory": (bool,), "cxl_regions": (list,)}
CACHE_FIELDS = {"level": _INT, "type": (str,), "size": _INT}


def _topology_damage(topo: dict) -> str | None:
    """What in a recorded topology is not of the types Topology.to_dict writes (None: all
    of it is)."""
    if key := _mistyped(topo, TOPOLOGY_FIELDS):
        return f"{key!r} has the wrong type"
    for node in topo.get("nodes", []):
        if not (isinstance(node, dict) and "id" in node and not _mistyped(node, NODE_FIELDS)
                and all(type(c) is int for c in node.get("cpus", []))):
            return "nodes are not {id, cpus, mem_total...} as cxlbench records them"
    caches = topo.get("cpu", {}).get("caches", [])
    if not isinstance(caches, list) or not all(
            isinstance(c, dict) and not _mistyped(c, CACHE_FIELDS) for c in caches):
        return "CPU caches are not {level, type, size} as cxlbench records them"
    return None


def _upgrade_meta(meta: dict, version: int, where: Path) -> dict:
    with _naming(where):
        for v in range(version, FORMAT_VERSION):
            meta = {**UPGRADES[v].meta(meta), "format_version": v + 1}
    return meta


@contextlib.contextmanager
def _naming(where: Path):
    """An upgrade step's ResultsError (which knows no file) with the file it was reading."""
    try:
        yield
    except ResultsError as e:
        raise ResultsError(f"{where} is damaged: {e}") from None


def read_meta(path: str | os.PathLike) -> dict:
    """run.json, upgraded to this format."""
    path = _run_dir(path)
    return _upgrade_meta(*_read_stored(path), path / "run.json")


def load(path: str | os.PathLike, columns: list[str] | None = None):
    """A run's results as a pandas DataFrame (one row per repetition and metric; only
    `columns`, where given); the run's metadata is in df.attrs['run']. Older formats are
    upgraded in memory."""
    return Run.open(path).frame(columns)


def rows(path: str | os.PathLike, columns: list[str] | None = None):
    """load() without the run's metadata in df.attrs, for frames worked on: pandas
    deep-copies attrs into every frame derived from one (each selection, each column),
    and a calibration's run.json made that its work (2.5 s of 2.5 s a tiering case)."""
    df = load(path, columns)
    df.attrs = {}
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


def _parameters_span(columns: list[str], version: int) -> tuple[int, int]:
    """Where a table's parameter columns are: after `isa` and before `cpus_used`, in every
    format; ResultsError for columns that lack them (a damaged or hand-made run)."""
    if not {"isa", "cpus_used"} <= set(columns) or \
            columns.index("isa") > columns.index("cpus_used"):
        raise ResultsError(f"its columns lack isa and cpus_used, between which a format "
                           f"{version} run has its parameters")
    return columns.index("isa") + 1, columns.index("cpus_used")


def _v1_columns(columns: list[str], add_measure: bool) -> list[str]:
    """The first of two `metric` columns was the matrix option's; `measure` joins the
    parameters (sorted, between `isa` and `cpus_used`) where a matrix case needs it."""
    cols = list(columns)
    _parameters_span(cols, 1)
    if cols.count("metric") > 1:
        cols.remove("metric")
    if add_measure and "measure" not in cols:
        lo, hi = _parameters_span(cols, 1)
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
    machine = (meta.get("topology") or {}).get("machine")   # (a hand-edited one: anything)
    hostname = machine.get("hostname") if isinstance(machine, dict) else None
    hostname = hostname if isinstance(hostname, str) else None
    return {**meta, "cases": cases, "suite": suite,
            "columns": _v1_columns(meta["columns"], any(c["bench"] == "matrix" for c in cases)),
            "machine_id": meta.get("machine_id") or _machine_id(hostname,
                                                                emulated.get("topology"))}


def _v1_table(meta: dict, header: list, rows: list) -> tuple[list, list]:
    measure = {c["id"]: c["params"]["measure"] for c in meta["cases"]
               if c["bench"] == "matrix" and "measure" in c["params"]}
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


# Format 2's tiering cases named their workload's options bare (the embedding's) or
# kv_<name> (the kvcache's); format 3 names each <workload>.<name>.
_V2_EMBEDDING = ("preset", "scale", "tables", "rows", "dim", "pooling", "dtype", "pool",
                 "batch", "dist", "alpha", "profile", "prefetch")
_V2_KVCACHE = ("preset", "scale", "dtype", "block", "batch", "seq_len", "steps",
               "fragmentation", "active", "alpha")


def _v2_name(key: str) -> str:
    if key.startswith("kv_") and key[3:] in _V2_KVCACHE:
        return f"kvcache.{key[3:]}"
    return f"embedding.{key}" if key in _V2_EMBEDDING else key


def _v2_params(bench: str, params: dict) -> dict:
    return {_v2_name(k): v for k, v in params.items()} if bench == "tiering" else params


def _v2_columns(cases: list[dict], columns: list[str]) -> list[str]:
    """The parameter columns with each tiering option in its new name (kept under the old
    one too where another benchmark's case of the run has that option). `cases` may be
    named either way, and columns named the new way already stay as they are."""
    first, last = _parameters_span(columns, 2)
    tiering = [c["params"] for c in cases if c["bench"] == "tiering"]
    others = {k for c in cases if c["bench"] != "tiering" for k in c["params"]}
    renamed = {k for k in columns[first:last] if _v2_name(k) != k
               and any(k in p or _v2_name(k) in p for p in tiering)}
    names = ({*columns[first:last]} - (renamed - others)) | {_v2_name(k) for k in renamed}
    return columns[:first] + sorted(names) + columns[last:]


def _v2_meta(meta: dict) -> dict:
    cases = [{**c, "params": _v2_params(c["bench"], c["params"])} for c in meta["cases"]]
    suite = dict(meta.get("suite") or {})
    jobs = suite.get("jobs")
    if isinstance(jobs, dict):
        suite["jobs"] = {name: _v2_params(body.get("bench"), body)
                         if isinstance(body, dict) else body for name, body in jobs.items()}
    return {**meta, "cases": cases, "suite": suite,
            "columns": _v2_columns(meta["cases"], meta["columns"])}


def _v2_table(meta: dict, header: list, rows: list) -> tuple[list, list]:
    new = _v2_columns(meta["cases"], header)
    tiering = {c["id"] for c in meta["cases"] if c["bench"] == "tiering"}
    out = []
    for row in rows:
        d = dict(zip(header, row))
        if d.get("case") in tiering:    # a table upgraded already keeps its cells
            d = {(k if _v2_name(k) in header else _v2_name(k)): v for k, v in d.items()}
        out.append([d.get(c, "") for c in new])
    return new, out


def _v2_journal(entry: dict) -> dict:
    if "params" not in entry:
        return entry
    return {**entry, "params": _v2_params(entry.get("bench"), entry["params"])}


# UPGRADES[v] turns a version-v run into version v+1.
UPGRADES: dict[int, Upgrade] = {
    1: Upgrade("matrix's option `metric` is now `measure` (results.csv had two `metric` "
               "columns); the run records its machine id",
               _v1_meta, _v1_table, _v1_journal),
    2: Upgrade("tiering's workload options are named <workload>.<option> (embedding.rows, "
               "kvcache.batch; format 2 had rows, kv_batch)",
               _v2_meta, _v2_table, _v2_journal),
}


def is_prediction(metric: str, kernel: str) -> bool:
    """A value the tier model gave, not a measurement: every figure of the tiering model
    engine (kernel WORKLOAD:model), and the real engine's `predicted` beside its throughput.
    Its repetitions are no sample of the machine: tables show it without CI or n."""
    return metric == "predicted" or str(kernel).endswith(":model")
