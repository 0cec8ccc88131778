"""The one boundary to the GPU library, as native.py is to the CPU core: only this module
touches its ffi and lib. The library (native/gpu/*.cu) is built by nvcc at install time
where nvcc is, else on first use into a cache (cxlbench/gpu_build.py), and loaded with
cffi's ABI mode (ffi.dlopen): no CUDA Python package, `pip install` works where nvcc is
absent, and a built library loads where only a driver is. A separate library from the CPU
core, not a part of it, because nvcc (not the C compiler cffi drives) must build it and it
must load, or fail to, on its own: the CPU benchmarks never depend on CUDA being there."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from cffi import FFI

from . import gpu_build, ownfiles
from .errors import CxlbenchError, StorageError, UserError
from .gpu_build import HEADER
from .placement import Placement

# The oldest Linux driver each CUDA major version's runtime runs on (minor-version
# compatibility: any 13.x runtime on a 580 driver).
DRIVER_FOR_CUDA = {11: "450.80.02", 12: "525.60.13", 13: "580"}
INSUFFICIENT_DRIVER = 35    # cudaErrorInsufficientDriver


# What a GPU case's time is estimated from before it runs (--dry-run, the ETA): an H200's
# published figures, assumed, never measured here, and never a figure a case reports.
# Each is the slow end, so an estimate errs long.
ASSUMED = {
    "profile": "h200 (assumed from published figures)",
    "hbm": 4.0e12,          # B/s: HBM3e streaming (BabelStream triad ~4.1 TB/s)
    "pcie": 50e9,           # B/s: a Gen5 x16 copy, pinned or registered
    "pageable": 10e9,       # B/s: a pageable copy through the driver's staging
    "zero_copy": 40e9,      # B/s: the GPU reading host memory in place
    "fault": 8e9,           # B/s: managed pages migrated on fault
    "load": 1e-6,           # s: a dependent load in device memory, TLB misses included
    "link_load": 2e-6,      # s: a dependent load across the link
    "call": 10e-6,          # s: a cudaMemcpyAsync issued
    "host": 5e9,            # B/s: the host writing or checking a buffer, one thread
}


class GpuError(CxlbenchError):
    """A CUDA call failed; the message is the library's (the case fails with it)."""


def source_dir() -> Path:
    """native/gpu: installed with the package as its gpu_src folder (plain files, not a
    module), else in the checkout beside the package (an editable install)."""
    here = Path(__file__).resolve().parent
    installed = here / "gpu_src"
    return installed if (installed / HEADER).is_file() else here.parent / "native" / "gpu"


def nvcc() -> str | None:
    return gpu_build.nvcc()


CACHE_NAME = "gpu"      # the cache's folder of GPU builds


def cache_dir() -> Path:
    """The cache's folder of GPU builds, made if need be (a link there refused)."""
    return ownfiles.cache_folder(CACHE_NAME)


def library_path(compiler: str) -> Path:
    """Where this nvcc's library built on first use from these sources lives."""
    return cache_dir() / gpu_build.library_name(source_dir(), compiler)


def built() -> Path | None:
    """The library built from these sources, at install time (beside this module) or on
    an earlier first use (in the cache); None where neither is. No nvcc is asked."""
    return gpu_build.find(source_dir(), (Path(__file__).resolve().parent,
                                         ownfiles.cache_root() / CACHE_NAME))  # not made


def build(compiler: str) -> Path:
    """The library in the cache, built now unless already there."""
    try:
        return gpu_build.build(compiler, source_dir(), cache_dir())
    except StorageError as e:
        raise UserError(f"the GPU library is built on first use into the cache: {e}: set "
                        "CXLBENCH_CACHE to a writable folder") from None
    except gpu_build.BuildError as e:
        if e.unwritable:
            raise UserError(f"the GPU library is built on first use into {e}: set "
                            "CXLBENCH_CACHE to a writable folder") from None
        raise UserError(str(e)) from None


