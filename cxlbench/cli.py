"""The `cxlbench` command. Bad input (UserError) exits 2 with one clear line."""
from __future__ import annotations

import functools
import json
import math
import os
import pathlib
import shutil
import signal
import sys
import tempfile
import warnings

import click

from . import (__version__, analysis, analysis_text, benchmarks, estimate, headline, listing,
               paramtext, results, runner, suite)
from .errors import CxlbenchError, ResultsWarning, StorageError, UserError
from .benchmarks import tiering as tiering_bench
from .tiering import calibration
from .tiering.policies import KNOBS
from .topology import Topology
from .units import format_list, format_size, parse_size, quantity, quantity_range


def _errors(fn):
    """CxlbenchError -> 'error: ...' on stderr; exit 2 for bad input, 1 otherwise."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)
        except CxlbenchError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(1)
    return wrapper


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """What cxlbench warns about (a row cut short and left out) as one line on stderr."""
    if issubclass(category, ResultsWarning):
        click.echo(f"warning: {message}", err=True)
    else:
        _python_show_warning(message, category, filename, lineno, file, line)


_python_show_warning = warnings.showwarning


@click.group()
@click.version_option(__version__, prog_name="cxlbench")
def main():
    """Latency, bandwidth and placement-verified measurements on every kind of memory."""
    warnings.showwarning = _show_warning
    # A path that is not UTF-8 (a folder named in Latin-1) is printed as the bytes it is,
    # whatever the locale, rather than crash the command after its work is done.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")


@main.command()
@click.argument("suite_name", required=False, default=None)
@click.option("--bench", help="run one benchmark ad hoc instead of a suite")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="an option of --bench (repeatable)")
@click.option("--var", "variables", multiple=True, metavar="KEY=VALUE",
              help="a suite variable from its [vars] (repeatable), e.g. node=1")
@click.option("--resume", type=click.Path(), help="finish an interrupted run directory")
@click.option("--other-machine", is_flag=True,
              help="with --resume: finish a run started on another machine; run.json records "
                   "the mix, and each case the machine that measured it")
@click.option("--results-dir", help="where results/<machine>/<run>/ go  [default: results]")
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON on stdout")
@click.option("--dry-run", is_flag=True, help="list the cases (with --resume: those left) and "
              "stop, changing nothing; refused as the run would be (past a timeout or the "
              "budget: exit 2)")
@click.option("--max-cases", type=click.IntRange(min=1),
              help="refuse a suite that expands to more cases than this  "
                   f"[default: {suite.DEFAULT_MAX_CASES}]")
@click.option("--fit", is_flag=True, help="scale down the cases whose estimate is past "
              "their timeout, or the run past the suite's budget (repetitions, then loads, "
              "epochs or iterations, then sizes), recorded in run.json, instead of refusing")
@_errors
def run(suite_name, bench, sets, variables, resume, other_machine, results_dir, as_json,
        dry_run, max_cases, fit):
    """Run SUITE_NAME (a file, or a suite under suites/; default: quick) or --bench."""
    if resume:
        # A resume runs the cases run.json recorded, where the run already is.
        given = [flag for flag, value in (("a suite", suite_name), ("--bench", bench),
                                          ("--set", sets), ("--var", variables),
                                          ("--results-dir", results_dir),
                                          ("--max-cases", max_cases), ("--fit", fit)) if value]
        if given:
            raise UserError(f"--resume re-runs the recorded suite in its own folder, so it "
                            f"takes no {', '.join(given)}")
        run_ = _resume(resume, other_machine, dry_run)
        if run_ is None:
            return
    else:
        if other_machine:
            raise UserError("--other-machine applies to --resume")
        if bench and suite_name:
            raise UserError("give a suite or --bench, not both")
        if sets and not bench:
            raise UserError("--set applies to --bench")
        if variables and bench:
            raise UserError("--var applies to suites; use --set with --bench")
        s = suite.adhoc(bench, list(sets)) if bench else \
            suite.load(suite_name or "quick", suite.parse_pairs(variables, "--var"))
        run_ = _start(s, results_dir or "results", dry_run,
                      max_cases or suite.DEFAULT_MAX_CASES, fit=fit, guest_fits=True)
        if run_ is None:
            return
    _execute(run_, as_json)


def _resume(path: str, other_machine: bool, dry_run: bool):
    """The run at path checked, repaired and held for its remaining cases to run (None
    for a dry run, which lists them and changes nothing)."""
    echo = functools.partial(click.echo, err=True)
    run_ = results.Run.open(path, lock=not dry_run)
    runner.check_resumable(run_)        # before repair rewrites anything
    elsewhere = runner.check_machine(run_, Topology.read(), other_machine)
    if dry_run:
        done = run_.finished()
        # listed as recorded (check_resumable has checked them)
        every = [suite.Case(c["id"], c["job"], c["bench"], c["params"])
                 for c in run_.meta["cases"]]
        left = [c for c in every if c.id not in done]
        echo(f"{run_.path}: {len(done)} of {len(every)} cases finished; a "
             f"resume would run these {len(left)}")
        _list_cases(every, left)
        return None
    for note in run_.repair():
        echo(f"{run_.path}: {note}")
    if elsewhere:
        run_.update_meta(resumed_elsewhere=[*run_.meta.get("resumed_elsewhere", []), elsewhere])
        echo(f"note: {run_.path} was started on another machine; its cases from here on are "
             f"measured on {elsewhere['machine id']} (recorded in run.json and each case's "
             "journal line)")
    runner.record_resume(run_)
    return run_


def _list_cases(every: list, shown: list) -> None:
    """A dry run's lines, one a case for scripts: its settings (as progress lines name
    them) with every parameter that varies within its job, defaults included."""
    apart = runner.varying_keys(every)
    for c in shown:
        click.echo(" ".join(filter(None, (c.id, c.bench, c.label(apart[c.id])))))


def _start(s, results_dir: str, dry_run: bool, max_cases: int, one_node: bool = True,
           fit: bool = False, guest_fits: bool = False):
    """The suite's cases checked and its run directory made (None for a dry run, whose
    cases are listed instead); with `fit`, those estimated past their timeout or the
    run's budget scaled down first; with `guest_fits`, so too in an emulated guest
    without being asked (run and tiering: a guest's limit kills what runs past it)."""
    echo = functools.partial(click.echo, err=True)
    topo = Topology.read()
    cases = suite.expand_for(s, topo, max_cases)
    notes = benchmarks.precheck(cases, topo)
    for note in notes:
        echo(f"note: {note}")
    skipped = {n.split(": skipped: ")[0] for n in notes if ": skipped: " in n}
    found = estimate.for_cases(cases, topo, skipped)
    budget, whose = _budget(s, topo)
    scaled = fit or (guest_fits and bool(_guest_limit(topo)))
    fitted = {}
    if scaled:
        cases, fitted = estimate.fit(cases, found.figures, skipped, budget)
        if fitted and not fit:
            larger = "cxlbench emulate --timeout" if whose.startswith("the guest's") \
                else "the suite's budget"
            echo(f"note: the guest scales cases down, as --fit does, to finish within "
                 f"their timeout and {whose}; a larger limit ({larger}) keeps their sizes:")
        for case_id, change in fitted.items():
            what = ", ".join(f"{k} {paramtext.value_text(k, a)} to {paramtext.value_text(k, b)}"
                             for k, (a, b) in change["changed"].items())
            times = change["estimate_s"]
            how = "not estimated: halved as its alike cases" if times is None else \
                "estimated {}, now {}".format(*estimate.apart(*times))
            echo(f"fit: {case_id}: {what} ({how})")
        if fitted:      # the new values checked as the old were (a table now smaller than
            for note in benchmarks.precheck(cases, topo):   # its batch's lookups, say)
                if note not in notes:
                    echo(f"note: {note}")
        found = estimate.of(cases, found.figures, skipped)
    if dry_run:
        _list_cases(cases, cases)
        if found.unestimated < len(cases):     # a benchmark that estimates is among them
            for line in found.lines():
                echo(line)
    # a dry run says what the run would do: refused alike, with the same exit
    _refuse_past_timeout(cases, found)
    _refuse_past_budget(found, budget, whose, scaled)
    if dry_run:
        return None
    results.check_writable(results_dir)
    run_ = runner.start(s, cases, topo, results_dir, found, fitted)
    if one_node and len(topo.memory_nodes) == 1:
        echo(one_node_note(topo))
    echo(f"run {run_.path}: {len(cases)} cases" +
         (f", estimated ~{estimate.duration(found.seconds)}"
          if found.unestimated < len(cases) else ""))
    return run_


def _guest_limit(topo) -> float | None:
    """An emulated guest's own limit (cxlbench emulate --timeout), None outside one."""
    return (topo.machine.get("emulated") or {}).get("timeout")


def _budget(s, topo, uptime=None) -> tuple[float | None, str]:
    """The seconds the whole run may take, and whose they are: the suite's `budget`, and
    in an emulated guest 90 % of what its limit leaves since it booted (the rest for the
    results' way out); the smaller of the two."""
    out = []
    if (b := suite.budget(s)) is not None:
        out.append((b, f"the suite's budget of {estimate.duration(b)}"))
    if limit := _guest_limit(topo):
        since = uptime() if uptime else _uptime()
        left = max(0.0, 0.9 * (limit - since))
        out.append((left, f"the guest's time left ({estimate.duration(left)} of its limit "
                          f"of {estimate.duration(limit)}, {estimate.duration(since)} spent "
                          "since it booted)"))
    return min(out, key=lambda x: x[0]) if out else (None, "")


def _uptime() -> float:
    """Seconds since this (guest's) kernel booted."""
    try:
        return float(pathlib.Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def _refuse_past_budget(found, budget: float | None, whose: str, scaled: bool) -> None:
    """A run estimated past its budget (the suite's, or a guest's time left) would be cut
    short, or the guest killed with it: refused at once, with the estimate and what to
    change."""
    if budget is None or found.seconds <= budget:
        return
    uncounted = f" (and {found.unestimated} cases not estimated)" if found.unestimated else ""
    how = ("even scaled down: run fewer cases, or raise the budget" if scaled else
           "run fewer or smaller cases, or raise the budget (--fit scales cases down to it)")
    took, limit = estimate.apart(found.seconds, budget)
    if limit != estimate.duration(budget):      # `whose` wrote it alike: as many digits
        whose = whose.replace(estimate.duration(budget), limit, 1)
    raise UserError(f"this run is estimated at {took}{uncounted}, past {whose} (memory "
                    f"figures {found.source}): {how}; in a guest the budget is cxlbench "
                    "emulate --timeout's")


def _refuse_past_timeout(cases, found) -> None:
    """A case whose estimate is past its timeout would be killed there, its time lost:
    refused before anything runs, each such case with its estimate and what shrinks it."""
    late = [(c, found.cases[c.id]) for c in cases
            if found.cases.get(c.id) and found.cases[c.id] > c.params.get("timeout", 600)]
    if not late:
        return
    lines = []
    for c, t in late[:5]:
        knob = next((k for k in estimate.FIT_ORDER[1:] if k in c.params), None)   # not repeat
        shrink = f"{knob} (now {paramtext.value_text(knob, c.params[knob])}) or " if knob else ""
        took, limit = estimate.apart(t, c.params.get("timeout", 600))
        lines.append(f"{c.id} ({c.bench}): estimated {took}, past its timeout of {limit}: "
                     f"lower {shrink}repeat (now {c.params.get('repeat')}), or raise timeout")
    more = f"; and {len(late) - 5} more" if len(late) > 5 else ""
    raise UserError(f"{len(late)} case(s) would not finish within their timeout "
                    f"(memory figures {found.source}): " + "; ".join(lines) + more)


def one_node_note(topo) -> str:
    """Said once at the start of a run on a machine with one memory node."""
    return (f"note: one memory node (node {topo.memory_nodes[0]}): nothing slower to "
            "measure here; the headline's slowdowns come from the tier model (this node's "
            f"figures, from cxlbench calibrate, under the assumed profile "
            f"{calibration.default_profile()}) or from emulated far memory "
            f"({headline.EMULATE})")


def _execute(run_, as_json: bool, exit_on_failure: bool = True,
             knee: float = analysis.KNEE_SLOWDOWN, preface: list[str] = ()) -> None:
    """Run what is left of run_, print the summary, `preface` and the analysis; exit 1 if
    a case failed (where exit_on_failure)."""
    echo = functools.partial(click.echo, err=True)
    # The workers look for this machine's calibrations where its runs go.
    os.environ[calibration.RESULTS_ENV] = os.path.abspath(run_.path.parent.parent)
    if run_.meta.get("emulated"):
        echo(f"EMULATED ({run_.meta['emulated']['topology']} guest): figures come from QEMU, "
             "not from hardware")
    before = signal.signal(signal.SIGTERM, _terminated)    # stopped as Ctrl-C stops it
    try:
        journal = runner.execute(run_, echo)
    except (KeyboardInterrupt, Terminated) as e:
        why = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
        echo(f"\n{why}; finished cases are saved. Resume with: "
             f"cxlbench run --resume {run_.path}")
        sys.exit(143 if isinstance(e, Terminated) else 130)
    except StorageError as e:
        echo(f"error: {e}\nthe run stops here with {len(run_.finished())} of "
             f"{len(run_.meta['cases'])} cases saved; make room, then resume with: "
             f"cxlbench run --resume {run_.path}")
        sys.exit(1)
    finally:
        signal.signal(signal.SIGTERM, before)
    records = runner.summary_records(run_, journal)
    # An instruction the CPU lacks is a finding, not a failure.
    failed = sum(1 for e in journal.values() if e["status"] not in ("ok", "unsupported"))
    found = _analyse(run_, records, knee)
    if as_json:
        click.echo(json.dumps(records, indent=1))
    else:
        _print_summary(records)
        if any(r.get("fitted") for r in records):
            click.echo("fitted: scaled down to fit its time (run.json's \"fitted\" says what)")
        busy = runner.busy_text(run_)
        if busy:
            click.echo(busy)
        for line in [*preface, *analysis_text.analysis_lines(found),
                     *headline.lines(found["headline"])]:
            click.echo(line)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResultsWarning)     # said as the cases ran
        run_.frame()        # read whole once (run.json final), leaving the columnar copy
    timing = runner.timing_text(run_.meta, journal)
    echo(f"results: {run_.path} ({len(journal)} cases, {failed} failed)" +
         (f"; {timing}" if timing else ""))
    if failed and exit_on_failure:
        sys.exit(1)


class Terminated(Exception):
    """SIGTERM (kill, a scheduler's end of time) during a run."""


def _terminated(signum, frame):
    raise Terminated()


# The parameters column is as wide as its longest entry up to this; longer ones push the
# rest of their line right rather than being cut.
PARAMS_WIDTH = 40


def _print_summary(records: list[dict]) -> None:
    """A block per job, as MLC, multichase and fio print: the job's benchmark and the
    settings its cases share, then a line per case and metric with the parameters that
    tell that job's cases apart, so the summary reads without the results file."""
    jobs: dict[str, list[dict]] = {}
    for r in records:
        jobs.setdefault(r["case"].rsplit("/", 1)[0], []).append(r)
    apart = {}                           # case -> the text of its varying parameters
    titles = {}
    for job, recs in jobs.items():
        params = {r["case"]: paramtext.resolved(r["parameters"], r["cpus"]) for r in recs}
        keys = paramtext.varying(list(params.values()))
        apart.update({case: paramtext.params_text(p, keys) for case, p in params.items()})
        isas = {r["isa"] for r in recs if r["isa"]}
        titles[job] = runner.job_title(
            job, [suite.Case(case, job, recs[0]["benchmark"], p) for case, p in params.items()],
            isas.pop() if len(isas) == 1 else None)
    ok = [r for r in records if r["status"] == "ok" and r["metric"] is not None]
    cw = max((len(r["case"]) for r in records), default=4)
    pw = min(max((len(text) for text in apart.values()), default=0), PARAMS_WIDTH)
    mw = max((len(r["metric"]) for r in ok), default=6)
    column = (lambda text: f"{text:<{pw}}  ") if pw else (lambda text: "")  # none varies
    click.echo(f"  {'case':<{cw}}  {column('parameters')}{'metric':<{mw}} {'median':>14} "
               f"{'95% CI':>22} {'cv':>6} {'n':>3}")
    for job, recs in jobs.items():
        click.echo(titles[job])
        last = None
        for r in recs:
            case, text = (r["case"], apart[r["case"]]) if r["case"] != last else ("", "")
            last = r["case"]
            lead = f"  {case:<{cw}}  {column(text)}"
            if r["status"] != "ok" or r["metric"] is None:
                label = "UNSUPPORTED" if r["status"] == "unsupported" else "FAILED"
                click.echo(f"{lead}{label}: {r['error']}")
                continue
            median = quantity(r["median"], r["unit"])
            if results.is_prediction(r["metric"], r["kernel"]):
                # the model's single figure: its repetitions are no sample of the machine
                click.echo(f"{lead}{r['metric']:<{mw}} {median:>14} {'predicted':>22}")
                continue
            ci = quantity_range(r["ci_low"], r["ci_high"], r["unit"], like=r["median"])
            flag = (" noisy" if r.get("noisy") else "") + (" fitted" if r.get("fitted") else "")
            click.echo(f"{lead}{r['metric']:<{mw}} {median:>14} {ci:>22} {r['cv']:>6.1%} "
                       f"{r['n']:>3}{flag}")


def _analyse(run_, records: list[dict], knee: float = analysis.KNEE_SLOWDOWN) -> dict:
    """Cache levels of each latency sweep (5 sizes or more) and the node matrices; kept
    in run.json under "analysis"."""
    found = {"cache_levels": analysis.sweep_cache_levels(
                 records, run_.meta["topology"]["cpu"]["caches"]),
             "matrices": analysis.matrices(records)}
    found["matrices"] = {m: {**v, "cells": [[i, t, x] for (i, t), x in v["cells"].items()]}
                         for m, v in found["matrices"].items()}
    found["pingpong"] = analysis.pingpong_matrices(records)
    found["tiering"] = analysis.tiering_scenarios(records, knee)
    # A calibration's own kernel cases are the model's inputs, not a check of it.
    found["model"] = analysis.model_checks(records) \
        if run_.meta["suite"]["name"] != calibration.SUITE else None
    found["headline"] = headline.build(
        records if run_.meta["suite"]["name"] not in headline.NOT_HEADLINED else [],
        run_.meta["topology"], knee)
    try:
        run_.update_meta(analysis={**found, "headline": found["headline"].to_dict()})
    except StorageError as e:               # every result is in already
        click.echo(f"warning: the analysis is not kept in run.json: {e}", err=True)
    return found


@main.command()
@click.option("--node", "nodes", type=click.IntRange(min=0), multiple=True,
              help="a node to measure (repeatable; default: the first CPU's node and every "
              "node of memory without CPUs, the tiers the model charges)")
@click.option("--results-dir", default="results", show_default=True,
              help="where results/<machine>/<run>/ go, and earlier calibrations are found")
@click.option("--suite", "suite_name", default=calibration.SUITE, show_default=True,
              help="the calibration suite (its jobs are what a calibration holds)")
@click.option("--var", "variables", multiple=True, metavar="KEY=VALUE",
              help="a variable of the suite (repeatable): largest, streamed, loaded (sizes "
              "for a small machine or a guest, e.g. largest=64M)")
@click.option("--again", is_flag=True, help="measure every job again, not only those missing")
@_errors
def calibrate(nodes, results_dir, suite_name, variables, again):
    """Measure what the tier model needs of each node, once: the jobs of the calibration
    suite no earlier calibration run of this machine has, kept as an ordinary run under
    results/ (one a node); then print each node's figures and where each came from."""
    topo = Topology.read()
    if not nodes:
        first = next((n.id for n in topo.nodes if n.cpus), None)
        nodes = [first, *(n.id for n in topo.nodes if n.far_memory and n.id != first)]
    for node in dict.fromkeys(nodes):
        if node not in topo.memory_nodes:
            raise UserError(f"--node {node}: no such node with memory (nodes with memory: "
                            f"{format_list(topo.memory_nodes)})")
    wanted = suite.parse_pairs(variables, "--var")
    if "node" in wanted:
        raise UserError("--var node=...: use --node")
    _refuse_inside_cache(wanted.get("largest"), topo)
    for node in dict.fromkeys(nodes):
        _calibrate_node(node, topo, results_dir, suite_name, wanted, again)


def _calibrate_node(node: int, topo, results_dir: str, suite_name: str, wanted: dict,
                    again: bool) -> None:
    echo = functools.partial(click.echo, err=True)
    s = suite.load(suite_name, {**wanted, "node": str(node)})
    s = suite.Suite(calibration.SUITE, s.source, s.text, s.data)   # found again as one
    runs = [] if again else [str(r) for r in calibration.find_runs(results_dir,
                                                                 results.machine_id())]
    have = calibration.jobs_of(runs, node, suite.expand_for(s, topo))
    missing = [j for j in suite.job_names(s) if j not in have]
    if missing:
        echo(f"calibrating node {node}: " + (f"{', '.join(missing)} missing from earlier runs"
                                             if have else "nothing measured yet"))
        s = suite.only_jobs(s, missing)
        run_ = _start(s, results_dir, False, suite.DEFAULT_MAX_CASES, one_node=False)
        _execute(run_, False, exit_on_failure=False)
    else:
        echo(f"node {node}: every calibration job is measured already ({', '.join(runs)}); "
             "--again measures it anew")
    try:
        found = calibration.measured(node, results_dir)
    except calibration.Unusable as e:       # the figures read, then why the model won't
        for line in analysis_text.calibration_lines(e.calibration) if e.calibration else ():
            click.echo(line)
        raise
    if found is None:
        raise UserError(f"node {node}: the calibration is incomplete (failed cases?): see "
                        "the run above, then cxlbench calibrate again")
    for line in analysis_text.calibration_lines(found):
        click.echo(line)


def _refuse_inside_cache(largest: str | None, topo) -> None:
    """A sweep whose largest working set fits in the last-level cache measures that cache,
    not memory, and the model would refuse it: said before anything runs."""
    cache = calibration.last_level(topo.cpu.get("caches"))
    if largest is None or cache is None:
        return
    try:
        size = parse_size(largest)
    except (UserError, ValueError):
        return                      # the suite names the bad value when it loads
    if size <= cache[1]:
        raise UserError(f"--var largest={largest}: the sweep would stay inside the "
                        f"{format_size(cache[1], exact=False)} {cache[0]} this machine's sysfs "
                        "reports, so it would measure that cache, not memory; give a size "
                        f"past it (e.g. largest={format_size(4 * cache[1], exact=False)})")


# The tiering options `cxlbench tiering` sweeps, each a comma-separated list on its flag
# (what it is called in messages, the flag's default); --engine is one value.
SWEPT = {"workload": ("--workload", "workload", "embedding"),
         "policy": ("--policies", "policy", "all"),
         "share": ("--shares", "share", "halving")}


def _swept_option(name: str):
    """A flag of `cxlbench tiering` made from the tiering benchmark's option `name`."""
    flag, _, default = SWEPT[name]
    opt = tiering_bench.OPTIONS[name]
    words = "; ".join(f"{word}: {', '.join(map(str, values))}"
                      for word, values in (opt.expand or {}).items())
    return click.option(flag, name, default=default, show_default=True,
                        help=f"comma-separated: {opt.help}" + (f" (or {words})" if words else ""))


def _engine_option():
    opt = tiering_bench.OPTIONS["engine"]
    return click.option("--engine", type=click.Choice(opt.choices), default=opt.default,
                        show_default=True, help=opt.help)


@main.command("tiering")
@_swept_option("workload")
@_swept_option("policy")
@_swept_option("share")
@_engine_option()
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="any other option of the tiering benchmark (repeatable), e.g. phase=shift")
@click.option("--results-dir", default="results", show_default=True,
              help="where results/<machine>/<run>/ go")
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON on stdout")
@click.option("--dry-run", is_flag=True, help="list the cases and stop")
@click.option("--knee", default=analysis.KNEE_SLOWDOWN, show_default=True,
              type=click.FloatRange(0.0, 10.0), help="the slowdown a knee allows (0.05: 5 %)")
