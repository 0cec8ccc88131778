"""Topology read from fixture trees of real machine shapes, and from this machine."""
import json
import os

from cxlbench.topology import Topology

from .conftest import cxlbench


def test_vm_fixture_one_node(topo):
    t = topo("vm")
    assert [n.id for n in t.nodes] == [0]
    assert t.nodes[0].cpus == [0, 1]
    assert t.far_memory_nodes == []
    assert t.tiers == {4: [0]}
    assert t.cxl == {"memdevs": [], "regions": [], "root_decoders": []}
    assert t.settings["thp_enabled"] == "madvise"
    assert t.settings["numa_balancing"] == "disabled"


def test_two_socket_cxl_finds_cpu_less_node_with_hmat(topo):
    t = topo("two_socket_cxl")
    assert [n.id for n in t.nodes] == [0, 1, 2]
    assert t.far_memory_nodes == [2]
    far = t.node(2)
    assert far.cpus == [] and far.mem_total == 16 * 1024 ** 3
    assert far.hmat["access0"] == {"read_latency": 250, "write_latency": 270,
                                   "read_bandwidth": 32000, "write_bandwidth": 28000,
                                   "initiators": [0]}
    assert far.hmat["access1"]["read_latency"] == 250
    assert t.node(0).distances == {0: 10, 1: 21, 2: 14}
    assert far.tier == 22 and t.node(0).tier == 4
    assert t.node(0).hugepages["2048kB"] == {"total": 16, "free": 16}
    assert t.settings["numa_balancing"] == "memory tiering"
    assert t.settings["weighted_interleave"] == {0: 3, 1: 3, 2: 1}
    assert t.settings["thp_enabled"] == "always"


def test_two_socket_cxl_region_mapped_to_node(topo):
    t = topo("two_socket_cxl")
    (mem,) = t.cxl["memdevs"]
    assert mem == {"name": "mem0", "serial": "0x1234", "ram_size": 16 * 1024 ** 3,
                   "pmem_size": 0, "numa_node": 0}
    (region,) = t.cxl["regions"]
    assert region["mode"] == "ram" and region["interleave_ways"] == 1
    assert region["targets"] == [{"decoder": "decoder2.0", "memdev": "mem0"}]
    assert region["root_decoder"] == "decoder0.0"
    assert region["node"] == 2
    assert t.node(2).cxl_regions == ["region0"]
    assert t.cxl["root_decoders"][0]["name"] == "decoder0.0"
    assert t.dax == [{"name": "dax0.0", "size": 16 * 1024 ** 3, "resource": 64 * 1024 ** 3,
                      "target_node": 2, "mode": "system-ram", "region": "region0"}]


def test_interleaved_region_mapped_by_memory_blocks(topo):
    t = topo("interleaved_cxl")
    (region,) = t.cxl["regions"]
    assert region["interleave_ways"] == 2 and region["interleave_granularity"] == 256
    assert [x["memdev"] for x in region["targets"]] == ["mem0", "mem1"]
    assert t.dax == []                      # no DAX device: memory blocks decide
    assert region["node"] == 1
    assert t.far_memory_nodes == [1]
    assert t.cxl["root_decoders"][0]["interleave_ways"] == 2


def test_nvdimm_path_region_mapped_by_physical_address(topo):
    # Linux 6.1, pmem region -> nd region -> devdax -> kmem, memory blocks unreadable.
    t = topo("nvdimm_cxl")
    (region,) = t.cxl["regions"]
    assert region["name"] == "region0" and region["mode"] == "pmem"   # from the endpoint
    assert region["node"] == 1              # not node 2, the NFIT range in nd region0
    assert t.node(1).cxl_regions == ["region0"] and t.node(2).cxl_regions == []
    by_name = {d["name"]: d for d in t.dax}
    assert by_name["dax1.0"]["region"] == "region0"          # inside the region's range
    assert by_name["dax1.0"]["resource"] == 96 * 1024 ** 3 + (128 << 20)
    assert by_name["dax0.0"]["region"] is None               # NFIT pmem, not CXL
    assert by_name["dax1.1"]["mode"] == "devdax"
    text = t.render()
    assert "region0: pmem 16.0 GiB, 1-way x 256 B [decoder2.0->mem0] -> node 1" in text
    assert [line for line in text.splitlines() if line.startswith("dax ")] == [
        "dax dax0.0: system-ram, 4.0 GiB, node 2",
        "dax dax1.0: system-ram, 15.9 GiB, node 1, in CXL region0",
        "dax dax1.1: devdax, 0 MiB, node 1"]


def test_dangling_driver_link_still_names_kmem(topo, machines):
    # A support bundle kept dax0.0/driver but not the drivers' folders, and no memory
    # blocks: the link's own name (.../kmem) is what says the region feeds node 1.
    driver = machines["snapshot_cxl"] / "sys/bus/dax/devices/dax0.0/driver"
    assert driver.is_symlink() and not driver.exists()
    t = topo("snapshot_cxl")
    assert t.dax == [{"name": "dax0.0", "size": 32 * 1024 ** 3, "resource": 256 * 1024 ** 3,
                      "target_node": 1, "mode": "system-ram", "region": "region0"}]
    (region,) = t.cxl["regions"]
    assert region["node"] == 1 and region["targets"] == [{"decoder": "decoder2.0",
                                                          "memdev": "mem0"}]
    assert t.node(1).cxl_regions == ["region0"]


