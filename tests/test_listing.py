"""cxlbench list's choice and text: an overview, one name in full, patterns, a typo, the
width every line keeps, and the JSON form."""
import json

import pytest

from cxlbench import benchmarks, listing, native, suite
from cxlbench.errors import UserError


@pytest.fixture
def vm(topo):
    """A one-node machine: migrate is skipped there, and nothing depends on this host."""
    return topo("vm")


def names(selection: dict) -> dict[str, list[str]]:
    return {section: [item["name"] for item in selection[section]]
            for section in ("kernels", "drivers", "benchmarks", "suites")}


def test_overview_is_short_and_names_every_benchmark(vm):
    lines = listing.render(listing.select(topology=vm), width=100)
    assert len(lines) < 90
    firsts = {line.split()[0] for line in lines if line.startswith("  ")}
    assert set(benchmarks.available()) <= firsts
    assert set(suite.shipped_names()) <= firsts
    assert "cxlbench list NAME shows one benchmark's options" in " ".join(lines)
    text = "\n".join(lines)
    assert benchmarks.get("chase").options["size"].describe()[:40] not in text


def test_a_benchmark_gives_its_options_and_no_others(vm):
    selection = listing.select("chase", vm)
    assert names(selection)["benchmarks"] == ["chase"]
    assert names(selection)["kernels"] == ["chase"]      # the kernel of that key too
    text = "\n".join(listing.render(selection, width=120))
    chase, bandwidth = benchmarks.get("chase"), benchmarks.get("bandwidth")
    assert chase.description in " ".join(text.split())
    for opt in chase.options.values():
        assert opt.describe()[:40] in text
    assert any(line.startswith("    size ") for line in text.splitlines())
    assert bandwidth.options["kernel"].describe()[:40] not in text
    assert not any(line.startswith("benchmark bandwidth") for line in text.splitlines())
    options = {o["name"]: o for o in selection["benchmarks"][0]["options"]}
    assert options["size"]["default"] == chase.options["size"].default
    assert options["page"]["choices"] == list(chase.options["page"].allowed())


def test_skipped_here_follows_the_topology(vm, topo):
    on_vm = listing.select("migrate", vm)
    assert "two nodes" in on_vm["benchmarks"][0]["skipped_here"]
    assert any(line.startswith("  skipped here with its defaults: ")
               for line in listing.render(on_vm))
    assert listing.select("migrate", topo("two_socket_cxl"))["benchmarks"][0][
        "skipped_here"] is None


def test_a_glob_and_a_substring_match_several(vm):
    kv = names(listing.select("kv*", vm))
    assert kv["drivers"] == ["kvcache"] and kv["benchmarks"] == ["kvcache"]
    random = names(listing.select("random", vm))
    assert random["kernels"] == ["random_64", "random_256", "random_4096"]
    assert random["benchmarks"] == ["random_bw"] and not random["suites"]
    lines = listing.render(listing.select("random", vm))
    assert "benchmark random_bw" in " ".join(lines)        # in full: its options too
    assert any(line.startswith("    granularity ") for line in lines)


def test_a_kernel_key_gives_its_full_entry(vm):
    selection = listing.select("triad_nt", vm)
    assert names(selection) == {"kernels": ["triad_nt"], "drivers": [], "benchmarks": [],
                                "suites": []}
    kernel = native.kernel("triad_nt")
    lines = listing.render(selection)
    assert lines[0] == "kernel triad_nt (benchmark bandwidth)"
    assert f"  {kernel.description}" in lines
    assert (f"  read {kernel.bytes_read} B, written {kernel.bytes_written} B per "
            f"{kernel.elem_bytes} B step; buffers a, b, c") in lines


def test_a_suite_lists_its_jobs_and_vars(vm):
    quick = listing.select("quick", vm)["suites"][0]
    assert [job["name"] for job in quick["jobs"]] == ["latency", "bandwidth", "loaded"]
    assert quick["jobs"][1]["bench"] == "bandwidth"
    assert quick["jobs"][1]["options"]["kernel"] == ["read", "write", "copy_nt", "triad"]
    text = "\n".join(listing.render(listing.select("quick", vm), width=120))
    assert '  [latency] bench = "chase", size = { from = "16K", to = "1G", factor = 2 }' in text
    node = listing.select("node", vm)["suites"][0]
    assert node["vars"] == {"node": 0}
    lines = listing.render(listing.select("node", vm), width=120)
    assert "  [vars] node = 0" in lines
    assert any("${node}" in line for line in lines)      # as written, not substituted


def test_a_typo_names_the_close_matches():
    with pytest.raises(UserError, match=r"did you mean chase\b.*`cxlbench list`"):
        listing.select("chsae")
    with pytest.raises(UserError, match="`cxlbench list` lists them all"):
        listing.select("zzzz*")


@pytest.mark.parametrize("width", [60, 120])
@pytest.mark.parametrize("pattern", [None, "chase", "kv*", "quick", "tiering", "gpu_"])
def test_every_line_fits_the_width(vm, width, pattern):
    selection = listing.select(pattern, vm)
    for detail in (False, True):
        lines = listing.render(selection, width, detail)
        assert lines and max(map(len, lines)) <= width


def test_wrapped_lines_are_indented(vm):
    for pattern in ("kvcache", "node", "gpu_stream"):
        lines = listing.render(listing.select(pattern, vm), width=60)
        assert len(lines) > len(listing.render(listing.select(pattern, vm), width=120))
        entries = [i for i, line in enumerate(lines) if line and not line.startswith(" ")]
        assert all(i == 0 or lines[i - 1] == "" for i in entries)   # only entry headings


def test_the_selection_round_trips_through_json(vm):
    selection = listing.select(topology=vm)
    again = json.loads(json.dumps(selection))
    assert again == selection
    assert listing.render(again, 80, detail=True) == listing.render(selection, 80, detail=True)
    assert again["pattern"] is None and listing.select("kv*", vm)["pattern"] == "kv*"
    option = again["benchmarks"][0]["options"][0]
    assert {"name", "kind", "default", "choices", "help"} <= set(option)
    assert again["benchmarks"][0].keys() >= {"name", "description", "buffers",
                                             "skipped_here", "options"}


def test_test_only_kernels_stay_hidden(monkeypatch, vm):
    monkeypatch.delenv(benchmarks.TEST_ENV, raising=False)
    hidden = [k.key for k in native.kernels() if k.test_only]
    assert hidden and not set(hidden) & set(names(listing.select(topology=vm))["kernels"])
    monkeypatch.setenv(benchmarks.TEST_ENV, "1")
    assert set(hidden) <= set(names(listing.select(topology=vm))["kernels"])


def test_the_command_filters_wraps_and_speaks_json():
    """`cxlbench list NAME`, a pattern with --json, and a typo, as a user types them."""
    from .conftest import cxlbench

    r = cxlbench("list", "chase", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert "benchmark chase" in r.stdout and "benchmark bandwidth" not in r.stdout
    assert all(len(line) <= 80 for line in r.stdout.splitlines())
    r = cxlbench("list", "kv*", "--json")
    found = json.loads(r.stdout)
    assert [b["name"] for b in found["benchmarks"]] == ["kvcache"]
    r = cxlbench("list", "chsae")
    assert r.returncode == 2 and "chase" in r.stderr