@click.option("--fit", is_flag=True, help="scale down the cases whose estimate is past "
              "their timeout (repetitions, then epochs, then lookups, then the workload's "
              "size), every case alike, recorded in run.json, instead of refusing them")
@_errors
def tiering_command(workload, policy, share, engine, sets, results_dir, as_json, dry_run,
                    knee, fit):
    """How much fast memory a workload needs, and which policy to run: every policy at
    every share, the bounds once each, then the knee of each policy."""
    works, names, fractions = (_listed(text, key) for key, text in
                               (("workload", workload), ("policy", policy), ("share", share)))
    extra = suite.parse_pairs(sets, "--set")
    flags = {**{key: flag for key, (flag, _, _) in SWEPT.items()}, "engine": "--engine"}
    for key in flags.keys() & extra.keys():
        raise UserError(f"--set {key}=...: use {flags[key]}")
    # A policy's knobs go to its own job only: the others would refuse them as unused.
    knobs = {k: v for k, v in extra.items() if k in KNOBS}
    strays = sorted({KNOBS[k][0] for k in knobs} - set(names))
    if strays:
        raise UserError(f"--set {', '.join(knobs)}: a knob of {', '.join(strays)}, which "
                        "--policies does not run")
    common = {"bench": "tiering", "workload": works, "engine": engine,
              **{k: v for k, v in extra.items() if k not in knobs}}
    if "oracle" not in names:
        click.echo("note: without oracle there are no gaps to show", err=True)
    # The bounds run whatever --policies names: slowdowns and knees are against them.
    data = {"bounds": {**common, "policy": list(analysis.BOUNDS)}}
    for name in names:
        if name not in analysis.BOUNDS:
            data[name.replace("-", "_")] = {
                **common, "policy": name, "share": fractions,
                **{k: v for k, v in knobs.items() if KNOBS[k][0] == name}}
    s = suite.Suite(name="tiering", source="cxlbench tiering", text="", data=data)
    run_ = _start(s, results_dir, dry_run, suite.DEFAULT_MAX_CASES, fit=fit, guest_fits=True)
    if run_ is not None:
        _execute(run_, as_json, knee=knee, preface=_model_standing(run_, results_dir))


