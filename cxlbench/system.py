"""What a run records about the system beyond topology.py's settings, because results
depend on it: the CPU's frequency and turbo state, SMT, the kernel command line, and what
shapes latency tails without cxlbench changing it (the hardware prefetchers, every CPU's
governor, how busy the SMT siblings of the CPUs measured are). Read through the same
injectable sysfs and procfs roots as the topology (and a /dev root for the MSRs)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

from .topology import _numbered, _read   # one reader of sysfs and procfs files
from .units import format_list, parse_list


def read_settings(sys_root: str | os.PathLike = "/sys",
                  proc_root: str | os.PathLike = "/proc") -> dict:
    sysfs, procfs = Path(sys_root), Path(proc_root)
    cur, top = _cpu_mhz(sysfs, procfs)
    return {"cpu_mhz": cur, "cpu_max_mhz": top, "turbo": _turbo(sysfs), "smt": _smt(sysfs),
            "kernel_cmdline": _read(procfs / "cmdline")}


def _mhz(path: Path) -> float | None:
    """A cpufreq file (kHz) in MHz."""
    try:
        return round(int(_read(path) or "") / 1000, 1)
    except ValueError:
        return None


def _cpu_mhz(sysfs: Path, procfs: Path) -> tuple[float | None, float | None]:
    """CPU 0's current frequency and the most its policy allows, from cpufreq; where there
    is no cpufreq (most VMs), the current one from /proc/cpuinfo."""
    freq = sysfs / "devices/system/cpu/cpu0/cpufreq"
    cur, top = _mhz(freq / "scaling_cur_freq"), _mhz(freq / "scaling_max_freq")
    if cur is None:
        for line in (_read(procfs / "cpuinfo", "") or "").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "cpu MHz":
                try:
                    cur = round(float(value), 1)
                except ValueError:
                    pass
                break
    return cur, top


def _turbo(sysfs: Path) -> str | None:
    """intel_pstate says no_turbo; acpi-cpufreq and amd-pstate say boost."""
    cpu = sysfs / "devices/system/cpu"
    no_turbo = _read(cpu / "intel_pstate/no_turbo")
    if no_turbo in ("0", "1"):
        return "off" if no_turbo == "1" else "on"
    boost = _read(cpu / "cpufreq/boost")
    return {"0": "off", "1": "on"}.get(boost or "")


def _smt(sysfs: Path) -> str | None:
    """on or off, with the control's word where it is neither (forceoff, notsupported)."""
    smt = sysfs / "devices/system/cpu/smt"
    active = {"1": "on", "0": "off"}.get(_read(smt / "active") or "")
    control = _read(smt / "control")
    if control in (None, "on", "off"):
        return active
    return f"{active} ({control})" if active else control


NO_CPUFREQ = "no cpufreq"


def governors(sys_root: str | os.PathLike = "/sys") -> dict[str, int] | None:
    """Every CPU's cpufreq governor, counted, most common first (a lab machine has hundreds
    of CPUs, and one CPU left on powersave shifts the figures measured on it); CPUs without
    cpufreq count under NO_CPUFREQ. None where no CPU has cpufreq (most VMs)."""
    cpus = _numbered(Path(sys_root) / "devices/system/cpu", "cpu")
    found = Counter(_read(d / "cpufreq/scaling_governor") or NO_CPUFREQ for _, d in cpus)
    if set(found) <= {NO_CPUFREQ}:
        return None
    return dict(found.most_common())


# The prefetcher-control MSRs, each bit naming the prefetcher it turns OFF when set: Intel's
# MISC_FEATURE_CONTROL (Intel's disclosure of the prefetcher controls, 2014) and AMD's
# PrefetchControl (Zen 3 and later: family 19h on; AMD's PPR for family 19h).
PREFETCH_MSRS = {
    "GenuineIntel": (0x1A4, {0: "L2 streamer", 1: "L2 adjacent line", 2: "DCU streamer",
                             3: "DCU IP"}),
    "AuthenticAMD": (0xC0000108, {0: "L1 stream", 1: "L1 stride", 2: "L1 region",
                                  3: "L2 stream", 5: "L2 up/down"}),
}
AMD_PREFETCH_FAMILY = 0x19


