"""A fleet's report as an index and pages: the headline per kind of machine, machines
judged against their own kind, a page per kind and per machine that every link finds, and
safe page names. Built from copies of the committed example run."""
import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from cxlbench import report
from cxlbench.report import index
from cxlbench.report import runs as runs_
from cxlbench.report.document import Link, Links, Page, Table, to_html, to_markdown

from .conftest import cxlbench
from .test_report import EXAMPLE, _copy_run, _edit_meta, parse


def _scale_journal(run, factor: float) -> None:
    """Every journal summary's median and interval times factor (the headline reads
    them), as _copy_run's scale does to results.csv."""
    path = run / "cases.jsonl"
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    for e in entries:
        for s in (e.get("summary") or {}).values():
            for key in ("median", "ci_low", "ci_high"):
                if isinstance(s.get(key), (int, float)):
                    s[key] *= factor
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))


def _machine(root, name: str, scale: float, cpu: str | None = None):
    run = _copy_run(root, name, scale=scale)
    _scale_journal(run, scale)
    if cpu:
        _edit_meta(run, lambda m: m["topology"]["cpu"].update(model=cpu))
    return run


@pytest.fixture(scope="module")
def two_kinds(tmp_path_factory):
    """Eight machines of one CPU within 2 % of each other and one 1.5 times slower; four
    of another CPU, all 1.5 times the first kind: slow against the first kind, not
    against their own."""
    tmp = tmp_path_factory.mktemp("kinds")
    root = tmp / "results"
    for i in range(8):
        _machine(root, f"a-{i:02}", 1 + 0.002 * i)
    _machine(root, "a-slow", 1.5)
    for i in range(4):
        _machine(root, f"b-{i:02}", 1.5 + 0.002 * i, cpu="Other CPU 9000")
    lines: list[str] = []
    html_path, md_path = report.build([root], tmp / "out", lines=lines)
    return root, html_path, md_path, lines


def test_machines_are_judged_against_their_own_kind(two_kinds):
    root, html_path, md_path, lines = two_kinds
    md = md_path.read_text()
    assert "> 13 machines of 2 kinds; 1 slower than their kind's fleet at some point by " \
           "more than their noise, the slowest first: a-slow." in md
    kinds = md[md.index("## Kinds of machine"):md.index("## Machines slower")]
    assert "| [kind 1](pages/kind-1.md) | 9 (a-00 to a-slow) | AMD EPYC" in kinds
    assert "| [kind 2](pages/kind-2.md) | 4 (b-00 to b-03) | Other CPU 9000" in kinds
    assert "b-0" not in md[md.index("## Machines slower"):md.index("## Every machine")]
    kind2 = (md_path.parent / "pages" / "kind-2.md").read_text()
    assert "### 4 machines alike: b-00, b-01, b-02, b-03" in kind2
    assert "a-slow" not in kind2 and "Machines slower than the kind's fleet" not in kind2
    # the terminal prints the fleet's headline, not thirteen machines' own
    assert lines[1] == "FLEET HEADLINE" and not any(x.startswith("HEADLINE") for x in lines)
    assert any("kind 2: 4 (b-00 to b-03), Other CPU 9000" in x for x in lines)


def test_the_fleet_headline_is_each_kinds_median_machine(two_kinds):
    """A row per kind and memory node; the second kind's idle latency 1.5 times the
    first's (as its machines' journals say), the interquartile range beside it."""
    root, *_ = two_kinds
    runs = runs_.load_runs([root])
    f = index.Fleet(runs, report.summary(runs))
    first, second = (f._rows[k.number] for k in f.kinds)
    names = [row[0] for row in first]
    assert names[0].startswith("node 0") and names[-1].startswith("slower tier")
    assert [row[1] for row in first] == ["measured", "assumed: profile cxl-asic"]
    assert first[0][2] == 9 and second[0][2] == 4

    def ns(text):
        value, unit = re.match(r"([\d.]+) (\w+) \[", text).groups()
        return float(value) * {"ns": 1, "us": 1000}[unit]
    assert ns(second[0][3]) / ns(first[0][3]) == pytest.approx(1.5, rel=0.02)
    assert first[0][-1] == "the only node" and "2.5x latency" in first[-1][-1]