def _model_standing(run_, results_dir: str) -> list[str]:
    """Before a tiering run: where the model's tiers come from, and how far its
    predictions were from measurement here (the newest run of this machine that checked
    them: cxlbench run model-check)."""
    topo = Topology.read(probe_gpus=False)
    first = suite.Case.from_dict(run_.meta["cases"][0]).params
    fast, slow = tiering_bench.nodes(first, topo)
    profile = "" if first["slow_tier"] == "auto" else first["slow_tier"]
    found = calibration.tiers(fast, slow, topo, path=first["calibration"], profile=profile,
                              results_dir=results_dir)
    if found is None:
        return [f"model tiers: ASSUMED (no calibration of node {fast} the model can use "
                f"here: cxlbench calibrate measures it in about five minutes)"]
    out = [f"model tiers: {name} " + (f"node {c.node}" if c.node is not None else "tier")
           + f": {c.kind} ({c.source})" for name, c in zip(("fast", "slow"), found)]
    for past in sorted((pathlib.Path(results_dir) / results.machine_id()).glob(
            "*/run.json"), reverse=True):
        try:
            checked = (results.Run.open(past.parent).meta.get("analysis") or {}).get("model")
        except CxlbenchError:       # a damaged run is no check
            continue
        if checked:
            out.append(f"model error on the measured tier: median {checked['median_error']:.0%}"
                       f", worst {checked['worst_error']:.0%} over {len(checked['rows'])} "
                       f"cases ({past.parent})")
            break
    else:
        out.append("model error: not checked on this machine yet (cxlbench run model-check)")
    return out


