"""A region two hosts share, mapped shared: a DAX device (a CXL region in devdax mode,
never system RAM), or a region file cxlbench made for the purpose. Nothing else is ever
mapped: a region is written from its first page, so a user's file named by mistake (or a
link to one) would lose its contents.

A region file is made afresh where the path does not exist yet: written whole under a
temporary name (O_EXCL), its header first, then linked to the path, which fails where
anything is there already. So the path never shows a file half made: of two hosts
starting at once, one makes it and the other finds it whole, and a file made by anyone
else never passes for one. The header (HEADER bytes, the first line MAGIC) is the mark
a later run knows the file by; the region the hosts share starts after it, so it is laid
out as on a device. Paths are opened without following links (O_PATH first, so a
device is looked at in sysfs before it is opened at all)."""
from __future__ import annotations

import contextlib
import errno
import mmap
import os
import secrets
import stat
from pathlib import Path

import numpy as np

from .errors import UserError
from .ownfiles import open_ours

PAGE = 4096
DAX_ALIGN = 2 << 20     # a DAX device's mapping: whole multiples of its alignment
HEADER = 64 << 10       # a region file's own bytes before the region (any page size's multiple)
MAGIC = b"cxlbench shared region 1\n"
NOTE = (f"A region two hosts of cxlbench's shared_* benchmarks map, from byte {HEADER} on.\n"
        "cxlbench made this file and may write all of it; remove it when done.\n").encode()
SYS = Path("/sys")
HOW = ("give a DAX device (/dev/daxX.Y), or a path that does not exist yet: cxlbench "
       "makes a region file there (and uses it again in later runs)")


