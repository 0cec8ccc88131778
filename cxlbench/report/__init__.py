"""`cxlbench report`: one or more runs -> reports/NAME/{report.html, report.md, figures/}.
Reports read results only; they never run kernels."""
from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from .. import __version__, benchmarks
from ..headline import lines as hl_lines
from ..errors import ResultsError, UserError
from ..paramtext import NOT_MEASURED
from . import fleet, headline, index, model
from . import plan as plan_section
from . import figures as _figures
from .compare_runs import ALPHA, across_machines, pair, setting_differences
from .document import (Folded, Heading, Page, Para, Table, figures_in, to_html,
                       to_markdown)
from .machine import failed_blocks, machines_blocks, run_table
from .runs import LoadedRun, load_runs, machine_key, not_ok, summary
from .text import printable

FIGURE_DIR = "figures"
PAGE_DIR = "pages"      # a fleet's pages beside its index (index.py)
SUBDIRS = (FIGURE_DIR, PAGE_DIR)
# What cxlbench wrote in a report folder, with each file's SHA-256: the only files it ever
# overwrites or removes there.
MANIFEST = ".cxlbench-report.json"
TMP_PREFIX = ".cxlbench-report.tmp-"    # where a report is made before it moves into place


def results_table(frame) -> Table:
    """Every case's metrics; a prediction's (runs.is_prediction) without CI, n or CV: its
    repetitions are the model's, no sample of the machine."""
    keys = _figures.varying(frame)
    said: dict[int, str] = {}           # a fleet's runs share their cases' parameter dicts
    rows = []
    for label, case, p, metric, median, lo, hi, unit, n, cv, noisy, predicted in zip(
            *(frame[k] for k in ("label", "case", "params", "metric", "median", "ci_low",
                                 "ci_high", "unit", "n", "cv", "noisy", "predicted"))):
        if id(p) not in said:
            said[id(p)] = _figures.params_text(p, keys)
        spread = ["", unit, "", "", "predicted"] if predicted else \
            [f"[{lo:.4g}, {hi:.4g}]", unit, n, f"{cv:.1%}", "noisy" if noisy else ""]
        rows.append([label, case, said[id(p)], metric, median, *spread])
    return Table(["run", "case", "parameters", "metric", "median", "95 % CI", "unit", "n",
                  "CV", ""], rows)


def across_table(frame) -> Table:
    """Several runs side by side: a row per measurement (parameters and metric), a column
    of medians per run; blank where a run did not measure it."""
    labels = list(dict.fromkeys(frame["label"]))
    keys = _figures.varying(frame)
    rows: dict[tuple, dict] = {}
    for _, r in frame.iterrows():
        what = _figures.params_text(r["params"], keys)
        rows.setdefault((what, _metric_text(r), r["unit"]), {})[r["label"]] = r["median"]
    return Table(["parameters", "metric", "unit", *labels],
                 [[*key, *(cells.get(label) for label in labels)]
                  for key, cells in rows.items()])


def _metric_text(r) -> str:
    """A summary row's metric, marked where its values are predictions."""
    return f"{r['metric']} (predicted)" if r["predicted"] and r["metric"] != "predicted" \
        else r["metric"]


def _point_text(params: dict, keys: list[str]) -> str:
    """A point's own values of the varied parameters (not those its case lacks)."""
    return _figures.params_text(params, [k for k in keys if params.get(k) is not None])


def fleet_table(frame) -> Table:
    """Many runs at each measured point: the fleet's median and range, and the runs slower
    than the fleet by more than their noise."""
    keys = _figures.varying(frame)
    frame = frame.assign(_point=fleet.point_key(frame))
    slow = fleet.off(frame, ["_point"])
    slow = slow[slow["slower"] > 0]
    rows = []
    for point, g in frame.groupby("_point", sort=False):
        r = g.iloc[0]
        names = [f"{s['label']} ({s['slower']:+.0%})"
                 for _, s in slow[slow["_point"] == point].iterrows()]
        rows.append([_point_text(r["params"], keys), _metric_text(r), r["unit"],
                     g["median"].median(), g["median"].min(), g["median"].max(),
                     g["label"].nunique(), ", ".join(names)])
    return Table(["parameters", "metric", "unit", "fleet median", "min", "max", "runs",
                  "slower than the fleet"], rows)