def test_every_link_of_a_fleet_report_finds_its_page(two_kinds):
    root, html_path, md_path, _ = two_kinds
    out = html_path.parent
    pages = sorted((out / "pages").glob("*.html"))
    assert {p.stem for p in pages} == {"kind-1", "kind-2", "machine-a-slow",
                                       *(f"machine-a-{i:02}" for i in range(8)),
                                       *(f"machine-b-{i:02}" for i in range(4))}
    for page in [html_path, *pages]:
        parse(page)
        hrefs = re.findall(r'<a href="([^"]+)"', page.read_text())
        assert hrefs or page == html_path
        for href in hrefs:
            assert (page.parent / href).is_file(), (page.name, href)
    for page in [md_path, *(out / "pages").glob("*.md")]:
        for target in re.findall(r"\]\(([^)]+)\)", page.read_text()):
            assert (page.parent / target).is_file(), (page.name, target)
    index_html = html_path.read_text()
    assert 'href="pages/kind-2.html"' in index_html and \
        'href="pages/machine-a-slow.html"' in index_html
    assert "data:image/png" not in index_html           # the figures are the kinds'


def test_a_machine_page_says_where_it_stands_in_its_kind(two_kinds):
    root, html_path, *_ = two_kinds
    pages = html_path.parent / "pages"
    slow = (pages / "machine-a-slow.md").read_text()
    assert "Part of [the fleet's index](../report.md) · [kind 1](kind-1.md)" in slow
    assert re.search(r"One of 9 machines of kind 1 \(AMD EPYC.*\)\. Slower than its kind's "
                     r"fleet at \d+ of its \d+ points by more than its noise; worst ", slow)
    assert "| ns |" in slow and "% slower |" in slow and "% faster |" in slow
    assert "**Every point against its kind (" in slow
    calm = (pages / "machine-b-01.md").read_text()
    assert "Within its kind's fleet (or faster) at each of its" in calm
    assert "None of its points is off its kind's fleet." in calm
    assert "## Machine" in calm and "b-01" in calm


def test_page_names_are_safe_whatever_the_machine_is_called():
    assert index.page_name("machine", "lab-01.example") == "machine-lab-01.example"
    odd = index.page_name("machine", "../../etc/passwd")
    assert "/" not in odd and re.fullmatch(r"machine-[A-Za-z0-9_.-]+-[0-9a-f]{8}", odd)
    assert index.page_name("machine", "a/b") != index.page_name("machine", "a_b")
    assert len(index.page_name("machine", "x" * 500)) < 80
    with pytest.raises(ValueError, match="may not be named"):
        report._files("t", [], [Page("../escape", "t", [])])


def test_links_are_written_for_each_format_and_escaped():
    evil = Link("<b>m</b>", "pages/machine-m")
    blocks = [Links("Part of", [evil]), Table(["machine"], [[evil], [[evil, "and 3 more"]]])]
    page = to_html("t", blocks)
    assert '<a href="pages/machine-m.html">&lt;b&gt;m&lt;/b&gt;</a>' in page
    assert "<b>m</b>" not in page and ", and 3 more" in page
    md = to_markdown("t", blocks, "figures")
    assert "[&lt;b&gt;m&lt;/b&gt;](pages/machine-m.md)" in md


def test_a_single_report_over_a_fleets_folder_removes_its_pages(tmp_path):
    root = tmp_path / "results"
    for i in range(7):
        _copy_run(root, f"m-{i}", scale=1 + 0.01 * i)
    out = tmp_path / "out"
    report.build([root], out)
    assert len(list((out / "pages").glob("*.html"))) == 8       # a kind and 7 machines
    report.build([EXAMPLE], out)
    assert not list((out / "pages").iterdir())                 # ours, so removed
    assert "pages/" not in (out / ".cxlbench-report.json").read_text()