# The header's declarations, once a process (cffi refuses a struct declared twice), at
# import: its enums name the options, which must be known where nvcc is not.
ffi = FFI()
ffi.cdef("\n".join(line for line in (source_dir() / HEADER).read_text().splitlines()
                   if not line.lstrip().startswith("#")))


def _enum(kind: str) -> tuple[str, ...]:
    """The names of the header's enum cxb_gpu_<kind>, CXB_GPU_<KIND>_<NAME> lower-cased
    with _ as -, in value order (a name's index is its C value); CXB_GPU_<KIND>S counts
    them. Read from the declarations alone: no library needed."""
    prefix = f"CXB_GPU_{kind.upper()}_"
    values = ffi.typeof(f"enum cxb_gpu_{kind}").relements
    found = sorted((v, n[len(prefix):].lower().replace("_", "-")) for n, v in values.items()
                   if n.startswith(prefix))
    if [v for v, _ in found] != list(range(len(found))) or \
            values.get(prefix[:-1] + "S") != len(found) or len(values) != len(found) + 1:
        raise ImportError(f"enum cxb_gpu_{kind} in {HEADER} is not {prefix}* numbered 0, 1, "
                          f"2, ... and then {prefix[:-1]}S counting them: {values}")
    return tuple(name for _, name in found)


DIRECTIONS = _enum("direction")
ENGINES = _enum("engine")           # the copy engines (cudaMemcpyAsync), or a kernel on the SMs
HOST_KINDS = _enum("host_kind")
MANAGED_MODES = _enum("managed_mode")
EMBEDDING_TABLES = _enum("embedding_table")
KV_DIRECTIONS = _enum("kv_direction")
KV_METHODS = _enum("kv_method")     # one cudaMemcpyAsync per block, or one gather kernel
ZERO_COPY_OPS = _enum("zero_copy_op")


def _kernel_bytes() -> dict[str, int]:
    """Each streaming kernel's bytes moved per element, CXB_GPU_BYTES_<KERNEL>."""
    consts = {k: "CXB_GPU_BYTES_" + k.upper().replace("-", "_") for k in _enum("kernel")}
    per = ffi.typeof("enum cxb_gpu_kernel_bytes").relements
    if set(per) != set(consts.values()):
        raise ImportError(f"enum cxb_gpu_kernel_bytes in {HEADER} is not one CXB_GPU_BYTES_* "
                          f"a kernel: {sorted(per)}, not {sorted(consts.values())}")
    return {k: per[c] for k, c in consts.items()}


KERNELS = _kernel_bytes()           # the streaming kernels: name -> bytes moved per element
# The chase's untimed hops at most (the header's, read without the library).
CHASE_WARM_MAX = ffi.typeof("enum cxb_gpu_limits").relements["CXB_GPU_CHASE_WARM_MAX"]


@functools.lru_cache(maxsize=1)
def _loaded():
    """(lib, None), or (None, why the library cannot be had here)."""
    try:            # (the cache's folder may be refused: an empty CXLBENCH_CACHE, a link)
        path = built()
        if path is None:
            compiler = nvcc()
            if compiler is None:
                return None, ("not built, and no nvcc to build it (pip install where nvcc is "
                              "on PATH builds it; so does a first use with nvcc on PATH)")
            path = build(compiler)
    except CxlbenchError as e:
        return None, str(e)
    try:
        return ffi.dlopen(str(path)), None
    except OSError as e:
        return None, f"{path} does not load: {e}"


def lib():
    found, why = _loaded()
    if found is None:
        raise UserError(f"GPU library: {why}")
    return found


def _raise_if_failed(rc: int, what: str) -> None:
    if rc:
        raise GpuError(f"{what}: {ffi.string(lib().cxb_gpu_error()).decode()}")


@dataclass(frozen=True)
class Runtime:
    runtime_version: int
    driver_version: int
    devices: int
    status: int         # the device count's CUDA error (0: none)
    error: str


