"""What a run records about the system beyond topology.py's settings, because results
depend on it: the CPU's frequency and turbo state, SMT, the kernel command line.
Read through the same injectable sysfs and procfs roots as the topology."""
from __future__ import annotations

import os
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
