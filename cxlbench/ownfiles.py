"""Files cxlbench writes, and only those: opened without following links, replaced
atomically, under folders of its own. A run folder, a fleet's record and every cache
(estimates, GPU builds, guest images) go through here, so a link or a user's file left at
one of our names is never written through."""
from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

from .errors import ResultsError, StorageError, UserError

CACHE_ENV = "CXLBENCH_CACHE"


def open_ours(path: Path, flags: int, ours: str = "a file cxlbench wrote") -> int:
    """A file opened only where it is a plain file of one name: a folder may be shared
    (a fleet's is), and a link left at one of our names must not make cxlbench write to
    whatever it points at. ResultsError naming what is there; OSError for the rest."""
    try:    # (O_NONBLOCK: a FIFO left there fails rather than hangs the open)
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ResultsError(f"{path} is a symbolic link, not {ours}: remove it") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        what = "has other names (hard links)" if stat.S_ISREG(st.st_mode) else \
            "is not a plain file"
        raise ResultsError(f"{path} {what}, so it is not {ours}: remove it")
    return fd


def write_atomic(path: Path, data: str | bytes, shared: bool = False) -> None:
    """path holds the old contents or the new, whole, whatever happens; StorageError if
    the new cannot be written (the old stays). The new goes to a file made afresh
    (O_EXCL, never through a link left at its name), then renamed over path: the rename
    replaces a link at path rather than writing where it points. `shared`: a path other
    processes may write at the same time (a cache), so each writes a temporary name of its
    own (with one name for all, one could rename another's half-written file into place)."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp" if shared
                         else path.name + ".tmp")
    raw = data.encode() if isinstance(data, str) else data
    try:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()            # left by a crash (or planted): a link goes, not its target
        fd = open_ours(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        with open(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except (OSError, ResultsError) as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        why = e.strerror or e if isinstance(e, OSError) else e
        raise StorageError(f"cannot write {path}: {why}") from None


def fsync_dir(path: Path) -> None:
    """A rename itself on disk: a power cut after it keeps the new name."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_ours(path: Path, limit: int = 64 << 20) -> bytes:
    """A plain file's bytes, read without following a link at its name (a cache entry
    planted as a link to a device or a FIFO must not hang or flood us). OSError for a file
    that is not there or not plain; at most `limit` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(errno.EINVAL, f"{path} is not a plain file")
        return f.read(limit)


def cache_root() -> Path:
    """Where cxlbench keeps what it can compute again (probes, GPU builds, guest images):
    $CXLBENCH_CACHE, else ~/.cache/cxlbench. An empty or relative CXLBENCH_CACHE is
    refused: it would put the cache in whatever folder the command runs from."""
    given = os.environ.get(CACHE_ENV)
    if given is None:
        home = Path.home()      # "~" itself where HOME is unset and no passwd entry names one
        if not home.is_absolute():
            raise UserError(f"no home folder for the cache (HOME is unset, and this user has "
                            f"no passwd entry): set {CACHE_ENV} to an absolute path")
        return home / ".cache" / "cxlbench"
    if not given.strip():
        raise UserError(f"{CACHE_ENV} is set but empty: give a folder for cxlbench's cache, "
                        f"or unset it for ~/.cache/cxlbench")
    if not os.path.isabs(given):
        raise UserError(f"{CACHE_ENV}={given!r}: give an absolute path (a relative one "
                        "would follow the folder each command is run from)")
    return Path(given)


def cache_folder(*parts: str) -> Path:
    """A folder of the cache, made if need be; StorageError if it cannot be made. A link
    at one of the folders cxlbench makes under the root is refused (what is written there
    is ours, not where a link points); the root itself may be a link the user made."""
    path = cache_root().joinpath(*parts)
    for p in [*reversed(path.parents[:len(parts) - 1]), path] if parts else []:
        if p.is_symlink():
            raise StorageError(f"cache folder {p} is a symbolic link: cxlbench writes its "
                               f"cache only into folders of its own; remove the link, or "
                               f"set {CACHE_ENV}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StorageError(f"cannot make the cache folder {path}: {e.strerror or e}") from None
    return path
