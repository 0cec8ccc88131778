"""The report's first screen: cxlbench.headline's tables for each machine the runs came
from, every cell with its source."""
from __future__ import annotations

from .. import headline, runner
from .document import Heading, Para, Table
from .runs import LoadedRun, machine_key

TITLE = "Headline"


def per_machine(runs: list[LoadedRun]) -> list[tuple[str, headline.Headline]]:
    """A headline per machine over all of its runs (quick's nodes, ml's workloads and
    tiering's knees side by side), those with a figure to show."""
    machines: dict[str, list[LoadedRun]] = {}
    for r in runs:
        machines.setdefault(machine_key(r), []).append(r)
    out = []
    for group in machines.values():
        records = [rec for r in group for rec in runner.summary_records(r, r.journal)]
        h = headline.build(records, group[0].meta.get("topology") or {})
        if h.nodes or h.workloads or h.knees:
            out.append((group[0].machine, h))
    return out


def blocks(runs: list[LoadedRun]) -> list:
    """The headlines as the report's first section; nothing where none has a figure."""
    found = per_machine(runs)
    out: list = []
    for machine, h in found:
        if len(found) > 1:
            out.append(Heading(3, machine))
        out += [Para(n, "headline") for n in h.notes if n != headline.SLOWDOWN]
        if h.nodes:
            out.append(Table(*headline.node_table(h)))
        if h.workloads:
            out.append(Table(*headline.workload_table(h)))
            out.append(Para(headline.SLOWDOWN[0].upper() + headline.SLOWDOWN[1:] + "."))
        out += [Para(k + ".") for k in headline.knee_lines(h)]
    return [Heading(2, TITLE), *out] if out else []