def _listed(text: str, name: str) -> list:
    """A swept flag's comma-separated values, its option's words (all, halving) expanded,
    each name checked against the option's choices; shares are numbers, which the suite
    then holds to the option's bounds."""
    flag, what, _ = SWEPT[name]
    opt = tiering_bench.OPTIONS[name]
    values = []
    for word in (w.strip() for w in text.split(",") if w.strip()):
        if opt.expand and word in opt.expand:
            values += opt.expand[word]
        elif opt.kind == "choice" and word not in opt.choices:
            raise UserError(f"{flag}: no {what} {word!r} (choose from "
                            f"{', '.join(opt.choices)}, or {' or '.join(opt.expand)})")
        elif opt.kind == "choice":
            values.append(word)
        else:
            try:
                values.append(float(word))
            except ValueError:
                raise UserError(f"{flag} {text!r}: give numbers between 0 and 1, e.g. "
                                "1,0.5,0.25") from None
    if not values:
        raise UserError(f"{flag}: name at least one {what}")
    return list(dict.fromkeys(values))


def _roots(fn):
    """--sys-root and --proc-root: where sysfs and procfs are read (fixture trees)."""
    fn = click.option("--proc-root", default="/proc", show_default=True,
                      help="procfs root (fixtures)")(fn)
    return click.option("--sys-root", default="/sys", show_default=True,
                        help="sysfs root (fixtures)")(fn)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@_roots
