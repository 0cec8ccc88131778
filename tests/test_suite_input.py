"""Bad suite input is one clear SuiteError, refused at once and in little memory, before
anything is written: ranges and sweeps are counted before they are built, values the C
side cannot take are refused up front, and node and CPU lists stop at what Linux allows."""
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from cxlbench import suite, units
from cxlbench.errors import SuiteError, UserError
from cxlbench.memory import Placement

from .conftest import cxlbench

REPO = Path(__file__).resolve().parent.parent

# Expands a suite file in a child process that may not map more than 1 GiB, so a range
# or sweep built before it is counted fails fast here instead of exhausting the machine.
CHILD = textwrap.dedent("""
    import resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    from cxlbench import suite
    from cxlbench.errors import SuiteError
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    try:
        out = f"ok {len(suite.expand(suite.load(sys.argv[1]), [0, 1], [0]))}"
    except SuiteError as e:
        out = f"SuiteError {e}"
    except BaseException as e:
        out = f"{type(e).__name__} {e}"
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(f"{time.monotonic() - t0:.3f} {grew}", out)
""")


def expand_bounded(tmp_path, text: str) -> str:
    """The outcome of expanding `text`, asserted to take under 5 s (the old code took 7 s
    to 34 s; a busy 2-core machine may stretch milliseconds) and under 50 MB."""
    path = tmp_path / "s.toml"
    path.write_text(text)
    r = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True,
                       text=True, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr
    seconds, grew_kb, out = r.stdout.strip().split(" ", 2)
    assert float(seconds) < 5.0, out
    assert int(grew_kb) < 50 << 10, out
    return out


def write(tmp_path, text):
    p = tmp_path / "s.toml"
    p.write_text(text)
    return suite.load(str(p))


def refused(s, *args, **kwargs) -> str:
    """The one-line message expanding `s` is refused with."""
    with pytest.raises(SuiteError) as e:
        suite.expand(s, [0, 1], *args, **kwargs)
    assert "\n" not in str(e.value)
    return str(e.value)


# ---- 8: ranges and sweeps are counted before they are built ------------------------------

@pytest.mark.parametrize("size,message", [
    ('{ from = "16K", to = "1G", step = 2 }', "step of 2 bytes is below a 64-byte line "
                                              "(did you mean factor = 2?)"),
    ('{ from = "4K", to = "1T", step = "4K" }', "has 268435456 values, more than the 10000 "
                                                "cases a suite may have (did you mean "
                                                "factor = 2?): raise the cap with "
                                                "--max-cases N"),
    ('{ from = "16K", to = "1G", factor = 1.0000001 }', "the range stalls at 16K"),
    ('{ from = 0, to = "1G", factor = 2 }', "the range stalls at 0"),
    ('{ from = "1M", to = "1T", factor = 1.000001 }', "by a factor of 1.000001 has more "
                                                      "than 10000 values"),
])
def test_a_range_typo_is_refused_at_once(tmp_path, size, message):
    out = expand_bounded(tmp_path, f'[j]\nbench = "chase"\nsize = {size}\n')
    assert out.startswith("SuiteError ") and message in out


def test_the_product_of_sweeps_is_counted_before_it_is_built(tmp_path):
    """Five sweeps of 100 values each are 10^10 cases: refused, none of them made."""
    sweep = "[" + ", ".join(str(n) for n in range(1, 101)) + "]"
    out = expand_bounded(tmp_path, f'[j]\nbench = "chase"\nsize = {{ from = "64K", to = '
                                   f'"6400K", step = "64K" }}\nrepeat = {sweep}\n'
                                   f'seed = {sweep}\nloads = {sweep}\nbatch = {sweep}\n')
    assert out.startswith("SuiteError ") and "expands to 20000 cases or more" in out
    assert "--max-cases N" in out


def test_max_cases_caps_the_whole_suite_and_can_be_raised(tmp_path):
    text = ('[a]\nbench = "chase"\nseed = { from = 1, to = 6000, step = 1 }\n'
            '[b]\nbench = "chase"\nloads = { from = 1000, to = 6999, step = 1 }\n')
    s = write(tmp_path, text)
    message = refused(s, [0])
    assert "job 'b': expands to 6000 cases or more after 6000 in the jobs before it, " \
           "more than the 10000 a suite may have" in message
    assert len(suite.expand(s, [0], max_cases=12000)) == 12000
    message = refused(write(tmp_path, '[j]\nbench = "chase"\nseed = { from = 1, to = 101, '
                                      'step = 1 }'), [0], max_cases=100)
    assert message.endswith("the range from 1 to 101 in steps of 1 has 101 values, more than "
                            "the 100 cases a suite may have: raise the cap with --max-cases N")
    topology = SimpleNamespace(memory_nodes=[0], nodes=[], cpu_pairs=lambda: [])
    with pytest.raises(SuiteError, match="more than the 11000 a suite may have"):
        suite.expand_for(s, topology, max_cases=11000)
    assert suite.DEFAULT_MAX_CASES == 10000


