"""Fuzzed suites: the shipped suites with values swapped for wild ones (other types, huge
numbers, NaN, lists and tables for scalars, ranges with any from/to/step/factor, wildcards,
unknown keys) and their files with bytes spliced in. Every outcome is a list of cases or
one single-line UserError (SuiteError included), never another exception, and each
example stays fast (the deadline) and small (traced allocations, and an address-space
limit that turns a runaway into a MemoryError here instead of the OOM killer)."""
import copy
import math
import resource
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cxlbench import benchmarks, suite
from cxlbench.errors import UserError

SUITES = sorted((Path(__file__).resolve().parent.parent / "suites").glob("*.toml"))
BASES = {p.stem: suite.load(str(p)) for p in SUITES}
OPTION_NAMES = sorted({name for b in benchmarks.available().values() for name in b.options})
PEAK_BYTES = 200 << 20
FUZZ = settings(max_examples=300, deadline=2000, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

WORDS = ["", "*", "all", "sweep", "idle", "16K", "1G", "4G", "99999999999T", "4096", "nan",
         "inf", "-1", "0x10", "1e400", "bind:*", "bind:0", "bind:0-", "preferred:*",
         "interleave:0-10000000", "weighted:0=3,1=1", "weighted:0-5000=1", "local",
         "0-8192", "0-3,8", "0,1", "thp", "4k", "read", "triad", "chase", "bandwidth",
         "${node}", "caf\u00e9"]
SCALARS = st.one_of(
    st.integers(-(1 << 70), 1 << 70),
    st.sampled_from([0, 1, 2, 64, 4096, 1 << 31, 1 << 32, (1 << 63) - 1, 1 << 63, 1 << 64,
                     10 ** 23]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1.0000001, 1.5, 2.0, 0.5]),
    st.booleans(),
    st.sampled_from(WORDS),
    st.text(max_size=8),
)
SANE_ENDS = st.sampled_from(["4K", "16K", "64K", "1M", "1G", "1T", 0, 1, 2, 16, 64, 1000])
ENDS = st.one_of(SANE_ENDS, SANE_ENDS, SCALARS)
FACTORS = st.one_of(SCALARS, st.sampled_from([2, 1.0000001, 1.000001, float("nan"), "2"]))
RANGES = st.one_of(
    st.fixed_dictionaries({"from": ENDS, "to": ENDS, "step": ENDS}),
    st.fixed_dictionaries({"from": ENDS, "to": ENDS, "factor": FACTORS}),
    st.dictionaries(st.sampled_from(["from", "to", "step", "factor", "by"]), ENDS,
                    max_size=4))
# Mostly scalars and ranges where a suite has a value, sometimes lists and tables of them.
VALUES = st.one_of(
    SCALARS, SCALARS, RANGES, RANGES, st.lists(st.one_of(SCALARS, RANGES), max_size=4),
    st.recursive(st.one_of(SCALARS, RANGES),
                 lambda inner: st.lists(inner, max_size=3) |
                 st.dictionaries(st.text(max_size=4), inner, max_size=2), max_leaves=6))
# Values as a suite file writes them, for splicing into the text.
LITERALS = ["nan", "inf", "-inf", "1e400", "-1", "0", "true", "{}", "[]", "[[1]]",
            "99999999999999999999999", "1" + "0" * 400, '"bind:*"', '"4K"', '"all"',
            '"interleave:0-10000000"', '"weighted:0-5000=1"', '["chase", "bandwidth"]',
            '{ from = "16K", to = "1G", step = 2 }', '{ from = "4K", to = "1T", step = "4K" }',
            '{ from = 0, to = "1G", factor = 2 }', '{ from = "16K", to = "1G", factor = nan }',
            '{ from = "1M", to = "1T", factor = 1.000001 }', '{ node = 1 }', '"${node}"']
KEYS = st.one_of(st.sampled_from(OPTION_NAMES + ["bench"]), st.text(max_size=6))


@pytest.fixture(scope="module", autouse=True)
def address_space_limit():
    """At most 1 GiB more address space than now, while the examples run."""
    size_kb = next(int(line.split()[1]) for line in open("/proc/self/status")
                   if line.startswith("VmSize:"))
    old = resource.getrlimit(resource.RLIMIT_AS)
    limit = (size_kb << 10) + (1 << 30)
    if old[1] != resource.RLIM_INFINITY:
        limit = min(limit, old[1])
    resource.setrlimit(resource.RLIMIT_AS, (limit, old[1]))
    yield
    resource.setrlimit(resource.RLIMIT_AS, old)