def runtime() -> Runtime:
    cuda = lib()
    out = ffi.new("struct cxb_gpu_info *")
    _raise_if_failed(cuda.cxb_gpu_info(out), "cxb_gpu_info")
    error = ffi.string(lib().cxb_gpu_error()).decode() if out.status else ""
    return Runtime(out.runtime_version, out.driver_version, out.devices, out.status, error)


def unavailable() -> str | None:
    """Why no GPU benchmark can run here, or None: the library must build and load, a
    driver must be there, and a device."""
    found, why = _loaded()
    if found is None:
        return f"GPU library: {why}"
    rt = runtime()
    if rt.driver_version <= 0:
        return "no CUDA driver (cudaDriverGetVersion gives 0): no GPU here"
    if rt.status == INSUFFICIENT_DRIVER or rt.driver_version // 1000 < rt.runtime_version // 1000:
        return old_driver(rt)
    if rt.devices < 1:
        return f"no CUDA device ({rt.error or 'cudaGetDeviceCount gives 0'})"
    return None


def cuda_version(v: int) -> str:
    """CUDA's integer version (13000) as people write it (13.0)."""
    return f"{v // 1000}.{v % 1000 // 10}"


def old_driver(rt: Runtime) -> str:
    """One line: the driver's CUDA version, the runtime's, and the driver it needs."""
    need = DRIVER_FOR_CUDA.get(rt.runtime_version // 1000)
    return (f"the NVIDIA driver here runs CUDA {cuda_version(rt.driver_version)} at most; the "
            f"GPU library was built with CUDA {cuda_version(rt.runtime_version)}, which needs "
            f"driver {need + ' or newer' if need else 'for that version'}: update the "
            f"driver, or reinstall cxlbench where nvcc {cuda_version(rt.driver_version)} or "
            "older is on PATH")


def movable_only_nodes(proc_root: str = "/proc") -> set[int]:
    """Nodes whose memory is all in ZONE_MOVABLE (CXL memory onlined by dax/kmem usually
    is). Pinning a page for the GPU (cudaHostRegister: the driver's FOLL_LONGTERM pin)
    first migrates it out of ZONE_MOVABLE, to a node with a normal zone: memory there can
    be copied to and from, but not registered or read in place where it lies."""
    present: dict[int, dict[str, int]] = {}
    node = zone = None
    try:
        with open(Path(proc_root) / "zoneinfo") as f:
            for line in f:
                words = line.split()
                if line.startswith("Node ") and len(words) >= 4:
                    node, zone = int(words[1].rstrip(",")), words[3]
                elif words[:1] == ["present"] and node is not None:
                    present.setdefault(node, {})[zone] = int(words[1])
    except (OSError, ValueError):
        return set()
    return {n for n, zones in present.items()
            if zones.get("Movable", 0) > 0 and not any(v for z, v in zones.items()
                                                      if z != "Movable")}


MOVABLE_ONLY = "holds only movable memory"


def pinnable(mem: Placement | str, proc_root: str = "/proc") -> str | None:
    """Why memory placed by `mem` cannot be pinned where it lies, or None."""
    movable = movable_only_nodes(proc_root)
    nodes = sorted(set(Placement.of(mem).nodes) & movable)
    if not nodes:
        return None
    return (f"mem={mem}: node {', '.join(map(str, nodes))} {MOVABLE_ONLY}, which "
            "the GPU driver migrates to another node when it pins it (cudaHostRegister): "
            "measured, the pages would not be where they were placed")


def check_threads(threads: int) -> None:
    if threads % 32:
        raise UserError(f"threads={threads} is not whole warps (a multiple of 32)")


def check_device(index: int) -> None:
    devices = runtime().devices
    if index >= devices:
        raise UserError(f"device={index}, but this machine has {devices} CUDA device(s)")


def kernels() -> dict[str, int]:
    """The library's streaming-kernel table: name -> bytes moved per element (KERNELS, as
    the library was built)."""
    cuda = lib()
    row = ffi.new("struct cxb_gpu_kernel_row *")
    out = {}
    for i in range(cuda.cxb_gpu_kernel_count()):
        _raise_if_failed(cuda.cxb_gpu_kernel_info(i, row), "cxb_gpu_kernel_info")
        out[ffi.string(row.name).decode()] = row.bytes_per_element
    return out


def device(index: int) -> dict:
    cuda = lib()
    d = ffi.new("struct cxb_gpu_device *")
    _raise_if_failed(cuda.cxb_gpu_device_info(index, d), f"device {index}")
    fields = ("major", "minor", "sms", "l2_bytes", "max_threads_per_sm", "max_blocks_per_sm",
              "clock_khz",
              "memory_clock_khz", "bus_width_bits", "ecc", "pci_domain", "pci_bus",
              "pci_device", "memory_bytes")
    return {"index": index, "name": ffi.string(d.name).decode(),
            **{f: int(getattr(d, f)) for f in fields}}


@dataclass
class StreamResult:
    ns: list[int]
    bad: int
    total: float        # read's and dot's sum (0 for the others)
    want: float
    blocks: int = 0     # launched
    resident: int = 0   # blocks of the kernel an SM holds at once


def stream(kernel: str, n: int, blocks: int, threads: int, reps: int,
           device_index: int = 0, passes: int = 1) -> StreamResult:
    """reps timed launches of a streaming kernel over arrays of n doubles (n even) on a grid
    of `blocks` (0: as many as every SM holds at once), each `passes` times over them,
    then its check."""
    cuda = lib()
    a = ffi.new("struct cxb_gpu_stream_args *")
    ns = ffi.new("unsigned long long[]", reps)
    a.device, a.kernel, a.n = device_index, list(KERNELS).index(kernel), n
    a.blocks, a.threads, a.reps, a.ns, a.passes = blocks, threads, reps, ns, passes
    _raise_if_failed(cuda.cxb_gpu_stream(a), f"gpu stream {kernel}")
    return StreamResult(list(ns), int(a.bad), float(a.sum), float(a.want_sum), int(a.blocks),
                        int(a.resident))


def _timed(call: str, fill, reps: int, what: str) -> tuple[list[int], int]:
    """Calls cxb_gpu_<call> with its args struct (filled by fill(args)) and reps slots of ns:
    (each repetition's ns, the check's bad count)."""
    cuda = lib()
    a = ffi.new(f"struct cxb_gpu_{call}_args *")
    ns = ffi.new("unsigned long long[]", reps)
    a.reps, a.ns = reps, ns
    fill(a)
    _raise_if_failed(getattr(cuda, f"cxb_gpu_{call}")(a), what)
    return list(ns), int(a.bad)


def copy(direction: str, host_kind: str, nbytes: int, reps: int, host_addr: int = 0,
         device_index: int = 0, engine: str = "ce", blocks: int = 0,
         threads: int = 0) -> tuple[list[int], int]:
    """reps timed copies of nbytes (each way, for bidir) between the device and host memory
    of host_kind, by the copy engines or by a kernel of blocks x threads (engine sm);
    pageable and registered copy from host_addr (2 x nbytes for bidir), memory the caller
    placed. (each repetition's ns, bytes found wrong after them)."""
    def fill(a):
        a.device, a.direction = device_index, DIRECTIONS.index(direction)
        a.engine, a.host_kind = ENGINES.index(engine), HOST_KINDS.index(host_kind)
        a.host, a.bytes = ffi.cast("void *", host_addr), nbytes
        a.blocks, a.threads = blocks, threads
    return _timed("copy", fill, reps, f"gpu copy {direction} {host_kind} {engine}")


def managed(mode: str, nbytes: int, reps: int, blocks: int, threads: int,
            device_index: int = 0) -> tuple[list[int], int]:
    """reps timed launches through nbytes of managed memory in one of MANAGED_MODES:
    (each repetition's ns, the check's bad count)."""
    def fill(a):
        a.device, a.mode, a.bytes = device_index, MANAGED_MODES.index(mode), nbytes
        a.blocks, a.threads = blocks, threads
    return _timed("managed", fill, reps, f"gpu managed {mode}")


def embedding(table: str, rows: int, dim: int, indices, pooling: int, reps: int,
              blocks: int, threads: int, host_addr: int = 0,
              device_index: int = 0) -> tuple[list[int], int]:
    """reps timed launches of an embedding-bag gather: len(indices) / pooling bags of
    `pooling` rows (indices: a C-contiguous int64 numpy array) from a table of rows x dim
    fp32 in one of EMBEDDING_TABLES (registered: at host_addr, placed by the caller).
    (each launch's ns, output elements found wrong)."""
    def fill(a):
        a.device, a.table = device_index, EMBEDDING_TABLES.index(table)
        a.host, a.rows, a.dim = ffi.cast("void *", host_addr), rows, dim
        a.indices = ffi.cast("const long long *", indices.ctypes.data)
        a.bags, a.pooling = len(indices) // pooling, pooling
        a.blocks, a.threads = blocks, threads
    return _timed("embedding", fill, reps, f"gpu embedding ({table})")


def kv_swap(direction: str, method: str, host_addr: int, pool_blocks: int, block_bytes: int,
            slots, reps: int, grid: int = 0, threads: int = 0,
            device_index: int = 0) -> tuple[list[int], list[int], int]:
    """reps timed swaps of the KV blocks at host pool slots `slots` (a C-contiguous uint64
    numpy array) between the caller's pool at host_addr (pool_blocks x block_bytes) and the
    device: (each swap's ns, the host's ns issuing each swap's calls, bytes found wrong)."""
    issue = ffi.new("unsigned long long[]", reps)

    def fill(a):
        a.device, a.direction = device_index, KV_DIRECTIONS.index(direction)
        a.method, a.host = KV_METHODS.index(method), ffi.cast("void *", host_addr)
        a.pool_blocks, a.block_bytes = pool_blocks, block_bytes
        a.slots = ffi.cast("const unsigned long long *", slots.ctypes.data)
        a.blocks, a.grid, a.threads, a.issue_ns = len(slots), grid, threads, issue
    ns, bad = _timed("kv_swap", fill, reps, f"gpu kv swap {direction} {method}")
    return ns, list(issue), bad


def zero_copy(op: str, host_addr: int, nbytes: int, reps: int, blocks: int = 1,
              threads: int = 32, hops: int = 0, device_index: int = 0) -> tuple[list[int], int]:
    """reps timed launches of the GPU reading, writing or chasing through nbytes of host
    memory at host_addr (the caller's, placed): (each launch's ns, the check's bad count)."""
    def fill(a):
        a.device, a.op = device_index, ZERO_COPY_OPS.index(op)
        a.host, a.bytes = ffi.cast("void *", host_addr), nbytes
        a.blocks, a.threads, a.hops = blocks, threads, hops
    return _timed("zero_copy", fill, reps, f"gpu zero-copy {op}")


def chase(nbytes: int, stride: int, hops: int, reps: int,
          device_index: int = 0) -> tuple[list[int], list[int], int]:
    """reps launches of one thread chasing hops dependent loads through a random cycle of
    elements `stride` apart in nbytes of device memory: (each launch's ns, each launch's
    clock64 cycles around its loop, the check's bad count)."""
    cuda = lib()
    a = ffi.new("struct cxb_gpu_chase_args *")
    ns = ffi.new("unsigned long long[]", reps)
    cycles = ffi.new("unsigned long long[]", reps)
    a.device, a.bytes, a.stride, a.hops, a.reps = device_index, nbytes, stride, hops, reps
    a.ns, a.cycles = ns, cycles
    _raise_if_failed(cuda.cxb_gpu_chase(a), "gpu chase")
    return list(ns), list(cycles), int(a.bad)
