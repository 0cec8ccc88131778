"""An emulated guest's calibration (issue 48, item 4), on the host side: `calibrate`
measures the first CPU's node and every CPU-less one by default; a calibration a guest
made is kept beside the guest image and found by later guests wherever they run
(CXLBENCH_CALIBRATIONS); the guest's script points there. Runs are written here as
cxlbench writes them; the guest itself is tested in test_emulate (qemu)."""
import pytest

from cxlbench import emulate
from cxlbench.emulate import guest_image, topologies
from cxlbench.tiering import calibration

from .test_calibration_messages import HERE, NODE, fresh, write_run
from .test_model_trust import write_checked


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CXLBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(calibration.KEPT_ENV, raising=False)
    fresh()
    yield tmp_path / "cache"
    fresh()


def test_a_guests_calibration_is_kept_beside_the_image_and_found_from_anywhere(
        tmp_path, cache, monkeypatch):
    results = tmp_path / "work" / "results"
    cal = write_run(results / "emulated-cxl" / "20261205-000000", "emulated-cxl")
    other = write_checked(results / "emulated-cxl" / "20261205-000100", {"optimizer": [0.1]},
                          "emulated-cxl")
    kept = guest_image.keep_calibrations([cal, other])
    home = cache / "guest" / "calibrations" / "emulated-cxl"
    assert kept == [home / cal.name]                    # the calibration only
    assert (home / cal.name / "run.json").read_bytes() == (cal / "run.json").read_bytes()
    assert sorted(p.name for p in home.iterdir()) == [cal.name]     # no temporary left
    assert guest_image.keep_calibrations([cal]) == kept                 # kept once
    # a guest elsewhere, its own results folder empty, finds it through the variable
    elsewhere = tmp_path / "elsewhere" / "results"
    assert calibration.measured(NODE, elsewhere, "emulated-cxl") is None
    monkeypatch.setenv(calibration.KEPT_ENV, str(guest_image.calibrations_dir()))
    monkeypatch.setattr(calibration.results, "machine_id", lambda: "emulated-cxl")  # a guest
    fresh()
    found = calibration.measured(NODE, elsewhere, "emulated-cxl")
    assert found is not None and found.source == f"measured: {home / cal.name}"
    # a run in both places: the results folder's own
    write_run(elsewhere / "emulated-cxl" / cal.name, "emulated-cxl")
    fresh()
    assert calibration.measured(NODE, elsewhere, "emulated-cxl").source == \
        f"measured: {elsewhere / 'emulated-cxl' / cal.name}"


def test_a_link_where_the_calibrations_go_is_refused(tmp_path, cache):
    cal = write_run(tmp_path / "results" / "emulated-cxl" / "20261205-000000", "emulated-cxl")
    (cache / "guest" / "calibrations").mkdir(parents=True)
    (tmp_path / "theirs").mkdir()
    (cache / "guest" / "calibrations" / "emulated-cxl").symlink_to(tmp_path / "theirs")
    with pytest.raises(Exception, match="is a link"):
        guest_image.keep_calibrations([cal])
    assert list((tmp_path / "theirs").iterdir()) == []


def test_the_guest_is_told_where_the_kept_calibrations_are(cache):
    topo = topologies.get("cxl")
    script = emulate._guest_script(topo, topo.resolve({}), ["calibrate"], {"topology": "cxl"})
    assert f"export {calibration.KEPT_ENV}={guest_image.calibrations_dir()}" in script


@pytest.mark.parametrize("command,want", [
    (["calibrate"], "results"),
    (["calibrate", "--results-dir", "/tmp/r"], "/tmp/r"),
    (["run", "ci", "--results-dir=out"], "out")])
def test_the_results_folder_a_guests_command_writes(command, want):
    assert emulate._results_dir(command) == want


def test_calibrate_measures_the_cpus_node_and_every_cpu_less_one(tmp_path, monkeypatch):
    """On a machine of one node, node 0 (its calibration here, written: nothing runs);
    the default list is the first CPU's node, then the far ones."""
    write_run(tmp_path / "results" / HERE / "20261201-000000")
    from .conftest import cxlbench
    r = cxlbench("calibrate", "--results-dir", "results", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"node {NODE}: every calibration job is measured already" in r.stderr
    assert r.stdout.count(f"node {NODE}: measured") == 1
