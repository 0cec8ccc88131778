"""The manual's pages made from the code and the repository as the site is built:

- the benchmark reference: every benchmark the registry finds, with its buffers, the
  kernels of native/kernels.c that run it and every option of its table (kind, bounds,
  default, help), and every shipped suite;
- the committed runs' figures (measurements.md): each job of each run committed to the
  repository, with the command, machine, CPU and date its run.json records;
- the results format (results-format.md): the format version, its upgrade history from
  results.UPGRADES, and every JSON Schema of cxlbench/schemas/ as a table of its fields.

Nothing here is written by hand, so a new option, kernel or committed run is in the manual
the next time it is built. A page holds a marker line; the source-read event replaces it
with the generated Markdown."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Runs committed as real measurements (not the estimate fixtures, which hold no rows;
# results/ is a developer's own, never committed).
COMMITTED = ["tests/data/first-look/*/*/run.json", "tests/data/runs/*/*/run.json"]


def benchmark_reference() -> str:
    from cxlbench import listing
    from cxlbench.options import Option
    from cxlbench.topology import Topology

    chosen = listing.select(None, topology=Topology.read(probe_gpus=False))
    kernels: dict[str, list[dict]] = {}
    for k in chosen["kernels"] + chosen["drivers"]:
        kernels.setdefault(k["benchmark"], []).append(k)
    out = ["Every benchmark cxlbench has, from its registry (`cxlbench/benchmarks/`) and the "
           "kernel table (`native/kernels.c`).", ""]
    measures = _measures()
    for b in chosen["benchmarks"]:
        out += [f"## `{b['name']}`", "", _escape(b["description"]) + ".", ""]
        if b["name"] in measures:
            out += [f"What it measures: {measures[b['name']]} ([benchmarks](../benchmarks.md))",
                    ""]
        names = ", ".join(f"`{n}`" for n in b["buffers"] or ())
        how = ("`mem.<buffer>` and `page.<buffer>` place one apart" if b["buffer_options"]
               else "placed by the benchmark itself")
        out += [f"Buffers: {names} ({how})." if names else "Buffers: none.", ""]
        for k in kernels.get(b["name"], []):
            out += [_kernel_line(k), ""]
        out += ["| option | values | default | what it sets |", "|---|---|---|---|"]
        for raw in b["options"]:
            opt = Option(**{**raw, "choices": tuple(raw["choices"] or ())})
            out.append(f"| `{opt.name}` | {_cell(opt.kind_text())} | "
                       f"{_cell(opt.default_text())} | {_cell(opt.help)} |")
        out.append("")
    out += ["## Suites", "", "The suites shipped with cxlbench (`cxlbench run NAME`), "
            "each with its jobs as its file writes them.", ""]
    for s in chosen["suites"]:
        jobs = ", ".join(f"`{j['name']}` ({j['bench']})" for j in s["jobs"])
        out += [f"- **`{s['name']}`**: {_escape(s['description'])} Jobs: {jobs}."]
    return "\n".join(out) + "\n"


def _measures() -> dict[str, str]:
    """Each benchmark's "measures" cell of benchmarks.md's table (written by hand, checked
    against the registry by tests/test_docs.py): what its figures are and their units."""
    import re
    out = {}
    for line in (REPO / "docs" / "benchmarks.md").read_text().splitlines():
        m = re.match(r"\| `(\w+)` \| (.*?) \| ", line)
        if m:      # its links, relative to docs/, from reference/ where this page is
            out[m.group(1)] = re.sub(r"\]\((?!https?:)([^)#]*\.md)", r"](../\1",
                                     m.group(2)).replace("](#", "](../benchmarks.md#")
    return out


def committed_runs() -> str:
    """A table row per job of each committed run: what, command, machine and CPU, date, and
    the range of its cases' medians for each metric (the figures its report shows)."""
    from cxlbench import results
    from cxlbench.units import quantity

    out = ["| what | command | machine and CPU | date | figure |", "|---|---|---|---|---|"]
    folders = sorted({p.parent for pattern in COMMITTED for p in REPO.glob(pattern)})
    for folder in folders:
        meta = results.read_meta(folder)
        df = results.load(folder)
        cpu = (meta.get("topology") or {}).get("cpu") or {}
        machine = f"{meta.get('machine_id')}: {cpu.get('model', 'CPU not recorded')}"
        if meta.get("emulated"):
            e = meta["emulated"]
            machine += f", a QEMU {e.get('accel', '')} guest of topology {e.get('topology')}"
        command = "cxlbench " + " ".join(meta.get("command", [])[1:])
        where = folder.relative_to(REPO)
        medians = df.groupby(["job", "benchmark", "case", "metric", "unit"],
                             sort=False)["value"].median().reset_index()
        for (job, bench), rows in medians.groupby(["job", "benchmark"], sort=False):
            figures = []
            for (metric, unit), m in rows.groupby(["metric", "unit"], sort=False):
                lo, hi = m["value"].min(), m["value"].max()
                span = quantity(lo, unit) if lo == hi else \
                    f"{quantity(lo, unit)} to {quantity(hi, unit)}"
                figures.append(f"{metric} {span} ({len(m)} case{'s' if len(m) > 1 else ''})")
            out.append(f"| {_cell(job)} ({_cell(bench)}) | `{command}` ({_cell(str(where))}) | "
                       f"{_cell(machine)} | {str(meta.get('started', ''))[:10]} | "
                       f"{_cell('; '.join(figures[:3]))} |")
    return "\n".join(out) + "\n"


