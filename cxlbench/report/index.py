"""A fleet's report (runs of more than fleet.FLEET machines) as an index and pages. The
index is the first screen: per kind of machine (one hardware, machine.kind_key) and memory
node, the median machine's idle latency and peak bandwidth with their spread, and each
node against the fastest as a ratio; the machines slower than their kind's fleet, named
and linked. One page per kind holds the whole report over that kind's runs (its figures,
every case); one per machine, its own headline, where it stands in its kind at every
point, its settings that differ from its kind's, and its hardware. Each page is
self-contained (an HTML file with its figures inline) and only as large as what it shows.

A machine is judged against its kind, not the whole fleet (a CXL machine's far node has
no peer on a machine without one, and a CPU of another kind is another fleet), by one
value a point: its newest run's, so a machine measured ten times weighs as one."""
from __future__ import annotations

import hashlib
import re
import textwrap
from collections import Counter
from dataclasses import replace

import pandas as pd

from .. import headline as hl
from ..units import quantity, scale, significant
from . import figures as _figures
from . import fleet
from . import headline as report_headline
from .compare_runs import NOT_COMPARED
from .document import Folded, Heading, Link, Links, Page, Para, Table
from .figures import Figure
from .machine import TABLED, Kind, failed_blocks, kinds, machine_blocks, run_table
from .runs import LoadedRun, fact_text, facts, machine_key, not_ok
from .text import printable

# The headline's figures the index shows per kind and node (the rest on each machine's).
COLUMNS = ("idle latency", "read, all threads", "write, all threads")
NAMED = 4               # machines named in a kind's row; the rest counted
# Machines a kind needs before one can be off it: of three, Tukey's fence never has one
# beyond it, however far.
JUDGED = 4
INDEX = Link("the fleet's index", "../report")
PAGE_CHARS = "A-Za-z0-9_.-"     # a page's file name: these, not starting with a dot
_UNSAFE = re.compile(f"[^{PAGE_CHARS}]")


def is_fleet(runs: list[LoadedRun]) -> bool:
    """More machines than a report shows one by one."""
    return len({machine_key(r) for r in runs}) > fleet.FLEET


def page_name(prefix: str, text: str) -> str:
    """A file name for a page of text (a machine's name, which anyone may have chosen):
    its safe characters, and a hash of the whole where any was left out."""
    safe = _UNSAFE.sub("_", text)[:60]
    if safe != text:
        safe += "-" + _hash(text)
    return f"{prefix}-{safe}"


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:8]


def prefixed(blocks: list, prefix: str) -> list:
    """The blocks with each figure keyed under prefix: a kind's figures beside another
    kind's in figures/."""
    out = []
    for b in blocks:
        if isinstance(b, Figure):
            b = replace(b, key=f"{prefix}-{b.key}")
        elif isinstance(b, Folded):
            b = Folded(b.summary, prefixed(b.blocks, prefix))
        out.append(b)
    return out


def _spread(values: list[float], unit: str) -> str:
    """The median of a kind's machines and, for several, their interquartile range in
    the median's unit: '105 ns [104, 107]'."""
    s = pd.Series(values)
    mid = float(s.median())
    if len(values) == 1:
        return quantity(mid, unit)
    divisor, _ = scale(mid, unit)
    return (f"{quantity(mid, unit)} [{significant(float(s.quantile(0.25)) / divisor)}, "
            f"{significant(float(s.quantile(0.75)) / divisor)}]")


def _by(slower: float) -> str:
    """How far a point is off its kind: slower or faster, or just off (a unit that has
    no side, such as pages)."""
    if pd.isna(slower):
        return "off (no faster side)"
    return f"{abs(slower):.0%} {'slower' if slower > 0 else 'faster'}"