@_errors
def topology(as_json, sys_root, proc_root):
    """What memory this machine has: nodes, tiers, HMAT, CXL, DAX, CPU, GPUs."""
    topo = Topology.read(sys_root, proc_root)
    click.echo(topo.to_json() if as_json else topo.render())


@main.command()
@click.option("--model", "preset",
              help="a preset: llama-3-8b, llama-3-70b, dlrm-dcnv2, meta-2022-like")
@click.option("--config", "toml_path", type=click.Path(exists=True, dir_okay=False),
              help="a TOML file of the job's fields (flags given win)")
@click.option("--train/--serve", "train", default=None, help="training (default) or serving")
@click.option("--zero", type=int, help="ZeRO stage 0-3")
@click.option("--dp", type=int, help="data-parallel degree")
@click.option("--tp", type=int, help="tensor-parallel degree")
@click.option("--pp", type=int, help="pipeline-parallel degree")
@click.option("--schedule", help="the pipeline's schedule: 1f1b (default), gpipe, interleaved")
@click.option("--chunks", type=int, help="model chunks a device runs (interleaved; default 2)")
@click.option("--layers-per-stage", "layers_per_stage", metavar="N,N,...",
              callback=lambda _c, _p, v: None if v is None else v.split(","),
              help="layers each pipeline stage holds (default: equal)")
@click.option("--micro-batch", "micro_batch", type=int)
@click.option("--global-batch", "global_batch", type=int)
@click.option("--seq", type=int, help="sequence length (training)")
@click.option("--context", type=int, help="tokens of each sequence's KV-cache (serving)")
@click.option("--offload", help="none, optimizer, optimizer+params; serving: kv")
@click.option("--recompute/--no-recompute", default=None, help="full activation recomputation")
@click.option("--ranks-per-host", "ranks_per_host", type=int,
              help="GPUs sharing one host's memory (default: up to 8)")
@click.option("--gpu-mem", metavar="SIZE", help="one GPU's memory (default: nvidia-smi's)")
@click.option("--dram", metavar="SIZE", help="host DRAM the job may use (default: the CPU "
              "nodes' MemTotal less 10 %)")
@click.option("--slow-mem", "slow_mem", metavar="SIZE",
              help="the slow tier's size (default: the CPU-less nodes'; where there are "
              "none, as large as the job needs)")
@click.option("--slow-tier", "profile", default="", metavar="PROFILE",
              help="the slow tier's figures from this profile (cxlbench/tiering/profiles.toml)")
@click.option("--calibration", "calibration_path", default="", metavar="RUN",
              help="the calibration run to use (default: this machine's newest)")
@click.option("--results-dir", default="results", show_default=True,
              help="where this machine's calibrations are found")
@click.option("--check", is_flag=True, help="then run the host work by the real kernels, "
              "each at up to 512 MiB, and print predicted against measured")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@_errors
def plan(preset, toml_path, gpu_mem, dram, slow_mem, profile, calibration_path, results_dir,
         check, as_json, **flags):
    """A training or serving job's memory per device and per tier: each part with its
    formula, where it should live (GPU, DRAM, the slow tier) and the predicted time of the
    host's memory-bound work, from this machine's calibration."""
    from .plan import job as plan_job, place, text as plan_text, tiers
    the_job = plan_job.make(preset, toml_path, **flags)
    mach = tiers.machine(Topology.read(), gpu_mem=gpu_mem, dram=dram, slow_mem=slow_mem,
                         profile=profile, calibration_path=calibration_path,
                         results_dir=results_dir)
    if check and as_json:
        raise UserError("plan: --check prints a run's summary and table; without --json "
                        "(or write the plan's JSON first, then check)")
    planned = place.plan(the_job, mach)
    click.echo(json.dumps(plan_text.as_dict(planned), indent=1, allow_nan=False) if as_json
               else plan_text.render(planned))
    if check:
        _plan_check(planned, results_dir)


