"""Where reports go: cxlbench replaces or removes only the files it wrote (its manifest
says which), refuses folders that are someone else's, writes each file whole, and one damaged
run in results/ does not sink the report of the others."""
import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cxlbench import report
from cxlbench.errors import ResultsError
from cxlbench.report import runs as runs_
from cxlbench.report.figures import Figure
from .conftest import cxlbench

EXAMPLE = next((Path(__file__).parent / "data" / "runs" / "vm").glob("*"))
PNG = b"\x89PNG\r\n\x1a\nmine"


@pytest.fixture(scope="module")
def blocks():
    """The example run's report, made once: write() is what these tests exercise."""
    return report.report_blocks(runs_.load_runs([EXAMPLE]))


def only_latency(blocks):
    return [b for b in blocks if not isinstance(b, Figure) or b.key == "latency"]


def manifest(out: Path) -> dict:
    return json.loads((out / report.MANIFEST).read_text())["files"]


def leftovers(out: Path) -> list:
    return list(out.glob(f"{report.TMP_PREFIX}*"))


def error_lines(r) -> list[str]:
    assert "Traceback" not in r.stderr, r.stderr
    return [line for line in r.stderr.splitlines() if line != "building the report ..."]


def user_folder(tmp_path: Path) -> Path:
    """The issue's paper/: the user's own figure, report.md and notes."""
    paper = tmp_path / "paper"
    (paper / "figures").mkdir(parents=True)
    (paper / "figures" / "my_plot.png").write_bytes(PNG)
    (paper / "report.md").write_text("mine\n")
    (paper / "notes.txt").write_text("notes\n")
    return paper


def test_a_folder_that_is_no_report_is_refused_and_left_alone(tmp_path):
    paper = user_folder(tmp_path)
    r = cxlbench("report", str(EXAMPLE), "-o", str(paper))
    assert r.returncode == 2
    [line] = error_lines(r)
    assert line.startswith(f"error: {paper} is not empty and holds no cxlbench report")
    assert (paper / "figures" / "my_plot.png").read_bytes() == PNG
    assert (paper / "report.md").read_text() == "mine\n"
    assert not (paper / "report.html").exists() and not leftovers(paper)


def test_force_writes_beside_the_users_files_and_deletes_none(tmp_path):
    paper = user_folder(tmp_path)
    html_path, md_path = report.build([EXAMPLE], paper, force=True)
    assert "Idle latency" in html_path.read_text() and md_path.read_text().startswith("# ")
    assert (paper / "figures" / "my_plot.png").read_bytes() == PNG
    assert (paper / "notes.txt").read_text() == "notes\n"
    listed = manifest(paper)
    assert {"report.html", "report.md", "figures/latency.png"} <= set(listed)
    assert "figures/my_plot.png" not in listed and "notes.txt" not in listed
    # Now it is a report: written again without force, the user's files still stay.
    report.build([EXAMPLE], paper)
    assert (paper / "figures" / "my_plot.png").read_bytes() == PNG


def test_writing_again_keeps_added_files_and_removes_stale_figures(tmp_path, blocks):
    out = tmp_path / "out"
    report.write(out, "full", blocks)
    assert (out / "figures" / "bandwidth.png").exists()
    (out / "figures" / "mine.png").write_bytes(PNG)
    (out / "notes.txt").write_text("notes\n")
    report.write(out, "latency only", only_latency(blocks))
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["latency.png", "mine.png"]
    assert (out / "notes.txt").read_text() == "notes\n"
    assert set(manifest(out)) == {"report.html", "report.md", "figures/latency.png"}
    assert "latency only" in (out / "report.html").read_text()


def test_files_changed_since_cxlbench_wrote_them_are_not_overwritten(tmp_path, blocks):
    out = tmp_path / "out"
    report.write(out, "one", only_latency(blocks))
    (out / "report.md").write_text("my edits\n")
    with pytest.raises(report.OutputError, match=r"report\.md changed since cxlbench wrote"):
        report.write(out, "two", blocks)
    assert (out / "report.md").read_text() == "my edits\n"
    # A figure of a name the new report makes, put there by the user: refused too.
    (out / "report.md").unlink()
    (out / "figures" / "bandwidth.png").write_bytes(PNG)
    with pytest.raises(report.OutputError, match="bandwidth.png would be overwritten"):
        report.write(out, "two", blocks)
    assert (out / "figures" / "bandwidth.png").read_bytes() == PNG
    report.write(out, "two", blocks, force=True)
    assert (out / "figures" / "bandwidth.png").read_bytes() != PNG
    assert "two" in (out / "report.md").read_text()