def check(path: str, need: int = 0) -> None:
    """UserError (naming path, saying what to give instead) unless path is a DAX device
    (holding `need` bytes), a region file cxlbench made, or nothing yet, in a folder
    where cxlbench can make one. Opens nothing for writing: a dry run's check."""
    found = _pin(path)
    if found is None:
        _creatable(path)
        return
    pinned, st = found
    try:
        have, align, offset = _what(pinned, st, path)
        if not os.access(f"/proc/self/fd/{pinned}", os.R_OK | os.W_OK):
            raise UserError(f"region {path}: this user may not read and write it")
    finally:
        os.close(pinned)
    if not offset:                              # a device holds what it holds
        _fits(path, have, -(-need // align) * align)


def device_size(path: str) -> tuple[int, int] | None:
    """A DAX device's bytes and mapping alignment; None for a region file or a path not
    there yet (a region file grows to what a case needs); UserError for what is no
    region."""
    found = _pin(path)
    if found is None:
        return None
    pinned, st = found
    try:
        have, align, offset = _what(pinned, st, path)
    finally:
        os.close(pinned)
    return None if offset else (have, align)


class Region:
    """A DAX device or a region file, mapped shared: the first `need` bytes of its region
    (rounded up to the device's alignment). A region file is made where the path does not
    exist yet and grown where it holds less; a device too small, or anything else, is
    refused."""

    def __init__(self, path: str, need: int):
        self.path, self.need = path, need

    def __enter__(self) -> "Region":
        found = _pin(self.path)
        if found is None:
            _make(self.path, self.need)
            found = _pin(self.path)
            if found is None:
                raise UserError(f"region {self.path}: removed as soon as it was made")
        pinned, st = found
        try:
            have, align, offset = _what(pinned, st, self.path)
            length = -(-self.need // align) * align
            if not offset:
                _fits(self.path, have, length)
            try:        # the inode looked at, not whatever the path names by now
                fd = os.open(f"/proc/self/fd/{pinned}", os.O_RDWR | os.O_CLOEXEC)
            except OSError as e:
                raise UserError(f"region {self.path}: {e.strerror}") from None
        finally:
            os.close(pinned)
        try:
            if offset and have < length:        # ours: grown, never shrunk
                _allocate(fd, offset + length, self.path)
            self.map = mmap.mmap(fd, length, mmap.MAP_SHARED,
                                 mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
        finally:
            os.close(fd)
        self.view = np.frombuffer(self.map, np.uint8)
        self.addr = self.view.ctypes.data
        return self

    def __exit__(self, *exc) -> None:
        del self.view
        self.map.close()


def dax_size(st, name: str | None = None) -> tuple[int, int]:
    """A character device's size and alignment, read from sysfs where it is a DAX
    device (/sys/dev/char/MAJOR:MINOR, on the dax bus or class); UserError (naming the
    region `name`) otherwise."""
    where = SYS / "dev" / "char" / f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    region = f"region {name}: " if name else ""
    try:
        dax = os.path.basename(os.path.realpath(where / "subsystem")) == "dax"
        size = int((where / "size").read_text()) if dax else None
    except (OSError, ValueError):
        size = None
    if size is None:
        raise UserError(f"{region}a character device that is no DAX device (sysfs has "
                        f"none at {where}): {HOW}")
    try:
        align = int((where / "align").read_text())
    except (OSError, ValueError):
        align = DAX_ALIGN
    return size, align


def _pin(path: str) -> tuple[int, os.stat_result] | None:
    """What is at path itself (a link not followed), held by an O_PATH descriptor that
    opens nothing (no device's open runs) and its stat; None where nothing is there."""
    try:
        pinned = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise UserError(f"region {path}: {e.strerror}") from None
    return pinned, os.fstat(pinned)


def _what(pinned: int, st: os.stat_result, path: str) -> tuple[int, int, int]:
    """A region's bytes, mapping alignment and offset in what `pinned` holds; UserError
    for anything but a DAX device or a region file of cxlbench's."""
    if stat.S_ISLNK(st.st_mode):
        raise UserError(f"region {path} is a symbolic link: cxlbench opens a region "
                        f"without following links; name the DAX device or region file "
                        f"itself")
    if stat.S_ISCHR(st.st_mode):
        size, align = dax_size(st, path)
        return size, align, 0
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"region {path}: neither a DAX device nor a file: {HOW}")
    try:
        fd = os.open(f"/proc/self/fd/{pinned}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            head = os.pread(fd, len(MAGIC), 0)
        finally:
            os.close(fd)
    except OSError as e:
        raise UserError(f"region {path}: {e.strerror}") from None
    if head != MAGIC:
        raise UserError(f"region {path} is a file cxlbench did not make (no cxlbench region "
                        f"header), and cxlbench writes no file but its own: {HOW}")
    return max(st.st_size - HEADER, 0), PAGE, HEADER


def _fits(path: str, have: int, length: int) -> None:
    if have < length:
        raise UserError(f"region {path}: {have} bytes, the case needs {length}")


def _creatable(path: str) -> None:
    """A region file can be made at path (not there yet): its folder exists and this
    user may write in it."""
    folder = os.path.dirname(os.path.abspath(path))
    if path.endswith("/"):
        raise UserError(f"region {path}: no such folder, and a region is no folder: {HOW}")
    if not os.path.isdir(folder):
        raise UserError(f"region {path}: no such file, and its folder {folder} does not "
                        f"exist to make a region file in: {HOW}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"region {path}: no such file, and this user cannot make one in "
                        f"{folder}: {HOW}")


def _make(path: str, need: int) -> None:
    """A region file at path, of HEADER and `need` bytes (whole pages), made whole under a
    temporary name and then linked there; where anything got there first (the other
    host's region file, say), that is left as it is, for the caller to look at."""
    folder, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{name}.{os.getpid()}-{secrets.token_hex(4)}.new")
    try:
        fd = open_ours(Path(tmp), os.O_RDWR | os.O_CREAT | os.O_EXCL,
                       "a region file cxlbench is making")
    except OSError as e:
        raise UserError(f"region {path}: cannot make a region file in {folder}: "
                        f"{e.strerror}") from None
    try:
        try:
            os.pwrite(fd, (MAGIC + NOTE).ljust(PAGE, b"\0"), 0)
        except OSError as e:
            raise UserError(f"region {path}: cannot write a region file in {folder}: "
                            f"{e.strerror}") from None
        _allocate(fd, HEADER + -(-need // PAGE) * PAGE, path)
        try:
            os.link(tmp, path)      # never replaces: EEXIST where anything is there
        except FileExistsError:
            pass
        except OSError as e:
            raise UserError(f"region {path}: cannot make a region file there ({folder} "
                            f"takes no hard links? {e.strerror}): {HOW}") from None
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _allocate(fd: int, size: int, path: str) -> None:
    """A region file's blocks, at least `size` bytes of them: a full disk is told here,
    not met as a SIGBUS when a page of the mapping is first touched."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        why = "no space left on its disk" if e.errno == errno.ENOSPC else e.strerror
        raise UserError(f"region {path}: cannot hold {size} bytes: {why}") from None
