"""`cxlbench doctor`'s checks, read from fixture trees of real machine shapes (with the
files a test adds or overwrites), from an empty tree, and from this machine."""
import json

import pytest

from cxlbench import doctor
from cxlbench.emulate import GUEST_PATH, guest_image, tools
from cxlbench.topology import Topology

from . import sysfs_fixtures

CPU = "sys/devices/system/cpu"
NODE = "sys/devices/system/node"
PAGES_16G = 16 * (1 << 30) // 4096


def found(tool, path=None):
    """A `find` for which every tool is installed."""
    return f"/usr/bin/{tool}"


def machine(tmp_path, name, files=None):
    """A fixture machine's tree, with `files` (path -> text) written over it."""
    root = sysfs_fixtures.write(tmp_path, name)
    for rel, text in (files or {}).items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")
    return root


def by_name(root, find=found):
    """The checks of a fixture tree, by name."""
    return {c.name: c for c in doctor.checks(root / "sys", root / "proc", find=find)}


def zoneinfo(node2_normal: int, node2_movable: int) -> str:
    """/proc/zoneinfo as Linux writes it (per-node stats and spanned lines around each
    zone's present pages), node 2 the CXL node."""
    lines = []
    for node, zones in ((0, {"DMA32": 782336, "Normal": PAGES_16G, "Movable": 0}),
                        (1, {"Normal": PAGES_16G, "Movable": 0}),
                        (2, {"Normal": node2_normal, "Movable": node2_movable})):
        for i, (zone, present) in enumerate(zones.items()):
            lines.append(f"Node {node}, zone {zone:>8}")
            if i == 0:
                lines += ["  per-node stats", "      nr_inactive_anon 1234"]
            lines += ["  pages free     1000", f"        spanned  {present + 512}",
                      f"        present  {present}", f"        managed  {present}"]
    return "\n".join(lines)


def test_a_one_node_vm_points_at_the_model_and_emulate(tmp_path):
    c = by_name(machine(tmp_path, "vm"))
    assert c["nodes"].value == "1 memory node (0)"
    assert c["nodes"].status == "info"
    assert "`cxlbench calibrate`" in c["nodes"].affects
    assert c["nodes"].change.startswith("cxlbench emulate ")
    assert (c["far memory zones"].status, c["far memory zones"].value) == \
        ("info", "no CPU-less node")
    assert c["governor"].value == "not available (no cpufreq: a VM?)"
    assert c["governor"].status == "info" and c["governor"].change is None
    assert c["thp"].status == c["numa balancing"].status == c["demotion"].status == "ok"


def test_two_sockets_and_a_movable_cxl_node_warn_for_gpu_pinning(tmp_path):
    c = by_name(machine(tmp_path, "two_socket_cxl",
                        {"proc/zoneinfo": zoneinfo(0, PAGES_16G)}))
    assert c["nodes"].status == "ok"
    assert c["nodes"].value == "3 memory nodes (0-2); no CPUs: 2 (far-memory/CXL candidates)"
    zones = c["far memory zones"]
    assert (zones.status, zones.value) == ("warn", "node 2: all ZONE_MOVABLE")
    assert "cudaHostRegister" in zones.affects
    # The kmem DAX device that onlined it is the one to online again, not movable.
    assert zones.change == ("daxctl offline-memory dax0.0 && "
                            "daxctl online-memory --no-movable dax0.0")