def test_lab_machine_shape(topo):
    t = topo("lab")
    assert [len(n.cpus) for n in t.nodes] == [192, 192, 0, 0]
    assert t.node(0).cpus[95:97] == [95, 192]                # SMT siblings after the cores
    assert t.far_memory_nodes == [2, 3]
    assert [(r["name"], r["node"]) for r in t.cxl["regions"]] == [("region0", 2), ("region1", 3)]
    assert t.allowed_cpus == list(range(384))                # from proc/self/status
    assert t.cpu_pairs() == ["0,1", "0,96"]


def test_allowed_cpus_are_this_process_affinity():
    assert Topology.read(probe_gpus=False).allowed_cpus == sorted(os.sched_getaffinity(0))


def test_gpu_numa_node_read_under_the_sys_root(machines, monkeypatch, tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H200, 143771 MiB, 5, 16, 00000000:17:00.0'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    root = machines["lab"]
    (gpu,) = Topology.read(root / "sys", root / "proc").gpus
    assert gpu["numa_node"] == 1 and gpu["pcie"] == "gen5 x16"


def test_gpu_facts_from_nvidia_smi_and_the_runtime(machines, monkeypatch, tmp_path):
    """nvidia-smi's settings as they are (ECC, MIG, clocks, driver), and the runtime's
    facts of the device at the same PCI address (CUDA numbers devices its own way)."""
    from cxlbench import gpu as gpu_lib
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncase \"$1\" in *name*)\n"
                   "echo 'NVIDIA H200, 143771 MiB, 5, 16, 00000000:17:00.0'\n"
                   "echo 'NVIDIA H200, 143771 MiB, 5, 16, 00000000:9A:00.0';;\n*)\n"
                   "echo 'Enabled, Disabled, 1980 MHz, 3201 MHz, 570.86, 5'\n"
                   "echo 'Enabled, Enabled, 1980 MHz, 3201 MHz, 570.86, 5';;\nesac\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(gpu_lib, "unavailable", lambda: None)
    monkeypatch.setattr(gpu_lib, "runtime", lambda: gpu_lib.Runtime(13000, 13000, 2, 0, ""))
    devices = [{"index": 0, "pci_domain": 0, "pci_bus": 0x9A, "pci_device": 0, "sms": 132},
               {"index": 1, "pci_domain": 0, "pci_bus": 0x17, "pci_device": 0, "sms": 66}]
    monkeypatch.setattr(gpu_lib, "device", lambda i: {
        "major": 9, "minor": 0, "l2_bytes": 50 << 20, "max_threads_per_sm": 2048,
        "bus_width_bits": 6144, **devices[i]})
    root = machines["lab"]
    first, second = Topology.read(root / "sys", root / "proc").gpus
    assert (first["ecc"], first["mig"], first["max_sm_clock"], first["driver"]) == \
        ("Enabled", "Disabled", "1980 MHz", "570.86")
    assert second["mig"] == "Enabled" and first["pcie_max_gen"] == "5"     # idle: "pcie"
    assert (first["cuda"]["index"], first["cuda"]["sms"]) == (1, 66)       # bus 17
    assert (second["cuda"]["index"], second["cuda"]["sms"]) == (0, 132)    # bus 9A
    assert first["cuda"]["l2_bytes"] == 50 << 20
    # A driver that refuses the settings' query keeps the GPUs, without settings; a device
    # the runtime cannot describe keeps nvidia-smi's facts.
    smi.write_text("#!/bin/sh\ncase \"$1\" in *name*)\n"
                   "echo 'NVIDIA H200, 143771 MiB, 5, 16, 00000000:17:00.0';;\n"
                   "*) echo 'Field \"mig.mode.current\" is not a valid field'; exit 2;;\n"
                   "esac\n")

    def broken(i):
        raise gpu_lib.GpuError("device 0: no")
    monkeypatch.setattr(gpu_lib, "device", broken)
    (only,) = Topology.read(root / "sys", root / "proc").gpus
    assert only["pcie"] == "gen5 x16" and "mig" not in only and "cuda" not in only


def test_render_reads_like_numactl(topo):
    assert "CXL: none" in topo("vm").render()          # no CXL, no DAX
    text = topo("two_socket_cxl").render()
    assert "node 2: cpus -  size 16.0 GiB" in text
    assert "far memory (no CPUs)" in text
    assert "region0: ram 16.0 GiB, 1-way x 256 B [decoder2.0->mem0] -> node 2" in text
    assert "hmat access0: read_latency 250 ns" in text


def test_snapshot_round_trips_through_json(topo):
    d = json.loads(topo("two_socket_cxl").to_json())
    assert d["nodes"][2]["far_memory"] is True
    assert d["tiers"] == {"4": [0, 1], "22": [2]}


def test_this_machine_and_cli(machines):
    t = Topology.read(probe_gpus=False)
    assert t.memory_nodes, "this machine shows no node with memory"
    assert all(n.mem_free <= n.mem_total for n in t.nodes)
    r = cxlbench("topology", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["nodes"][0]["id"] == t.nodes[0].id
    root = machines["two_socket_cxl"]
    r = cxlbench("topology", "--sys-root", str(root / "sys"), "--proc-root", str(root / "proc"))
    assert r.returncode == 0 and "fed by CXL region0" in r.stdout
