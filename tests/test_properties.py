"""No input gives a traceback, writes outside cxlbench's own folders or runs without
bound (DESIGN.md, "Hostile input is a property, not a list"). Each property feeds
generated input to one user-facing parser through the real CLI, in process (click's
CliRunner), and checks the same three things of every example:

- it exits 0, 1 or 2, a refusal with an "error: ..." line last on stderr (or click's own
  usage error), nothing but SystemExit escaping and no "Traceback" printed;
- no file of the user's is made, changed or removed: the example's cwd, HOME,
  CXLBENCH_CACHE and results are a fresh folder, and a sentinel "user" folder beside it
  holds the files the generated input names (a large file, a link to it, a text file, a
  folder; a path not there yet), which must read back as they were;
- it returns within the deadline (and a hung one is stopped by an alarm).

Nothing is measured: every run is a --dry-run, the estimate's probes are stood in for, and
emulate stops before a guest is built. Generated values are mostly ones the parser takes,
a few wild, so that an example gets past the first check to the code behind it. Example
counts are sized by cost (60 to 300 a property: about 20 s for the file on a 2-CPU VM);
derandomized, so CI sees the same examples each time."""
import contextlib
import copy
import json
import os
import shutil
import signal
import stat
import string
import time
import traceback
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cxlbench import benchmarks, estimate, results, runner
from cxlbench import suite as suite_mod
from cxlbench.cli import main
from cxlbench.emulate import topologies
from cxlbench.errors import UserError
from cxlbench.topology import Topology

from .schema_check import check_json_output
from .test_suite_fuzz import LITERALS, WORDS

REPO = Path(__file__).resolve().parent.parent
COMMITTED_RUN = REPO / "tests" / "data" / "runs" / "vm" / "20261130-093420"

PROPERTY = settings(max_examples=30, deadline=timedelta(seconds=5), derandomize=True,
                    database=None, suppress_health_check=[
                        HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                        HealthCheck.data_too_large, HealthCheck.filter_too_much])
HANG_S = 30         # past every deadline: an example still running now is stopped

# ---- the harness: one fresh folder an example, a user's folder beside it ----------------

USER = "@user@"     # stands for the example's sentinel folder in generated input
USER_PATHS = [f"{USER}/{name}" for name in ("big.bin", "link.bin", "notes.txt", "dir",
                                            "dir/inner.txt", "new.bin", "missing/new.bin")]


class Place:
    """An example's folders: root/work (cwd, HOME, cache, results) and root/user (the
    files a user has, which nothing may touch)."""

    def __init__(self, root: Path):
        self.root, self.work, self.user = root, root / "work", root / "user"
        self.work.mkdir(parents=True)
        self.user.mkdir()
        big = self.user / "big.bin"         # large enough for a region, sparse
        with open(big, "wb") as f:
            f.write(b"the user's data\n" * 256)
            f.truncate(64 << 20)
        (self.user / "link.bin").symlink_to(big)
        (self.user / "notes.txt").write_text("a user's notes\n")
        (self.user / "dir").mkdir()
        (self.user / "dir" / "inner.txt").write_text("inner\n")

    def fill(self, text: str) -> str:
        return text.replace(USER, str(self.user))


@pytest.fixture
def place(tmp_path):
    """A new Place for each call (hypothesis runs one test function many times)."""
    count = iter(range(1 << 30))
    return lambda: Place(tmp_path / f"example-{next(count)}")


def snapshot(folder: Path) -> dict:
    """Every entry under folder, not following links: its kind, mode, size, times and
    inode, a link's target, and a small file's bytes."""
    out = {}
    for where, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(where, name)
            st_ = os.lstat(path)
            entry = (stat.S_IFMT(st_.st_mode), st_.st_mode, st_.st_size, st_.st_mtime_ns,
                     st_.st_ctime_ns, st_.st_ino)
            if stat.S_ISLNK(st_.st_mode):
                entry += (os.readlink(path),)
            elif stat.S_ISREG(st_.st_mode) and st_.st_size < 1 << 20:
                entry += (Path(path).read_bytes(),)
            out[os.path.relpath(path, folder)] = entry
    return out


class Hung(Exception):
    """An example still running past its bound (not an OSError, as TimeoutError is, which
    the code under test may catch)."""


@contextlib.contextmanager
def bounded(seconds: float):
    """Hung raised in whatever runs past `seconds`, and again each second after, should
    something swallow it: a hang is a finding too, not a test that never ends."""
    def alarm(signum, frame):
        raise Hung(f"still running after {seconds} s")
    before = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def cli(where: Place, args: list[str]):
    """`cxlbench ARGS` in `where`'s work folder (USER in an argument: its user folder),
    checked for the properties every example holds to; the result."""
    args = [where.fill(a) for a in args]
    before = snapshot(where.user)
    cwd = os.getcwd()
    os.chdir(where.work)
    try:
        with bounded(HANG_S):
            r = CliRunner().invoke(main, args, catch_exceptions=True, env={
                "HOME": str(where.work), "CXLBENCH_CACHE": str(where.work / "cache")})
    finally:
        os.chdir(cwd)
    shown = f"cxlbench {' '.join(map(repr, args))}\n{r.output[-2000:]}"
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        shown += "".join(traceback.format_exception(*r.exc_info))
        raise AssertionError(f"{type(r.exception).__name__} escaped: {shown}")
    assert r.exit_code in (0, 1, 2), shown
    assert "Traceback" not in r.output, shown
    if r.exit_code == 0:
        check_json_output(args, r.stdout)       # a --json output holds to its schema
    if r.exit_code:     # (lines end at a newline: a value's own \r or \x85 is within one)
        lines = r.stderr.strip().split("\n")
        usage = r.exit_code == 2 and any(line.startswith("Error: ") for line in lines) \
            and lines[0].startswith("Usage: ")       # click's own: a bad flag's value
        assert usage or (lines and lines[-1].startswith("error: ")), shown
    event(f"exit {r.exit_code}" + (f": {r.stderr.strip().split(chr(10))[-1][7:40]}"
                                   if r.exit_code else ""))    # (--hypothesis-show-statistics)
    assert snapshot(where.user) == before, f"the user's folder changed: {shown}"
    assert sorted(p.name for p in where.root.iterdir()) == ["user", "work"], shown
    return r


