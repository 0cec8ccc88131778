"""Suites: inheritance from [global], sweeps, ranges, node wildcards, clear errors."""
import pytest

from cxlbench import suite
from cxlbench.errors import SuiteError


def write(tmp_path, text):
    p = tmp_path / "s.toml"
    p.write_text(text)
    return suite.load(str(p))


def test_swept_job_expands_into_cases(tmp_path):
    s = write(tmp_path, """
[global]
repeat = 3
mem = "bind:*"
[bw]
bench = "bandwidth"
size = ["16K", "1M"]
threads = [1, "all"]
[lat]
bench = "chase"
size = { from = "16K", to = "64K", factor = 2 }
repeat = 2
""")
    cases = suite.expand(s, memory_nodes=[0, 2])
    bw = [c for c in cases if c.job == "bw"]
    assert len(bw) == 2 * 2 * 2
    assert {(c.params["size"], c.params["threads"], str(c.params["mem"])) for c in bw} == {
        (s_, t, m) for s_ in (16384, 1 << 20) for t in (1, "all") for m in ("bind:0", "bind:2")}
    assert all(c.params["repeat"] == 3 for c in bw)         # inherited from [global]
    assert bw[0].params["kernel"] == "read" and bw[0].params["isa"] == "auto"  # defaults
    lat = [c for c in cases if c.job == "lat"]
    assert [c.params["size"] for c in lat] == [16384, 16384, 32768, 32768, 65536, 65536]
    assert all(c.params["repeat"] == 2 for c in lat)         # the job overrides [global]
    assert "kernel" not in lat[0].params                     # global options apply where valid
    assert [c.id for c in lat[:2]] == ["lat/000", "lat/001"]
    assert len({c.id for c in cases}) == len(cases)


def test_adhoc_goes_through_the_same_table():
    (case,) = suite.expand(suite.adhoc("chase", ["size=1G", "page=thp", "mem=bind:0"]), [0])
    assert case.params["size"] == 1 << 30 and case.params["page"] == "thp"
    assert str(case.params["mem"]) == "bind:0" and case.params["repeat"] == 5


@pytest.mark.parametrize("body,message", [
    ('[j]\nbench = "chase"\nsize = "12Q"', r"s.toml: job 'j': option 'size': not a size"),
    ('[j]\nbench = "chase"\nthreads = 2', r"job 'j': option 'threads' is not an option of chase"),
    ('[j]\nsize = "1M"', r"job 'j': names no benchmark"),
    ('[j]\nbench = "nope"', r"job 'j': unknown benchmark 'nope'"),
    ('[global]\nfoo = 1\n[j]\nbench = "chase"', r"\[global\]: option 'foo' is not an option"),
    ('[j]\nbench = "chase"\nrepeat = 0', r"option 'repeat': 0 is below the minimum 1"),
    ('[j]\nbench = "chase"\nsize = { from = "1M", to = "16K", factor = 2 }', "does not climb"),
    ('[j]\nbench = "chase"\nmem = "bind:0-"', "option 'mem': malformed placement"),
    ('[j]\nbench = "chase"\nsize = 5000', "not a multiple of 64 bytes"),
    ('[j\nbench', "not valid TOML"),
])
def test_errors_name_file_job_and_option(tmp_path, body, message):
    with pytest.raises(SuiteError, match=message):
        suite.expand(write(tmp_path, body), [0])


def test_missing_suite_is_a_clear_error():
    with pytest.raises(Exception, match="no suite 'does-not-exist'"):
        suite.load("does-not-exist")


def test_quick_suite_ships_and_expands():
    cases = suite.expand(suite.load("quick"), [0, 1])
    lat = [c for c in cases if c.bench == "chase"]
    assert len(lat) == 17 * 2                     # 16 KiB .. 1 GiB on each node
    assert {c.params["threads"] for c in cases if c.bench == "bandwidth"} == {1, "all"}
    assert {c.params["kernel"] for c in cases if c.bench == "bandwidth"} == {
        "read", "write", "copy_nt", "triad"}
