"""Placed buffers, and page moves and node maps over them.

A Buffer takes a Placement (placement.py; text such as "bind:1" is parsed at this public
edge, for memory.array() and callers of their own) and a page size. check_request
refuses, before anything is mapped, what the machine cannot give; the Buffer is then
mapped with the Placement's policy, nodes and weights (native.Allocation), prefaulted
from the CPUs that will use it, and its placement read back with move_pages(2) (and its
page size with smaps) so a number measured on the wrong node, or on small pages where
huge ones were asked for, never goes unnoticed."""
from __future__ import annotations

import errno
import os
import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .errors import PlacementError
from .placement import PAGE_SIZES, Placement
from .topology import Topology
from .units import MAX_NODES, format_list, format_size, parse_list

HUGETLB_DIRS = {"2m": "hugepages-2048kB", "1g": "hugepages-1048576kB"}
DEFAULT_TOLERANCE = 0.01
SMAPS = "/proc/self/smaps"
THP_SYSFS = "/sys/kernel/mm/transparent_hugepage"


class _NativeAtFirstUse:
    """cxlbench.native, imported at first use: the benchmarks' option tables, and so
    suites and --set, load and validate where the compiled core is not built. Patch
    cxlbench.native itself in a test: an attribute patched here is restored here, as
    an attribute of this object, and hides every later patch of the module."""

    def __getattr__(self, name):
        from . import native as module
        return getattr(module, name)


native = _NativeAtFirstUse()


def check_page(page: str) -> str:
    if page not in PAGE_SIZES:
        raise PlacementError(f"unknown page size {page!r}: use one of {', '.join(PAGE_SIZES)}")
    return page