def test_a_file_changed_by_the_user_is_not_removed_even_with_force(tmp_path, blocks):
    out = tmp_path / "out"
    report.write(out, "full", blocks)
    (out / "figures" / "bandwidth.png").write_bytes(PNG)        # the user's now
    report.write(out, "latency only", only_latency(blocks), force=True)
    assert (out / "figures" / "bandwidth.png").read_bytes() == PNG
    assert "figures/bandwidth.png" not in manifest(out)


def test_output_naming_a_file_is_one_line(tmp_path):
    target = tmp_path / "report.html"
    target.write_text("not a folder")
    r = cxlbench("report", str(EXAMPLE), "-o", str(target))
    assert r.returncode == 2
    assert error_lines(r) == [f"error: {target} is a file, not a folder: name a folder for "
                              "the report"]
    assert target.read_text() == "not a folder"


def test_output_that_cannot_be_created_is_one_line():
    r = cxlbench("report", str(EXAMPLE), "-o", "/proc/cxlbench-no/out")
    assert r.returncode == 2
    [line] = error_lines(r)
    assert line.startswith("error: cannot write the report to /proc/cxlbench-no/out: ")


@pytest.fixture
def read_only(tmp_path):
    """A folder this process cannot write: mode 555, or for root (who writes there
    anyway) a read-only bind mount."""
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    if os.geteuid() != 0:
        yield ro
        return
    r = subprocess.run(f"mount --bind {ro} {ro} && mount -o remount,ro,bind {ro}",
                       shell=True, capture_output=True, text=True)
    if r.returncode != 0:
        subprocess.run(["umount", str(ro)], capture_output=True)
        pytest.skip(f"root cannot make a read-only bind mount here: {r.stderr.strip()}")
    yield ro
    subprocess.run(["umount", str(ro)], capture_output=True)


def test_read_only_folder_is_one_line(read_only, blocks):
    with pytest.raises(report.OutputError,
                       match="cannot write the report to .*(denied|Read-only file system)"):
        report.write(read_only / "out", "t", blocks)


def test_a_failed_write_leaves_the_old_report_as_it_was(tmp_path, blocks, monkeypatch):
    out = tmp_path / "out"
    report.write(out, "old", blocks)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    calls = []
    real = report._create

    def disk_full(path, data):
        calls.append(path)
        if len(calls) == 2:                 # report.html is made; report.md is not
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, data)

    monkeypatch.setattr(report, "_create", disk_full)
    with pytest.raises(report.OutputError, match="No space left on device"):
        report.write(out, "new", blocks)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert not leftovers(out)


def test_a_crash_between_moves_leaves_whole_files_the_next_report_knows(tmp_path, blocks,
                                                                           monkeypatch):
    out = tmp_path / "out"
    report.write(out, "old", blocks)
    old_md = (out / "report.md").read_text()
    real, calls = os.replace, []

    def crash(src, dst, **kw):
        calls.append(dst)
        if len(calls) == 3:                 # after the manifest and report.html
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(dst))
        return real(src, dst, **kw)

    monkeypatch.setattr(report.os, "replace", crash)
    with pytest.raises(report.OutputError, match="Input/output error"):
        report.write(out, "new", blocks)
    monkeypatch.undo()
    assert "<h1>new</h1>" in (out / "report.html").read_text()      # whole, and new
    assert (out / "report.md").read_text() == old_md                # whole, and old
    assert not leftovers(out)
    report.write(out, "again", blocks)      # no --force needed: both contents were its own
    assert (out / "report.md").read_text().startswith("# again")


