"""The report's first screen: cxlbench.headline's tables for each machine the runs came
from, every cell with its source."""
from __future__ import annotations

from .. import headline, runner
from .document import Heading, Para, Table
from .runs import LoadedRun, machine_key

TITLE = "Headline"


def by_machine(runs: list[LoadedRun]) -> dict[tuple, headline.Headline]:
    """A headline per machine (machine_key) over the newest run of each of its suites
    (quick's nodes, ml's workloads and tiering's knees side by side), those with a figure
    to show."""
    newest: dict[tuple, LoadedRun] = {}
    for r in runs:
        if r.suite in headline.NOT_HEADLINED:
            continue
        key = (machine_key(r), r.suite)
        if key not in newest or r.meta.get("started", "") > newest[key].meta.get("started", ""):
            newest[key] = r
    machines: dict[tuple, list[LoadedRun]] = {}
    for (machine, _), r in newest.items():
        machines.setdefault(machine, []).append(r)
    out = {}
    for machine, group in machines.items():
        records = [rec for r in group for rec in runner.summary_records(r, r.journal)]
        h = headline.build(records, group[0].meta.get("topology") or {})
        if not h.empty:
            out[machine] = h
    return out


def per_machine(runs: list[LoadedRun]) -> list[tuple[str, headline.Headline]]:
    """(machine name, headline) of each machine with a figure to show (by_machine)."""
    names = {machine_key(r): r.machine for r in runs}
    return [(names[key], h) for key, h in by_machine(runs).items()]


def one_machine(h: headline.Headline) -> list:
    """One machine's headline: its notes and tables."""
    out: list = [Para(n, "headline") for n in h.notes]
    if h.nodes:
        out.append(Table(*headline.node_table(h)))
        if headline.unmeasured(h):
            out.append(Para(f"Not run: {'; '.join(headline.unmeasured(h))}."))
    if h.workloads:
        out.append(Table(*headline.workload_table(h)))
        out += [Para(text[0].upper() + text[1:] + ".") for text in headline.workload_notes(h)]
    if h.tiering:
        out.append(Table(*headline.tiering_table(h)))
        if any(t["knees"] for t in h.tiering):
            out.append(Para(f"Knee: the smallest fast share within "
                            f"{h.tiering[0]['within']:.0%} of all-fast at it and every "
                            "larger share."))
        if not all(t["knees"] for t in h.tiering):
            out.append(Para("Where no policy ran between the bounds, there is no knee to "
                            "judge."))
    return out


def blocks(runs: list[LoadedRun]) -> list:
    """The headlines as the report's first section; nothing where none has a figure."""
    found = per_machine(runs)
    out: list = []
    for machine, h in found:
        if len(found) > 1:
            out.append(Heading(3, machine))
        out += one_machine(h)
    return [Heading(2, TITLE), *out] if out else []