def test_ranges_still_expand_as_before(tmp_path):
    s = write(tmp_path, '[j]\nbench = "chase"\nsize = { from = "16K", to = "64K", step = "16K" }'
                        '\nseed = { from = 3, to = 10, factor = 1.5 }')
    cases = suite.expand(s, [0])
    assert sorted({c.params["size"] for c in cases}) == [16 << 10, 32 << 10, 48 << 10, 64 << 10]
    assert sorted({c.params["seed"] for c in cases}) == [3, 4, 6, 9]


# ---- 9: values the C side cannot take are refused while they are text --------------------

@pytest.mark.parametrize("setting,message", [
    ("timeout=nan", "option 'timeout': 'nan' is not a finite number"),
    ("timeout=inf", "option 'timeout': 'inf' is not a finite number"),
    ("timeout=1e400", "option 'timeout': '1e400' is not a finite number"),
    ("timeout=1e12", "option 'timeout': 1000000000000.0 is above the maximum 604800"),
    ("tolerance=nan", "option 'tolerance': 'nan' is not a finite number"),
    ("seed=12345678901234567890123", "option 'seed': 12345678901234567890123 is above the "
                                     "maximum 9223372036854775807"),
    ("loads=12345678901234567890123", "option 'loads': 12345678901234567890123 is above"),
    ("seed=18446744073709551616", "option 'seed': 18446744073709551616 is above"),
    ("size=99999999999T", "option 'size': size '99999999999T' is above 9223372036854775807 "
                          "bytes"),
    ("cpus=0-100000000", "option 'cpus': '0-100000000' goes beyond 8191"),
])
def test_values_beyond_the_c_side_are_refused_up_front(setting, message):
    assert message in refused(suite.adhoc("chase", [setting]))


def test_non_finite_floats_in_a_suite_file(tmp_path):
    assert "'timeout': nan is not a finite number" in refused(
        write(tmp_path, '[j]\nbench = "chase"\ntimeout = nan'))
    message = refused(write(tmp_path, '[j]\nbench = "chase"\ntolerance = 1' + "0" * 400))
    assert "option 'tolerance': 1000" in message and message.endswith("is not a number")


def test_the_largest_values_the_c_side_takes_still_pass():
    (case,) = suite.expand(suite.adhoc("chase", [f"seed={(1 << 63) - 1}", "timeout=604800",
                                                 "cpus=8191", "mem=bind:1023"]), [0])
    assert case.params["seed"] == (1 << 63) - 1 and case.params["cpus"] == "8191"


# ---- 10: suite files that raised tracebacks ----------------------------------------------

