"""The results format and every `--json` output against their published JSON Schemas
(cxlbench/schemas/, draft 2020-12): the schemas themselves, every run committed under
tests/data/, fresh outputs of each command made here once, and
that each schema refuses what it should (an unknown key, another format version)."""
import copy
import hashlib
import csv
import json
import shlex
import shutil
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")

from cxlbench import results, schemas  # noqa: E402

from .conftest import REPO, cxlbench  # noqa: E402
from .schema_check import SCHEMA_OF, check_json_output  # noqa: E402
from .test_plan import readme_plans  # noqa: E402

# The results format's three files carry FORMAT_VERSION in their $id; the outputs, 1.
FORMAT_FILES = {"run", "case", "results-row"}
OUTPUTS = {"run-summary", "topology", "list", "doctor", "compare", "report",
           "fleet-status", "plan"}

TINY = '[chase]\nbench = "chase"\nsize = "16K"\nrepeat = 1\n'
V1_RUN = REPO / "tests/data/runs/vm/20261130-093420"
V3_RUN = REPO / "tests/data/first-look/vm/20261202-073449"


# ---- the schemas ---------------------------------------------------------------------------

def test_the_schemas_are_those_published():
    assert set(schemas.names()) == FORMAT_FILES | OUTPUTS
    assert set(SCHEMA_OF.values()) == OUTPUTS


