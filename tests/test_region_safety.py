"""Only what cxlbench made is its to write: a shared region is a DAX device or a region
file cxlbench made (afresh, or carrying its header from an earlier run). A user's file
named as the region, directly, through a link or through $CXLBENCH_SHARED_REGION, is
refused before anything runs (a dry run too) and left byte for byte as it was; a path
not there yet is made by the two hosts between them and used again later."""
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cxlbench import shared_region
from cxlbench.errors import UserError
from cxlbench.shared_region import HEADER, MAGIC, PAGE, Region

from .conftest import cxlbench

QUICK = ["--set", "wait=2", "--set", "repeat=1", "--set", "warmup=0"]


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A session both hosts name, the cache in tmp, no region from the environment."""
    out = {"CXLBENCH_SHARED_SESSION": "safety", "CXLBENCH_CACHE": str(tmp_path / "cache"),
           "CXLBENCH_SHARED_REGION": "", "HOME": str(tmp_path)}
    for k, v in out.items():
        monkeypatch.setenv(k, v)
    return out


def users_file(tmp_path: Path, mode: int = 0o644) -> tuple[Path, bytes]:
    path = tmp_path / "big.bin"
    data = os.urandom(64 << 10)
    path.write_bytes(data)
    path.chmod(mode)
    return path, data


def made_region(path: Path) -> Path:
    with Region(str(path), 3 * PAGE):
        pass
    return path


@pytest.mark.parametrize("how", ["run", "dry-run", "env", "read-only", "pool", "link",
                                 "link to a region file"])
def test_a_users_file_given_as_region_is_refused_and_left_as_it_was(tmp_path, env, how):
    """64 KiB of a user's (as root, read-only too): exit 2 before anything runs, the
    message naming the path, the file unchanged. A link is refused as a link, even to a
    region file of cxlbench's (the path is opened without following it)."""
    target, data = users_file(tmp_path, 0o444 if how == "read-only" else 0o644)
    if how.startswith("link"):
        if how == "link to a region file":
            target = made_region(tmp_path / "ours")
            data = target.read_bytes()
        named = tmp_path / "link.bin"
        named.symlink_to(target)
    else:
        named = target
    bench = "shared_pool" if how == "pool" else "shared_pingpong"
    args = ["run", "--bench", bench, "--set", "host=0", *QUICK,
            "--results-dir", str(tmp_path / "r")]
    extra = {}
    if how == "env":
        extra = {"CXLBENCH_SHARED_REGION": str(named)}
    else:
        args += ["--set", f"region={named}"]
    if how == "dry-run":
        args.append("--dry-run")
    before = os.stat(target)
    r = cxlbench(*args, env=extra, cwd=tmp_path)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and f"region {named}" in line, line
    if how.startswith("link"):
        assert "is a symbolic link" in line
    else:
        assert "a file cxlbench did not make" in line and "a path that does not exist yet" \
            in line
    assert target.read_bytes() == data
    after = os.stat(target)
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)
    assert not (tmp_path / "r").exists()