def slow_machines(frame) -> Table | None:
    """Each run slower than the fleet at some point by more than its noise: how many
    points, and its worst. None where none is (or the runs are too few for a fleet)."""
    if not fleet.many(frame):
        return None
    slow = fleet.off(frame.assign(_point=fleet.point_key(frame)), ["_point"])
    slow = slow[slow["slower"] > 0]
    if slow.empty:
        return None
    keys = {b: _figures.varying(frame[frame["benchmark"] == b]) for b in set(slow["benchmark"])}
    rows = []
    for label, g in slow.groupby("label", sort=False):     # slowest first (off's order)
        w = g.iloc[0]
        rows.append([label, len(g), f"{w['benchmark']} "
                     f"{_point_text(w['params'], keys[w['benchmark']])} {w['metric']}".strip(),
                     f"{w['slower']:+.0%}", f"{w['median']:.4g} against {w['fleet']:.4g} "
                     f"{w['unit']}"])
    return Table(["run", "points slower", "worst point", "by", "its median"], rows)


def family_blocks(frame, runs: list[LoadedRun], paged: bool = False) -> list:
    """A section per benchmark family: its figures, the fleet's or the runs' medians per
    point, and every case folded; paged (a fleet's page of a kind): a fleet's cases are
    on each machine's own page instead, which keeps the kind's page small."""
    blocks: list = []
    for family in dict.fromkeys(frame["benchmark"]):
        sub = frame[frame["benchmark"] == family].reset_index(drop=True)
        bench = benchmarks.family(family)
        blocks.append(Heading(2, bench.title if bench else family))
        blocks.extend(_figures.figures_for(family, sub, runs))
        if fleet.many(sub):
            blocks.append(Para("The fleet at each point (the median, range and slow runs "
                               "of its runs' medians):"))
            blocks.append(fleet_table(sub))
        elif sub["label"].nunique() > 1:
            blocks.append(Para("Medians per run:"))
            blocks.append(across_table(sub))
        if paged and fleet.many(sub):
            blocks.append(Para("Each machine's every case is on its own page, with its "
                               "kind's median, quartiles and range beside it."))
        else:
            blocks.append(Folded(f"{family}: every case ({len(sub)} rows)",
                                 [results_table(sub)]))
    return blocks


def _predicts(frame) -> bool:
    return bool(frame["predicted"].any()) or any(i.get("model") for i in frame["info"])


def _made(runs: list[LoadedRun], frame) -> Para:
    return Para(f"Made by cxlbench {__version__} on "
                f"{_dt.datetime.now().strftime('%Y-%m-%d %H:%M')} from {len(runs)} run(s). "
                "Values are medians of each case's repetitions with distribution-free 95 % "
                "confidence intervals; CV above 5 % is flagged noisy."
                + (" The tier model's predictions are single figures: shown without CI or n, "
                   "marked predicted." if _predicts(frame) else ""))


def _runs_blocks(runs: list[LoadedRun]) -> list:
    return [run_table(runs) if len(runs) <= fleet.FLEET else
            Folded(f"The {len(runs)} runs", [run_table(runs)])]


def _left_out(skipped) -> list:
    if not skipped:
        return []
    return [Heading(2, "Runs left out"),
            Para("These runs were found but could not be read; nothing below comes from "
                 "them.", "note"),
            Table(["run", "why"], [[str(p), why] for p, why in skipped])]


