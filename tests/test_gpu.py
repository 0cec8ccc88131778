"""The GPU library: built by nvcc into a cache keyed by its sources, loaded by dlopen, its
kernel table the options' own; where no GPU is, every GPU case says why and skips. Tests
marked gpu run the kernels and skip here with the library's reason."""
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cffi import FFI

from cxlbench import benchmarks, gpu, pcie_link
from cxlbench.benchmarks import (gpu_chase, gpu_copy, gpu_embedding, gpu_kv_swap, gpu_managed,
                                 gpu_stream, gpu_zero_copy)
from cxlbench.errors import CheckError, UserError
from cxlbench.topology import Topology

from . import manual
from .conftest import cxlbench
from .test_run import run_dirs

needs_nvcc = pytest.mark.skipif(gpu.nvcc() is None, reason="nvcc not installed (the CUDA "
                                "toolkit builds the GPU library)")


@pytest.fixture
def private_sources(tmp_path, monkeypatch):
    """A copy of native/gpu and a cache of its own, so a test may edit and rebuild."""
    src = tmp_path / "src"
    shutil.copytree(gpu.source_dir(), src)
    monkeypatch.setattr(gpu, "source_dir", lambda: src)
    monkeypatch.setenv("CXLBENCH_CACHE", str(tmp_path / "cache"))
    return src


@pytest.fixture
def mutant(private_sources):
    """edit(file, old, new, count): the library loaded next rebuilt from the private sources
    with `old` (found `count` times) replaced by `new`; the real one loaded again after."""
    def edit(name: str, old: str, new: str, count: int = 1) -> None:
        src = private_sources / name
        text = src.read_text()
        assert text.count(old) == count
        src.write_text(text.replace(old, new))
        gpu._loaded.cache_clear()
    yield edit
    gpu._loaded.cache_clear()


@needs_nvcc
def test_the_library_builds_loads_and_lists_the_options_kernels():
    """Its table and the header's (which the options read) agree name for name, byte for
    byte and row for row: row i is the kernel of enum value i."""
    assert list(gpu.kernels().items()) == list(gpu.KERNELS.items())
    assert list(gpu.kernels()) == list(gpu_stream.OPTIONS["kernel"].choices)
    path = gpu.built()
    assert path.exists() and path.parent in (gpu.cache_dir(), Path(gpu.__file__).parent)
    rt = gpu.runtime()
    assert rt.runtime_version >= 12000          # the toolkit's runtime, linked in


@needs_nvcc
@pytest.mark.slow      # nvcc's builds are its cost
def test_a_build_is_cached_by_its_sources_and_a_failed_one_says_why(private_sources):
    compiler = gpu.nvcc()
    first = gpu.build(compiler)
    assert first.exists() and gpu.build(compiler) == first           # cached
    (private_sources / "stream.cu").write_text(
        (private_sources / "stream.cu").read_text() + "\n// a change\n")
    second = gpu.library_path(compiler)
    assert second != first and not second.exists()
    assert gpu.build(compiler) == second and second.exists()
    (private_sources / "stream.cu").write_text("this is not CUDA\n")
    with pytest.raises(UserError, match="nvcc could not build the GPU library: .*error"):
        gpu.build(compiler)
    # Nothing half-written is left: the two good builds only.
    assert sorted(p.name for p in gpu.cache_dir().iterdir()) == sorted([first.name,
                                                                        second.name])


# ---- the header's enums, which the options offer ------------------------------------------
def header_enum(name: str) -> list[tuple[str, int | None]]:
    """enum <name>'s members in cxb_gpu.h, each with its value where one is written, read
    from the text (not through cffi, which gpu.py reads them by)."""
    text = re.sub(r"/\*.*?\*/", "", (gpu.source_dir() / gpu.HEADER).read_text(), flags=re.S)
    body = re.search(rf"enum {name}\s*{{(.*?)}};", text, re.S).group(1)
    return [(m[0], int(m[1]) if m[1] else None)
            for m in re.findall(r"(\w+)\s*(?:=\s*(\d+))?", body)]


ENUMS = [  # (the header's kind, gpu.py's tuple, the options offering it)
    ("direction", "DIRECTIONS", [gpu_copy.OPTIONS["direction"]]),
    ("engine", "ENGINES", [gpu_copy.OPTIONS["engine"]]),
    ("host_kind", "HOST_KINDS", [gpu_copy.OPTIONS["host"]]),
    ("managed_mode", "MANAGED_MODES", [gpu_managed.OPTIONS["mode"]]),
    ("embedding_table", "EMBEDDING_TABLES", [gpu_embedding.OPTIONS["table"]]),
    ("kv_direction", "KV_DIRECTIONS", [gpu_kv_swap.OPTIONS["direction"]]),
    ("kv_method", "KV_METHODS", [gpu_kv_swap.OPTIONS["method"]]),
    ("zero_copy_op", "ZERO_COPY_OPS", [gpu_zero_copy.OPTIONS["op"]]),
    ("kernel", "KERNELS", [gpu_stream.OPTIONS["kernel"]]),
]


@pytest.mark.parametrize("kind,tuple_name,options", ENUMS, ids=[e[0] for e in ENUMS])
def test_the_options_offer_the_headers_enums_in_value_order(kind, tuple_name, options):
    """Each enum cxb_gpu_<kind>: its members in order (values 0, 1, 2, ...), lower-cased,
    are gpu.py's tuple and the options' choices and "all"; the last, CXB_GPU_<KIND>S,
    counts them. cffi's values (what gpu.py passes) are the ones C gives them."""
    members = header_enum(f"cxb_gpu_{kind}")
    assert all(value is None for _, value in members)       # numbered by their order
    *names, count = [name for name, _ in members]
    prefix = f"CXB_GPU_{kind.upper()}_"
    assert count == prefix[:-1] + "S" and all(n.startswith(prefix) for n in names)
    expect = tuple(n[len(prefix):].lower().replace("_", "-") for n in names)
    assert tuple(getattr(gpu, tuple_name)) == expect
    for option in options:
        assert tuple(option.choices) == expect and option.expand["all"] == expect
    ctype = gpu.ffi.typeof(f"enum cxb_gpu_{kind}")
    assert ctype.relements[count] == len(expect) == len(getattr(gpu, tuple_name))
    assert [ctype.relements[n] for n in names] == list(range(len(names)))


def test_the_stream_kernels_bytes_are_the_headers():
    """GB/s counts the bytes the header declares a kernel moves per element, one a kernel."""
    per = dict(header_enum("cxb_gpu_kernel_bytes"))
    assert gpu_stream.KERNELS is gpu.KERNELS
    assert gpu.KERNELS == {k: per[f"CXB_GPU_BYTES_{k.upper()}"] for k in gpu.KERNELS}
    assert len(per) == len(gpu.KERNELS)


