"""What shapes a latency tail without cxlbench changing it (issue 49): the hardware
prefetchers read from their MSR, every CPU's governor counted, and how busy the SMT
siblings of the measured CPUs are; read from fixture trees (sysfs, procfs and a /dev
holding msr files made as the msr driver reads: 8 bytes at the MSR's number), recorded in
run.json and reported by `cxlbench doctor`."""
from cxlbench import doctor, runner, system
from cxlbench.results import Run, columns_for
from cxlbench.suite import Suite
from cxlbench.topology import Topology

from . import sysfs_fixtures

CPU = "sys/devices/system/cpu"
INTEL = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nflags\t\t: fpu avx2\n"
AMD = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nflags\t\t: fpu avx2\n"


def tree(root, files):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")
    return root


def msr(dev, cpu, number, value):
    """<dev>/cpu/<cpu>/msr as the msr driver serves it: a sparse file with the MSR's 8
    little-endian bytes at its number as the offset."""
    path = dev / "cpu" / str(cpu) / "msr"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.seek(number)
        f.write(value.to_bytes(8, "little"))
    return path


def stat(busy_by_cpu: dict[int, int], total=1000):
    """/proc/stat whose cpuN lines have `busy` user ticks of `total`."""
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    lines += [f"cpu{c} {b} 0 0 {total - b} 0 0 0 0 0 0" for c, b in busy_by_cpu.items()]
    return "\n".join(lines)


def smt_machine(root, threads: int = 2, cores: int = 4):
    """`cores` cores of `threads` threads each, siblings numbered apart as on x86 servers
    (core k: CPUs k and k + cores)."""
    files = {}
    for cpu in range(cores * threads):
        core = cpu % cores
        siblings = ",".join(str(core + t * cores) for t in range(threads))
        files[f"{CPU}/cpu{cpu}/topology/thread_siblings_list"] = siblings
    return tree(root, files)


# ---- prefetchers -------------------------------------------------------------------------
def test_intel_bits_set_turn_those_prefetchers_off(tmp_path):
    tree(tmp_path, {"proc/cpuinfo": INTEL})
    msr(tmp_path / "dev", 0, 0x1A4, 0b0101)       # L2 streamer and DCU streamer disabled
    found = system.prefetchers(tmp_path / "proc", tmp_path / "dev")
    assert found == {"source": "MSR 0x1a4", "cpu": 0, "raw": "0x5", "all_on": "0x0",
                     "state": {"L2 streamer": "off", "L2 adjacent line": "on",
                               "DCU streamer": "off", "DCU IP": "on"}}


def test_turning_them_on_keeps_the_registers_other_bits(tmp_path):
    """doctor's wrmsr value clears only the prefetcher bits: bit 8 is not one of them."""
    tree(tmp_path, {"proc/cpuinfo": INTEL})
    msr(tmp_path / "dev", 0, 0x1A4, 0x10A)
    found = system.prefetchers(tmp_path / "proc", tmp_path / "dev")
    assert found["raw"] == "0x10a" and found["all_on"] == "0x100"


def test_amd_zen3_reads_prefetch_control(tmp_path):
    tree(tmp_path, {"proc/cpuinfo": AMD})
    msr(tmp_path / "dev", 0, 0xC0000108, 1 << 3 | 1 << 5)
    found = system.prefetchers(tmp_path / "proc", tmp_path / "dev")
    assert found["source"] == "MSR 0xc0000108"
    assert found["state"] == {"L1 stream": "on", "L1 stride": "on", "L1 region": "on",
                              "L2 stream": "off", "L2 up/down": "off"}


def test_zen2_has_no_prefetch_control(tmp_path):
    tree(tmp_path, {"proc/cpuinfo": AMD.replace(": 25", ": 23")})
    msr(tmp_path / "dev", 0, 0xC0000108, 0)
    found = system.prefetchers(tmp_path / "proc", tmp_path / "dev")
    assert found["state"] == "unknown" and "family 17h" in found["why"]


