"""pytest fixtures for benchmarking your own code on placed memory (with pytest-benchmark).

    def test_bag(benchmark, tier, placed_array):
        table = placed_array((1 << 20, 128), "float32", page="thp")    # on `tier`'s node
        idx = np.random.default_rng(0).integers(0, 1 << 20, 65536)
        benchmark(lambda: np.add.reduceat(table[idx], np.arange(0, 65536, 32)))

`tier` runs the test once per memory node of the machine (ids `node0-dram`, `node1-cxl`;
pick some with --cxlbench-tiers=1 or =cxl). `placed_array(shape, dtype, mem=..., page=...)`
maps an array with cxlbench's placement machinery (mem defaults to the test's tier, else
local), verifies where its pages landed before handing it over and again at teardown, and
records the placement in pytest-benchmark's extra_info when the test uses `benchmark`. A
placement this machine cannot give (no such node, too little free memory, no hugetlb pool)
skips the test with the reason; one the kernel did not honour fails it.

Registered through the `pytest11` entry point, so it loads in every pytest run: nothing of
cxlbench (topology, numpy, the compiled core) is imported until a test asks for a fixture."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

KINDS = ("dram", "cxl")     # a node with CPUs; one with memory and no CPUs (CXL, far memory)


@dataclass(frozen=True)
class Tier:
    """One memory node as a test sees it: `mem` is the placement spec that puts a buffer
    there (bind:N), `id` what the test ids show."""
    node: int
    kind: str                   # dram or cxl
    cpus: tuple[int, ...]       # the node's own CPUs (none for CXL)
    mem_total: int              # bytes
    memory_tier: int | None     # the kernel's memory tier (abstract distance class)

    @property
    def mem(self) -> str:
        return f"bind:{self.node}"

    @property
    def id(self) -> str:
        return f"node{self.node}-{self.kind}"

    def __str__(self) -> str:
        return self.id

    def to_dict(self) -> dict:
        return {"node": self.node, "kind": self.kind, "mem": self.mem,
                "memory_tier": self.memory_tier, "mem_total": self.mem_total}


def pytest_addoption(parser):
    group = parser.getgroup("cxlbench", "cxlbench: placed memory for benchmarks")
    group.addoption("--cxlbench-tiers", default=None, metavar="LIST",
                    help="memory nodes the `tier` fixture runs on: node numbers and ranges "
                         "(0,2-3) and/or kinds (dram, cxl); default: every memory node")
    group.addoption("--cxlbench-root", default=None, metavar="DIR",
                    help="read the machine's nodes from DIR/sys and DIR/proc (a fixture tree) "
                         "instead of /sys and /proc: the tier list only, placement still "
                         "happens on this machine")


def pytest_configure(config):
    config.addinivalue_line("markers", "cxlbench_tiers(spec): restrict this test's `tier` "
                            "parametrisation, as --cxlbench-tiers does (e.g. 'cxl')")
    if config.getoption("cxlbench_tiers", None):      # a bad pick stops the run at once
        select(_machine_tiers(config), config.getoption("cxlbench_tiers"))


def read_tiers(root: str | None = None) -> list[Tier]:
    """Every node with memory, as Tiers, from /sys and /proc (or a fixture root)."""
    from .topology import Topology
    if root:
        from pathlib import Path
        topo = Topology.read(Path(root) / "sys", Path(root) / "proc", probe_gpus=False)
    else:
        topo = Topology.read(probe_gpus=False)
    return [Tier(n.id, "cxl" if n.far_memory or not n.cpus else "dram", tuple(n.cpus),
                 n.mem_total, n.tier) for n in topo.nodes if n.has_memory]


def select(tiers: list[Tier], spec: str | None) -> list[Tier]:
    """The tiers a spec names: node numbers and ranges, or kinds; None: all. Unknown nodes
    or words are a usage error naming what this machine has."""
    if spec is None or not str(spec).strip():
        return tiers
    from .units import parse_list
    have = ", ".join(t.id for t in tiers) or "none"
    wanted_nodes, wanted_kinds = set(), set()
    for part in str(spec).split(","):
        part = part.strip().lower()
        if part in KINDS:
            wanted_kinds.add(part)
            continue
        try:
            wanted_nodes.update(parse_list(part))
        except ValueError:
            raise pytest.UsageError(f"--cxlbench-tiers: {part!r} is neither a node list nor "
                                    f"one of {', '.join(KINDS)} (memory nodes here: {have})")
    missing = sorted(wanted_nodes - {t.node for t in tiers})
    if missing:
        raise pytest.UsageError(f"--cxlbench-tiers: no memory node {', '.join(map(str, missing))} "
                                f"on this machine (memory nodes here: {have})")
    return [t for t in tiers if t.node in wanted_nodes or t.kind in wanted_kinds]


def _machine_tiers(config) -> list[Tier]:
    cached = getattr(config, "_cxlbench_tiers", None)
    if cached is None:
        cached = read_tiers(config.getoption("cxlbench_root"))
        config._cxlbench_tiers = cached
    return cached


def _ours(metafunc) -> bool:
    """The test's `tier` is this plugin's, not a fixture of the same name a project
    defines for itself (whose tests this plugin must leave as they are)."""
    defs = getattr(metafunc, "_arg2fixturedefs", {}).get("tier")
    if not defs:
        return False
    func = getattr(defs[-1], "func", None)
    return getattr(func, "__module__", None) == __name__


def pytest_generate_tests(metafunc):
    if "tier" not in metafunc.fixturenames or not _ours(metafunc):
        return
    config = metafunc.config
    tiers = select(_machine_tiers(config), config.getoption("cxlbench_tiers"))
    marker = metafunc.definition.get_closest_marker("cxlbench_tiers")
    if marker is not None:
        tiers = [t for t in select(_machine_tiers(config), *marker.args) if t in tiers]
    if not tiers:
        why = ("no memory node matches --cxlbench-tiers / the cxlbench_tiers mark"
               if config.getoption("cxlbench_tiers") or marker else
               "no NUMA memory node found in sysfs")
        metafunc.parametrize("tier", [pytest.param(None, marks=pytest.mark.skip(reason=why))],
                             ids=["no-tier"], indirect=True)
        return
    metafunc.parametrize("tier", tiers, ids=[t.id for t in tiers], indirect=True)


@pytest.fixture
def tier(request):
    """The memory node this run of the test is on (a Tier: .node, .kind, .mem = 'bind:N');
    the test runs once per memory node, or per node --cxlbench-tiers picks."""
    t = getattr(request, "param", None)
    if t is None:
        pytest.fail("the tier fixture is parametrised by the cxlbench plugin; this test was "
                    "collected without it", pytrace=False)
    if "benchmark" in request.fixturenames:
        request.getfixturevalue("benchmark").extra_info["cxlbench_tier"] = t.to_dict()
    return t


@pytest.fixture
def placed_array(request):
    """A factory: placed_array(shape, dtype="float64", mem=None, page="4k", cpus=None) ->
    a zeroed numpy array whose pages lie where `mem` says (default: the test's tier, or
    local), page size `page` (4k, thp, 2m, 1g), verified with move_pages(2) and smaps now
    and at teardown, and recorded in the benchmark's extra_info["cxlbench_placement"]."""
    bench = request.getfixturevalue("benchmark") if "benchmark" in request.fixturenames else None
    default_mem = "local"
    if "tier" in request.fixturenames:
        t = request.getfixturevalue("tier")
        default_mem = t.mem if isinstance(t, Tier) else default_mem     # ours, not a namesake
    made = []

    def make(shape, dtype="float64", mem=None, page="4k", cpus=None):
        from .errors import PlacementError
        from .placement import Placement
        from . import memory
        import numpy as np
        spec = default_mem if mem is None else mem
        wrong = None
        try:        # a malformed request is the test's mistake: it fails
            placement = Placement.of(spec)
            memory.check_page(page)
            dt = np.dtype(dtype)
            shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
            if any(int(d) < 0 for d in shape):
                raise ValueError(f"negative dimension in shape {shape}")
            nbytes = max(int(np.prod(shape, dtype=np.int64)) * dt.itemsize, 1)
        except (PlacementError, TypeError, ValueError) as e:
            wrong = f"placed_array: {e}"
        if wrong:
            pytest.fail(wrong, pytrace=False)
        what = f"placed_array({shape}, {dt.name}, mem={placement}, page={page})"
        skip = None
        try:        # what this machine cannot give: a skip, saying why
            buf = memory.Buffer(nbytes, mem=placement, page=page, cpus=cpus,
                                name=f"array{len(made)}")
        except PlacementError as e:
            skip = f"{what}: {e}"
        except ImportError as e:
            wrong = f"{what}: cxlbench's compiled core is not built ({e})"
        if skip or wrong:
            pytest.skip(skip) if skip else pytest.fail(wrong, pytrace=False)
        v = buf.verify()
        if not v.ok:
            pytest.fail(f"{what}: {buf.failure(v, 'after allocation')}", pytrace=False)
        arr = np.asarray(memory._Owner(buf, buf.array(dt, shape)))
        record = {"shape": list(shape), "dtype": dt.name, "mem": str(placement), "page": page,
                  "bytes": nbytes, "verified": v.to_dict()}
        made.append((buf, what, record))
        if bench is not None:
            bench.extra_info.setdefault("cxlbench_placement", []).append(record)
        return arr

    yield make
    # Verified again after the test: pages that moved meanwhile (NUMA balancing, demotion,
    # memory pressure) mean the figure was measured somewhere else.
    moved = []
    for buf, what, record in made:
        v = buf.verify()
        record["verified_after"] = v.to_dict()
        if not v.ok:
            moved.append(f"{what}: {buf.failure(v, 'after the test')}")
    made.clear()        # the memory goes when the test's last view of it does
    if moved:
        pytest.fail("; ".join(moved), pytrace=False)
