"""The one boundary to C: the only module that touches the compiled extension's ffi and lib.

Every C call returns a status; a negative one becomes NativeError with the C-side message
and the errno text. Nothing here loops over memory in Python."""
from __future__ import annotations

import errno as _errno
import functools
from dataclasses import dataclass

import numpy as np

from ._native import ffi, lib
from .errors import NativeError, UserError


def _enum(prefix: str) -> tuple[str, ...]:
    """The header's CXB_<KIND>_* names under `prefix`, lower-cased, in value order: the
    index of a name is its C value (so the values must be 0, 1, 2, ...)."""
    found = sorted((getattr(lib, n), n[len(prefix):].lower()) for n in dir(lib)
                   if n.startswith(prefix))
    if [v for v, _ in found] != list(range(len(found))):
        raise ImportError(f"{prefix}* in cxlbench.h are not numbered 0, 1, 2, ...: {found}")
    return tuple(name for _, name in found)


ISAS = _enum("CXB_ISA_")
PAGE_KINDS = _enum("CXB_PAGE_")
POLICIES = _enum("CXB_POL_")
WEIGHTED_METHODS = _enum("CXB_WEIGHTED_")
LOAD_MODES = _enum("CXB_LOAD_")             # loaded latency's generators
PINGPONG_MODES = _enum("CXB_PINGPONG_")
ATOMIC_MODES = _enum("CXB_ATOMIC_")
FLUSH_KINDS = _enum("CXB_FLUSH_")
XH_OPS = _enum("CXB_XHOP_")                # add, cas, plain: shared_atomic's operations
XH_PROTOCOLS = _enum("CXB_XH_")               # none, flush: the software-coherence protocol
CHECKS = _enum("CXB_CHECK_")                # how a table row's output is checked


def _raise_if_failed(call: str, rc: int) -> int:
    if rc < 0:
        message = ffi.string(lib.cxb_last_error()).decode(errors="replace")
        raise NativeError(call, -rc, message or _errno.errorcode.get(-rc, str(-rc)))
    return rc


def now_ns() -> int:
    return lib.cxb_now_ns()


def timer_calibrate(window_ms: float = 60.0) -> dict:
    info = ffi.new("struct cxb_timer_info *")
    _raise_if_failed("cxb_timer_calibrate", lib.cxb_timer_calibrate(window_ms, info))
    return {
        "clock": "CLOCK_MONOTONIC_RAW",
        "clock_overhead_ns": round(info.mono_overhead_ns, 2),
        "tsc_available": bool(info.tsc_available),
        "tsc_hz": round(info.tsc_hz) if info.tsc_available else None,
        "tsc_overhead_cycles": round(info.tsc_overhead_cycles, 1) if info.tsc_available else None,
        "calibration_ms": info.calibration_ms,
    }


def build_info() -> dict:
    """The compiler and flags that built this core; run.json records them."""
    return {"compiler": ffi.string(lib.cxb_build_info(0)).decode(),
            "cflags": ffi.string(lib.cxb_build_info(1)).decode()}


def isa_supported(isa: str) -> bool:
    return bool(lib.cxb_isa_supported(ISAS.index(isa)))


@dataclass(frozen=True)
class Entry:
    """A row of a C table (struct cxb_entry): a kernel, or a driver."""
    index: int
    key: str
    benchmark: str
    description: str
    check: str                # one of CHECKS
    unchecked: str | None     # check "none": why
    min_threads: int
    max_threads: int          # 0: any number
    isas: tuple[str, ...]     # variants compiled in
    needs: str | None         # what else it needs of the CPU

    def runnable_isas(self) -> tuple[str, ...]:
        return tuple(i for i in self.isas if isa_supported(i))

    def best_isa(self) -> str:
        """The widest variant this CPU runs."""
        return self.runnable_isas()[-1]

    def choose_isa(self, wanted: str) -> str:
        """The variant an `isa` option names (auto: the widest this CPU runs); UserError
        for one not compiled in or one this CPU cannot run."""
        if not self.isas:
            raise UserError(f"kernel {self.key} is not built on this architecture (it needs "
                            f"{self.needs or 'another CPU'})")
        if wanted == "auto":
            return self.best_isa()
        if wanted not in self.isas:
            raise UserError(f"kernel {self.key} has no {wanted} variant "
                            f"(has: {', '.join(self.isas)})")
        if not isa_supported(wanted):
            raise UserError(f"this CPU cannot run {wanted} (runs: "
                            f"{', '.join(self.runnable_isas())})")
        return wanted


@dataclass(frozen=True)
class KernelInfo(Entry):
    elem_bytes: int
    bytes_read: int
    bytes_written: int
    streams: int
    buffers: tuple[str, ...]  # the streams' names, in buf[] order (mem.<name> places one)
    write_allocate: bool      # stores pull lines in first: memory sees the written bytes twice
    test_only: bool


def _text(p) -> str | None:
    return None if p == ffi.NULL else ffi.string(p).decode()


