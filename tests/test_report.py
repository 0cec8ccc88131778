"""Reports and comparisons: built from the committed run of tests/data/every-family.toml
(a real run on a one-node VM), and the statistics on synthetic data."""
import html.parser
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from cxlbench import report, results
from cxlbench.errors import ResultsError
from cxlbench.report import compare_runs as cmp
from cxlbench.report import runs as runs_
from .conftest import cxlbench

DATA = Path(__file__).parent / "data" / "runs"
EXAMPLE = next(DATA.glob("vm/*"))
# Each family's figure, by its id in the HTML.
FAMILY_FIGURES = {"chase": "latency", "bandwidth": "bandwidth", "random_bw": "random-bandwidth",
                  "loaded_latency": "loaded-latency", "matrix": "matrix-latency",
                  "interleave_sweep": "interleave-read", "pingpong": "pingpong",
                  "atomics": "atomics", "flush": "flush", "migrate": "migration",
                  "migrate_touch": "migration-spike"}


class Checker(html.parser.HTMLParser):
    """Collects figures, image sources and script tags; fails on unbalanced tags."""
    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self):
        super().__init__()
        self.stack, self.figures, self.images, self.scripts = [], [], [], 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "figure":
            self.figures.append(attrs.get("id"))
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        if tag == "script":
            self.scripts += 1
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()


def parse(path: Path) -> Checker:
    c = Checker()
    c.feed(path.read_text())
    c.close()
    assert c.stack == [], f"unclosed tags: {c.stack}"
    return c


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    html_path, md_path = report.build([EXAMPLE], out)
    return out, html_path, md_path


def test_example_run_covers_every_family():
    families = set(report.summary(runs_.load_runs([EXAMPLE]))["benchmark"])
    assert families == set(FAMILY_FIGURES)


def test_report_holds_a_figure_per_family_inline(built):
    out, html_path, md_path = built
    page = parse(html_path)
    assert set(FAMILY_FIGURES.values()) <= set(page.figures)
    assert "migration-timeline" in page.figures
    # Self-contained: every image inline, nothing fetched, no script at all.
    assert page.images and all(src.startswith("data:image/png;base64,") for src in page.images)
    assert page.scripts == 0 and "http://" not in html_path.read_text()
    text = html_path.read_text()
    assert "<th>HMAT access0</th>" in text and "numa_balancing" in text


def test_captions_say_how_it_was_measured(built):
    text = built[1].read_text()
    cap = text.split('<figure id="latency">')[1].split("</figcaption>")[0]
    assert "median of n=3 repetitions after 1 warm-up" in cap
    assert "95 % distribution-free confidence interval" in cap
    assert "page=4k" in cap and "Placement verified on every case" in cap


def test_markdown_figures_exist_beside_it(built):
    out, _, md_path = built
    md = md_path.read_text()
    for key in FAMILY_FIGURES.values():
        assert f"(figures/{key}.png)" in md
        png = out / "figures" / f"{key}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _copy_run(dst_root: Path, machine: str = "vm", job_rename: tuple[str, str] | None = None,
              scale: float = 1.0) -> Path:
    """A copy of the example run, optionally under another machine name, with a job renamed
    or every value scaled."""
    dst = dst_root / machine / EXAMPLE.name
    shutil.copytree(EXAMPLE, dst)
    if machine != "vm":             # a copy from another machine says so in its run.json
        _edit_meta(dst, lambda m: m["topology"]["machine"].update(hostname=machine))
    if job_rename:
        old, new = job_rename
        for name in ("run.json", "cases.jsonl", "results.csv"):
            p = dst / name
            text = p.read_text()
            if name == "results.csv":
                import csv
                import io
                rows = list(csv.reader(io.StringIO(text)))
                for row in rows[1:]:
                    row[1] = new if row[1] == old else row[1]
                    row[2] = row[2].replace(f"{old}/", f"{new}/")
                buf = io.StringIO()
                csv.writer(buf).writerows(rows)
                text = buf.getvalue()
            else:
                text = text.replace(json.dumps(f"{old}/")[:-1], json.dumps(f"{new}/")[:-1]) \
                           .replace(f'"job": "{old}"', f'"job": {json.dumps(new)}')
            p.write_text(text)
    if scale != 1.0:                # by csv: pandas would rename format 1's second metric
        import csv
        import io
        rows = list(csv.reader(io.StringIO((dst / "results.csv").read_text())))
        col = rows[0].index("value")
        for row in rows[1:]:
            row[col] = repr(float(row[col]) * scale)
        buf = io.StringIO()
        csv.writer(buf).writerows(rows)
        (dst / "results.csv").write_text(buf.getvalue())
    return dst


