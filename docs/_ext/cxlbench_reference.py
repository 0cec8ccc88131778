"""The benchmark reference, made from the code as the site is built: every benchmark the
registry finds, with its buffers, the kernels of native/kernels.c that run it and every
option of its table (kind, bounds, default, help), and every shipped suite. Nothing here
is written by hand, so a new option or kernel is in the manual the next time it is built.

The page reference/benchmarks.md holds one line, the marker below; the source-read event
replaces it with the generated Markdown."""
from __future__ import annotations

MARKER = "<!-- generated: benchmarks -->"


def markdown() -> str:
    from cxlbench import listing
    from cxlbench.options import Option
    from cxlbench.topology import Topology

    chosen = listing.select(None, topology=Topology.read(probe_gpus=False))
    kernels: dict[str, list[dict]] = {}
    for k in chosen["kernels"] + chosen["drivers"]:
        kernels.setdefault(k["benchmark"], []).append(k)
    out = ["Every benchmark cxlbench has, from its registry (`cxlbench/benchmarks/`) and the "
           "kernel table (`native/kernels.c`); `cxlbench list NAME` prints the same on a "
           "machine, with what that machine skips.", ""]
    for b in chosen["benchmarks"]:
        out += [f"## `{b['name']}`", "", _escape(b["description"]) + ".", ""]
        names = ", ".join(f"`{n}`" for n in b["buffers"] or ())
        how = ("`mem.<buffer>` and `page.<buffer>` place one apart" if b["buffer_options"]
               else "placed by the benchmark itself")
        out += [f"Buffers: {names} ({how})." if names else "Buffers: none.", ""]
        for k in kernels.get(b["name"], []):
            out += [_kernel_line(k), ""]
        out += ["| option | values | default | what it sets |", "|---|---|---|---|"]
        for raw in b["options"]:
            opt = Option(**{k: v for k, v in raw.items() if k != "choices"})
            out.append(f"| `{opt.name}` | {_cell(opt.kind_text())} | "
                       f"{_cell(opt.default_text())} | {_cell(opt.help)} |")
        out.append("")
    out += ["## Suites", "", "The suites shipped with cxlbench (`cxlbench run NAME`), "
            "each with its jobs as its file writes them.", ""]
    for s in chosen["suites"]:
        jobs = ", ".join(f"`{j['name']}` ({j['bench']})" for j in s["jobs"])
        out += [f"- **`{s['name']}`**: {_escape(s['description'])} Jobs: {jobs}."]
    return "\n".join(out) + "\n"


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


def _fill(app, docname, source):
    if MARKER in source[0]:
        source[0] = source[0].replace(MARKER, markdown())


def setup(app):
    app.connect("source-read", _fill)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
