"""The GPU library as installed: built by pip where nvcc is, found again with no nvcc on
PATH, its stream kernels' machine code moving 16 bytes a load, and a driver too old for
its runtime named in one line. The build tests need nvcc; where it is missing they skip
with that reason, and the run's summary says so (tests/conftest.py)."""
import importlib.metadata
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cxlbench import gpu, gpu_build

needs_nvcc = pytest.mark.skipif(gpu.nvcc() is None, reason="nvcc not installed: the GPU "
                                "library's build is not checked here")


def cuda_tool(name: str) -> str | None:
    """cuobjdump or nvdisasm: on PATH, in the toolkit, or from NVIDIA's wheels (the test
    extras install them)."""
    found = gpu_build.tool(name)
    if found:
        return found
    try:
        dist = importlib.metadata.distribution(f"nvidia-cuda-{name}")
    except importlib.metadata.PackageNotFoundError:
        return None
    return next((str(dist.locate_file(f)) for f in dist.files or ()
                 if f.name == name and f.parent.name == "bin"), None)


@pytest.fixture(scope="module")
def sass():
    """The built library's sm_90 and sm_80 SASS, function by function: {(arch, mangled
    name): [instructions]}."""
    if gpu.nvcc() is None:
        pytest.skip("nvcc not installed: the GPU library's build is not checked here")
    dump, disasm = cuda_tool("cuobjdump"), cuda_tool("nvdisasm")
    if not dump or not disasm:
        pytest.skip("cuobjdump or nvdisasm not found (pip install nvidia-cuda-cuobjdump "
                    "nvidia-cuda-nvdisasm): the SASS is not read")
    lib = gpu.built() or gpu.build(gpu.nvcc())
    env = {**os.environ, "PATH": f"{Path(disasm).parent}:{os.environ.get('PATH', '')}"}
    out = subprocess.run([dump, "-sass", str(lib)], capture_output=True, text=True, env=env,
                         check=True).stdout
    functions, arch, name = {}, None, None
    for line in out.splitlines():
        if m := re.match(r"\s*arch = (sm_\d+)", line):
            arch = m[1]
        elif m := re.match(r"\s*Function : (\S+)", line):
            name = m[1]
            functions[(arch, name)] = []
        elif name and (m := re.search(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][\w.]*)",
                                      line)):
            functions[(arch, name)].append(m[1])
    return functions


UNROLL = 4      # native/gpu/stream.cu's
STREAM = {"Write": "write", "Copy": "copy", "Scale": "scale", "Add": "add", "Triad": "triad",
          "Read": "read", "Dot": "dot"}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_stream_kernel_loads_and_stores_16_bytes_at_a_time(sass, arch):
    """An 8-byte LDG in a stream kernel's loop caps an H200 near 3.3 TB/s: every global load
    and store of every kernel is 128-bit, but read's and dot's one partial sum a block; and
    each loop turn has its UNROLL x inputs of loads."""
    found = {}
    for (a, fn), code in sass.items():
        m = re.search(r"stream_cu\w*(k_passes|k_sum)INS_\d+(\w+?)EEEv", fn)
        if a != arch or not m:
            continue
        loads = [i for i in code if i.startswith("LDG")]
        stores = [i for i in code if i.startswith("STG")]
        kernel = STREAM[m[2]]
        found[kernel] = loads
        assert loads or kernel == "write"
        assert all(i == "LDG.E.128" for i in loads), (kernel, loads)
        wide = [i for i in stores if i == "STG.E.128"]
        if m[1] == "k_sum":     # the block's sum: one double
            assert stores == ["STG.E.64"], (kernel, stores)
        else:
            assert wide and wide == stores, (kernel, stores)
    assert set(found) == set(STREAM.values())

    # The first loop turn issues all its loads (UNROLL x the kernel's inputs) before any
    # arithmetic or store: read's turn squeezed into 32 registers once kept one load in
    # flight, LDG, DADD, LDG, DADD.
    inputs = {"read": 1, "copy": 1, "scale": 1, "add": 2, "triad": 2, "dot": 2, "write": 0}
    for (a, fn), code in sass.items():
        m = re.search(r"stream_cu\w*(?:k_passes|k_sum)INS_\d+(\w+?)EEEv", fn)
        if a != arch or not m:
            continue
        kernel = STREAM[m[1]]
        work = [i for i in code if re.match(r"(LDG|STG|DADD|DFMA|DMUL)", i)]
        first = next(k for k, i in enumerate(work) if not i.startswith("LDG"))
        assert first == UNROLL * inputs[kernel], (kernel, work[:12])
        if kernel == "write":
            assert work[:UNROLL] == ["STG.E.128"] * UNROLL


