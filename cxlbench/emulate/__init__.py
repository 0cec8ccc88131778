"""`cxlbench emulate`: run any cxlbench command in a QEMU guest whose extra NUMA node is
emulated far memory (a CPU-less HMAT node, or CXL type-3 devices onlined with kmem).

The guest runs the host's own Python and cxlbench: the host root is shared read-only
under a writable overlay, the working directory is shared writable (so results/ lands
on the host), and an exchange folder carries the script in and the outputs back."""
from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import PACKAGE_PARENT, lifetime
from ..errors import CxlbenchError, UserError
from ..tiering.calibration import KEPT_ENV
from ..topology import meminfo
from ..units import format_size
from . import guest_image, tools
from .topologies import TOPOLOGIES, get  # noqa: F401  (re-exported for the CLI)

ENV = "CXLBENCH_EMULATED"       # set in the guest: the run is marked as emulated
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def missing_requirements(topology: str) -> list[str]:
    """What this machine lacks to run a guest of `topology`, each with what installs it;
    empty when nothing. `cxlbench emulate` refuses with it, the tests skip with it."""
    missing = tools.missing(guest_image.TOOLS)
    if get(topology).cxl_devices:
        missing += tools.missing(guest_image.GUEST_TOOLS, path=GUEST_PATH)
    # The guest runs this cxlbench: without its compiled core it fails after the boot.
    if importlib.util.find_spec("cxlbench._native") is None:
        missing.append(f"the compiled core cxlbench._native in {PACKAGE_PARENT}/cxlbench "
                       "(pip install .)")
    return missing


def guest_python(module: str) -> str:
    """The shell command that runs `module` with this interpreter and this cxlbench.
    `python -m` would put the working directory first on sys.path, so a checkout there
    (its compiled core not built) would shadow the installed package."""
    boot = (f"import runpy, sys; sys.path[0] = {PACKAGE_PARENT!r}; "
            f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(boot)}"


def qemu_version() -> str:
    out = subprocess.run([tools.command("qemu-system-x86_64"), "--version"],
                         capture_output=True, text=True)
    first = out.stdout.split("\n", 1)[0]
    return first.split("version", 1)[-1].strip().split()[0] if "version" in first else first


def _share(tag: str, path: str, readonly: bool = False) -> list[str]:
    ro = ",readonly=on" if readonly else ""
    return ["-fsdev", f"local,id={tag},path={path},security_model=none{ro},multidevs=remap",
            "-device", f"virtio-9p-pci,fsdev={tag},mount_tag={tag},bus=pcie.0"]


# Linux's own tiering, on in the guest only where asked (the guest is cxlbench's to set;
# a host never is): NUMA balancing's memory-tiering mode and demotion to the far node.
KERNEL_TIERING = ["echo 2 > /proc/sys/kernel/numa_balancing",
                  "echo true > /sys/kernel/mm/numa/demotion_enabled"]


def _guest_script(topo, params: dict, command: list[str], marker: dict,
                  shared: dict[str, str] | None = None) -> str:
    """The guest's script. shared: the variables of one host of two (its number, the
    session both name); such a guest waits, once set up, for the other's (the host says
    go when both have arrived), so neither's first meeting waits for the other's boot."""
    env = {"PATH": GUEST_PATH, "HOME": "/tmp", ENV: json.dumps(marker),
           "PYTHONDONTWRITEBYTECODE": "1",
           # the guest's calibrations, kept beside the image (the host's root is the
           # guest's, read-only): found wherever the guest runs
           KEPT_ENV: str(guest_image.calibrations_dir()), **(shared or {})}
    # QEMU 7.2's TCG mis-executes numpy's AVX2 loops now and then: a worker died by
    # SIGSEGV at a vpgatherdd in numpy's FLOAT_maximum_X86_V3 (a core dump of the guest's
    # optimizer case), never on hardware. numpy's own loops (the checks, not the timed
    # kernels, whose ISA cxlbench picks) stay on SSE in the guest. The names of numpy 2.x
    # (X86_V3...) and 1.x (AVX2...): a name numpy does not dispatch is let pass, and none
    # of these is in either's baseline (numpy refuses to disable those).
    env["NPY_DISABLE_CPU_FEATURES"] = "X86_V3 X86_V4 AVX2 FMA3 AVX512F AVX512CD AVX512_SKX"
    for key in ("PYTHONPATH", "CXLBENCH_TEST_KERNELS", "PYTHONFAULTHANDLER",
                "NPY_DISABLE_CPU_FEATURES"):
        if key in os.environ:
            env[key] = os.environ[key]
    meet = ["touch /.xchg/arrived",
            "while [ ! -e /.xchg/go ]; do sleep 0.2; done"] if shared else []
    lines = ["#!/bin/sh", *(f"export {k}={shlex.quote(v)}" for k, v in env.items()),
             f"cd {shlex.quote(os.getcwd())}", "set -ex", *topo.guest_setup(params),
             *(KERNEL_TIERING if marker.get("kernel_tiering") else []), "set +ex",
             # Trust no figure until the far memory has held data.
             # (its stderr, the far/near line, is relayed with the command's after it)
             f"{guest_python('cxlbench.emulate.probe')} > /.xchg/probe.json "
             "2> /.xchg/stderr || exit 3",
             *meet,
             f"{guest_python('cxlbench')} {' '.join(shlex.quote(a) for a in command)} "
             "> /.xchg/stdout 2>> /.xchg/stderr",
             "echo $? > /.xchg/rc"]
    return "\n".join(lines) + "\n"