def _edit_meta(run_dir: Path, change) -> None:
    meta = json.loads((run_dir / "run.json").read_text())
    change(meta)
    (run_dir / "run.json").write_text(json.dumps(meta))


def test_strings_from_results_are_escaped(tmp_path):
    evil = "<script>alert(1)</script>"
    run = _copy_run(tmp_path / "results", job_rename=("latency", evil))
    html_path, md_path = report.build([run], tmp_path / "out")
    text = html_path.read_text()
    assert evil not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert parse(html_path).scripts == 0
    assert evil not in md_path.read_text()


def test_several_machines_aggregate_with_a_line_each(tmp_path):
    root = tmp_path / "results"
    _copy_run(root, "lab-a")
    _copy_run(root, "lab-b", scale=1.5)
    runs = runs_.load_runs([root], latest=True)
    assert [r.label for r in runs] == ["lab-a", "lab-b"]
    html_path, _ = report.build([root], tmp_path / "out", latest=True)
    text = html_path.read_text()
    assert "different machines" in text
    # One table with a column per machine; lab-b's values are lab-a's times 1.5.
    table = report.across_table(report.summary(runs).query("benchmark == 'chase'"))
    assert table.headers[-2:] == ["lab-a", "lab-b"]
    assert all(b == pytest.approx(1.5 * a) for *_, a, b in table.rows)
    fig = report._figures.figures_for("chase", report.summary(runs).query("benchmark == 'chase'")
                                      .reset_index(drop=True), runs)[0]
    assert "Runs: lab-a, lab-b" in fig.caption


def test_report_of_no_runs_is_a_clear_error(tmp_path):
    r = cxlbench("report", str(tmp_path), "-o", str(tmp_path / "out"))
    assert r.returncode == 2 and "holds no cxlbench runs" in r.stderr


# ---- statistics --------------------------------------------------------------------------

