"""`cxlbench fleet collect`: wait for a fleet's jobs to end, then one report over every
machine's run, with each machine compared against a reference machine by compare's own
statistics and setting differences (past six machines, against its kind's fleet on a page
of its own), and a table of the machines with their SLURM fields."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from .. import report as rep
from .. import results
from ..errors import ResultsError, UserError
from ..report.document import Folded, Heading, Para, Table
from ..report.fleet import FLEET
from . import record, status


def wait(fleet: record.Fleet, progress: Callable[[str], None],
         interval: float = 10.0) -> list[status.Machine]:
    """Poll until every machine is done or failed (one SLURM did not answer for is asked
    again); progress gets one line each poll."""
    while True:
        fleet.reload()                  # a resume submitted meanwhile is waited for too
        found = status.machines(fleet)
        counts = {s: sum(1 for m in found if m.state == s)
                  for s in ("pending", "running", "unknown", "done", "failed")}
        progress(", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no machines yet")
        if not counts["pending"] and not counts["running"] and not counts["unknown"]:
            return found
        time.sleep(interval)


def fleet_table(found: list[status.Machine]) -> Table:
    """Each machine: its state, its SLURM fields as its run recorded them, its run."""
    rows = []
    for m in found:
        try:
            meta = results.read_meta(m.run) if m.run is not None else {}
        except ResultsError:
            meta = {}
        slurm = meta.get("slurm") or {}
        resumed = [r.get("job_id") or "" for r in meta.get("slurm_resumed", [])]
        cases = f"{m.finished}/{m.cases}" if m.cases is not None else ""
        rows.append([m.node, m.state, slurm.get("job_id") or m.job,
                     ", ".join(filter(None, resumed)), slurm.get("array_task_id") or "",
                     slurm.get("partition") or "", slurm.get("cluster") or "", cases,
                     m.reason or "", str(m.run or "")])
    return Table(["machine", "state", "SLURM job", "resumed by", "array task", "partition",
                  "cluster", "cases", "why", "run"], rows)


def with_results(found: list[status.Machine]) -> list[status.Machine]:
    return [m for m in found if m.run is not None and m.finished]


def reference(with_runs: list[status.Machine], against: str | None) -> status.Machine:
    """The machine the others are compared with: --against, or else the first by name
    whose run finished (a partial run would leave the others' cases unpaired)."""
    if not with_runs:
        raise UserError("no machine of the fleet finished a case: nothing to report")
    if against is None:
        return next((m for m in with_runs if m.state == "done"), with_runs[0])
    for m in with_runs:
        if m.node == against:
            return m
    raise UserError(f"--against {against}: not a machine of the fleet with results "
                    f"({', '.join(m.node for m in with_runs)})")


def against_blocks(ref: status.Machine, other: status.Machine, alpha: float) -> list:
    """One machine against the reference: the settings that differ, then compare's table."""
    runs, _, table, unpaired = rep.comparison(ref.run, other.run, alpha)
    sig = int(table["significant"].sum()) if len(table) else 0
    blocks = [Heading(3, f"{other.node} against {ref.node}")]
    blocks += rep.settings_blocks(*runs)[1:]        # under this heading, not its own
    blocks += [Para(f"{len(table)} metrics compared, {sig} changed significantly "
                    f"(p < {alpha}); A is {ref.node}, B is {other.node}."
                    + (f" {len(unpaired)} case(s) without a partner left out."
                       if unpaired else "")),
               rep.comparison_table(table)]
    return blocks


def build(fleet: record.Fleet, found: list[status.Machine], out_dir: str | Path,
          against: str | None = None, alpha: float = rep.ALPHA, force: bool = False,
          title: str | None = None) -> tuple[Path, Path]:
    """The fleet's report: its machines' states, then each machine against the reference
    and every run as `cxlbench report` shows them; past six machines (index.is_fleet),
    unless --against names a reference, the report's index and pages instead, each
    machine judged against its kind's fleet on its own page."""
    with_runs = with_results(found)
    ref = reference(with_runs, against)
    runs = rep.load_runs([m.run for m in with_runs])
    table = fleet_table(found)
    blocks: list = [Heading(2, "Fleet"),
                    Para(f"Suite {fleet.data['suite']} on {len(found)} machine(s) through "
                         f"SLURM job(s) {', '.join(fleet.job_ids())}; fleet folder "
                         f"{fleet.path}."),
                    table if len(found) <= FLEET else
                    Folded(f"The {len(found)} machines: state, job and run", [table])]
    missing = [m.node for m in found if m not in with_runs]
    if missing:
        shown = ", ".join(missing[:20]) + (f" and {len(missing) - 20} more"
                                           if len(missing) > 20 else "")
        blocks.append(Para(f"No results from {shown}: see why above.", "note"))
    title = title or f"cxlbench fleet: {fleet.data['suite']} on {len(found)} machine(s)"
    if against is None and rep.index.is_fleet(runs):
        index_blocks, pages, _ = rep.fleet_report(runs, title, runs.skipped)
        blocks += [Para(f"Past {FLEET} machines each is judged against its kind's fleet, on "
                        "its own page, rather than against one reference machine "
                        "(--against NODE compares each with that one)."), *index_blocks]
        return rep.write(out_dir, title, blocks, force, pages)
    blocks.append(Heading(2, f"Each machine against {ref.node}"))
    others = [m for m in with_runs if m is not ref]
    if not others:
        blocks.append(Para("Only one machine has results: nothing to compare it with."))
    for m in others:
        blocks += against_blocks(ref, m, alpha)
    blocks += [Heading(2, "Every machine's run"), *rep.report_blocks(runs, runs.skipped)]
    return rep.write(out_dir, title, blocks, force)