def _plan_check(planned, results_dir: str) -> None:
    """The plan's host work as an ordinary run under results_dir, then each case's
    prediction against its measurement."""
    from .plan import check as plan_check
    if not planned.timed:
        raise UserError("plan --check: the plan has no host work to run (nothing offloaded "
                        "to the host: --offload optimizer, or kv when serving)")
    if not planned.machine.timed:
        raise UserError(f"plan --check: node {planned.machine.host[0].nodes[0]} has no "
                        "calibration here, so nothing to check a measurement against "
                        "(`cxlbench calibrate` measures it, about five minutes)")
    text = plan_check.suite_text(planned)
    if text is None:
        raise UserError("plan --check: no kernel here runs this plan's host work "
                        f"({', '.join(t.work.name for t in planned.timed)})")
    with tempfile.TemporaryDirectory() as folder:     # the run keeps the suite's text
        path = pathlib.Path(folder) / "plan-check.toml"
        path.write_text(text)
        loaded = suite.load(str(path))
    run_ = _start(loaded, results_dir, False, suite.DEFAULT_MAX_CASES, one_node=False)
    _execute(run_, False, exit_on_failure=False)
    journal = run_.finished()
    records = runner.summary_records(run_, journal)
    for line in plan_check.table(analysis.model_checks(records)):
        click.echo(line)
    failed = [c for c, e in journal.items() if e["status"] != "ok"]
    if failed or len(journal) < len(run_.meta["cases"]):
        raise UserError(f"plan --check: {len(failed) or 'some'} case(s) did not finish ok "
                        f"({', '.join(failed)}); see {run_.path}")


@main.command(context_settings={"ignore_unknown_options": True})
@click.option("--topology", "topology_name", required=True,
              type=click.Choice(["hmat", "cxl", "cxl-2way", "shared-cxl"]),
              help="the emulated machine (see README: Emulation)")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="a topology parameter, e.g. far=1G (repeatable)")
@click.option("--timeout", default=900.0, show_default=True, help="seconds before the guest is killed")
@click.option("--accel", type=click.Choice(["tcg", "kvm"]), default="tcg", show_default=True,
              help="kvm only where it works; it does not on the development VMs")
@click.option("--kernel", "kernel_package", help="the guest's Debian kernel: a package name or "
              "a series such as 6.12 (default: what linux-image-amd64 depends on)")
@click.option("--kernel-tiering", is_flag=True, help="turn Linux's own tiering on in the "
              "guest (numa_balancing=2, demotion), for the tiering benchmark's linux policy")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@_errors
def emulate(topology_name, params, timeout, accel, kernel_package, kernel_tiering, command):
    """Run `cxlbench COMMAND` in a QEMU guest with emulated far memory (shared-cxl: in two
    guests at once, host 0 and host 1 of one shared CXL device).

    Example: cxlbench emulate --topology cxl -- run suites/ci.toml"""
    from . import emulate as emu

    rc = emu.run(topology_name, suite.parse_pairs(params, "--param"), list(command),
                 timeout=timeout, accel=accel,
                 kernel_package=kernel_package, kernel_tiering=kernel_tiering,
                 log=functools.partial(click.echo, err=True))
    sys.exit(rc)


FORCE_HELP = ("write into a non-empty folder that is not a cxlbench report, overwriting "
              "report.html, report.md and figures of the same names; never deletes anything "
              "cxlbench did not write")


@main.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(),
              help="folder for report.html, report.md and figures/ (e.g. reports/NAME)")
@click.option("--title", help="the report's title")
@click.option("--suite", "suite_name", help="only runs of this suite")
@click.option("--latest", is_flag=True, help="only the newest run of each machine")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@click.option("--plan", "plan_path", type=click.Path(), metavar="PLAN.json",
              help="add a plan's section (cxlbench plan ... --json > PLAN.json)")
@click.option("--json", "as_json", is_flag=True,
              help="print the summary as JSON (each machine's headline, every case's median)")
@_errors
def report(runs, output, title, suite_name, latest, force, plan_path, as_json):
    """Report on RUNS (run folders, or folders holding runs such as results/): the headline
    first, the machine, a figure per benchmark family with captions, and every case's
    median and CI."""
    from . import report as rep

    click.echo("building the report ...", err=True)
    lines: list[str] = []
    html_path, md_path = rep.build(
        runs, output, title=title, suite=suite_name, latest=latest, force=force,
        on_skip=lambda path, why: click.echo(f"skipped {path}: {why}", err=True),
        plan=plan_path, lines=lines)
    if as_json:
        click.echo(json.dumps({"report": str(html_path), "markdown": str(md_path),
                               **rep.json_summary(runs, suite_name, latest)}, indent=1,
                              default=str))
        return
    if lines:                               # the answer first, on the terminal too
        click.echo("\n".join(lines))
    click.echo(f"report: {html_path}\nmarkdown: {md_path}")


@main.command()
@click.argument("a", type=click.Path())
@click.argument("b", type=click.Path())
@click.option("-o", "--output", type=click.Path(),
              help="also write the comparison report to this folder (e.g. reports/NAME)")
@click.option("--alpha", default=0.05, show_default=True, type=click.FloatRange(0.0001, 0.5),
              help="significance level")
@click.option("--all", "show_all", is_flag=True, help="print every compared metric, not the 20 largest")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@click.option("--json", "as_json", is_flag=True, help="print the comparison as JSON")
@_errors
def compare(a, b, output, alpha, show_all, force, as_json):
    """Compare run B with run A: per case and metric the ratio B/A with its confidence
    interval, or "not significant" where the difference is noise."""
    from . import report as rep

    runs, table, unpaired, written = rep.compare(a, b, output, alpha=alpha, force=force)
    across = rep.across_machines(*runs)
    if as_json:
        diffs, missing = rep.setting_differences(*runs)
        columns = ["case_a", "case_b", "metric", "unit", "median_a", "median_b", "ratio",
                   "ci_low", "ci_high", "significant", "verdict"]
        click.echo(json.dumps({
            "a": str(runs[0].path), "b": str(runs[1].path), "across_machines": across,
            "alpha": alpha,
            "settings": [{"name": n, "a": va, "b": vb} for n, va, vb in diffs],
            "not_recorded": missing,
            # A ratio to a median of 0 is NaN: null in JSON, which has no NaN.
            "metrics": [{k: None if isinstance(v, float) and not math.isfinite(v) else v
                         for k, v in row.items()}
                        for row in table[[c for c in columns if c in table.columns]]
                        .to_dict("records")],
            "unpaired": unpaired,
            **({"report": str(written[0]), "markdown": str(written[1])} if written else {})},
            indent=1, default=str, allow_nan=False))
        return
    if across:
        click.echo(f"ACROSS MACHINES: {across}")
    click.echo(f"A = {runs[0].path}\nB = {runs[1].path}")
    _print_setting_differences(*rep.setting_differences(*runs))
    shown = table if show_all else table.head(20)
    for line in _compare_lines(table, shown):
        click.echo(line)
    if len(table) > len(shown):
        click.echo(f"  ... {len(table) - len(shown)} more (--all)")
    sig = int(table["significant"].sum()) if len(table) else 0
    click.echo(f"{len(table)} metrics compared, {sig} changed significantly (p < {alpha})")
    for u in unpaired:
        click.echo(f"  left out: {u['side']} {u['case']}: {u['why']}")
    if written:
        click.echo(f"report: {written[0]}\nmarkdown: {written[1]}")