class Fleet:
    """The runs of many machines by kind: each machine's name, page and headline, and
    each point of its newest run that measured it beside its kind's fleet there."""

    HEADLINE = ["memory", "source", "machines", *(f"{c}: median [IQR]" for c in COLUMNS),
                "against the fastest (of the medians)"]

    def __init__(self, runs: list[LoadedRun], frame: pd.DataFrame):
        self.runs = runs
        self.kinds = kinds(runs)
        self.key_of = {r.label: machine_key(r) for r in runs}
        self.runs_of: dict[tuple, list[LoadedRun]] = {}
        for r in runs:
            self.runs_of.setdefault(self.key_of[r.label], []).append(r)
        self.kind_of = {self.key_of[r.label]: k for k in self.kinds for r in k.machines}
        self.heads = report_headline.by_machine(runs)
        self.name: dict[tuple, str] = {}           # shown: the host name, told apart
        self.page: dict[tuple, str] = {}
        used: set[str] = set()                      # casefolded: Lab1 and lab1 are one file
        for key, own in self.runs_of.items():
            name, page = printable(own[0].machine), page_name("machine", own[0].machine)
            if page.casefold() in used:             # one host name, other hardware
                name, page = f"{name} ({_hash(repr(key))})", f"{page}-{_hash(repr(key))}"
            used.add(page.casefold())
            self.name[key], self.page[key] = name, page
        self._judge(frame)
        self._said: dict[str, str] = {}             # a point's words, worked out once
        self._varying: dict[tuple, list[str]] = {}  # (kind, benchmark) -> what varies
        self._rows = {k.number: self._kind_rows(k) for k in self.kinds}

    def _judge(self, frame: pd.DataFrame) -> None:
        """points: one row per machine and point (its newest run's), with its kind's
        median, quartiles, range and machines there; off: those off the kind's fleet
        (fleet.off) in kinds of JUDGED machines or more, slowest first."""
        page = {label: self.page[key] for label, key in self.key_of.items()}
        started = {r.label: r.meta.get("started", "") for r in self.runs}
        kind = {label: self.kind_of[key].number for label, key in self.key_of.items()}
        f = frame.assign(_m=frame["label"].map(page), _kind=frame["label"].map(kind),
                         _point=fleet.point_key(frame) if len(frame) else [],
                         _started=frame["label"].map(started))
        f = f.astype({"median": float, "ci_low": float, "ci_high": float})
        f = f.sort_values("_started", ascending=False, kind="stable") \
            .drop_duplicates(["_m", "_point"]).sort_index()
        g = f.groupby(["_kind", "_point"], sort=False)["median"]
        self.points = f.assign(
            k_median=g.transform("median"), k_q1=g.transform("quantile", 0.25),
            k_q3=g.transform("quantile", 0.75), k_min=g.transform("min"),
            k_max=g.transform("max"), k_machines=g.transform("size"))
        judged = [k.number for k in self.kinds if len(k.machines) >= JUDGED]
        self.off = fleet.off(self.points[self.points["_kind"].isin(judged)],
                             ["_kind", "_point"])
        slow = self.off[self.off["slower"] > 0]
        self.slow = {k.number: list(dict.fromkeys(slow.loc[slow["_kind"] == k.number, "_m"]))
                     for k in self.kinds}
        self.key_by_page = {p: key for key, p in self.page.items()}

    # -- links ---------------------------------------------------------------------------

    def machine_link(self, page: str, here: str = "pages/") -> Link:
        return Link(self.name[self.key_by_page[page]], here + page)

    def kind_link(self, kind: Kind, here: str = "pages/") -> Link:
        return Link(kind.name, f"{here}kind-{kind.number}")

    def _named(self, kind: Kind, here: str) -> list | str:
        """The kind's slow machines: up to NAMED as links and a count of the rest; or why
        none is judged."""
        if len(kind.machines) < JUDGED:
            return f"too few to judge ({len(kind.machines)}; {JUDGED} are needed)"
        pages = self.slow[kind.number]
        out: list = [self.machine_link(p, here) for p in pages[:NAMED]]
        if len(pages) > NAMED:
            out.append(f"and {len(pages) - NAMED} more")
        return out or "none"

    # -- the headline per kind -------------------------------------------------------------

    def _kind_rows(self, kind: Kind) -> list[list]:
        """A row per memory node of the kind's headlines: each COLUMN's median over its
        machines with their interquartile range (or why none has a figure), and the node
        against the fastest worked out from those medians."""
        heads = [self.heads[key] for r in kind.machines
                 if (key := self.key_of[r.label]) in self.heads]
        rows, medians = [], []                      # medians: a NodeRow a node, for ratios
        for name in dict.fromkeys(row.name for h in heads for row in h.nodes):
            source, values, words, ratio = "", {}, {}, None
            for row in (row for h in heads for row in h.nodes if row.name == name):
                source = row.source
                for column in (*COLUMNS, "read, 1 thread"):
                    c = row.cells.get(column)
                    if isinstance(c, hl.Cell) and c.value is not None and not c.cache:
                        values.setdefault(column, ([], c.unit))[0].append(c.value)
                    elif c:                 # why there is none ("no figure", "not run")
                        words.setdefault(column, c.why if isinstance(c, hl.Cell) else c)
                if row.source.startswith("assumed"):    # the profile's, not the medians'
                    ratio = row.cells.get("against the fastest")
            cells = [_spread(*values[c]) if c in values else words.get(c, "not run")
                     for c in COLUMNS]
            if ratio is None:
                medians.append(hl.NodeRow(name, source, {
                    c: hl.Cell(float(pd.Series(vs).median()), unit)
                    for c, (vs, unit) in values.items()}))
            rows.append([name, source, len(heads), *cells, ratio])
        hl.against_fastest(medians)
        ratios = {m.name: m.cells["against the fastest"] for m in medians}
        return [[*row[:-1], row[-1] if row[-1] is not None else ratios.get(row[0], "")]
                for row in rows]

    def kind_head(self, kind: Kind) -> list:
        """A kind page's first section: where it belongs, and its headline."""
        rows = self._rows[kind.number]
        slow = self.slow[kind.number]
        verdict = (f"Not judged: too few machines ({JUDGED} are needed)."
                   if len(kind.machines) < JUDGED else
                   f"{len(slow)} slower than the kind's fleet at some point by more than "
                   "their noise." if slow else
                   "None slower than the kind's fleet by more than its noise.")
        return [Links("Part of", [INDEX]),
                Para(f"{kind.name}: {len(kind.machines)} machines ({kind.describe()}). "
                     f"{verdict}", "headline"),
                *([Heading(2, report_headline.TITLE), Para(_HEADLINE_WORDS),
                   Table(self.HEADLINE, rows)] if rows else [])]

    # -- the index -----------------------------------------------------------------------

    def words(self) -> str:
        """The fleet in a sentence: its machines, kinds, and those slower than their
        kind's fleet, the slowest first."""
        slow = [self.name[self.key_by_page[p]]
                for p in dict.fromkeys(self.off.loc[self.off["slower"] > 0, "_m"])]
        kinds = f"{len(self.page)} machines of {len(self.kinds)} kind" \
            f"{'s' * (len(self.kinds) > 1)}"
        small = sum(len(k.machines) for k in self.kinds if len(k.machines) < JUDGED)
        unjudged = (f" ({small} in kinds of fewer than {JUDGED}, too few to judge)"
                    if small else "")
        if not slow:
            return f"{kinds}; none slower than its kind's fleet by more than its " \
                   f"noise{unjudged}."
        more = f" and {len(slow) - 8} more" if len(slow) > 8 else ""
        return (f"{kinds}; {len(slow)} slower than their kind's fleet at some point by more "
                f"than their noise{unjudged}, the slowest first: {', '.join(slow[:8])}"
                f"{more}.")

    def lines(self) -> list[str]:
        """The fleet's headline as the terminal prints it."""
        rows = [[k.name, *map(str, row)] for k in self.kinds for row in self._rows[k.number]]
        out = ["", "FLEET HEADLINE", *textwrap.wrap(self.words(), hl.WIDTH,
                                                     initial_indent="  ",
                                                     subsequent_indent="  ")]
        if rows:
            out += hl.aligned(["kind", *self.HEADLINE], rows)
        return out + [f"  {k.name}: {_span(k.machines)}, {k.describe()}" for k in self.kinds]

    def index_blocks(self) -> list:
        """The index's sections after its opening: the fleet's headline, the kinds, the
        machines slower than their kind, and every machine."""
        blocks: list = [Para(self.words(), "headline")]
        rows = [[self.kind_link(k), *row] for k in self.kinds for row in self._rows[k.number]]
        if rows:
            blocks += [Heading(2, "Fleet headline"), Para(_HEADLINE_WORDS),
                       Table(["kind", *self.HEADLINE], rows)]
        blocks += [Heading(2, "Kinds of machine"),
                   Para("Machines of one hardware (CPU, ISAs, caches, memory nodes and "
                        "which have CPUs); their settings may differ, and each machine's "
                        "page says where. Each kind's page has its figures, the fleet at "
                        "each point, and its machines' hardware and settings."),
                   Table(["kind", "machines", "what", "slower than the kind's fleet"],
                         [[self.kind_link(k), _span(k.machines), k.describe(),
                           self._named(k, "pages/")] for k in self.kinds])]
        slow = self.slow_table("pages/")
        if slow is not None:
            blocks += [Heading(2, "Machines slower than their kind"),
                       Para(slow_words("their kind's")), slow]
        blocks.append(Heading(2, "Every machine"))
        blocks.append(Folded(f"The {len(self.page)} machines, each linked to its page",
                             [self.machines_table()]))
        return blocks

    def slow_table(self, here: str, kind: Kind | None = None) -> Table | None:
        """Each machine slower than its kind at some point: how many points, its worst."""
        slow = self.off[self.off["slower"] > 0]
        if kind is not None:
            slow = slow[slow["_kind"] == kind.number]
        if slow.empty:
            return None
        rows = []
        for page, g in slow.groupby("_m", sort=False):     # slowest first (off's order)
            w = g.iloc[0]
            rows.append([self.machine_link(page, here), f"kind {w['_kind']}", len(g),
                         self.point_text(w), f"{w['slower']:+.0%}",
                         f"{w['median']:.4g} against {w['fleet']:.4g} {w['unit']}"])
        return Table(["machine", "kind", "points slower", "worst point", "by", "its median"],
                     rows)

    def machines_table(self) -> Table:
        bad = Counter(b["label"] for b in not_ok(self.runs))
        slower = self.off[self.off["slower"] > 0].groupby("_m").size().to_dict()
        rows = []
        for key, page in self.page.items():
            own = self.runs_of[key]
            rows.append([Link(self.name[key], f"pages/{page}"),
                         self.kind_link(self.kind_of[key]),
                         ", ".join(dict.fromkeys(r.suite for r in own)),
                         max(r.meta.get("started", "") for r in own),
                         *_first_node(self.heads.get(key)), slower.get(page, 0),
                         sum(bad[r.label] for r in own)])
        return Table(["machine", "kind", "suites", "newest run", "idle latency (first node)",
                      "read, all threads (first node)", "points slower than its kind",
                      "cases without results"], rows)

    # -- a machine's page ------------------------------------------------------------------

    def point_text(self, row) -> str:
        """A point in words: its benchmark, the parameters that vary in its kind, the
        metric."""
        key = f"{row['_kind']}\0{row['_point']}"
        if key not in self._said:
            which = (row["_kind"], row["benchmark"])
            if which not in self._varying:
                p = self.points
                self._varying[which] = _figures.varying(
                    p[(p["_kind"] == which[0]) & (p["benchmark"] == which[1])]
                    .drop_duplicates("_point"))
            shown = [k for k in self._varying[which] if row["params"].get(k) is not None]
            self._said[key] = " ".join(x for x in (
                row["benchmark"], _figures.params_text(row["params"], shown), row["metric"])
                if x)
        return self._said[key]

    def machine_pages(self, title: str) -> list[Page]:
        points = {page: g for page, g in self.points.groupby("_m", sort=False)}
        off = {page: g for page, g in self.off.groupby("_m", sort=False)}
        bad: dict[str, list[dict]] = {}
        for b in not_ok(self.runs):
            bad.setdefault(b["label"], []).append(b)
        common = {k.number: _common([facts(r.meta) for r in k.machines]) for k in self.kinds}
        return [Page(page, f"{title}: {self.name[key]}", self._machine_page(
                    key, points.get(page, self.points.iloc[:0]), off.get(page, self.off.iloc[:0]),
                    [b for r in self.runs_of[key] for b in bad.get(r.label, [])],
                    common[self.kind_of[key].number]))
                for key, page in self.page.items()]

    def _machine_page(self, key, mine: pd.DataFrame, far: pd.DataFrame, failed: list[dict],
                      common: dict[str, str]) -> list:
        kind = self.kind_of[key]
        own = self.runs_of[key]
        slower = far[far["slower"] > 0]
        if len(kind.machines) < JUDGED:
            words = (f"Not judged: its kind has {len(kind.machines)} machine"
                     f"{'s' * (len(kind.machines) > 1)}, and {JUDGED} are needed.")
        elif len(slower):
            words = (f"Slower than its kind's fleet at {len(slower)} of its {len(mine)} "
                     f"points by more than its noise; worst {self.point_text(slower.iloc[0])}"
                     f" ({slower['slower'].iloc[0]:+.0%}).")
        else:
            words = f"Within its kind's fleet (or faster) at each of its {len(mine)} points."
        blocks: list = [Links("Part of", [INDEX, self.kind_link(kind, "")]),
                        Para(f"One of {len(kind.machines)} machines of {kind.name} "
                             f"({kind.describe()}). {words}", "headline")]
        h = self.heads.get(key)
        if h is not None:
            blocks += [Heading(2, report_headline.TITLE), *report_headline.one_machine(h)]
        blocks.append(Heading(2, "Against its kind"))
        if len(far):
            blocks += [Para(f"Its points off its kind's fleet (beyond {fleet.FENCE:g} "
                            "interquartile ranges of the kind's machines and by more than "
                            "its noise), slowest first."),
                       Table(["point", "unit", "its median", "the kind's median", "by"],
                             [[self.point_text(r), r["unit"], r["median"], r["fleet"],
                               _by(r["slower"])] for r in far.to_dict("records")])]
        elif len(kind.machines) >= JUDGED:
            blocks.append(Para("None of its points is off its kind's fleet."))
        blocks.append(Folded(f"Every point against its kind ({len(mine)})", [Table(
            ["point", "unit", "its median", "its 95 % CI", "kind: median", "quartiles",
             "range", "machines"],
            [[self.point_text(r), r["unit"], r["median"],
              f"[{r['ci_low']:.4g}, {r['ci_high']:.4g}]", r["k_median"],
              f"[{r['k_q1']:.4g}, {r['k_q3']:.4g}]", f"[{r['k_min']:.4g}, {r['k_max']:.4g}]",
              r["k_machines"]] for r in mine.to_dict("records")])]))
        newest = max(own, key=lambda r: r.meta.get("started", ""))
        differ = [[name, value, common[name]] for name, value in _settings(newest).items()
                  if name in common and value != common[name]]
        if differ:
            blocks += [Heading(2, "Settings that differ from its kind's"),
                       Para("Where its newest run recorded another value than most machines "
                            "of its kind: each may explain a difference above."),
                       Table(["setting", "this machine", "most of its kind"], differ)]
        return [*blocks, Heading(2, "Runs"), run_table(own), Heading(2, "Machine"),
                *machine_blocks(newest), *failed_blocks(failed)]


