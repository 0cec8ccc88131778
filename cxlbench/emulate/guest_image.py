"""The guest image: a Debian kernel and a busybox initramfs holding the modules that CXL,
DAX, kmem, NUMA and 9p need. Built once from Debian packages (never installed on the
host) and cached under ~/.cache/cxlbench/guest/<kernel package>/."""
from __future__ import annotations

import gzip
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .. import ownfiles, results
from ..tiering import calibration
from ..errors import CxlbenchError, UserError
from . import tools

# Loaded in this order in the guest; modprobe adds their dependencies.
MODULES = ("virtio_pci 9pnet_virtio 9p overlay libnvdimm nd_btt nd_pmem cxl_acpi cxl_pci "
           "cxl_mem cxl_pmem dax_pmem device_dax kmem dax_hmem").split()

MANIFEST = "kit.json"    # its name in caches built so far, which stay valid

# Host commands (QEMU, and what builds the image) and the Debian packages that provide them
# (run by the full path tools.find gives: depmod and modprobe are in sbin).
TOOLS = {"qemu-system-x86_64": "qemu-system-x86", "busybox": "busybox-static",
         "apt-get": "apt", "apt-cache": "apt", "dpkg": "dpkg", "depmod": "kmod",
         "modprobe": "kmod"}
# Run in the guest (from the host's root) to online CXL memory.
GUEST_TOOLS = {"cxl": "ndctl", "ndctl": "ndctl", "daxctl": "daxctl"}


@dataclass(frozen=True)
class GuestImage:
    kernel: Path            # uncompressed vmlinux (PVH entry) or the vmlinuz itself
    initramfs: Path
    version: str            # uname -r of the guest
    package: str


def cache_dir() -> Path:
    """The cache's folder of guest images, made if need be (a link there refused)."""
    return ownfiles.cache_folder("guest")


def keep_calibrations(runs: list[Path]) -> list[Path]:
    """The calibration runs among `runs` (a guest's, just made), each copied beside the
    images as calibrations/<machine>/<run>, where a later guest finds them whatever folder
    it runs in (the guest's CXLBENCH_CALIBRATIONS); what was kept. A run kept already is
    left as it is; a copy is made whole under a temporary name, then renamed in."""
    kept = []
    for run in runs:
        try:
            meta = results.read_meta(run)
        except CxlbenchError:
            continue
        if (meta.get("suite") or {}).get("name") != calibration.SUITE:
            continue
        home = cache_dir() / "calibrations" / run.parent.name
        home.mkdir(parents=True, exist_ok=True)
        if home.is_symlink():
            raise UserError(f"{home} is a link: cxlbench keeps its calibrations only in a "
                            "folder of its own")
        dst = home / run.name
        if not dst.exists():
            tmp = Path(tempfile.mkdtemp(prefix=f".{run.name}-", dir=home))
            shutil.copytree(run, tmp / run.name, symlinks=True)
            os.rename(tmp / run.name, dst)
            tmp.rmdir()
        kept.append(dst)
    return kept


def calibrations_dir() -> Path:
    """Where keep_calibrations keeps them (for CXLBENCH_CALIBRATIONS)."""
    return cache_dir() / "calibrations"


KERNEL_ENV = "CXLBENCH_GUEST_KERNEL"
# Debian's rule for package names (lower-case letters, digits, + - and ., starting with a
# letter or digit), here a kernel image's; or a series such as 6.12.
_PACKAGE = re.compile(r"linux-image-[a-z0-9][a-z0-9+.-]*")
_SERIES = re.compile(r"\d+\.\d+")


def check_kernel(wanted: str | None, source: str = "--kernel") -> None:
    """Refuse what cannot name a kernel package before anything is downloaded or built:
    the name becomes a folder of the cache (so no '/' or '..') and an argument of
    apt-get (so no leading '-')."""
    if wanted is None:
        return
    if not isinstance(wanted, str) or not (_SERIES.fullmatch(wanted) or (
            _PACKAGE.fullmatch(wanted) and ".." not in wanted)):
        raise UserError(f"{source} {wanted!r}: not a Debian kernel package (such as "
                        "linux-image-6.1.0-57-amd64) nor a series (such as 6.12)")


def chosen_kernel(wanted: str | None = None) -> tuple[str | None, str]:
    """The kernel asked for, by --kernel or else $CXLBENCH_GUEST_KERNEL, and which."""
    if wanted is not None:
        return wanted, "--kernel"
    return os.environ.get(KERNEL_ENV) or None, KERNEL_ENV


