"""Reports at the edges of paths: links where cxlbench keeps its own files are refused and
never written through, names with bytes that are not UTF-8 are reported (shown as \\xNN),
and one run reached by two paths is one run."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cxlbench import report
from cxlbench.report import runs as runs_
from cxlbench.report.figures import Figure
from cxlbench.results import machine_id

EXAMPLE = next((Path(__file__).parent / "data" / "runs" / "vm").glob("*"))
PNG = b"\x89PNG\r\n\x1a\nmine"
E9 = os.fsdecode(b"\xe9")                   # the byte 0xE9 alone: not UTF-8 ("\udce9")


def run_cli(*args):
    """The CLI as a process, its output decoded as the terminal would show the bytes. Its
    output is strict UTF-8, as under a UTF-8 locale: a path that is not UTF-8 must still
    print (cxlbench passes its bytes through)."""
    r = subprocess.run([sys.executable, "-m", "cxlbench", *map(str, args)],
                       capture_output=True, timeout=300,
                       env={**os.environ, "CXLBENCH_TEST_KERNELS": "1",
                            "PYTHONIOENCODING": "utf-8"})
    return r.returncode, os.fsdecode(r.stdout), os.fsdecode(r.stderr)


@pytest.fixture(scope="module")
def blocks():
    return report.report_blocks(runs_.load_runs([EXAMPLE]))


def elsewhere(tmp_path: Path) -> Path:
    """A folder outside the report folder, holding a file of its own."""
    d = tmp_path / "elsewhere"
    d.mkdir()
    (d / "latency.png").write_bytes(PNG)
    return d


def listing(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


# ---- links where cxlbench keeps its own files ----------------------------------------

def test_force_does_not_write_through_a_linked_figures_folder(tmp_path):
    """The issue's case: `cxlbench report RUN -o OUT --force` with OUT/figures a link."""
    target = elsewhere(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "figures").symlink_to(target)
    rc, _, err = run_cli("report", EXAMPLE, "-o", out, "--force")
    assert rc == 2, err
    assert f"error: {out / 'figures'} is a symbolic link (to {target})" in err
    assert listing(target) == {"latency.png": PNG}
    assert sorted(p.name for p in out.iterdir()) == ["figures"]


def test_a_linked_figures_folder_of_an_earlier_report_is_refused(tmp_path, blocks):
    """Without this, figures would land in the link's target and stale figures of the
    earlier report be removed from there."""
    out, target = tmp_path / "out", elsewhere(tmp_path)
    report.write(out, "full", blocks)
    (target / "bandwidth.png").write_bytes((out / "figures" / "bandwidth.png").read_bytes())
    shutil.rmtree(out / "figures")
    (out / "figures").symlink_to(target)
    for force in (False, True):
        with pytest.raises(report.OutputError, match="figures is a symbolic link"):
            report.write(out, "latency only", [b for b in blocks if not isinstance(b, Figure)
                                               or b.key == "latency"], force=force)
    assert sorted(listing(target)) == ["bandwidth.png", "latency.png"]
    assert (target / "latency.png").read_bytes() == PNG


@pytest.mark.parametrize("name", ["report.html", "report.md", report.MANIFEST,
                                  "figures/latency.png"])
def test_a_link_in_place_of_a_file_of_ours_is_refused_even_with_force(tmp_path, blocks,
                                                                        name):
    out, target = tmp_path / "out", elsewhere(tmp_path)
    report.write(out, "old", blocks)
    (out / name).unlink()
    (out / name).symlink_to(target / "latency.png")
    with pytest.raises(report.OutputError) as e:
        report.write(out, "new", blocks, force=True)
    assert str(e.value).startswith(f"{out / name} is a symbolic link (to "
                                   f"{target / 'latency.png'})")
    assert (out / name).is_symlink() and listing(target) == {"latency.png": PNG}


def test_figures_swapped_for_a_link_while_writing_are_not_followed(tmp_path, blocks,
                                                                   monkeypatch):
    """figures/ checked, then replaced by a link before the figures move: they do not
    follow it (the folder is held open by what was checked, without following links)."""
    out, target = tmp_path / "out", elsewhere(tmp_path)
    report.write(out, "old", blocks)
    real = report._create

    def swap(path, data):
        if path.name == "report.html":
            shutil.rmtree(out / "figures")
            (out / "figures").symlink_to(target)
        return real(path, data)

    monkeypatch.setattr(report, "_create", swap)
    with pytest.raises(report.OutputError, match="cannot write the report to"):
        report.write(out, "new", blocks)
    assert listing(target) == {"latency.png": PNG}
    assert not list(out.glob(f"{report.TMP_PREFIX}*"))


def test_new_files_are_never_opened_through_a_link(tmp_path):
    target = elsewhere(tmp_path)
    link = tmp_path / "link.png"
    link.symlink_to(target / "latency.png")
    with pytest.raises(FileExistsError):
        report._create(link, b"new")
    with pytest.raises(OSError):             # ELOOP: the manifest is not read through one
        report._read(link)
    assert listing(target) == {"latency.png": PNG}