@pytest.mark.parametrize("body,message", [
    ('[j]\nbench = ["chase", "bandwidth"]', "job 'j': bench = ['chase', 'bandwidth']: name one "
                                            "benchmark"),
    ('[j]\nbench = 3', "job 'j': bench = 3: name one benchmark"),
    # a table under mem names buffers (mem.src = ... in TOML): node is none of chase's
    ('[j]\nbench = "chase"\nmem = { node = 1 }', "option 'mem.node': chase has no buffer "
                                                 "'node' (its buffers: chain"),
    ('[j]\nbench = "chase"\nmem = { chain = { node = 1 } }', "option 'mem.chain': a table "
                                                              "where a value was expected"),
    ('[j]\nbench = "chase"\npage = { from = 1, to = 2, step = 1 }', "option 'page': a table "
                                                                    "where a value"),
    ('[j]\nbench = "chase"\ntimeout = [1.0, [2.0]]', "option 'timeout': a list where one "
                                                     "value was expected"),
    ('[j]\nbench = "chase"\nsize = { from = "16K", to = "1G", factor = "2" }',
     "the range's factor '2' is not a finite number"),
    ('[j]\nbench = "chase"\nsize = { from = "16K", to = "1G", factor = nan }',
     "the range's factor nan is not a finite number"),
    ('[j]\nbench = "chase"\nsize = { from = "16K", to = "1G", factor = inf }',
     "the range's factor inf is not a finite number"),
    ('[j]\nbench = "chase"\nseed = { from = 1, to = 1' + "0" * 30 + ', factor = 2 }',
     "from, to and step must be within 2^63 - 1"),
    ('[j]\nbench = "chase"\nseed = { from = 1.5, to = 9, step = 1 }',
     "bad range: 1.5 is not an integer"),
    ('vars = 3\n[j]\nbench = "chase"', "vars must be a table"),
    # TOML's dates and times, where a number was expected
    ('[j]\nbench = "chase"\ntimeout = 1979-05-27', "option 'timeout': 1979-05-27 is not a "
                                                   "number"),
    ('[j]\nbench = "chase"\ntolerance = 1979-05-27T07:32:00Z',
     "option 'tolerance': 1979-05-27 07:32:00+00:00 is not a number"),
    ('[j]\nbench = "chase"\ntimeout = [1.0, 07:32:00]', "option 'timeout': 07:32:00 is not a "
                                                         "number"),
    ('[j]\nbench = "embedding"\ntrace = "a\\u0000b"', "option 'trace': 'a\\x00b' holds a "
                                                     "control character"),
    ('[j]\nbench = "checkpoint"\npath = "/tmp/a\\nb"', "option 'path': '/tmp/a\\nb' holds a "
                                                      "control character (a line break, a tab, "
                                                      "NUL...): give a path without one"),
    pytest.param('x = ' + "9" * 5000, "not valid TOML", id="int-of-5000-digits"),
])
def test_malformed_suites_are_one_suite_error(tmp_path, body, message):
    with pytest.raises(SuiteError) as e:
        suite.expand(write(tmp_path, body), [0])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_suite_file_that_is_not_utf8(tmp_path):
    p = tmp_path / "s.toml"
    p.write_bytes(b'[j]\nbench = "chase"\n# caf\xe9\n')
    with pytest.raises(SuiteError, match=r"s.toml: not UTF-8 text \(line 3: invalid "
                                         r"continuation byte\)"):
        suite.load(str(p))


def test_a_suite_path_that_is_a_directory(tmp_path):
    with pytest.raises(SuiteError, match="is a directory, not a suite file"):
        suite.load(str(tmp_path))


def test_an_unreadable_suite_file(tmp_path, monkeypatch):
    p = tmp_path / "s.toml"
    p.write_text('[j]\nbench = "chase"\n')

    def denied(self):
        raise PermissionError(13, "Permission denied", str(self))
    monkeypatch.setattr(Path, "read_bytes", denied)   # as root, chmod 000 still reads
    with pytest.raises(SuiteError, match="s.toml: cannot be read: Permission denied"):
        suite.load(str(p))


def test_a_suite_name_too_long_for_the_file_system():
    with pytest.raises(UserError, match="no suite"):
        suite.load("x" * 5000)


# ---- 11: node and CPU lists stop at what Linux can have ----------------------------------

@pytest.mark.parametrize("spec", ["interleave:0-10000000", "bind:0-10000000",
                                  "preferred:10000000", "weighted:0=1,1-10000000=2"])
def test_huge_node_lists_are_refused_before_they_are_built(tmp_path, spec):
    out = expand_bounded(tmp_path, f'[j]\nbench = "chase"\nmem = "{spec}"\n')
    assert out.startswith("SuiteError ") and "goes beyond 1023: Linux numbers at most " \
                                             "1024 nodes" in out


def test_parse_list_limits():
    assert units.parse_list("0-8191") == list(range(8192))
    with pytest.raises(ValueError, match="'8192' goes beyond 8191: Linux numbers at most "
                                         "8192 CPUs"):
        units.parse_list("0,8192")
    assert units.parse_list("1023", limit=units.MAX_NODES) == [1023]
    with pytest.raises(ValueError, match="'1000-1024' goes beyond 1023"):
        units.parse_list("1000-1024", limit=units.MAX_NODES)
    with pytest.raises(ValueError, match="goes beyond 3: Linux numbers at most 4 of them"):
        units.parse_list(7, limit=4)
    # A list that repeats a range is refused once it passes the limit, not at its end.
    with pytest.raises(ValueError, match="names a number twice"):
        units.parse_list(",".join(["0-8191"] * 2000))
    assert Placement.parse("weighted:0-1023=1").nodes == tuple(range(1024))


# ---- the CLI: one line, exit 2, nothing written ------------------------------------------

BAD_SUITES = {
    "typo.toml": b'[j]\nbench = "chase"\nsize = { from = "4K", to = "1T", step = "4K" }\n',
    "two.toml": b'[j]\nbench = ["chase", "bandwidth"]\n',
    "latin1.toml": b'[j]\nbench = "chase"\n# caf\xe9\n',
}


