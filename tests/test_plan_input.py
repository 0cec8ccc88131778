"""`cxlbench plan` and `cxlbench report --plan` given what a careless or hostile user
might: every flag and field checked (kind, bounds, finiteness) before anything is
computed, a plan file's every value checked before it is drawn, and a plan of many parts
drawn in bounded time. Each refusal: exit 2, one line naming the flag, field or file, no
traceback."""
import copy
import json
import math
import time

import pytest
from click.testing import CliRunner

from cxlbench.cli import main
from cxlbench.errors import UserError
from cxlbench.plan import job as plan_job
from cxlbench.plan import place, text, timing
from cxlbench.report import plan as plan_section

from .schema_check import check_json_output
from .test_plan_place import machine, offload


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A folder of the test's own for HOME, the cache, the working folder and results."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CXLBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(*args):
    r = CliRunner().invoke(main, list(args))
    if r.exit_code == 0:
        check_json_output(args, r.stdout)       # a --json output holds to its schema
    return r


def refused(r, *named: str) -> None:
    """Exit 2, one line of error naming each of `named`, no traceback."""
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, r.stderr
    for name in named:
        assert name in errors[0], (name, errors[0])


def plan(home, *args):
    return run("plan", "--results-dir", str(home / "results"), *args)


@pytest.mark.parametrize("flags, named", [
    (["--pp", "0"], "--pp"),
    (["--tp", "0"], "--tp"),
    (["--dp", "0", "--global-batch", "8"], "--dp"),
    (["--micro-batch", "-3"], "--micro-batch"),
    (["--zero", "9"], "--zero"),
    (["--ranks-per-host", "-1"], "--ranks-per-host"),
    (["--offload", "disk"], "--offload"),
    (["--slow-tier", "nosuch"], "--slow-tier nosuch"),
])
def test_each_bad_flag_is_refused_naming_it(home, flags, named):
    refused(plan(home, "--model", "llama-3-8b", *flags), named)


@pytest.mark.parametrize("body, named", [
    ("preset = []\n", "preset"),
    ('preset = "dlrm-dcnv2"\ntable_zipf = nan\n', "table_zipf"),
    ('preset = "dlrm-dcnv2"\ntable_zipf = inf\n', "table_zipf"),
    ('preset = "dlrm-dcnv2"\ntable_zipf = -5\n', "table_zipf"),
    ('preset = "dlrm-dcnv2"\nprefix_shared = nan\n', "prefix_shared"),
    ("tables = [1e30]\ntable_dim = 1\n", "tables"),
    ('tables = "abc"\ntable_dim = 1\n', "tables"),
    ("tables = [100, 200]\ntable_dim = 8\npooling = [1, 0]\n", "pooling"),
    ('preset = "llama-3-8b"\ndp = {x = 1}\n', "dp"),
    ('preset = "llama-3-8b"\nname = "a\\u001b[2Jb"\n', "name"),
    # every field within its bounds, the whole far past any model: 1.8e20 parameters
    ("layers = 10000\nhidden = 1048576\nheads = 65536\nkv_heads = 65536\n"
     "head_dim = 65536\nffn = 4194304\nvocab = 1\n", "1.8e+08 T parameters, past the 1000 T"),
    # a model of one weight whose scores are kept for 2^44 tokens: 5.9e20 bytes a device
    ("layers = 1\nhidden = 1\nheads = 1\nkv_heads = 1\nhead_dim = 1\nffn = 1\nvocab = 1\n"
     "seq = 16777216\nmicro_batch = 1048576\nflash = false\n",
     "activations: 5.9e+20 bytes a device, past the 1 EiB"),
])
def test_each_bad_field_of_a_job_file_is_refused_naming_it(home, body, named):
    job = home / "job.toml"
    job.write_text(body)
    whole = "past the" in named       # the job as a whole: no one field, nor its file
    refused(plan(home, "--config", str(job)), named, *(() if whole else (str(job),)))


def test_a_job_file_not_utf8_or_endless_is_refused_naming_it(home):
    job = home / "job.toml"
    job.write_bytes(b'preset = "llama-3-8b"\nname = "\xff\xfe"\n')
    refused(plan(home, "--config", str(job)), str(job), "not UTF-8 text (line 2")
    # read whole, /dev/zero filled the memory
    refused(plan(home, "--config", "/dev/zero"), "/dev/zero", "larger than the 1 MiB")


def test_every_field_is_checked_by_its_option(home):
    """Each field past its option's bounds, or of the wrong kind, is refused naming it
    (the table covers every field of Job)."""
    for name, option in plan_job.OPTIONS.items():
        wrong = [[1, 2] if name not in plan_job.LISTS else "abc", {"a": 1}]
        if option.kind == "float":
            wrong += [math.nan, math.inf]
        if option.min is not None:
            wrong.append(option.min - 1)
        if option.max is not None:
            wrong.append(option.max + 1)
        for value in wrong:
            value = [value] if name in plan_job.LISTS and not isinstance(value, str) else value
            with pytest.raises(UserError, match=rf"--{name.replace('_', '-')} \({name}\)"):
                plan_job.make("dlrm-dcnv2", **{name: value})