FIGURES = estimate.Figures("a property test's", {0: estimate.NodeFigures(
    sweep=[(32 << 10, 1.0), (1 << 20, 10.0), (64 << 20, 100.0)], read_1=20e9, read_all=80e9,
    touch=2e9, scan=10e9)}, start_s=0.5, fill_bps=1e9)


@pytest.fixture(autouse=True)
def no_probes(monkeypatch):
    """The estimate's figures as a probe would give them, probed by nobody."""
    monkeypatch.setattr(estimate, "figures", lambda nodes, *a, **k: FIGURES)


# ---- values, as TOML and JSON write them --------------------------------------------------

def toml_string(text: str) -> str:
    return json.dumps(text)         # JSON's escapes are TOML's basic string's


def toml_key(key: str) -> str:
    bare = key and all(c in string.ascii_letters + string.digits + "_-" for c in key)
    return key if bare else toml_string(key)


TEXTS = st.one_of(st.sampled_from(WORDS + USER_PATHS + ["${node}", "${nope}", "${node}K"]),
                  st.text(max_size=8))
SCALAR_LITERALS = st.one_of(
    st.integers(-(1 << 70), 1 << 70).map(str),
    st.sampled_from(["0", "1", "-1", "2", "64", "4096", str((1 << 63) - 1), str(1 << 63),
                     str(1 << 64), "1" + "0" * 30, "0x10", "1_000"]),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "-0.0", "1e-300", "0.5", "2.5", "1e30"]),
    st.floats().map(repr).filter(lambda r: "e" not in r or "." in r or "inf" in r),
    st.sampled_from(["true", "false", "1979-05-27T07:32:00Z", "1979-05-27", "07:32:00",
                     "2999-01-01T00:00:00"]),
    TEXTS.map(toml_string))
RANGE_KEYS = st.sampled_from(["from", "to", "factor", "step", "by"])
VALUE_LITERALS = st.one_of(
    st.sampled_from(LITERALS),
    st.recursive(SCALAR_LITERALS, lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.dictionaries(st.one_of(RANGE_KEYS, st.text(max_size=4)), inner, max_size=3).map(
            lambda d: "{ " + ", ".join(f"{toml_key(k)} = {v}" for k, v in d.items()) + " }")),
        max_leaves=5))
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70),
                         st.floats(), st.sampled_from([0, 1, -1, 2, 1 << 64]), TEXTS)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6)
JUNK_BYTES = st.one_of(st.binary(max_size=4), st.sampled_from(
    [b"\xff", b"\xe9", b"\x00", b"\xef\xbb\xbf", b"\r", b"\n[", b"]", b"=", b'"', b"{"]))


def mostly(good, wild) -> st.SearchStrategy:
    """`good` four times in five, so that an example with one wild value in a few gets
    past the first check to the code behind it. (Not one_of(good, good, good, wild):
    hypothesis tries each distinct choice once, so a good value without variety of its
    own would be drawn a few times only, and the wild one ever after.)"""
    return st.integers(0, 99).flatmap(lambda i: good if i < 80 else wild)


def spliced(draw, raw: bytes, label: str, odds: int = 4) -> bytes:
    """raw, now and then (2 in odds + 2) with a few bytes spliced in or its end cut off
    (an example shows what was done, not the bytes)."""
    how = draw(st.sampled_from(["as is"] * odds + ["splice", "cut"]), label=f"{label}: bytes")
    if how == "as is" or not raw:
        return raw
    at = draw(st.integers(0, len(raw)), label=f"{label}: at byte")
    return raw[:at] if how == "cut" else raw[:at] + draw(JUNK_BYTES, label="spliced") + raw[at:]


BENCHES = sorted(benchmarks.available())
OPTION_NAMES = sorted({n for b in benchmarks.available().values() for n in b.options})
OPTION_OF = {n: o for b in benchmarks.available().values() for n, o in b.options.items()}


def good_literals(opt) -> list[str]:
    """Values the option takes, as a suite writes them."""
    values = [opt.default] + list(opt.allowed() or ()) + list(opt.expand or ()) + \
        list(opt.words) + (["16K", "1M"] if opt.kind == "size" else [])
    out = []
    for v in values:
        if isinstance(v, bool):
            out.append("true" if v else "false")
        elif isinstance(v, (int, float)):
            out.append(repr(v))
        elif v is not None and str(v) != "":
            out.append(toml_string(str(v)))
    return out or ['""']


def option_value(opt) -> st.SearchStrategy:
    """Mostly values the option takes (so runs get past the first check), else anything."""
    return mostly(st.sampled_from(good_literals(opt)), VALUE_LITERALS)


def render_key(key: str, draw) -> str:
    """A key as a suite writes it: mem.src dotted (a table under mem) or quoted whole."""
    if "." in key and draw(st.booleans()):
        return ".".join(toml_key(part) for part in key.split("."))
    return toml_key(key)


# ---- suites, --set, --var, --param ---------------------------------------------------------

# One value of each type TOML has, and the values numbers go wrong with.
TYPE_SAMPLES = st.sampled_from(
    ["1979-05-27", "07:32:00", "1979-05-27T07:32:00Z", "1979-05-27T07:32:00", "true", "nan",
     "inf", "-inf", "-1", "0", "0.5", "1e400", str(1 << 64), '""', '"x"', "[]", "{}",
     "[1, 2]", "[[]]", "{ from = 1, to = 2 }", '"\\u0000"', '"~nosuch/x"', '"16K"',
     '"bind:0"'])
