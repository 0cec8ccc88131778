"""Side-by-side checks of cxlbench against references, in one run on one machine.

  chase, 1 GiB, THP            vs benchmarks/plain_chase.c (same cycle shape)   within 3 %
  read / write_nt / copy_nt / triad_nt, 1 and 2 threads, 1 GB in all
                               vs likwid-bench load / store_mem / copy_mem / stream_mem
                                  (_avx512), -w S0:1GB:T                          >= 1.00x

likwid-bench's working-set size is the total over its streams, so cxlbench gets the same
total split over its buffers, with 4 KiB pages as likwid's malloc has here. The two sides
alternate for --rounds rounds so drift on a shared machine hits both; each side's figure
is the median of its rounds. Prints every figure and ratio; exits 1 when a target is
missed. Usage: python benchmarks/compare_peers.py [--rounds 5] [--only chase|bandwidth]
[--threads 1 2]"""
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
LIKWID = {"read": ("load_avx512", 1), "write_nt": ("store_mem_avx512", 1),
          "copy_nt": ("copy_mem_avx512", 2), "triad_nt": ("stream_mem_avx512", 3)}


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


def likwid(test: str, threads: int) -> float:
    out = subprocess.run(["likwid-bench", "-t", test, "-w", f"S0:1GB:{threads}"],
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"MByte/s:\s+([\d.]+)", out).group(1)) / 1000   # GB/s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", choices=("chase", "bandwidth"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                    help="thread counts for the bandwidth pairs")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="cxlbench-peers-")
    pairs = {}          # name -> (reference, cxlbench, target low, target high)
    if args.only != "bandwidth":
        binary = f"{tmp}/plain_chase"
        subprocess.run(["gcc", "-O2", "-o", binary, str(HERE / "plain_chase.c")], check=True)
        pairs["chase 1 GiB thp (ns)"] = (
            lambda: plain_chase(binary),
            lambda: cxlbench(tmp, "chase", size="1G", page="thp", mem="bind:0"), 0.97, 1.03)
    if args.only != "chase":
        if not shutil.which("likwid-bench"):
            print("likwid-bench not installed (apt-get install likwid): bandwidth not compared")
        else:
            for kernel, (test, streams) in LIKWID.items():
                size = 10 ** 9 // streams // 4096 * 4096
                for threads in args.threads:
                    pairs[f"{kernel} x{threads} (GB/s)"] = (
                        lambda t=test, n=threads: likwid(t, n),
                        lambda k=kernel, n=threads, s=size: cxlbench(
                            tmp, "bandwidth", kernel=k, size=s, page="4k", threads=n,
                            mem="bind:0"), 1.00, None)
    figures = {name: ([], []) for name in pairs}
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
        for name, (ref, ours, _, _) in pairs.items():
            figures[name][0].append(ref())
            figures[name][1].append(ours())
    ok = True
    print(f"{'pair':<24} {'reference':>10} {'cxlbench':>10} {'ratio':>7}  target")
    for name, (ref, ours) in figures.items():
        lo, hi = pairs[name][2], pairs[name][3]
        a, b = statistics.median(ref), statistics.median(ours)
        ratio = b / a
        good = ratio >= lo and (hi is None or ratio <= hi)
        ok &= good
        target = f">= {lo:.2f}" if hi is None else f"{lo:.2f}..{hi:.2f}"
        print(f"{name:<24} {a:>10.2f} {b:>10.2f} {ratio:>7.3f}  {target}"
              f"{'' if good else '  MISSED'}")
        print(f"{'':<24} rounds: ref {', '.join(f'{x:.2f}' for x in ref)}; "
              f"cxlbench {', '.join(f'{x:.2f}' for x in ours)}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