def test_a_library_is_named_by_its_sources_then_its_nvcc_and_found_by_its_sources(tmp_path):
    """Finding a built library asks no compiler: the name's first hash is the sources' and
    flags', the second nvcc's version (a reinstall with another nvcc builds anew)."""
    src = tmp_path / "src"
    shutil.copytree(gpu.source_dir(), src)
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    fake.chmod(0o755)
    name = gpu_build.library_name(src, str(fake))
    assert re.fullmatch(r"libcxbgpu-[0-9a-f]{16}-[0-9a-f]{8}\.so", name)
    assert name.split("-")[1] == gpu_build.sources_hash(gpu.source_dir())
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    newer = gpu_build.library_name(src, str(fake))
    assert newer != name and newer.split("-")[1] == name.split("-")[1]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / name).write_text("older")
    (tmp_path / "b" / newer).write_text("newer")
    os.utime(tmp_path / "b" / name, (1, 1))
    assert gpu_build.find(src, [tmp_path / "a", tmp_path / "b"]) == tmp_path / "b" / newer
    (tmp_path / "a" / name).write_text("the first folder's")
    assert gpu_build.find(src, [tmp_path / "a", tmp_path / "b"]) == tmp_path / "a" / name
    (src / "stream.cu").write_text("// changed\n")
    assert gpu_build.find(src, [tmp_path / "a", tmp_path / "b"]) is None


@needs_nvcc
@pytest.mark.slow      # nvcc's builds are its cost
def test_the_install_step_builds_beside_the_package_and_clears_older_builds(tmp_path):
    said = []
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "libcxbgpu-0000000000000000.so").write_text("an older build")
    out = gpu_build.at_install(gpu.source_dir(), package, said.append)
    assert out == package / gpu_build.library_name(gpu.source_dir(), gpu.nvcc())
    assert out.stat().st_size
    assert sorted(p.name for p in package.iterdir()) == [out.name]
    assert said == [f"cxlbench: GPU library built: {out}"]


def test_the_install_step_never_fails_the_install(tmp_path, monkeypatch):
    said = []
    monkeypatch.setenv(gpu_build.SKIP_ENV, "1")
    assert gpu_build.at_install(gpu.source_dir(), tmp_path, said.append) is None
    monkeypatch.delenv(gpu_build.SKIP_ENV)
    monkeypatch.setattr(gpu_build, "nvcc", lambda: None)
    assert gpu_build.at_install(gpu.source_dir(), tmp_path, said.append) is None
    monkeypatch.setattr(gpu_build, "nvcc", lambda: "/bin/false")
    assert gpu_build.at_install(gpu.source_dir(), tmp_path, said.append) is None
    monkeypatch.setattr(gpu_build, "nvcc", lambda: str(tmp_path / "gone" / "nvcc"))
    assert gpu_build.at_install(gpu.source_dir(), tmp_path, said.append) is None
    assert said[:3] == ["cxlbench: GPU library not built (CXLBENCH_NO_GPU_BUILD is set)",
                        "cxlbench: GPU library not built (no nvcc): GPU benchmarks will need "
                        "nvcc on first use, or a reinstall where nvcc is",
                        "cxlbench: GPU library not built: nvcc could not build the GPU "
                        "library: "]
    assert said[3].startswith("cxlbench: GPU library not built: nvcc could not build the "
                              "GPU library: [Errno 2] No such file or directory")
    assert list(tmp_path.iterdir()) == []       # no half-written file


@needs_nvcc
def test_a_built_library_loads_with_no_nvcc_anywhere(tmp_path, monkeypatch):
    """A lab host with a driver and no toolkit: the library pip built loads, and nvcc is
    never looked for."""
    lib = gpu.build(gpu.nvcc())
    monkeypatch.setenv("CXLBENCH_CACHE", str(tmp_path))         # an empty cache
    monkeypatch.setattr(gpu, "built", lambda: lib)

    def no_nvcc():
        raise AssertionError("nvcc looked for")
    monkeypatch.setattr(gpu, "nvcc", no_nvcc)
    monkeypatch.setattr(gpu_build, "nvcc", no_nvcc)
    gpu._loaded.cache_clear()
    try:
        assert gpu.kernels() == gpu.KERNELS
    finally:
        gpu._loaded.cache_clear()


