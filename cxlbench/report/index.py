"""A fleet's report (runs of more than fleet.FLEET machines) as an index and pages. The
index is the first screen: per kind of machine (alike in hardware and settings) and
memory node, the median machine's idle latency and peak bandwidth with their spread, and
each node against the fastest as a ratio; the machines slower than their kind's fleet,
named and linked. One page per kind holds the whole report over that kind's runs (its
figures, every case); one per machine, its own headline, where it stands in its kind at
every point, and its hardware. Each page is self-contained (an HTML file with its figures
inline) and only as large as what it shows.

A machine is judged against its kind, not the whole fleet: a CXL machine's far node has
no peer on a machine without one, and a CPU of another kind is another fleet."""
from __future__ import annotations

import hashlib
import re
import textwrap
from dataclasses import replace

import pandas as pd

from .. import headline as hl
from ..units import quantity, scale, significant
from . import figures as _figures
from . import fleet
from . import headline as report_headline
from .document import Folded, Heading, Link, Links, Page, Para, Table
from .figures import Figure
from .machine import Kind, kinds, machine_blocks, run_table
from .runs import LoadedRun, machine_key, not_ok

# The headline's figures the index shows per kind and node (the rest on each machine's).
COLUMNS = ("idle latency", "read, all threads", "write, all threads")
NAMED = 4               # machines named in a kind's row; the rest counted
INDEX = Link("the fleet's index", "../report")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def is_fleet(runs: list[LoadedRun]) -> bool:
    """More machines than a report shows one by one."""
    return len({machine_key(r) for r in runs}) > fleet.FLEET