def _body(runs: list[LoadedRun], frame, slow: list, alike: bool = False) -> list:
    """What a report and a kind's page share, from the slow runs to the end: the model's
    section, the machines (alike: a kind's page: its machines shown once, their cases on
    their own pages), a section per benchmark family, the cases without results."""
    return [*slow, *model.section(frame, runs), Heading(2, "Machine"),
            *machines_blocks(runs, alike), *family_blocks(frame, runs, paged=alike),
            *failed_blocks(not_ok(runs))]


def report_blocks(runs: list[LoadedRun], skipped=(), plan: dict | None = None) -> list:
    frame = summary(runs)
    blocks: list = [_made(runs, frame), *headline.blocks(runs), *model.headline(frame, runs),
                    *_runs_blocks(runs)]
    if plan:
        blocks.extend(plan_section.section(plan))
    blocks += _left_out(skipped)
    if len({machine_key(r) for r in runs}) > 1:
        blocks.append(Para("These runs come from different machines: each line or bar is "
                           "labelled with its machine.", "note"))
    slow = slow_machines(frame)
    if slow is not None:
        slow = [Heading(2, "Runs slower than the fleet"),
                Para(f"Of {frame['label'].nunique()} runs, these were slower than the "
                     f"fleet's median by more than their noise at some point: beyond "
                     f"{fleet.FENCE:g} interquartile ranges of the runs' medians there, "
                     "with the fleet's median outside their own confidence interval. "
                     "Slowest first."), slow]
    return blocks + _body(runs, frame, slow or [])


def kind_blocks(f: index.Fleet, kind, frame) -> list:
    """A fleet's page for one kind of machine: the report over its runs (their rows of
    the summary frame), headed by the kind's headline, its slow machines linked to their
    pages."""
    labels = {r.label for r in kind.runs}
    frame = frame[frame["label"].isin(labels)].reset_index(drop=True)
    blocks: list = [_made(kind.runs, frame), *f.kind_head(kind),
                    *model.headline(frame, kind.runs), *_runs_blocks(kind.runs)]
    slow = f.slow_table("", kind)
    if slow is not None:
        slow = [Heading(2, "Machines slower than the kind's fleet"),
                Para(index.slow_words("the kind's")), slow]
    return blocks + _body(kind.runs, frame, slow or [], alike=True)


def fleet_report(runs: list[LoadedRun], title: str, skipped=(), plan: dict | None = None
                 ) -> tuple[list, list[Page], index.Fleet]:
    """A fleet's report (index.is_fleet): the index's blocks, its pages (one per kind of
    machine, one per machine), and the fleet they show."""
    frame = summary(runs)
    f = index.Fleet(runs, frame)
    blocks: list = [_made(runs, frame), *f.index_blocks()]
    if plan:
        blocks.extend(plan_section.section(plan))
    blocks += _left_out(skipped)
    pages = [Page(f"kind-{k.number}", f"{title}: {k.name}",
                  index.prefixed(kind_blocks(f, k, frame), f"kind-{k.number}"))
             for k in f.kinds]
    return blocks, pages + f.machine_pages(title), f


class OutputError(UserError):
    """A report folder that cannot be written, or whose files cxlbench did not write."""


@contextlib.contextmanager
def _os_errors(out: Path):
    """An OSError (no such folder, read-only, disk full) as one line naming the folder."""
    try:
        yield
    except OSError as e:
        reason = e.strerror or str(e)
        if e.filename and Path(e.filename) != out:
            reason += f" ({e.filename})"
        raise OutputError(f"cannot write the report to {out}: {reason}") from None


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# Files and folders cxlbench makes are opened without following a link at their last part,
# new files only where nothing is (O_EXCL): a link planted in a report folder (figures/ ->
# elsewhere) cannot make a report write or remove files outside it.
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_OUR_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _create(path: Path, data: bytes) -> None:
    with os.fdopen(os.open(path, _NEW_FILE, 0o666), "wb") as f:
        f.write(data)


def _read(path: Path) -> bytes:
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as f:
        return f.read()


