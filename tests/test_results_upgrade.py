"""Format 2 -> 3: a run whose tiering cases named their workload's options bare (rows) or
kv_<name> reads, resumes and reports with them as embedding.<name> and kvcache.<name>,
while another benchmark's `rows` in the same run keeps its column."""
import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from cxlbench import results
from cxlbench.cli import main
from cxlbench.errors import ResultsError

from .conftest import cxlbench

SUITE = """
[emb]
bench = "embedding"
rows = 2048
dim = 16
batch = 8
pooling = 4
repeat = 1
warmup = 0

[tier]
bench = "tiering"
workload = ["embedding", "kvcache"]
policy = "all-fast"
engine = "model"
embedding.rows = 4096
embedding.batch = 64
kvcache.batch = 8
kvcache.active = 3
kvcache.scale = 0.0625
kvcache.seq_len = 37
kvcache.steps = 3
epochs = 3
repeat = 1
"""


def _old_name(key: str) -> str:
    if key.startswith("kvcache."):
        return "kv_" + key.partition(".")[2]
    return key.partition(".")[2] if key.startswith("embedding.") else key


def cells(column) -> list[str]:
    """A column as text, an empty cell (NaN) as ''."""
    return ["" if v != v else str(v) for v in column]


def _as_format_2(run_dir):
    """Rewrite a run as format 2 wrote it: tiering's workload options by their old names."""
    meta = json.loads((run_dir / "run.json").read_text())

    def old(params, bench):
        return {_old_name(k): v for k, v in params.items()} if bench == "tiering" else params
    tiering = {c["id"] for c in meta["cases"] if c["bench"] == "tiering"}
    meta["cases"] = [{**c, "params": old(c["params"], c["bench"])} for c in meta["cases"]]
    names = {k for c in meta["cases"] for k in c["params"]}
    meta.update(format_version=2, columns=results.columns_for(names))
    (run_dir / "run.json").write_text(json.dumps(meta))
    rows = list(csv.DictReader(io.StringIO((run_dir / "results.csv").read_text())))
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(meta["columns"])
    for r in rows:
        if r["case"] in tiering:        # its value, not the embedding case's empty cell
            r = {**r, **{_old_name(k): v for k, v in r.items() if _old_name(k) != k}}
        w.writerow([r.get(c, "") for c in meta["columns"]])
    (run_dir / "results.csv").write_text(buf.getvalue())
    lines = [json.loads(x) for x in (run_dir / "cases.jsonl").read_text().splitlines()]
    (run_dir / "cases.jsonl").write_text("".join(
        json.dumps({**e, "params": old(e["params"], e["bench"])} if "params" in e else e)
        + "\n" for e in lines))
    return meta


def test_a_format_2_tiering_run_reads_with_namespaced_options(tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text(SUITE)
    r = cxlbench("run", str(suite), "--results-dir", str(tmp_path / "res"))
    assert r.returncode == 0, r.stderr
    [run_dir] = [p for p in (tmp_path / "res").glob("*/*") if p.is_dir()]
    before = results.load(run_dir)
    old = _as_format_2(run_dir)
    assert "rows" in old["columns"] and "kv_batch" in old["columns"]
    assert "embedding.rows" not in old["columns"]

    run = results.Run.open(run_dir)
    assert run.stored_version == 2
    # The step is safe on a table that has had it (a repair cut short between the files).
    header, *rows = list(csv.reader(io.StringIO((run_dir / "results.csv").read_text())))
    once = results.UPGRADES[2].table(run.meta, header, rows)
    assert results.UPGRADES[2].table(run.meta, *once) == once
    assert once[0] == run.meta["columns"]
    tier = [c for c in run.meta["cases"] if c["bench"] == "tiering"]
    assert all(c["params"]["embedding.rows"] == 4096 and c["params"]["kvcache.batch"] == 8
               and "rows" not in c["params"] and "kv_batch" not in c["params"] for c in tier)
    assert run.meta["columns"] == before.attrs["run"]["columns"]
    after = results.load(run_dir)
    assert list(after.columns) == list(before.columns)
    for column in ("rows", "embedding.rows", "kvcache.batch", "value", "case"):
        assert cells(after[column]) == cells(before[column]), column

    # A resume writes the upgrade back and says so.
    r = cxlbench("run", "--resume", str(run_dir))
    assert r.returncode == 0, r.stderr
    assert "upgraded from results format 2: tiering's workload options" in r.stderr
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["format_version"] == results.FORMAT_VERSION == 3
    assert meta["columns"] == before.attrs["run"]["columns"]


@pytest.mark.parametrize("value, shown", [("x", '"x"'), (2.5, "2.5"), (True, "true"),
                                          (None, "null"), ([3], "[3]")])
def test_a_format_version_that_is_no_whole_number_is_named(tmp_path, value, shown):
    """A run.json whose format_version is there but not a whole number says what it is,
    not that it has none; one without it still says so."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    meta = {"format_version": value, "run_id": "r", "columns": ["case", "metric", "value"],
            "cases": []}
    (run_dir / "run.json").write_text(json.dumps(meta))
    r = CliRunner().invoke(main, ["run", "--resume", str(run_dir), "--dry-run"])
    assert r.exit_code == 2 and r.stderr.startswith("error: "), r.output
    assert f"its format_version is {shown}, not a whole number (cxlbench writes 1 to " \
        f"{results.FORMAT_VERSION})" in r.stderr
    assert "has no format_version" not in r.stderr
    del meta["format_version"]
    (run_dir / "run.json").write_text(json.dumps(meta))
    with pytest.raises(ResultsError, match="run.json has no format_version$"):
        results.read_meta(run_dir)


COMMITTED = Path(__file__).resolve().parent / "data" / "runs" / "vm" / "20261130-093420"


def _matrix_without_metric(meta):
    case = next(c for c in meta["cases"] if c["bench"] == "matrix")
    del case["params"]["metric"]


@pytest.mark.parametrize("damage, said", [
    (lambda m: m["topology"].update(machine=1),
     "run.json is damaged: its topology's 'machine' has the wrong type"),
    (lambda m: m["topology"]["machine"].update(hostname=5), None),
    (_matrix_without_metric, None),
    (lambda m: m.update(columns=[c for c in m["columns"] if c != "isa"]),
     "run.json is damaged: its columns lack isa and cpus_used, between which a format 1 run "
     "has its parameters"),
], ids=["machine-not-a-table", "hostname-a-number", "matrix-case-without-metric",
        "columns-without-isa"])
def test_a_damaged_format_1_run_upgrades_or_is_refused_naming_run_json(tmp_path, damage, said):
    """The format 1 upgrade reads what run.json holds, whatever a hand or a crash left there:
    a resume's dry run lists the run or refuses it in one line naming run.json, never a
    traceback."""
    run_dir = tmp_path / "run"
    shutil.copytree(COMMITTED, run_dir)
    meta = json.loads((run_dir / "run.json").read_text())
    damage(meta)
    (run_dir / "run.json").write_text(json.dumps(meta))
    r = CliRunner().invoke(main, ["run", "--resume", str(run_dir), "--dry-run",
                                  "--other-machine"])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exc_info
    if said is None:        # read whole: refused only as any run of that cxlbench is
        assert r.exit_code == 2 and "whose chase options differ from this one's" in r.stderr
    else:
        assert r.exit_code == 2 and said in r.stderr and r.stderr.startswith("error: ")
    assert r.stderr.count("\n") == 1, r.stderr
