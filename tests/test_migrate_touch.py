"""migrate_touch: touches of distinct lines, the timer taken off, preempted touches told
apart from migration stalls, and the control run with nothing moving."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from cxlbench import native
from cxlbench.benchmarks import migrate_touch as mt
from cxlbench.errors import UserError

two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
TIMER = 40


def defaults(**over):
    p = {name: opt.default for name, opt in mt.OPTIONS.items()}
    p.update(over)
    return p


def run_of(took, gaps=None):
    """Touches back to back: touch i+1 starts gaps[i] (900) ns after touch i ended."""
    took = np.asarray(took, dtype=np.int64)
    gaps = np.full(took.size, 900) if gaps is None else gaps
    return np.concatenate([[0], np.cumsum(took + gaps)[:-1]]), took


def result(start, took, move, tail, switches=None):
    """A TouchResult as the C side gives it: move and tail are touch indices."""
    samples = np.stack([start, took], axis=1).astype(np.uint64)
    sw = np.zeros(len(start), np.uint8) if switches is None else switches
    return native.TouchResult(samples, len(start), int(start[move[0]]), int(start[move[1]]),
                              0, int(start[tail]), TIMER, sw, 0, int(sw.sum()))


@pytest.mark.parametrize("pages", [1, 3, 1000, 4096])
def test_every_run_of_touches_is_of_distinct_lines(pages):
    lines = pages * 64
    off = native.touch_walk(pages, 3 * lines)
    assert (off % 64 == 0).all() and off.max() < pages * 4096
    for first in (0, lines // 3, lines):        # wherever a run starts (after a flush)
        assert np.unique(off[first:first + lines]).size == lines
    # A line and its adjacent-line prefetch partner are visited 32 sweeps apart.
    sweep = np.empty(lines, dtype=np.int64)
    sweep[off[:lines] // 64] = np.arange(lines) // pages
    assert (np.abs(sweep[0::2] - sweep[1::2]) == 32).all()


def test_analysis_takes_the_timer_off_and_counts_preemption_apart():
    # 100 ns touches (140 measured, the timer 40); the move over touches 50-60, during
    # which two stall (5 and 3 us) and one is preempted for 2 ms; a slow touch after the
    # move must not count.
    took = np.full(100, 100 + TIMER)
    took[[52, 55, 57, 80]] = np.array([5000, 2_000_000, 3000, 9000]) + TIMER
    start, took = run_of(took)
    switches = np.zeros(100, np.uint8)
    switches[55] = 1
    t = mt.touches(result(start, took, (50, 60), 70, switches), lines=1000)
    out = mt.analyse(t)
    assert out["touch_baseline"] == 100 and out["touch_after"] == 100
    assert out["slow_touches"] == 2 and out["touch_max"] == 5.0 and out["stall"] == 8.0
    assert out["preempted"] == 1 and out["preempted_time"] == 2000.0
    assert out["spike_window"] == (start[57] + took[57] - start[52]) / 1000
    assert out["move_time"] == (start[60] - start[50]) / 1000


def test_a_switch_is_the_touch_s_unless_gaps_since_the_count_before_were_longer():
    took, gaps = np.full(300, 150), np.full(300, 900)
    took[10], gaps[9] = 5000, 3_000_000     # the switch was in the gap before, not the touch
    took[20] = 4_000_000                    # two switches in one touch
    took[40], gaps[35] = 2_000_000, 50_000  # a switch in the touch, a shorter gap
    start, took = run_of(took, gaps)
    switches = np.zeros(300, np.uint8)
    switches[[10, 20, 40]] = 1, 2, 1
    switches[127] = 1                       # counted among fast touches: in a gap
    flag = mt.preempted(start, took, switches, flush_gap=-1)
    assert np.flatnonzero(flag).tolist() == [20, 40]


def test_the_flush_before_the_tail_holds_no_switch():
    took, gaps = np.full(50, 150), np.full(50, 900)
    took[31], gaps[29] = 2_000_000, 5_000_000   # the flush, between touches 29 and 30
    start, took = run_of(took, gaps)
    switches = np.zeros(50, np.uint8)
    switches[31] = 1
    assert mt.preempted(start, took, switches, flush_gap=29)[31]
    assert not mt.preempted(start, took, switches, flush_gap=-1)[31]


def test_only_cold_touches_give_the_baseline_and_the_latency_after():
    # A buffer of 30 lines: past the 15th touch of the lead, or of the tail, a touch's
    # 128-byte pair was fetched already (a prefetch hit, here 0 ns with the timer off);
    # past the 30th, lines are revisited. Neither may lower the medians.
    took = np.full(200, 100 + TIMER)
    took[15:60] = TIMER
    took[135:] = TIMER
    start, took = run_of(took)
    t = mt.touches(result(start, took, (60, 100), 120), lines=30)
    assert t.cold.sum() == 30
    out = mt.analyse(t)
    assert out["touch_baseline"] == 100 and out["touch_after"] == 100


def test_analysis_leaves_out_what_was_not_seen():
    # No touch overlaps the move (the toucher was off the CPU): no spike metrics at all.
    start = np.array([0, 1000, 90_000, 91_000])
    took = np.full(4, 100 + TIMER)
    r = result(start, took, (1, 2), 2)
    r.move_start, r.move_end = 50_000, 60_000
    out = mt.analyse(mt.touches(r, lines=1000))
    assert set(out) == {"move_time", "touch_baseline", "touch_after", "preempted",
                        "preempted_time"}


def test_the_control_is_judged_by_the_move_s_threshold():
    took = np.full(100, 100 + TIMER)
    took[[52, 55, 57]] = np.array([1500, 900, 2_000_000]) + TIMER
    start, took = run_of(took)
    switches = np.zeros(100, np.uint8)
    switches[57] = 1
    out = mt.control(mt.touches(result(start, took, (50, 60), 70, switches), 1000), 1000)
    assert out == {"control_preempted": 1, "control_max": 1.5, "control_slow": 1}


@two_cpus
def test_touches_while_pages_move_are_all_timed():
    params = defaults(**{"from": 0, "to": 0, "size": 4 << 20, "repeat": 2, "warmup": 0,
                         "lead": 2, "tail": 1, "batch": 64})
    m = mt.run(params)
    assert m.status == "ok" and m.cpus == sorted(os.sched_getaffinity(0))[:2]
    assert m.info["touches"] == m.info["samples_kept"] > 0
    assert 0 < m.info["timer_ns"] < 10_000 and m.info["distinct_lines"] == (4 << 20) // 64
    for line in (m.info["timeline"], m.info["control"]["timeline"]):
        assert line["move_start_us"] >= 2000 and line["move_end_us"] > line["move_start_us"]
        assert len(line["max_ns"]) == len(line["preempted_ns"]) == mt.TIMELINE_BINS
    for rep in m.reps:
        assert rep["move_time"] > 0 and "control_preempted" in rep
        assert set(rep) <= set(mt.UNITS)
        if "touch_max" in rep:      # absent where the toucher was off the CPU all the move
            assert rep["touch_max"] * 1000 >= rep["touch_p99"] > 0


@two_cpus
def test_a_toucher_sharing_its_cpu_is_preempted_not_stalled():
    # A busy process on the toucher's CPU: the scheduler's slices (milliseconds) must come
    # out as preempted touches, not as spikes, in a control run where nothing moves.
    cpus = sorted(os.sched_getaffinity(0))[:2]
    hog = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, "
                            f"{{{cpus[1]}}})\nwhile True: pass"])
    try:
        time.sleep(0.3)
        a = native.Allocation(4 << 20, "4k", "local")
        a.prefault(cpus[:1])
        samples = np.ones((1 << 20, 2), dtype=np.uint64)
        switches = np.ones(1 << 20, dtype=np.uint8)
        r = native.migrate_touch(a.addr, a.map_size, 0, "move_pages", 0, False, cpus,
                                 5_000_000, 2_000_000, samples, switches, 60_000_000)
    finally:
        hog.kill()
        hog.wait()
    assert r.unmoved == 0 and r.move_end - r.move_start >= 60_000_000
    assert r.involuntary > 0
    t = mt.touches(r, a.map_size // 64)
    long = t.took > 1_000_000
    # Most of the time lost in long touches is in those flagged (a stray long touch
    # without a switch of this thread would be the hypervisor's, not the scheduler's).
    assert t.preempted.any() and t.took[long & t.preempted].sum() >= 0.9 * t.took[long].sum()


def test_touch_needs_two_cpus(topo):
    params = defaults(**{"from": 0, "to": 0, "cpus": "0"})
    with pytest.raises(UserError, match="threads=2 needs 2 CPUs"):
        mt.validate(params, topo("vm"))
