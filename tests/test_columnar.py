"""The columnar copy of a run (results.parquet, cases.parquet): read in place of the
sources only while it matches them, equal to what the sources give, and never a reason
for a run not to load."""
import json
import shutil

import pandas as pd
import pytest

from cxlbench import columnar, results

from .conftest import cxlbench

SUITE = """
[global]
repeat = 3
warmup = 0
[lat]
bench = "chase"
size = ["64K", "128K"]
loads = 20000
[bw]
bench = "bandwidth"
size = "1M"
kernel = ["read", "copy"]
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("columnar")
    (root / "s.toml").write_text(SUITE)
    r = cxlbench("run", str(root / "s.toml"), "--results-dir", str(root / "r"))
    assert r.returncode == 0, r.stderr
    (path,) = [p.parent for p in (root / "r").glob("*/*/run.json")]
    assert (path / columnar.ROWS).exists()      # written as the run ended
    return path


def fresh(run_dir, tmp_path):
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    for name in (columnar.ROWS, columnar.JOURNAL):
        (copy / name).unlink(missing_ok=True)
    return copy


def test_the_copy_gives_what_the_sources_give(run_dir, tmp_path):
    path = fresh(run_dir, tmp_path)
    run = results.Run.open(path)
    from_sources, journal = run._frame_whole()
    first = results.load(path)                          # reads the sources, writes the copy
    assert (path / columnar.ROWS).exists() and (path / columnar.JOURNAL).exists()
    assert columnar.read(path) is not None
    second = results.load(path)                         # reads the copy
    pd.testing.assert_frame_equal(first, from_sources)
    pd.testing.assert_frame_equal(second, from_sources)
    assert second.attrs["journal"] == journal
    assert list(second.attrs["journal"]) == list(journal)          # in the journal's order


def test_a_stale_copy_is_not_read_and_is_written_again(run_dir, tmp_path):
    path = fresh(run_dir, tmp_path)
    results.load(path)
    # The journal loses its last case (as if edited): the copy no longer matches.
    lines = (path / "cases.jsonl").read_text().splitlines(keepends=True)
    (path / "cases.jsonl").write_text("".join(lines[:-1]))
    assert columnar.read(path) is None
    with pytest.warns(results.ResultsWarning):
        df = results.load(path)
    assert len(df.attrs["journal"]) == len(lines) - 1
    assert columnar.read(path) is None      # a run missing cases is not copied


def test_an_entry_keeps_absent_and_null_fields_apart(tmp_path):
    rows = pd.DataFrame({"case": ["a/0", "a/1"], "value": [1.0, 2.0]})
    (tmp_path / "results.csv").write_text("x")
    (tmp_path / "cases.jsonl").write_text("y")
    (tmp_path / "run.json").write_text("z")
    journal = {"a/0": {"case": "a/0", "status": "ok", "error": None, "info": {"k": [1, 2]}},
               "a/1": {"case": "a/1", "status": "failed", "error": "boom", "seconds": 1.5}}
    assert columnar.write(tmp_path, rows, journal, columnar.stamp(tmp_path))
    got_rows, got = columnar.read(tmp_path)
    assert got == journal
    pd.testing.assert_frame_equal(got_rows, rows)


def test_a_folder_that_cannot_hold_the_copy_still_loads(run_dir, tmp_path, monkeypatch):
    path = fresh(run_dir, tmp_path)

    def refuse(*a, **k):
        raise OSError("read-only file system")
    monkeypatch.setattr(columnar.os, "replace", refuse)
    df = results.load(path)
    assert len(df) and not (path / columnar.ROWS).exists()
    assert not list(path.glob(".*.tmp"))


def test_run_json_changed_outdates_the_copy(run_dir, tmp_path):
    path = fresh(run_dir, tmp_path)
    results.load(path)
    assert columnar.read(path) is not None
    meta = json.loads((path / "run.json").read_text())
    (path / "run.json").write_text(json.dumps({**meta, "note": "edited"}))
    assert columnar.read(path) is None