def _compare_lines(table, shown) -> list[str]:
    """compare's rows under a header: each named by its benchmark and the parameters that
    vary between the compared cases (as the report names them), its case id last."""
    if shown.empty:
        return []                       # nothing paired: the count line says so
    ps = [{k: v for k, v in p.items() if k not in paramtext.NOT_MEASURED}
          for p in table["params"]]
    keys: dict[str, list[str]] = {}         # by benchmark: what varies between its cases
    for bench in set(table["benchmark"]):
        own = [p for b, p in zip(table["benchmark"], ps) if b == bench]
        keys[bench] = [k for k in sorted({k for p in own for k in p})
                       if len({repr(p[k]) for p in own if k in p}) > 1]
    names = [f"{b} {paramtext.params_text(p, [k for k in keys[b] if k in p])}".strip()
             for b, p in zip(shown["benchmark"], ps)]
    width = min(max([len("measured"), *map(len, names)]), 48)
    metric = max([len("metric"), *map(len, shown["metric"])])
    out = [f"  {'measured':<{width}} {'metric':<{metric}} {'A':>10}    {'B':<10} "
           f"{'unit':<8} {'B/A [95 % CI], or verdict':<34} case"]
    for name, (_, r) in zip(names, shown.iterrows()):
        change = (f"B/A {r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
                  if r["significant"] else r["verdict"])
        case = r["case_a"] if r["case_a"] == r["case_b"] else f"{r['case_a']} / {r['case_b']}"
        out.append(f"  {name:<{width}} {r['metric']:<{metric}} {r['median_a']:>10.4g} -> "
                   f"{r['median_b']:<10.4g} {r['unit']:<8} {change:<34} {case}")
    return out


def _print_setting_differences(diffs: list[tuple[str, str, str]], missing: dict) -> None:
    if not diffs:
        click.echo("settings: every setting both runs recorded is the same")
    else:
        click.echo("settings that differ (A -> B):")
        short = [(n, va, vb) for n, va, vb in diffs if len(va) + len(vb) <= 60]
        width = max((len(name) for name, _, _ in short), default=0)
        for name, va, vb in diffs:
            if (name, va, vb) in short:
                click.echo(f"  {name:<{width}}  {va} -> {vb}")
            else:                               # command lines, compiler flags
                click.echo(f"  {name}\n    A: {va}\n    B: {vb}")
    for side, names in missing.items():
        if names:
            click.echo(f"  not recorded by {side} (an older cxlbench): {', '.join(names)}")


@main.command("list")
@click.argument("pattern", required=False, metavar="[NAME|PATTERN]")
@click.option("--json", "as_json", is_flag=True, help="the selection as JSON")
@_errors
def list_(pattern, as_json):
    """Kernels, benchmarks and suites; NAME (a benchmark, kernel or suite) in full, with
    its options; a PATTERN (chase*, kv) every name it matches."""
    found = listing.select(pattern)
    if as_json:
        click.echo(json.dumps(found, indent=1))
        return
    width = min(shutil.get_terminal_size().columns, 120)
    for line in listing.render(found, width):
        click.echo(line)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="one object per check")
@_roots
@_errors
def doctor(as_json, sys_root, proc_root):
    """Before measuring: the settings that change memory figures (nodes, THP, hugepages,
    NUMA balancing and demotion, governor, turbo, SMT, the hardware prefetchers, SMT
    siblings' load, load and steal, movable-only CXL nodes, emulate's tools), each with
    what it affects and the command that would change it. cxlbench never changes them
    itself."""
    from . import doctor as doc

    found = doc.checks(sys_root, proc_root)
    if as_json:
        click.echo(json.dumps([c.to_dict() for c in found], indent=1))
        return
    for line in doc.render(found, min(shutil.get_terminal_size().columns, 120)):
        click.echo(line)


@main.group()
def fleet():
    """A suite on many machines of a SLURM cluster: one run per machine under a shared
    results folder (see README: Fleets)."""


RESULTS_HELP = "the shared results folder (on a file system every machine mounts)"


@fleet.command("submit")
@click.argument("suite_name")
@click.option("--partition", "-p", help="the SLURM partition")
@click.option("--nodelist", "-w", help="these machines (a SLURM node list: a,b or n[1-4])")
@click.option("--nodes", "-N", type=int, help="any N machines")
@click.option("--constraint", "-C", help="only machines with this SLURM feature")
@click.option("--max-running", type=int,
              help="at most K machines measuring at once (the array's %K)")
@click.option("--gang", is_flag=True,
              help="one job holding every machine at once, not an array of one task a "
                   "machine (for suites that need the machines together)")
@click.option("--results", "--results-dir", "results_dir", default="results",
              show_default=True, help=RESULTS_HELP)
@click.option("--local-results", is_flag=True,
              help="allow a node-local results folder (/tmp ...): this machine is the "
                   "whole cluster")
@click.option("--time", "-t", "time_limit",
              help="SLURM time limit for each machine's run, e.g. 2:00:00 (default: "
                   "estimated from the suite, shown by --dry-run)")
@click.option("--env", "env", multiple=True, metavar="KEY=VALUE",
              help="a variable for the runs (repeatable); the job gets only these, PATH, "
                   "LANG and HOME beside SLURM's own")
@click.option("--var", "variables", multiple=True, metavar="KEY=VALUE",
              help="a suite variable from its [vars] (repeatable)")
@click.option("--sbatch-arg", "sbatch_args", multiple=True, metavar="ARG",
              help="any other sbatch option, e.g. --sbatch-arg=--qos=lab (repeatable)")
@click.option("--hosts", type=int, help="2: two machines sharing one CXL region (with "
              "--shared-dax), run together in one job as host 0 and host 1")
@click.option("--shared-dax", metavar="PATH", help="the region both machines map (a DAX "
              "device, the same path on both), for suites/shared.toml")