def test_no_msr_device_is_unknown_with_why(tmp_path):
    tree(tmp_path, {"proc/cpuinfo": INTEL})
    found = system.prefetchers(tmp_path / "proc", tmp_path / "dev")
    assert found == {"state": "unknown",
                     "why": f"no {tmp_path / 'dev'}/cpu/0/msr: the msr module is not loaded"}
    (tmp_path / "dev/cpu/0").mkdir(parents=True)         # cpuid's folder, no msr in it
    assert "msr module" in system.prefetchers(tmp_path / "proc", tmp_path / "dev")["why"]
    found = system.prefetchers(tmp_path / "proc", tmp_path / "nothing")
    assert found["state"] == "unknown"


def test_an_unreadable_msr_says_it_needs_root(tmp_path, monkeypatch):
    tree(tmp_path, {"proc/cpuinfo": INTEL})
    msr(tmp_path / "dev", 0, 0x1A4, 0)

    def refused(path, number):          # as for a user: the msr files are root's, mode 600
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(system, "_read_msr", refused)
    assert "needs root" in system.prefetchers(tmp_path / "proc", tmp_path / "dev")["why"]


def test_other_vendors_and_a_short_msr_are_unknown(tmp_path):
    tree(tmp_path, {"proc/cpuinfo": "processor\t: 0\nCPU implementer\t: 0x41\n"})
    assert "no vendor_id" in system.prefetchers(tmp_path / "proc", tmp_path / "dev")["why"]
    tree(tmp_path, {"proc/cpuinfo": INTEL})
    path = tmp_path / "dev/cpu/0/msr"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\0" * 16)                         # ends before 0x1a4: a short read
    found = system.prefetchers(tmp_path / "proc", tmp_path / "dev")
    assert found["state"] == "unknown" and "0x1a4" in found["why"]


def test_cpus_that_disagree_give_cpu_0s_state_and_say_so(tmp_path):
    tree(tmp_path, {"proc/cpuinfo": INTEL.replace("avx2", "avx2 hypervisor")})
    for cpu in range(384):
        (tmp_path / "dev/cpu" / str(cpu)).mkdir(parents=True)
    for cpu in (0, 192, 383):
        msr(tmp_path / "dev", cpu, 0x1A4, 0xF if cpu == 383 else 0)
    found = system.prefetchers(tmp_path / "proc", tmp_path / "dev")
    assert set(found["state"].values()) == {"on"}
    # Three CPUs read of 384: the first, a middle one and the last (another socket).
    assert found["note"] == ("CPUs 383 read otherwise; the state is CPU 0's; read "
                             "in a VM: the hypervisor's view, not necessarily the host's")


# ---- governors ---------------------------------------------------------------------------
def test_every_cpus_governor_is_counted(tmp_path):
    files = {f"{CPU}/cpu{i}/cpufreq/scaling_governor": "powersave" if i % 4 else "performance"
             for i in range(14)}
    files[f"{CPU}/cpu14/online"] = "1"                   # no cpufreq folder
    files[f"{CPU}/cpufreq/boost"] = "1"                  # not a CPU
    tree(tmp_path, files)
    assert system.governors(tmp_path / "sys") == {"powersave": 10, "performance": 4,
                                                  "no cpufreq": 1}
    c = {c.name: c for c in doctor.checks(tmp_path / "sys", tmp_path / "proc",
                                          find=lambda t, path=None: None,
                                          dev_root=tmp_path / "dev")}
    assert c["governor"].value == "powersave on 10 CPUs, performance on 4, no cpufreq on 1"


def test_no_cpufreq_anywhere_is_none(tmp_path):
    tree(tmp_path, {f"{CPU}/cpu0/online": "1", f"{CPU}/cpu1/online": "1"})
    assert system.governors(tmp_path / "sys") is None
    assert system.governors(tmp_path / "empty") is None