def _refuse_links(out: Path, names) -> None:
    """A symlink where cxlbench keeps a file or folder of its own (figures/, pages/ where
    names has pages, report.html, report.md, the manifest, a figure, a page) is refused,
    naming where it points: writing through it would reach outside out. out itself may be
    a link: the user named it."""
    names = list(names)
    folders = {FIGURE_DIR} | {n.split("/")[0] for n in names if "/" in n}
    for name in (*sorted(folders), *names):     # the folders first: files lie below them
        if (out / name).is_symlink():
            raise OutputError(f"{out / name} is a symbolic link (to {os.readlink(out / name)})"
                              " where cxlbench keeps its own file or folder; cxlbench does "
                              "not write through links: remove it, or name another folder")


# The only names a manifest may list: one from elsewhere cannot point outside the folder.
_OURS = re.compile(rf"report\.(html|md)|{FIGURE_DIR}/[^/\x00-\x1f]+\.png"
                   rf"|{PAGE_DIR}/[{index.PAGE_CHARS.replace('.', '')}][{index.PAGE_CHARS}]*"
                   r"\.(html|md)")


def _manifest(out: Path) -> dict[str, list[str]] | None:
    """Each file the manifest lists, with the contents (hashes) cxlbench wrote there; None
    without a readable manifest."""
    try:
        files = json.loads(_read(out / MANIFEST))["files"]
        return {name: [str(h) for h in hashes] for name, hashes in files.items()
                if _OURS.fullmatch(name)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _previous(out: Path, force: bool) -> dict[str, list[str]]:
    """What cxlbench wrote in out before and may replace or remove; refuses (OutputError) a
    file, a non-empty folder that is no cxlbench report, symlinks where its own files go,
    and files changed since cxlbench wrote them, unless force (then the changed files are
    no longer its own to remove)."""
    if out.is_symlink() and not out.exists():
        raise OutputError(f"{out} is a symbolic link to {os.readlink(out)}, which does not "
                          "exist: name a folder for the report")
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out} is a file, not a folder: name a folder for the report")
    if not out.exists():
        return {}
    _refuse_links(out, [MANIFEST, "report.html", "report.md"])
    listed = _manifest(out)
    if listed is None:
        # What an interrupted report leaves (its temporary folder, an empty figures/) does
        # not make a folder someone else's.
        theirs = [p for p in out.iterdir() if not p.name.startswith(TMP_PREFIX)
                  and not (p.name in SUBDIRS and p.is_dir() and not any(p.iterdir()))]
        if theirs and not force:
            raise OutputError(f"{out} is not empty and holds no cxlbench report (no readable "
                              f"{MANIFEST}): name a new or empty folder, or --force")
        return {}
    _refuse_links(out, listed)
    changed = [name for name, hashes in listed.items() if (out / name).is_file()
               and _sha(_read(out / name)) not in hashes]
    if changed and not force:
        raise OutputError(f"{', '.join(str(out / n) for n in changed)} changed since "
                          "cxlbench wrote it: move it away, or --force to overwrite it")
    return {name: hashes for name, hashes in listed.items() if name not in changed}


def _write_manifest(folder: Path, files: dict[str, list[str]]) -> None:
    _create(folder / MANIFEST, json.dumps({"cxlbench_version": __version__, "files": files},
                                          indent=1).encode())


def _files(title: str, blocks: list, pages: list[Page]) -> dict[str, bytes]:
    """Every file of a report by its name in the folder: the index, its pages, and each
    figure once (a page's figures are keyed apart from the index's: index.py)."""
    files = {"report.html": to_html(title, blocks).encode(),
             "report.md": to_markdown(title, blocks, FIGURE_DIR).encode()}
    figures = figures_in(blocks)
    for page in pages:
        if not _OURS.fullmatch(f"{PAGE_DIR}/{page.name}.html"):
            raise ValueError(f"a page may not be named {page.name!r}")
        files[f"{PAGE_DIR}/{page.name}.html"] = to_html(page.title, page.blocks).encode()
        files[f"{PAGE_DIR}/{page.name}.md"] = to_markdown(page.title, page.blocks,
                                                          f"../{FIGURE_DIR}").encode()
        figures += figures_in(page.blocks)
    for f in figures:
        name = f"{FIGURE_DIR}/{f.key}.png"
        if files.get(name, f.png) != f.png:
            raise ValueError(f"two figures of this report are keyed {f.key!r}")
        files[name] = f.png
    return files


