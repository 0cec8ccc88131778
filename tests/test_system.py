"""What run.json records beyond the topology: CPU frequency, turbo, SMT, the kernel command
line (read from fixture roots), and how the core was built."""
from pathlib import Path

from cxlbench import native, system


def _tree(root: Path, files: dict) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")
    return root


CPU = "sys/devices/system/cpu"


def test_a_lab_machine_with_cpufreq(tmp_path):
    root = _tree(tmp_path, {
        f"{CPU}/cpu0/cpufreq/scaling_cur_freq": "2100000",
        f"{CPU}/cpu0/cpufreq/scaling_max_freq": "3800000",
        f"{CPU}/intel_pstate/no_turbo": "1",
        f"{CPU}/smt/active": "1",
        f"{CPU}/smt/control": "on",
        "proc/cmdline": "BOOT_IMAGE=/vmlinuz-6.8 root=/dev/nvme0n1p2 memmap=16G!16G",
        "proc/cpuinfo": "processor\t: 0\ncpu MHz\t\t: 999.0\n",
    })
    assert system.read_settings(root / "sys", root / "proc") == {
        "cpu_mhz": 2100.0, "cpu_max_mhz": 3800.0, "turbo": "off", "smt": "on",
        "kernel_cmdline": "BOOT_IMAGE=/vmlinuz-6.8 root=/dev/nvme0n1p2 memmap=16G!16G"}


def test_a_vm_without_cpufreq_reads_cpuinfo(tmp_path):
    root = _tree(tmp_path, {
        f"{CPU}/cpufreq/boost": "1",
        f"{CPU}/smt/active": "0",
        f"{CPU}/smt/control": "notsupported",
        "proc/cpuinfo": "processor\t: 0\nmodel name\t: AMD EPYC\ncpu MHz\t\t: 2596.099\n"
                        "processor\t: 1\ncpu MHz\t\t: 1200.000\n",
    })
    s = system.read_settings(root / "sys", root / "proc")
    assert s == {"cpu_mhz": 2596.1, "cpu_max_mhz": None, "turbo": "on",
                 "smt": "off (notsupported)", "kernel_cmdline": None}


def test_nothing_readable_is_none_not_an_error(tmp_path):
    assert set(system.read_settings(tmp_path / "sys", tmp_path / "proc").values()) == {None}


def test_the_core_says_how_it_was_built():
    info = native.build_info()
    assert info["compiler"].split()[0] in ("GCC", "clang") and any(c.isdigit()
                                                                  for c in info["compiler"])
    # The flags build.py gave, in the compiler's order: ours come last, so -O2 wins.
    from native.build import CFLAGS
    assert info["cflags"].endswith(" ".join(CFLAGS)) and CFLAGS[0] == "-O2"