# ---- SMT siblings ------------------------------------------------------------------------
def test_siblings_come_from_thread_siblings_list(tmp_path):
    smt_machine(tmp_path)
    assert system.smt_siblings(tmp_path / "sys") == {0: {4}, 1: {5}, 2: {6}, 3: {7},
                                                     4: {0}, 5: {1}, 6: {2}, 7: {3}}
    assert system.smt_siblings(tmp_path / "sys", [1, 2]) == {1: {5}, 2: {6}}


def moving_stat(monkeypatch, *readings):
    """/proc/stat read as `readings` in turn, then as the last (a static file has no time
    between reads)."""
    texts = list(readings)
    monkeypatch.setattr(system, "_all_cpu_times", lambda procfs: {
        line.split()[0]: [int(v) for v in line.split()[1:]]
        for line in (texts.pop(0) if len(texts) > 1 else texts[0]).splitlines()})


def test_the_runs_cpus_siblings_it_does_not_use_and_how_busy(tmp_path, monkeypatch):
    smt_machine(tmp_path)
    moving_stat(monkeypatch, stat({c: 0 for c in range(8)}, total=0),
                stat({0: 900, 4: 500, 5: 30, 6: 990, 7: 0}))
    # CPUs 0-2 and 4 measured: 4 is 0's sibling but the run's own, so only 5 and 6 are
    # siblings left to other work; 7 (CPU 3's) is no sibling of theirs.
    found = system.sibling_load(tmp_path / "sys", tmp_path / "proc", cpus=[0, 1, 2, 4],
                                interval=0)
    assert found == {"of_cpus": "0-2,4", "siblings": "5-6", "count": 2, "busier_than": 0.1,
                     "busy": 1, "busiest": {"6": 0.99, "5": 0.03}}


def test_unknown_cpus_read_every_sibling_and_doctor_warns(tmp_path, monkeypatch):
    smt_machine(tmp_path)
    moving_stat(monkeypatch, stat({c: 0 for c in range(8)}, total=0),
                stat({c: 500 if c == 3 else 10 for c in range(8)}))
    found = system.sibling_load(tmp_path / "sys", tmp_path / "proc", interval=0)
    assert (found["of_cpus"], found["siblings"], found["count"], found["busy"]) == \
        ("all", "0-7", 8, 1)
    assert list(found["busiest"]) == ["3", "0", "1"]
    c = doctor._siblings(found)
    assert (c.name, c.status) == ("smt siblings' load", "warn")
    assert c.value == "1 of 8 siblings busy over 10%; busiest CPU 3 50%, CPU 0 1%, CPU 1 1%"


def test_a_proc_stat_without_time_between_reads_is_no_sample(tmp_path):
    smt_machine(tmp_path)
    tree(tmp_path, {"proc/stat": stat({c: 10 for c in range(8)})})
    found = system.sibling_load(tmp_path / "sys", tmp_path / "proc", interval=0)
    assert (found["count"], found["busy"], found["busiest"]) == (8, None, None)
    assert doctor._siblings(found).status == "info"


def test_no_smt_and_no_topology(tmp_path):
    tree(tmp_path, {f"{CPU}/cpu{i}/topology/thread_siblings_list": str(i) for i in range(4)})
    assert system.sibling_load(tmp_path / "sys", tmp_path / "proc", interval=0) == \
        system.NO_SMT == "no SMT siblings"
    assert system.sibling_load(tmp_path / "none", tmp_path / "proc", interval=0) is None
    assert doctor._siblings(None).value.startswith("not available")
    assert (doctor._siblings(system.NO_SMT).status) == "ok"


def test_a_run_that_measures_on_every_sibling_leaves_none(tmp_path):
    smt_machine(tmp_path, cores=2)
    found = system.sibling_load(tmp_path / "sys", tmp_path / "proc", cpus=[0, 1, 2, 3])
    assert found == {"of_cpus": "0-3", "siblings": "", "count": 0, "busier_than": 0.1}


