"""What cxlbench keeps between runs (the estimate's figures, GPU builds, guest images) is
its own: written by a rename from a file or folder made afresh, never through a link or
onto a file a user left at one of its names, and read back only where it is a plain file
of its own that reads as it was written; anything else is discarded with a line naming
the file, and made again. An empty or relative CXLBENCH_CACHE is refused. A dry run says
what the run would do, refusals and exit code included (issue 46, items 2, 4 and 7)."""
import json
import math
import os
import stat
import time
from pathlib import Path

import pytest

from cxlbench import estimate, gpu, gpu_build, ownfiles, results
from cxlbench.emulate import guest_image
from cxlbench.errors import StorageError, UserError

from .conftest import cxlbench
from .test_run import run_dirs

MINE = "a user's file, not cxlbench's\n"
TINY = ["--bench", "chase", "--set", "size=64K", "--set", "repeat=2"]


def cache_env(tmp_path, **more) -> dict:
    """A run's cache and home under tmp_path, nothing of the real ones used."""
    return {"CXLBENCH_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path / "home"),
            **more}


def user_file(tmp_path) -> Path:
    mine = tmp_path / "mine.txt"
    mine.write_text(MINE)
    return mine


def linked(at: Path, target: Path) -> Path:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(target)
    return at


def assert_ours(path: Path) -> dict:
    """The estimate cache at path: a plain file of cxlbench's figures."""
    assert not path.is_symlink() and stat.S_ISREG(path.lstat().st_mode)
    kept = json.loads(path.read_text())
    assert set(kept) == {"nodes", "start", "fill"}
    return kept


# ---- the estimate cache: never written or read through a link (item 2) -----------------

def test_a_dry_run_replaces_a_link_at_the_estimate_cache_and_leaves_its_target(
        tmp_path, monkeypatch):
    """The default cache (~/.cache/cxlbench) and a dry run, which says it changes nothing:
    the link at the cache's name goes, the file it pointed at is as it was."""
    monkeypatch.delenv("CXLBENCH_CACHE", raising=False)
    home = tmp_path / "home"
    mine = user_file(tmp_path)
    at = linked(home / ".cache" / "cxlbench" / f"estimate-{results.machine_id()}.json", mine)
    r = cxlbench("run", *TINY, "--dry-run", env={"HOME": str(home)})
    assert r.returncode == 0, r.stderr
    assert mine.read_text() == MINE
    assert_ours(at)
    assert f"note: discarded the estimate cache {at}: a symbolic link" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_run_replaces_a_link_at_the_estimate_cache_and_leaves_its_target(tmp_path):
    mine = user_file(tmp_path)
    at = linked(tmp_path / "cache" / f"estimate-{results.machine_id()}.json", mine)
    r = cxlbench("run", *TINY, "--results-dir", str(tmp_path / "r"), env=cache_env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert mine.read_text() == MINE and len(run_dirs(tmp_path / "r")) == 1
    assert_ours(at)


# ---- an empty or relative CXLBENCH_CACHE (item 2) --------------------------------------

@pytest.mark.parametrize("value, says", [
    ("", "error: CXLBENCH_CACHE is set but empty: give a folder"),
    ("cache", "error: CXLBENCH_CACHE='cache': give an absolute path")])
def test_a_cache_folder_that_would_be_the_working_folder_is_refused(tmp_path, value, says):
    """Empty, the cache was the folder the command ran in: the figures landed there."""
    r = cxlbench("run", *TINY, "--dry-run", cwd=tmp_path,
                 env=cache_env(tmp_path, CXLBENCH_CACHE=value))
    assert r.returncode == 2 and r.stderr.startswith(says), r.stderr
    assert r.stderr.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_a_home_that_is_not_a_folder_is_no_cache(monkeypatch):
    """HOME unset for a user without a passwd entry (a container's arbitrary uid): the
    home is "~" itself, which would put the cache under the working folder."""
    monkeypatch.delenv("CXLBENCH_CACHE", raising=False)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: Path("~")))
    with pytest.raises(UserError, match="^no home folder for the cache .*set CXLBENCH_CACHE"):
        ownfiles.cache_root()