ACCELS = ("tcg", "kvm")
KVM_DEVICE = "/dev/kvm"
POLL_S = 0.5                    # how often the guest's progress is looked for


def check_options(topology: str, overrides: dict[str, str], *, timeout: float, accel: str,
                  kernel_package: str | None, kernel_tiering: bool):
    """Every option of `cxlbench emulate`, checked before anything is downloaded, built
    or booted: the topology and its resolved parameters, or a UserError of one line."""
    topo = get(topology)
    params = topo.resolve(overrides)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or \
            not math.isfinite(timeout) or timeout <= 0:
        raise UserError(f"--timeout {timeout!r}: give the guest's limit as a number of "
                        "seconds above 0")
    if accel not in ACCELS:
        raise UserError(f"--accel {accel!r}: choose from {', '.join(ACCELS)}")
    if accel == "kvm" and not os.access(KVM_DEVICE, os.R_OK | os.W_OK):
        raise UserError(f"--accel kvm: {KVM_DEVICE} is missing or not ours to use here; "
                        "use --accel tcg")
    guest_image.check_kernel(*guest_image.chosen_kernel(kernel_package))
    # QEMU allocates the guest's RAM-backed memory up front (the CXL devices' is a file):
    # Linux refuses it beyond what the machine has, and QEMU stops.
    ram = params["dram"] + (0 if topo.cxl_devices else params["far"])
    have = host_memory()
    if have and ram > have:
        what = "dram" if topo.cxl_devices else "dram + far"
        raise UserError(f"topology {topology}: {what} = {format_size(ram, exact=False)} is "
                        f"more than this machine's memory and swap "
                        f"({format_size(have, exact=False)}): QEMU could not allocate it")
    if kernel_tiering and not topo.cxl_devices:
        # Linux puts only dax/kmem memory (the CXL topologies') in a lower tier: an
        # HMAT-only far node shares node 0's, and nothing would ever be demoted to it.
        raise UserError(f"--kernel-tiering: topology {topology}'s far node is in the same "
                        "memory tier as node 0 (Linux tiers only CXL (dax/kmem) memory "
                        "lower): use a cxl topology")
    return topo, params


def host_memory() -> int | None:
    """This machine's memory and swap in bytes; None where /proc does not say."""
    info = meminfo(Path("/proc/meminfo"))
    return info["MemTotal"] + info.get("SwapTotal", 0) if "MemTotal" in info else None


def run(topology: str, overrides: dict[str, str], command: list[str], *, timeout: float = 900,
        accel: str = "tcg", kernel_package: str | None = None, kernel_tiering: bool = False,
        log=print) -> int:
    """Boot the guest (or both, for a topology of two hosts), run `cxlbench COMMAND`
    inside, relay its output (its stderr, the progress, as it comes); its exit code (the
    first host's that failed)."""
    topo, params = check_options(topology, overrides, timeout=timeout, accel=accel,
                                 kernel_package=kernel_package, kernel_tiering=kernel_tiering)
    missing = missing_requirements(topology)
    if missing:
        raise UserError("emulation needs " + "; ".join(missing))
    image = guest_image.ensure(kernel_package, log)
    marker = {"topology": topo.name, "params": params, "qemu": qemu_version(), "accel": accel,
              "guest_kernel": image.version, "probe_file": "/.xchg/probe.json",
              "note": "QEMU emulation: figures come from an emulator, not from hardware",
              "timeout": timeout,     # the guest's own limit: a run estimated past it is refused
              **({"kernel_tiering": True} if kernel_tiering else {})}
    session = os.urandom(6).hex()
    results_root = Path(_results_dir(command))
    before = _runs(results_root)
    with tempfile.TemporaryDirectory(prefix="cxlbench-emulate-") as scratch:
        guests = [_Guest(h, topo, params, image, accel, scratch, command, marker, session)
                  for h in range(topo.hosts)]
        two = f"two guests of {topo.name}" if topo.hosts > 1 else f"the {topo.name} guest"
        log(f"booting {two} (QEMU {marker['qemu']}, {accel}, kernel {image.version}); "
            f"limit {timeout:g} s")
        t0 = time.monotonic()
        failed = _boot(guests, timeout)
        log(f"guest{'s' * (len(guests) > 1)} finished in {time.monotonic() - t0:.1f} s")
        for g in guests:
            if failed is None and not (g.xchg / "rc").exists():
                failed = (g, g.setup_failure())
        if failed:
            g, problem = failed
            where = _keep_logs(g.console, g.xchg, topo.name + g.suffix)
            guest_log = g.xchg / "guest.log"
            tail = guest_log.read_text().strip().splitlines()[-4:] if guest_log.exists() else []
            raise CxlbenchError(f"emulation failed{g.named}: {problem}. Last guest lines: "
                                f"{' | '.join(tail) or '-'}. Console and guest logs: {where}")
        codes = []
        for g in guests:
            out = g.xchg / "stdout"
            if out.exists():
                if len(guests) > 1:
                    sys.stdout.write(f"== host {g.host} ==\n")
                sys.stdout.write(out.read_text())
                sys.stdout.flush()
            codes.append(int((g.xchg / "rc").read_text().strip() or 1))
        if command[:1] == ["calibrate"]:
            for kept in guest_image.keep_calibrations(sorted(_runs(results_root) - before)):
                log(f"calibration kept beside the guest image: {kept} (later {topo.name} "
                    "guests find it, whatever folder they run in)")
        return next((c for c in codes if c), 0)


