"""The peer scripts README shows (peers/compare_ml.py, peers/sweep_embedding.py) run as
README writes them, shrunk to a few MiB and one round: every workload's sides run and are
checked against their references (a wrong result exits 2), the closing table has a row
per comparison, and without torch its rows say so instead of vanishing. Their ratios are
not judged here: at these sizes they measure nothing; the closing note of issue 29 holds
the real ones."""
import os
import re
import shlex
import subprocess
import sys

import pytest

from . import manual
from .conftest import REPO

SMALL = {"compare_ml.py": ["--threads", "1", "all", "--rounds", "1", "--table-bytes", str(8 << 20),
                           "--params", str(1 << 20), "--checkpoint-bytes", str(8 << 20)],
         "sweep_embedding.py": ["--dims", "32", "--dtypes", "fp16", "--poolings", "1",
                                "--alphas", "1.2", "--prefetch", "0", "16",
                                "--table-bytes", str(8 << 20), "--lookups", "4096",
                                "--rounds", "1"]}


def readme_command(script: str) -> list[str]:
    found = re.findall(rf"^(python peers/{re.escape(script)}[^\n#]*)", manual.text(),
                       re.M)
    assert found, f"the manual shows no `python peers/{script}` command"
    return shlex.split(found[0])[1:]


def run(script: str) -> subprocess.CompletedProcess:
    args = readme_command(script) + SMALL[script]
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600)


def has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.slow
def test_compare_ml_runs_every_workload_and_checks_every_side():
    """The first line names the CPU and its ISAs; each vector ISA it runs is compared in a
    section (a process) of its own, torch pinned to the same ISA, with its own table."""
    r = run("compare_ml.py")
    assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-3000:]
    first, *sections = r.stdout.split("\n=== isa ")
    assert re.match(r"CPU: \w+ .*; runs .*; compared: ", first), first
    compared = first.split("compared: ")[1].strip().split(", ")
    assert [x.split(" ===")[0] for x in sections] == compared
    worst = 0
    for out in sections:
        isa, _, out = out.partition(" ===\n")
        version = out.splitlines()[0]
        assert f"isa {isa}" in version, version
        table = out[out.index("workload "):]
        for label in ("embedding fp32", "embedding fp16", "embedding bf16", "update sgd",
                      "update adagrad", "adam fp32", "adam bf16 + fp32 master",
                      "kvcache decode", "checkpoint 8 MiB store=nt",
                      "checkpoint 8 MiB store=auto"):
            assert re.search(rf"^{re.escape(label)}.*\s1\s", table, re.M), label
            if len(os.sched_getaffinity(0)) > 1:
                assert re.search(rf"^{re.escape(label)}.*\s{len(os.sched_getaffinity(0))}\s",
                                 table, re.M), f"{label} at all threads"
        # numpy, memcpy and triad need nothing installed: their rows hold a ratio and a
        # verdict
        for peer in ("numpy", "memcpy", "triad bound"):
            assert re.search(rf"\s{re.escape(peer)}\s+[\d.]+\s+[\d.]+\s+>= [\d.]+\s+"
                             r"(ok|MISSED)", table), peer
        summary = out.strip().splitlines()[-1]
        assert re.match(r"\d+ comparisons, \d+ missed", summary), summary
        if has_torch():
            assert version.startswith("torch 2.") and "pinned to it too" in version, version
            assert "not run" not in table
        else:
            assert "torch: not installed (pip install '.[peers]')" in out
            assert re.search(r"\s torch\s+-\s+-\s+>= 1.05\s+not run", table)
            assert "not run (torch not installed)" in summary
        worst = max(worst, int(int(re.search(r"(\d+) missed", summary)[1]) > 0))
    assert r.returncode == worst


def test_sweep_embedding_marks_the_default_distance():
    r = run("sweep_embedding.py")
    assert r.returncode == 0, r.stderr[-3000:]
    from cxlbench.workloads import embedding
    default = embedding.prefetch_rows("auto", 64)      # dim 32 fp16: one line a row
    assert re.search(rf"dim 32 fp16 .* best \w+ prefetch \d+ .*; default {default}", r.stdout)
    # each ISA's line holds every distance asked and the default, starred
    lines = [x for x in r.stdout.splitlines() if x.startswith("  avx")]
    assert lines and all(re.search(rf"\b0:[\d.]+ .*16:[\d.]+ .*{default}:[\d.]+\*", x)
                         for x in lines), r.stdout


@pytest.mark.slow
def test_compare_peers_names_the_cpu_and_holds_the_best_copy_to_memcpy():
    """The libc pairs as the closing note measures them, shrunk: the first lines name the
    CPU, its ISAs and glibc's copy methods; each vector ISA's copies and fills, the string
    instructions and the best copy each have a row against libc; only the best copy is
    judged."""
    r = subprocess.run([sys.executable, "peers/compare_peers.py", "--only", "libc", "--rounds",
                        "1", "--libc-size", "4M", "--pages", "thp", "--threads", "1"],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert re.match(r"CPU: \w+ .*; runs .*; compared: ", lines[0]), lines[0]
    assert lines[1].startswith("glibc ") and "memcpy takes" in lines[1], lines[1]
    compared = lines[0].split("compared: ")[1].split(", ")
    for isa in compared:
        for kernel, base in (("copy_nt", "copy_libc"), ("write", "write_libc")):
            assert f"{kernel} {isa} / {base} 4M thp x1 (GB/s)" in r.stdout, (kernel, isa)
    if "x86" in os.uname().machine:
        assert "copy_rep scalar / copy_libc 4M thp x1 (GB/s)" in r.stdout
    best = re.search(r"^best copy / copy_libc 4M thp x1 \(GB/s\)\s+[\d.]+\s+[\d.]+\s+"
                     r"[\d.]+\s+>= 1.00", r.stdout, re.M)
    assert best, r.stdout
    assert (r.returncode == 1) == ("MISSED" in r.stdout)
