"""A run's columnar copy: its rows (results.parquet) and its journal (cases.parquet),
written once the run is whole and read instead of parsing results.csv and cases.jsonl
line by line: a fleet's runs load three times as fast, a run of 180k cases six times.

results.csv and cases.jsonl stay the source of truth. The copy records the size, times
and inode of both, and of run.json, as it found them; one that no longer matches (a
resume appended, a file was edited) is not read, and is written again when the run is
next read whole. A copy that cannot be written (a read-only folder) is simply not kept.

The journal's nested fields (params, summary, placement, info ...) are kept as JSON text,
one column each, and decoded through a memo per column (kept across runs for the fields
a fleet's machines share, params above all). Equal texts therefore give the same
object: readers treat journal entries as read-only, as they treat every loaded result."""
from __future__ import annotations

import contextlib
import gc
import json
import os
import tempfile
from pathlib import Path

ROWS = "results.parquet"
JOURNAL = "cases.parquet"
SOURCES = ("results.csv", "cases.jsonl", "run.json")
FORMAT = "1"                     # of the copy itself: a copy in another is written again
_SCALARS = ("case", "status")   # text every entry has; every other field is JSON text
_ABSENT = object()


def stamp(path: Path) -> str | None:
    """The sources as they are now (size, times and inode of each), as one text; None
    where one cannot be read."""
    try:        # (ctime: no tool sets it back; inode: an atomic replace changes it)
        return json.dumps([FORMAT] + [[(st := os.stat(path / name)).st_size, st.st_mtime_ns,
                                       st.st_ctime_ns, st.st_ino] for name in SOURCES])
    except OSError:
        return None


def write(path: Path, rows, journal: dict[str, dict], taken: str) -> bool:
    """Write the copy of a run read whole when its sources were as `taken` (stamp(),
    before they were read); False where it cannot be (a read-only folder, a value
    Parquet cannot hold): nothing is lost, the sources are read instead."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:             # (a dependency, but a run must end all the same)
        return False

    entries = list(journal.values())
    cols = {k: [e[k] for e in entries] for k in _SCALARS}
    # A field an entry lacks is null; one it holds as null is the text "null".
    for k in sorted({k for e in entries for k in e} - set(_SCALARS)):
        cols[k] = [json.dumps(e[k]) if k in e else None for e in entries]
    meta = {b"cxlbench.stamp": taken.encode()}
    made: list[str] = []                # this writer's own temporary files
    try:
        tables = {ROWS: pa.Table.from_pandas(rows, preserve_index=False),
                  JOURNAL: pa.table({k: pa.array(v, type=pa.string())
                                     for k, v in cols.items()})}
        for name, t in tables.items():
            # A name of its own (O_EXCL), never through a link: a report may write the
            # copy while another reader, on this host or another, writes it too.
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=path)
            made.append(tmp)
            with os.fdopen(fd, "wb") as f:  # (a folder's name need not be UTF-8, Arrow's must)
                pq.write_table(t.replace_schema_metadata({**(t.schema.metadata or {}),
                                                          **meta}), f, compression="zstd")
            os.replace(tmp, path / name)
            made.remove(tmp)
    except (OSError, pa.ArrowException, TypeError, ValueError):
        for tmp in made:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return False
    return True


def read(path: Path, columns: list[str] | None = None):
    """(rows, journal) from the copy where it matches the sources as they are now; None
    where there is none, or it is stale or unreadable. columns: only these of the rows
    (those the run has)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None

    now = stamp(path)
    if now is None:
        return None
    try:        # (ParquetFile: a third of read_table's cost on a fleet's small files)
        with open(path / ROWS, "rb") as f, open(path / JOURNAL, "rb") as g:
            rows_file = pq.ParquetFile(f)
            if columns is not None:
                columns = [c for c in columns if c in rows_file.schema_arrow.names]
            tables = [rows_file.read(columns=columns), pq.ParquetFile(g).read()]
    except (OSError, pa.ArrowException):
        return None
    if any((t.schema.metadata or {}).get(b"cxlbench.stamp") != now.encode()
           for t in tables):
        return None
    try:        # a copy that reads wrong is no copy: the sources are read instead
        rows = tables[0].to_pandas()
        for name in rows.columns[rows.dtypes == object]:
            # a missing value in a column of mixed values is NaN as read_csv gives it
            rows[name] = rows[name].where(rows[name].notna(), float("nan"))
        with paused_gc():
            return rows, _entries(tables[1])
    except (pa.ArrowException, ValueError, KeyError, TypeError):
        return None


@contextlib.contextmanager
def paused_gc():
    """Python's cycle collector held off while a run's many small dicts are made: it would
    walk every object already loaded, again and again, for cycles that JSON cannot make
    (a third of a big run's load)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# Decoded texts kept across runs, by field: a fleet's machines share their cases'
# parameters, so a thousand runs hold one dict per case rather than a thousand, and
# code that works a dict out once (report/figures/params.py) does so once. Not for the
# fields each case has its own of; emptied where one grows past _KEPT texts.
_SHARED: dict[str, dict[str, object]] = {}
_OWN = {"summary", "seconds", "placement"}
_KEPT = 200_000


def _entries(table) -> dict[str, dict]:
    fields = []
    for name in table.column_names:
        values = table.column(name).to_pylist()
        if name not in _SCALARS:
            memo = {} if name in _OWN else _SHARED.setdefault(name, {})
            if len(memo) > _KEPT:
                memo.clear()
            new = [v for v in dict.fromkeys(values) if v is not None and v not in memo]
            # one parse of all new texts as one array: json.loads' own cost, once
            memo.update(zip(new, json.loads(f"[{','.join(new)}]")))
            values = [_ABSENT if v is None else memo[v] for v in values]
        fields.append((name, values))
    keys = [k for k, _ in fields]
    entries = [dict(zip(keys, row)) for row in zip(*(v for _, v in fields))]
    for name, values in fields:         # a field some entries lack: taken out of those
        if name not in _SCALARS:
            for i in [i for i, v in enumerate(values) if v is _ABSENT]:
                del entries[i][name]
    return {e["case"]: e for e in entries}