def test_the_gpu_library_and_the_guest_image_refuse_an_empty_cache_too(tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("CXLBENCH_CACHE", "")
    monkeypatch.chdir(tmp_path)
    gpu._loaded.cache_clear()
    try:
        assert "CXLBENCH_CACHE is set but empty" in gpu.unavailable()
    finally:
        gpu._loaded.cache_clear()
    monkeypatch.setattr(guest_image, "kernel_package", lambda wanted: "linux-image-x")
    with pytest.raises(UserError, match="^CXLBENCH_CACHE is set but empty"):
        guest_image.ensure(None, log=print)
    assert list(tmp_path.iterdir()) == []


# ---- a damaged estimate cache (item 4) -------------------------------------------------

PROBED = estimate.NodeFigures(sweep=[(32 << 10, 1.0), (1 << 20, 10.0), (64 << 20, 100.0)],
                              read_1=20e9, read_all=80e9, touch=2e9, scan=10e9)


class Probes:
    """The probes, fast and counted: figures(nodes, *probes)."""

    def __init__(self):
        self.calls = []

    def node(self, node):
        self.calls.append(("node", node))
        return PROBED

    def start(self):
        self.calls.append(("start",))
        return 0.7

    def fill(self):
        self.calls.append(("fill",))
        return 2e9

    def __iter__(self):
        return iter((self.node, self.start, self.fill))


def whole(now: float) -> dict:
    """A cache as figures() writes it, a minute old: nodes 0 and 1, start and fill."""
    node = {"sweep": [[32768.0, 1.0], [1048576.0, 10.0], [67108864.0, 100.0]],
            "read_1": 20e9, "read_all": 80e9, "touch": 2e9, "scan": 10e9, "when": now - 60}
    return {"nodes": {"0": node, "1": dict(node)}, "start": {"value": 0.6, "when": now - 60},
            "fill": {"value": 1e9, "when": now - 60}}


def node0(**change):
    def damage(kept):
        kept["nodes"]["0"].update(change)
        return kept
    return damage


def without(key):
    def damage(kept):
        del kept["nodes"]["0"][key]
        return kept
    return damage


DAMAGED = {
    # name: (what is written over the cache, what is probed again: all, node 0 or start)
    "a list": (lambda kept: [1, 2], "all"),
    "null": (lambda kept: None, "all"),
    "not JSON": ("{'nodes': ", "all"),
    "nested past Python's recursion": ("[" * 100000, "all"),
    "a field more at the top": (lambda kept: {**kept, "colour": "red"}, "all"),
    "no fill": (lambda kept: {k: v for k, v in kept.items() if k != "fill"}, "all"),
    "a node field more": (node0(colour="red"), "node"),
    "a node field missing": (without("scan"), "node"),
    "an empty sweep": (node0(sweep=[]), "node"),
    "a sweep point of one number": (node0(sweep=[[32768.0]]), "node"),
    "node x": (lambda kept: {**kept, "nodes": {"x": kept["nodes"]["0"],
                                               "1": kept["nodes"]["1"]}}, "node"),
    "node 0 as 00": (lambda kept: {**kept, "nodes": {"00": kept["nodes"]["0"],
                                                     "1": kept["nodes"]["1"]}}, "node"),
    "a string date": (node0(when="yesterday"), "node"),
    "a NaN figure": (node0(read_1=math.nan), "node"),
    "an infinite figure": (node0(scan=math.inf), "node"),
    "a negative latency": (node0(sweep=[[32768.0, -5.0]]), "node"),
    "true for a rate": (node0(touch=True), "node"),
    "a date in the future": (node0(when=time.time() + 30 * 86400), "node"),
    "a negative start": (lambda kept: {**kept, "start": {"value": -1e6, "when": 0}}, "start"),
    "a huge start": (lambda kept: {**kept, "start": {"value": 1e9,
                                                     "when": time.time() - 60}}, "start"),
    "a start of no value": (lambda kept: {**kept, "start": {"when": time.time()}}, "start"),
}


@pytest.mark.parametrize("name", DAMAGED)
def test_a_damaged_estimate_cache_is_discarded_saying_so_and_probed_again(
        name, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CXLBENCH_CACHE", str(tmp_path))
    path = estimate._cache_file()
    damage, again = DAMAGED[name]
    kept = damage(whole(time.time())) if callable(damage) else damage
    path.write_text(kept if isinstance(kept, str) else json.dumps(kept))
    probes = Probes()
    fig = estimate.figures({0, 1}, *probes)
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"note: discarded the estimate cache {path}: ") and \
        line.endswith("; probing again"), line
    want = {"all": [("node", 0), ("node", 1), ("start",), ("fill",)],
            "node": [("node", 0)], "start": [("start",)]}[again]
    assert probes.calls == want
    assert fig.nodes == {0: PROBED, 1: PROBED}
    assert fig.start_s == (0.7 if again in ("all", "start") else 0.6)
    # what was kept now reads back whole: nothing said, nothing probed
    probes.calls.clear()
    assert estimate.figures({0, 1}, *probes) == fig and probes.calls == []
    assert capsys.readouterr().err == ""


def test_a_link_at_the_estimate_cache_is_not_read_through(tmp_path, monkeypatch, capsys):
    """Figures a link points at (here a worker's start of 99 s) are not believed."""
    monkeypatch.setenv("CXLBENCH_CACHE", str(tmp_path / "cache"))
    planted = whole(time.time())
    planted["start"]["value"] = 99.0
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(planted))
    linked(estimate._cache_file(), elsewhere)
    probes = Probes()
    assert estimate.figures({0}, *probes).start_s == 0.7
    assert ("start",) in probes.calls
    assert json.loads(elsewhere.read_text()) == planted
    assert "a symbolic link, not a file cxlbench wrote" in capsys.readouterr().err