def check_outcome(make) -> None:
    """`make()` gives cases or one one-line UserError, in little memory."""
    tracemalloc.start()
    try:
        cases = make()
    except UserError as e:
        cases = e
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < PEAK_BYTES, f"{peak >> 20} MiB traced"
    if isinstance(cases, UserError):
        assert "\n" not in str(cases), str(cases)
        event(f"refused: {str(cases).split(': ')[-1][:30]}")
        return
    event("expanded")
    assert isinstance(cases, list) and all(isinstance(c, suite.Case) for c in cases)
    assert 0 < len(cases) <= suite.DEFAULT_MAX_CASES
    for case in cases:          # every value is one the C side takes
        for value in case.params.values():
            assert not isinstance(value, float) or math.isfinite(value), case
            assert not isinstance(value, int) or -(1 << 63) <= value < 1 << 63, case


def expand(s) -> list:
    return suite.expand(s, memory_nodes=[0, 1], cpu_nodes=[0], cpu_pairs=["0,1", "0,2"])


def keys_of(table) -> st.SearchStrategy:
    """The keys a mutation most likely reaches: the options of the job's benchmark, the
    sized and counted ones (where ranges go) most often."""
    bench = table.get("bench")
    module = benchmarks.available().get(bench) if isinstance(bench, str) else None
    if module is None:
        return st.sampled_from(OPTION_NAMES)
    ranged = sorted(k for k, o in module.options.items() if o.kind in ("size", "int"))
    return st.one_of(st.sampled_from(sorted(module.options) + ["bench"]),
                     *[st.sampled_from(ranged)] * bool(ranged))


@FUZZ
@given(data=st.data(), base=st.sampled_from(sorted(BASES)))
def test_mutated_suites_expand_or_give_one_suite_error(data, base):
    original = BASES[base]
    tables = copy.deepcopy(original.data)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        job = data.draw(st.sampled_from(sorted(tables) + ["global", "new"]), label="job")
        what = data.draw(st.sampled_from(["set"] * 8 + ["replace", "delete", "unknown"]))
        if what == "replace":
            tables[job] = data.draw(VALUES, label="table")
            continue
        if not isinstance(tables.get(job), dict):
            tables[job] = {} if job == "global" else \
                {"bench": data.draw(st.sampled_from(sorted(benchmarks.available())))}
        table = tables[job]
        if what == "set":
            table[data.draw(keys_of(table), label="key")] = \
                data.draw(VALUES, label="value")
        elif what == "unknown":
            table[data.draw(KEYS, label="key")] = data.draw(VALUES, label="value")
        elif table:
            del table[data.draw(st.sampled_from(sorted(table)), label="gone")]
    check_outcome(lambda: expand(suite.Suite(base, original.source, "", tables)))


@FUZZ
@given(data=st.data(), path=st.sampled_from(SUITES))
def test_damaged_suite_files_load_or_give_one_suite_error(tmp_path_factory, data, path):
    lines = path.read_bytes().split(b"\n")
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        key, sep, _ = lines[i].partition(b"=")
        if sep and data.draw(st.booleans(), label="new value"):
            lines[i] = key + b"= " + data.draw(st.sampled_from(LITERALS), label="value").encode()
            continue
        at = data.draw(st.integers(0, len(lines[i])), label="at")
        spliced = data.draw(st.one_of(st.binary(max_size=4), st.sampled_from(
            [b"\xff", b"\xe9", b"\x00", b"=", b"[", b"]", b"{", b"}", b'"', b"\n", b"*"])),
            label="bytes")
        lines[i] = lines[i][:at] + spliced + lines[i][at + data.draw(st.integers(0, 4)):]
    variables = data.draw(st.dictionaries(st.sampled_from(["node", "x"]), st.sampled_from(WORDS),
                                          max_size=1), label="vars")
    out = tmp_path_factory.getbasetemp() / "fuzzed.toml"
    out.write_bytes(b"\n".join(lines))
    check_outcome(lambda: expand(suite.load(str(out), variables)))


@FUZZ
@given(data=st.data(), bench=st.sampled_from(sorted(benchmarks.available())))
def test_adhoc_settings_expand_or_give_one_suite_error(data, bench):
    options = st.sampled_from(sorted(benchmarks.get(bench).options))
    keys = st.one_of(options, options, options, KEYS)
    texts = st.one_of(st.sampled_from(WORDS), st.text(max_size=10), st.integers().map(str),
                      st.floats().map(str))
    sets = data.draw(st.lists(st.tuples(keys, texts), max_size=3), label="sets")
    check_outcome(lambda: expand(suite.adhoc(bench, [f"{k}={v}" for k, v in sets])))
