"""A region two hosts share: a DAX device (a CXL region in devdax mode, never system
RAM) or a file, mapped shared. Its size and mapping alignment come from sysfs for a
device, from the file itself otherwise."""
from __future__ import annotations

import mmap
import os
import stat
from pathlib import Path

import numpy as np

from .errors import UserError

PAGE = 4096
DAX_ALIGN = 2 << 20     # a DAX device's mapping: whole multiples of its alignment


def size_of(path: str, name: str | None = None) -> tuple[int, int]:
    """A DAX device's or a file's bytes and mapping alignment; UserError (naming the
    region `name`, else path) for neither."""
    name = name or path
    try:
        st = os.stat(path)
    except OSError as e:
        raise UserError(f"region {name}: {e.strerror}") from None
    if stat.S_ISCHR(st.st_mode):
        return dax_size(st)
    if stat.S_ISREG(st.st_mode):
        return st.st_size, PAGE
    raise UserError(f"region {name}: neither a DAX device nor a file")


class Region:
    """A DAX device or a file, mapped shared: the first `need` bytes (rounded up to the
    device's alignment). A device too small, or a path neither, is refused."""

    def __init__(self, path: str, need: int):
        self.path, self.need = path, need

    def __enter__(self) -> "Region":
        try:
            fd = os.open(self.path, os.O_RDWR)
        except OSError as e:
            raise UserError(f"region {self.path}: {e.strerror}") from None
        try:
            have, align = size_of(f"/proc/self/fd/{fd}", self.path)
            length = -(-self.need // align) * align
            if have < length:
                raise UserError(f"region {self.path}: {have} bytes, the case needs {length}")
            self.map = mmap.mmap(fd, length, mmap.MAP_SHARED,
                                 mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.view = np.frombuffer(self.map, np.uint8)
        self.addr = self.view.ctypes.data
        return self

    def __exit__(self, *exc) -> None:
        del self.view
        self.map.close()


def dax_size(st) -> tuple[int, int]:
    """A character device's size and alignment, read from sysfs where it is a DAX
    device (/sys/dev/char/MAJOR:MINOR); UserError otherwise."""
    where = Path(f"/sys/dev/char/{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}")
    try:
        size = int((where / "size").read_text())
    except (OSError, ValueError):
        raise UserError("a character device that is no DAX device (no size in "
                        f"{where})") from None
    try:
        align = int((where / "align").read_text())
    except (OSError, ValueError):
        align = DAX_ALIGN
    return size, align