def write(out_dir: str | Path, title: str, blocks: list, force: bool = False,
          pages: list[Page] = ()) -> tuple[Path, Path]:
    """report.html (self-contained), report.md and figures/*.png under out_dir, and each
    page's pages/NAME.html and .md, with a manifest of them. Only files the manifest lists
    are ever replaced or removed (files of an older report that this one lacks are
    removed); a folder that is not empty and holds no cxlbench report is refused, and so is
    a listed file changed since, and (even with force) a symlink where one of these files,
    figures/ or pages/ goes. force writes anyway, overwriting the files of the same names,
    and still removes nothing cxlbench did not write. Each file appears whole or not at
    all: all are made in a temporary folder in out_dir, then moved into place."""
    out = Path(out_dir)
    with _os_errors(out):
        listed = _previous(out, force)
        files = _files(title, blocks, list(pages))
        if out.exists():
            _refuse_links(out, files)
        theirs = [n for n in files if n not in listed and os.path.lexists(out / n)]
        if theirs and not force:
            shown = ", ".join(str(out / n) for n in theirs[:5])
            more = f" and {len(theirs) - 5} more" if len(theirs) > 5 else ""
            raise OutputError(f"{shown}{more} would be overwritten but cxlbench did not "
                              "write it: move it away, or --force")
        out.mkdir(parents=True, exist_ok=True)
        # Inside out, not beside it: on out's file system even where out is a mount point
        # (os.replace cannot cross file systems), and writable wherever out is.
        tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=out))
        fds: dict[str, int] = {}
        try:
            for sub in SUBDIRS:
                (tmp / sub).mkdir()
            for name, data in files.items():
                _create(tmp / name, data)
            new = {name: [_sha(data)] for name, data in files.items()}
            # While files move the manifest takes old and new contents alike: a crash midway
            # leaves a folder the next report still knows as its own.
            _write_manifest(tmp, {**listed, **{n: listed.get(n, []) + h for n, h in new.items()}})
            os.replace(tmp / MANIFEST, out / MANIFEST)
            # figures/ and pages/ held open as the folders checked: one swapped for a link
            # since is refused (ELOOP), and files move into and out of these folders only.
            # figures/ always; pages/ where this report or the one before has pages
            used = {FIGURE_DIR} | {n.split("/")[0] for n in [*new, *listed] if "/" in n}
            for sub in sorted(used):
                with contextlib.suppress(FileExistsError):
                    (out / sub).mkdir()
                fds[sub] = os.open(out / sub, _OUR_DIR)

            def there(name: str) -> tuple[str | Path, int | None]:
                """(path, folder fd) of name: a figure or page by its name in its folder."""
                sub, _, rest = name.partition("/")
                if rest:
                    return rest, fds[sub]
                return out / name, None
            for name in files:
                dst, fd = there(name)
                os.replace(tmp / name, dst, dst_dir_fd=fd)
            for stale in listed.keys() - files.keys():
                dst, fd = there(stale)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(dst, dir_fd=fd)
            _write_manifest(tmp, new)
            os.replace(tmp / MANIFEST, out / MANIFEST)
        finally:
            for fd in fds.values():
                os.close(fd)
            shutil.rmtree(tmp, ignore_errors=True)
    return out / "report.html", out / "report.md"