WILD_LITERALS = st.one_of(TYPE_SAMPLES, VALUE_LITERALS)


@st.composite
def suite_files(draw) -> bytes:
    """A suite file from the format's grammar: top-level keys, [vars], [global] and one or
    two jobs of benchmarks with options they take, then up to three wild changes (an
    option or a stranger given a value of any type: dates, NaN, huge numbers, tables,
    arrays); now and then bytes spliced in."""
    lines = []
    for key in draw(st.lists(mostly(st.sampled_from(["description", "budget"]),
                                    st.just("junk")), unique=True, max_size=2)):
        good = {"budget": ["100", "0.5", "1e-300"], "description": ['"a suite"']}.get(key, ["1"])
        lines.append(f"{key} = {draw(mostly(st.sampled_from(good), WILD_LITERALS))}")
    node = draw(st.booleans())
    if node:
        lines += ["[vars]", f"node = {draw(mostly(st.just('0'), WILD_LITERALS))}"]
    if draw(st.integers(0, 99)) >= 75:
        lines.append("[global]")
        for key in draw(st.lists(st.sampled_from(OPTION_NAMES), max_size=2, unique=True)):
            lines.append(f"{render_key(key, draw)} = {draw(option_value(OPTION_OF[key]))}")
    jobs = {}           # name -> (benchmark module or None, {key: literal})
    for name in draw(st.lists(mostly(st.sampled_from(["lat", "bw"]), st.one_of(
            st.sampled_from(["a b", "x.y", "global", "vars", ""]), st.text(max_size=5))),
            min_size=1, max_size=2, unique=True)):
        bench = draw(mostly(st.sampled_from(BENCHES), st.one_of(st.none(), WILD_LITERALS)))
        module = benchmarks.available().get(bench) if bench in BENCHES else None
        body = {} if bench is None else {"bench": toml_string(bench) if module else bench}
        for key in draw(st.lists(st.sampled_from(sorted(module.options) if module
                                                 else OPTION_NAMES), max_size=2)):
            body[key] = draw(st.sampled_from(good_literals(OPTION_OF[key])))
        if node and module and "mem" in module.options:
            body["mem"] = '"bind:${node}"'
        jobs[name] = (module, body)
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(sorted(jobs)))
        module, body = jobs[name]
        key = draw(mostly(st.sampled_from(sorted(module.options) if module else OPTION_NAMES),
                          st.one_of(st.sampled_from(OPTION_NAMES), st.text(max_size=5))))
        body[key] = draw(WILD_LITERALS)
    for name, (module, body) in jobs.items():
        lines.append(f"[{render_key(name, draw)}]")
        lines += [f"{render_key(k, draw)} = {v}" for k, v in body.items()]
        if draw(st.integers(0, 99)) >= 90:
            lines.append(f"[{render_key(name, draw)}.sub]")      # a table in a job
    return spliced(draw, ("\n".join(lines) + "\n").encode(), "suite", odds=8)


VAR_VALUES = st.one_of(st.sampled_from(["0", "1", "*", "bind:0", "16K"]), TEXTS)


@settings(PROPERTY, max_examples=200)
@given(text=suite_files(), variables=st.lists(st.tuples(
    mostly(st.just("node"), st.sampled_from(["x", "", " node "])), VAR_VALUES), max_size=1),
       max_cases=mostly(st.none(), st.sampled_from(["1", "3", "0", "-1", "x"])))
def test_any_suite_file_is_listed_or_refused(place, text, variables, max_cases):
    """A suite file (and --var, --max-cases) is listed by a dry run or refused."""
    where = place()
    (where.work / "suite.toml").write_bytes(where.fill(text.decode("utf-8", "surrogateescape"))
                                           .encode("utf-8", "surrogateescape"))
    args = ["run", "suite.toml", "--dry-run", "--results-dir", str(where.work / "results")]
    args += [a for k, v in variables for a in ("--var", f"{k}={v}")]
    args += ["--max-cases", max_cases] if max_cases is not None else []
    cli(where, args)


OPTIONS_BY_KIND: dict[str, list] = {}     # kind -> (benchmark, option) pairs
for _bench in BENCHES:
    for _name, _opt in benchmarks.get(_bench).options.items():
        OPTIONS_BY_KIND.setdefault(_opt.kind, []).append((_bench, _name))


@settings(PROPERTY, max_examples=300)
@given(kind=st.sampled_from(sorted(OPTIONS_BY_KIND)), data=st.data())
def test_any_option_given_any_type_is_listed_or_refused(place, kind, data):
    """Each kind of option (size, int, float, choice, placement, cpus, path...) given a
    value of each type TOML has, in a suite of one job: few enough pairs that the
    examples reach most of them."""
    bench, name = data.draw(st.sampled_from(OPTIONS_BY_KIND[kind]), label="option")
    value = data.draw(st.one_of(TYPE_SAMPLES, TEXTS.map(toml_string)), label="value")
    where = place()
    (where.work / "suite.toml").write_text(where.fill(
        f'[job]\nbench = "{bench}"\n{toml_key(name)} = {value}\n'))
    cli(where, ["run", "suite.toml", "--dry-run", "--results-dir", str(where.work / "results")])