def kernel_package(wanted: str | None = None) -> str:
    """A Debian kernel package: a full name, a series such as "6.12" (its newest build),
    or by default what linux-image-amd64 points at now (the name changes with updates)."""
    wanted, source = chosen_kernel(wanted)
    check_kernel(wanted, source)
    if wanted and _SERIES.fullmatch(wanted):
        out = subprocess.run([tools.command("apt-cache"), "search", "--names-only",
                              rf"^linux-image-{re.escape(wanted)}\.[0-9]+\+deb[0-9]+-amd64$"],
                             capture_output=True, text=True).stdout
        names = [line.split()[0] for line in out.splitlines() if line.strip()]
        if not names:
            raise UserError(f"no Debian kernel package of series {wanted} (apt-cache search "
                            f"found none; run apt-get update?)")
        return max(names, key=lambda n: [int(x) for x in re.findall(r"\d+", n)])
    if wanted:
        return wanted
    out = subprocess.run([tools.command("apt-cache"), "depends", "linux-image-amd64"],
                         capture_output=True, text=True).stdout
    m = re.search(r"Depends:\s+(linux-image-\S+)", out)
    if not m:
        raise UserError("cannot find the Debian kernel package (apt-cache depends "
                        "linux-image-amd64 named none): run apt-get update, or set "
                        f"{KERNEL_ENV} to a package such as linux-image-6.1.0-57-amd64")
    return m.group(1)


def ensure(package: str | None = None, log=print) -> GuestImage:
    """The cached image for a kernel package, built first if need be (the caller has
    checked the TOOLS). It is built in a folder made afresh and renamed into place, so
    nothing left at the image's name is written through; what stood there (a damaged
    image, a link) is moved aside and removed, never followed."""
    package = kernel_package(package)
    home = cache_dir() / package
    try:
        return _cached(home, package)
    except FileNotFoundError:
        pass
    except ValueError as e:
        log(f"the cached guest image {home} does not read back as it was built ({e}): "
            "building it again")
    _check_ours(home)
    log(f"building the guest image from {package} (once; cached in {home})")
    with tempfile.TemporaryDirectory(dir=home.parent) as tmp:
        tmp = Path(tmp)
        _build(package, tmp)
        if os.path.lexists(home):
            _check_ours(home)               # (again: it may have come while we built)
            os.rename(home, tmp / "old")    # removed with tmp; a link goes, not its target
        (tmp / "image").rename(home)
    try:
        return _cached(home, package)
    except (OSError, ValueError) as e:
        raise CxlbenchError(f"the guest image just built in {home} does not read back: "
                            f"{e}") from None


# The files an image's folder holds (_build's); a folder holding others is not ours.
IMAGE_FILES = frozenset({MANIFEST, "vmlinux", "vmlinuz", "initramfs.gz"})
_VERSION = re.compile(r"[0-9][A-Za-z0-9.+_~-]*")


def _cached(home: Path, package: str) -> GuestImage:
    """The image at home as _build wrote it: a folder (not a link), its manifest naming
    the kernel's file and version, the kernel and initramfs plain files (QEMU would
    follow a link into whatever it points at). FileNotFoundError where there is none;
    ValueError saying what is wrong with a damaged one."""
    if not os.path.lexists(home):
        raise FileNotFoundError(home)
    if home.is_symlink() or not home.is_dir():
        raise ValueError("a symbolic link or a file, not a folder cxlbench made")
    try:
        info = json.loads(ownfiles.read_ours(home / MANIFEST, 1 << 20))
    except OSError as e:
        raise ValueError(f"{MANIFEST}: {e.strerror or e}") from None
    except (ValueError, RecursionError):
        raise ValueError(f"{MANIFEST} is not JSON") from None
    if not isinstance(info, dict) or info.get("kernel") not in ("vmlinux", "vmlinuz") or \
            not isinstance(info.get("version"), str) or not _VERSION.fullmatch(info["version"]):
        raise ValueError(f"{MANIFEST} does not name the kernel's file and version")
    image = GuestImage(home / info["kernel"], home / "initramfs.gz", info["version"], package)
    for path in (image.kernel, image.initramfs):
        if path.is_symlink() or not path.is_file():
            raise ValueError(f"{path.name} is not a plain file")
    return image


