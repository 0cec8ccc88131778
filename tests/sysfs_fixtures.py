"""sysfs and procfs trees of real machine shapes, written from the kernel's documented
layout (Documentation/ABI: sysfs-devices-node, sysfs-kernel-mm-memory-tiers,
sysfs-bus-cxl, sysfs-bus-dax, sysfs-kernel-mm-mempolicy-weighted-interleave).

Each machine is a dict of files and a dict of symlinks, so the shape is readable here and
the tree is written afresh for each test session."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

GIB = 1 << 30
MISSING = None          # a files value: this folder is left out of the tree (after links)
BLOCK = 2 * GIB                      # memory block size in the fixtures


def _node(files, n, cpus, mem_kb, distances, free_kb=None, hmat=None, huge=(0, 0)):
    d = f"sys/devices/system/node/node{n}"
    files[f"{d}/cpulist"] = cpus
    files[f"{d}/distance"] = distances
    files[f"{d}/meminfo"] = (f"Node {n} MemTotal:       {mem_kb} kB\n"
                             f"Node {n} MemFree:        {free_kb or mem_kb * 9 // 10} kB\n"
                             f"Node {n} MemUsed:        {mem_kb // 10} kB\n")
    for size, (total, free) in (("2048kB", huge), ("1048576kB", (0, 0))):
        files[f"{d}/hugepages/hugepages-{size}/nr_hugepages"] = str(total)
        files[f"{d}/hugepages/hugepages-{size}/free_hugepages"] = str(free)
    for access, (values, initiators) in (hmat or {}).items():
        for key, value in zip(("read_latency", "write_latency", "read_bandwidth",
                               "write_bandwidth"), values):
            files[f"{d}/{access}/initiators/{key}"] = str(value)
        for i in initiators:
            files[f"{d}/{access}/initiators/node{i}/.link"] = ""


def _blocks(files, n, start, size):
    for index in range(start // BLOCK, (start + size) // BLOCK):
        files[f"sys/devices/system/node/node{n}/memory{index}/.link"] = ""


def _common(files, cpus, tiers, balancing, thp, weights, cpu_flags):
    files["sys/devices/system/memory/block_size_bytes"] = f"{BLOCK:x}"
    files["sys/devices/system/cpu/online"] = cpus
    files["proc/self/status"] = f"Name:\tcxlbench\nCpus_allowed_list:\t{cpus}\n"
    for tier, nodes in tiers.items():
        files[f"sys/devices/virtual/memory_tiering/memory_tier{tier}/nodelist"] = nodes
    files["proc/sys/kernel/numa_balancing"] = str(balancing)
    files["sys/kernel/mm/numa/demotion_enabled"] = "true" if balancing else "false"
    files["sys/kernel/mm/transparent_hugepage/enabled"] = thp
    files["sys/kernel/mm/transparent_hugepage/defrag"] = "always defer defer+madvise [madvise] never"
    for node, weight in weights.items():
        files[f"sys/kernel/mm/mempolicy/weighted_interleave/node{node}"] = str(weight)
    files["proc/cpuinfo"] = f"processor\t: 0\nmodel name\t: Fixture CPU\nflags\t\t: {cpu_flags}\n"
    files["proc/meminfo"] = "MemTotal:       1024 kB\nMemFree:         512 kB\n"
    for i, (level, kind, size) in enumerate(((1, "Data", "48K"), (1, "Instruction", "32K"),
                                             (2, "Unified", "2048K"), (3, "Unified", "61440K"))):
        c = f"sys/devices/system/cpu/cpu0/cache/index{i}"
        files[f"{c}/level"], files[f"{c}/type"], files[f"{c}/size"] = str(level), kind, size
        files[f"{c}/shared_cpu_list"] = "0"


def vm_one_node():
    """This development VM: one node, two CPUs, no CXL."""
    files, links = {}, {}
    _node(files, 0, "0-1", 24 * 1024 * 1024, "10")
    _common(files, "0-1", {4: "0"}, 0, "always [madvise] never", {0: 1}, "fpu avx2 avx512f")
    return files, links


CXL_ROOT = "sys/devices/platform/ACPI0017:00/root0"
PCI = "sys/devices/pci0000:34/0000:34:00.0"


def _cxl_memdev(files, links, mem, endpoint, pci_fn, serial, size, mode="ram"):
    """A type-3 device and its endpoint decoder, its capacity all `mode` (ram or pmem)."""
    path = f"{PCI}/0000:35:0{pci_fn}.0/{mem}"
    files[f"{path}/serial"] = hex(serial)
    files[f"{path}/ram/size"] = hex(size if mode == "ram" else 0)
    files[f"{path}/pmem/size"] = hex(size if mode == "pmem" else 0)
    files[f"{path}/numa_node"] = "0"
    ep = f"{CXL_ROOT}/port1/{endpoint}"
    files[f"{ep}/decoder{endpoint[8:]}.0/mode"] = mode
    links[f"{ep}/uport"] = path
    links[f"sys/bus/cxl/devices/{mem}"] = path
    links[f"sys/bus/cxl/devices/{endpoint}"] = ep
    links[f"sys/bus/cxl/devices/decoder{endpoint[8:]}.0"] = f"{ep}/decoder{endpoint[8:]}.0"


def _cxl_region(files, links, start, size, ways, targets, root="decoder0.0",
                region="region0", mode="ram"):
    """A root decoder's window and the region in it; mode None: a kernel before 6.3, whose
    regions have no mode file."""
    dec = f"{CXL_ROOT}/{root}"
    files[f"{dec}/start"], files[f"{dec}/size"] = hex(start), hex(size)
    files[f"{dec}/interleave_ways"] = str(ways)
    files[f"{dec}/interleave_granularity"] = "256"
    files[f"{dec}/target_list"] = ",".join(str(i) for i in range(ways))
    reg = f"{dec}/{region}"
    files[f"{reg}/size"], files[f"{reg}/resource"] = hex(size), hex(start)
    if mode:
        files[f"{reg}/mode"] = mode
    files[f"{reg}/interleave_ways"], files[f"{reg}/interleave_granularity"] = str(ways), "256"
    for i, t in enumerate(targets):
        files[f"{reg}/target{i}"] = t
    links["sys/bus/cxl/devices/root0"] = CXL_ROOT
    links[f"sys/bus/cxl/devices/{root}"] = dec
    links[f"sys/bus/cxl/devices/{region}"] = reg
    return reg


def _dax(files, links, path, node, start, size, driver="kmem"):
    """A DAX device at `path` (its name is the last part) bound to `driver`."""
    files[f"{path}/target_node"], files[f"{path}/size"] = str(node), str(size)
    files[f"{path}/resource"] = hex(start)
    files[f"sys/bus/dax/drivers/{driver}/.keep"] = ""
    links[f"{path}/driver"] = f"sys/bus/dax/drivers/{driver}"
    links[f"sys/bus/dax/devices/{path.rsplit('/', 1)[1]}"] = path


def two_socket_cxl():
    """Two sockets (nodes 0, 1) and a 16 GiB CXL expander onlined as CPU-less node 2, with
    HMAT values, a region on one memdev and a kmem DAX device."""
    files, links = {}, {}
    local = ((90, 90, 102400, 102400), [0])
    _node(files, 0, "0-3", 64 * 1024 * 1024, "10 21 14", hmat={"access0": local, "access1": local},
          huge=(16, 16))
    _node(files, 1, "4-7", 64 * 1024 * 1024, "21 10 24",
          hmat={"access0": ((90, 90, 102400, 102400), [1])})
    far = ((250, 270, 32000, 28000), [0])
    _node(files, 2, "", 16 * 1024 * 1024, "14 24 10", hmat={"access0": far, "access1": far})
    start, size = 64 * GIB, 16 * GIB
    _blocks(files, 2, start, size)
    _common(files, "0-7", {4: "0-1", 22: "2"}, 2, "[always] madvise never",
            {0: 3, 1: 3, 2: 1}, "fpu avx2 avx512f")
    _cxl_memdev(files, links, "mem0", "endpoint2", 0, 0x1234, size)
    reg = _cxl_region(files, links, start, size, 1, ["decoder2.0"])
    _dax(files, links, f"{reg}/dax_region0/dax0.0", 2, start, size)
    return files, links


def interleaved_cxl():
    """One socket and a region interleaving two CXL memdevs 2 ways, onlined as CPU-less
    node 1; no DAX device to follow, so the region is mapped through memory blocks."""
    files, links = {}, {}
    _node(files, 0, "0-3", 32 * 1024 * 1024, "10 20")
    _node(files, 1, "", 32 * 1024 * 1024, "20 10")
    start, size = 128 * GIB, 32 * GIB
    _blocks(files, 1, start, size)
    _common(files, "0-3", {4: "0", 22: "1"}, 0, "always [madvise] never", {0: 1, 1: 1},
            "fpu avx2")
    _cxl_memdev(files, links, "mem0", "endpoint2", 0, 0xa1, size // 2)
    _cxl_memdev(files, links, "mem1", "endpoint3", 1, 0xa2, size // 2)
    _cxl_region(files, links, start, size, 2, ["decoder2.0", "decoder3.0"])
    return files, links


def nvdimm_cxl():
    """Linux 6.1: a pmem-mode CXL region (no mode file yet) reaches the system through the
    nvdimm bridge, nd region -> devdax -> kmem, so its DAX device hangs off an nd region
    (ndbus0/region1), not off the CXL region (region0). A legacy NFIT pmem range, onlined
    the same way as node 2, took nd region0: a name match would map the CXL region there.
    The memory blocks are unreadable (a container), so only the DAX devices' physical
    ranges say that CXL region0 feeds node 1. A devdax device (no kmem) feeds nothing."""
    files, links = {}, {}
    _node(files, 0, "0-3", 32 * 1024 * 1024, "10 20 17")
    _node(files, 1, "", 16 * 1024 * 1024, "20 10 28")
    _node(files, 2, "", 4 * 1024 * 1024, "17 28 10")
    _common(files, "0-3", {4: "0", 22: "1-2"}, 0, "always [madvise] never", {0: 1, 1: 1},
            "fpu avx2")
    start, size = 96 * GIB, 16 * GIB
    _cxl_memdev(files, links, "mem0", "endpoint2", 0, 0xb1, size, mode="pmem")
    _cxl_region(files, links, start, size, 1, ["decoder2.0"], mode=None)
    nd = f"{CXL_ROOT}/nvdimm-bridge0/ndbus0"
    # The namespace starts past the label area and the devdax metadata.
    _dax(files, links, f"{nd}/region1/dax1.0/dax1.0", 1, start + (128 << 20),
         size - (128 << 20))
    _dax(files, links, f"{nd}/region1/dax1.1/dax1.1", 1, start + size, 0, driver="device_dax")
    nfit = "sys/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0012:00/ndbus1/region0"
    _dax(files, links, f"{nfit}/dax0.0/dax0.0", 2, 200 * GIB, 4 * GIB)
    return files, links


def lab_machine():
    """A lab machine: 2 sockets of 96 cores x 2 threads (384 CPUs, SMT siblings numbered
    after all cores: node 0 has 0-95 and 192-287), and behind each socket a CXL expander
    onlined as a CPU-less node (2 and 3), each through its own region and kmem DAX device."""
    files, links = {}, {}
    dram = ((110, 110, 250000, 250000), [0])
    far = ((280, 300, 60000, 50000), [0])
    _node(files, 0, "0-95,192-287", 512 * 1024 * 1024, "10 21 14 24",
          hmat={"access0": dram}, huge=(64, 64))
    _node(files, 1, "96-191,288-383", 512 * 1024 * 1024, "21 10 24 14",
          hmat={"access0": ((110, 110, 250000, 250000), [1])}, huge=(64, 64))
    _node(files, 2, "", 256 * 1024 * 1024, "14 24 10 26", hmat={"access0": far})
    _node(files, 3, "", 256 * 1024 * 1024, "24 14 26 10",
          hmat={"access0": ((280, 300, 60000, 50000), [1])})
    _common(files, "0-383", {4: "0-1", 22: "2-3"}, 2, "always [madvise] never",
            {0: 3, 1: 3, 2: 1, 3: 1}, "fpu avx2 avx512f")
    for i, node in enumerate((2, 3)):
        start, size = (1024 + 256 * i) * GIB, 256 * GIB
        _blocks(files, node, start, size)
        _cxl_memdev(files, links, f"mem{i}", f"endpoint{2 + i}", i, 0xc0 + i, size)
        reg = _cxl_region(files, links, start, size, 1, [f"decoder{2 + i}.0"],
                          root=f"decoder0.{i}", region=f"region{i}")
        _dax(files, links, f"{reg}/dax_region{i}/dax{i}.0", node, start, size)
    files["sys/bus/pci/devices/0000:17:00.0/numa_node"] = "1"       # a GPU on socket 1
    return files, links


def snapshot_cxl():
    """A support bundle's copy of a machine with a 32 GiB CXL expander onlined as CPU-less
    node 1 through region0 and a kmem DAX device: the copy kept each device's files and
    links but not sys/bus/dax/drivers/, so dax0.0/driver dangles (its name, .../kmem, still
    says system RAM), and holds no memory blocks. Only the DAX device maps the region."""
    files, links = {}, {}
    _node(files, 0, "0-7", 64 * 1024 * 1024, "10 20")
    _node(files, 1, "", 32 * 1024 * 1024, "20 10")
    _common(files, "0-7", {4: "0", 22: "1"}, 2, "always [madvise] never", {0: 1, 1: 1},
            "fpu avx2")
    start, size = 256 * GIB, 32 * GIB
    _cxl_memdev(files, links, "mem0", "endpoint2", 0, 0xd1, size)
    reg = _cxl_region(files, links, start, size, 1, ["decoder2.0"])
    _dax(files, links, f"{reg}/dax_region0/dax0.0", 1, start, size)
    files["sys/bus/dax/drivers"] = MISSING
    return files, links


MACHINES = {"vm": vm_one_node, "two_socket_cxl": two_socket_cxl,
            "interleaved_cxl": interleaved_cxl, "nvdimm_cxl": nvdimm_cxl, "lab": lab_machine,
            "snapshot_cxl": snapshot_cxl}


def write(root: Path, machine: str) -> Path:
    files, links = MACHINES[machine]()
    for rel, text in files.items():
        if text is MISSING:
            continue
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.name != ".link":
            p.write_text(text + "\n")
    for rel, target in links.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        (root / target).mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(root / target, p.parent), p)
    for rel in [rel for rel, text in files.items() if text is MISSING]:
        shutil.rmtree(root / rel)           # after the links to it: they dangle
    return root