def test_the_enums_are_read_without_the_library():
    """Importing every GPU benchmark (their options) neither builds nor loads it."""
    r = subprocess.run([sys.executable, "-c", "from cxlbench import gpu, benchmarks\n"
                        "from cxlbench.benchmarks import gpu_copy, gpu_stream\n"
                        "assert gpu_copy.OPTIONS['direction'].choices == gpu.DIRECTIONS\n"
                        "print(gpu._loaded.cache_info().currsize)"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0"


@pytest.mark.parametrize("declaration", [
    "enum cxb_gpu_thing { CXB_GPU_THING_A, CXB_GPU_THING_B = 2, CXB_GPU_THINGS };",
    "enum cxb_gpu_thing { CXB_GPU_THING_A, CXB_GPU_THING_B };",
    "enum cxb_gpu_thing { CXB_GPU_THING_A, CXB_GPU_THING_B, CXB_GPU_THINGS = 3 };",
    "enum cxb_gpu_thing { CXB_GPU_THING_A, CXB_GPU_THING_B, CXB_GPU_THINGS, CXB_GPU_X };",
])
def test_an_enum_off_the_convention_fails_the_import(monkeypatch, declaration):
    ffi = FFI()
    ffi.cdef(declaration)
    monkeypatch.setattr(gpu, "ffi", ffi)
    with pytest.raises(ImportError, match="enum cxb_gpu_thing in cxb_gpu.h"):
        gpu._enum("thing")


def test_an_enum_names_options_lower_case_with_dashes(monkeypatch):
    ffi = FFI()
    ffi.cdef("enum cxb_gpu_thing { CXB_GPU_THING_FIRST_TOUCH, CXB_GPU_THING_B, "
             "CXB_GPU_THINGS };")
    monkeypatch.setattr(gpu, "ffi", ffi)
    assert gpu._enum("thing") == ("first-touch", "b")


def test_without_a_built_library_or_nvcc_the_reason_says_so(monkeypatch):
    monkeypatch.setattr(gpu, "nvcc", lambda: None)
    monkeypatch.setattr(gpu, "built", lambda: None)
    gpu._loaded.cache_clear()
    try:
        assert gpu.unavailable() == "GPU library: not built, and no nvcc to build it (pip " \
            "install where nvcc is on PATH builds it; so does a first use with nvcc on PATH)"
        with pytest.raises(UserError, match="GPU library: not built, and no nvcc"):
            gpu.lib()
    finally:
        gpu._loaded.cache_clear()


def test_an_unwritable_cache_says_where_and_what_moves_it(tmp_path, monkeypatch):
    """HOME unwritable (a service account, a read-only container): the skip reason names
    the folder and CXLBENCH_CACHE, not the bare OSError."""
    (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv("CXLBENCH_CACHE", str(tmp_path / "a-file" / "cache"))
    monkeypatch.setattr(gpu, "nvcc", lambda: "nvcc")
    monkeypatch.setattr(gpu, "built", lambda: None)
    gpu._loaded.cache_clear()
    try:
        assert gpu.unavailable() == (
            f"GPU library: the GPU library is built on first use into the cache: cannot "
            f"make the cache folder {tmp_path / 'a-file' / 'cache' / 'gpu'}: Not a "
            f"directory: set CXLBENCH_CACHE to a writable folder")
    finally:
        gpu._loaded.cache_clear()


@needs_nvcc
def test_no_gpu_here_is_a_skip_with_the_reason():
    rt = gpu.runtime()
    if rt.devices:
        pytest.skip("this machine has a GPU")
    why = gpu.unavailable()
    assert why and ("no CUDA driver" in why or "no CUDA device" in why)
    assert gpu_stream.skip({}, None) == why


@needs_nvcc
def test_gpu_cases_run_as_unsupported_here_with_the_reason(tmp_path):
    """The gpu suite's every case is listed as skipped; a run of one case of each GPU
    benchmark records them unsupported, with the reason, and exits 0."""
    why = gpu.unavailable()
    if why is None:
        pytest.skip("this machine has a GPU")
    r = cxlbench("run", "gpu", "--dry-run", "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    cases = [line for line in r.stdout.splitlines() if "/" in line.split(" ")[0]]
    nodes = len(Topology.read(probe_gpus=False).memory_nodes)      # copies: bind:*
    # stream, occupancy, working set, latency, tlb; copies, SM copies (registered a node,
    # pinned), pinned copies, zero-copy, managed, embedding (HBM and pinned, then a node
    # each), KV swaps
    assert len(cases) == (7 + 25 + 9 + 29 + 7 + 36 * nodes + 9 * nodes + 9 + 36 + 3 * nodes
                          + 4 + 4 + 2 * nodes + 4 * nodes)
    pageable_bidir = "pageable copies are staged by the driver synchronously"
    assert r.stderr.count(f"skipped: {why}") == len(cases) - 6 * nodes
    assert r.stderr.count(f"skipped: {pageable_bidir}") == 6 * nodes
    suite = tmp_path / "two.toml"
    suite.write_text('[stream]\nbench = "gpu_stream"\n[copy]\nbench = "gpu_copy"\n'
                     'host = "pinned"\n')
    r = cxlbench("run", str(suite), "--results-dir", str(tmp_path / "r"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("UNSUPPORTED: " + why) == 2
    assert len(run_dirs(tmp_path / "r")) == 1


# ---- the benchmark's arithmetic, on a stand-in for the library ------------------------------
H200 = {"index": 0, "name": "NVIDIA H200", "major": 9, "minor": 0, "sms": 132,
        "max_threads_per_sm": 2048, "max_blocks_per_sm": 32, "l2_bytes": 50 << 20,
        "pci_domain": 0, "pci_bus": 0x17, "pci_device": 0}


def defaults(module, over: dict, **small) -> dict:
    """A GPU benchmark's option defaults, then `small` (sizes and repetitions a test
    uses), then the test's own `over`."""
    return {**{k: o.default for k, o in module.OPTIONS.items()}, **small, **over}


def params(**over):
    return defaults(gpu_stream, over, size=1 << 20, repeat=3, warmup=2)


def fake(monkeypatch, ns, bad=0):
    calls = []

    def stream(kernel, n, blocks, threads, reps, device_index=0, passes=1):
        calls.append((kernel, n, blocks, threads, reps, device_index, passes))
        return gpu.StreamResult(ns, bad, 0.0, 1.0, blocks or 4 * 132, 4)
    monkeypatch.setattr(gpu, "device", lambda i: {**H200, "index": i})
    monkeypatch.setattr(gpu, "stream", stream)
    return calls


@pytest.mark.parametrize("threads,per_sm,blocks", [(256, "full", 8 * 132), (1024, "full", 264),
                                                   (32, "full", 32 * 132), (64, 3, 396),
                                                   (128, 32, 32 * 132)])
def test_the_grid_is_blocks_per_sm_times_sms(threads, per_sm, blocks):
    assert gpu_stream.grid(params(threads=threads, blocks_per_sm=per_sm), H200) == blocks


def test_bandwidth_is_the_declared_bytes_over_each_launch_warmups_dropped(monkeypatch):
    """triad over 1 MiB arrays: 131072 elements x 24 B a pass, 342 passes a launch (1 GiB
    at least); the two warm-up launches are timed but not kept."""
    calls = fake(monkeypatch, [1, 1, 1000, 2000, 4000])
    m = gpu_stream.run(params(kernel="triad", device=1))
    assert calls == [("triad", 131072, 0, 256, 5, 1, 342)]         # 0: the full grid
    moved = 131072 * 24 * 342
    assert [r["bandwidth"] for r in m.reps] == [moved / 1000, moved / 2000, moved / 4000]
    assert m.units == {"bandwidth": "GB/s"} and m.kernel == "gpu_triad" and m.isa == "sm_90"
    assert m.info["bytes"] == moved and m.info["blocks"] == 4 * 132     # the library's
    assert m.info["resident_per_sm"] == 4
    fake(monkeypatch, [1000] * 5)
    assert gpu_stream.run(params(blocks_per_sm=2)).info["blocks"] == 2 * 132


@pytest.mark.parametrize("kernel,size,passes", [
    ("triad", 1 << 30, 1), ("read", 1 << 30, 1), ("read", 1 << 29, 2), ("read", 64 << 10, 16384),
    ("triad", 64 << 10, 5462), ("copy", 48 << 20, 11)])
def test_a_launch_passes_over_small_arrays_until_it_has_moved_a_gib(kernel, size, passes):
    """One pass over 64 KiB takes less than a launch costs: a launch goes over the arrays
    until it has moved 1 GiB, so L1 and L2 are timed, not the launch."""
    assert gpu_stream.passes(kernel, size) == passes
    assert gpu_stream.KERNELS[kernel] * size // 8 * passes >= 1 << 30


def test_the_arrays_are_pairs_of_doubles():
    """The kernels move 16 bytes a load: an array is a whole number of them."""
    with pytest.raises(ValueError, match="not a multiple of 16 bytes"):
        gpu_stream.OPTIONS["size"].convert((64 << 10) + 8)


def test_a_kernel_off_its_value_fails_the_case(monkeypatch):
    fake(monkeypatch, [1000] * 5, bad=7)
    with pytest.raises(CheckError, match="gpu_stream copy: 7 of 131072 elements off"):
        gpu_stream.run(params(kernel="copy"))
    fake(monkeypatch, [1000] * 5, bad=1)
    with pytest.raises(CheckError, match=r"gpu_stream dot: sum 0\.0, not 1\.0"):
        gpu_stream.run(params(kernel="dot"))


def test_a_launch_below_the_events_resolution_fails_the_case(monkeypatch):
    fake(monkeypatch, [1000, 1000, 0, 1000, 1000])
    with pytest.raises(CheckError, match="under the CUDA events. resolution"):
        gpu_stream.run(params())


def test_threads_must_be_whole_warps(monkeypatch):
    monkeypatch.setattr(gpu, "runtime", lambda: gpu.Runtime(13000, 13000, 1, 0, ""))
    with pytest.raises(UserError, match="threads=48 is not whole warps"):
        gpu_stream.validate(params(threads=48), None)
    with pytest.raises(UserError, match="^device=1, but this machine has 1 CUDA device"):
        gpu_stream.validate(params(device=1), None)
    gpu_stream.validate(params(), None)


# ---- copies --------------------------------------------------------------------------------
def copy_params(**over):
    return defaults(gpu_copy, over, size=1 << 20, repeat=3, warmup=2, mem="local",
                    page="4k")


@pytest.mark.parametrize("host,placed", [("pageable", True), ("registered", True),
                                         ("pinned", False), ("wc", False)])
def test_only_pageable_and_registered_copies_place_a_host_buffer(host, placed):
    p = copy_params(host=host)
    assert gpu_copy.buffers_of(p) == (("host",) if placed else ())
    grid_ = {"threads", "blocks_per_sm"}            # the copy engines take no grid
    assert set(gpu_copy.unused(p)) == grid_ | (set() if placed else {"mem", "page"})
    assert set(gpu_copy.unused({**p, "engine": "sm"})) == (set() if placed else
                                                           {"mem", "page"})


@pytest.mark.parametrize("direction,each,moved", [("h2d", 1 << 20, 1 << 20),
                                                  ("bidir", 2 << 20, 2 << 20)])
def test_a_copy_times_every_repetition_in_one_call_from_the_placed_buffer(
        monkeypatch, direction, each, moved):
    """bidir's host side is twice the size (one half each way) and its GB/s counts both
    halves; the warm-up copies are timed in the same call but not kept."""
    calls = []

    def copy(direction_, host, nbytes, reps, addr, device_index, engine, blocks, threads):
        calls.append((direction_, host, nbytes, reps, addr, device_index))
        assert (engine, blocks, threads) == ("ce", 0, 0)
        return [5, 5, 1000, 2000, 4000], 0
    monkeypatch.setattr(gpu, "copy", copy)
    monkeypatch.setattr(gpu, "device", lambda i: {**H200, "index": i})
    m = gpu_copy.run(copy_params(direction=direction))
    ((d, host, nbytes, reps, addr, _),) = calls
    assert (d, host, nbytes, reps) == (direction, "registered", 1 << 20, 5)
    (v,) = m.placement["verified"]
    assert v["buffer"] == "host" and v["ok"] and addr != 0
    assert m.info["bytes"] == moved
    assert [r["bandwidth"] for r in m.reps] == [moved / 1000, moved / 2000, moved / 4000]
    assert [r["time"] for r in m.reps] == [1.0, 2.0, 4.0]


def test_a_copy_records_the_pcie_link_it_ran_over_not_the_idle_one(monkeypatch):
    """An idle GPU's link is Gen1: the link is read while the copies run (and once just
    after), and the fastest reading is the copy's."""
    link = {"gen": 1, "width": 16, "max_gen": 5, "max_width": 16}
    read = []

    def copy(*args):
        link["gen"] = 5
        time.sleep(0.1)         # several readings during the copies
        link["gen"] = 1
        return [1000] * 5, 0

    def sysfs(addr, root="/sys"):
        read.append(addr)
        return dict(link)
    monkeypatch.setattr(gpu, "copy", copy)
    monkeypatch.setattr(gpu, "device", lambda i: H200)
    monkeypatch.setattr(pcie_link, "read", sysfs)
    m = gpu_copy.run(copy_params(host="pinned"))
    assert m.info["pcie"] == {"during": "gen5 x16", "max": "gen5 x16"}
    assert set(read) == {"0000:17:00.0"} and len(read) >= 3
    monkeypatch.setattr(pcie_link, "read", lambda addr, root="/sys": None)    # no sysfs
    assert "pcie" not in gpu_copy.run(copy_params(host="pinned")).info


def test_the_pcie_link_is_read_from_sysfs(tmp_path):
    dev = tmp_path / "bus/pci/devices/0000:9a:00.0"
    dev.mkdir(parents=True)
    for name, value in (("current_link_speed", "2.5 GT/s PCIe"), ("current_link_width", "16"),
                        ("max_link_speed", "32.0 GT/s PCIe"), ("max_link_width", "16")):
        (dev / name).write_text(value + "\n")
    assert pcie_link.read(pcie_link.address(0, 0x9A, 0), tmp_path) == \
        {"gen": 1, "width": 16, "max_gen": 5, "max_width": 16}
    assert pcie_link.read("0000:00:01.0", tmp_path) is None
    assert pcie_link.generation("16 GT/s") == 4 and pcie_link.generation("Unknown") is None


def test_a_copy_with_wrong_bytes_fails_the_case(monkeypatch):
    monkeypatch.setattr(gpu, "copy", lambda *a: ([1000] * 5, 3))
    monkeypatch.setattr(gpu, "device", lambda i: H200)
    with pytest.raises(CheckError, match="gpu_copy h2d pinned ce: 3 of 1048576 bytes"):
        gpu_copy.run(copy_params(host="pinned"))


@needs_nvcc
def test_the_library_refuses_bad_copy_arguments_and_reports_cuda_errors():
    """Arguments out of range are refused before CUDA is asked; without a GPU the first
    CUDA call's error comes back in words."""
    with pytest.raises(gpu.GpuError, match="cxb_gpu_copy: direction, engine, host kind"):
        gpu.copy("h2d", "pageable", 4096, 1, 0)           # pageable needs memory
    with pytest.raises(gpu.GpuError, match="an SM copy needs mapped .* whole warps"):
        gpu.copy("h2d", "pinned", 4096, 1, engine="sm", blocks=1, threads=48)
    with pytest.raises(gpu.GpuError, match="an SM copy needs mapped"):
        gpu.copy("h2d", "pinned", 4100, 1, engine="sm", blocks=1, threads=64)
    with pytest.raises(gpu.GpuError, match="cxb_gpu_managed: mode, bytes"):
        gpu.managed("fault", 4100, 1, 1, 64)              # not whole doubles
    if gpu.unavailable() is not None:
        with pytest.raises(gpu.GpuError, match=r"cudaSetDevice.*\(CUDA error \d+\)"):
            gpu.copy("h2d", "pinned", 4096, 1)


def test_an_sm_copy_runs_a_grid_and_refuses_pageable_memory(monkeypatch):
    """engine=sm: a full grid of the device at the threads asked, 16-byte steps (the size
    a multiple of 16); pageable memory is not mapped, so it skips with why."""
    calls = []

    def copy(*args):
        calls.append(args)
        return [1000] * 5, 0
    monkeypatch.setattr(gpu, "copy", copy)
    monkeypatch.setattr(gpu, "device", lambda i: H200)
    m = gpu_copy.run(copy_params(host="pinned", engine="sm", threads=512))
    (args,) = calls
    assert args[-3:] == ("sm", 132 * 4, 512)        # 2048 threads an SM: 4 blocks of 512
    assert m.kernel == "gpu_copy_h2d_sm" and m.info["blocks"] == 528
    assert "not mapped into the device's space" in gpu_copy.skip(
        copy_params(host="pageable", engine="sm"), None)
    monkeypatch.setattr(gpu, "runtime", lambda: gpu.Runtime(13000, 13000, 1, 0, ""))
    with pytest.raises(UserError, match="size=4104: an SM copy moves 16 bytes"):
        gpu_copy.validate(copy_params(host="pinned", engine="sm", size=4104), None)
    with pytest.raises(UserError, match="threads=40 is not whole warps"):
        gpu_copy.validate(copy_params(host="pinned", engine="sm", threads=40), None)
    gpu_copy.validate(copy_params(host="pinned", engine="sm"), None)
    gpu_copy.validate(copy_params(host="pinned", size=4104, threads=40), None)    # ce: no grid


# ---- managed memory ---------------------------------------------------------------------------
def managed_params(**over):
    return defaults(gpu_managed, over, size=1 << 20, repeat=3, warmup=1)


def test_managed_memory_times_in_one_call_from_the_cpu_asked_and_drops_warmups(monkeypatch):
    """The host writes from the case's CPU (its pages land on that CPU's node), the worker's
    affinity is given back after, and the warm-up's time is not kept."""
    import os
    seen = []

    def managed(mode, nbytes, reps, blocks, threads, device_index):
        seen.append((mode, nbytes, reps, blocks, threads, sorted(os.sched_getaffinity(0))))
        return [9, 1000, 2000, 4000], 0
    monkeypatch.setattr(gpu, "managed", managed)
    monkeypatch.setattr(gpu, "device", lambda i: H200)
    allowed = sorted(os.sched_getaffinity(0))
    m = gpu_managed.run(managed_params(mode="prefetch", cpus=str(allowed[-1])))
    assert seen == [("prefetch", 1 << 20, 4, 132 * 8, 256, [allowed[-1]])]
    assert sorted(os.sched_getaffinity(0)) == allowed
    assert [r["bandwidth"] for r in m.reps] == [(1 << 20) / 1000, (1 << 20) / 2000,
                                                (1 << 20) / 4000]
    assert m.kernel == "gpu_managed_prefetch" and m.cpus == [allowed[-1]]
    assert gpu_managed.unused(managed_params(mode="prefetch")) == {}
    assert set(gpu_managed.unused(managed_params(mode="first-touch"))) == {"cpus"}


@pytest.mark.parametrize("mode,words", [("first-touch", "5 doubles not what the GPU wrote"),
                                        ("fault", "sum is not that of what the host wrote")])
def test_managed_memory_that_fails_its_check_fails_the_case(monkeypatch, mode, words):
    import os
    allowed = os.sched_getaffinity(0)
    monkeypatch.setattr(gpu, "managed", lambda *a: ([1000] * 4, 5))
    monkeypatch.setattr(gpu, "device", lambda i: H200)
    with pytest.raises(CheckError, match=f"gpu_managed {mode}: .*{words}"):
        gpu_managed.run(managed_params(mode=mode))
    assert os.sched_getaffinity(0) == allowed


def test_managed_memory_is_never_oversubscribed(monkeypatch):
    monkeypatch.setattr(gpu, "runtime", lambda: gpu.Runtime(13000, 13000, 1, 0, ""))
    monkeypatch.setattr(gpu, "device", lambda i: {**H200, "memory_bytes": 100 << 30})
    gpu_managed.validate(managed_params(size=90 << 30), None)
    with pytest.raises(UserError, match=r"over 90% of device 0's .* oversubscribed"):
        gpu_managed.validate(managed_params(size=91 << 30), None)


# ---- device-memory latency ---------------------------------------------------------------------
def chase_params(**over):
    return defaults(gpu_chase, over, size=1 << 20, repeat=3, warmup=1)


def test_chase_latency_and_cycles_per_load_warmups_dropped(monkeypatch):
    calls = []

    def chase(nbytes, stride, hops, reps, device_index):
        calls.append((nbytes, stride, hops, reps, device_index))
        return [5, 20000, 40000, 60000], [9, 30000, 30000, 60000], 0
    monkeypatch.setattr(gpu, "chase", chase)
    monkeypatch.setattr(gpu, "device", lambda i: H200)
    m = gpu_chase.run(chase_params(stride=256))
    assert calls == [(1 << 20, 256, 20000, 4, 0)]
    assert m.reps == [{"latency": 1.0, "cycles": 1.5}, {"latency": 2.0, "cycles": 1.5},
                      {"latency": 3.0, "cycles": 3.0}]
    assert m.info["elements"] == 4096 and m.units == {"latency": "ns", "cycles": "cycles"}
    monkeypatch.setattr(gpu, "chase", lambda *a: ([1] * 4, [1] * 4, 1))
    with pytest.raises(CheckError, match="ended elsewhere than the cycle's order puts it"):
        gpu_chase.run(chase_params())


def test_the_latency_sweep_steps_by_sqrt2_where_l2_caches_end():
    """An H200's 50 MiB L2 lies between 32 and 64 MiB: the sweep has a size between them,
    and its neighbours are at most 1.5x apart from 4 to 256 MiB (2x elsewhere)."""
    sizes = gpu_chase.OPTIONS["size"].expand["sweep"]
    assert sizes[0] == 1 << 10 and sizes[-1] == 4 << 30 and list(sizes) == sorted(set(sizes))
    assert any(32 << 20 < s < 50 << 20 for s in sizes)
    for a, b in zip(sizes, sizes[1:]):
        assert b / a <= (1.5 if 4 << 20 <= a < 256 << 20 else 2)
        assert a % 128 == 0


def test_a_chase_needs_two_elements():
    with pytest.raises(UserError, match="size=2097152 holds fewer than two elements"):
        gpu_chase.validate(chase_params(size=2 << 20, stride=2 << 20), None)


@needs_nvcc
def test_the_library_refuses_a_chase_of_one_element():
    with pytest.raises(gpu.GpuError, match="cxb_gpu_chase: stride"):
        gpu.chase(4096, 4096, 1000, 1)


# ---- zero-copy -------------------------------------------------------------------------------
def zc_params(**over):
    return defaults(gpu_zero_copy, over, size=1 << 20, repeat=3, warmup=1, mem="local",
                    page="4k")


@pytest.mark.parametrize("op,blocks,threads,figure", [
    ("read", 8 * 132, 256, {"bandwidth": (1 << 20) / 2000}),
    ("write", 8 * 132, 256, {"bandwidth": (1 << 20) / 2000}),
    ("chase", 1, 32, {"latency": 2000 / 20000})])
def test_zero_copy_figures_from_one_call_over_the_placed_buffer(monkeypatch, op, blocks,
                                                                 threads, figure):
    """read and write: the buffer's bytes over each launch; chase: each launch over its
    hops, one thread (the library takes whole warps, launches one)."""
    calls = []

    def zero_copy(op_, addr, nbytes, reps, blocks_, threads_, hops, device_index):
        calls.append((op_, nbytes, reps, blocks_, threads_, hops))
        assert addr != 0
        return [9, 2000, 2000, 2000], 0
    monkeypatch.setattr(gpu, "zero_copy", zero_copy)
    monkeypatch.setattr(gpu, "device", lambda i: H200)
    m = gpu_zero_copy.run(zc_params(op=op))
    assert calls == [(op, 1 << 20, 4, blocks, threads, 20000)]
    assert m.reps == [figure] * 3 and m.status == "ok"
    assert m.placement["verified"][0]["buffer"] == "host"
    assert set(gpu_zero_copy.unused(zc_params(op=op))) == (
        {"threads", "blocks_per_sm"} if op == "chase" else {"hops"})


@pytest.mark.parametrize("op,words", [("read", "read a sum other"),
                                      ("write", "left 5 doubles unwritten"),
                                      ("chase", "ended its chase elsewhere")])
def test_a_zero_copy_check_that_fails_fails_the_case(monkeypatch, op, words):
    monkeypatch.setattr(gpu, "zero_copy", lambda *a: ([1000] * 4, 5))
    monkeypatch.setattr(gpu, "device", lambda i: H200)
    with pytest.raises(CheckError, match=f"gpu_zero_copy {op}: the GPU {words}"):
        gpu_zero_copy.run(zc_params(op=op))


# ---- on a GPU ------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("kernel", list(gpu_stream.KERNELS))
def test_every_kernel_runs_and_checks_on_the_gpu(kernel):
    """64 MiB arrays at a full grid: each launch timed, the output checked, GB/s above a
    floor any HBM or GDDR clears (a PCIe-bound figure would not)."""
    m = gpu_stream.run(params(kernel=kernel, size=64 << 20, repeat=5, warmup=1))
    assert len(m.reps) == 5
    assert m.info["resident_per_sm"] >= 1       # the full grid: every block resident at once
    assert m.info["blocks"] == m.info["resident_per_sm"] * m.info["device"]["sms"]
    print(kernel, [round(r["bandwidth"]) for r in m.reps], "GB/s")
    assert min(r["bandwidth"] for r in m.reps) > 100


@pytest.mark.gpu
@pytest.mark.parametrize("passes", [1, 3])
def test_read_sums_to_its_closed_form_on_the_gpu(passes):
    """read over n elements of 0.1, passes times, reduced by blocks and then on the host:
    passes x n x 0.1."""
    r = gpu.stream("read", 1 << 20, 132, 256, 2, passes=passes)
    assert r.bad == 0 and r.total == pytest.approx(0.1 * (1 << 20) * passes, rel=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", list(gpu_stream.KERNELS))
def test_every_kernel_checks_after_many_passes_over_a_small_set_on_the_gpu(kernel):
    """64 KiB arrays (within L1), 16 k passes a launch: checked, and the figure printed."""
    m = gpu_stream.run(params(kernel=kernel, size=64 << 10, repeat=3, warmup=1))
    assert m.info["passes"] > 1000
    print(kernel, "64 KiB", [round(r["bandwidth"]) for r in m.reps], "GB/s")


@pytest.mark.gpu
@pytest.mark.parametrize("host", gpu.HOST_KINDS)
@pytest.mark.parametrize("direction", gpu.DIRECTIONS)
def test_every_copy_runs_and_checks_on_the_gpu(direction, host):
    """16 MiB each way from the kind of host memory, every byte checked; any PCIe or
    NVLink-C2C link moves more than 1 GB/s."""
    m = gpu_copy.run(copy_params(direction=direction, host=host, size=16 << 20))
    assert m.status == "ok", m.error
    print(direction, host, [round(r["bandwidth"], 1) for r in m.reps], "GB/s")
    assert min(r["bandwidth"] for r in m.reps) > 1


@pytest.mark.gpu
@pytest.mark.parametrize("host", ["registered", "pinned", "wc"])
@pytest.mark.parametrize("direction", gpu.DIRECTIONS)
def test_every_sm_copy_runs_and_checks_on_the_gpu(direction, host):
    m = gpu_copy.run(copy_params(direction=direction, host=host, engine="sm", size=16 << 20))
    assert m.status == "ok", m.error
    print(direction, host, "sm", [round(r["bandwidth"], 1) for r in m.reps], "GB/s")
    assert min(r["bandwidth"] for r in m.reps) > 1


@pytest.mark.gpu
def test_sm_copies_both_ways_run_at_once():
    """One kernel, its warps alternating directions: on a full-duplex link both ways
    together move well over one way's bytes a second (two kernels would run in turn)."""
    med = {d: sorted(r["bandwidth"] for r in gpu_copy.run(copy_params(
        direction=d, host="pinned", engine="sm", size=256 << 20)).reps)[1]
        for d in ("h2d", "bidir")}
    print(med)
    assert med["bidir"] > 1.2 * med["h2d"]


@pytest.mark.gpu
@pytest.mark.parametrize("mode", gpu.MANAGED_MODES)
def test_managed_memory_runs_and_checks_on_the_gpu(mode):
    """64 MiB: faulted in is slower than prefetched, both slower than resident pages."""
    m = gpu_managed.run(managed_params(mode=mode, size=64 << 20))
    assert m.status == "ok", m.error
    print(mode, [round(r["bandwidth"], 1) for r in m.reps], "GB/s")
    assert min(r["bandwidth"] for r in m.reps) > 0.5


@pytest.mark.gpu
def test_managed_pages_already_on_the_device_read_faster_than_faulted_ones():
    med = {mode: sorted(r["bandwidth"] for r in gpu_managed.run(
        managed_params(mode=mode, size=256 << 20)).reps)[1] for mode in ("fault", "resident")}
    print(med)
    assert med["resident"] > 3 * med["fault"]


@pytest.mark.gpu
def test_a_kernel_that_writes_nothing_is_caught(mutant):
    """add rebuilt to write nothing: c keeps its start value, which the static check holds
    apart from add's result, so the case fails."""
    mutant("stream.cu", "GRID_STRIDE(i, n) c[i] = a[i] + b[i];",
           "(void)a; (void)b; (void)c; (void)n;")
    with pytest.raises(CheckError, match="gpu_stream add: .* elements off"):
        gpu_stream.run(params(kernel="add", size=16 << 20))


@pytest.mark.gpu
@pytest.mark.parametrize("op", gpu.ZERO_COPY_OPS)
def test_zero_copy_runs_and_checks_on_the_gpu(op):
    """16 MiB of local host memory read, written and chased in place by the GPU; a load
    across any link takes over 100 ns and the streams move over 0.5 GB/s."""
    m = gpu_zero_copy.run(zc_params(op=op, size=16 << 20, hops=2000))
    assert m.status == "ok", m.error
    print(op, m.reps)
    if op == "chase":
        assert min(r["latency"] for r in m.reps) > 100
    else:
        assert min(r["bandwidth"] for r in m.reps) > 0.5


# ---- report figures, from rows shaped as a run's summary (synthetic figures) ----------------
def summary_rows(bench, metric, unit, cases):
    import pandas as pd
    rows = []
    for i, (params, value) in enumerate(cases):
        rows.append({"label": "lab", "machine": "lab", "run": "r1", "case": f"{bench}/{i:03}",
                     "job": bench, "benchmark": bench, "kernel": bench, "isa": "sm_90",
                     "cpus_used": "0", "placement_ok": True, "verified": "", "params": params,
                     "info": {}, "metric": metric, "unit": unit, "values": [value] * 3,
                     "median": value, "ci_low": value * 0.99, "ci_high": value * 1.01, "n": 3,
                     "cv": 0.01, "noisy": False})
    return pd.DataFrame(rows)


def test_the_gpu_families_draw_their_figures():
    """Each GPU family's figures, from rows as a run's summary holds them: the stream
    kernels at a full grid and the occupancy sweep apart, copies against size, zero-copy
    bandwidth and latency."""
    import pandas as pd
    from cxlbench.report import figures
    stream = summary_rows("gpu_stream", "bandwidth", "GB/s", [
        ({"kernel": k, "blocks_per_sm": "full", "threads": 256}, 4000.0)
        for k in gpu_stream.KERNELS] + [
        ({"kernel": "triad", "blocks_per_sm": b, "threads": t}, 1000.0 * b)
        for b in (1, 2) for t in (128, 256)])
    got = figures.figures_for("gpu_stream", stream, [])
    assert [f.key for f in got] == ["gpu-stream", "gpu-occupancy"]
    assert all(f.png.startswith(b"\x89PNG") for f in got)
    copies = summary_rows("gpu_copy", "bandwidth", "GB/s", [
        ({"direction": d, "host": "registered", "mem": f"bind:{n}", "size": s}, 50.0 / (n + 1))
        for d in ("h2d", "d2h") for n in (0, 2) for s in (4096, 1 << 20, 1 << 30)])
    assert [f.key for f in figures.figures_for("gpu_copy", copies, [])] == ["gpu-copy"]
    chases = summary_rows("gpu_chase", "latency", "ns", [
        ({"size": s, "stride": st}, 30.0 if s < 1 << 20 else 600.0)
        for st in (128, 2 << 20) for s in (4 << 20, 1 << 30)])
    assert [f.key for f in figures.figures_for("gpu_chase", chases, [])] == ["gpu-latency"]
    managed = summary_rows("gpu_managed", "bandwidth", "GB/s", [
        ({"mode": m}, 10.0 * (i + 1)) for i, m in enumerate(gpu.MANAGED_MODES)])
    assert [f.key for f in figures.figures_for("gpu_managed", managed, [])] == ["gpu-managed"]
    emb = summary_rows("gpu_embedding", "lookups", "M/s", [
        ({"table": tb, "dist": d}, 100.0) for tb in ("hbm", "pinned") for d in ("zipf",
                                                                                "uniform")])
    assert [f.key for f in figures.figures_for("gpu_embedding", emb, [])] == ["gpu-embedding"]
    kv = pd.concat([summary_rows("gpu_kv_swap", metric, unit, [
        ({"direction": d, "method": m, "mem": "bind:0"}, 40.0) for d in ("in", "out")
        for m in ("copies", "kernel")]) for metric, unit in (("bandwidth", "GB/s"),
                                                             ("issue_time", "us"))],
        ignore_index=True)
    assert [f.key for f in figures.figures_for("gpu_kv_swap", kv, [])] == \
        ["gpu-kv-swap", "gpu-kv-swap-issue"]
    zc = pd.concat([summary_rows("gpu_zero_copy", "bandwidth", "GB/s", [
        ({"op": op, "mem": f"bind:{n}"}, 20.0) for op in ("read", "write") for n in (0, 2)]),
        summary_rows("gpu_zero_copy", "latency", "ns", [
            ({"op": "chase", "mem": f"bind:{n}"}, 900.0 + 300 * n) for n in (0, 2)])],
        ignore_index=True)
    assert [f.key for f in figures.figures_for("gpu_zero_copy", zc, [])] == \
        ["gpu-zero-copy", "gpu-zero-copy-latency"]


def test_the_latency_figure_marks_the_devices_l2_and_the_steps_measured():
    """A line-stride sweep over an H200's levels: the L2 the device reports (50 MiB) and
    the steps the curve shows are marked; the page-stride sweep is left out of both."""
    from cxlbench.report import figures
    from cxlbench.report.figures import gpu as gpu_figures
    sizes = [1 << k for k in range(10, 31)]

    def ns(s):          # L1 to 128 KiB, L2 to 32 MiB (of the near half), HBM beyond
        return 35.0 if s <= 128 << 10 else 250.0 if s <= 32 << 20 else 600.0
    rows = summary_rows("gpu_chase", "latency", "ns", [({"size": s, "stride": 128}, ns(s))
                                                       for s in sizes] +
                        [({"size": s, "stride": 2 << 20}, 900.0) for s in sizes[-4:]])
    rows["info"] = [{"device": H200}] * len(rows)
    marks = gpu_figures._gpu_marks(rows)
    assert marks[0] == (50 << 20, "L2 50M (device)")
    assert [at for at, _ in marks[1:]] == [128 << 10, 32 << 20]
    assert all(text.endswith("(measured)") for _, text in marks[1:])
    (fig,) = figures.figures_for("gpu_chase", rows, [])
    assert "dotted lines mark the device's L2" in fig.caption


ZONEINFO = """Node 0, zone      DMA
  pages free     3840
        present  3998
Node 0, zone   Normal
  pages free     100
        present  6000000
Node 1, zone   Normal
        present  0
Node 1, zone  Movable
  pages free     10
        present  131072
Node 2, zone   Normal
        present  4096
Node 2, zone  Movable
        present  4096
"""


def test_pinning_is_refused_where_a_node_holds_only_movable_memory(tmp_path):
    """Node 1 (CXL onlined movable, as dax/kmem does by default) would have its pages
    migrated by the driver's long-term pin; nodes 0 and 2 have a normal zone."""
    (tmp_path / "zoneinfo").write_text(ZONEINFO)
    assert gpu.movable_only_nodes(str(tmp_path)) == {1}
    assert gpu.pinnable("bind:0", str(tmp_path)) is None
    assert gpu.pinnable("interleave:0,2", str(tmp_path)) is None
    why = gpu.pinnable("bind:1", str(tmp_path))
    assert why.startswith("mem=bind:1: node 1 holds only movable memory")
    assert gpu.pinnable("weighted:0=3,1=1", str(tmp_path)).startswith("mem=weighted")
    assert gpu.movable_only_nodes(str(tmp_path / "none")) == set()


def test_pageable_copies_both_ways_skip_with_why():
    p = copy_params(host="pageable", direction="bidir")
    assert "the two directions would run one after the other" in gpu_copy.skip(p, None)
    assert gpu_copy.skip(copy_params(host="pinned"), None) == gpu.unavailable()


def test_the_drivers_pinned_memory_is_recorded_as_not_placed(monkeypatch):
    monkeypatch.setattr(gpu, "copy", lambda *a: ([1000] * 5, 0))
    monkeypatch.setattr(gpu, "device", lambda i: H200)
    m = gpu_copy.run(copy_params(host="wc"))
    assert m.status == "ok" and len(m.reps) == 3
    assert m.placement == {"spec": "cudaHostAlloc (wc)", "page": None, "method": None,
                           "verified": []}


@pytest.mark.gpu
def test_latency_steps_up_from_l1_to_hbm():
    """16 KiB sits in L1, 1 GiB in HBM: the second's load takes several times longer, and
    clock64's cycles agree with the events' ns in direction."""
    small = gpu_chase.run(chase_params(size=16 << 10))
    large = gpu_chase.run(chase_params(size=1 << 30))
    med = {name: sorted(r["latency"] for r in m.reps)[1] for name, m in (("s", small),
                                                                        ("l", large))}
    print(small.reps, large.reps)
    assert med["l"] > 3 * med["s"]
    assert sorted(r["cycles"] for r in large.reps)[1] > sorted(r["cycles"] for r in
                                                               small.reps)[1]


def test_a_run_whose_gpu_cases_skip_on_movable_memory_says_once_how_to_pin_it(
        topo, monkeypatch):
    """CXL memory onlined movable (dax/kmem's default): the cases that pin skip, each with
    its reason, and one note gives the command that makes the node pinnable; pageable
    copies from the node still run."""
    from cxlbench import benchmarks
    from cxlbench.suite import Case
    monkeypatch.setattr(gpu, "unavailable", lambda: None)
    monkeypatch.setattr(gpu, "movable_only_nodes", lambda proc_root="/proc": {2})
    monkeypatch.setattr(gpu, "runtime", lambda: gpu.Runtime(13000, 13000, 1, 0, ""))
    machine = topo("two_socket_cxl")
    cases = [Case(f"j{i}/000", f"j{i}", bench, {**defaults(module, {}), **over})
             for i, (bench, module, over) in enumerate([
                 ("gpu_zero_copy", gpu_zero_copy, {"mem": "bind:2"}),
                 ("gpu_kv_swap", gpu_kv_swap, {"mem": "bind:2"}),
                 ("gpu_copy", gpu_copy, {"mem": "bind:2", "host": "pageable"}),
                 ("gpu_copy", gpu_copy, {"mem": "bind:0"})])]
    notes = benchmarks.precheck(cases, machine)
    skipped = [n for n in notes if "skipped" in n]
    assert [n.split(":")[0] for n in skipped] == ["j0/000", "j1/000"]
    (hint,) = [n for n in notes if n.startswith("GPU cases that pin")]
    assert hint == ("GPU cases that pin host memory skip on node 2, whose memory is all "
                    "movable (pageable copies from it are not affected). To make it "
                    "pinnable, as root: daxctl offline-memory dax0.0 && daxctl online-memory "
                    "--no-movable dax0.0")
    # Node 1 is movable too but no case of the run pins there: not named. With a node
    # fed by no DAX device, its memory blocks are named.
    monkeypatch.setattr(gpu, "movable_only_nodes", lambda proc_root="/proc": {1, 2})
    cases[0] = Case("j0/000", "j0", "gpu_zero_copy", {**cases[0].params, "mem": "bind:1,2"})
    (hint,) = [n for n in benchmarks.precheck(cases, machine) if n.startswith("GPU cases")]
    assert "skip on node 1, 2," in hint and hint.endswith(
        "daxctl offline-memory dax0.0 && daxctl online-memory --no-movable dax0.0; for b in "
        "/sys/devices/system/node/node1/memory*; do echo offline > $b/state && echo "
        "online_kernel > $b/state; done")
    monkeypatch.setattr(gpu, "movable_only_nodes", lambda proc_root="/proc": set())
    assert not [n for n in benchmarks.precheck(cases, machine) if "pin" in n]


# ---- the quick suite and its estimate --------------------------------------------------------
@pytest.mark.parametrize("machine,nodes", [("vm", 1), ("lab", 4)])
def test_gpu_quick_runs_every_gpu_benchmark_within_5_minutes_of_an_h200(topo, machine, nodes):
    """Every GPU benchmark once, each node's copies (registered and pageable), zero-copy,
    embedding and KV swaps; estimated (assumed H200 figures, each case's start) within 5
    minutes, on a lab machine's four nodes too."""
    from cxlbench import estimate, suite
    shape = topo(machine)
    cases = suite.expand_for(suite.load("gpu-quick"), shape)
    assert {c.bench for c in cases} == {b for b in benchmarks.available() if b.startswith("gpu_")}
    per_node = [c for c in cases if "mem" in c.params and str(c.params["mem"]) != "local"]
    assert {str(c.params["mem"]) for c in per_node} == {f"bind:{n}" for n in
                                                       shape.memory_nodes}
    assert len(shape.memory_nodes) == nodes and len(cases) == 17 + 7 * nodes
    pageable = {str(c.params["mem"]) for c in cases if c.params.get("host") == "pageable"}
    assert pageable == {f"bind:{n}" for n in shape.memory_nodes}
    found = estimate.of(cases, None)
    assert found.unestimated == 0 and 30 < found.seconds < 300
    assert found.seconds >= len(cases) * (estimate.CASE_S + estimate.GPU_CASE_S)


def test_a_stream_case_is_estimated_from_its_bytes_at_the_assumed_hbm_bandwidth():
    p = params(kernel="triad", size=1 << 30, repeat=20, warmup=2)
    launch = 24 * (1 << 27)                         # 1 pass over 3 x 1 GiB
    assert gpu_stream.estimate(p) == pytest.approx((22 * launch + 3 * (1 << 30)) /
                                                   gpu.ASSUMED["hbm"])
    small = params(kernel="read", size=64 << 10, repeat=20, warmup=2)
    assert gpu_stream.estimate(small) == pytest.approx(
        (22 * 8 * 8192 * 16384 + 3 * (64 << 10)) / gpu.ASSUMED["hbm"])


def test_the_dry_run_gives_each_jobs_estimate_and_the_total_with_its_source(tmp_path):
    r = cxlbench("run", "gpu-quick", "--dry-run", "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert any(re.fullmatch(r"  hbm: 2 cases, ~[\d.]+ s", line) for line in lines)
    (total,) = [line for line in lines if line.startswith("estimated time: ~")]
    assert "GPU cases' work from h200 (assumed from published figures)" in total
    assert not list(tmp_path.iterdir())                 # a dry run writes nothing


def readme_gpu_recipe() -> list[str]:
    """The commands of README's "A new GPU machine, first" block."""
    text = manual.page("gpu.md")
    section = text[text.index("## A new GPU machine, first"):]
    return re.search(r"```\n(.*?)```", section, re.S).group(1).strip().splitlines()


def test_the_readme_gpu_recipe_runs_each_file_with_gpu_tests_on_its_own():
    """The loop names every test file that holds a `gpu` test, each run by itself."""
    from .conftest import REPO
    (loop,) = [c for c in readme_gpu_recipe() if c.startswith("for f in")]
    named = re.search(r"for f in (.*?); do pytest -m gpu -s \"\$f\"; done", loop).group(1)
    holding = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_*.py")
                     if "mark.gpu" in p.read_text())
    assert sorted(named.split()) == holding
    assert "pytest tests/test_gpu_build.py" in readme_gpu_recipe()     # no gpu mark: all


@pytest.mark.slow
def test_the_readme_gpu_recipe_runs_and_reports_where_no_gpu_is(tmp_path):
    """`cxlbench run gpu-quick` and the report line as README writes them: here every case
    is UNSUPPORTED with the reason, the run exits 0, and the report is written."""
    recipe = readme_gpu_recipe()
    assert "cxlbench run gpu-quick" in recipe
    r = cxlbench("run", "gpu-quick", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    if gpu.unavailable():
        assert r.stdout.count("UNSUPPORTED") == len(re.findall(r"^\[\s*\d+/", r.stderr, re.M))
    (report,) = [c for c in recipe if c.startswith("cxlbench report")]
    r = cxlbench(*report.split()[1:], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "reports/first-gpu/report.html").is_file()


def test_the_fastest_link_seen_is_by_its_rate_not_its_generation_times_width():
    """gen5 x8 (256 GT/s) is faster than gen3 x16 (128 GT/s), though 5 x 8 < 3 x 16."""
    w = pcie_link.Watch("0000:00:00.0")
    w.seen = [{"gen": 3, "width": 16, "max_gen": 5, "max_width": 16},
              {"gen": 5, "width": 8, "max_gen": 5, "max_width": 16}]
    assert w.highest == {"during": "gen5 x8", "max": "gen5 x16"}
