"""cxlbench as a user without root, as lab users and CI runners often are: README's main
job (`cxlbench run`), `doctor`, `topology` and an emulated run, as a user made for the
test, with a user's PATH (no sbin folder) and a home of its own. Root hides what such a
user meets (a PATH holding /usr/sbin, where Debian's kmod puts depmod and modprobe;
every file readable), so these run where the tests run as root, which can become that
user, and skip with the reason elsewhere. And the finding of system tools itself, on
folders made here."""
import json
import os
import pwd
import re
import shlex
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from cxlbench import PACKAGE_PARENT, emulate
from cxlbench.emulate import guest_image, tools
from cxlbench.topology import Topology

USER = "cxlbench-test"
# Debian's PATH for a user (login.defs' ENV_PATH): no sbin folder.
USER_PATH = "/usr/local/bin:/usr/bin:/bin"
# README's main job: `cxlbench run` runs suites/quick.toml. Here its three benchmarks at
# the smallest sizes (quick itself takes ~40 s): placement, THP, workers, results and the
# estimate cache, as the user.
SMALL_QUICK = """\
description = "suites/quick.toml's benchmarks at the smallest sizes"

[global]
mem = "bind:*"
repeat = 1
warmup = 0

[latency]
bench = "chase"
size = "64K"
page = "thp"
loads = 4096

[bandwidth]
bench = "bandwidth"
kernel = "read"
size = "4M"
page = "thp"

[loaded]
bench = "loaded_latency"
size = "2M"
load_size = "4M"
page = "thp"
delay = "idle"
"""

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="runs cxlbench as a user made for "
                               "the test: needs root to make that user and become it")


# ---- finding system tools (no root needed) ------------------------------------------
def tool_folders(tmp_path, monkeypatch, on_path, in_sbin):
    """A PATH of one folder holding `on_path` and one sbin folder holding `in_sbin`."""
    bin_, sbin = tmp_path / "bin", tmp_path / "sbin"
    for where, names in ((bin_, on_path), (sbin, in_sbin)):
        where.mkdir()
        for name in names:
            (where / name).symlink_to("/bin/true")
    monkeypatch.setenv("PATH", str(bin_))
    monkeypatch.setattr(tools, "SBIN", (str(sbin),))
    return bin_, sbin


def test_a_tool_off_path_is_found_in_an_sbin_folder(tmp_path, monkeypatch):
    bin_, sbin = tool_folders(tmp_path, monkeypatch, ["dpkg", "depmod"], ["depmod", "modprobe"])
    assert tools.find("modprobe") == str(sbin / "modprobe")
    assert tools.find("depmod") == str(bin_ / "depmod")          # PATH first
    assert tools.find("nosuch") is None
    assert tools.command("modprobe") == str(sbin / "modprobe")
    assert tools.command("nosuch") == "nosuch"
    # A relative PATH entry: the full path all the same (a cd must not break it).
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "bin")
    assert tools.find("dpkg") == str(bin_ / "dpkg")


def test_emulate_does_not_refuse_for_kmod_in_an_sbin_folder(tmp_path, monkeypatch):
    """What `cxlbench emulate` refused with as a user: 'emulation needs depmod, modprobe
    (apt-get install kmod)', kmod being installed in /usr/sbin."""
    kmod = [t for t, package in guest_image.TOOLS.items() if package == "kmod"]
    others = [t for t in {**guest_image.TOOLS, **guest_image.GUEST_TOOLS} if t not in kmod]
    bin_, _ = tool_folders(tmp_path, monkeypatch, others, kmod)
    monkeypatch.setattr(emulate, "GUEST_PATH", str(bin_))
    assert emulate.missing_requirements("cxl") == []
    hmat = emulate.get("hmat")
    image = guest_image.GuestImage(tmp_path / "vmlinux", tmp_path / "initramfs.gz",
                                   "6.1.0-1-amd64", "linux-image-6.1.0-1-amd64")
    qemu = emulate._qemu_command(hmat, hmat.resolve({}), image, "tcg", str(tmp_path),
                                 tmp_path, tmp_path / "console.log")
    assert qemu[0] == str(bin_ / "qemu-system-x86_64")       # run as found
    monkeypatch.setattr(tools, "SBIN", ())
    assert emulate.missing_requirements("hmat") == [
        f"{', '.join(kmod)} (apt-get install kmod)"]