def test_plan_json_is_strict_json(home):
    """--json prints no NaN or Infinity (JSON has neither): a float that is not finite is
    refused, naming where it would have been."""
    r = plan(home, "--model", "llama-3-8b", "--zero", "2", "--dp", "8", "--offload",
             "optimizer", "--json")
    assert r.exit_code == 0, r.output
    json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"{c} in --json"))
    job = home / "job.toml"
    job.write_text('preset = "dlrm-dcnv2"\ntable_zipf = nan\n')
    refused(plan(home, "--config", str(job), "--json"), "table_zipf")


def test_a_prediction_not_finite_is_said_not_printed(monkeypatch):
    monkeypatch.setattr(timing.Work, "ns", lambda self, m, share: math.nan)
    with pytest.raises(UserError, match=r"plan\.work\[0\]\.ns is nan, not a finite number"):
        text.as_dict(place.plan(offload(), machine()))


# --- report --plan -------------------------------------------------------------------

@pytest.fixture(scope="module")
def good() -> dict:
    return text.as_dict(place.plan(offload(), machine()))


def report(home, plan_file):
    """report --plan on a run folder that is not there: the plan is read first."""
    return run("report", str(home / "no-run"), "-o", str(home / "out"), "--plan",
               str(plan_file))


def changed(good, change) -> dict:
    data = copy.deepcopy(good)
    change(data)
    return data


@pytest.mark.parametrize("change, named", [
    (lambda d: d["parts"][0].update(bytes="abc"), "parts[0].bytes"),
    (lambda d: d["parts"][1].update(dram=-1), "parts[1].dram"),
    (lambda d: d["parts"][0].update(where="disk"), "parts[0].where"),
    (lambda d: d["curve"][0].pop("slow_share"), "curve[0].slow_share"),
    (lambda d: d["host"].update(ranks="x"), "host.ranks"),
    (lambda d: d["host"]["tiers"][1].pop("speed_source"), "host.tiers[1].speed_source"),
    (lambda d: d["work"][0].update(ns="fast"), "work[0].ns"),
    (lambda d: d.update(answer="GPU: fits"), "answer"),
    (lambda d: d.update(answer=[1, 2]), "answer[0]"),
    (lambda d: d.update(curve=[{"slow_share": 0.5, "ns": 1}] * 5000), "curve: 5000 entries"),
])
def test_a_plans_bad_value_is_refused_naming_it(home, good, change, named):
    path = home / "plan.json"
    path.write_text(json.dumps(changed(good, change)))
    r = report(home, path)
    refused(r, str(path), named, "not a plan")
    assert not (home / "out").exists()


@pytest.mark.parametrize("content, said", [
    (b'{"shape": "\xff"}', "not UTF-8 text"),
    (b"shape: x", "not JSON"),
    (b"[1, 2]", "is not an object"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'"a plan"', "is not an object"),
], ids=["not-utf8", "not-json", "a-list", "deep", "a-string"])
def test_a_plan_file_not_a_json_object_is_refused_in_one_line(home, content, said):
    path = home / "plan.json"
    path.write_bytes(content)
    refused(report(home, path), str(path), said)


def test_a_plans_infinite_or_nan_number_is_refused(home, good):
    for bad in ("NaN", "Infinity", "1e999", "1" + "0" * 400):
        path = home / "plan.json"
        path.write_text(json.dumps(good).replace(f'"bytes": {good["parts"][0]["bytes"]}',
                                                 f'"bytes": {bad}', 1))
        refused(report(home, path), "parts[0].bytes", "not a finite number")


def test_a_plan_of_many_parts_draws_the_largest_and_sums_the_rest(home, good):
    """24,000 parts: one figure of at most FIGURE_PARTS bars, the rest summed as the
    GPU's and the host's others, said in the caption; the table keeps every part. Took
    past 180 s when each part was a bar."""
    parts = [dict(good["parts"][i % len(good["parts"])], name=f"part {i}", bytes=i, dram=i,
                  slow=0) for i in range(24_000)]
    drawn = plan_section.FIGURE_PARTS - 2
    bars, summed = plan_section._bars(parts)
    assert len(bars) == plan_section.FIGURE_PARTS and summed == 24_000 - drawn
    assert [name for name, _ in bars[:drawn]] == [f"part {i}" for i in range(23_982, 24_000)]
    gpu = sum(p["bytes"] for p in parts[:23_982] if p["where"] == "gpu")
    assert bars[drawn] == (f"{sum(p['where'] == 'gpu' for p in parts[:23_982])} other GPU "
                           "parts", [("GPU", gpu)])
    path = home / "plan.json"
    path.write_text(json.dumps({**good, "parts": parts}))
    start = time.monotonic()
    blocks = plan_section.section(plan_section.load(str(path)))
    assert time.monotonic() - start < 8
    figure = next(b for b in blocks if getattr(b, "key", "") == "plan-bytes")
    assert f"The plan has 24000 parts: the {drawn} largest are drawn, the other " \
        f"{24_000 - drawn} summed" in figure.caption
    table = next(b for b in blocks if type(b).__name__ == "Table")
    assert len(table.rows) == 24_000


def test_a_plans_names_are_drawn_as_text(good):
    """A "$" in a part's name is the name's, not mathtext: it drew a traceback."""
    data = changed(good, lambda d: d["parts"][0].update(name="$\\frac{$ x_^"))
    figure = next(b for b in plan_section.section(data) if getattr(b, "key", "") == "plan-bytes")
    assert figure.png.startswith(b"\x89PNG")