def test_dev_null_as_region_is_refused_naming_it(tmp_path, env):
    r = cxlbench("run", "--bench", "shared_pingpong", "--set", "host=1", "--set",
                 "region=/dev/null", "--dry-run", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert "region /dev/null: a character device that is no DAX device" in line, line


def two_hosts(tmp_path: Path, region: Path, tag: str) -> list[subprocess.CompletedProcess]:
    """A small ping-pong as host 0 and host 1 at once, two processes of this machine on
    `region`."""
    procs = [subprocess.Popen(
        [sys.executable, "-m", "cxlbench", "run", "--bench", "shared_pingpong", "--set",
         f"host={h}", "--set", f"region={region}", "--set", "iterations=100", "--set",
         "repeat=1", "--set", "warmup=0", "--set", "wait=60", "--json",
         "--results-dir", str(tmp_path / f"{tag}-{h}")],
        env={**os.environ, "CXLBENCH_SHARED_SESSION": f"safety-{tag}"}, cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for h in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    return [subprocess.CompletedProcess(p.args, p.returncode, *out)
            for p, out in zip(procs, outs)]


def test_a_fresh_path_is_made_by_the_two_hosts_and_used_again(tmp_path, env):
    """Two hosts starting at once on a path not there: one makes the region file, the
    other finds it whole; both cases are ok, nothing of the making is left behind. A
    later run finds the header and uses the same file (two processes: the two hosts,
    so some seconds)."""
    region = tmp_path / "shared" / "region"
    region.parent.mkdir()
    for tag in ("first", "again"):
        done = two_hosts(tmp_path, region, tag)
        for r in done:
            assert r.returncode == 0, r.stderr[-2000:]
            assert {row["status"] for row in json.loads(r.stdout)} == {"ok"}
        if tag == "first":
            inode = region.stat().st_ino
    assert region.stat().st_ino == inode
    assert stat.S_ISREG(region.lstat().st_mode)
    assert region.read_bytes()[:len(MAGIC)] == MAGIC
    assert os.listdir(region.parent) == ["region"]


def test_regions_made_at_once_are_one_file_and_the_header_stays(tmp_path):
    """Six processes make one path's region at once: one file, each process's word in
    it (they all mapped the same one), no temporary file left. The region starts after
    the header: writing all of it leaves the file still cxlbench's; a case that needs
    more grows it."""
    path = tmp_path / "region"
    pids = []
    for k in range(6):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                with Region(str(path), 3 * PAGE) as r:
                    r.view[PAGE + 8 * k] = k + 1
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    assert all(os.waitpid(pid, 0)[1] == 0 for pid in pids)
    assert os.listdir(tmp_path) == ["region"]
    raw = path.read_bytes()
    assert [raw[HEADER + PAGE + 8 * k] for k in range(6)] == [1, 2, 3, 4, 5, 6]
    with Region(str(path), 1 << 20) as r:
        r.view[:] = 0xFF
    assert path.stat().st_size == HEADER + (1 << 20)
    assert path.read_bytes().startswith(MAGIC)
    shared_region.check(str(path), 1 << 20)


def test_what_is_no_region_is_refused_without_being_opened(tmp_path):
    """A FIFO (opening it would hang), a folder, a path in a folder not there: each
    refused naming it. A path not there yet, in a folder that is, passes the check and
    is not made by it."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, why in ((fifo, "neither a DAX device nor a file"),
                      (tmp_path, "neither a DAX device nor a file"),
                      (tmp_path / "no" / "region", "does not exist to make a region file")):
        with pytest.raises(UserError, match=f"region {path}.*{why}"):
            shared_region.check(str(path))
    shared_region.check(str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()


def fake_dax(root: Path, monkeypatch, size: int, align: int = PAGE,
             bus: bool = True) -> str:
    """/dev/null as sysfs (a fake one at root) would show a DAX device of `size` bytes:
    its path. Only checks and sizes can be taken of it; nothing maps it."""
    null = os.stat("/dev/null")
    node = root / "dev" / "char" / f"{os.major(null.st_rdev)}:{os.minor(null.st_rdev)}"
    node.mkdir(parents=True)
    (node / "size").write_text(f"{size}\n")
    (node / "align").write_text(f"{align}\n")
    if bus:
        (root / "bus" / "dax").mkdir(parents=True)
        (node / "subsystem").symlink_to(root / "bus" / "dax")
    monkeypatch.setattr(shared_region, "SYS", root)
    return "/dev/null"


def test_a_dax_device_is_taken_as_sysfs_describes_it(tmp_path, monkeypatch):
    """A character device is a region where sysfs puts it on the dax bus: its size and
    alignment from there, one too small for the case refused naming it. A device with a
    size in sysfs but not on the dax bus is refused."""
    fake_dax(tmp_path / "other", monkeypatch, 8192, bus=False)
    with pytest.raises(UserError, match="region /dev/null: a character device that is no "
                                        "DAX device"):
        shared_region.check("/dev/null")
    dax = fake_dax(tmp_path / "sys", monkeypatch, 8192)
    shared_region.check(dax, 2 * PAGE)
    assert shared_region.device_size(dax) == (8192, 4096)
    with pytest.raises(UserError, match="region /dev/null: 8192 bytes, the case needs 12288"):
        shared_region.check(dax, 3 * PAGE)


@pytest.mark.parametrize("how", ["file", "link", "ours", "absent"])
def test_fleet_submit_refuses_a_users_file_as_the_shared_region(tmp_path, env, how):
    """`fleet submit --shared-dax PATH` checks what is at PATH here: a user's file or a
    link is refused (exit 2, named, unchanged); a region file cxlbench made, or a path
    not there (it is the machines' path, which each host's run checks), is taken."""
    suite = tmp_path / "two.toml"
    suite.write_text('[pp]\nbench = "shared_pingpong"\nrepeat = 1\n')
    target, data = users_file(tmp_path)
    named = {"file": target, "link": tmp_path / "link.bin", "ours": tmp_path / "ours",
             "absent": tmp_path / "nothing-here"}[how]
    if how == "link":
        named.symlink_to(target)
    elif how == "ours":
        made_region(named)
    r = cxlbench("fleet", "submit", str(suite), "--hosts", "2", "--shared-dax", str(named),
                 "--nodelist", "n1,n2", "--local-results", "--results",
                 str(tmp_path / "shared"), "--dry-run")
    assert "Traceback" not in r.stderr
    if how in ("file", "link"):
        assert r.returncode == 2 and str(named) in r.stderr, r.stderr
    else:
        assert r.returncode == 0, r.stderr
    assert target.read_bytes() == data