# ---- as a user made for the test ------------------------------------------------------
class User:
    """USER, made if absent, with a folder of its own under /tmp (its home and working
    folder: nothing the user runs writes anywhere else), and what it takes for that user to
    run this Python and this cxlbench."""

    def __init__(self, base: Path, hold: Path):
        useradd = tools.find("useradd")
        try:
            pw = pwd.getpwnam(USER)
        except KeyError:
            if useradd is None:
                pytest.skip("no useradd here to make the test's user")
            subprocess.run([useradd, "--no-create-home", "--shell", "/usr/sbin/nologin",
                            "--user-group", USER], check=True, capture_output=True)
            pw = pwd.getpwnam(USER)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self.base, self.home, self.work = base, base / "home", base / "work"
        for d in (base, self.home, self.work, base / "tmp"):
            d.mkdir(exist_ok=True)
            os.chown(d, self.uid, self.gid)
        # The console script of this environment, first on PATH as an activated venv's.
        scripts = sysconfig.get_path("scripts")
        self.env = {"PATH": f"{scripts}:{USER_PATH}", "HOME": str(self.home),
                    "TMPDIR": str(base / "tmp"), "LANG": "C.UTF-8",
                    # the cxlbench under test, however it was installed
                    "PYTHONPATH": PACKAGE_PARENT}
        self.cxlbench = ([str(Path(scripts) / "cxlbench")]
                         if (Path(scripts) / "cxlbench").exists()
                         else [sys.executable, "-m", "cxlbench"])
        self.mounts = _reachable([os.path.realpath(sys.executable), sys.prefix,
                                  sys.base_prefix, PACKAGE_PARENT, scripts], hold)
        r = self.run([sys.executable, "-c", "pass"])
        if r.returncode != 0:
            pytest.skip(f"{USER} cannot run this Python ({sys.executable}): "
                        f"{r.stderr.strip()[-300:]}")

    def run(self, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
        """`args` as the user, in its working folder, with its environment alone."""
        cmd = [tools.command("setpriv"), f"--reuid={self.uid}", f"--regid={self.gid}",
               "--clear-groups", "--", "/usr/bin/env", "-i",
               *(f"{k}={v}" for k, v in self.env.items()), *args]
        if self.mounts:
            cmd = [tools.command("unshare"), "--mount", "--propagation", "private", "--",
                   "/bin/sh", "-ec", "\n".join(self.mounts + ['exec "$@"']), "sh", *cmd]
        return subprocess.run(cmd, cwd=self.work, capture_output=True, text=True,
                              timeout=timeout)


def _reachable(paths: list[str], hold: Path) -> list[str]:
    """Shell lines that, in a mount namespace of the test's own (nothing changes outside
    it), let others reach `paths`: a folder on the way that others may not enter (root's
    home, holding pyenv's Python) is covered by a tmpfs they may, holding only the
    entries on the way, bound back. Empty where nothing is in the way."""
    blocked: dict[Path, set[str]] = {}
    for p in paths:
        parts = Path(p).resolve().parts
        for i in range(1, len(parts)):
            folder = Path(*parts[:i])
            if not folder.stat().st_mode & stat.S_IXOTH:
                blocked.setdefault(folder, set()).add(parts[i])
    lines = []
    for k, (folder, entries) in enumerate(sorted(blocked.items(),
                                                 key=lambda f: len(f[0].parts))):
        kept = [(folder / e, hold / f"{k}-{j}") for j, e in enumerate(sorted(entries))]
        for entry, held in kept:
            held.mkdir() if entry.is_dir() else held.touch()
            lines.append(f"mount --bind {shlex.quote(str(entry))} {shlex.quote(str(held))}")
        lines.append(f"mount -t tmpfs -o mode=755 cxlbench-test {shlex.quote(str(folder))}")
        for entry, held in kept:
            make = "mkdir" if entry.is_dir() else "touch"
            lines += [f"{make} {shlex.quote(str(entry))}",
                      f"mount --bind {shlex.quote(str(held))} {shlex.quote(str(entry))}"]
    return lines


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    # Under /tmp itself: pytest's own folders are root's alone.
    base = Path(tempfile.mkdtemp(prefix="cxlbench-unprivileged-"))
    try:
        yield User(base, tmp_path_factory.mktemp("hold"))
    finally:
        shutil.rmtree(base, ignore_errors=True)


@root_only
def test_readme_main_job_runs_as_a_user(user):
    """README's `pip install . && cxlbench run` has the user run suites/quick.toml from
    its own folder: here quick's benchmarks, small. Results land in that folder, the
    estimate cache in the user's home."""
    (user.work / "small.toml").write_text(SMALL_QUICK)
    os.chown(user.work / "small.toml", user.uid, user.gid)
    r = user.run([*user.cxlbench, "run", "small.toml"])
    assert r.returncode == 0, r.stderr[-3000:]
    (run_dir,) = [p.parent for p in user.work.glob("results/*/*/run.json")]
    journal = [json.loads(line) for line in (run_dir / "cases.jsonl").read_text().splitlines()]
    assert len(journal) == 3 and {c["status"] for c in journal} == {"ok"}, journal
    assert list((user.home / ".cache" / "cxlbench").glob("estimate-*.json"))
    assert {p.stat().st_uid for p in [run_dir, *run_dir.iterdir()]} == {user.uid}


@root_only
def test_doctor_topology_and_emulate_find_the_tools_as_a_user(user):
    """`cxlbench doctor` and `cxlbench emulate`'s check find every tool root finds, those
    in an sbin folder too (kmod's, in /usr/sbin on Debian), and doctor names where; the
    user's `topology` sees this machine's nodes."""
    r = user.run([*user.cxlbench, "doctor", "--json"])
    assert r.returncode == 0, r.stderr[-3000:]
    check = {c["name"]: c for c in json.loads(r.stdout)}["emulate tools"]
    value = check["value"]
    absent = [t for t in guest_image.TOOLS if tools.find(t) is None]
    assert value.startswith(f"missing {', '.join(absent)}" if absent else "all found: "), value
    for tool in set(guest_image.TOOLS) - set(absent):
        folder = os.path.dirname(tools.find(tool))
        if folder not in user.env["PATH"].split(":"):
            assert re.search(rf"[:;,] {re.escape(tool)}(, [^;]*)? in {re.escape(folder)}(;|$)",
                             value), (tool, value)

    probe = ("import json; from cxlbench import emulate; "
             "print(json.dumps({t: emulate.missing_requirements(t) for t in ('hmat', 'cxl')}))")
    r = user.run([sys.executable, "-c", probe])
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout) == {t: emulate.missing_requirements(t) for t in ("hmat", "cxl")}

    r = user.run([*user.cxlbench, "topology", "--json"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert [n["id"] for n in json.loads(r.stdout)["nodes"]] == \
        [n.id for n in Topology.read(probe_gpus=False).nodes]


@root_only
@pytest.mark.qemu
def test_an_emulated_run_as_a_user(user):
    """The smallest guest run (test_emulate's), `cxlbench emulate --topology hmat --
    topology`, as the user: its guest image built afresh in the user's home (apt-get download, dpkg,
    depmod and modprobe, the last two in /usr/sbin on Debian), then booted (~2 min under
    TCG). It refused before ('emulation needs depmod, modprobe (apt-get install kmod)')."""
    missing = emulate.missing_requirements("hmat")
    if missing:
        pytest.skip("emulation needs " + "; ".join(missing))
    r = user.run([*user.cxlbench, "emulate", "--topology", "hmat", "--", "topology", "--json"],
                 timeout=1500)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["machine"]["emulated"]["topology"] == "hmat"
    assert "building the guest image" in r.stderr
    assert list((user.home / ".cache" / "cxlbench").rglob("kit.json"))