@st.composite
def settings_of(draw) -> tuple[str, list[str]]:
    """A benchmark and --set KEY=VALUE arguments: its options (now and then another
    benchmark's, or none) with values as typed on a command line."""
    bench = draw(st.sampled_from(BENCHES))
    options = benchmarks.get(bench).options
    keys = mostly(st.sampled_from(sorted(options)),
                  st.one_of(st.sampled_from(OPTION_NAMES), st.text(max_size=5)))
    sets = []
    for key in draw(st.lists(keys, max_size=3, unique=True)):
        good = [json.loads(v) if v.startswith('"') else v
                for v in good_literals(options[key])] if key in options else ["1"]
        value = draw(mostly(st.sampled_from(good), st.one_of(
            TEXTS, st.integers(-(1 << 70), 1 << 70).map(str), st.floats().map(str))))
        sets.append(draw(mostly(st.just(f"{key}={value}"),
                                st.sampled_from([key, f"={value}", f" {key} = {value} "]))))
    return bench, sets


VARS_SUITE = """[vars]
node = 0
size = "16K"
kind = "read"

[lat]
bench = "chase"
mem = "bind:${node}"
size = "${size}"

[bw]
bench = "bandwidth"
kernel = "${kind}"
size = ["${size}", "1M"]
"""


def listed(good: list[str]) -> st.SearchStrategy:
    """A comma-separated flag's value: mostly some of `good`, else anything."""
    return mostly(st.lists(st.sampled_from(good), min_size=1, max_size=3).map(",".join),
                  st.one_of(TEXTS, st.sampled_from([",", "", "all,x", "nan", "2", "-1,0.5"])))


TIERING_FLAGS = {"--workload": listed(["embedding", "kvcache", "all"]),
                 "--policies": listed(["all", "oracle", "first-touch", "tpp"]),
                 "--shares": listed(["halving", "1", "0.5", "0.25", "0"]),
                 "--engine": mostly(st.just("model"), st.sampled_from(["real", "x", ""]))}


@settings(PROPERTY, max_examples=200)
@given(adhoc=settings_of(), variables=st.lists(st.tuples(
    st.sampled_from(["node", "size", "kind", "other"]), VAR_VALUES), max_size=3),
       which=st.sampled_from(["--set", "--var", "tiering"]), data=st.data())
def test_any_set_or_var_value_is_listed_or_refused(place, adhoc, variables, which, data):
    """--bench's --set KEY=VALUE, a suite's --var KEY=VALUE, or `cxlbench tiering`'s
    flags and --set, as typed."""
    where = place()
    results_dir = ["--results-dir", str(where.work / "results")]
    if which == "--set":
        bench, sets = adhoc
        cli(where, ["run", "--bench", bench, *[a for s in sets for a in ("--set", s)],
                    "--dry-run", *results_dir])
    elif which == "tiering":
        flags = [a for flag in data.draw(st.lists(st.sampled_from(sorted(TIERING_FLAGS)),
                                                  max_size=3, unique=True), label="flags")
                 for a in (flag, data.draw(TIERING_FLAGS[flag], label=flag))]
        sets = data.draw(st.lists(st.sampled_from(
            ["phase=shift", "epochs=2", "tpp_watermark=0.5", "engine=model", "x=1", "epochs=nan",
             "calibration=" + USER_PATHS[2], "slow_tier=nosuch"]), max_size=2), label="--set")
        cli(where, ["tiering", "--engine", "model", *flags,
                    *[a for s in sets for a in ("--set", s)], "--dry-run", *results_dir])
    else:
        (where.work / "vars.toml").write_text(VARS_SUITE)
        cli(where, ["run", "vars.toml", *[a for k, v in variables for a in ("--var", f"{k}={v}")],
                    "--dry-run", *results_dir])


PARAM_GOOD: dict[str, set] = {}         # each topology parameter's defaults, as typed
for _topo in topologies.TOPOLOGIES.values():
    for _key, _value in {**topologies.COMMON_PARAMS, **_topo.params}.items():
        PARAM_GOOD.setdefault(_key, set()).add(_value)
PARAM_NAMES = sorted(PARAM_GOOD)
PARAM_VALUES = st.one_of(st.sampled_from(["1G", "1536M", "2", "256M", "100", "5G", "0", "-1",
                                          "1e9", "255", "99999999999999999999T", "nan"]), TEXTS)


@st.composite
def emulate_params(draw) -> list[str]:
    out = []
    for key in draw(st.lists(mostly(st.sampled_from(PARAM_NAMES), st.text(max_size=5)),
                             max_size=2, unique=True)):
        good = sorted(PARAM_GOOD.get(key, {"1"}))
        out += ["--param", f"{key}={draw(mostly(st.sampled_from(good), PARAM_VALUES))}"]
    return out


@settings(PROPERTY, max_examples=150)
@given(topology=st.sampled_from(sorted(topologies.TOPOLOGIES)), params=emulate_params(),
       timeout=mostly(st.none(), st.sampled_from(["10", "0", "-1", "nan", "inf", "1e400", "x"])),
       kernel=mostly(st.none(), st.one_of(st.sampled_from(
           ["6.12", "linux-image-6.1.0-57-amd64", "../x", "-x", ""]), st.text(max_size=6))))
def test_any_emulate_param_is_taken_or_refused_before_a_guest(place, monkeypatch, topology,
                                                              params, timeout, kernel):
    """Every --param, --timeout and --kernel is checked before anything is built or
    booted: here the guest's image is where emulate stops."""
    from cxlbench import emulate

    def no_guest(*args, **kwargs):
        raise UserError("(the test stops here, before a guest is built)")
    monkeypatch.setattr(emulate, "missing_requirements", lambda name: [])
    monkeypatch.setattr(emulate.guest_image, "ensure", no_guest)
    args = ["emulate", "--topology", topology, *params]
    args += ["--timeout", timeout] if timeout is not None else []
    args += ["--kernel", kernel] if kernel is not None else []
    cli(where := place(), [*args, "--", "run", "--dry-run"])


# ---- the plan ------------------------------------------------------------------------------