def _entry(index: int, e) -> dict:
    return dict(index=index, key=_text(e.key), benchmark=_text(e.benchmark),
                description=_text(e.description), check=CHECKS[e.check],
                unchecked=_text(e.unchecked), min_threads=e.min_threads,
                max_threads=e.max_threads, needs=_text(e.needs),
                isas=tuple(name for b, name in enumerate(ISAS) if e.isa_mask >> b & 1))


@functools.lru_cache(maxsize=None)
def kernels() -> tuple[KernelInfo, ...]:
    out = []
    info = ffi.new("struct cxb_kernel_info *")
    for i in range(lib.cxb_kernel_count()):
        _raise_if_failed("cxb_kernel_get", lib.cxb_kernel_get(i, info))
        out.append(KernelInfo(
            **_entry(i, info.entry), elem_bytes=info.elem_bytes, bytes_read=info.bytes_read,
            bytes_written=info.bytes_written, streams=info.streams,
            buffers=tuple(filter(None, (_text(info.buffers) or "").split(","))),
            write_allocate=bool(info.write_allocate), test_only=bool(info.test_only)))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def drivers() -> tuple[Entry, ...]:
    """The entry points with argument structs of their own: cxb_<key>."""
    entry = ffi.new("struct cxb_entry *")
    out = []
    for i in range(lib.cxb_driver_count()):
        _raise_if_failed("cxb_driver_get", lib.cxb_driver_get(i, entry))
        out.append(Entry(**_entry(i, entry)))
    return tuple(out)


def driver(key: str) -> Entry:
    """The drivers-table row of cxb_<key>."""
    for d in drivers():
        if d.key == key:
            return d
    raise KeyError(f"no driver {key!r}")


def kernel(key: str) -> KernelInfo:
    for k in kernels():
        if k.key == key:
            return k
    raise KeyError(key)


def has_weighted_interleave() -> bool:
    return bool(lib.cxb_has_weighted_interleave())


def _int_array(values) -> object:
    values = list(values)
    return ffi.new("int[]", values) if values else ffi.NULL


