"""What a run records about the system beyond topology.py's settings, because results
depend on it: the CPU's frequency and turbo state, SMT, the kernel command line.
Read through the same injectable sysfs and procfs roots as the topology."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from .topology import _read   # one reader of sysfs and procfs files: text or a default


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
    after = _cpu_times(procfs)
    steal = share = None
    if before is not None and after is not None and len(after) >= 8:
        delta = [a - b for a, b in zip(after, before)]
        total = sum(delta[:8])          # guest time is counted in user already
        if total > 0:
            user, nice, system, idle, iowait, irq, softirq, stolen = delta[:8]
            steal = round(stolen / total, 4)
            share = round((user + nice + system + irq + softirq) / total, 4)
    return {"load1": load1, "cpus": os.cpu_count(), "busy": share, "steal": steal}


def _cpu_times(procfs: Path) -> list[int] | None:
    """The 'cpu' line of /proc/stat: user nice system idle iowait irq softirq steal ..."""
    for line in (_read(procfs / "stat", "") or "").splitlines():
        if line.startswith("cpu "):
            try:
                return [int(v) for v in line.split()[1:]]
            except ValueError:
                return None
    return None


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