# The schemas in the order the page gives them: a run's files first, then the --json outputs.
SCHEMA_ORDER = ["run", "case", "results-row", "run-summary", "report", "compare", "plan",
                "topology", "doctor", "list", "fleet-status"]


def results_format() -> str:
    """The format version and what each upgrade step changed, then each schema: its title,
    what it describes, its $id, and a row per field (two levels deep) with type, whether
    it is required and its description."""
    from cxlbench import results, schemas

    out = [f"The current results format is **version {results.FORMAT_VERSION}** "
           "(`format_version` in run.json and in every cases.jsonl line). A run in an older "
           "format is upgraded as it is read, one step at a time, and on disk before "
           "`--resume` appends to it; a newer one is refused.", "",
           "| from version | to | what changed |", "|---|---|---|"]
    for v, step in sorted(results.UPGRADES.items()):
        out.append(f"| {v} | {v + 1} | {_cell(step.what)} |")
    out.append("")
    names = [n for n in SCHEMA_ORDER if n in schemas.names()] + \
        [n for n in schemas.names() if n not in SCHEMA_ORDER]
    for name in names:
        schema = schemas.load(name)
        out += [f"## `{name}`: {_escape(schema.get('title', name))}", "",
                _escape(schema.get("description", "")), "",
                f"Schema `{schema.get('$id', '')}`, in the package as "
                f"`cxlbench/schemas/{name}.schema.json`.", ""]
        rows = list(_fields(schema))
        if rows:
            out += ["| field | type | required | what it holds |", "|---|---|---|---|"]
            out += [f"| `{f}` | {_cell(t)} | {'yes' if r else ''} | {_cell(d)} |"
                    for f, t, r, d in rows]
            out.append("")
    return "\n".join(out) + "\n"


def _fields(schema: dict, prefix: str = "", depth: int = 0):
    """(field, type, required, description) for each property, `parent.child` one level
    down; an array's items as `field[].child` (a schema that is an array: `[].child`)."""
    if not prefix and schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        schema, prefix = schema["items"], "[]"
    required = set(schema.get("required", ()))
    for key, sub in (schema.get("properties") or {}).items():
        name = f"{prefix}.{key}" if prefix else key
        yield name, _type(sub), key in required, sub.get("description", "")
        inner = sub.get("items") if sub.get("type") == "array" else sub
        if depth < 1 and isinstance(inner, dict) and inner.get("properties"):
            yield from _fields(inner, name + ("[]" if inner is not sub else ""), depth + 1)


def _type(sub: dict) -> str:
    t = sub.get("type")
    if isinstance(t, list):
        return " or ".join(t)
    if t:
        return t + (f" of {_type(sub['items'])}" if t == "array" and
                    isinstance(sub.get("items"), dict) and sub["items"].get("type") else "")
    if "const" in sub:
        return f"{sub['const']!r}"
    if "enum" in sub:
        return "one of " + ", ".join(map(str, sub["enum"]))
    for key in ("oneOf", "anyOf"):
        if key in sub:
            return " or ".join(_type(s) for s in sub[key])
    return "any"


def _kernel_line(k: dict) -> str:
    kind = "Kernel" if "elem_bytes" in k else "Driver"
    text = f"{kind} `{k['name']}`: {_escape(k['description'])}"
    if kind == "Kernel":
        text += (f"; reads {k['bytes_read']} B and writes {k['bytes_written']} B per "
                 f"{k['elem_bytes']} B step")
    check = k["check"] + (f" ({k['unchecked']})" if k["unchecked"] else "")
    return text + f"; output checked: {_escape(check)}; variants: {', '.join(k['isas'])}."


def _escape(text: str) -> str:
    """Text as Markdown shows it literally: <buffer> and *, _ in names are not markup."""
    return (str(text).replace("\\", "\\\\").replace("<", "&lt;").replace("*", "\\*")
            .replace("_", "\\_").replace("|", "\\|"))


def _cell(text: str) -> str:
    return _escape(text).replace("\n", " ")


GENERATED = {"<!-- generated: benchmarks -->": benchmark_reference,
             "<!-- generated: committed runs -->": committed_runs,
             "<!-- generated: results format -->": results_format}


def _fill(app, docname, source):
    for marker, make in GENERATED.items():
        if marker in source[0]:
            source[0] = source[0].replace(marker, make())


def _always_read(app, env, added, changed, removed):
    """The generated pages are read again on every build: their source file is a marker
    that never changes, but what it is made from does."""
    return [d for d in env.found_docs
            if any(m in (Path(env.doc2path(d))).read_text() for m in GENERATED)]


def setup(app):
    app.connect("source-read", _fill)
    app.connect("env-get-outdated", _always_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
