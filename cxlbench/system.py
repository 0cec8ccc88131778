"""What a run records about the system beyond topology.py's settings, because results
depend on it: the CPU's frequency and turbo state, SMT, the kernel command line.
Read through the same injectable sysfs and procfs roots as the topology."""
from __future__ import annotations

import os
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