def damaged_results(root: Path) -> dict[str, Path]:
    """results/ holding the example run and four that cannot be read."""
    good = root / "vm" / EXAMPLE.name
    shutil.copytree(EXAMPLE, good)
    bad = {"garbage": root / "vm" / "garbage", "no-csv": root / "lab" / "no-csv",
           "newer": root / "vm" / "newer", "interrupted": root / "vm" / "interrupted",
           "empty-csv": root / "vm" / "empty-csv", "no-journal": root / "vm" / "no-journal"}
    for path in bad.values():
        shutil.copytree(EXAMPLE, path)
    (bad["garbage"] / "run.json").write_text("{not json")
    (bad["no-csv"] / "results.csv").unlink()
    meta = json.loads((bad["newer"] / "run.json").read_text())
    (bad["newer"] / "run.json").write_text(json.dumps({**meta, "format_version": 99}))
    (bad["interrupted"] / "run.json").rename(bad["interrupted"] / "run.json.tmp")
    (bad["empty-csv"] / "results.csv").write_text("")
    (bad["no-journal"] / "cases.jsonl").unlink()
    return {"good": good, **bad}


def test_one_damaged_run_does_not_sink_the_report(tmp_path):
    runs = damaged_results(tmp_path / "results")
    seen = []
    html_path, _ = report.build([tmp_path / "results"], tmp_path / "out",
                                on_skip=lambda p, why: seen.append((p, why)))
    assert {p for p, _ in seen} == {path for name, path in runs.items() if name != "good"}
    why = {p.name: w for p, w in seen}
    assert why["garbage"].startswith("run.json is damaged")
    assert why["no-csv"] == "results.csv is missing"
    assert "newer than this cxlbench reads" in why["newer"]
    assert why["interrupted"].startswith("interrupted as it was created")
    assert why["empty-csv"].startswith("results.csv is empty or damaged")
    assert why["no-journal"] == "cases.jsonl is missing"
    text = html_path.read_text()
    assert "<h2>Runs left out</h2>" in text and str(runs["garbage"]) in text
    assert '<figure id="latency">' in text


def test_damaged_runs_named_or_all_left_out_are_errors(tmp_path):
    runs = damaged_results(tmp_path / "results")
    with pytest.raises(ResultsError, match="run.json is damaged"):
        runs_.load_runs([runs["garbage"]])          # named: an error, not left out
    shutil.rmtree(runs["good"])
    with pytest.raises(ResultsError, match="no run in .* could be read: ") as e:
        runs_.load_runs([tmp_path / "results"])
    assert f"{runs['garbage']}: run.json is damaged" in str(e.value)
    assert f"{runs['no-csv']}: results.csv is missing" in str(e.value)
    # compare wants one run: a folder of one readable and one damaged run is two.
    lab = tmp_path / "results" / "lab"
    shutil.copytree(EXAMPLE, lab / EXAMPLE.name)
    with pytest.raises(ResultsError, match="B: .*lab holds 2 runs"):
        report.compare(lab / EXAMPLE.name, lab)
    assert runs_.load_runs([lab]).skipped == [(runs["no-csv"], "results.csv is missing")]


def test_report_cli_names_each_run_it_leaves_out(tmp_path):
    runs = damaged_results(tmp_path / "results")
    r = cxlbench("report", str(tmp_path / "results"), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    skipped = [line for line in r.stderr.splitlines() if line.startswith("skipped ")]
    assert len(skipped) == len(runs) - 1
    assert f"skipped {runs['garbage']}: run.json is damaged" in r.stderr


def test_a_report_stopped_in_a_new_folder_leaves_it_usable(tmp_path, blocks, monkeypatch):
    """A disk that fills while a report is written into a new folder, and a report killed
    there (its temporary folder left behind): the next report goes in without --force."""
    out = tmp_path / "new"

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))
    monkeypatch.setattr(report, "_create", full)
    with pytest.raises(report.OutputError, match="No space left"):
        report.write(out, "t", blocks)
    monkeypatch.undo()
    (out / (report.TMP_PREFIX + "killed")).mkdir()             # as kill -9 would leave it
    (out / "figures").mkdir(exist_ok=True)
    report.write(out, "t", blocks)
    assert (out / "report.html").exists()



def test_latest_takes_the_newest_run_that_can_be_read(tmp_path):
    runs = damaged_results(tmp_path / "results")      # vm's damaged runs sort after the good
    loaded = runs_.load_runs([tmp_path / "results"], latest=True)
    assert [r.path for r in loaded] == [runs["good"]]
