"""Settings chosen by measurement: the probe picks the fastest candidate (the plainest
within a tie), keeps it per CPU and key, reuses it, probes again where what was kept is
stale, damaged or for other candidates; the copy kernels record what was chosen and why;
glibc's copy methods are read from its loader."""
import json

import pytest

from cxlbench import system, tuning
from cxlbench.benchmarks import bandwidth

from .conftest import cxlbench, last_json

CANDIDATES = [{"prefetch": 0, "walk": 1}, {"prefetch": 4, "walk": 1}, {"prefetch": 0, "walk": 4}]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CXLBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def counting(rates: dict):
    calls = []

    def rate(c):
        calls.append(tuning.label(c))
        return rates[tuning.label(c)]
    return rate, calls


def test_the_fastest_is_chosen_kept_and_reused(cache):
    rate, calls = counting({"prefetch=0 walk=1": 10.0, "prefetch=4 walk=1": 12.0,
                            "prefetch=0 walk=4": 8.0})
    first = tuning.choose("bandwidth", {"kernel": "copy_nt"}, CANDIDATES, rate, "GB/s")
    assert first.settings == {"prefetch": 4, "walk": 1} and not first.kept
    assert len(calls) == 3 * tuning.ROUNDS        # every candidate, every round
    assert first.record()["by"] == {"prefetch=0 walk=1": 10.0, "prefetch=4 walk=1": 12.0,
                                    "prefetch=0 walk=4": 8.0}
    assert first.record()["source"] == "probed now"
    again = tuning.choose("bandwidth", {"kernel": "copy_nt"}, CANDIDATES, rate, "GB/s")
    assert again.kept and again.settings == first.settings
    assert len(calls) == 3 * tuning.ROUNDS        # nothing probed the second time
    assert again.record()["source"].startswith("kept from a probe of ")
    # the winner kept serves fewer candidates that include it; another key, or
    # candidates without it, is probed afresh
    assert tuning.choose("bandwidth", {"kernel": "copy_nt"}, CANDIDATES[:2], rate,
                         "GB/s").kept
    tuning.choose("bandwidth", {"kernel": "copy"}, CANDIDATES, rate, "GB/s")
    other = tuning.choose("bandwidth", {"kernel": "copy_nt"}, CANDIDATES[::2], rate, "GB/s")
    assert other.settings == CANDIDATES[0] and not other.kept
    assert len(calls) == 3 * tuning.ROUNDS + 3 * tuning.ROUNDS + 2 * tuning.ROUNDS


def test_a_choice_among_fewer_candidates_does_not_serve_more(cache):
    """A case with one setting fixed probes only the rest; its winner must not be reused
    where every setting is open (it was never timed against the others)."""
    rate, calls = counting({"prefetch=0 walk=1": 10.0, "prefetch=4 walk=1": 12.0,
                            "prefetch=0 walk=4": 8.0})
    narrow = tuning.choose("bandwidth", {"kernel": "copy"}, CANDIDATES[::2], rate, "GB/s")
    assert narrow.settings == CANDIDATES[0]
    wide = tuning.choose("bandwidth", {"kernel": "copy"}, CANDIDATES, rate, "GB/s")
    assert not wide.kept and wide.settings == CANDIDATES[1]
    assert len(calls) == 2 * tuning.ROUNDS + 3 * tuning.ROUNDS


def test_a_tie_goes_to_the_plainest_and_the_median_beats_one_lucky_round(cache):
    rate, _ = counting({"prefetch=0 walk=1": 10.0, "prefetch=4 walk=1": 10.05,
                        "prefetch=0 walk=4": 9.0})
    assert tuning.choose("t", {}, CANDIDATES, rate, "GB/s").settings == CANDIDATES[0]
    rounds = iter([5.0, 9.0, 1.0, 5.0, 9.0, 1.0, 50.0, 9.0, 1.0])    # one lucky round
    choice = tuning.choose("u", {}, CANDIDATES, lambda c: next(rounds), "GB/s")
    assert choice.settings == CANDIDATES[1]


RATES = {"prefetch=0 walk=1": 1.0, "prefetch=4 walk=1": 2.0, "prefetch=0 walk=4": 3.0}


def probed_then_aged(cache, what: str):
    """A probe of `what` kept, then every kept entry made a day older than KEEP_DAYS;
    returns the rate the probe used and the cache file."""
    rate, _ = counting(RATES)
    tuning.choose(what, {}, CANDIDATES, rate, "GB/s")
    path = next(cache.glob("tuning-*.json"))
    data = json.loads(path.read_text())
    for entry in data["entries"].values():
        entry["when"] -= (tuning.KEEP_DAYS + 1) * 86400
    path.write_text(json.dumps(data))
    return rate, path


def test_a_stale_or_damaged_cache_is_probed_again(cache):
    rate, path = probed_then_aged(cache, "t")
    assert not tuning.choose("t", {}, CANDIDATES, rate, "GB/s").kept     # too old
    entry = next(iter(json.loads(path.read_text())["entries"].values()))
    assert entry["settings"] == CANDIDATES[2]
    for damage in ("{not json", json.dumps({"entries": {"x": {"settings": "nonsense"}}}),
                   json.dumps([1, 2])):
        path.write_text(damage)
        choice = tuning.choose("t", {}, CANDIDATES, rate, "GB/s")
        assert not choice.kept and choice.settings == CANDIDATES[2]
    path.write_text("{not json")
    assert "unreadable" in tuning.choose("t", {}, CANDIDATES, rate, "GB/s").record()["source"]
    # a planted link at the cache's name is neither followed nor fatal
    path.unlink()
    victim = cache / "victim"
    victim.write_text("mine")
    path.symlink_to(victim)
    assert not tuning.choose("t", {}, CANDIDATES, rate, "GB/s").kept
    assert victim.read_text() == "mine"