def _check_ours(home: Path) -> None:
    """What stands at an image's name may be moved aside and removed: a link or file
    left there (only itself goes), or a folder holding only an image's files. A folder
    with anything else in it is not cxlbench's to remove: refused, naming it."""
    if home.is_symlink() or not home.is_dir():
        return
    try:
        others = sorted(set(os.listdir(home)) - IMAGE_FILES)
    except OSError as e:
        others = [f"unreadable: {e.strerror}"]
    if others:
        raise UserError(f"{home} holds files cxlbench did not make ({', '.join(others[:3])}"
                        f"{', ...' if len(others) > 3 else ''}): move them away, or set "
                        f"{ownfiles.CACHE_ENV} to another folder")


def _build(package: str, tmp: Path) -> None:
    r = subprocess.run([tools.command("apt-get"), "download", package], cwd=tmp,
                       capture_output=True, text=True)
    debs = list(tmp.glob("*.deb"))
    if r.returncode != 0 or not debs:
        raise UserError(f"apt-get download {package} failed: {r.stderr.strip()[-300:]}")
    root = tmp / "root"
    subprocess.run([tools.command("dpkg"), "-x", str(debs[0]), str(root)], check=True)
    (version,) = [p.name for p in (root / "lib/modules").iterdir()]
    subprocess.run([tools.command("depmod"), "-b", str(root), version], check=True)
    image = tmp / "image"
    image.mkdir()
    (vmlinuz,) = list((root / "boot").glob("vmlinuz-*"))
    kernel_name = "vmlinux" if _extract_vmlinux(vmlinuz, image / "vmlinux") else "vmlinuz"
    if kernel_name == "vmlinuz":
        shutil.copy(vmlinuz, image / "vmlinuz")
    modules = _module_closure(root, version)
    _write_initramfs(image / "initramfs.gz", modules)
    (image / MANIFEST).write_text(json.dumps({"version": version, "kernel": kernel_name,
                                              "package": package,
                                              "modules": [m.name for m in modules]}))


def _extract_vmlinux(vmlinuz: Path, out: Path) -> bool:
    """The ELF kernel inside an xz bzImage: QEMU boots it through its PVH entry, about
    twice as fast under TCG as decompressing in the guest."""
    data = vmlinuz.read_bytes()
    at = data.find(b"\xfd7zXZ\x00")
    if at < 0:
        return False
    try:
        elf = lzma.LZMADecompressor().decompress(data[at:])
    except lzma.LZMAError:
        return False
    if not elf.startswith(b"\x7fELF"):
        return False
    out.write_bytes(elf)
    return True


def _module_closure(root: Path, version: str) -> list[Path]:
    """Every .ko the MODULES need, dependencies first, each once. `-C /dev/null` because
    ndctl's modprobe.d file would hide libnvdimm."""
    ordered: list[Path] = []
    for name in MODULES:
        r = subprocess.run([tools.command("modprobe"), "-C", "/dev/null", "-d", str(root),
                            "-S", version, "--show-depends", name], capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise UserError(f"the guest kernel {version} lacks module {name}: {r.stderr.strip()}")
        for line in r.stdout.splitlines():
            if line.startswith("insmod "):
                path = Path(line.split()[1])
                if path not in ordered:
                    ordered.append(path)
    return ordered


class _Cpio:
    """A newc archive, the format the kernel unpacks as its initramfs."""

    def __init__(self):
        self.buf, self.ino = io.BytesIO(), 1

    def add(self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)):
        fields = [self.ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1],
                  len(name) + 1, 0]
        self.ino += 1
        self.buf.write(b"070701" + b"".join(b"%08X" % f for f in fields))
        self.buf.write(name.encode() + b"\0")
        self._pad()
        self.buf.write(data)
        self._pad()

    def _pad(self):
        self.buf.write(b"\0" * (-self.buf.tell() % 4))

    def finish(self) -> bytes:
        self.add("TRAILER!!!", 0)
        return self.buf.getvalue()


def _write_initramfs(out: Path, modules: list[Path]) -> None:
    init = (resources.files("cxlbench.emulate") / "init.sh").read_bytes()
    c = _Cpio()
    for d in ("bin", "dev", "proc", "sys", "modules"):
        c.add(d, 0o040755)
    c.add("dev/console", 0o020600, rdev=(5, 1))
    c.add("bin/busybox", 0o100755, Path(tools.command("busybox")).read_bytes())
    c.add("init", 0o100755, init)
    for m in modules:
        c.add(f"modules/{m.name}", 0o100644, m.read_bytes())
    c.add("modules/order", 0o100644, "".join(f"{m.name}\n" for m in modules).encode())
    out.write_bytes(gzip.compress(c.finish(), compresslevel=6))