def test_exact_mann_whitney_matches_the_known_extremes():
    # Complete separation of 5 and 5: U = 0 has probability 1/252 on each side.
    assert cmp.mann_whitney([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    assert cmp.mann_whitney([1, 2, 3], [1, 2, 3]) == 1.0


def test_identical_distributions_are_not_significant():
    rng = np.random.default_rng(1)
    flagged = 0
    for _ in range(200):
        a, b = rng.normal(100, 5, 10), rng.normal(100, 5, 10)
        flagged += cmp.compare_values(a, b)["significant"]
    assert flagged / 200 <= 0.10      # about alpha = 5 % by chance, no more
    same = rng.normal(100, 5, 10)
    assert cmp.compare_values(same, same.copy())["verdict"] == "not significant"


def test_ten_percent_shift_with_tight_noise_is_significant():
    rng = np.random.default_rng(2)
    a, b = rng.normal(100, 0.5, 8), rng.normal(110, 0.5, 8)
    out = cmp.compare_values(a, b)
    assert out["significant"] and out["p"] < 0.01
    assert out["ci_low"] <= out["ratio"] <= out["ci_high"]
    assert 1.08 < out["ci_low"] and out["ci_high"] < 1.12
    assert out["verdict"] == f"{(out['ratio'] - 1) * 100:+.1f} %"
    assert abs(out["ratio"] - 1.1) < 0.01


def test_too_few_repetitions_say_so():
    out = cmp.compare_values([1.0, 1.1], [2.0, 2.1])
    assert not out["significant"] and "too few" in out["verdict"]


def test_large_samples_use_the_normal_approximation():
    rng = np.random.default_rng(3)
    a, b = rng.normal(100, 1, 80), rng.normal(100.8, 1, 80)
    assert 80 * 80 > cmp.EXACT_LIMIT
    assert cmp.compare_values(a, b)["significant"]


# ---- compare -----------------------------------------------------------------------------

def test_compare_pairs_same_parameters_and_lists_the_rest(tmp_path):
    a = _copy_run(tmp_path / "a")
    b = _copy_run(tmp_path / "b", scale=1.10)
    # One case in B measures something else (a size change): it must not be paired.
    cases = [json.loads(line) for line in (b / "cases.jsonl").read_text().splitlines()]
    for c in cases:
        if c["case"] == "latency/004":
            c["params"]["size"] *= 2
        if c["case"] == "latency/003":
            c["params"]["repeat"] = 9       # not a measured parameter: still paired
    (b / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    runs, table, unpaired, _ = report.compare(a, b)
    assert {(u["side"], u["case"]) for u in unpaired} == {("A", "latency/004"),
                                                         ("B", "latency/004")}
    assert all("size=64M vs 128M" in u["why"] or "size=128M vs 64M" in u["why"]
               for u in unpaired)
    assert "latency/003" in set(table["case_a"])
    # Every value scaled by exactly 1.1: with 3 repetitions a side that is still "too few".
    assert (table["ratio"].dropna().round(6) == 1.1).all()  # NaN: A median 0
    assert not table["significant"].any()


def test_compare_cli_writes_a_report_and_labels_machines(tmp_path):
    a = _copy_run(tmp_path / "results", "vm")
    b = _copy_run(tmp_path / "results", "lab", scale=0.5)
    out = tmp_path / "cmp"
    r = cxlbench("compare", str(a), str(b), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "ACROSS MACHINES: A on vm, B on lab" in r.stdout
    assert "hostname  vm -> lab" in r.stdout
    assert "metrics compared" in r.stdout
    # A header, then rows named by what varies between the cases, the case id last.
    lines = r.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["measured",
                                                                           "metric"])
    assert lines[head].rstrip().endswith("case")
    rows = lines[head + 1:head + 4]
    assert all(re.match(r"  \w+ \S+=\S+", row) and re.search(r" \w+/\d{3}$", row)
               for row in rows), rows
    page = parse(out / "report.html")
    assert "latency" in page.figures
    assert "ACROSS MACHINES" in (out / "report.html").read_text()


def test_compare_refuses_a_folder_of_several_runs(tmp_path):
    root = tmp_path / "results"
    _copy_run(root, "x")
    _copy_run(root, "y")
    with pytest.raises(ResultsError, match="holds 2 runs"):
        report.compare(root, root / "x")


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="Debian's chromium is not installed (apt-get install chromium)")
def test_headless_chromium_renders_without_console_errors(built, tmp_path):
    _, html_path, _ = built
    shot = tmp_path / "shot.png"
    r = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                        "--enable-logging=stderr", "--v=0", "--window-size=1200,4000",
                        f"--screenshot={shot}", html_path.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", r.stderr[-2000:]
    console = [line for line in r.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []


def test_across_machines_comes_from_what_runs_recorded(tmp_path):
    """Not from folder names: a copy filed under another name is the same machine; a
    host of the same name with other hardware is not."""
    a = _copy_run(tmp_path / "a")
    renamed = tmp_path / "b" / "elsewhere" / EXAMPLE.name
    shutil.copytree(EXAMPLE, renamed)
    runs = report.comparison(a, renamed)[0]
    assert runs[0].machine == runs[1].machine == "vm"
    assert report.across_machines(*runs) is None
    other = _copy_run(tmp_path / "c")
    _edit_meta(other, lambda m: m["topology"]["cpu"].update(isas=["avx2", "avx512"]))
    runs = report.comparison(a, other)[0]
    assert report.across_machines(*runs) == \
        "A and B ran on hosts both named vm whose ISAs differ"
    headings = [b for b in report.machines_blocks(runs) if isinstance(b, report.Heading)]
    assert len(headings) == 2             # each machine's section, though one name


def _changed_settings(meta):
    meta["topology"]["machine"]["kernel"] = "6.1.0-18-amd64"
    meta["settings"].update(thp_enabled="always", numa_balancing="memory tiering",
                            governor="performance", smt="on",
                            kernel_cmdline="BOOT_IMAGE=/vmlinuz root=/dev/sda1 " + "x" * 60)
    meta["cxlbench_version"] = "0.2.0"
    meta["emulated"] = {"topology": "cxl", "qemu": "7.2", "accel": "tcg"}
    meta["build"] = {"compiler": "GCC 13.1.0", "cflags": "-O2"}


def test_compare_prints_every_setting_that_differs_above_the_table(tmp_path):
    a = _copy_run(tmp_path / "a")
    b = _copy_run(tmp_path / "b")
    _edit_meta(a, lambda m: m["settings"].update(kernel_cmdline="quiet"))
    _edit_meta(b, _changed_settings)
    r = cxlbench("compare", str(a), str(b), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    table_starts = out.index("latency/000")
    # An emulated run is filed as emulated-<topology>: another machine.
    assert out.startswith("ACROSS MACHINES: A on vm, B on emulated-cxl\n")
    for line in ("kernel          6.18.44-fc-v782 -> 6.1.0-18-amd64",
                 "thp_enabled     madvise -> always",
                 "numa_balancing  disabled -> memory tiering",
                 "governor        none -> performance",
                 "cxlbench        0.1.0 6834ce6 -> 0.2.0 6834ce6",
                 "emulated        no -> cxl (QEMU 7.2, tcg)"):
        assert line in out and out.index(line) < table_starts, line
    # A long value goes on lines of its own; what only B recorded is named.
    assert "  kernel command line\n    A: quiet\n    B: BOOT_IMAGE=/vmlinuz " in out
    assert "not recorded by A (an older cxlbench): smt, compiler, compiler flags" in out
    text = (tmp_path / "out" / "report.html").read_text()
    assert "<h2>Settings that differ</h2>" in text
    assert "<td>thp_enabled</td><td>madvise</td><td>always</td>" in text
    assert text.index("Settings that differ") < text.index("<h2>Changes</h2>")


def test_compare_of_two_runs_recording_the_same_settings(tmp_path):
    a, b = _copy_run(tmp_path / "a"), _copy_run(tmp_path / "b")
    for run in (a, b):
        _edit_meta(run, _changed_settings)
    r = cxlbench("compare", str(a), str(b))
    assert "settings: every setting both runs recorded is the same" in r.stdout
    assert "ACROSS MACHINES" not in r.stdout and "not recorded" not in r.stdout
    # A sampled clock and a measured TSC rate move between runs: not a difference.
    _edit_meta(b, lambda m: (m["settings"].update(cpu_mhz=1200.0),
                             m["timer"].update(tsc_hz=m["timer"]["tsc_hz"] * 1.001)))
    _edit_meta(a, lambda m: m["settings"].update(cpu_mhz=3600.0))
    runs = report.comparison(a, b)[0]
    assert report.setting_differences(*runs) == ([], {"A": [], "B": []})


# ---- results format: the committed run was written in format 1 ---------------------------

def test_format_1_run_is_read_upgraded_and_left_as_it_is():
    header = (EXAMPLE / "results.csv").read_text().splitlines()[0].split(",")
    assert header.count("metric") == 2          # the matrix option beside the metric
    df = results.load(EXAMPLE)
    assert list(df.columns).count("metric") == 1 and "metric.1" not in df.columns
    matrix = df[df["benchmark"] == "matrix"].drop_duplicates("case").set_index("case")
    assert matrix["measure"].to_dict() == {"matrix/000": "latency", "matrix/001": "bandwidth"}
    assert set(df["metric"]) >= {"latency", "bandwidth", "throughput"}
    meta = df.attrs["run"]
    assert meta["format_version"] == results.FORMAT_VERSION and meta["machine_id"] == "vm"
    assert all("metric" not in c["params"] for c in meta["cases"])
    assert meta["columns"] == list(df.columns)
    run = results.Run.open(EXAMPLE)
    assert run.stored_version == 1
    assert run.finished()["matrix/001"]["params"]["measure"] == "bandwidth"
    assert json.loads((EXAMPLE / "run.json").read_text())["format_version"] == 1
    # Reports of it name the option by its new name.
    frame = report.summary(runs_.load_runs([EXAMPLE]))
    assert {p.get("measure") for p in frame.query("benchmark == 'matrix'")["params"]} == \
        {"latency", "bandwidth"}


def test_format_1_run_compares_with_itself_upgraded(tmp_path):
    a = _copy_run(tmp_path / "a")
    b = _copy_run(tmp_path / "b")
    results.Run.open(b).repair()
    assert json.loads((b / "run.json").read_text())["format_version"] == results.FORMAT_VERSION
    runs, table, unpaired, _ = report.compare(a, b)
    assert unpaired == [] and {"matrix/000", "matrix/001"} <= set(table["case_a"])
    assert (table["median_a"] == table["median_b"]).all()