def check_request(placement: Placement, page: str, size: int, topo: Topology, cpus,
                  claimed: dict | None = None) -> list[int]:
    """Refuse, before mapping anything, what the machine cannot give. Returns the nodes the
    pages should land on. `claimed` adds up the requests of several buffers of one case:
    {(node, "bytes" or a hugetlb page size): what the ones checked before take}."""
    claimed = {} if claimed is None else claimed
    check_page(page)
    # madvise works under 'always' and 'madvise'; under 'never' no page would be huge.
    if page == "thp" and topo.settings.get("thp_enabled") == "never":
        raise PlacementError(f"transparent huge pages are disabled ({THP_SYSFS}/enabled is "
                             "never): set it to madvise, or use page=4k, 2m or 1g")
    known = {n.id: n for n in topo.nodes}
    nodes = list(placement.nodes) if placement.nodes else topo.nodes_of_cpus(cpus) or \
        topo.memory_nodes[:1]
    for node_id in nodes:
        if node_id not in known:
            raise PlacementError(f"node {node_id} does not exist (this machine has nodes "
                                 f"{format_list(known)})")
        if not known[node_id].has_memory:
            raise PlacementError(f"node {node_id} has no memory (nodes with memory: "
                                 f"{format_list(topo.memory_nodes)})")
    shares = placement.shares(nodes)
    page_size = PAGE_SIZES[page]
    pages = -(-size // page_size)
    for node_id, share in shares.items():
        node = known[node_id]
        need_pages = -(-pages * share.numerator // share.denominator)
        hugetlb = page in HUGETLB_DIRS
        need = need_pages if hugetlb else need_pages * page_size     # pages, or bytes
        key = (node_id, page if hugetlb else "bytes")
        claimed[key] = total = claimed.get(key, 0) + need
        others = " (with the case's other buffers there)" if total > need else ""
        if hugetlb:
            pool = node.hugepages.get(HUGETLB_DIRS[page].split("-", 1)[1], {"free": 0})
            if pool["free"] < total:
                path = f"/sys/devices/system/node/node{node_id}/hugepages/{HUGETLB_DIRS[page]}/nr_hugepages"
                raise PlacementError(
                    f"hugetlb pool on node {node_id} has {pool['free']} free {page} pages, "
                    f"{total} needed{others}: raise {path}")
        elif total > node.mem_free:
            raise PlacementError(
                f"{format_size(total)} on node {node_id}{others} exceeds its free memory "
                f"({node.mem_free / (1 << 20):.0f} MiB free of "
                f"{node.mem_total / (1 << 20):.0f} MiB)")
    return nodes


def weighted_method(placement: Placement, topo: Topology) -> str:
    """The kernel's MPOL_WEIGHTED_INTERLEAVE takes its weights from sysfs, not from the
    caller. Use it only where those weights already give the spec's ratios; otherwise
    place page ranges ourselves. System settings are never changed."""
    if placement.policy != "weighted":
        return "none"
    sysw = topo.settings.get("weighted_interleave") or {}
    if native.has_weighted_interleave() and all(sysw.get(n) for n in placement.nodes):
        ours = [Fraction(w, sum(placement.weights)) for w in placement.weights]
        theirs_total = sum(sysw[n] for n in placement.nodes)
        if ours == [Fraction(sysw[n], theirs_total) for n in placement.nodes]:
            return "kernel"
    return "manual"


def huge_bytes(smaps: str, lo: int, hi: int) -> tuple[int, bool]:
    """Bytes of [lo, hi) that huge pages map, from smaps text. The figures are per VMA: a
    hugetlb VMA (KernelPageSize above 4 kB) is huge throughout, others count their
    AnonHugePages. A VMA reaching outside the range (merged with a neighbour) is credited
    only what must lie inside it; the flag says the result is then a lower bound."""
    total, exact = 0, True

    def add(vma):
        nonlocal total, exact
        start, end, fields = vma
        overlap = min(end, hi) - max(start, lo)
        if overlap <= 0:
            return
        if fields.get("KernelPageSize", 4) > 4:
            total += overlap
            return
        huge = fields.get("AnonHugePages", 0) << 10
        if end - start > overlap:
            exact = exact and huge == 0
            huge = max(0, huge - (end - start - overlap))
        total += huge

    vma = None
    for line in smaps.splitlines():
        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line)
        if m:
            if vma:
                add(vma)
            vma = (int(m.group(1), 16), int(m.group(2), 16), {})
        elif vma and (m := re.match(r"(\w+):\s+(\d+) kB", line)):
            vma[2][m.group(1)] = int(m.group(2))
    if vma:
        add(vma)
    return total, exact


def thp_hint(settings: dict) -> str:
    """Why the kernel gave small pages to a madvised range, from the THP settings."""
    if settings.get("thp_enabled") == "never":
        return f"transparent huge pages are disabled ({THP_SYSFS}/enabled is never)"
    defrag = settings.get("thp_defrag")
    if defrag in ("defer", "never"):
        return (f"no free 2 MiB pages at fault and no compaction tried ({THP_SYSFS}/defrag "
                f"is {defrag}; madvise lets the fault compact)")
    return (f"memory too fragmented for 2 MiB pages even with compaction at fault "
            f"({THP_SYSFS}/defrag is {defrag}); echo 1 > /proc/sys/vm/compact_memory may help")


@dataclass
class Verification:
    counts: dict[int, int]           # pages per node, as move_pages(2) reports
    other: int                       # pages not present or on an unknown node
    step: int                        # bytes per counted page
    expected: dict[int, float]       # share per node the spec asks for
    deviation: float                 # fraction of pages in the wrong place
    allowed: int                     # pages that may be misplaced
    placed: bool                     # deviation within the tolerance
    huge: float                      # fraction of the mapping in huge pages (smaps)
    huge_exact: bool                 # False: a VMA shared with a neighbour, huge is a lower bound
    huge_ok: bool                    # page=thp: huge within the tolerance (always True otherwise)

    @property
    def ok(self) -> bool:
        return self.placed and self.huge_ok

    def counts_text(self) -> str:
        text = ";".join(f"{n}:{c}" for n, c in sorted(self.counts.items()) if c)
        return text + (f";other:{self.other}" if self.other else "")

    def to_dict(self) -> dict:
        return {"counts": {str(k): v for k, v in self.counts.items() if v}, "other": self.other,
                "text": self.counts_text(),
                "step": self.step, "expected": {str(k): round(v, 4) for k, v in self.expected.items()},
                "deviation": round(self.deviation, 6), "huge": round(self.huge, 4),
                **({} if self.huge_exact else {"huge_lower_bound": True}), "ok": self.ok}


class Buffer:
    """A placed, prefaulted buffer. `cpus` are the CPUs that touch it first (and decide
    where `local` memory goes); `name` is what the benchmark calls it (src, chain...)."""

    def __init__(self, size: int, mem: str | Placement = "local", page: str = "4k", cpus=None,
                 topology: Topology | None = None, tolerance: float = DEFAULT_TOLERANCE,
                 prefault: bool = True, name: str = ""):
        if size <= 0:
            raise PlacementError(f"buffer size must be positive, got {size}")
        self.topology = topology or Topology.read(probe_gpus=False)
        self.placement = Placement.of(mem)
        self.page = check_page(page)
        self.cpus = list(cpus) if cpus is not None else sorted(os.sched_getaffinity(0))
        self.tolerance = tolerance
        self.name = name
        self.smaps = SMAPS                       # a fixture file in tests
        self.huge_at_first_check = None
        self.nodes = check_request(self.placement, page, size, self.topology, self.cpus)
        self.method = weighted_method(self.placement, self.topology)
        self.alloc = native.Allocation(size, page, self.placement.policy, self.placement.nodes,
                                       self.placement.weights, self.method)
        self.size = size
        if prefault:
            self.alloc.prefault(self.cpus)

    @property
    def addr(self) -> int:
        return self.alloc.addr

    @property
    def placement_method(self) -> str:
        return {"none": "mbind", "kernel": "MPOL_WEIGHTED_INTERLEAVE",
                "manual": "mbind page ranges"}[self.method]

    def release_policy(self) -> None:
        """Drop the range's own NUMA policy, pages left where they are: the kernel's
        NUMA balancing then may scan and move them (it skips a range bound by mbind)."""
        self.alloc.release_policy()

    def verify(self) -> Verification:
        step = self.alloc.page_size if self.page in HUGETLB_DIRS else 4096
        maxnode = max([n.id for n in self.topology.nodes] + list(self.nodes)) + 1
        counts, other = self.alloc.query_nodes(step, maxnode)
        counts = {n: c for n, c in enumerate(counts)}
        total = sum(counts.values()) + other
        shares = self.placement.shares(self.nodes)
        if self.placement.any_split:
            misplaced = other + sum(c for n, c in counts.items() if n not in shares)
        else:
            misplaced = other + sum(max(0, c - total * shares.get(n, 0))
                                    for n, c in counts.items())
        # Interleaving rounds to whole pages: one page per extra node is never a fault.
        allowed = max(self.tolerance * total, len(shares) - 1)
        if self.page == "thp":
            # memory.c maps thp 2 MiB-aligned and rounded up: the whole mapping can be
            # huge. smaps walks every page table of the process, so only thp reads it.
            with open(self.smaps) as f:
                huge, exact = huge_bytes(f.read(), self.addr, self.addr + self.alloc.map_size)
            huge /= self.alloc.map_size
        else:       # hugetlb is huge by construction; 4k is madvised MADV_NOHUGEPAGE
            huge, exact = float(self.page in HUGETLB_DIRS), True
        if self.huge_at_first_check is None:
            self.huge_at_first_check = huge
        return Verification(counts=counts, other=other, step=step,
                            expected={n: float(s) for n, s in shares.items()},
                            deviation=float(misplaced) / total if total else 0.0,
                            allowed=int(allowed), placed=misplaced <= allowed,
                            huge=huge, huge_exact=exact,
                            huge_ok=self.page != "thp" or huge >= 1 - self.tolerance)

    def failure(self, v: Verification, when: str) -> str:
        problems = []
        if not v.placed:
            problems.append(f"placement {self.placement} not honoured {when}: pages per node "
                            f"{v.counts_text()}, {v.deviation:.1%} misplaced "
                            f"(tolerance {self.tolerance:.1%})")
        if not v.huge_ok:
            first = self.huge_at_first_check
            why = ("huge pages were split since allocation (page migration or memory "
                   "pressure)" if first is not None and first > v.huge
                   else thp_hint(self.topology.settings))
            bound = "" if v.huge_exact else " at least"
            problems.append(f"page=thp not honoured {when}:{bound} {v.huge:.1%} of "
                            f"{format_size(self.alloc.map_size)} in huge pages "
                            f"(tolerance {self.tolerance:.1%}): {why}")
        return (f"buffer {self.name}: " if self.name else "") + "; ".join(problems)

    def ensure_placed(self, when: str) -> Verification:
        v = self.verify()
        if not v.ok:
            raise PlacementError(self.failure(v, when))
        return v

    def array(self, dtype=np.uint8, shape=None) -> np.ndarray:
        return self.alloc.array(dtype, shape)


class _Owner:
    """The base of an array() result: it keeps the Buffer, so verify(a) can read it back."""

    def __init__(self, buf: Buffer, view: np.ndarray):
        self.buffer, self.view = buf, view
        self.__array_interface__ = view.__array_interface__


def array(shape, dtype=np.float64, mem: str | Placement = "local", page: str = "4k",
          cpus=None) -> np.ndarray:
    """A numpy array whose memory is placed by `mem` and `page`, verified, and freed when
    the array is garbage-collected. Example: array((1024, 1024), "f4", mem="bind:1")."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    buf = Buffer(max(count * dtype.itemsize, 1), mem=mem, page=page, cpus=cpus)
    buf.ensure_placed("after allocation")
    return np.asarray(_Owner(buf, buf.array(dtype, shape)))


def _buffer_of(a: np.ndarray) -> Buffer | None:
    """The Buffer under an array() result or a view of one."""
    while isinstance(a, np.ndarray):
        a = a.base
    return a.buffer if isinstance(a, _Owner) else None


def verify(a: np.ndarray) -> Verification:
    """Placement and huge-page fraction of an array() result (or a view of one), now."""
    buf = _buffer_of(a)
    if buf is None:
        raise PlacementError("verify() takes an array made by cxlbench.memory.array()")
    return buf.verify()


# ---- page-range moves and node maps ---------------------------------------------------
MEMORY_NODES = "/sys/devices/system/node/has_memory"
_byte_bounds = getattr(np, "byte_bounds", None) or np.lib.array_utils.byte_bounds   # numpy 2


def _pages(obj) -> tuple[int, int, int]:
    """(first page's address, pages, page size) of a Buffer's mapping or of the pages
    holding a numpy array's bytes. A page is 4 KiB (under THP too: move_pages(2) takes
    base pages) or the page of a hugetlb Buffer (page=2m, 1g) and of its arrays. An array
    that starts or ends inside a page takes that whole page, with whatever else it holds."""
    if isinstance(obj, Buffer):
        buf, (lo, hi) = obj, (obj.addr, obj.addr + obj.alloc.map_size)
    elif isinstance(obj, np.ndarray) and obj.size:
        buf, (lo, hi) = _buffer_of(obj), _byte_bounds(obj)
    else:
        raise PlacementError("page moves and maps take a Buffer or a non-empty numpy array, "
                             f"not {'an empty one' if isinstance(obj, np.ndarray) else type(obj).__name__}")
    page = buf.alloc.page_size if buf is not None and buf.page in HUGETLB_DIRS else 4096
    first = lo - lo % page
    return first, -(-(hi - first) // page), page


def node_map(obj) -> np.ndarray:
    """Each page's node now (int32, one per page: see _pages), read with move_pages(2) in
    C. A page that is not there reads -errno: -ENOENT never touched, -EFAULT only read
    (the shared zero page) or not mapped."""
    return native.node_map(*_pages(obj))


@dataclass(frozen=True)
class MoveResult:
    moved: int                  # pages of the range on the node after (moved, or there already)
    ns: int                     # the system calls alone, timed in C
    failures: dict[int, str]    # page index -> why it is not on the node: an errno name
                                # (EBUSY, EACCES, ENOMEM, ENOENT...) or "node N" where it stayed

    def reasons(self) -> str:
        """The failures counted by reason, most common first: 'EBUSY x3, node 0 x1'."""
        return ", ".join(f"{why} x{n}" for why, n in Counter(self.failures.values()).most_common())


def _page_list(which, pages: int, start: int, end: int | None, method: str) -> np.ndarray:
    """`which` as int64 page indices, each within [0, pages): what C then trusts."""
    which = np.asarray(which)
    if start or end is not None:
        raise PlacementError("move takes a page range or a page list, not both")
    if method != "move_pages":
        raise PlacementError(f"a page list moves with move_pages, not {method}")
    if which.ndim != 1 or not len(which) or not np.issubdtype(which.dtype, np.integer):
        raise PlacementError(f"a page list is a non-empty list of page indices, not "
                             f"{which.dtype} x {which.shape}")
    if which.min() < 0 or which.max() >= pages:
        raise PlacementError(f"page {int(which.min() if which.min() < 0 else which.max())} "
                             f"is not one of the {pages} pages")
    return which.astype(np.int64)


def move(obj, node: int, start: int = 0, end: int | None = None, method: str = "move_pages",
         batch: int = 0, which: np.ndarray | None = None) -> MoveResult:
    """Move pages [start, end) of obj (a Buffer or numpy array: pages as in _pages) to
    `node` with move_pages(2) or mbind(2) MPOL_BIND|MPOL_MF_MOVE (the range then stays
    bound to the node), `batch` pages a call (0: one), timed in C. A THP holding a page of
    the range moves whole, its pages outside the range too. `which` (move_pages only):
    these page indices instead of a range, scattered as they may be (failures are keyed
    by page index either way)."""
    addr, pages, page = _pages(obj)
    if which is not None:
        which = _page_list(which, pages, start, end, method)
    else:
        end = pages if end is None else end
        if not 0 <= start < end <= pages:
            raise PlacementError(f"page range [{start}, {end}) is not within the {pages} "
                                 f"pages of {format_size(page)}")
    if method not in native.MOVE_METHODS or batch < 0:
        raise PlacementError(f"method {method!r} or batch {batch} is not move_pages or mbind "
                             "with 0 or more pages a call")
    try:
        with open(MEMORY_NODES) as f:
            nodes = parse_list(f.read().strip(), limit=MAX_NODES)
    except OSError:             # no NUMA in sysfs: the kernel answers alone
        nodes = [node]
    if node not in nodes:
        raise PlacementError(f"node {node} does not exist or has no memory (nodes with "
                             f"memory: {format_list(nodes)})")
    if which is None:
        moved, ns, status = native.move(addr + start * page, end - start, page, node, method,
                                        batch)
        which = np.arange(start, end)
    else:
        moved, ns, status = native.move(addr, len(which), page, node, method, batch, which)
    bad = np.flatnonzero(status != node)
    why = {s: f"node {s}" if s >= 0 else errno.errorcode.get(-s, f"errno {-s}")
           for s in np.unique(status[bad]).tolist()}
    return MoveResult(moved, ns, {int(which[i]): why[s]
                                  for i, s in zip(bad.tolist(), status[bad].tolist())})