def prefetchers(proc_root: str | os.PathLike = "/proc",
                dev_root: str | os.PathLike = "/dev") -> dict:
    """The hardware prefetchers' state, from the MSR that controls them, read through
    <dev_root>/cpu/<n>/msr (root and the msr module): {"source": "MSR 0x1a4", "cpu": 0,
    "raw": "0x0", "state": {"L2 streamer": "on", ...}}; where it cannot be read,
    {"state": "unknown", "why": ...}. Every CPU is read (one pread each: milliseconds for
    hundreds; a BIOS or wrmsr -p may set one socket or core apart); where they disagree,
    CPU 0's state is given and "note" says which differ. "all_on" is the value that turns
    every listed prefetcher on, the register's other bits kept."""
    first = _first_cpu(Path(proc_root))
    vendor = first.get("vendor_id")
    if vendor not in PREFETCH_MSRS:
        return _unknown(f"no prefetcher MSR known for this CPU ({vendor or 'no vendor_id'})")
    msr, bits = PREFETCH_MSRS[vendor]
    family = _int_or_none(first.get("cpu family"))
    if vendor == "AuthenticAMD" and family is not None and family < AMD_PREFETCH_FAMILY:
        return _unknown(f"AMD's PrefetchControl MSR is Zen 3 and later (family 19h on); "
                        f"this CPU is family {family:x}h")
    values, why = _read_msrs(Path(dev_root), msr)
    if not values:
        return _unknown(why)
    cpu, raw = next(iter(values.items()))
    mask = sum(1 << bit for bit in bits)
    out = {"source": f"MSR {msr:#x}", "cpu": cpu, "raw": f"{raw:#x}",
           "all_on": f"{raw & ~mask:#x}",
           "state": {name: "off" if raw >> bit & 1 else "on" for bit, name in bits.items()}}
    notes = []
    differ = [c for c, v in values.items() if v != raw]
    if differ:
        notes.append(f"CPUs {format_list(differ)} read otherwise; the state is CPU {cpu}'s")
    if "hypervisor" in first.get("flags", "").split():
        notes.append("read in a VM: the hypervisor's view, not necessarily the host's")
    return {**out, "note": "; ".join(notes)} if notes else out


def _unknown(why: str) -> dict:
    return {"state": "unknown", "why": why}


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _first_cpu(procfs: Path) -> dict[str, str]:
    """/proc/cpuinfo's fields of the first processor listed."""
    fields: dict[str, str] = {}
    for line in (_read(procfs / "cpuinfo", "") or "").splitlines():
        if not line.strip() and fields:
            break
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def _read_msrs(dev: Path, msr: int) -> tuple[dict[int, int], str | None]:
    """`msr` on every CPU, the first first: {cpu: value}, or {} and why none could be
    read (the first CPU's failure stands for all: they fail alike)."""
    cpus = sorted(n for n, _ in _numbered(dev / "cpu", ""))
    if not cpus:
        return {}, f"no {dev}/cpu/0/msr: the msr module is not loaded"
    values: dict[int, int] = {}
    for cpu in cpus:
        try:
            values[cpu] = _read_msr(dev / "cpu" / str(cpu) / "msr", msr)
        except FileNotFoundError:
            why = f"no {dev}/cpu/{cpu}/msr: the msr module is not loaded"
        except PermissionError:
            why = f"{dev}/cpu/{cpu}/msr is not readable: it needs root (CAP_SYS_RAWIO)"
        except OSError as e:        # EIO: the CPU (or a hypervisor) refuses this MSR
            why = f"reading MSR {msr:#x} failed: {e.strerror or e} (not on this CPU model?)"
        if not values:
            return {}, why
    return values, None


def _read_msr(path: Path, msr: int) -> int:
    """The msr driver's interface: 8 bytes at the MSR's number as the file offset."""
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.pread(fd, 8, msr)
    finally:
        os.close(fd)
    if len(data) != 8:
        raise OSError(0, f"read {len(data)} of 8 bytes")
    return int.from_bytes(data, "little")


# What glibc's memcpy does at each size on x86-64 (sysdeps/x86_64/multiarch/
# memmove-vec-unaligned-erms.S): vector moves, rep movsb from rep_movsb_threshold to
# rep_movsb_stop_threshold where the CPU has ERMS, non-temporal stores walking 2 or 4
# pages side by side from non_temporal_threshold. Its thresholds come from the loader.
LIBC_TUNABLES = ("rep_movsb_threshold", "rep_movsb_stop_threshold", "rep_stosb_threshold",
                 "non_temporal_threshold")
LOADERS = ("/usr/bin/ld.so", "/lib64/ld-linux-x86-64.so.2")