@click.option("--dry-run", is_flag=True, help="print the sbatch script and stop")
@_errors
def fleet_submit(suite_name, partition, nodelist, nodes, constraint, max_running, gang,
                 results_dir, local_results, time_limit, env, variables, sbatch_args,
                 hosts, shared_dax, dry_run):
    """Run SUITE_NAME once on each machine, each allocated whole, through sbatch: an array
    of one task a machine (or one --gang job); print the job id. The script is kept in
    RESULTS/fleet/<stamp>/."""
    from .fleet import script, submit

    options = script.Options(nodes=nodes, nodelist=nodelist, partition=partition,
                             constraint=constraint, time=time_limit,
                             sbatch_args=list(sbatch_args), gang=gang,
                             max_running=max_running, env=suite.parse_pairs(env, "--env"),
                             hosts=hosts, shared_dax=shared_dax)
    fleet_, text = submit.prepare(suite_name, suite.parse_pairs(variables, "--var"), options,
                                  results_dir, dry_run=dry_run, local_results=local_results)
    for line in text.splitlines():
        if line.startswith(f"# {submit.WARNING}"):
            click.echo(line[2:], err=True)
    if fleet_ is None:
        click.echo(text, nl=False)
        return
    job = submit.submit(fleet_, text)
    click.echo(f"fleet {fleet_.path}: job {job}", err=True)
    click.echo(job)


@fleet.command("task", hidden=True)
@click.argument("fleet_dir")
@_errors
def fleet_task(fleet_dir):
    """Inside a fleet's array job: become this task's run (fleet/task.py)."""
    from .fleet import task

    argv = task.main(fleet_dir)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)


def _fleet(job, results_dir):
    from .fleet import record
    return record.find(job, results_dir)


@fleet.command("status")
@click.argument("job")
@click.option("--results", "--results-dir", "results_dir", default="results",
              show_default=True, help=RESULTS_HELP)
@click.option("--json", "as_json", is_flag=True, help="print one object per machine as JSON")
@_errors
def fleet_status(job, results_dir, as_json):
    """Each machine of JOB's fleet (a job id, or the fleet's folder): pending, running (the
    case it is on), done, or failed (why, and the end of its log)."""
    from .fleet import status

    fleet_ = _fleet(job, results_dir)
    found = status.machines(fleet_)
    if as_json:
        click.echo(json.dumps([m.to_dict() for m in found], indent=1))
        return
    click.echo(f"fleet {fleet_.path}: suite {fleet_.data['suite']}, job(s) "
               f"{', '.join(fleet_.job_ids())}")
    _print_machines(found)


def _print_machines(found) -> None:
    width = max((len(m.node) for m in found), default=4)
    for m in found:
        counts = f"{m.finished}/{m.cases} cases" if m.cases is not None else ""
        failed = f", {m.failed_cases} failed" if m.failed_cases else ""
        if m.state == "running":
            what = f"on {m.case} ({counts} done)" if m.case else "starting"
        elif m.state == "done":
            what = counts + failed
        else:
            what = m.reason or ""
        job = m.job if m.task is None else f"{m.job}_{m.task}"
        click.echo(f"  {m.node:<{width}}  {m.state:<8} job {job:<8} {what}"
                   + (f"  {m.run}" if m.run and m.state != "failed" else ""))
        if m.state == "failed":
            if m.run:
                click.echo(f"  {'':<{width}}  run: {m.run}")
            if m.log:
                click.echo(f"  {'':<{width}}  log: {m.log}")
            for line in m.log_tail:
                click.echo(f"  {'':<{width}}    | {line}")


@fleet.command("resume")
@click.argument("job")
@click.option("--results", "--results-dir", "results_dir", default="results",
              show_default=True, help=RESULTS_HELP)
@click.option("--time", "-t", "time_limit", help="a new SLURM time limit for the resume")
@click.option("--same-machines", is_flag=True,
              help="an array's tasks on the machines they ran on, each finishing its run "
                   "(one job holding them together); by default each goes to any machine "
                   "the fleet has not measured")
@click.option("--dry-run", is_flag=True, help="print the sbatch script and stop")
@click.option("--force", is_flag=True,
              help="resume machines SLURM does not answer for too (their job has ended)")
@_errors
def fleet_resume(job, results_dir, time_limit, same_machines, dry_run, force):
    """Submit JOB's fleet again for the machines (an array's tasks) that failed: each
    finishes its run with `cxlbench run --resume` where it lands on the machine of its
    run, or runs the suite afresh; print the new job id."""
    from .fleet import submit

    fleet_ = _fleet(job, results_dir)
    with fleet_.locked():       # two resumes at once would run the same machines twice
        chosen = submit.resumable(fleet_, force)
        if not chosen:
            click.echo("nothing to resume: every machine's run finished or is under way",
                       err=True)
            return
        if dry_run:
            click.echo(submit.resume_script(fleet_, chosen, time_limit, same_machines),
                       nl=False)
            return
        new_job = submit.resume(fleet_, chosen, time_limit, same_machines)
    what = ", ".join(f"task {m.task}" + (f" ({m.node})" if m.allocated else "")
                     if m.task is not None else m.node for m in chosen)
    click.echo(f"fleet {fleet_.path}: job {new_job} resumes {what}", err=True)
    click.echo(new_job)


@fleet.command("collect")
@click.argument("job")
@click.option("-o", "--output", required=True, type=click.Path(),
              help="folder for the report (e.g. reports/NAME)")
@click.option("--against", help="the reference machine (default: the first by name)")
@click.option("--results", "--results-dir", "results_dir", default="results",
              show_default=True, help=RESULTS_HELP)
@click.option("--interval", default=10.0, show_default=True, type=click.FloatRange(0.1),
              help="seconds between looks at the jobs while waiting")
@click.option("--alpha", default=0.05, show_default=True, type=click.FloatRange(0.0001, 0.5),
              help="significance level of the comparisons")
@click.option("--title", help="the report's title")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@_errors
def fleet_collect(job, output, against, results_dir, interval, alpha, title, force):
    """Wait until JOB's fleet has ended, then report on every machine's run, each machine
    compared with the reference (--against)."""
    from .fleet import collect

    fleet_ = _fleet(job, results_dir)
    tty = sys.stderr.isatty()
    said = []

    def progress(line: str) -> None:
        # One line rewritten on a terminal; in a log, a line each time it changes.
        if tty or said[-1:] != [line]:
            click.echo(f"\rjob(s) {', '.join(fleet_.job_ids())}: {line}   ", err=True,
                       nl=not tty)
        said.append(line)
    found = collect.wait(fleet_, progress, interval)
    if tty:
        click.echo(err=True)
    _print_machines(found)
    click.echo("building the report ...", err=True)
    html_path, md_path = collect.build(fleet_, found, output, against=against, alpha=alpha,
                                       force=force, title=title)
    click.echo(f"report: {html_path}\nmarkdown: {md_path}")