# A job's TOML fields (plan/job.py's Job), each with a value a preset's job takes.
PLAN_GOOD = {"layers": "32", "hidden": "4096", "heads": "32", "kv_heads": "8", "head_dim": "128",
             "ffn": "14336", "vocab": "128256", "tables": "[1000, 2000]", "table_dim": "16",
             "pooling": "[1, 2]", "table_zipf": "1.05", "dtype": '"bf16"', "master": '"fp32"',
             "optimizer": '"adam"', "train": "true", "micro_batch": "1", "global_batch": "8",
             "seq": "4096", "dp": "2", "tp": "2", "pp": "2", "zero": "1", "recompute": "false",
             "flash": "true", "offload": '"none"', "ranks_per_host": "1", "context": "0",
             "kv_block": "16", "prefix_shared": "0.5", "name": '"job"',
             "preset": '"llama-3-8b"', "params": "8e9"}
PRESETS = ["llama-3-8b", "llama-3-70b", "dlrm-dcnv2", "meta-2022-like"]     # (--model's help)
JOBS = {"a preset": {"preset": '"llama-3-8b"'},
        "a shape": {k: PLAN_GOOD[k] for k in ("layers", "hidden", "heads", "kv_heads",
                                               "head_dim", "ffn", "vocab")},
        "tables": {k: PLAN_GOOD[k] for k in ("tables", "table_dim", "pooling")}}
PLAN_KEYS = mostly(st.sampled_from(sorted(PLAN_GOOD)),
                   st.one_of(st.sampled_from(["parameters", "job"]), st.text(max_size=5)))
NUMBER_FLAGS = ["--zero", "--dp", "--tp", "--pp", "--micro-batch", "--global-batch", "--seq",
                "--context", "--ranks-per-host"]
FLAG_NUMBERS = st.one_of(st.sampled_from(["0", "1", "-1", "2", "8"]), st.integers(-3, 10).map(str),
                         st.sampled_from([str(1 << 63), str(1 << 70), "1e3", "x", "", "0x10"]))
FLAG_WORDS = {"--offload": ["none", "optimizer", "optimizer+params", "kv", "x"],
              "--gpu-mem": ["80G", "0", "-1", "nan", "1e400", "x"],
              "--dram": ["64G", "0", "1", "x"], "--slow-mem": ["1T", "0", "inf", "x"],
              "--slow-tier": ["nosuch", "", "cxl-asic"],
              "--calibration": USER_PATHS + ["", "nosuch"]}


@st.composite
def plan_args(draw) -> tuple[bytes | None, list[str]]:
    """A job that plans (a preset by --model, or a TOML file of a preset, a model's shape
    or embedding tables), then up to three changes: a field of the TOML, a number flag or
    another flag given a value, mostly wild."""
    base = draw(st.sampled_from(["--model", *JOBS]))
    fields = {} if base == "--model" else dict(JOBS[base])
    args = ["--model", draw(mostly(st.sampled_from(PRESETS), st.text(max_size=6)))] \
        if base == "--model" else []
    for _ in range(draw(st.integers(0, 3))):
        what = draw(st.sampled_from(["field", "field", "number", "number", "flag", "switch"]))
        if what == "field":
            key = draw(PLAN_KEYS)
            fields[key] = draw(st.one_of(st.just(PLAN_GOOD.get(key, "1")), WILD_LITERALS,
                                         st.sampled_from(["-5", "1e30"])))
        elif what == "number":
            args += [draw(st.sampled_from(NUMBER_FLAGS)), draw(FLAG_NUMBERS)]
        elif what == "flag":
            flag = draw(st.sampled_from(sorted(FLAG_WORDS)))
            args += [flag, draw(mostly(st.sampled_from(FLAG_WORDS[flag]), TEXTS))]
        else:
            args += draw(st.sampled_from([["--serve"], ["--train"], ["--recompute"]]))
    toml = None
    if fields:
        toml = spliced(draw, "".join(f"{toml_key(k)} = {v}\n" for k, v in fields.items())
                       .encode(), "job.toml", odds=8)
    return toml, args + draw(st.sampled_from([[], ["--json"]]))


def no_constant(name):
    raise ValueError(f"{name} is not JSON")


@settings(PROPERTY, max_examples=300)
@given(given_=plan_args())
def test_any_plan_job_is_planned_or_refused(place, given_):
    """And what --json prints is JSON (no NaN, no Infinity)."""
    toml, args = given_
    where = place()
    if toml is not None:
        (where.work / "job.toml").write_bytes(toml)
        args = ["--config", "job.toml", *args]
    r = cli(where, ["plan", *args, "--results-dir", str(where.work / "results")])
    if r.exit_code == 0 and "--json" in args:
        json.loads(r.stdout, parse_constant=no_constant)


# ---- run folders (report --plan reports on one; resumes read them) ------------------------

