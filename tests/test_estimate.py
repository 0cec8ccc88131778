"""A suite's time, estimated before it runs: each case's start and its benchmark's work;
cases of benchmarks with no estimate are counted, not guessed."""
from cxlbench import estimate
from cxlbench.suite import Case


def test_durations_read_as_people_say_them():
    assert [estimate.duration(s) for s in (0.4, 42, 60, 200, 3600, 3900)] == \
        ["0 s", "42 s", "1 min", "3 min 20 s", "1 h", "1 h 5 min"]


def test_cases_without_an_estimate_are_counted_apart():
    from cxlbench.benchmarks import gpu_stream
    gpu = {k: o.default for k, o in gpu_stream.OPTIONS.items()}
    cases = [Case("a/000", "a", "gpu_stream", gpu), Case("b/000", "b", "chase", {})]
    found = estimate.of(cases)
    assert found.unestimated == 1 and found.gpu
    assert found.seconds == estimate.case_seconds(cases[0]) > estimate.CASE_S + \
        estimate.GPU_CASE_S
    lines = found.lines()
    assert lines[1] == "  b: 1 case, ~0 s (+1 not estimated)"
    assert lines[-1].startswith("estimated time: ~") and \
        "and 1 cases with no estimate" in lines[-1]