_HEADLINE_WORDS = ("Per kind and memory node: each figure is the median over the kind's "
                   "machines, in brackets the middle half of them (the interquartile range); "
                   "each machine's own figures are on its page. The source says where the "
                   "figures came from: measured on each machine, or assumed from a named "
                   "profile (a machine with one memory node has no slower tier to measure).")


def slow_words(whose: str) -> str:
    return (f"Slower than {whose} fleet by more than their noise at some point: beyond "
            f"{fleet.FENCE:g} interquartile ranges of the machines' values there (each "
            "machine's newest run), with the fleet's median outside their own confidence "
            f"interval; kinds of fewer than {JUDGED} machines are not judged. Slowest first.")


def _settings(run: LoadedRun) -> dict[str, str]:
    """A run's settings as compared within a kind: not those told elsewhere or measured
    apart on each machine (a frequency read at start)."""
    return {k: fact_text(v) for k, v in facts(run.meta).items()
            if k not in TABLED and k not in NOT_COMPARED}


def _common(all_facts: list[dict]) -> dict[str, str]:
    """Each setting's most common value over a kind's machines."""
    counts: dict[str, Counter] = {}
    for f in all_facts:
        for k, v in f.items():
            if k not in TABLED and k not in NOT_COMPARED:
                counts.setdefault(k, Counter())[fact_text(v)] += 1
    return {k: c.most_common(1)[0][0] for k, c in counts.items()}


def _span(machines: list[LoadedRun]) -> str:
    names = sorted(printable(r.machine) for r in machines)
    return f"{len(names)} ({names[0]} to {names[-1]})" if len(names) > 1 else names[0]


def _first_node(h) -> list[str]:
    """A machine's idle latency and every-thread read on its first memory node."""
    if h is None or not h.nodes:
        return ["", ""]
    row = h.nodes[0]
    return [c.text(False) if isinstance(c := row.cells.get(column), hl.Cell) else str(c or "")
            for column in ("idle latency", "read, all threads")]