def test_a_probe_that_measures_nonsense_is_not_kept(tmp_path, monkeypatch):
    """A NaN from a probe gives the node no figures (and so its cases no estimate), not
    an estimate of NaN seconds, and is not kept for the next run."""
    monkeypatch.setenv("CXLBENCH_CACHE", str(tmp_path))
    probes = Probes()
    monkeypatch.setattr(probes, "node", lambda node: estimate.NodeFigures(
        PROBED.sweep, math.nan, 1e9, 1e9, 1e9))
    assert estimate.figures({0}, *probes).nodes == {}
    assert json.loads(estimate._cache_file().read_text())["nodes"] == {}


def test_a_run_with_a_damaged_cache_says_so_and_runs(tmp_path):
    """As users met it: a worker's start of 1e9 s in the cache refused every run, --fit
    or not, without naming the cache (a negative one, above, printed ~-1000000 s)."""
    path = tmp_path / "cache" / f"estimate-{results.machine_id()}.json"
    path.parent.mkdir()
    kept = whole(time.time())
    kept["start"]["value"] = 1e9
    path.write_text(json.dumps(kept))
    r = cxlbench("run", *TINY, "--fit", "--dry-run", env=cache_env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert f"note: discarded the estimate cache {path}: start: a worker's start (s) is " \
           "1000000000.0, not a number in [0.001, 300]; probing again" in r.stderr
    assert "Traceback" not in r.stderr
    assert 0.001 <= assert_ours(path)["start"]["value"] <= 300


# ---- a dry run refuses what the run refuses (item 7) -----------------------------------

PAST = {
    "budget": ('budget = 1e-300\n[latency]\nbench = "chase"\nsize = "64K"\nrepeat = 2\n',
               "error: this run is estimated at ", ", past the suite's budget of 1e-300 s "),
    "timeout": ('[latency]\nbench = "chase"\nsize = "64M"\nloads = "4M"\nrepeat = 50\n'
                'timeout = 5\n', "error: 1 case(s) would not finish within their timeout",
                "past its timeout of 5 s"),
}


@pytest.mark.parametrize("past", PAST)
def test_a_dry_run_is_refused_as_the_run_is(tmp_path, past):
    """A suite estimated past its budget, or a case past its timeout: the dry run lists
    the cases and then exits 2 with the run's own refusal, where it said ~30 s and 0."""
    text, starts, says = PAST[past]
    suite = tmp_path / f"{past}.toml"
    suite.write_text(text)
    kept = tmp_path / "cache" / f"estimate-{results.machine_id()}.json"
    kept.parent.mkdir()
    kept.write_text(json.dumps(whole(time.time())))        # (nothing to probe: quick)
    out = tmp_path / "r"
    dry = cxlbench("run", str(suite), "--dry-run", "--results-dir", str(out),
                   env=cache_env(tmp_path))
    real = cxlbench("run", str(suite), "--results-dir", str(out), env=cache_env(tmp_path))
    assert dry.returncode == real.returncode == 2, (dry.stderr, real.stderr)
    refusal = [x for x in dry.stderr.splitlines() if x.startswith("error: ")]
    assert refusal == real.stderr.splitlines()[-1:]
    assert refusal[0].startswith(starts) and says in refusal[0], refusal
    assert dry.stdout.startswith("latency/000 chase")       # the cases, listed first
    assert not out.exists()


# ---- GPU builds (item 2) ---------------------------------------------------------------

FAKE_NVCC = """#!/bin/sh
# nvcc's part here: a version, and "built" written where -o says
[ "$1" = --version ] && { echo "Cuda compilation tools, release 99.9"; exit 0; }
while [ $# -gt 0 ]; do
  if [ "$1" = -o ]; then echo built > "$2"; echo "$2" >> "$(dirname "$0")/outputs"; fi
  shift
done
"""


@pytest.fixture
def fake_nvcc(tmp_path) -> str:
    tool = tmp_path / "bin" / "nvcc"
    tool.parent.mkdir()
    tool.write_text(FAKE_NVCC)
    tool.chmod(0o755)
    return str(tool)


def test_a_gpu_build_replaces_a_link_at_its_name_and_never_loads_one(tmp_path, fake_nvcc):
    """A link at the library's name (to a user's file, or a library of theirs) is neither
    taken as built (dlopen would load what it points at) nor written through: the build
    goes to a folder made afresh and is renamed over the link."""
    sources, folder = gpu.source_dir(), tmp_path / "gpu"
    mine = user_file(tmp_path)
    at = linked(folder / gpu_build.library_name(sources, fake_nvcc), mine)
    assert gpu_build.find(sources, [folder]) is None
    out = gpu_build.build(fake_nvcc, sources, folder)
    assert out == at and not at.is_symlink() and at.read_text() == "built\n"
    assert mine.read_text() == MINE
    (wrote,) = (Path(fake_nvcc).parent / "outputs").read_text().split()
    assert Path(wrote).parent.parent == folder and not Path(wrote).parent.exists()
    assert gpu_build.find(sources, [folder]) == out and os.listdir(folder) == [at.name]


def test_the_gpu_cache_folder_is_not_looked_in_or_built_into_through_a_link(
        tmp_path, monkeypatch, fake_nvcc):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("CXLBENCH_CACHE", str(tmp_path / "cache"))
    linked(tmp_path / "cache" / "gpu", elsewhere)
    assert gpu_build.find(gpu.source_dir(), [tmp_path / "cache" / "gpu"]) is None
    with pytest.raises(UserError, match=r"cache folder .*/cache/gpu is a symbolic link"):
        gpu.build(fake_nvcc)
    assert list(elsewhere.iterdir()) == []


# ---- guest images (item 2) -------------------------------------------------------------

PACKAGE = "linux-image-6.1.0-57-amd64"


@pytest.fixture
def image_build(tmp_path, monkeypatch):
    """guest_image.ensure with its download and build stood in: the image's files written
    as _build writes them. Returns the image's folder in the cache and the builds made."""
    monkeypatch.setenv("CXLBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(guest_image, "kernel_package", lambda wanted: PACKAGE)
    builds = []

    def build(package, tmp):
        builds.append(package)
        image = tmp / "image"
        image.mkdir()
        (image / "vmlinux").write_bytes(b"\x7fELF")
        (image / "initramfs.gz").write_bytes(b"\x1f\x8b")
        (image / guest_image.MANIFEST).write_text(json.dumps(
            {"version": "6.1.0-57-amd64", "kernel": "vmlinux", "package": package,
             "modules": []}))
    monkeypatch.setattr(guest_image, "_build", build)
    return tmp_path / "cache" / "guest" / PACKAGE, builds


def test_a_link_at_the_guest_images_name_is_replaced_not_followed(tmp_path, image_build):
    """A folder of the user's, linked at the image's name, holding what looks like an
    image: never booted from, never written or removed; the link alone is replaced."""
    home, builds = image_build
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    for name in ("vmlinux", "initramfs.gz"):
        (theirs / name).write_text(MINE)
    (theirs / guest_image.MANIFEST).write_text(json.dumps({"version": "6.1", "kernel":
                                                           "vmlinux"}))
    linked(home, theirs)
    said = []
    image = guest_image.ensure(None, log=said.append)
    assert builds == [PACKAGE] and not home.is_symlink() and home.is_dir()
    assert image.kernel == home / "vmlinux" and image.kernel.read_bytes() == b"\x7fELF"
    assert sorted(p.name for p in theirs.iterdir()) == ["initramfs.gz", "kit.json",
                                                         "vmlinux"]
    assert (theirs / "vmlinux").read_text() == MINE
    assert "does not read back as it was built (a symbolic link" in said[0]
    assert guest_image.ensure(None, log=said.append) == image and builds == [PACKAGE]


@pytest.mark.parametrize("damage", ["not json", "kernel ../../x", "kernel a link"])
def test_a_damaged_guest_image_is_built_again(tmp_path, image_build, damage):
    home, builds = image_build
    guest_image.ensure(None, log=lambda line: None)
    manifest = home / guest_image.MANIFEST
    if damage == "not json":
        manifest.write_text("{")
    elif damage == "kernel ../../x":
        manifest.write_text(json.dumps({"version": "6.1", "kernel": "../../x"}))
    else:
        (home / "vmlinux").unlink()
        linked(home / "vmlinux", user_file(tmp_path))
    said = []
    image = guest_image.ensure(None, log=said.append)
    assert builds == [PACKAGE, PACKAGE] and image.kernel.read_bytes() == b"\x7fELF"
    assert said[0].startswith(f"the cached guest image {home} does not read back")
    assert not list(home.parent.glob("tmp*"))                  # the old one gone with it
    if damage == "kernel a link":
        assert (tmp_path / "mine.txt").read_text() == MINE


def test_a_folder_of_someone_elses_at_the_images_name_is_refused(tmp_path, image_build):
    home, builds = image_build
    home.mkdir(parents=True)
    (home / "notes.txt").write_text(MINE)
    with pytest.raises(UserError, match=f"^{home} holds files cxlbench did not make "
                                        r"\(notes.txt\): move them away"):
        guest_image.ensure(None, log=lambda line: None)
    assert (home / "notes.txt").read_text() == MINE and builds == []


def test_a_link_at_the_guest_cache_folder_is_refused(tmp_path, image_build):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    linked(tmp_path / "cache" / "guest", elsewhere)
    with pytest.raises(StorageError, match="is a symbolic link"):
        guest_image.ensure(None, log=lambda line: None)
    assert list(elsewhere.iterdir()) == []