def made_run(root: Path) -> Path:
    """A run of three tiny chase cases and a tiering one as cxlbench writes it, the first
    finished: made by the runner's own writers, with a measurement written as a worker
    would (nothing measured)."""
    topo = Topology.read(probe_gpus=False)
    text = ('[lat]\nbench = "chase"\nsize = ["16K", "32K", "64K"]\nrepeat = 2\n'
            '[tier]\nbench = "tiering"\nengine = "model"\n')
    s = suite_mod.Suite("tiny", "tiny.toml", text, {
        "lat": {"bench": "chase", "size": ["16K", "32K", "64K"], "repeat": 2},
        "tier": {"bench": "tiering", "engine": "model"}})
    cases = suite_mod.expand_for(s, topo)
    run = runner.start(s, cases, topo, str(root))
    m = {"status": "ok", "kernel": "chase", "isa": "scalar", "cpus": [0],
         "units": {"latency": "ns"}, "reps": [{"latency": 1.5}, {"latency": 1.6}],
         "placement": {"spec": "local", "page": "4k", "method": "mbind",
                       "verified": [{"buffer": "chain", "text": "0:4", "ok": True}]}}
    run.append(cases[0].id, runner.rows_for(run, cases[0], m),
               runner.journal_entry(cases[0], m, 0.5, 0.4))
    os.close(run._lock_fd)
    return run.path


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Run folders to start from: one made here (this format, this machine, three cases
    left) and the committed one (format 1, every case finished)."""
    return {"made": made_run(tmp_path_factory.mktemp("made")), "committed": COMMITTED_RUN}


@pytest.fixture(scope="module")
def a_plan(tmp_path_factory) -> dict:
    """A plan's JSON as `cxlbench plan --json` writes one, with host work to draw."""
    r = CliRunner().invoke(main, ["plan", "--model", "llama-3-8b", "--zero", "1", "--offload",
                                  "optimizer", "--json", "--results-dir",
                                  str(tmp_path_factory.mktemp("no-calibrations"))])
    assert r.exit_code == 0, r.output
    return Named(json.loads(r.stdout), "<cxlbench plan's JSON of llama-3-8b, ZeRO 1, the "
                                       "optimizer offloaded>")


class Named(dict):
    """A fixture's value that a failing example names rather than prints whole."""

    def __init__(self, value: dict, name: str):
        super().__init__(value)
        self.name = name

    def __repr__(self) -> str:
        return self.name


def json_paths(value, at=()) -> list[tuple]:
    """Every path into a JSON value (keys and indexes), itself first."""
    out = [at]
    if isinstance(value, dict):
        for k, v in value.items():
            out += json_paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:4]):
            out += json_paths(v, (*at, i))
    return out


def mutated(draw, value, favoured=(), label: str = ""):
    """A copy of a JSON value with a part of it (mostly one, mostly at one of the paths
    `favoured`) replaced by another value (mostly one of another type), removed, or joined
    by a stranger. (An example shows each change, not the whole value.)"""
    value = copy.deepcopy(value)
    for _ in range(draw(mostly(st.just(1), st.integers(2, 3)), label=f"{label}: changes")):
        paths = json_paths(value)
        near = [p for p in favoured if p in paths]
        path = draw(mostly(st.sampled_from(near), st.sampled_from(paths)) if near
                    else st.sampled_from(paths), label=f"{label}: at")
        if not path:
            return draw(JSON_VALUES, label=f"{label}: whole")
        parent = value
        for step in path[:-1]:
            parent = parent[step]
        how = draw(mostly(st.just("replace"), st.sampled_from(["remove", "add"])), label="how")
        if how == "replace":
            parent[path[-1]] = draw(mostly(JSON_SCALARS, JSON_VALUES), label="by")
        elif how == "remove":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=5), label="key")] = draw(JSON_VALUES, label="value")
        else:
            parent.append(draw(JSON_VALUES, label="value"))
    return value


PLAN_FAVOURED = [("parts", 0), ("parts", 0, "bytes"), ("parts", 0, "where"),
                 ("parts", 0, "dram"), ("parts", 2, "slow"), ("parts", 1, "name"),
                 ("parts", 2, "why"), ("parts", 1, "formula"), ("host", "ranks"),
                 ("host", "tiers"), ("host", "tiers", 0), ("host", "tiers", 0, "speed_source"),
                 ("host", "step_slow_share"), ("curve",), ("curve", 0), ("curve", 0, "slow_share"),
                 ("curve", 1, "ns"), ("work", 0), ("work", 0, "ns"), ("work", 0, "all_dram_ns"),
                 ("work", 0, "per"), ("work", 0, "name"), ("answer",), ("answer", 0), ("shape",)]