def build(paths, out_dir, title: str | None = None, suite: str | None = None,
          latest: bool = False, force: bool = False, on_skip=None,
          plan: str | None = None, lines: list | None = None) -> tuple[Path, Path]:
    """Report on the runs paths name or hold (see write for out_dir and force), with the
    plan's section where a plan's JSON is given. Runs found by searching that cannot be
    read are left out, listed in the report, and each passed to on_skip(path, why) before
    the figures are made (the CLI prints them). Where `lines` is a list, the headline as
    the terminal prints it is added to it: a fleet's (index.is_fleet) per kind of
    machine, else each machine's."""
    planned = plan_section.load(plan) if plan else None
    with _os_errors(Path(out_dir)):
        _previous(Path(out_dir), force)     # refuse before minutes of figures, not after
    runs = load_runs(paths, suite=suite, latest=latest)
    for path, why in runs.skipped if on_skip else ():
        on_skip(path, why)
    if not title:
        what = list(dict.fromkeys(f"{r.suite} on {r.machine}" for r in runs))
        suites = list(dict.fromkeys(r.suite for r in runs))
        machines = sorted({r.machine for r in runs})
        if len(machines) > fleet.FLEET:     # a fleet: its suites and count of machines
            what = [f"{', '.join(suites)} on {len(machines)} machines ({machines[0]} to "
                    f"{machines[-1]})"]
        title = "cxlbench report: " + ", ".join(what)
    if index.is_fleet(runs):
        blocks, pages, f = fleet_report(runs, title, runs.skipped, planned)
        if lines is not None:
            lines.extend(f.lines())
        return write(out_dir, title, blocks, force, pages)
    if lines is not None:
        lines.extend(headline_lines(runs))
    return write(out_dir, title, report_blocks(runs, runs.skipped, planned), force)


def headline_lines(runs: list[LoadedRun]) -> list[str]:
    """Each machine's headline as the terminal prints it, named where there are several."""
    found = headline.per_machine(runs)
    out = []
    for machine, h in found:
        lines = hl_lines(h)
        out += [f"{lines[1]}: {machine}" if len(found) > 1 else lines[1], *lines[2:]]
    return out


def json_summary(paths, suite: str | None = None, latest: bool = False) -> dict:
    """What `cxlbench report --json` prints: the runs, each machine's headline, and every
    case's median and interval (a prediction's without either)."""
    runs = load_runs(paths, suite=suite, latest=latest)
    frame = summary(runs)
    cases = [{"run": r["label"], "case": r["case"], "benchmark": r["benchmark"],
              "parameters": r["params"], "metric": r["metric"], "unit": r["unit"],
              "median": r["median"], "predicted": bool(r["predicted"]),
              **({} if r["predicted"] else {"ci_low": r["ci_low"], "ci_high": r["ci_high"],
                                            "n": int(r["n"]), "cv": r["cv"],
                                            "noisy": bool(r["noisy"])})}
             for _, r in frame.iterrows()]
    return {"runs": [{"label": r.label, "path": str(r.path), "machine": r.machine,
                      "suite": r.suite} for r in runs],
            "skipped": [{"path": str(p), "why": why} for p, why in runs.skipped],
            "headline": [{"machine": m, **h.to_dict()} for m, h in headline.per_machine(runs)],
            "cases": cases}


def _one_run(path, side: str) -> LoadedRun:
    runs = load_runs([path])
    if len(runs) + len(runs.skipped) != 1:
        raise ResultsError(f"{side}: {path} holds {len(runs) + len(runs.skipped)} runs; "
                           "name one run folder")
    return runs[0]


def comparison(a_path, b_path, alpha: float = ALPHA):
    """Load runs A and B, label them, and pair their cases: (runs, summary frame,
    compared rows, unpaired cases)."""
    a, b = _one_run(a_path, "A"), _one_run(b_path, "B")
    if a.path.resolve() == b.path.resolve():
        raise ResultsError(f"A and B are the same run ({a.path})")
    short = [f"{r.machine}/{r.run_id}" if across_machines(a, b) else r.run_id for r in (a, b)]
    a.label, b.label = printable(f"A {short[0]}"), printable(f"B {short[1]}")
    frame = summary([a, b])
    table, unpaired = pair(frame[frame["label"] == a.label], frame[frame["label"] == b.label],
                           alpha)
    return [a, b], frame, table, unpaired