def test_an_output_folder_that_is_itself_a_link_is_written(tmp_path, blocks):
    """-o naming a link to a folder: the user chose where it points."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "out").symlink_to(real)
    report.write(tmp_path / "out", "t", blocks)
    assert (real / "report.html").is_file() and (real / "figures" / "latency.png").is_file()
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(report.OutputError, match="dangling is a symbolic link to .*nowhere, "
                                                 "which does not exist"):
        report.write(dangling, "t", blocks)


def test_compare_does_not_write_through_a_linked_figures_folder(tmp_path):
    b = tmp_path / "b"
    shutil.copytree(EXAMPLE, b)
    out, target = tmp_path / "out", elsewhere(tmp_path)
    out.mkdir()
    (out / "figures").symlink_to(target)
    rc, _, err = run_cli("compare", EXAMPLE, b, "-o", out, "--force")
    assert rc == 2 and f"{out / 'figures'} is a symbolic link" in err, err
    assert listing(target) == {"latency.png": PNG}


# ---- bytes that are not UTF-8 in paths -------------------------------------------------

SUITE = """
[global]
repeat = 2
warmup = 0
[lat]
bench = "chase"
size = "64K"
loads = 20000
"""


@pytest.fixture(scope="module")
def cafe(tmp_path_factory):
    """A real run of a suite caf\\xe9/caf\\xe9.toml (so its source path, its command line and
    its suite name hold the byte), and a copy of it in a run folder named run-\\xe9."""
    root = tmp_path_factory.mktemp("paths")
    suite = root / f"caf{E9}" / f"caf{E9}.toml"
    suite.parent.mkdir()
    suite.write_text(SUITE)
    rc, _, err = run_cli("run", suite, "--results-dir", root / "results")
    assert rc == 0, err
    [a] = (root / "results" / machine_id()).iterdir()
    b = a.parent / f"run-{E9}"
    shutil.copytree(a, b)
    assert json.loads((a / "run.json").read_text())["suite"]["source"] == str(suite)
    return a, b


def test_a_run_whose_paths_are_not_utf8_is_reported(cafe, tmp_path):
    a, b = cafe
    out = tmp_path / f"out-{E9}"
    rc, out_text, err = run_cli("report", a, b, "-o", out)
    assert rc == 0, err
    assert f"report: {out}/report.html" in out_text
    html_text = (out / "report.html").read_text(encoding="utf-8")
    md = (out / "report.md").read_text(encoding="utf-8")
    shown = "caf\\xe9/caf\\xe9.toml"            # each undecodable byte as \xNN
    assert shown in html_text and shown in md
    assert f"<h1>cxlbench report: caf\\xe9 on {machine_id()}</h1>" in html_text
    assert md.startswith(f"# cxlbench report: caf\\xe9 on {machine_id()}\n")
    assert (out / "figures" / "latency.png").is_file()


def test_a_comparison_whose_paths_are_not_utf8_is_written(cafe, tmp_path):
    a, b = cafe
    out = tmp_path / f"cmp-{E9}"
    rc, out_text, err = run_cli("compare", a, b, "-o", out)
    assert rc == 0, err
    assert f"B = {b}" in out_text
    assert "caf\\xe9/caf\\xe9.toml" in (out / "report.html").read_text(encoding="utf-8")


def test_a_left_out_run_named_with_such_a_byte_is_listed(cafe, tmp_path):
    a, _ = cafe
    results = tmp_path / "results" / machine_id()
    shutil.copytree(a, results / a.name)
    bad = results / f"bad-{E9}"
    shutil.copytree(a, bad)
    (bad / "results.csv").unlink()
    html_path, _ = report.build([tmp_path / "results"], tmp_path / "out")
    assert f"{results}/bad-\\xe9</td><td>results.csv is missing" in html_path.read_text()


def test_a_machine_folder_named_with_such_a_byte_labels_the_figures(cafe, tmp_path):
    """A run that recorded no machine id (an older cxlbench) is known by its machine
    folder's name: that name labels its lines in the figures, beside the other run's."""
    a, _ = cafe
    old = tmp_path / f"caf{E9}" / a.name
    shutil.copytree(a, old)
    meta = json.loads((old / "run.json").read_text())
    del meta["machine_id"]
    (old / "run.json").write_text(json.dumps(meta))
    runs = runs_.load_runs([a, old])
    assert [r.label for r in runs] == [machine_id(), "caf\\xe9"]
    html_path, _ = report.build([a, old], tmp_path / "out")
    text = html_path.read_text()
    assert "<td>caf\\xe9</td>" in text and '<figure id="latency">' in text


# ---- one run, two paths ----------------------------------------------------------------

def test_a_run_and_a_link_to_it_are_one_run(tmp_path):
    link = tmp_path / "link"
    link.symlink_to(EXAMPLE)
    assert [r.path for r in runs_.load_runs([EXAMPLE, link])] == [EXAMPLE]
    assert [r.path for r in runs_.load_runs([link, EXAMPLE.parent])] == [link]
    html_path, _ = report.build([EXAMPLE, link], tmp_path / "out")
    assert "from 1 run(s)" in html_path.read_text()
