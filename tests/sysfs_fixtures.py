"""sysfs and procfs trees of real machine shapes, written from the kernel's documented
layout (Documentation/ABI: sysfs-devices-node, sysfs-kernel-mm-memory-tiers,
sysfs-bus-cxl, sysfs-bus-dax, sysfs-kernel-mm-mempolicy-weighted-interleave).

Each machine is a dict of files and a dict of symlinks, so the shape is readable here and
the tree is written afresh for each test session."""
from __future__ import annotations

import os
from pathlib import Path

GIB = 1 << 30
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


def _common(files, tiers, balancing, thp, weights, cpu_flags):
    files["sys/devices/system/memory/block_size_bytes"] = f"{BLOCK:x}"
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
    _common(files, {4: "0"}, 0, "always [madvise] never", {0: 1}, "fpu avx2 avx512f")
    return files, links


CXL_ROOT = "sys/devices/platform/ACPI0017:00/root0"
PCI = "sys/devices/pci0000:34/0000:34:00.0"


def _cxl_memdev(files, links, mem, endpoint, pci_fn, serial, ram):
    path = f"{PCI}/0000:35:0{pci_fn}.0/{mem}"
    files[f"{path}/serial"] = hex(serial)
    files[f"{path}/ram/size"] = hex(ram)
    files[f"{path}/pmem/size"] = "0x0"
    files[f"{path}/numa_node"] = "0"
    ep = f"{CXL_ROOT}/port1/{endpoint}"
    files[f"{ep}/decoder{endpoint[8:]}.0/mode"] = "ram"
    links[f"{ep}/uport"] = path
    links[f"sys/bus/cxl/devices/{mem}"] = path
    links[f"sys/bus/cxl/devices/{endpoint}"] = ep
    links[f"sys/bus/cxl/devices/decoder{endpoint[8:]}.0"] = f"{ep}/decoder{endpoint[8:]}.0"


def _cxl_region(files, links, start, size, ways, targets):
    dec = f"{CXL_ROOT}/decoder0.0"
    files[f"{dec}/start"], files[f"{dec}/size"] = hex(start), hex(size)
    files[f"{dec}/interleave_ways"] = str(ways)
    files[f"{dec}/interleave_granularity"] = "256"
    files[f"{dec}/target_list"] = ",".join(str(i) for i in range(ways))
    reg = f"{dec}/region0"
    files[f"{reg}/mode"], files[f"{reg}/size"], files[f"{reg}/resource"] = "ram", hex(size), hex(start)
    files[f"{reg}/interleave_ways"], files[f"{reg}/interleave_granularity"] = str(ways), "256"
    for i, t in enumerate(targets):
        files[f"{reg}/target{i}"] = t
    links["sys/bus/cxl/devices/root0"] = CXL_ROOT
    links["sys/bus/cxl/devices/decoder0.0"] = dec
    links["sys/bus/cxl/devices/region0"] = reg
    return reg


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
    _common(files, {4: "0-1", 22: "2"}, 2, "[always] madvise never", {0: 3, 1: 3, 2: 1},
            "fpu avx2 avx512f")
    _cxl_memdev(files, links, "mem0", "endpoint2", 0, 0x1234, size)
    reg = _cxl_region(files, links, start, size, 1, ["decoder2.0"])
    dax = f"{reg}/dax_region0/dax0.0"
    files[f"{dax}/target_node"], files[f"{dax}/size"] = "2", str(size)
    files["sys/bus/dax/drivers/kmem/.keep"] = ""
    links[f"{dax}/driver"] = "sys/bus/dax/drivers/kmem"
    links["sys/bus/dax/devices/dax0.0"] = dax
    return files, links


def interleaved_cxl():
    """One socket and a region interleaving two CXL memdevs 2 ways, onlined as CPU-less
    node 1; no DAX device to follow, so the region is mapped through memory blocks."""
    files, links = {}, {}
    _node(files, 0, "0-3", 32 * 1024 * 1024, "10 20")
    _node(files, 1, "", 32 * 1024 * 1024, "20 10")
    start, size = 128 * GIB, 32 * GIB
    _blocks(files, 1, start, size)
    _common(files, {4: "0", 22: "1"}, 0, "always [madvise] never", {0: 1, 1: 1}, "fpu avx2")
    _cxl_memdev(files, links, "mem0", "endpoint2", 0, 0xa1, size // 2)
    _cxl_memdev(files, links, "mem1", "endpoint3", 1, 0xa2, size // 2)
    _cxl_region(files, links, start, size, 2, ["decoder2.0", "decoder3.0"])
    return files, links


MACHINES = {"vm": vm_one_node, "two_socket_cxl": two_socket_cxl,
            "interleaved_cxl": interleaved_cxl}


def write(root: Path, machine: str) -> Path:
    files, links = MACHINES[machine]()
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.name != ".link":
            p.write_text(text + "\n")
    for rel, target in links.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        (root / target).mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(root / target, p.parent), p)
    return root