@pytest.mark.parametrize("args", [
    ["typo.toml"], ["two.toml"], ["latin1.toml"], ["."],
    ["--bench", "chase", "--set", "mem=interleave:0-10000000"],
    ["--bench", "chase", "--set", "timeout=nan"],
    ["--bench", "chase", "--set", "seed=12345678901234567890123"],
])
def test_cli_refuses_bad_suites_in_one_line(tmp_path, args):
    for name, text in BAD_SUITES.items():
        (tmp_path / name).write_bytes(text)
    args = [str(tmp_path / a) if a in BAD_SUITES or a == "." else a for a in args]
    results_dir = tmp_path / "results"
    r = cxlbench("run", *args, "--dry-run", "--results-dir", str(results_dir), timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert not results_dir.exists()


def test_cli_max_cases_refuses_and_raises_the_cap(tmp_path):
    path = tmp_path / "wide.toml"
    path.write_text('[j]\nbench = "chase"\nseed = { from = 1, to = 12, step = 1 }\n')
    r = cxlbench("run", str(path), "--dry-run", "--max-cases", "10", timeout=60)
    assert r.returncode == 2
    (line,) = r.stderr.splitlines()
    assert "more than the 10 cases a suite may have" in line and "--max-cases N" in line
    r = cxlbench("run", str(path), "--dry-run", "--max-cases", "12", timeout=60)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 12


@pytest.mark.parametrize("setting", ["delay=4294967296", "rest=3600001", "lead=3600001",
                                     "tail=3600001"])
def test_milliseconds_and_delays_within_what_the_c_side_takes(setting):
    bench = {"delay": "loaded_latency", "rest": "migrate"}.get(setting.split("=")[0],
                                                               "migrate_touch")
    r = cxlbench("run", "--bench", bench, "--set", setting, "--dry-run", timeout=60)
    assert r.returncode == 2 and "is above the maximum" in r.stderr


@pytest.mark.parametrize("args", [
    ["--bench", "chase", "--set", "timeout=nan"],
    ["--bench", "loaded_latency", "--set", "loads=12345678901234567890123"],
    ["--bench", "chase", "--set", "mem=interleave:0-10000000"],
])
def test_a_refused_run_leaves_no_folder(tmp_path, args):
    """Without --dry-run: refused before the results folder is made."""
    results_dir = tmp_path / "results"
    r = cxlbench("run", *args, "--results-dir", str(results_dir), timeout=60)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert not results_dir.exists()


@pytest.mark.parametrize("flag", ["--set", "--var", "--param"])
def test_a_key_given_twice_is_refused_not_overwritten(flag):
    with pytest.raises(SuiteError, match=f"^{flag} size is given twice \\('2M' and '4M'\\): "
                                         "give it once"):
        suite.parse_pairs(["size=2M", "threads=1", " size = 4M"], flag)


def test_cli_refuses_a_repeated_set_in_one_line():
    r = cxlbench("run", "--bench", "chase", "--set", "size=2M", "--set", "size=4M",
                 "--dry-run", timeout=60)
    assert r.returncode == 2
    (line,) = r.stderr.splitlines()
    assert line == "error: --set size is given twice ('2M' and '4M'): give it once (a suite " \
                   "sweeps values)"


def test_a_suite_that_starts_with_a_bom_reads_as_without(tmp_path):
    body = '[j]\nbench = "chase"\nsize = ["64K", "128K"]\n'
    (tmp_path / "bom.toml").write_bytes(b"\xef\xbb\xbf" + body.encode())
    loaded = suite.load(str(tmp_path / "bom.toml"))
    assert loaded.text == body and loaded.data == {"j": {"bench": "chase",
                                                        "size": ["64K", "128K"]}}
    r = cxlbench("run", str(tmp_path / "bom.toml"), "--dry-run", timeout=60)
    assert r.returncode == 0, r.stderr
    assert [line.split()[0] for line in r.stdout.splitlines()] == ["j/000", "j/001"]


@pytest.mark.parametrize("budget", ["1" + "0" * 400, "1e400", "1979-05-27"],
                         ids=["400-digits", "inf", "a-date"])
def test_a_budget_past_a_number_is_one_suite_error(tmp_path, budget):
    """A budget no float holds (an integer of 400 digits, an infinity) or of another type
    is refused naming it, not raised as an OverflowError."""
    s = write(tmp_path, f'budget = {budget}\n[j]\nbench = "chase"\n')
    with pytest.raises(SuiteError, match=r"s.toml: budget = .*: give the seconds the whole "
                                         r"run may take, a number above 0$"):
        suite.budget(s)