def plan_file(draw, plan: dict) -> bytes:
    """A plan's JSON with wrong types where the section reads it, sometimes with many
    parts (a figure must stay bounded), sometimes not JSON at all."""
    value = mutated(draw, dict(plan), PLAN_FAVOURED, "plan")
    if isinstance(value, dict) and isinstance(value.get("parts"), list) and value["parts"] \
            and draw(st.integers(0, 99), label="1000 parts") >= 90:
        value["parts"] = value["parts"] * (1000 // len(value["parts"]))
    return spliced(draw, json.dumps(value).encode(), "plan.json", odds=10)


# (Figures take a second here, several when the machine is busy: a longer deadline.)
@settings(PROPERTY, max_examples=60, deadline=timedelta(seconds=20))
@given(data=st.data())
def test_any_plan_json_is_reported_or_refused(place, runs, a_plan, data):
    where = place()
    shutil.copytree(runs["made"], where.work / "run")
    (where.work / "plan.json").write_bytes(plan_file(data.draw, a_plan))
    cli(where, ["report", "run", "-o", "out", "--plan", "plan.json"])


# ---- a run's files on resume ------------------------------------------------------------------

RUN_FAVOURED = [("format_version",), ("run_id",), ("machine_id",), ("columns",),
                ("columns", 0), ("cases",), ("cases", 0), ("cases", 1), ("cases", 1, "id"),
                ("cases", 1, "bench"), ("cases", 1, "params"), ("cases", 1, "params", "size"),
                ("cases", 2, "params", "mem"), ("cases", 2, "params", "repeat"),
                ("cases", 2, "params", "timeout"), ("topology",), ("topology", "machine"),
                ("topology", "nodes"), ("suite",), ("suite", "jobs"), ("emulated",),
                ("estimates",), ("command",), ("started",), ("cxlbench_version",)]


JOURNAL_FAVOURED = [("case",), ("status",), ("error",), ("kernel",), ("cpus",), ("params",),
                    ("summary",), ("summary", "latency"), ("summary", "latency", "n"),
                    ("summary", "latency", "median"), ("summary", "latency", "unit"),
                    ("summary", "latency", "ci_low"), ("summary", "latency", "noisy"),
                    ("seconds",), ("estimate_s",), ("placement",), ("info",)]


def damaged_journal(draw, text: str) -> str:
    """cases.jsonl with lines changed: an entry's fields replaced, a line of junk, a line
    cut short, one given twice, one for a case that does not exist."""
    lines = text.splitlines(keepends=True)
    for _ in range(draw(st.integers(0, 2), label="journal: changes")):
        how = draw(st.sampled_from(["entry", "junk", "cut", "twice", "stranger"]), label="how")
        i = draw(st.integers(0, max(0, len(lines) - 1)), label="line")
        if how == "junk" or not lines or not lines[i]:
            lines.insert(i, draw(st.text(max_size=20), label="junk") + "\n")
        elif how == "entry":
            try:
                entry = json.loads(lines[i])
            except ValueError:
                continue
            lines[i] = json.dumps(mutated(draw, entry, JOURNAL_FAVOURED, "entry")) + "\n"
        elif how == "cut":
            lines[i] = lines[i][:draw(st.integers(0, len(lines[i]) - 1), label="cut at")]
            del lines[i + 1:]
        elif how == "twice":
            lines.insert(i, lines[i])
        else:
            lines.append(json.dumps({"case": "lat/009", "status": "ok", "summary": {}}) + "\n")
    return "".join(lines)


def damage(draw, run: Path) -> None:
    """A run folder's run.json, journal or table changed as damaged_journal, mutated and
    spliced do."""
    what = draw(st.sampled_from(["run.json", "run.json", "cases.jsonl", "both",
                                 "results.csv"]), label="damaged")
    if what in ("run.json", "both"):
        meta = json.loads((run / "run.json").read_text())
        text = json.dumps(mutated(draw, meta, RUN_FAVOURED, "run.json"))
        (run / "run.json").write_bytes(spliced(draw, text.encode(), "run.json"))
    if what in ("cases.jsonl", "both"):
        (run / "cases.jsonl").write_text(damaged_journal(draw, (run / "cases.jsonl").read_text()))
    if what == "results.csv":
        (run / "results.csv").write_bytes(spliced(draw, (run / "results.csv").read_bytes(),
                                                  "results.csv"))


@settings(PROPERTY, max_examples=120)
@given(data=st.data(), base=st.sampled_from(["made", "made", "committed"]),
       other=st.booleans())
def test_any_run_folder_resumes_dry_or_is_refused(place, runs, data, base, other):
    where = place()
    shutil.copytree(runs[base], where.work / "run")
    damage(data.draw, where.work / "run")
    cli(where, ["run", "--resume", "run", "--dry-run", *(["--other-machine"] * other)])


@settings(PROPERTY, max_examples=60)
@given(data=st.data(), base=st.sampled_from(["made", "made", "committed"]))
def test_any_run_folder_resumes_or_is_refused_measuring_nothing(place, runs, monkeypatch, data,
                                                                base):
    """Resumed for real (repaired, upgraded, summarised), its cases left to a stand-in
    worker that measures nothing."""
    monkeypatch.setattr(runner, "run_worker", lambda case, tick=None, workers=None: {
        "status": "unsupported", "error": "(this test measures nothing)"})
    where = place()
    shutil.copytree(runs[base], where.work / "run")
    damage(data.draw, where.work / "run")
    cli(where, ["run", "--resume", "run", "--other-machine"])


JSON_TYPE_SAMPLES = st.sampled_from([None, True, False, 0, -1, 1.5, 1 << 64, float("nan"),
                                     float("inf"), "", "x", "16K", "bind:0", "\x00", [], [1],
                                     {}, {"a": 1}])


@settings(PROPERTY, max_examples=150)
@given(data=st.data())
def test_any_recorded_option_of_any_type_is_resumed_or_refused(place, runs, data):
    """A case left to run whose recorded option (each kind) holds a value of each JSON
    type: the resume's checks refuse it, naming it, or list it."""
    where = place()
    run = where.work / "run"
    shutil.copytree(runs["made"], run)
    meta = json.loads((run / "run.json").read_text())
    done = {json.loads(line)["case"] for line in (run / "cases.jsonl").read_text().splitlines()}
    by_kind: dict[str, list] = {}
    for i, case in enumerate(meta["cases"]):
        if case["id"] not in done:
            for key in case["params"]:
                kind = benchmarks.get(case["bench"]).option(key).kind
                by_kind.setdefault(kind, []).append((i, key))
    kind = data.draw(st.sampled_from(sorted(by_kind)), label="kind")
    i, key = data.draw(st.sampled_from(by_kind[kind]), label="option")
    meta["cases"][i]["params"][key] = data.draw(st.one_of(JSON_TYPE_SAMPLES, JSON_VALUES),
                                                label="value")
    (run / "run.json").write_text(json.dumps(meta))
    cli(where, ["run", "--resume", "run", "--dry-run"])


# ---- the estimate's cache ----------------------------------------------------------------------

REAL_FIGURES = estimate.figures      # (no_probes stands in for it in every test)
# A whole number, the same for the session: the cache's length (where bytes are spliced)
# may not vary between a run of an example and its replay.
A_MINUTE_AGO = int(time.time()) - 60
A_CACHE = {"nodes": {"0": {"sweep": [[32768.0, 1.0], [1048576.0, 10.0], [67108864.0, 100.0]],
                           "read_1": 2e10, "read_all": 8e10, "touch": 2e9, "scan": 1e10,
                           "when": None}},
           "start": {"value": 0.5, "when": None}, "fill": {"value": 1e9, "when": None}}
CACHE_FAVOURED = [("nodes",), ("nodes", "0"), ("nodes", "0", "sweep"),
                  ("nodes", "0", "sweep", 0), ("nodes", "0", "read_1"), ("nodes", "0", "when"),
                  ("nodes", "0", "touch"), ("start",), ("start", "value"), ("start", "when"),
                  ("fill",), ("fill", "value")]


@settings(PROPERTY, max_examples=120)
@given(data=st.data(), planted=st.sampled_from(["written"] * 6 + [
    "a link to the user's file", "a folder", "a FIFO", "empty"]),
       args=st.sampled_from([["--bench", "chase", "--set", "size=16K"],
                             ["--bench", "tiering", "--set", "engine=model"],
                             ["--bench", "chase", "--set", "size=1G", "--set", "timeout=1",
                              "--fit"]]))
def test_any_estimate_cache_is_read_or_discarded(place, monkeypatch, data, planted, args):
    """What is at $CXLBENCH_CACHE/estimate-<machine>.json (anything: cxlbench's figures
    with wrong types, bytes, a link to the user's file, a FIFO) is read or probed again,
    the user's file untouched."""
    import time

    where = place()
    cache = where.work / "cache" / f"estimate-{results.machine_id()}.json"
    cache.parent.mkdir()
    if planted == "written":
        kept = copy.deepcopy(A_CACHE)
        for entry in (kept["nodes"]["0"], kept["start"], kept["fill"]):
            entry["when"] = A_MINUTE_AGO
        kept = mutated(data.draw, kept, CACHE_FAVOURED, "cache")
        cache.write_bytes(spliced(data.draw, json.dumps(kept).encode(), "cache"))
    elif planted == "a link to the user's file":
        cache.symlink_to(where.user / "notes.txt")
    elif planted == "a folder":
        cache.mkdir()
    elif planted == "a FIFO":
        os.mkfifo(cache)
    else:
        cache.write_bytes(b"")
    monkeypatch.setattr(estimate, "figures", lambda nodes, *a, **k: REAL_FIGURES(
        nodes, probe=lambda node: FIGURES.nodes[0], start=lambda: 0.5, fill=lambda: 1e9))
    cli(where, ["run", *args, "--dry-run", "--results-dir", str(where.work / "results")])


# ---- fleet submit --------------------------------------------------------------------------

SUITE_NAMES = st.one_of(st.sampled_from(["s", "inj\ntouch pwned #", "a b", "$(id)", "x'y",
                                         "-n", "caf\u00e9", "`id`", "a;b", "%A"]),
                        st.text(min_size=1, max_size=8).filter(
                            lambda n: "/" not in n and "\0" not in n and n not in (".", "..")
                            and len(n.encode("utf-8", "surrogatepass")) < 200))
FLEET_SUITE = '[vars]\nnode = 0\n\n[lat]\nbench = "chase"\nsize = "16K"\nmem = "bind:${node}"\n'
SLURMISH = st.one_of(st.sampled_from(["n1", "n[1-4]", "a,b", "n[1-100000]", "n1 n2", "'x'",
                                      "$(touch x)", "gpu", "a&b", "a|b", "", "-x"]), TEXTS)


FLEET_FLAGS = {
    "--nodes": (["2", "1"], st.one_of(FLAG_NUMBERS, st.just("100000"))),
    "--nodelist": (["n[1-2]", "a,b"], SLURMISH), "--partition": (["lab"], SLURMISH),
    "--constraint": (["cxl"], SLURMISH), "--max-running": (["1"], FLAG_NUMBERS),
    "--time": (["2:00:00", "1-0"], st.one_of(st.sampled_from(
        ["10", "0", "x", "1:00:00\n#SBATCH -x"]), TEXTS)),
    "--env": (["A=1"], st.tuples(st.sampled_from(["A", "SLURM_X", "1x", "PATH", ""]), TEXTS)
              .map("=".join)),
    "--var": (["node=1"], st.tuples(st.sampled_from(["node", "x"]), VAR_VALUES).map("=".join)),
    "--sbatch-arg": (["--qos=lab"], st.one_of(st.sampled_from(
        ["--array=1", "-x", "--export=ALL", "--wrap=x", "--time=1", "--arr", "--qos=a b"]),
        TEXTS)),
    "--hosts": (["2"], st.sampled_from(["1", "3", "-1", "x"])),
    "--shared-dax": (["/dev/dax0.0"], st.one_of(st.sampled_from(
        USER_PATHS + ["dax", "/dev/null", ""]), TEXTS))}


@st.composite
def fleet_args(draw) -> list[str]:
    """A submission that is printed (a count of machines, --local-results: the example's
    folder is under /tmp), then up to three flags given, their values mostly wild."""
    args = draw(mostly(st.sampled_from([["--nodes", "2"], ["--nodelist", "n[1-2]"]]),
                       st.just([])))
    for flag in draw(st.lists(st.sampled_from(sorted(FLEET_FLAGS)), max_size=3)):
        good, wild = FLEET_FLAGS[flag]
        args += [flag, draw(st.one_of(st.sampled_from(good), wild, wild))]
    args += draw(st.sampled_from([[], [], [], ["--gang"]]))
    return args + draw(mostly(st.just(["--local-results"]), st.just([])))


@settings(PROPERTY, max_examples=200)
@given(name=mostly(st.just("s"), SUITE_NAMES), relative=st.booleans(), args=fleet_args())
def test_any_fleet_submission_is_printed_or_refused(place, name, relative, args):
    """A dry run prints the script or refuses, whatever the suite's name and options."""
    where = place()
    try:
        (where.work / f"{name}.toml").write_text(FLEET_SUITE)
    except (OSError, UnicodeEncodeError):
        return                      # a name this file system cannot hold
    path = f"./{name}.toml" if relative else str(where.work / f"{name}.toml")
    cli(where, ["fleet", "submit", path, *args, "--dry-run", "--results",
                str(where.work / "results")])