def _results_dir(command: list[str]) -> str:
    """The results folder the guest's command writes to (its --results-dir, else
    results), relative to the working folder the guest shares."""
    for i, arg in enumerate(command):
        if arg == "--results-dir" and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith("--results-dir="):
            return arg.split("=", 1)[1]
    return "results"


def _runs(root: Path) -> set[Path]:
    """The run folders under a results folder (root/<machine>/<run>)."""
    return {p.parent for p in root.glob("*/*/run.json")}


class _Guest:
    """One QEMU guest of a run: its exchange folder, console, command line and relay."""

    def __init__(self, host: int, topo, params: dict, image, accel: str, scratch: str,
                 command: list[str], marker: dict, session: str):
        self.host, self.many = host, topo.hosts > 1
        home = Path(scratch) / f"host{host}" if self.many else Path(scratch)
        home.mkdir(exist_ok=True)
        self.xchg, self.console = home / "xchg", home / "console.log"
        self.qemu_log = home / "qemu.log"
        self.xchg.mkdir()
        (self.xchg / "workdir").write_text(os.getcwd())
        shared = {"CXLBENCH_SHARED_HOST": str(host),
                  "CXLBENCH_SHARED_SESSION": session} if self.many else None
        (self.xchg / "guest.sh").write_text(_guest_script(
            topo, params, command, {**marker, "host": host} if self.many else marker, shared))
        self.cmd = _qemu_command(topo, params, image, accel, scratch, self.xchg, self.console,
                                 host)
        self.relay = _Tail(self.xchg / "stderr", sys.stderr,
                           f"[host {host}] " if self.many else "")
        self.suffix = f"-host{host}" if self.many else ""
        self.named = f" (host {host})" if self.many else ""
        self.proc = None

    def refused(self) -> bool:
        """QEMU failed, the set-up did, or cxlbench refused the command (exit 2, say): not
        a run whose cases finished, some maybe failed (exit 0 or 1)."""
        rc = self.xchg / "rc"
        return self.proc.returncode != 0 or not rc.exists() or \
            rc.read_text().strip() not in ("0", "1")

    def setup_failure(self) -> str:
        probe = self.xchg / "probe.json"
        if probe.exists() and probe.read_text().strip():
            return "the far-memory check failed: " + probe.read_text().strip()
        return "the guest's set-up failed before the command ran"


# Once a host of two has finished, how long the other may take to: more than a case's
# wait for the other host (120 s by default) and the case itself.
GRACE_S = 300