def libc_copy(proc_root: str | os.PathLike = "/proc", diagnostics: str | None = None) -> dict:
    """How this machine's libc copies: its version, the CPU flags its dispatcher reads,
    its thresholds (glibc's `ld.so --list-diagnostics`, 2.33 and later), and in words
    which method memcpy takes at which sizes. copy_libc's figure depends on all of it."""
    flags = set()
    for line in (_read(Path(proc_root) / "cpuinfo", "") or "").splitlines():
        if line.split(":")[0].strip() in ("flags", "Features"):
            flags = set(line.partition(":")[2].split())
            break
    out = {"version": _libc_version(),
           "cpu_flags": {f: f in flags for f in ("erms", "fsrm", "avx2", "avx512f")}}
    if diagnostics is None:
        diagnostics = _loader_diagnostics()
    if not diagnostics:
        out["thresholds"] = None
        out["why"] = "the loader prints no diagnostics here (glibc before 2.33, or not glibc)"
        return out
    found = dict(re.findall(r"^x86\.cpu_features\.(\w+)=(0x[0-9a-f]+|\d+)$", diagnostics, re.M))
    t = {k: int(found[k], 0) for k in LIBC_TUNABLES if k in found}
    out["thresholds"] = t
    out["source"] = "ld.so --list-diagnostics"
    if "non_temporal_threshold" in t:
        out["memcpy"] = _memcpy_methods(t, flags)
    return out


def _memcpy_methods(t: dict, flags: set) -> str:
    nt, start = t["non_temporal_threshold"], t.get("rep_movsb_threshold")
    stop = min(t.get("rep_movsb_stop_threshold", nt), nt)
    parts = []
    if "erms" in flags and start is not None and start < stop:
        parts.append(f"rep movsb from {_bytes(start)} to {_bytes(stop)}")
        parts.append(f"vector loads and regular stores below {_bytes(start)}" +
                     (f" and from {_bytes(stop)}" if stop < nt else ""))
    else:
        parts.append(f"vector loads and regular stores below {_bytes(nt)}" +
                     ("" if "erms" in flags else " (no ERMS: no rep movsb)"))
    parts.append(f"non-temporal stores walking 2 or 4 pages side by side from "
                 f"{_bytes(nt)}")
    return "; ".join(parts)


def _bytes(n: int) -> str:
    """2112 B, 1 MiB, 288 MiB: the thresholds as glibc's sources write them."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and (n % (1 << shift) == 0 or shift >= 20):
            return f"{n / (1 << shift):.4g} {unit}"
    return f"{n} B"


def _libc_version() -> str | None:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        return None


def _loader_diagnostics() -> str:
    loader = next((p for p in LOADERS if os.path.exists(p)), None) or shutil.which("ld.so")
    if loader is None:
        return ""
    try:
        r = subprocess.run([loader, "--list-diagnostics"], capture_output=True, text=True,
                           timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return r.stdout if r.returncode == 0 else ""


# A load average per CPU above this, other work on this share of the CPU time, or this
# share of it stolen by the hypervisor, means other work competed with the measurements
# (pyperf warns on the same signs).
BUSY_LOAD_PER_CPU = 0.5
BUSY_SHARE = 0.25
BUSY_STEAL = 0.02


def load(proc_root: str | os.PathLike = "/proc", interval: float = 0.2) -> dict:
    """How busy the machine is now: the 1-minute load average, the CPUs online, and over
    `interval` seconds the share of CPU time spent on work (busy) and stolen by the
    hypervisor (steal; 0 on bare metal). Read while cxlbench itself sleeps, busy is other
    work's. Figures /proc lacks, or a sample of no time, are None."""
    procfs = Path(proc_root)
    try:
        load1 = float((_read(procfs / "loadavg") or "").split()[0])
    except (IndexError, ValueError):
        load1 = None
    before = _cpu_times(procfs)
    if before is not None and interval > 0:
        time.sleep(interval)
    share, steal = _shares(before, _cpu_times(procfs))
    return {"load1": load1, "cpus": os.cpu_count(), "busy": share, "steal": steal}


def _shares(before: list[int] | None, after: list[int] | None
            ) -> tuple[float | None, float | None]:
    """The busy and stolen shares of the CPU time between two readings of a /proc/stat
    line; None where either is missing or no time passed."""
    if before is None or after is None or len(after) < 8:
        return None, None
    delta = [a - b for a, b in zip(after, before)]
    total = sum(delta[:8])          # guest time is counted in user already
    if total <= 0:
        return None, None
    user, nice, system, idle, iowait, irq, softirq, stolen = delta[:8]
    return round((user + nice + system + irq + softirq) / total, 4), round(stolen / total, 4)