def comparison_table(table) -> Table:
    rows = []
    for _, r in table.iterrows():
        shown = [k for k, v in r["params"].items() if k not in NOT_MEASURED and v not in ("", None)]
        params = _figures.params_text(r["params"], shown)
        # A prediction is not tested as a sample (pair): its ratio, without interval or p.
        tested = [f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]", f"{r['p']:.3g}"] \
            if not r["predicted"] else ["", ""]
        rows.append([r["case_a"], params, r["metric"], r["median_a"], r["median_b"], r["unit"],
                     f"{r['ratio']:.3f}" if r["significant"] or r["predicted"] else "",
                     *tested, r["verdict"]])
    return Table(["case", "parameters", "metric", "A", "B", "unit", "B/A", "95 % CI of B/A",
                  "p", "verdict"], rows)


def settings_blocks(a: LoadedRun, b: LoadedRun) -> list:
    """The recorded settings that differ between A and B, before any result."""
    diffs, missing = setting_differences(a, b)
    blocks: list = [Heading(2, "Settings that differ")]
    if diffs:
        blocks += [Para("What A and B recorded about the machine, the system and the build "
                        "differs in these; each may explain a change below.", "note"),
                   Table(["setting", "A", "B"], [list(d) for d in diffs])]
    else:
        blocks.append(Para("None: every setting both runs recorded is the same."))
    for side, names in missing.items():
        if names:
            blocks.append(Para(f"Not recorded by {side} (an older cxlbench): "
                               + ", ".join(names) + "."))
    return blocks


def compare_blocks(runs, frame, table, unpaired, alpha: float) -> list:
    a, b = runs
    blocks: list = [run_table(runs)]
    across = across_machines(a, b)
    if across:
        blocks.append(Para(f"ACROSS MACHINES: {across}. Differences include everything that "
                           "differs between the two machines, not only what changed in the "
                           "software.", "note"))
    blocks += settings_blocks(a, b)
    sig = int(table["significant"].sum()) if len(table) else 0
    blocks += [Heading(2, "Changes"),
               Para(f"{len(table)} metrics of {table['case_a'].nunique() if len(table) else 0}"
                    f" paired cases compared; {sig} changed significantly (Mann-Whitney, "
                    f"p < {alpha}, and the {1 - alpha:.0%} Hodges-Lehmann interval of B/A "
                    "excludes 1). The rest read \"not significant\": their difference is "
                    "within the noise of the repetitions. Sorted by the largest significant "
                    "change."),
               comparison_table(table)]
    if unpaired:
        blocks += [Heading(2, "Cases left out"),
                   Para("These cases have no partner with the same benchmark and parameters "
                        "in the other run, so they are not compared."),
                   Table(["run", "case", "why"], [[u["side"], u["case"], u["why"]]
                                                  for u in unpaired])]
    blocks.append(Heading(2, "Both runs, overlaid"))
    blocks.extend(family_blocks(frame, runs))
    blocks.append(Heading(2, "Machines"))
    blocks.extend(machines_blocks(runs))
    return blocks


def compare(a_path, b_path, out_dir=None, alpha: float = ALPHA, title: str | None = None,
            force: bool = False):
    """Compare runs A and B; with out_dir, also write the comparison report there (see
    write for force)."""
    if out_dir is not None:
        with _os_errors(Path(out_dir)):
            _previous(Path(out_dir), force)
    runs, frame, table, unpaired = comparison(a_path, b_path, alpha)
    written = None
    if out_dir is not None:
        title = title or f"cxlbench comparison: {runs[0].label} vs {runs[1].label}"
        written = write(out_dir, title, compare_blocks(runs, frame, table, unpaired, alpha),
                        force)
    return runs, table, unpaired, written