# ---- run.json and doctor -----------------------------------------------------------------
def test_the_load_readings_take_the_siblings_of_the_cpus_the_journal_names(tmp_path,
                                                                          monkeypatch):
    run = Run.create(tmp_path / "results", {"columns": columns_for(set()), "cases": []})
    asked = []

    def siblings(cpus):
        asked.append(cpus)
        return system.NO_SMT
    runner.record_load(run, "start", lambda: {"load1": 0.1}, siblings)
    monkeypatch.setattr(run, "finished", lambda: {"a": {"cpus": [2, 0]},
                                                  "b": {"cpus": [0, 5]}, "c": {}})
    runner.record_load(run, "end", lambda: {"load1": 0.2}, siblings)
    assert asked == [None, [0, 2, 5]]       # before any case: every CPU's siblings
    assert [r["smt_siblings"] for r in run.meta["load"]] == ["no SMT siblings"] * 2


def test_run_json_settings_record_the_prefetchers_and_governors(monkeypatch):
    """runner.start's settings, as the run reads them (here: the machine's own)."""
    monkeypatch.setattr(system, "prefetchers", lambda: {"state": "unknown", "why": "test"})
    monkeypatch.setattr(system, "governors", lambda: {"performance": 2})
    captured = {}
    monkeypatch.setattr(runner.Run, "create", lambda root, meta: captured.update(meta))
    runner.start(Suite("t", "--bench", "", {}), [], Topology.read(probe_gpus=False), "unused")
    assert captured["settings"]["prefetchers"] == {"state": "unknown", "why": "test"}
    assert captured["settings"]["governors"] == {"performance": 2}


def doctor_checks(root):
    return {c.name: c for c in doctor.checks(root / "sys", root / "proc",
                                             find=lambda t, path=None: None,
                                             dev_root=root / "dev")}


def test_doctor_renders_the_prefetchers_and_siblings(tmp_path, monkeypatch):
    root = sysfs_fixtures.write(tmp_path, "two_socket_cxl")
    tree(root, {"proc/cpuinfo": INTEL})
    smt_machine(root)
    msr(root / "dev", 0, 0x1A4, 0b0010)
    quiet = stat({c: 10 for c in range(8)})
    moving_stat(monkeypatch, stat({c: 0 for c in range(8)}, total=0), quiet)
    checks = doctor.checks(root / "sys", root / "proc", find=lambda t, path=None: None,
                           dev_root=root / "dev")
    c = {c.name: c for c in checks}
    p = c["prefetchers"]
    assert (p.status, p.value) == ("info", "off: L2 adjacent line (MSR 0x1a4, CPU 0 reads 0x2)")
    assert p.change == "wrmsr -a 0x1a4 0x0"
    s = c["smt siblings' load"]
    assert (s.status, s.value) == ("ok", "0 of 8 siblings busy over 10%; busiest CPU 0 1%, "
                                         "CPU 1 1%, CPU 2 1%")
    names = [c.name for c in checks]
    assert names[names.index("smt"):names.index("load") + 1] == \
        ["smt", "prefetchers", "smt siblings' load", "load"]
    lines = doctor.render(checks, width=90)
    assert "info  prefetchers: off: L2 adjacent line (MSR 0x1a4, CPU 0 reads 0x2). Affects " \
        "latency" in " ".join(line.strip() for line in lines)
    msr(root / "dev", 0, 0x1A4, 0)
    monkeypatch.undo()
    c = doctor_checks(root)
    assert (c["prefetchers"].status, c["prefetchers"].value) == \
        ("ok", "all on (MSR 0x1a4, CPU 0 reads 0x0)")
    c = doctor._prefetchers(system.prefetchers(root / "proc", root / "nothing"))
    assert (c.status, c.change) == ("info", "sudo modprobe msr && sudo cxlbench doctor")
    assert c.value.startswith("not available (no ")