class Allocation:
    """One mapping with a NUMA policy applied. Freed (munmap) when this object and every
    numpy view of it are gone."""

    def __init__(self, size: int, page: str, policy: str, nodes=(), weights=(),
                 weighted_method: str = "none"):
        out = ffi.new("struct cxb_buffer **")
        _raise_if_failed("cxb_alloc", lib.cxb_alloc(
            size, PAGE_KINDS.index(page), POLICIES.index(policy), _int_array(nodes),
            _int_array(weights), len(nodes), WEIGHTED_METHODS.index(weighted_method), out))
        handle = out[0]
        self.addr = int(ffi.cast("uintptr_t", handle.addr))
        self.size, self.map_size, self.page_size = handle.size, handle.map_size, handle.page_size
        self.weighted_method = WEIGHTED_METHODS[handle.weighted_method]
        self._handle = handle
        # The memory's owner: numpy views hold it through ffi.buffer, so it outlives them.
        self._mem = ffi.gc(ffi.cast("char *", handle.addr), lambda _p, h=handle: lib.cxb_free(h),
                           size=self.map_size)

    def prefault(self, cpus) -> None:
        cpus = list(cpus)
        _raise_if_failed("cxb_prefault", lib.cxb_prefault(self._handle, _int_array(cpus), len(cpus)))

    def release_policy(self) -> None:
        _raise_if_failed("cxb_release_policy", lib.cxb_release_policy(self._handle))

    def fill_index(self, cpus) -> None:
        cpus = list(cpus)
        _raise_if_failed("cxb_fill_index", lib.cxb_fill_index(self._mem, self.size - self.size % 8,
                                                    _int_array(cpus), len(cpus)))

    def query_nodes(self, step: int, maxnode: int) -> tuple[list[int], int]:
        """Pages (of `step` bytes) per node below maxnode as move_pages(2) sees them now,
        and the others (not present, or on a node >= maxnode)."""
        m = node_map(self.addr, -(-self.map_size // step), step)
        counts = np.bincount(m[(m >= 0) & (m < maxnode)], minlength=maxnode)
        return counts.tolist(), int(m.size - counts.sum())

    def array(self, dtype, shape=None) -> np.ndarray:
        """A numpy view of the buffer: no copy; keeps the memory alive."""
        dtype = np.dtype(dtype)
        arr = np.frombuffer(ffi.buffer(self._mem, self.size), dtype=dtype,
                            count=self.size // dtype.itemsize)
        return arr if shape is None else arr.reshape(shape)


def chase_build(buf: Allocation, nbytes: int, window: int, page_bytes: int, seed: int,
                run_lines: int = 0) -> np.ndarray:
    """Link the chase cycle over windows of `window` bytes (0: all); returns the visiting
    order (line indices)."""
    order = np.empty(nbytes // 64, dtype=np.uint32)
    _raise_if_failed("cxb_chase_build", lib.cxb_chase_build(
        buf._mem, nbytes, window, page_bytes, run_lines, seed,
        ffi.cast("uint32_t *", ffi.from_buffer(order))))
    return order


def aligned_empty(n: int, dtype) -> np.ndarray:
    """A numpy array whose data starts on a 64-byte line, as kernel streams must."""
    dtype = np.dtype(dtype)
    raw = np.empty(n * dtype.itemsize + 64, dtype=np.uint8)
    skip = -raw.__array_interface__["data"][0] % 64
    return raw[skip:skip + n * dtype.itemsize].view(dtype)


def address(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


@dataclass(frozen=True)
class KernelResult:
    ns: int
    checksum: int     # stream kernels: the sum of the words read, the threads' added
    end: int          # chase kernels: the address where the walk (chain 0) stopped


def _run(k: KernelInfo, isa: str, a, cpus) -> KernelResult:
    """One timed region: kernel k on len(cpus) pinned threads (or one unpinned)."""
    cpus, ns = list(cpus), ffi.new("uint64_t *")
    _raise_if_failed(f"kernel {k.key}", lib.cxb_run(k.index, ISAS.index(isa), a, _int_array(cpus),
                                          max(len(cpus), 1), ns))
    return KernelResult(ns[0], a.stream.sum, int(ffi.cast("uintptr_t", a.chase.end)))


def run_kernel(k: KernelInfo, isa: str, addrs, nbytes: int, passes: int, cpus,
               value: int = 0, prefetch: int = 0, ways: int = 1) -> KernelResult:
    """A stream kernel (struct cxb_stream_args): `passes` over nbytes of each buffer;
    copies and fills walk `ways` pages side by side, copies prefetch `prefetch` lines
    ahead (the plain loop: 0 and 1)."""
    a = ffi.new("struct cxb_kargs *")
    for i, addr in enumerate(addrs):
        a.stream.buf[i] = ffi.cast("void *", addr)
    a.stream.bytes, a.stream.passes, a.stream.value = nbytes, passes, value
    a.stream.prefetch, a.stream.ways = prefetch, ways
    return _run(k, isa, a, cpus)


def run_chase(k: KernelInfo, cpus, loads: int, start: int = 0, starts: int = 0,
              chains: int = 0, batch: int = 0, ticks: int = 0) -> KernelResult:
    """A chase kernel (struct cxb_chase_args, its pointers given as addresses)."""
    a = ffi.new("struct cxb_kargs *")
    a.chase.start, a.chase.starts = ffi.cast("void *", start), ffi.cast("void **", starts)
    a.chase.loads, a.chase.chains, a.chase.batch = loads, chains, batch
    a.chase.ticks = ffi.cast("uint64_t *", ticks)
    return _run(k, "scalar", a, cpus)


LOAD_BATCH_LINES = lib.CXB_LOADED_BATCH_LINES


@dataclass(frozen=True)
class LoadedResult:
    chase_ns: int
    end: int
    moved: int          # bytes the generators touched
    gen_ns: int
    batches: list[int]  # batches of 8 lines, per generator
    sums: list[int]     # sum of the words each generator read
    victim_sum: int = 0  # with a victim's stream: the sum of the words it read


def loaded_latency(start: int, loads: int, gen_addr: int, gen_bytes: int, generators: int,
                   mode: str, delay: int, cpus, value: int = 0, ticks: int = 0,
                   batch: int = 0, victim: tuple[int, int] | None = None) -> LoadedResult:
    """One loaded-latency point: a timed chase on cpus[0] while `generators` threads on
    cpus[1:] stream with `delay` pauses after every 8 lines, storing value + line index.
    `ticks` (an address of loads // batch uint64s): the chase timed batch by batch.
    `victim` (address, bytes): cpus[0] reads that buffer once instead of chasing."""
    a = ffi.new("struct cxb_loaded_args *")
    a.chase_start, a.chase_loads = ffi.cast("void *", start), loads
    a.ticks, a.batch = ffi.cast("uint64_t *", ticks), batch
    if victim:
        a.victim_buf, a.victim_bytes = ffi.cast("void *", victim[0]), victim[1]
    a.gen_buf, a.gen_bytes = ffi.cast("void *", gen_addr), gen_bytes
    a.generators, a.mode, a.delay = generators, LOAD_MODES.index(mode), delay
    a.value = value
    cpu_array = _int_array(cpus)
    a.cpus = cpu_array
    batches = ffi.new("uint64_t[]", max(generators, 1))
    sums = ffi.new("uint64_t[]", max(generators, 1))
    a.gen_batches, a.gen_sums = batches, sums
    _raise_if_failed("cxb_loaded_latency", lib.cxb_loaded_latency(a))
    return LoadedResult(a.chase_ns, int(ffi.cast("uintptr_t", a.chase_end)), a.gen_moved,
                        a.gen_ns, list(batches)[:generators], list(sums)[:generators],
                        a.victim_sum)


EMB_DTYPES = _enum("CXB_EMB_")             # embedding rows' element types
POOLS = _enum("CXB_POOL_")


@dataclass(frozen=True)
class EmbeddingResult:
    ns: int                   # first thread's start to last thread's finish
    bad: int                  # lookups naming no row (skipped)


def embedding_bag(table: int, rows: int, row_bytes: int, dim: int, dtype: str, pool: str,
                  indices, offsets, out, isa: str, cpus, prefetch: int = 0,
                  bag_ns=None, sample_every: int = 0, regs: int = 0) -> EmbeddingResult:
    """Pool len(offsets) - 1 bags of the table at address `table` into `out` (a float32
    array of bags x dim); indices and offsets are int64 arrays, bag_ns a uint64 array of
    one slot per sample_every bags; a pass sums in at most `regs` registers (0: all)."""
    bags = len(offsets) - 1
    _arrays("embedding_bag", (indices, np.int64, None), (offsets, np.int64, None),
            (out, np.float32, bags * dim), (bag_ns, np.uint64,
                                            -(-bags // sample_every) if sample_every else None))
    if bags < 0 or (bags and (offsets[0] < 0 or offsets[-1] > len(indices)
                              or (np.diff(offsets) < 0).any())):
        raise ValueError("embedding_bag: offsets must climb from 0 to at most len(indices)")
    a = ffi.new("struct cxb_embedding_args *")
    a.table, a.rows, a.row_bytes, a.dim = ffi.cast("void *", table), rows, row_bytes, dim
    a.dtype, a.pool, a.isa = EMB_DTYPES.index(dtype), POOLS.index(pool), ISAS.index(isa)
    a.indices = ffi.cast("int64_t *", indices.ctypes.data)
    a.offsets = ffi.cast("int64_t *", offsets.ctypes.data)
    a.bags, a.out = len(offsets) - 1, ffi.cast("float *", out.ctypes.data)
    a.prefetch, a.sample_every, a.regs = prefetch, sample_every, regs
    a.bag_ns = ffi.NULL if bag_ns is None else ffi.cast("uint64_t *", bag_ns.ctypes.data)
    cpu_array = _int_array(cpus)
    _raise_if_failed("cxb_embedding_bag", lib.cxb_embedding_bag(a, cpu_array, len(cpus)))
    return EmbeddingResult(a.ns, a.bad)


OPTIMIZERS = _enum("CXB_OPTIM_")


def _arrays(call: str, *specs) -> None:
    """Each (array, dtype, at least this many elements or None) C-contiguous, of that
    dtype and size: what the C side reads and writes blindly."""
    for arr, dtype, least in specs:
        if arr is None and least is None:
            continue
        if not isinstance(arr, np.ndarray) or arr.dtype != dtype or not arr.flags.c_contiguous \
                or (least is not None and arr.size < least):
            raise ValueError(f"{call}: an array is not C-contiguous {np.dtype(dtype).name} of "
                             f"{least if least is not None else 'any number of'} elements")


def embedding_isa_supported(isa: str) -> bool:
    return bool(lib.cxb_embedding_isa_supported(ISAS.index(isa)))


def embedding_update(table: int, row_bytes: int, dim: int, optim: str, pool: str, rows,
                     starts, bag_of, offsets, out, state, lr: float, eps: float,
                     cpus) -> int:
    """One optimizer step on `rows` of an fp32 table (see cxb_embedding_update); int64
    arrays rows, starts, bag_of and offsets, the forward's float32 `out`, and for Adagrad a
    float32 `state` of one per table row. Returns the ns it took."""
    _arrays("embedding_update", (rows, np.int64, None), (starts, np.int64, len(rows) + 1),
            (bag_of, np.int64, None), (offsets, np.int64, None), (out, np.float32, None),
            (state, np.float32, None))
    a = ffi.new("struct cxb_embedding_update_args *")
    a.table, a.row_bytes, a.dim = ffi.cast("float *", table), row_bytes, dim
    a.optim, a.pool = OPTIMIZERS.index(optim), POOLS.index(pool)
    a.rows, a.nrows = ffi.cast("int64_t *", rows.ctypes.data), len(rows)
    a.starts = ffi.cast("int64_t *", starts.ctypes.data)
    a.bag_of = ffi.cast("int64_t *", bag_of.ctypes.data)
    a.offsets = ffi.cast("int64_t *", offsets.ctypes.data)
    a.out = ffi.cast("float *", out.ctypes.data)
    a.state = ffi.NULL if state is None else ffi.cast("float *", state.ctypes.data)
    a.lr, a.eps = lr, eps
    cpu_array = _int_array(cpus)
    _raise_if_failed("cxb_embedding_update", lib.cxb_embedding_update(a, cpu_array, len(cpus)))
    return a.ns


ADAM_KINDS = _enum("CXB_ADAM_")            # ("adam", "adamw")
PRECISIONS = _enum("CXB_PRECISION_")        # ("fp32", "mixed")


def adam(params, grads, m, v, master, kind: str, precision: str, isa: str, lr: float,
         betas: tuple[float, float], eps: float, weight_decay: float, step: int,
         cpus) -> int:
    """One fused Adam or AdamW step (see cxb_adam) over numpy arrays: float32 params and
    grads, or uint16 (bf16 bits) ones with a float32 master copy; float32 moments m and v.
    Returns the ns it took."""
    n, half = len(m), precision == "mixed"
    wide = np.uint16 if half else np.float32
    _arrays("adam", (params, wide, n), (grads, wide, n), (m, np.float32, n),
            (v, np.float32, n), (master, np.float32, n if half else None))
    a = ffi.new("struct cxb_adam_args *")
    a.params, a.grads = ffi.cast("void *", params.ctypes.data), ffi.cast("void *", grads.ctypes.data)
    a.m, a.v = ffi.cast("float *", m.ctypes.data), ffi.cast("float *", v.ctypes.data)
    a.master = ffi.cast("float *", master.ctypes.data) if half else ffi.NULL
    a.n, a.kind, a.precision = n, ADAM_KINDS.index(kind), PRECISIONS.index(precision)
    a.isa, a.lr, (a.beta1, a.beta2) = ISAS.index(isa), lr, betas
    a.eps, a.weight_decay, a.step = eps, weight_decay, step
    cpu_array = _int_array(cpus)
    _raise_if_failed("cxb_adam", lib.cxb_adam(a, cpu_array, len(cpus)))
    return a.ns


CKPT_STORES = _enum("CXB_CKPT_")            # checkpoint stores: ("regular", "nt")


@dataclass(frozen=True)
class CheckpointResult:
    ns: int                   # first thread's start to the last one's end (or the fsync)
    t0: int                   # cxb_now_ns() at the start and the end: interference windows
    t1: int
    bad: int                  # dirty rows naming no row of src (skipped)


def checkpoint(dst: int, src: int, nbytes: int, chunk: int, store: str, isa: str, cpus,
               rows=None, src_rows: int = 0, row_bytes: int = 0, persist: bool = False,
               fd: int = -1, prefetch: int = 0, lines_ahead: int = 0,
               ways: int = 1) -> CheckpointResult:
    """Snapshot nbytes of src to dst in chunks (see cxb_checkpoint), or with `rows` (an
    int64 array) those rows of src's src_rows, row_bytes each, packed into dst; per chunk
    clwb and sfence where `persist`, a pwrite to `fd` (>= 0, fsync'd at the end). A whole
    snapshot's chunks prefetch lines_ahead lines and walk `ways` pages side by side."""
    _arrays("checkpoint", (rows, np.int64, None))
    a = ffi.new("struct cxb_checkpoint_args *")
    a.dst, a.src = ffi.cast("void *", dst), ffi.cast("void *", src)
    a.bytes, a.chunk = nbytes, chunk
    a.store, a.isa = CKPT_STORES.index(store), ISAS.index(isa)
    if rows is not None:
        a.rows, a.nrows = ffi.cast("int64_t *", rows.ctypes.data), len(rows)
    a.src_rows, a.row_bytes, a.prefetch = src_rows, row_bytes, prefetch
    a.lines_ahead, a.ways = lines_ahead, ways
    a.persist, a.fd = int(persist), fd
    cpu_array = _int_array(cpus)
    _raise_if_failed("cxb_checkpoint", lib.cxb_checkpoint(a, cpu_array, len(cpus)))
    return CheckpointResult(a.ns, a.t0, a.t1, a.bad)


# ---- paged KV-cache ---------------------------------------------------------------------
KV_OPS = _enum("CXB_KVOP_")                 # ("decode", "write", "copy")


@dataclass(frozen=True)
class KvPool:
    """Where a pool's blocks are (struct cxb_kv_pool): block b of layer l, K (kv 0) or V
    (kv 1) at addr + b // group * group_bytes + b % group * block_bytes + l * layer_bytes +
    kv * kv_bytes; group 0 is one group of all the blocks."""
    addr: int
    blocks: int
    layer_bytes: int
    kv_bytes: int
    group: int = 0
    group_bytes: int = 0


@dataclass(frozen=True)
class KvResult:
    ns: int                   # the steps' times added (a cold decode's evictions not in it)
    bad: int                  # table entries or runs outside their pool (skipped)


def _kv_pool(out, pool: KvPool) -> None:
    out.base, out.blocks = ffi.cast("void *", pool.addr), pool.blocks
    out.group, out.group_bytes = pool.group or pool.blocks, pool.group_bytes
    out.layer_bytes, out.kv_bytes = pool.layer_bytes, pool.kv_bytes


def kvcache(op: str, pool: KvPool, layers: int, block: int, token_bytes: int, isa: str,
            cpus, *, table=None, tokens: int = 0, steps: int = 1, gen: int = 0, sums=None,
            dst: KvPool | None = None, runs=None, groups=None, step_ns=None,
            prefetch: int = 0, cold: bool = False) -> KvResult:
    """One cxb_kvcache call. "decode": `steps` steps, step i appending token tokens + i to
    every sequence of the int64 table (seqs, width) and reading all its tokens, the words
    read added to the uint64 sums (layers, 2, seqs * width); "write": tokens [0, tokens) of
    every sequence; "copy": int64 runs (n, 3) of (source block, destination block, blocks)
    from pool to dst, group i being runs[groups[i]:groups[i + 1]] (steps groups). step_ns:
    uint64, one slot per step, each step's time. prefetch: decode asks for that many lines
    of the next block before reading each; cold: decode evicts, untimed, what each step
    reads before it (nothing off x86-64)."""
    a = ffi.new("struct cxb_kvcache_args *")
    a.op, a.isa = KV_OPS.index(op), ISAS.index(isa)
    a.layers, a.block, a.token_bytes = layers, block, token_bytes
    a.tokens, a.steps, a.gen, a.prefetch = tokens, steps, gen, prefetch
    a.cold = int(cold)
    _kv_pool(a.pool, pool)
    _arrays("kvcache", (step_ns, np.uint64, steps if step_ns is not None else None))
    if op == "copy":
        _arrays("kvcache", (runs, np.int64, None), (groups, np.int64, steps + 1))
        if dst is None or runs.ndim != 2 or runs.shape[1] != 3 or groups[0] < 0 \
                or groups[steps] > len(runs) or (np.diff(groups[:steps + 1]) < 0).any():
            raise ValueError("kvcache: a copy takes a destination pool, runs of (source, "
                             "destination, blocks) and group offsets climbing within them")
        _kv_pool(a.dst, dst)
        a.runs = ffi.cast("int64_t *", runs.ctypes.data)
        a.groups = ffi.cast("int64_t *", groups.ctypes.data)
    else:
        _arrays("kvcache", (table, np.int64, None))
        if table.ndim != 2:
            raise ValueError("kvcache: the block table is (sequences, blocks each)")
        if op == "decode":
            _arrays("kvcache", (sums, np.uint64, layers * 2 * table.size))
            a.sums = ffi.cast("uint64_t *", sums.ctypes.data)
        a.table = ffi.cast("int64_t *", table.ctypes.data)
        a.seqs, a.width = table.shape
    if step_ns is not None:
        a.step_ns = ffi.cast("uint64_t *", step_ns.ctypes.data)
    cpu_array = _int_array(cpus)
    _raise_if_failed(f"kvcache {op}", lib.cxb_kvcache(a, cpu_array, max(len(cpus), 1)))
    return KvResult(a.ns, a.bad)


def _coherence(call, fn, addr: int, mode: int, iterations: int, cpus) -> tuple[int, list[int]]:
    cpus = list(cpus)
    a = ffi.new("struct cxb_coherence_args *")
    thread_ns = ffi.new("uint64_t[]", max(len(cpus), 1))
    cpu_array = _int_array(cpus)
    a.line, a.mode, a.iterations = ffi.cast("void *", addr), mode, iterations
    a.cpus, a.threads, a.thread_ns = cpu_array, len(cpus), thread_ns
    _raise_if_failed(call, fn(a))
    return a.ns, list(thread_ns)[:len(cpus)]


def pingpong(addr: int, mode: int, iterations: int, cpus) -> tuple[int, list[int]]:
    """Round trips of one line between cpus[0] and cpus[1]: (ns, per-thread ns)."""
    return _coherence("cxb_pingpong", lib.cxb_pingpong, addr, mode, iterations, cpus)


def atomics(addr: int, mode: int, iterations: int, cpus) -> tuple[int, list[int]]:
    """`iterations` atomic operations per thread: (ns, per-thread ns)."""
    return _coherence("cxb_atomics", lib.cxb_atomics, addr, mode, iterations, cpus)


def _xh_args(addr: int, nbytes: int, host: int, *, timeout_s: float = 1.0,
             session: int = 0, key: int = 0, generation: int = 0, protocol: str = "none",
             flush: str = "clflush", iterations: int = 0, message: int = 0,
             simulate: bool = False, plant: bool = False, op: str = "add"):
    a = ffi.new("struct cxb_xh_args *")
    a.region, a.bytes, a.host = ffi.cast("void *", addr), nbytes, host
    a.session, a.key, a.generation = session, key, generation
    a.timeout_ns = max(int(timeout_s * 1e9), 1)
    a.protocol, a.flush = XH_PROTOCOLS.index(protocol), FLUSH_KINDS.index(flush)
    a.iterations, a.message, a.simulate, a.plant = iterations, message, simulate, plant
    a.op = XH_OPS.index(op)
    return a


def _shared(call, fn, addr: int, nbytes: int, host: int, **kw):
    a = _xh_args(addr, nbytes, host, **kw)
    _raise_if_failed(call, fn(a))
    return a


def xh_meet(addr: int, nbytes: int, host: int, session: int, key: int,
            timeout_s: float) -> int:
    """Meet the other host at the shared region's start: the meeting's generation (the
    same on both; host 0 opens it, clearing the work pages first). NativeError
    ETIMEDOUT where the other host did not come within timeout_s, ECONNABORTED where it
    gave up, EPROTO where it opened the meeting for another case (`key`); the error's
    `generation` is the meeting this host had joined (0: none), for xh_abort."""
    a = _xh_args(addr, nbytes, host, session=session, key=key, timeout_s=timeout_s)
    try:
        _raise_if_failed("cxb_xh_meet", lib.cxb_xh_meet(a))
    except NativeError as e:
        e.generation = a.generation
        raise
    return a.generation


def xh_abort(addr: int, nbytes: int, host: int, session: int, generation: int = 0,
             meetings: int = 1) -> None:
    """This host gives up `meetings` meetings from `generation` (0: the one it would join
    next): the other host's waits for them end at once, and both go on after them in
    step."""
    _shared("cxb_xh_abort", lib.cxb_xh_abort, addr, nbytes, host, session=session,
            generation=generation, iterations=meetings)


def xh_together(addr: int, nbytes: int, host: int, generation: int, phase: int,
                timeout_s: float) -> None:
    """Both hosts at `phase` (0 to 65533) of the meeting `generation` before either goes on."""
    _shared("cxb_xh_together", lib.cxb_xh_together, addr, nbytes, host,
            generation=generation, iterations=phase, timeout_s=timeout_s)


def xh_pingpong(addr: int, nbytes: int, host: int, iterations: int, protocol: str,
                flush: str, timeout_s: float, generation: int) -> int:
    """Round trips of a flag between the hosts (host 0 starts each) in the meeting
    `generation` (the flags count from it): this host's ns."""
    return _shared("cxb_xh_pingpong", lib.cxb_xh_pingpong, addr, nbytes, host,
                   iterations=iterations, protocol=protocol, flush=flush,
                   timeout_s=timeout_s, generation=generation).ns


def xh_ring(addr: int, nbytes: int, host: int, messages: int, message: int, protocol: str,
            flush: str, timeout_s: float, generation: int, simulate: bool = False,
            plant: bool = False) -> tuple[int, int, int]:
    """Messages from host 0 to host 1 through a ring in the region's first nbytes, in
    the meeting `generation`: this host's (ns, messages read stale, messages read torn)
    (the counts are the consumer's)."""
    a = _shared("cxb_xh_ring", lib.cxb_xh_ring, addr, nbytes, host, iterations=messages,
                message=message, protocol=protocol, flush=flush, timeout_s=timeout_s,
                generation=generation, simulate=simulate, plant=plant)
    return a.ns, a.stale, a.torn


def xh_atomic(addr: int, nbytes: int, host: int, iterations: int, op: str, protocol: str,
              flush: str, timeout_s: float, generation: int) -> tuple[int, int]:
    """`iterations` additions of 1 by each host to one counter (XH_OPS) in the meeting
    `generation`: this host's (ns, the counter once both finished)."""
    a = _shared("cxb_xh_atomic", lib.cxb_xh_atomic, addr, nbytes, host,
                iterations=iterations, op=op, protocol=protocol, flush=flush,
                timeout_s=timeout_s, generation=generation)
    return a.ns, a.value


def flush_supported(kind: str) -> bool:
    return bool(lib.cxb_flush_supported(FLUSH_KINDS.index(kind)))


def evict(addr: int, nbytes: int) -> bool:
    """Drop nbytes from addr out of every cache (untimed set-up: the next timed region
    reads memory). False where this architecture cannot (nothing is done)."""
    rc = lib.cxb_evict(ffi.cast("void *", addr), nbytes)
    if rc == -_errno.ENOTSUP:
        return False
    _raise_if_failed("cxb_evict", rc)
    return True


def stack_distances(ids: np.ndarray, nids: int) -> np.ndarray:
    """Each access's LRU stack distance (distinct units since the last access to its
    own; -1 for a first access), for units 0..nids-1. Not timed: the model's caches."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    if ids.ndim != 1:
        raise ValueError(f"stack_distances: a stream of unit ids, not a {ids.ndim}-d array")
    out = np.empty(len(ids), dtype=np.int64)
    _raise_if_failed("cxb_stack_distances", lib.cxb_stack_distances(
        ffi.cast("const int64_t *", ids.ctypes.data), len(ids), nids,
        ffi.cast("int64_t *", out.ctypes.data)))
    return out


def flush(addr: int, nbytes: int, kind: str, dirty: bool, write: bool, value: int) -> int:
    """ns to flush (or write and flush) nbytes of lines, sfence included."""
    a = ffi.new("struct cxb_flush_args *")
    a.buf, a.bytes, a.kind = ffi.cast("void *", addr), nbytes, FLUSH_KINDS.index(kind)
    a.dirty, a.write, a.value = int(dirty), int(write), value
    _raise_if_failed(f"flush {kind}", lib.cxb_flush(a))
    return a.ns


@dataclass
class TouchResult:
    samples: np.ndarray         # (n, 2), a view of the caller's array: start ns, ns taken
    touches: int                # touches made (samples holds the first max_samples)
    move_start: int
    move_end: int
    unmoved: int
    tail_start: int             # the flush after the move done: the tail's touches begin
    timer_ns: int               # an empty timed touch: every sample's share of the clock
    switches: np.ndarray        # (n,) uint8: involuntary switches counted after touch i
    voluntary: int              # the toucher's context switches, all its touches
    involuntary: int            # (the scheduler's preemptions)


TOUCH_WINDOW, TOUCH_CHECK_NS = lib.CXB_TOUCH_WINDOW, lib.CXB_TOUCH_CHECK_NS


def migrate_touch(addr: int, nbytes: int, node: int, method: str, batch: int, write: bool,
                  cpus, lead_ns: int, tail_ns: int, samples: np.ndarray,
                  switches: np.ndarray, control_ns: int = 0) -> TouchResult:
    """Move the pages of [addr, addr+nbytes) to `node` on cpus[0] while cpus[1] touches
    them a line at a time; every touch is timed into `samples` (n, 2) uint64 and its
    switch count (where counted) into `switches` (n,) uint8, arrays the caller has written
    already so the toucher takes no page faults on them. control_ns > 0: a control run,
    nothing moves for that long."""
    if samples.dtype != np.uint64 or samples.ndim != 2 or samples.shape[1] != 2 \
            or not samples.flags.c_contiguous:
        raise ValueError("samples must be a C-contiguous (n, 2) uint64 array")
    max_samples = samples.shape[0]
    if switches.dtype != np.uint8 or switches.shape != (max_samples,) \
            or not switches.flags.c_contiguous:
        raise ValueError("switches must be a contiguous uint8 array, one per sample")
    a = ffi.new("struct cxb_touch_args *")
    cpu_array = _int_array(cpus)
    a.buf, a.bytes, a.node = ffi.cast("void *", addr), nbytes, node
    a.method, a.batch, a.write = MOVE_METHODS.index(method), batch, int(write)
    a.cpus, a.lead_ns, a.tail_ns, a.control_ns = cpu_array, lead_ns, tail_ns, control_ns
    a.samples = ffi.cast("uint64_t *", samples.ctypes.data)
    a.max_samples = max_samples
    a.switches = ffi.cast("uint8_t *", switches.ctypes.data)
    _raise_if_failed("cxb_migrate_touch", lib.cxb_migrate_touch(a))
    return TouchResult(samples[:a.nsamples], a.touches, a.move_start, a.move_end, a.unmoved,
                       a.tail_start, a.timer_ns,
                       switches[:a.nsamples], a.voluntary, a.involuntary)


def touch_walk(pages: int, n: int) -> np.ndarray:
    """The byte offsets of migrate_touch's first n touches in a buffer of `pages` pages."""
    out = np.empty(n, dtype=np.uint64)
    _raise_if_failed("cxb_touch_walk", lib.cxb_touch_walk(pages, ffi.cast("uint64_t *", out.ctypes.data), n))
    return out


# ---- page moves and node maps ---------------------------------------------------------
MOVE_METHODS = _enum("CXB_MOVE_BY_")        # ("move_pages", "mbind")


def node_map(addr: int, pages: int, page: int = 4096) -> np.ndarray:
    """Each page's node as move_pages(2) reports it now, or -errno: int32, one per page."""
    out = np.empty(pages, dtype=np.int32)
    _raise_if_failed("cxb_node_map", lib.cxb_node_map(ffi.cast("void *", addr), pages, page,
                                            ffi.cast("int32_t *", out.ctypes.data)))
    return out


def move(addr: int, pages: int, page: int, node: int, method: str,
         batch: int = 0, index: np.ndarray | None = None) -> tuple[int, int, np.ndarray]:
    """Move the pages to `node`, `batch` a call (0: one): (pages on the node after, ns the
    calls took, each page's node after or -errno). With `index` (move_pages only): the
    pages of those indices from addr, `pages` of them, instead of [0, pages)."""
    status = np.empty(pages, dtype=np.int32)
    a = ffi.new("struct cxb_move_args *")
    a.addr, a.pages, a.page, a.node = ffi.cast("void *", addr), pages, page, node
    a.method, a.batch = MOVE_METHODS.index(method), batch
    if index is not None:
        index = np.ascontiguousarray(index, dtype=np.uint64)
        if len(index) != pages:
            raise ValueError(f"move: {len(index)} page indices for {pages} pages")
        a.index = ffi.cast("uint64_t *", index.ctypes.data)
    a.status = ffi.cast("int32_t *", status.ctypes.data)
    _raise_if_failed(f"{method} to node {node}", lib.cxb_move(a))
    return a.moved, a.t1 - a.t0, status