@pytest.mark.parametrize("name", schemas.names())
def test_each_schema_is_a_valid_draft_2020_12_schema(name):
    schema = schemas.load(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    version = results.FORMAT_VERSION if name in FORMAT_FILES else 1
    assert schema["$id"] == f"urn:cxlbench:schema:{name}:{version}"
    assert schema["title"] and schema["description"]


@pytest.mark.parametrize("name", sorted(FORMAT_FILES))
def test_the_format_schemas_describe_every_field(name):
    """A manual's reader gets a description of each property of the format's files."""
    def walk(node, where):
        if isinstance(node, dict):
            for key, sub in (node.get("properties") or {}).items():
                assert "description" in sub or "$ref" in sub, f"{where}.{key}"
            for key, sub in node.items():
                walk(sub, f"{where}.{key}")
        elif isinstance(node, list):
            for sub in node:
                walk(sub, where)
    walk(schemas.load(name), name)


def test_results_row_names_the_fixed_columns():
    schema = schemas.load("results-row")
    fixed = results.FIRST_COLUMNS + results.LAST_COLUMNS
    assert schema["required"] == fixed and list(schema["properties"]) == fixed


# ---- committed runs ------------------------------------------------------------------------

# results/ holds a developer's own runs, never committed (.gitignore): tests/data holds them all.
RUNS = sorted(p.parent for p in (REPO / "tests/data").glob("**/run.json"))


def stored_version(path: Path) -> int:
    return json.loads((path / "run.json").read_text())["format_version"]


def run_files(path: Path) -> tuple[dict, list[dict], list[dict]]:
    """run.json, the journal's lines and results.csv's rows (column -> text) of a run in
    this format: a run stored in it as its files hold them (a run kept without its table
    has no rows); an older one as cxlbench upgrades it in memory (Run.open: its meta, its
    journal, and the rows of its consistent view, which _consistent gives as text)."""
    if stored_version(path) == results.FORMAT_VERSION:
        meta = json.loads((path / "run.json").read_text())
        lines = [json.loads(line) for line in (path / "cases.jsonl").read_text().splitlines()
                 if line.strip()]
        rows = []
        if (path / "results.csv").exists():
            with open(path / "results.csv", newline="") as f:
                rows = list(csv.DictReader(f))
        return meta, lines, rows
    run = results.Run.open(path)
    _, header, table, _ = run._consistent()
    return run.meta, list(run.journal().values()), [dict(zip(header, r)) for r in table]


def test_committed_runs_cover_this_format_and_an_older_one():
    versions = {stored_version(p) for p in RUNS}
    assert results.FORMAT_VERSION in versions
    assert min(versions) < results.FORMAT_VERSION      # the upgrade is held to the schema


@pytest.mark.parametrize("path", RUNS, ids=lambda p: str(p.relative_to(REPO)))
def test_committed_run_validates(path):
    meta, lines, rows = run_files(path)
    schemas.validate("run", meta)
    for entry in lines:
        schemas.validate("case", entry)
    for row in rows:
        schemas.validate("results-row", row)
    assert len(lines) <= len(meta["cases"])
    if rows:
        assert list(rows[0]) == meta["columns"]


# ---- fresh outputs, made once --------------------------------------------------------------

def json_of(*args, cwd=None) -> object:
    r = cxlbench(*args, cwd=cwd)           # which holds the output to its schema
    assert r.returncode == 0, (args, r.stderr[-3000:])
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def made(tmp_path_factory, machines):
    """Each command's --json output here (name -> outputs), and the runs it made: a tiny
    chase run, a model-engine tiering run; topology here and of three fixture machines
    with CXL; the manual's plans; three compares (an old run against a new one, a run
    against its copy: every metric paired, a copy whose first metric is 0 against the
    run: a null ratio); a report; a fleet's status over SLURM's stand-ins."""
    from .test_fleet import GANG, fake_slurm, write_suite

    tmp = tmp_path_factory.mktemp("schemas")
    (tmp / "tiny.toml").write_text(TINY)
    out: dict[str, list] = {name: [] for name in OUTPUTS}
    out["run-summary"].append(json_of("run", str(tmp / "tiny.toml"), "--json",
                                      "--results-dir", str(tmp / "r"), cwd=tmp))
    out["run-summary"].append(json_of(
        "tiering", "--workload", "embedding", "--policies", "first-touch,oracle",
        "--shares", "1,0.5", "--engine", "model", "--set", "embedding.rows=65536",
        "--set", "repeat=1", "--set", "epochs=2", "--json", "--results-dir",
        str(tmp / "r"), cwd=tmp))
    out["topology"].append(json_of("topology", "--json"))
    for fixture in ("two_socket_cxl", "interleaved_cxl", "nvdimm_cxl"):
        root = machines[fixture]
        out["topology"].append(json_of("topology", "--json", "--sys-root", str(root / "sys"),
                                       "--proc-root", str(root / "proc")))
    out["list"].append(json_of("list", "--json"))
    out["list"].append(json_of("list", "chase", "--json"))
    out["doctor"].append(json_of("doctor", "--json"))
    for plan in readme_plans():             # the manual's plans (those without --check)
        out["plan"].append(json_of(*shlex.split(plan)[1:], "--json", "--results-dir",
                                   str(tmp / "r"), cwd=tmp))
    copy_ = tmp / "copy" / V3_RUN.name
    shutil.copytree(V3_RUN, copy_)
    out["compare"].append(json_of("compare", str(V1_RUN), str(V3_RUN), "--json"))
    out["compare"].append(json_of("compare", str(V3_RUN), str(copy_), "--json"))
    # A against a copy whose first metric is 0 everywhere: a ratio to 0 is null, not NaN
    zero = tmp / "zero" / V3_RUN.name
    shutil.copytree(V3_RUN, zero)
    with open(zero / "results.csv", newline="") as f:
        header, *rows = list(csv.reader(f))
    case, metric, value = (header.index(c) for c in ("case", "metric", "value"))
    for row in rows:
        if (row[case], row[metric]) == (rows[0][case], rows[0][metric]):
            row[value] = "0"
    with open(zero / "results.csv", "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([header, *rows])
    for name in ("results.parquet", "cases.parquet"):
        (zero / name).unlink(missing_ok=True)
    out["compare"].append(json_of("compare", str(zero), str(V3_RUN), "--json"))
    out["report"].append(json_of("report", str(V3_RUN), "-o", str(tmp / "report"), "--json"))
    env, _ = fake_slurm(tmp)
    r = cxlbench("fleet", "submit", *GANG, str(write_suite(tmp)), "--nodelist", "vm",
                 "--results", str(tmp / "shared"), env=env)
    assert r.returncode == 0, r.stderr
    r = cxlbench("fleet", "status", r.stdout.strip(), "--results", str(tmp / "shared"),
                 "--json", env=env)
    assert r.returncode == 0, r.stderr
    out["fleet-status"].append(json.loads(r.stdout))
    return out, sorted(p.parent for p in (tmp / "r").glob("*/*/run.json"))


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_fresh_output_validates(made, name):
    outputs, _ = made
    assert outputs[name]
    for found in outputs[name]:
        schemas.validate(name, found)


def test_fresh_runs_files_validate(made):
    _, runs = made
    assert len(runs) == 2                   # the chase run and the tiering run
    for path in runs:
        meta, lines, rows = run_files(path)
        schemas.validate("run", meta)
        assert {"analysis", "load", "libc", "build", "estimates"} <= set(meta)
        assert len(lines) == len(meta["cases"]) and rows
        for entry in lines:
            schemas.validate("case", entry)
        for row in rows:
            schemas.validate("results-row", row)


def test_the_outputs_hold_what_their_schemas_inner_parts_describe(made):
    """The outputs above hold what their schemas' inner parts describe, so those parts are
    checked too: paired metrics, unpaired cases, a plan's stages, a tiering case."""
    outputs, _ = made
    assert outputs["compare"][1]["metrics"] and outputs["compare"][0]["unpaired"]
    assert any(m["ratio"] is None for m in outputs["compare"][2]["metrics"])
    assert any(p["stages"] and p["balance"] for p in outputs["plan"])
    assert any(r["benchmark"] == "tiering" for r in outputs["run-summary"][1])


# ---- what the schemas refuse ---------------------------------------------------------------

def refused(name: str, instance, words: str) -> None:
    with pytest.raises(jsonschema.ValidationError) as e:
        schemas.validate(name, instance)
    assert f"{name}.schema.json" in str(e.value.message) and words in e.value.message


def with_unknown_key(instance):
    """The instance with a key no schema knows at its top level (an array's: its first
    item's)."""
    out = copy.deepcopy(instance)
    target = out[0] if isinstance(out, list) else out
    target["not_in_the_schema"] = 1
    return out


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_an_outputs_unknown_key_is_refused(made, name):
    outputs, _ = made
    found = next(o for o in outputs[name] if o)
    refused(name, with_unknown_key(found), "not_in_the_schema")


def test_a_run_of_another_version_or_with_a_new_key_is_refused(made):
    _, runs = made
    meta, lines, rows = run_files(runs[0])
    schemas.validate("run", meta)
    refused("run", {**meta, "format_version": results.FORMAT_VERSION - 1}, "format_version")
    refused("run", {**meta, "format_version": results.FORMAT_VERSION + 1}, "format_version")
    refused("run", with_unknown_key(meta), "not_in_the_schema")
    refused("run", {k: v for k, v in meta.items() if k != "columns"}, "columns")
    refused("case", with_unknown_key(lines[0]), "not_in_the_schema")
    refused("case", {**lines[0], "status": "skipped"}, "status")
    refused("results-row", with_unknown_key(rows[0]), "not_in_the_schema")
    refused("results-row", {**rows[0], "value": "nan"}, "value")
    refused("results-row", {k: v for k, v in rows[0].items() if k != "metric"}, "metric")


def test_check_json_output_picks_the_schema_by_command(made):
    outputs, _ = made
    topo = json.dumps(outputs["topology"][0])
    check_json_output(["topology", "--json"], topo)
    check_json_output(["emulate", "--topology", "cxl", "--", "topology", "--json"], topo)
    check_json_output(["topology"], "not JSON: no --json, nothing checked")
    check_json_output(["fleet", "submit", "--json"], "no schema: nothing checked")
    check_json_output(["run", "--bench", "chase", "--json", "--dry-run"], "chase/000 ...")
    with pytest.raises(jsonschema.ValidationError):
        check_json_output(["doctor", "--json"], topo)
    with pytest.raises(jsonschema.ValidationError):
        check_json_output(["emulate", "--topology", "shared-cxl", "--", "topology", "--json"],
                          f"== host 0 ==\n{topo}\n== host 1 ==\n{{}}\n")


def format_digest() -> str:
    """The three format schemas' structure (types, keys, bounds; descriptions and titles
    left out, so a clearer description is no change of format), hashed."""
    def structure(node):
        if isinstance(node, dict):
            return {k: structure(v) for k, v in node.items()
                    if k not in ("description", "title")}
        if isinstance(node, list):
            return [structure(v) for v in node]
        return node
    text = json.dumps([structure(schemas.load(n)) for n in sorted(FORMAT_FILES)],
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# The format's schemas as each version left them. A change to run.json, a journal line or
# results.csv's rows changes this: it is a new FORMAT_VERSION (results.py, with its step
# in UPGRADES) and a new line here, never an edit of the last one.
FORMAT_DIGESTS = {3: "77bcd3f4b409a297"}


def test_a_change_of_format_is_a_version_step():
    assert FORMAT_DIGESTS.get(results.FORMAT_VERSION) == format_digest(), \
        "the results format's schemas changed without a FORMAT_VERSION step"