def _boot(guests: list[_Guest], timeout: float) -> tuple[_Guest, str] | None:
    """Run each guest's QEMU to its end, relaying their progress meanwhile and saying go
    to two guests once both have arrived: the guest that failed and what went wrong, or
    None. A guest that fails ends the others at once; once one has finished well, the
    others have GRACE_S more. Killed with SIGKILL at the limit (QEMU has been seen to
    ignore SIGTERM), and by the kernel if cxlbench is (lifetime.dying_with_us)."""
    deadline = time.monotonic() + timeout
    logs = []
    try:
        for g in guests:
            logs.append(open(g.qemu_log, "wb"))
            # QEMU's own output to a file, not a pipe nobody reads while it runs.
            g.proc = subprocess.Popen(lifetime.dying_with_us(g.cmd), stdin=subprocess.DEVNULL,
                                      stdout=logs[-1], stderr=subprocess.STDOUT)
        said_go = len(guests) == 1
        while True:
            for g in guests:
                g.relay.poll()
            if not said_go and all((g.xchg / "arrived").exists() for g in guests):
                for g in guests:
                    (g.xchg / "go").write_text("go\n")
                said_go = True
            running = [g for g in guests if g.proc.poll() is None]
            for g in guests:
                if g.proc.returncode is not None and running and g.refused():
                    return g, _problem(g)
            if not running:
                break
            if len(running) < len(guests):
                deadline = min(deadline, time.monotonic() + GRACE_S)
            left = deadline - time.monotonic()
            if left <= 0:
                g = running[0]
                if len(running) < len(guests):
                    return g, (f"host {g.host} did not finish within {GRACE_S} s of the "
                               "other (waiting for a host that is gone?)")
                return g, f"the guest did not finish within {timeout:g} s"
            time.sleep(min(POLL_S, left))
        for g in guests:
            g.relay.poll(final=True)
            if g.proc.returncode != 0:
                return g, _problem(g)
        return None
    finally:                # ^C, a failure, the limit: every guest goes
        for g in guests:
            if g.proc is not None and g.proc.poll() is None:
                g.proc.kill()
                g.proc.wait()
        for f in logs:
            f.close()


def _problem(g: _Guest) -> str:
    if g.proc.returncode != 0:
        return (f"QEMU exited {g.proc.returncode}: "
                f"{g.qemu_log.read_text(errors='replace').strip()[-500:]}")
    rc = g.xchg / "rc"
    if rc.exists():
        err = g.xchg / "stderr"
        last = err.read_text(errors="replace").strip().splitlines()[-1:] if err.exists() else []
        return f"cxlbench exited {rc.read_text().strip()} in it: {' '.join(last) or '-'}"
    return g.setup_failure()


class _Tail:
    """Relays the lines a file grows by (the guest's stderr, written over 9p) to a stream,
    whole lines only until the last poll, each after `prefix`."""

    def __init__(self, path: Path, stream, prefix: str = ""):
        self.path, self.stream, self.offset, self.partial = path, stream, 0, b""
        self.prefix = prefix.encode()

    def poll(self, final: bool = False) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        data = self.partial + data
        cut = len(data) if final else data.rfind(b"\n") + 1
        self.partial = data[cut:]
        if cut:
            text = data[:cut]
            if self.prefix:
                text = b"".join(self.prefix + line for line in text.splitlines(True))
            self.stream.write(text.decode(errors="replace"))
            self.stream.flush()


def _qemu_command(topo, params: dict, image, accel: str, scratch: str, xchg: Path,
                  console: Path, host: int = 0) -> list[str]:
    # Hot-added memory stays offline until daxctl onlines it (as movable): Debian's 6.12
    # onlines it itself otherwise, and daxctl then refuses.
    cpu, append = "max", "console=ttyS0 panic=-1 quiet memhp_default_state=offline"
    if _version_tuple(image.version) >= (6, 12):
        # Seen with Debian's 6.12 under QEMU 7.2: CXL devices need these to probe.
        cpu, append = "max,hypervisor=off", append + " pci=nomsi"
    return [tools.command("qemu-system-x86_64"), "-nodefaults", "-display", "none", "-no-reboot",
            "-accel", accel, "-cpu", cpu, "-smp", str(params["cpus"]),
            "-kernel", str(image.kernel), "-initrd", str(image.initramfs), "-append", append,
            "-serial", f"file:{console}", *topo.qemu_args(params, scratch, host),
            *_share("hostroot", "/", readonly=True), *_share("work", os.getcwd()),
            *_share("xchg", str(xchg))]


def _version_tuple(release: str) -> tuple[int, ...]:
    """'6.12.107+deb12-amd64' -> (6, 12)."""
    parts = release.split(".")[:2]
    return tuple(int("".join(ch for ch in p if ch.isdigit()) or 0) for p in parts)


def _keep_logs(console: Path, xchg: Path, name: str) -> Path:
    """The logs copied into a folder of results/emulate-failures/ made afresh (so nothing
    can stand in it beforehand). The exchange folder is the guest's to write: a link it
    left there is copied as a link, never followed into the host's files."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    parent = Path("results") / "emulate-failures"
    parent.mkdir(parents=True, exist_ok=True)
    where = Path(tempfile.mkdtemp(prefix=f"{stamp}-{name}-", dir=parent))
    for src in (console, console.parent / "qemu.log", xchg / "guest.log", xchg / "guest.sh",
                xchg / "probe.json", xchg / "stderr"):
        if os.path.lexists(src):
            shutil.copy(src, where / src.name, follow_symlinks=False)
    return where