def test_entries_past_their_week_are_dropped_as_another_is_written(cache):
    rate, path = probed_then_aged(cache, "old")
    tuning.choose("new", {}, CANDIDATES, rate, "GB/s")
    (only,) = json.loads(path.read_text())["entries"]
    assert '"what": "new"' in only


def test_one_candidate_is_not_probed(cache):
    choice = tuning.choose("t", {}, CANDIDATES[:1], lambda c: pytest.fail("probed"), "GB/s")
    assert choice.settings == CANDIDATES[0] and choice.figures == {}


def test_the_cpu_identity_names_vendor_model_and_family(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"
                    "model\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
                    "stepping\t: 8\n\nprocessor\t: 1\nmodel name\t: other\n")
    assert tuning.cpu_identity(info) == ("GenuineIntel Intel(R) Xeon(R) Platinum 8480+ "
                                         "(cpu family 6, model 143, stepping 8)")
    assert tuning.cpu_identity(tmp_path / "missing") == "unknown CPU"


def test_the_copy_kernels_take_prefetch_and_walk_and_the_others_refuse_them():
    assert bandwidth.candidates({"kernel": "copy_nt", "prefetch": "auto", "walk": "auto"}) \
        == [{"prefetch": p, "walk": w} for p in bandwidth.PREFETCHES for w in bandwidth.WALKS]
    assert bandwidth.candidates({"kernel": "write_nt", "prefetch": "auto", "walk": 2}) == \
        [{"walk": 2}]
    assert bandwidth.candidates({"kernel": "write", "prefetch": "auto", "walk": "auto"}) == \
        [{"walk": w} for w in bandwidth.WALKS]
    assert bandwidth.candidates({"kernel": "read", "prefetch": "auto", "walk": "auto"}) == [{}]
    assert set(bandwidth.unused({"kernel": "read"})) == {"prefetch", "walk"}
    assert set(bandwidth.unused({"kernel": "write"})) == {"prefetch"}
    assert bandwidth.unused({"kernel": "copy"}) == {}


def test_a_copy_case_records_what_its_probe_chose(tmp_path, cache):
    """The run's case info holds the settings the probe chose, every candidate's figure and
    where the choice came from; the summary names it; a second run reuses it."""
    args = ["run", "--bench", "bandwidth", "--set", "kernel=copy_nt", "--set", "size=8M",
            "--set", "repeat=2", "--json", "--results-dir", str(tmp_path / "r")]
    r = cxlbench(*args, env={"CXLBENCH_CACHE": str(cache)})
    assert r.returncode == 0, r.stderr
    (rec,) = last_json(r.stdout)
    info = json.loads((next((tmp_path / "r").rglob("cases.jsonl"))).read_text()
                      .splitlines()[-1])["info"]
    tuned = info["tuned"]
    assert tuned["chosen"] == rec["tuned"] == f"prefetch={info['prefetch']} walk={info['walk']}"
    assert len(tuned["by"]) == len(bandwidth.PREFETCHES) * len(bandwidth.WALKS)
    assert tuned["source"] == "probed now" and tuned["unit"] == "GB/s"
    r = cxlbench(*args, env={"CXLBENCH_CACHE": str(cache)})
    assert r.returncode == 0, r.stderr
    infos = [json.loads(line)["info"] for p in sorted((tmp_path / "r").rglob("cases.jsonl"))
             for line in p.read_text().splitlines()]
    assert infos[-1]["tuned"]["source"].startswith("kept from a probe of ")
    # set by hand: nothing probed, nothing said of a probe
    r = cxlbench(*args, "--set", "prefetch=0", "--set", "walk=1",
                 env={"CXLBENCH_CACHE": str(cache)})
    assert r.returncode == 0, r.stderr
    (rec,) = last_json(r.stdout)
    assert rec["tuned"] is None


DIAGNOSTICS = """version.version="2.36"
x86.cpu_features.preferred.Prefer_ERMS=0x0
x86.cpu_features.non_temporal_threshold=0xbe0000
x86.cpu_features.rep_movsb_threshold=0x2000
x86.cpu_features.rep_movsb_stop_threshold=0xbe0000
x86.cpu_features.rep_stosb_threshold=0x800
"""


def test_glibcs_copy_methods_are_read_from_its_loader(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cpuinfo").write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 erms fsrm\n")
    out = system.libc_copy(proc, DIAGNOSTICS)
    assert out["cpu_flags"] == {"erms": True, "fsrm": True, "avx2": True, "avx512f": False}
    assert out["thresholds"] == {"rep_movsb_threshold": 8192,
                                 "rep_movsb_stop_threshold": 0xbe0000,
                                 "rep_stosb_threshold": 2048,
                                 "non_temporal_threshold": 0xbe0000}
    assert out["memcpy"] == ("rep movsb from 8 KiB to 11.88 MiB; vector loads and regular "
                             "stores below 8 KiB; non-temporal stores walking 2 or 4 pages "
                             "side by side from 11.88 MiB")
    (proc / "cpuinfo").write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2\n")
    assert "no ERMS" in system.libc_copy(proc, DIAGNOSTICS)["memcpy"]
    none = system.libc_copy(proc, "")
    assert none["thresholds"] is None and "no diagnostics" in none["why"]