def test_a_cxl_node_with_normal_memory_is_ok(tmp_path):
    c = by_name(machine(tmp_path, "two_socket_cxl",
                        {"proc/zoneinfo": zoneinfo(PAGES_16G // 2, PAGES_16G // 2)}))
    assert c["far memory zones"].status == "ok" and c["far memory zones"].change is None


@pytest.mark.parametrize("normal, status", [("0-1", "warn"), ("0-3", "ok")])
def test_without_zoneinfo_sysfs_has_normal_memory_says(tmp_path, normal, status):
    c = by_name(machine(tmp_path, "lab", {f"{NODE}/has_normal_memory": normal}))
    assert c["far memory zones"].status == status
    if status == "warn":
        assert c["far memory zones"].value == "nodes 2-3: all ZONE_MOVABLE"
        assert "dax0.0 dax1.0" in c["far memory zones"].change


def test_far_zones_unreadable_say_so(tmp_path):
    c = by_name(machine(tmp_path, "two_socket_cxl"))
    assert c["far memory zones"].status == "info"
    assert c["far memory zones"].value.startswith("not available")


@pytest.mark.parametrize("text, status", [
    ("[always] madvise never", "warn"), ("always [madvise] never", "ok"),
    ("always madvise [never]", "warn")])
def test_thp_madvise_is_the_setting_that_leaves_other_memory_alone(tmp_path, text, status):
    c = by_name(machine(tmp_path, "vm",
                        {"sys/kernel/mm/transparent_hugepage/enabled": text}))["thp"]
    assert c.status == status
    if status == "warn":
        assert c.change == "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled"
    if "[never]" in text:
        assert "refused" in c.affects


def test_numa_balancing_and_demotion_on_warn_that_pages_move(tmp_path):
    c = by_name(machine(tmp_path, "two_socket_cxl"))
    assert (c["numa balancing"].status, c["numa balancing"].value) == ("warn", "memory tiering")
    assert "moves pages" in c["numa balancing"].affects
    assert c["numa balancing"].change == "sysctl kernel.numa_balancing=0"
    assert (c["demotion"].status, c["demotion"].value) == ("warn", "true")
    assert c["demotion"].change == "echo false > /sys/kernel/mm/numa/demotion_enabled"


def test_hugepage_pools_are_given_per_node(tmp_path):
    c = by_name(machine(tmp_path, "two_socket_cxl"))["hugepages"]
    assert c.value == "node 0: 2M 16/16 free; none on nodes 1-2"
    assert c.status == "info"
    assert c.change == ("for n in 1 2; do echo 512 > /sys/devices/system/node/node$n"
                        "/hugepages/hugepages-2048kB/nr_hugepages; done")
    pool = f"{NODE}/node0/hugepages/hugepages-1048576kB"
    c = by_name(machine(tmp_path / "vm", "vm", {
        f"{NODE}/node0/hugepages/hugepages-2048kB/nr_hugepages": "8",
        f"{NODE}/node0/hugepages/hugepages-2048kB/free_hugepages": "6",
        f"{pool}/nr_hugepages": "1", f"{pool}/free_hugepages": "0"}))["hugepages"]
    assert (c.status, c.value, c.change) == ("ok", "node 0: 2M 6/8 free, 1G 0/1 free", None)


def test_missing_qemu_is_named_with_its_package(tmp_path):
    def no_qemu(tool, path=None):
        return None if tool in ("qemu-system-x86_64", "daxctl") else found(tool)

    c = by_name(machine(tmp_path / "vm", "vm"), no_qemu)["emulate tools"]
    assert c.value == ("missing qemu-system-x86_64; for the cxl topologies: daxctl; found "
                       "busybox, apt-get, apt-cache, dpkg, depmod, modprobe, cxl, ndctl in "
                       "/usr/bin")
    assert c.change == "apt-get install qemu-system-x86 daxctl"
    assert c.status == "warn"           # one node: emulation is the way to a far tier
    c = by_name(machine(tmp_path / "cxl", "two_socket_cxl"), no_qemu)["emulate tools"]
    assert c.status == "info"
    assert by_name(machine(tmp_path / "ok", "vm"))["emulate tools"].status == "ok"


def test_guest_tools_are_looked_for_on_the_guests_path(tmp_path):
    def only_on_guest_path(tool, path=None):
        return found(tool) if tool not in ("cxl", "ndctl", "daxctl") or path == GUEST_PATH \
            else None

    assert by_name(machine(tmp_path, "vm"), only_on_guest_path)["emulate tools"].status == "ok"


def test_tools_off_path_in_an_sbin_folder_are_found_and_named(tmp_path, monkeypatch):
    """A user's PATH lacks /usr/sbin, where Debian's kmod puts depmod and modprobe: doctor
    finds them there as emulate does, and names the folder, instead of advising to
    install kmod."""
    bin_, sbin = tmp_path / "bin", tmp_path / "sbin"
    for where, names in ((bin_, [t for t, p in {**guest_image.TOOLS, **guest_image.GUEST_TOOLS}
                                 .items() if p != "kmod"]), (sbin, ["depmod", "modprobe"])):
        where.mkdir()
        for name in names:
            (where / name).symlink_to("/bin/true")
    monkeypatch.setenv("PATH", str(bin_))
    monkeypatch.setattr(tools, "SBIN", (str(sbin),))
    monkeypatch.setattr(doctor, "GUEST_PATH", str(bin_))
    c = by_name(machine(tmp_path / "vm", "vm"), tools.find)["emulate tools"]
    assert (c.status, c.change) == ("ok", None)
    assert c.value == (f"all found: qemu-system-x86_64, busybox, apt-get, apt-cache, dpkg, "
                       f"cxl, ndctl, daxctl in {bin_}; depmod, modprobe in {sbin}")


def test_a_busy_machine_warns(tmp_path):
    stat = "cpu  1000 0 500 90000 10 0 0 0 0 0\ncpu0 500 0 250 45000 5 0 0 0 0 0"
    c = by_name(machine(tmp_path / "busy", "vm", {
        "proc/loadavg": "5000.00 4000.00 3000.00 9/999 4242", "proc/stat": stat}))["load"]
    assert c.status == "warn" and c.value.startswith("load average 5000.00 on ")
    c = by_name(machine(tmp_path / "quiet", "vm", {
        "proc/loadavg": "0.00 0.01 0.05 1/99 4242", "proc/stat": stat}))["load"]
    # a /proc/stat that never moves is no sample: no busy or steal share is made up
    assert c.status == "ok" and c.value.endswith(" CPUs") and "stolen" not in c.value


def test_a_lab_machine_sums_up_its_governors_in_one_line(tmp_path):
    files = {f"{CPU}/cpu{i}/cpufreq/scaling_governor": "powersave" if i >= 4 else "performance"
             for i in range(384)}
    files[f"{CPU}/intel_pstate/no_turbo"] = "0"
    files[f"{CPU}/smt/active"], files[f"{CPU}/smt/control"] = "1", "on"
    root = machine(tmp_path, "lab", files)
    checks = doctor.checks(root / "sys", root / "proc", find=found)
    c = {c.name: c for c in checks}
    assert c["governor"].value == "powersave on 380 CPUs, performance on 4"
    assert c["governor"].status == "warn"
    assert c["governor"].change == "cpupower frequency-set -g performance"
    assert c["turbo"].change == "echo 1 > /sys/devices/system/cpu/intel_pstate/no_turbo"
    assert (c["smt"].status, c["smt"].change) == \
        ("info", "echo off > /sys/devices/system/cpu/smt/control")
    lines = doctor.render(checks, width=72)
    assert max(map(len, lines)) <= 72
    # One check for all 384 CPUs, not a line each.
    assert sum(line.startswith("warn  governor:") for line in lines) == 1 and len(lines) < 50
    assert lines[0] == "4 warnings: numa balancing, demotion, governor, turbo (14 checks)"
    assert all(line.startswith(("ok ", "warn ", "info ", doctor.INDENT)) for line in lines[1:])


def test_all_performance_and_boost_off_are_ok(tmp_path):
    files = {f"{CPU}/cpu{i}/cpufreq/scaling_governor": "performance" for i in range(8)}
    files[f"{CPU}/cpufreq/boost"] = "1"
    c = by_name(machine(tmp_path, "two_socket_cxl", files))
    assert (c["governor"].status, c["governor"].value) == ("ok", "performance on all 8 CPUs")
    assert c["turbo"].change == "echo 0 > /sys/devices/system/cpu/cpufreq/boost"


def test_render_sums_up_the_warnings_then_wraps_each_check():
    checks = [doctor.Check("thp", "always", "warn", "TLB reach", "echo madvise > x"),
              doctor.Check("smt", "on", "info", "word " * 40),
              doctor.Check("numa balancing", "normal", "warn", "placement")]
    lines = doctor.render(checks, width=70)
    assert lines[0] == "2 warnings: thp, numa balancing (3 checks)"
    assert lines[1:3] == ["warn  thp: always. Affects TLB reach.",
                          doctor.INDENT + "to change: echo madvise > x"]
    assert lines[3].startswith("info  smt: on. Affects word")
    assert lines[4].startswith(doctor.INDENT + "word") and max(map(len, lines)) <= 70
    assert doctor.render(checks[1:2])[0] == "no warnings (1 checks)"
    assert checks[0].to_dict() == {"name": "thp", "value": "always", "status": "warn",
                                   "affects": "TLB reach", "change": "echo madvise > x"}


def test_an_empty_tree_says_not_available_and_never_raises(tmp_path):
    checks = doctor.checks(tmp_path / "sys", tmp_path / "proc", find=lambda t, path=None: None)
    assert {c.status for c in checks} == {"info"}
    unreadable = [c.name for c in checks if c.value.startswith("not available")]
    assert unreadable == ["nodes", "hugepages", "thp", "thp defrag", "numa balancing",
                          "demotion", "governor", "turbo", "smt", "prefetchers",
                          "smt siblings' load", "load"]


def test_this_machine():
    checks = doctor.checks()
    nodes = len(Topology.read(probe_gpus=False).memory_nodes)
    c = {c.name: c for c in checks}
    assert c["nodes"].value.startswith(f"{nodes} memory node")
    assert all(c.status in ("ok", "warn", "info") and c.value and c.affects for c in checks)
    assert doctor.render(checks)


def test_the_command_on_a_fixture_machine_as_text_and_json(tmp_path):
    """`cxlbench doctor` as a user runs it, on the two-socket CXL tree: the summing-up
    line first, and --json one object per check with the command that would change it."""
    from .conftest import cxlbench

    root = machine(tmp_path, "two_socket_cxl")
    r = cxlbench("doctor", "--sys-root", str(root / "sys"), "--proc-root", str(root / "proc"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "checks)" in lines[0] and any(line.startswith("info  nodes:") or
                                        line.startswith("ok    nodes:") for line in lines)
    r = cxlbench("doctor", "--json", "--sys-root", str(root / "sys"), "--proc-root",
                 str(root / "proc"))
    found = {c["name"]: c for c in json.loads(r.stdout)}
    assert {"nodes", "thp", "numa balancing", "load", "emulate tools"} <= set(found)
    assert all(c["status"] in ("ok", "warn", "info") for c in found.values())