def _cpu_times(procfs: Path, name: str = "cpu") -> list[int] | None:
    """A line of /proc/stat, the whole machine's ('cpu') by default: user nice system idle
    iowait irq softirq steal ..."""
    return _all_cpu_times(procfs).get(name)


def _all_cpu_times(procfs: Path) -> dict[str, list[int]]:
    """Every cpu line of /proc/stat by its name ('cpu', 'cpu0', ...), in one read."""
    out = {}
    for line in (_read(procfs / "stat", "") or "").splitlines():
        name, _, rest = line.partition(" ")
        if name.startswith("cpu"):
            try:
                out[name] = [int(v) for v in rest.split()]
            except ValueError:
                pass
    return out


# A sibling busier than this shares its core's load ports and caches with a measuring
# thread often enough to show in a latency tail (doctor warns).
SIBLING_BUSY = 0.10
NO_SMT = "no SMT siblings"


def smt_siblings(sys_root: str | os.PathLike = "/sys",
                 cpus=None) -> dict[int, set[int]] | None:
    """Each CPU's SMT siblings other than itself (topology/thread_siblings_list), for
    `cpus` or every CPU sysfs lists; None where sysfs says for none (offline CPUs and
    some containers have no topology folder)."""
    root = Path(sys_root) / "devices/system/cpu"
    wanted = sorted(cpus) if cpus is not None else [n for n, _ in _numbered(root, "cpu")]
    out = {}
    for cpu in wanted:
        text = _read(root / f"cpu{cpu}/topology/thread_siblings_list")
        try:
            out[cpu] = set(parse_list(text)) - {cpu} if text else None
        except ValueError:
            out[cpu] = None
    out = {c: s for c, s in out.items() if s is not None}
    return out or None


def sibling_load(sys_root: str | os.PathLike = "/sys", proc_root: str | os.PathLike = "/proc",
                 cpus=None, interval: float = 0.2) -> dict | str | None:
    """How busy the SMT siblings of `cpus` (the CPUs a run measured on) that are not among
    them were over `interval` seconds: a busy sibling shares its core with the thread
    measuring on it, which shows in tails. cpus None (not known yet): every CPU that has
    siblings. Counted, for hundreds of CPUs: {"of_cpus", "siblings", "count", "busier_than", "busy"
    (how many were), "busiest" (up to 3: CPU -> share)}; NO_SMT where each CPU is its own
    sibling; None where sysfs does not say."""
    sib = smt_siblings(sys_root, cpus)
    if sib is None:
        return None
    if not any(sib.values()):
        return NO_SMT
    used = set(cpus or ())
    others = sorted(set().union(*sib.values()) - used)
    out = {"of_cpus": format_list(used) if cpus is not None else "all",
           "siblings": format_list(others), "count": len(others), "busier_than": SIBLING_BUSY}
    if not others:
        return out
    shares = _per_cpu_busy(Path(proc_root), others, interval)
    if shares is None:
        return {**out, "busy": None, "busiest": None}
    top = sorted(shares.items(), key=lambda cs: -cs[1])[:3]
    return {**out, "busy": sum(s > SIBLING_BUSY for s in shares.values()),
            "busiest": {str(c): s for c, s in top}}


def _per_cpu_busy(procfs: Path, cpus: list[int], interval: float) -> dict[int, float] | None:
    """Each CPU's busy share over `interval` (load()'s share, per /proc/stat cpuN line);
    None where /proc/stat has no per-CPU lines or no time passed on any."""
    before = _all_cpu_times(procfs)
    if not before:
        return None
    if interval > 0:
        time.sleep(interval)
    after = _all_cpu_times(procfs)
    shares = {c: _shares(before.get(f"cpu{c}"), after.get(f"cpu{c}"))[0] for c in cpus}
    shares = {c: s for c, s in shares.items() if s is not None}
    return shares or None


def busy(found: dict, load_average: bool = True) -> str | None:
    """Why a load() reading says the machine was busy, in words; None where it was not.
    load_average=False leaves the load average out: read at the end of a run it counts
    the run's own work of the last minute."""
    why = []
    if load_average and found.get("load1") is not None and found.get("cpus") and \
            found["load1"] > BUSY_LOAD_PER_CPU * found["cpus"]:
        why.append(f"load average {found['load1']:.2f} on {found['cpus']} CPUs")
    if found.get("busy") is not None and found["busy"] > BUSY_SHARE:
        why.append(f"other work on {found['busy']:.0%} of the CPU time")
    if found.get("steal") is not None and found["steal"] > BUSY_STEAL:
        why.append(f"{found['steal']:.0%} of CPU time stolen by the hypervisor")
    return "; ".join(why) or None
