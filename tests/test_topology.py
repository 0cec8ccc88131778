"""Topology read from fixture trees of real machine shapes, and from this machine."""
import json

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
    assert t.dax == [{"name": "dax0.0", "size": 16 * 1024 ** 3, "target_node": 2,
                      "mode": "system-ram", "region": "region0"}]


def test_interleaved_region_mapped_by_memory_blocks(topo):
    t = topo("interleaved_cxl")
    (region,) = t.cxl["regions"]
    assert region["interleave_ways"] == 2 and region["interleave_granularity"] == 256
    assert [x["memdev"] for x in region["targets"]] == ["mem0", "mem1"]
    assert t.dax == []                      # no DAX device: memory blocks decide
    assert region["node"] == 1
    assert t.far_memory_nodes == [1]
    assert t.cxl["root_decoders"][0]["interleave_ways"] == 2


def test_render_reads_like_numactl(topo):
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
