"""Cache levels from a latency sweep: synthetic curves with known capacities (factor-2,
factor-4 and sqrt-2 sweeps, seeded noise and outliers, sharp and smeared steps, with and
without an L3) and the committed runs. Every capacity found must lie within a factor of
two of the truth; a level the sweep cannot place must be "not detected" (None)."""
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from cxlbench import analysis, analysis_text, cli, results, runner

K, M, G = 1 << 10, 1 << 20, 1 << 30
DATA = Path(__file__).parent / "data" / "runs"

# (capacity, latency ns) per level, and memory's latency
HOSTS = {
    "issue's host": ([(32 * K, 1.3), (512 * K, 4.5), (32 * M, 15)], 100),
    "this host": ([(32 * K, 1.3), (1 * M, 4.2), (32 * M, 13)], 100),
    "old Intel": ([(32 * K, 1.2), (256 * K, 3.5), (8 * M, 11)], 80),
    "no L3": ([(64 * K, 1.2), (1 * M, 4.5)], 100),
}
# How a level's misses grow past its capacity C: "lru" all at once (a cyclic walk over
# more than an LRU cache holds), "random" as 1 - C/size (random replacement), a number:
# smeared by page colouring, 10-90 % of the step over that many octaves around C.
# L1 is always sharp: it is indexed within the page.
SHAPES = ("lru", "random", 1.0, 1.5)
SWEEPS = {
    "x2": (16 * K, 1 * G, 2),               # the quick suite
    "x2 4K-4G": (4 * K, 4 * G, 2),          # the full suite
    "x4": (16 * K, 1 * G, 4),
    "sqrt2": (16 * K, 1 * G, math.sqrt(2)),
    "x2 to 16M": (16 * K, 16 * M, 2),       # ends before the L3 step shows
    "x4 to 64M": (16 * K, 64 * M, 4),
}
NOISE = ((0.0, 0.0), (0.03, 0.0), (0.08, 0.0), (0.03, 0.1))     # sigma, outlier share


def sizes_of(lo, hi, factor):
    out, s = [], float(lo)
    while s <= hi * 1.0001:
        out.append(int(round(s / 64)) * 64)
        s *= factor
    return out


def misses(size, capacity, shape):
    if shape == "lru":
        return 1.0 if size > capacity else 0.0
    if shape == "random":
        return max(0.0, 1 - capacity / size)
    return 1 / (1 + math.exp(-math.log2(size / capacity) * 4.4 / shape))


def curve(sizes, levels, memory, shape, noise=0.0, outliers=0.0, seed=0):
    """Median latency per size: each level's misses pay the next level's latency;
    multiplicative noise, and a share of points 25 % low or 35 % high."""
    rng = np.random.default_rng(seed)
    lats = [lat for _, lat in levels] + [memory]
    pts = []
    for s in sizes:
        lat = lats[0] + sum((lats[i + 1] - lats[i]) * misses(s, c, "lru" if i == 0 else shape)
                            for i, (c, _) in enumerate(levels))
        lat *= math.exp(rng.normal(0, noise)) if noise else 1.0
        if outliers and rng.random() < outliers:
            lat *= rng.choice([0.75, 1.35])
        pts.append((s, lat))
    return pts


def problems(found, truth, label):
    """What is wrong with the detected levels: a capacity off by more than a factor of
    two, or a level the curve does not have."""
    out = [f"{label}: {len(found)} levels, the curve has {len(truth)}"
           for _ in range(len(found) > len(truth))]
    for i, (lv, t) in enumerate(zip(found, truth)):
        c = lv["capacity"]
        if c is not None and not t / 2 <= c <= 2 * t:
            out.append(f"{label}: L{i + 1} {c} against {t}")
    return out


def detected(sweep, host, shape, noise=0.0, outliers=0.0, seed=0):
    levels, memory = HOSTS[host]
    pts = curve(sizes_of(*SWEEPS[sweep]), levels, memory, shape, noise, outliers, seed)
    return analysis.cache_levels(pts), [c for c, _ in levels]