def test_cxlbench_report_prints_the_fleets_headline(two_kinds, tmp_path):
    root, *_ = two_kinds
    r = cxlbench("report", str(root), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert "FLEET HEADLINE" in r.stdout and "13 machines of 2 kinds" in r.stdout
    assert r.stdout.count("HEADLINE") == 1
    assert "report: " in r.stdout


def test_past_200_runs_a_box_has_a_violin_not_a_dot_each():
    """The runs' density drawn behind a narrower box; at 200 or fewer, a dot a run."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    from cxlbench.report.figures import draw
    rng = np.random.default_rng(0)

    def drawn(runs: int, few: int = 0) -> tuple[int, int]:
        """(violins, dots) of a group of `runs` runs, and one of `few` beside it."""
        groups = ["read"] * runs + ["write"] * few
        g = pd.DataFrame({"_group": groups, "label": [f"m{i}" for i in range(len(groups))],
                          "median": rng.normal(40, 1, len(groups)), "unit": "GB/s"})
        g["ci_low"], g["ci_high"] = g["median"] * 0.99, g["median"] * 1.01
        fig, ax = plt.subplots()
        draw._fleet_boxes(ax, g, ["read", "write"], 0.0, 0.8, "fleet", "tab:blue")
        violins = sum(isinstance(c, PolyCollection) for c in ax.collections)
        dots = sum(len(c.get_offsets()) for c in ax.collections
                   if not isinstance(c, PolyCollection))
        plt.close(fig)
        return violins, dots
    few, many = drawn(draw.DOTS), drawn(draw.DOTS + 50)
    assert few == (0, draw.DOTS)
    assert many[0] == 1 and many[1] < 20          # only the runs off the fleet dotted
    violins, dots = drawn(draw.DOTS + 50, few=30)  # decided per group: the small one dotted
    assert violins == 1 and 30 <= dots < 50


def test_fleet_collect_past_six_machines_writes_the_index(tmp_path):
    """collect over seven machines: their states folded, then the index and its pages
    (each machine against its kind, not seven comparisons with one); --against still
    compares each with the machine it names."""
    from types import SimpleNamespace

    from cxlbench.fleet import collect, status
    root = tmp_path / "results"
    found = [status.Machine(f"n{i}", "done", "100", run=_copy_run(root, f"n{i}",
                                                                  scale=1 + 0.01 * i),
                            finished=1, cases=1) for i in range(7)]
    found.append(status.Machine("n7", "failed", "100", reason="node failure"))
    fleet = SimpleNamespace(data={"suite": "quick"}, job_ids=lambda: ["100"], path=root)
    html_path, md_path = collect.build(fleet, found, tmp_path / "out")
    md = md_path.read_text()
    assert "**The 8 machines: state, job and run**" in md and "| n7 | failed |" in md
    assert "No results from n7" in md and "judged against its kind's fleet" in md
    assert "## Fleet headline" in md and "against n0" not in md
    assert (tmp_path / "out" / "pages" / "machine-n6.md").is_file()
    _, md_path = collect.build(fleet, found, tmp_path / "against", against="n0")
    md = md_path.read_text()
    assert "### n6 against n0" in md and not (tmp_path / "against" / "pages").exists()


def test_settings_that_differ_make_no_kind_of_their_own(tmp_path):
    """Machines of one hardware whose frequency read at start, kernel command line, node
    memory or THP differ are one kind, judged together; the one with THP off says so on
    its page (the frequency, read apart on each, is not a difference)."""
    root = tmp_path / "results"
    for i in range(7):
        run = _machine(root, f"m-{i}", 1 + 0.002 * i)

        def vary(m, i=i):
            m["settings"].update(cpu_mhz=2000.0 + i, kernel_cmdline=f"root=UUID=000{i}")
            m["topology"]["nodes"][0]["mem_total"] += i * 300 * 2**20
            if i == 6:
                m["settings"]["thp_enabled"] = "never"
        _edit_meta(run, vary)
    _, md_path = report.build([root], tmp_path / "out")
    md = md_path.read_text()
    assert "> 7 machines of 1 kind;" in md
    page = (tmp_path / "out" / "pages" / "machine-m-6.md").read_text()
    differ = page[page.index("## Settings that differ from its kind's"):page.index("## Runs")]
    assert "| thp_enabled | never |" in differ
    assert "cpu_mhz" not in differ and "kernel command line" in differ
    kind = (tmp_path / "out" / "pages" / "kind-1.md").read_text()
    assert "| cpu_mhz | varies: 2000 to 2006 |" in kind
    assert "| thp_enabled | varies: " in kind and "never (1 machines)" in kind


def test_a_machine_is_judged_once_however_many_runs_it_made(tmp_path):
    """A slow machine measured three times is one slow machine, its newest run judged;
    the kind's statistics count machines, not runs."""
    root = tmp_path / "results"
    for i in range(6):
        _machine(root, f"m-{i}", 1 + 0.002 * i)
    slow = _machine(root, "m-slow", 1.5)
    for n, when in enumerate(("2026-12-01T00:00:00+0000", "2026-12-02T00:00:00+0000")):
        again = slow.parent / f"2026120{n + 1}-000000"
        shutil.copytree(slow, again)
        _edit_meta(again, lambda m, when=when, rid=again.name: m.update(started=when,
                                                                       run_id=rid))
    runs = runs_.load_runs([root])
    assert len(runs) == 9
    f = index.Fleet(runs, report.summary(runs))
    assert set(f.points["k_machines"]) == {7}
    assert f.slow[1] == ["machine-m-slow"]
    newest = max((r for r in runs if r.machine == "m-slow"), key=lambda r: r.meta["started"])
    assert set(f.points.loc[f.points["_m"] == "machine-m-slow", "label"]) == {newest.label}
    assert f.words().startswith("7 machines of 1 kind; 1 slower") and "m-slow." in f.words()
    assert len(f.slow_table("pages/").rows) == 1


def test_one_host_name_over_two_hardwares_is_two_machines_with_a_page_each(tmp_path):
    root = tmp_path / "results"
    for i in range(6):
        _machine(root, f"m-{i}", 1 + 0.002 * i)
    other = _copy_run(tmp_path / "elsewhere", "m-0")
    _edit_meta(other, lambda m: m["topology"]["cpu"].update(model="Other CPU 9000"))
    _, md_path = report.build([root, other], tmp_path / "out")
    pages = sorted(p.stem for p in (tmp_path / "out" / "pages").glob("machine-m-0*.html"))
    assert len(pages) == 2 and pages[0] == "machine-m-0" and \
        re.fullmatch(r"machine-m-0-[0-9a-f]{8}", pages[1])
    md = md_path.read_text()
    assert "7 machines of 2 kinds" in md
    assert "too few to judge (1; 4 are needed)" in md


def test_a_fleet_without_one_result_still_reports(tmp_path):
    """Seven machines whose runs stopped before their first case: an index that says
    so, no figure and no crash."""
    root = tmp_path / "results"
    for i in range(7):
        run = _copy_run(root, f"m-{i}")
        (run / "results.csv").write_text((run / "results.csv").read_text().splitlines()[0]
                                         + "\n")
        (run / "cases.jsonl").write_text("")
    _, md_path = report.build([root], tmp_path / "out")
    md = md_path.read_text()
    assert "7 machines of 1 kind; none slower" in md
    assert "## Every machine" in md
    assert "Cases without results" in (tmp_path / "out" / "pages" / "machine-m-3.md") \
        .read_text()


def test_a_pages_link_in_a_report_folder_stops_only_a_report_with_pages(tmp_path):
    out = tmp_path / "out"
    report.build([EXAMPLE], out)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "pages").symlink_to(elsewhere)
    report.build([EXAMPLE], out)                    # no pages: the link is not in the way
    root = tmp_path / "results"
    for i in range(7):
        _copy_run(root, f"m-{i}")
    with pytest.raises(report.OutputError, match="pages is a symbolic link"):
        report.build([root], out)
    assert not list(elsewhere.iterdir())
