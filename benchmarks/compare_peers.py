"""Side-by-side checks of cxlbench against references, in one run on one machine:

  chase     1 GiB, THP    vs benchmarks/plain_chase.c (same cycle shape)   target: within 5 %
  bandwidth read, 1 thread, 1 GiB  vs likwid-bench -t load_avx512 -w S0:1GB:1   target: >= 0.95x

The two sides alternate for --rounds rounds so drift on a shared machine hits both; each
side's figure is the median of its rounds. Prints the figures and ratios; exits 1 when a
target is missed. Usage: python benchmarks/compare_peers.py [--rounds 3]"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GIB = 1 << 30


def cxlbench(results: str, bench: str, **sets) -> float:
    """The median of one `cxlbench run --bench` case."""
    args = [sys.executable, "-m", "cxlbench", "run", "--bench", bench, "--json",
            "--results-dir", results]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]["median"]


def plain_chase(binary: str) -> float:
    out = subprocess.run([binary, str(GIB), str(1 << 22), "5"], capture_output=True,
                         text=True, check=True).stdout
    return float(out.split()[0])


def likwid_load() -> float | None:
    if not shutil.which("likwid-bench"):
        return None
    out = subprocess.run(["likwid-bench", "-t", "load_avx512", "-w", "S0:1GB:1"],
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"MByte/s:\s+([\d.]+)", out).group(1)) / 1000   # GB/s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    rounds = ap.parse_args().rounds
    tmp = tempfile.mkdtemp(prefix="cxlbench-peers-")
    binary = f"{tmp}/plain_chase"
    subprocess.run(["gcc", "-O2", "-o", binary, str(HERE / "plain_chase.c")], check=True)
    figures: dict[str, list[float]] = {}

    def add(name, value):
        if value is not None:
            figures.setdefault(name, []).append(value)

    for r in range(rounds):
        print(f"round {r + 1}/{rounds}", file=sys.stderr)
        add("plain C chase (ns)", plain_chase(binary))
        add("cxlbench chase (ns)", cxlbench(tmp, "chase", size="1G", page="thp", mem="bind:0"))
        add("likwid load_avx512 (GB/s)", likwid_load())
        for page in ("4k", "thp"):
            add(f"cxlbench read {page} (GB/s)", cxlbench(tmp, "bandwidth", kernel="read",
                                                         size="1G", page=page, threads=1,
                                                         mem="bind:0"))
    med = {k: statistics.median(v) for k, v in figures.items()}
    for k, v in figures.items():
        print(f"{k:<28} median {med[k]:8.2f}   rounds: {', '.join(f'{x:.2f}' for x in v)}")
    ok = True
    chase = med["cxlbench chase (ns)"] / med["plain C chase (ns)"]
    print(f"chase: cxlbench / plain C = {chase:.3f} (target 0.95..1.05)")
    ok &= 0.95 <= chase <= 1.05
    if "likwid load_avx512 (GB/s)" in med:
        for page in ("4k", "thp"):
            ratio = med[f"cxlbench read {page} (GB/s)"] / med["likwid load_avx512 (GB/s)"]
            print(f"read {page}: cxlbench / likwid = {ratio:.3f} (target >= 0.95)")
            ok &= ratio >= 0.95
    else:
        print("likwid-bench not installed (apt-get install likwid): bandwidth not compared")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