@needs_nvcc
@pytest.mark.slow      # nvcc's builds are its cost
def test_an_installed_library_is_found_beside_the_package(tmp_path, monkeypatch):
    monkeypatch.setenv("CXLBENCH_CACHE", str(tmp_path))
    beside = gpu_build.find(gpu.source_dir(), [Path(gpu.__file__).resolve().parent])
    if beside:      # an editable install where nvcc is: pip built it there
        assert gpu.built() == beside
    else:
        assert gpu.built() is None
        made = gpu.build(gpu.nvcc())
        assert gpu.built() == made == gpu.library_path(gpu.nvcc())


@pytest.mark.parametrize("runtime,driver,status,words", [
    (13000, 12040, 35, "the NVIDIA driver here runs CUDA 12.4 at most; the GPU library was "
     "built with CUDA 13.0, which needs driver 580 or newer: update the driver, or reinstall "
     "cxlbench where nvcc 12.4 or older is on PATH"),
    (13000, 12080, 0, "runs CUDA 12.8 at most; the GPU library was built with CUDA 13.0"),
    (12080, 11080, 35, "needs driver 525.60.13 or newer"),
])
def test_a_driver_older_than_the_runtime_is_named_in_one_line(monkeypatch, runtime, driver,
                                                              status, words):
    monkeypatch.setattr(gpu, "_loaded", lambda: (object(), None))
    monkeypatch.setattr(gpu, "runtime",
                        lambda: gpu.Runtime(runtime, driver, 0, status, "insufficient driver"))
    why = gpu.unavailable()
    assert words in why and "\n" not in why


def test_a_newer_driver_or_a_minor_version_behind_is_not_refused(monkeypatch):
    """CUDA's minor-version compatibility: a 13.0 driver runs a 13.1 runtime."""
    monkeypatch.setattr(gpu, "_loaded", lambda: (object(), None))
    for runtime, driver in ((13000, 13020), (13010, 13000)):
        monkeypatch.setattr(gpu, "runtime", lambda: gpu.Runtime(runtime, driver, 1, 0, ""))
        assert gpu.unavailable() is None


ORDER_CHECK = r"""
#include <stdio.h>
#include <vector>
#include "internal.h"
// For each count: order() visits every element once (a bijection, so the chase is one
// cycle through all of them), and neighbours in the cycle are far apart in memory.
int main() {
    const u64 counts[] = {2, 3, 5, 8, 1000, 4097, 8192, 1ull << 20, (1ull << 20) + 7,
                          32ull << 20};
    for (u64 n : counts) {
        Order order(n);
        std::vector<unsigned char> seen(n, 0);
        u64 near = 0;
        for (u64 j = 0; j < n; j++) {
            u64 x = order(j);
            if (x >= n || seen[x]++) { printf("%llu: %llu twice or out\n", n, x); return 1; }
            u64 y = order(j + 1 == n ? 0 : j + 1);
            near += (x > y ? x - y : y - x) <= 16;
        }
        printf("%llu %llu\n", n, near);
    }
    return 0;
}
"""


@needs_nvcc
def test_the_chase_order_is_one_cycle_through_every_element_scattered(tmp_path):
    """The device builds the chase's links from Order (native/gpu/internal.h); here nvcc
    builds a host program from the same header: every count's order is a permutation,
    and cycle neighbours lie within 16 elements of each other about as often as in a
    random order (about 33 times whatever the count; in order, every time)."""
    (tmp_path / "check.cu").write_text(ORDER_CHECK)
    exe = tmp_path / "check"
    subprocess.run([gpu.nvcc(), "-O2", "-std=c++17", "-I", str(gpu.source_dir()), "-o",
                    str(exe), str(tmp_path / "check.cu")], check=True, capture_output=True)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout
    near = {int(n): int(k) for n, k in (line.split() for line in r.stdout.splitlines())}
    assert len(near) == 10
    for n, k in near.items():
        if n >= 1000:
            assert k < 200, (n, k)