def page_name(prefix: str, text: str) -> str:
    """A file name for a page of text (a machine's name, which anyone may have chosen):
    its safe characters, and a hash of the whole where any was left out."""
    safe = _UNSAFE.sub("_", text)[:60]
    if safe != text:
        safe += "-" + hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{prefix}-{safe}"


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
    """The runs of many machines, by kind; each machine's headline, and each row of the
    summary with its kind's fleet at its point."""

    def __init__(self, runs: list[LoadedRun], frame: pd.DataFrame):
        self.runs = runs
        self.kinds = kinds(runs)
        self.kind_of = {machine_key(r): k for k in self.kinds for r in k.runs}
        self.heads = report_headline.by_machine(runs)
        self.pages: dict[tuple, str] = {}          # machine -> its page's name
        self.by_key: dict[tuple, list[LoadedRun]] = {}     # machine -> its runs
        for r in runs:
            key = machine_key(r)
            self.by_key.setdefault(key, []).append(r)
            if key not in self.pages:
                name = page_name("machine", r.machine)
                while name in self.pages.values():  # one name over two sets of hardware
                    name += "+"
                self.pages[key] = name
        self.key_of = {r.label: machine_key(r) for r in runs}
        kind_number = {r.label: self.kind_of[machine_key(r)].number for r in runs}
        self.frame = frame.assign(_kind=frame["label"].map(kind_number),
                                  _point=fleet.point_key(frame))
        g = self.frame.groupby(["_kind", "_point"], sort=False)["median"]
        self.frame = self.frame.assign(
            k_median=g.transform("median"), k_q1=g.transform("quantile", 0.25),
            k_q3=g.transform("quantile", 0.75), k_min=g.transform("min"),
            k_max=g.transform("max"), k_runs=g.transform("size"))
        self.off = fleet.off(self.frame, ["_kind", "_point"])
        slow = self.off[self.off["slower"] > 0]
        self.slow = {k.number: list(dict.fromkeys(slow.loc[slow["_kind"] == k.number, "label"]))
                     for k in self.kinds}
        self._said: dict[str, str] = {}             # a point's words, worked out once
        self._varying: dict[tuple, list[str]] = {}  # (kind, benchmark) -> what varies
        self._rows = {k.number: self._kind_rows(k) for k in self.kinds}

    # -- links ---------------------------------------------------------------------------

    def machine_link(self, label: str, here: str = "pages/") -> Link:
        return Link(label, here + self.pages[self.key_of[label]])

    def kind_link(self, kind: Kind, here: str = "pages/") -> Link:
        return Link(kind.name, f"{here}kind-{kind.number}")

    def _named(self, labels: list[str], here: str) -> list:
        """Up to NAMED machines as links, and a count of the rest."""
        out: list = [self.machine_link(label, here) for label in labels[:NAMED]]
        if len(labels) > NAMED:
            out.append(f"and {len(labels) - NAMED} more")
        return out

    # -- the headline per kind -------------------------------------------------------------

    def _kind_rows(self, kind: Kind) -> list[list]:
        """A row per memory node of the kind's headlines: each COLUMN's median over its
        machines with their interquartile range, and the node against the fastest worked
        out from those medians."""
        heads = [self.heads[machine_key(r)] for r in kind.machines
                 if machine_key(r) in self.heads]
        if not heads:
            return []
        order = list(dict.fromkeys(row.name for h in heads for row in h.nodes))
        rows = []
        medians = []                                 # a NodeRow per node, for the ratios
        for name in order:
            cells, source, values, words = {}, "", {}, {}
            for h in heads:
                for row in h.nodes:
                    if row.name != name:
                        continue
                    source = row.source
                    for column in (*COLUMNS, "read, 1 thread"):
                        c = row.cells.get(column)
                        if isinstance(c, hl.Cell) and c.value is not None and not c.cache:
                            values.setdefault(column, ([], c.unit))[0].append(c.value)
                        elif c:             # why there is none ("no figure", "not run")
                            words.setdefault(column, c.why if isinstance(c, hl.Cell) else c)
                    if "against the fastest" not in cells and row.source.startswith("assumed"):
                        cells["against the fastest"] = row.cells.get("against the fastest")
            for column in COLUMNS:
                vs, unit = values.get(column, ([], ""))
                cells[column] = _spread(vs, unit) if vs else words.get(column, "not run")
            medians.append(hl.NodeRow(name, source, {
                column: hl.Cell(float(pd.Series(vs).median()), unit)
                for column, (vs, unit) in values.items()}))
            rows.append((name, source, len(heads), cells))
        measured = [m for m in medians if not m.source.startswith("assumed")]
        hl.against_fastest(measured)
        ratio = {m.name: m.cells["against the fastest"] for m in measured}
        return [[name, source, n, *(cells[c] for c in COLUMNS),
                 cells.get("against the fastest") or ratio.get(name, "")]
                for name, source, n, cells in rows]

    HEADLINE = ["memory", "source", "machines", *(f"{c}: median [IQR]" for c in COLUMNS),
                "against the fastest (of the medians)"]

    def kind_head(self, kind: Kind) -> list:
        """A kind page's first section: where it belongs, and its headline."""
        rows = self._rows[kind.number]
        slow = self.slow[kind.number]
        return [Links("Part of", [INDEX]),
                Para(f"{kind.name}: {len(kind.machines)} machines ({kind.describe()}). "
                     + (f"{len(slow)} slower than the kind's fleet at some point by more "
                        "than their noise." if slow else
                        "None slower than the kind's fleet by more than its noise."),
                     "headline"),
                *([Heading(2, report_headline.TITLE), Para(_HEADLINE_WORDS),
                   Table(self.HEADLINE, rows)] if rows else [])]

    # -- the index -----------------------------------------------------------------------

    def words(self) -> str:
        """The fleet in a sentence: its machines, kinds, and those slower than their
        kind's fleet, the slowest first."""
        slow = list(dict.fromkeys(self.off.loc[self.off["slower"] > 0, "label"]))
        kinds = f"{len(self.pages)} machines of {len(self.kinds)} kind" \
            f"{'s' * (len(self.kinds) > 1)}"
        if not slow:
            return f"{kinds}; none slower than its kind's fleet by more than its noise."
        more = f" and {len(slow) - 8} more" if len(slow) > 8 else ""
        return (f"{kinds}; {len(slow)} slower than their kind's fleet at some point by more "
                f"than their noise, the slowest first: {', '.join(slow[:8])}{more}.")

    def lines(self) -> list[str]:
        """The fleet's headline as the terminal prints it."""
        rows = [[k.name, *(_text(c) for c in row)] for k in self.kinds
                for row in self._rows[k.number]]
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
                   Para("Machines alike in hardware and settings (all but the timer's "
                        "overhead, measured on each). Each kind's page has its figures, "
                        "every case, and its machines' hardware."),
                   Table(["kind", "machines", "what", "slower than the kind's fleet"],
                         [[self.kind_link(k), _span(k.machines), k.describe(),
                           self._named(self.slow[k.number], "pages/") or "none"]
                          for k in self.kinds])]
        slow = self.slow_table("pages/")
        if slow is not None:
            blocks += [Heading(2, "Machines slower than their kind"),
                       Para(f"Slower than their kind's fleet by more than their noise at "
                            f"some point: beyond {fleet.FENCE:g} interquartile ranges of the "
                            "kind's machines there, with the kind's median outside their "
                            "own confidence interval. Slowest first."), slow]
        blocks.append(Heading(2, "Every machine"))
        blocks.append(Folded(f"The {len(self.pages)} machines, each linked to its page",
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
        for label, g in slow.groupby("label", sort=False):    # slowest first (off's order)
            w = g.iloc[0]
            rows.append([self.machine_link(label, here), f"kind {w['_kind']}", len(g),
                         self.point_text(w), f"{w['slower']:+.0%}",
                         f"{w['median']:.4g} against {w['fleet']:.4g} {w['unit']}"])
        return Table(["machine", "kind", "points slower", "worst point", "by", "its median"],
                     rows)

    def machines_table(self) -> Table:
        bad: dict[str, int] = {}
        for b in not_ok(self.runs):
            bad[b["label"]] = bad.get(b["label"], 0) + 1
        slower = self.off[self.off["slower"] > 0].groupby("label").size().to_dict()
        rows = []
        for key, name in self.pages.items():
            runs = self.by_key[key]
            cells = _first_node(self.heads.get(key))
            rows.append([Link(runs[0].machine, f"pages/{name}"),
                         self.kind_link(self.kind_of[key]),
                         ", ".join(dict.fromkeys(r.suite for r in runs)),
                         max(r.meta.get("started", "") for r in runs), *cells,
                         sum(slower.get(r.label, 0) for r in runs),
                         sum(bad.get(r.label, 0) for r in runs)])
        return Table(["machine", "kind", "suites", "newest run", "idle latency (first node)",
                      "read, all threads (first node)", "points slower than its kind",
                      "cases without results"], rows)

    # -- a machine's page ------------------------------------------------------------------

    def point_text(self, row) -> str:
        """A point in words: its benchmark and the parameters that vary in its kind."""
        key = f"{row['_kind']}\0{row['_point']}"
        if key not in self._said:
            which = (row["_kind"], row["benchmark"])
            if which not in self._varying:
                f = self.frame
                self._varying[which] = _figures.varying(
                    f[(f["_kind"] == which[0]) & (f["benchmark"] == which[1])]
                    .drop_duplicates("_point"))
            shown = [k for k in self._varying[which] if row["params"].get(k) is not None]
            self._said[key] = " ".join(x for x in (
                row["benchmark"], _figures.params_text(row["params"], shown), row["metric"]) if x)
        return self._said[key]

    def machine_pages(self, title: str) -> list[Page]:
        by_key = self.by_key
        rows = {label: g for label, g in self.frame.groupby("label", sort=False)}
        off = {label: g for label, g in self.off.groupby("label", sort=False)}
        bad = not_ok(self.runs)
        return [Page(name, f"{title}: {by_key[key][0].machine}",
                     self.machine_blocks(key, by_key[key], rows, off, bad))
                for key, name in self.pages.items()]

    def machine_blocks(self, key, runs: list[LoadedRun], rows, off, bad) -> list:
        kind = self.kind_of[key]
        labels = [r.label for r in runs]
        mine = pd.concat([rows[x] for x in labels if x in rows]) if \
            any(x in rows for x in labels) else self.frame.iloc[:0]
        far = pd.concat([off[x] for x in labels if x in off]) if \
            any(x in off for x in labels) else self.off.iloc[:0]
        slower = far[far["slower"] > 0]
        points = len(mine)
        words = (f"Slower than its kind's fleet at {len(slower)} of its {points} points by "
                 f"more than its noise; worst {self.point_text(slower.iloc[0])} "
                 f"({slower['slower'].iloc[0]:+.0%})." if len(slower) else
                 f"Within its kind's fleet (or faster) at each of its {points} points.")
        blocks: list = [Links("Part of", [INDEX, self.kind_link(kind, "")]),
                        Para(f"One of {len(kind.machines)} machines of {kind.name} "
                             f"({kind.describe()}). {words}", "headline")]
        h = self.heads.get(key)
        if h is not None:
            blocks += [Heading(2, report_headline.TITLE), *report_headline.machine_blocks(h)]
        blocks.append(Heading(2, "Against its kind"))
        if len(far):
            blocks += [Para(f"Its points off its kind's fleet (beyond {fleet.FENCE:g} "
                            "interquartile ranges of the kind's machines and by more than "
                            "its noise), slowest first."),
                       Table(["point", "unit", "its median", "the kind's median", "by"],
                             [[self.point_text(r), r["unit"], r["median"], r["fleet"],
                               _by(r["slower"])]
                              for r in far.to_dict("records")])]
        else:
            blocks.append(Para("None of its points is off its kind's fleet."))
        blocks.append(Folded(f"Every point against its kind ({points})", [Table(
            ["point", "unit", "its median", "its 95 % CI", "kind: median", "quartiles",
             "range", "machines"],
            [[self.point_text(r), r["unit"], r["median"],
              f"[{r['ci_low']:.4g}, {r['ci_high']:.4g}]", r["k_median"],
              f"[{r['k_q1']:.4g}, {r['k_q3']:.4g}]", f"[{r['k_min']:.4g}, {r['k_max']:.4g}]",
              r["k_runs"]] for r in mine.to_dict("records")])]))
        blocks += [Heading(2, "Runs"), run_table(runs), Heading(2, "Machine"),
                   *machine_blocks(runs[0])]
        failed = [b for b in bad if b["label"] in labels]
        if failed:
            blocks += [Heading(2, "Cases without results"),
                       Table(["run", "case", "status", "why"],
                             [[b["label"], b["case"], b["status"], b["error"]]
                              for b in failed])]
        return blocks


_HEADLINE_WORDS = ("Per kind and memory node: each figure is the median over the kind's "
                   "machines, in brackets the middle half of them (the interquartile range); "
                   "each machine's own figures are on its page. The source says where the "
                   "figures came from: measured on each machine, or assumed from a named "
                   "profile (a machine with one memory node has no slower tier to measure).")


def _span(machines: list[LoadedRun]) -> str:
    names = sorted(r.machine for r in machines)
    return f"{len(names)} ({names[0]} to {names[-1]})" if len(names) > 1 else names[0]


def _text(cell) -> str:
    """A table cell as plain text (a link's words)."""
    if isinstance(cell, list):
        return ", ".join(map(_text, cell))
    return cell.text if isinstance(cell, Link) else str(cell)


def _first_node(h) -> list[str]:
    """A machine's idle latency and every-thread read on its first memory node."""
    if h is None or not h.nodes:
        return ["", ""]
    row = h.nodes[0]
    return [c.text(False) if isinstance(c := row.cells.get(column), hl.Cell) else str(c or "")
            for column in ("idle latency", "read, all threads")]