@pytest.mark.parametrize("sweep", SWEEPS)
def test_every_size_found_is_right(sweep):
    bad = []
    for host, shape, (noise, share), seed in itertools.product(HOSTS, SHAPES, NOISE, range(6)):
        found, truth = detected(sweep, host, shape, noise, share, seed)
        bad += problems(found, truth, f"{host}, {shape}, noise {noise}/{share}, seed {seed}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("sweep", ["x2", "x2 4K-4G", "sqrt2"])
def test_a_fine_sweep_finds_every_level(sweep):
    for host, shape, seed in itertools.product(HOSTS, SHAPES, range(4)):
        found, truth = detected(sweep, host, shape, 0.03, 0.0, seed)
        assert [lv["capacity"] is not None for lv in found] == [True] * len(truth), \
            (host, shape, seed, found)


def test_a_factor_4_sweep_finds_sharp_levels():
    for host, seed in itertools.product(HOSTS, range(4)):
        found, truth = detected("x4", host, "lru", 0.03, 0.0, seed)
        assert len(found) == len(truth) and None not in [lv["capacity"] for lv in found]
        assert not problems(found, truth, host)


def test_a_level_the_sweep_does_not_reach_is_not_guessed():
    for shape, seed in itertools.product(SHAPES, range(4)):
        found, _ = detected("x2 to 16M", "this host", shape, 0.03, 0.0, seed)
        assert len(found) <= 2 or found[2]["capacity"] is None
        assert found[0]["capacity"] == 32 * K


def test_one_sweep_point_between_two_steps_is_not_a_size():
    """The committed 4k run has 5 sizes 4-16x apart: 256 KiB could be L2's plateau or a
    point of a step, so nothing is placed (the old detector printed an empty line)."""
    pts = [(16 * K, 1.84), (256 * K, 10.1), (4 * M, 145.4), (16 * M, 158.0), (64 * M, 149.1)]
    assert [lv["capacity"] for lv in analysis.cache_levels(pts)] == [None]


def test_the_example_reports_curve():
    """reports/vm-example's latency sweep (THP, 4 KiB-4 GiB, the dev VM: sysfs 32K, 512K,
    32M). The step after 16 KiB is L1's, the gradual one from 256 KiB to 1 MiB L2's;
    the VM's L3 holds 1-2 MiB at 18 ns and 4 MiB is already at memory's latency, so the
    curve's L3 is 2 MiB whatever sysfs says."""
    pts = [(4 * K, 2.104), (8 * K, 1.326), (16 * K, 1.312), (32 * K, 5.304), (64 * K, 4.26),
           (128 * K, 4.8), (256 * K, 6.296), (512 * K, 13.18), (1 * M, 19.43), (2 * M, 17.93),
           (4 * M, 106.5), (8 * M, 123.2), (16 * M, 111.7), (32 * M, 138.8), (64 * M, 128.7),
           (128 * M, 133), (256 * M, 152.9), (512 * M, 119.6), (1 * G, 150.1), (2 * G, 164.3),
           (4 * G, 156.5)]
    caps = [lv["capacity"] for lv in analysis.cache_levels(pts)]
    assert len(caps) == 3
    assert 16 * K <= caps[0] <= 64 * K and 256 * K <= caps[1] <= 1 * M
    assert caps[2] == 2 * M
    # every other point: a factor-4 sweep places L1 or says nothing, never a wrong size
    for sub in (pts[::2], pts[1::2], pts[2::2]):
        found = analysis.cache_levels(sub)
        assert not problems(found, [32 * K, 512 * K, 2 * M], "factor 4")


def test_a_sharp_departure_places_the_level_below_a_hidden_one():
    """The quick suite on an AVX-512 EPYC VM (sysfs 32K, 1M, 32M): L2's plateau ends at
    512 KiB with a near-2x rise, then 1-4 MiB climb unevenly to memory (the VM's share of
    L3 hides inside that step). L2 is placed at the last size that fit; L3 is not."""
    pts = [(16 * K, 1.251), (32 * K, 1.488), (64 * K, 3.899), (128 * K, 3.852),
           (256 * K, 3.885), (512 * K, 3.986), (1 * M, 7.645), (2 * M, 11.0), (4 * M, 36.01),
           (8 * M, 104.5), (16 * M, 103.5), (32 * M, 103.1), (64 * M, 103.0),
           (128 * M, 104.1), (256 * M, 101.1), (512 * M, 101.3), (1 * G, 115.6)]
    assert [lv["capacity"] for lv in analysis.cache_levels(pts)] == [32 * K, 512 * K]
    assert not problems(analysis.cache_levels(pts), [32 * K, 1 * M, 32 * M], "quick")


def test_the_committed_run():
    run = results.Run.open(DATA / "vm" / "20261130-093420")
    recs = runner.summary_records(run, run.finished())
    (sweep,) = analysis.sweep_cache_levels(recs, run.meta["topology"]["cpu"]["caches"])
    assert (sweep["job"], sweep["page"]) == ("latency", "4k")
    assert [(r["level"], r["detected"], r["sysfs"]) for r in sweep["levels"]] == [
        ("L1", None, 32 * K), ("L2", None, 512 * K), ("L3", None, 32 * M)]


def test_rows_and_printout(capsys):
    caches = [{"level": 1, "type": "Data", "size": 32 * K},
              {"level": 1, "type": "Instruction", "size": 32 * K},
              {"level": 2, "type": "Unified", "size": 512 * K},
              {"level": 3, "type": "Unified", "size": 32 * M}]
    rows = analysis.compare_with_sysfs([{"capacity": 32 * K, "latency": 1.3},
                                        {"capacity": None, "latency": 4.5}], caches)
    assert rows == [
        {"level": "L1", "detected": 32 * K, "latency_ns": 1.3, "sysfs": 32 * K, "ratio": 1.0},
        {"level": "L2", "detected": None, "latency_ns": 4.5, "sysfs": 512 * K},
        {"level": "L3", "detected": None, "latency_ns": None, "sysfs": 32 * M}]
    lines = analysis_text.analysis_lines({"cache_levels": [{"job": "latency", "mem": "bind:0",
                                                            "page": "thp", "levels": rows}],
                                          "pingpong": [], "matrices": {}})
    assert lines[0] == (
        "cache levels from latency (bind:0, thp pages): L1 32K (sysfs 32K), "
        "L2 not detected (sysfs 512K), L3 not detected (sysfs 32M)")
