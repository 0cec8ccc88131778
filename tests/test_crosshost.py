"""Memory shared by two hosts, the C core (native/crosshost.c): two processes of this
machine stand in for two hosts on one region (an anonymous shared mapping, as a DAX
device's would be). The meeting (one host late, one never there), the flag ping-pong with
and without the flush protocol, and the ring's checksums: clean where the hosts are
coherent, and catching a missing protocol or a planted missing flush where each host sees
the messages through a private copy, as a non-coherent device would show them."""
import json
import mmap
import os
import subprocess
import sys
import time

import pytest

from cxlbench import native
from cxlbench.errors import NativeError

PAGE = 4096
REGION = 64 * PAGE
pytestmark = pytest.mark.skipif(not native.flush_supported("clflush"),
                                reason="needs x86-64's clflush")


def region():
    mm = mmap.mmap(-1, REGION, flags=mmap.MAP_SHARED)
    addr = int(native.ffi.cast("uintptr_t", native.ffi.from_buffer(mm)))
    return mm, addr


def both(host0, host1, delay1: float = 0.0, timeout: float = 30):
    """host0(addr) here and host1(addr) in a child process on one shared region: their
    results (the child's through a pipe, its error as text)."""
    mm, addr = region()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                    # host 1
        os.close(r)
        try:
            time.sleep(delay1)
            out = {"ok": host1(addr)}
        except Exception as e:                      # noqa: BLE001 - reported to the parent
            out = {"error": str(e)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    try:
        mine = host0(addr)
    finally:
        with os.fdopen(r) as f:
            theirs = json.loads(f.read() or '{"error": "host 1 said nothing"}')
        os.waitpid(pid, 0)
        mm.close()
    return mine, theirs


def meet(addr, host, session=5, key=0, timeout=10):
    return native.xh_meet(addr, REGION, host, session, key, timeout)


def test_two_hosts_meet_one_late_and_one_never_there():
    def at(host, **kw):
        return lambda addr: meet(addr, host, **kw)
    g0, theirs = both(at(0), at(1))
    assert g0 == theirs["ok"] == 5 << 32 | 1           # session 5, its first meeting
    g0, theirs = both(at(0), at(1), delay1=0.5)          # host 1 late
    assert g0 == theirs["ok"]
    mm, addr = region()
    t = time.monotonic()
    with pytest.raises(NativeError, match="host 0 waited 0.3 s for host 1 to arrive"):
        meet(addr, 0, timeout=0.3)
    assert 0.3 <= time.monotonic() - t < 5
    with pytest.raises(NativeError, match="host 1 waited 0.2 s for host 0 to open meeting 1 of "
                                          r"session 6 \(the region holds meeting 1 of session 5: "
                                          "do both hosts name the same session"):
        meet(addr, 1, session=6, timeout=0.2)            # no meeting of session 6 opened
    with pytest.raises(NativeError, match="a session .not 0."):
        meet(addr, 0, session=0)
    with pytest.raises(NativeError, match="page-aligned region of at least"):
        native.xh_meet(addr, PAGE, 0, 1, 0, 1)


def test_a_dead_host_times_out_and_one_that_gives_up_ends_the_wait_at_once():
    def dies(addr):
        os._exit(3)                                 # host 1 never comes
    t = time.monotonic()
    with pytest.raises(NativeError, match="host 0 waited 0.5 s for host 1 to arrive"):
        both(lambda addr: meet(addr, 0, timeout=0.5), dies)
    assert time.monotonic() - t < 5

    def gives_up(addr):                             # host 1 fails before the meeting
        native.xh_abort(addr, REGION, 1, 5)
    t = time.monotonic()
    with pytest.raises(NativeError, match="host 1 gave up meeting 1 while host 0 waited for "
                                          "host 1 to arrive"):
        both(lambda addr: meet(addr, 0, timeout=30), gives_up, delay1=0.2)
    assert time.monotonic() - t < 10                # not the 30 s wait

    def then_meet_again(host):                      # ...and both go on to meeting 2
        def run(addr):
            if host == 1:
                native.xh_abort(addr, REGION, 1, 5)
            else:
                with pytest.raises(NativeError, match="gave up"):
                    meet(addr, 0)
            return meet(addr, host)
        return run
    g0, theirs = both(then_meet_again(0), then_meet_again(1))
    assert g0 == theirs["ok"] == 5 << 32 | 2


def test_hosts_running_different_cases_are_told_so():
    """Host 1 finds another case's key in the meeting, says so and gives up (as the
    benchmarks do on any failure): host 0's wait ends at once."""
    def host1(addr):
        try:
            meet(addr, 1, key=2)
        except NativeError as e:
            native.xh_abort(addr, REGION, 1, 5)
            return str(e)
    t = time.monotonic()
    with pytest.raises(NativeError, match="host 1 gave up meeting 1"):
        both(lambda addr: meet(addr, 0, key=1, timeout=30), host1)
    assert time.monotonic() - t < 10


def test_meetings_count_on_across_processes_of_one_session():
    """A case per worker process: each process of a run meets once, and the numbers go
    on from the region (the ready words), the same on both hosts."""
    mm, addr = region()
    seen = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            try:
                meet(addr, 1)
            finally:
                os._exit(0)
        seen.append(meet(addr, 0))
        os.waitpid(pid, 0)
    assert [g & 0xffffffff for g in seen] == [1, 2, 3]
    mm.close()


FLUSHES = [f for f in ("clflush", "clflushopt", "clwb") if native.flush_supported(f)]


@pytest.mark.parametrize("protocol,flush", [("none", "clflush")] +
                         [("flush", f) for f in FLUSHES])
def test_the_flag_goes_round_as_often_as_asked(protocol, flush):
    """Both flags end at the meeting's count (high 32 bits) plus the round trips: a value
    an earlier meeting left is below every one this one waits for."""
    n, generation = 2000, 7

    def side(host):
        def run(addr):
            g = meet(addr, host, session=generation)
            ns = native.xh_pingpong(addr, REGION, host, n, protocol, flush, 10, g)
            words = native.ffi.cast("uint64_t *", addr)
            return ns, [int(words[PAGE // 8]), int(words[(PAGE + 128) // 8])]
        return run
    (ns0, flags), theirs = both(side(0), side(1))
    assert "ok" in theirs, theirs
    assert ns0 > 0 and theirs["ok"][0] > 0
    assert flags == [(1 << 32) + n] * 2             # meeting 1 of session 7


@pytest.mark.parametrize("message", [64, 4096, 65536])
def test_a_coherent_ring_is_clean_with_and_without_the_protocol(message):
    n = 500

    def side(host, protocol, flush):
        def run(addr):
            return native.xh_ring(addr, REGION, host, n, message, protocol, flush, 10,
                                  meet(addr, host))
        return run
    for protocol, flush in [("none", "clflush")] + [("flush", f) for f in FLUSHES]:
        (ns, stale0, torn0), theirs = both(side(0, protocol, flush), side(1, protocol, flush))
        assert "ok" in theirs, theirs
        assert ns > 0 and theirs["ok"][1:] == [0, 0]


def test_the_checksums_catch_a_missing_protocol_and_a_planted_missing_flush():
    """Seen through private copies (a non-coherent device, simulated): without the
    protocol every message is read stale; with it none; with the writer's last line left
    unflushed every message of more than a line is torn."""
    n, message = 300, 256

    def side(host, protocol, plant=False):
        def run(addr):
            return native.xh_ring(addr, REGION, host, n, message, protocol, "clflush", 10,
                                  meet(addr, host), simulate=True, plant=plant)
        return run
    outcomes = {}
    for protocol, plant in (("none", False), ("flush", False), ("flush", True)):
        _, theirs = both(side(0, protocol, plant), side(1, protocol, plant))
        assert "ok" in theirs, theirs
        outcomes[protocol, plant] = tuple(theirs["ok"][1:])
    assert outcomes == {("none", False): (n, 0), ("flush", False): (0, 0),
                        ("flush", True): (0, n)}


def test_a_ring_too_small_or_a_message_out_of_shape_is_refused():
    mm, addr = region()
    with pytest.raises(NativeError, match="at least 64 bytes, whole words"):
        native.xh_ring(addr, REGION, 0, 1, 60, "none", "clflush", 1, 1)
    with pytest.raises(NativeError, match="holds 0 slots of 1048576 bytes; the ring needs 2"):
        native.xh_ring(addr, REGION, 0, 1, 1 << 20, "none", "clflush", 1, 1)
    # the ring is as deep as the bytes given, not the region's pages: 3 pages and 1 slot
    with pytest.raises(NativeError, match="holds 1 slots of 128 bytes"):
        native.xh_ring(addr, 3 * PAGE + 128 + 64, 0, 1, 128, "none", "clflush", 1, 1)


def test_meetings_in_turn_on_one_region_leave_nothing_behind():
    """Repetitions as a benchmark makes them: a meeting, then a ring, twenty times on one
    region. The consumer's last index store of one round must not reach the next round
    (host 0 clears the indices as it opens each meeting), or messages would be read
    stale."""
    rounds, n = 20, 64

    def side(host):
        def run(addr):
            seen = []
            for k in range(rounds):
                seen.append(native.xh_ring(addr, REGION, host, n, 64, "none", "clflush",
                                           10, meet(addr, host))[1:])
            return seen
        return run
    _, theirs = both(side(0), side(1))
    assert theirs.get("ok") == [[0, 0]] * rounds, theirs


SUITE = """
[global]
repeat = 2
warmup = 1
mem = "bind:0"

[pingpong]
bench = "shared_pingpong"
protocol = "all"
iterations = 500

[ring]
bench = "shared_ring"
protocol = "all"
message = [64, 65536]
messages = 200

[stale]
bench = "shared_ring"
protocol = "all"
simulate = true
message = 256
messages = 100
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two hosts need two CPUs")
def test_the_shared_memory_benchmarks_run_as_a_suite(tmp_path):
    """`cxlbench run` of both benchmarks, the two hosts two CPUs of this machine: every
    case ok, the region placed and verified on node 0, round trips timed, the coherent
    ring clean either way, and the simulated non-coherent one read stale in full without
    the protocol and clean with it."""
    from .conftest import cxlbench
    (tmp_path / "shared.toml").write_text(SUITE)
    r = cxlbench("run", str(tmp_path / "shared.toml"), "--results-dir", str(tmp_path / "r"),
                 "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert {x["status"] for x in rows} == {"ok"} and len({x["case"] for x in rows}) == 8
    got = {(x["case"].split("/")[0], x["parameters"]["protocol"],
            x["parameters"]["message"] if "message" in x["parameters"] else None,
            x["metric"]): x["median"] for x in rows}
    assert 0 < got["pingpong", "none", None, "round_trip"] < got["pingpong", "flush", None,
                                                                 "round_trip"]
    assert got["pingpong", "none", None, "one_way"] == \
        pytest.approx(got["pingpong", "none", None, "round_trip"] / 2)
    for protocol in ("none", "flush"):
        for message in (64, 65536):
            assert got["ring", protocol, message, "bandwidth"] > 0
            assert got["ring", protocol, message, "stale"] == 0
            assert got["ring", protocol, message, "torn"] == 0
    assert got["stale", "none", 256, "stale"] == 100 and got["stale", "flush", 256, "stale"] == 0
    # simulated: counts only, its time no figure of the region's
    assert ("stale", "none", 256, "bandwidth") not in got
    (run,) = (tmp_path / "r").glob("*/*")
    journal = [json.loads(line) for line in (run / "cases.jsonl").read_text().splitlines()]
    for e in journal:
        (v,) = e["placement"]["verified"]
        assert (v["buffer"], v["spec"], v["ok"], v["other"]) == ("region", "bind:0", True, 0)
    # the report's figures: round trips, bandwidth by message size (the timed rings
    # only), and the stale counts of the simulated ring
    from cxlbench import report
    report.build([run], tmp_path / "report")
    assert sorted(f.name for f in (tmp_path / "report" / "figures").iterdir()) == \
        ["shared-pingpong.png", "shared-ring.png", "shared-stale.png"]
    md = (tmp_path / "report" / "report.md").read_text()
    assert "Fixed: flush=clflush, host=both, mem=bind:0, messages=200" in md and \
        "simulate=False" in md and "region=" not in md


def test_a_suite_for_two_hosts_needs_two_cpus(tmp_path):
    from .conftest import cxlbench
    (tmp_path / "one.toml").write_text('[p]\nbench = "shared_pingpong"\ncpus = "0"\n')
    r = cxlbench("run", str(tmp_path / "one.toml"), "--dry-run")
    assert r.returncode == 2 and "two hosts need two CPUs (cpus=a,b)" in r.stderr


def test_host_1s_failure_is_the_one_raised_and_the_cpus_are_given_back():
    from cxlbench.benchmarks.crosshost import _both
    allowed = os.sched_getaffinity(0)
    cpus = sorted(allowed)[:2]

    def host0():
        raise RuntimeError("host 0 waited for host 1")

    def host1():
        raise ValueError("host 1: out of memory")
    with pytest.raises(ValueError, match="host 1: out of memory"):
        _both(cpus, host0, host1)
    assert os.sched_getaffinity(0) == allowed
    assert _both(cpus, lambda: 0, lambda: 1) == (0, 1)
    assert os.sched_getaffinity(0) == allowed


TWO_HOSTS = """
[vars]
cpu = 0

[global]
cpus = "${cpu}"
repeat = 2
warmup = 1

[pingpong]
bench = "shared_pingpong"
protocol = "all"
iterations = 300

[ring]
bench = "shared_ring"
protocol = "flush"
message = 4096
messages = 200

[atomic]
bench = "shared_atomic"
op = "all"
iterations = 2000

[pool]
bench = "shared_pool"
slice = "1M"
passes = 2
"""


def two_hosts(tmp_path, suite: str, env: dict, extra=()):
    """`cxlbench run SUITE` as host 0 and host 1 at once, two processes of this machine
    mapping one region file (as two machines map one DAX device), each on a CPU of its
    own where there are two: (exit code, stderr, run folder) of each. The file is not
    there at the start: the two hosts make it between them."""
    region = tmp_path / "region"
    (tmp_path / "two.toml").write_text(suite)
    cpus = sorted(os.sched_getaffinity(0))
    procs = []
    for h in (0, 1):
        out = tmp_path / f"host{h}"
        out.mkdir()
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "cxlbench", "run", str(tmp_path / "two.toml"),
             "--results-dir", str(out), "--var", f"cpu={cpus[h % len(cpus)]}", *extra],
            env={**os.environ, **env, "CXLBENCH_SHARED_HOST": str(h),
                 "CXLBENCH_SHARED_REGION": str(region)},
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    done = []
    for h, p in enumerate(procs):
        _, err = p.communicate(timeout=300)
        runs = list((tmp_path / f"host{h}").glob("*/*/run.json"))
        done.append((p.returncode, err, runs[0].parent if runs else None))
    return done


def test_two_processes_run_a_suite_as_two_hosts_on_one_file(tmp_path):
    """The cross-host form as a person runs it on two machines: host and region from the
    environment (as emulate and the fleet script set them), a session both name; each
    host's run records its role, the region, and figures of its own (the ring's stale
    and torn counts are the consumer's, host 1's)."""
    from cxlbench import results
    done = two_hosts(tmp_path, TWO_HOSTS, {"CXLBENCH_SHARED_SESSION": "test-1"})
    for h, (rc, err, run) in enumerate(done):
        assert rc == 0, err[-2000:]
        df = results.load(run)
        assert set(df["host"].astype(str)) == {str(h)}
        journal = [json.loads(x) for x in (run / "cases.jsonl").read_text().splitlines()]
        assert {e["placement"]["spec"] for e in journal} == \
            {f"region {tmp_path / 'region'} (host {h} of 2)"}
        ring = df[df["job"] == "ring"]
        assert set(ring["metric"]) == ({"bandwidth", "messages", "stale", "torn"} if h else
                                       {"bandwidth", "messages"})
        atomic = df[(df["job"] == "atomic") & (df["metric"] == "lost")]
        lost = dict(zip(atomic["op"], atomic["value"]))
        # two processes of one machine are coherent: its atomics stay atomic
        assert lost["add"] == lost["cas"] == 0
        pool = df[df["job"] == "pool"].groupby("metric")["value"].median()
        assert pool["alone"] > 0 and pool["beside"] > 0
        assert pool["kept"] == pytest.approx(100 * pool["beside"] / pool["alone"], rel=0.5)


def test_two_hosts_need_a_session_and_a_region(tmp_path):
    from .conftest import cxlbench
    env = {k: v for k, v in os.environ.items() if k not in
           ("CXLBENCH_SHARED_SESSION", "SLURM_JOB_ID")}
    r = cxlbench("run", "--bench", "shared_pingpong", "--set", "host=1", "--dry-run",
                 env={"CXLBENCH_SHARED_REGION": ""}, cwd=tmp_path)
    assert r.returncode == 2 and "host=1: name the region both hosts map" in r.stderr
    r = subprocess.run([sys.executable, "-m", "cxlbench", "run", "--bench", "shared_pingpong",
                        "--set", "host=0", "--set", f"region={tmp_path / 'r'}", "--dry-run"],
                       env=env, cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 2 and "set CXLBENCH_SHARED_SESSION to the same word on both" \
        in r.stderr
    assert not (tmp_path / "r").exists()            # a dry run makes no region file


def test_the_python_names_follow_the_c_enums():
    from cxlbench.benchmarks import crosshost
    assert crosshost.OPS == native.XH_OPS and crosshost.PROTOCOLS == native.XH_PROTOCOLS


def test_the_two_host_fleet_script_runs_host_0_and_host_1_together(tmp_path):
    """`cxlbench fleet submit SUITE --hosts 2 --shared-dax PATH`: one job on two machines,
    each step told its host number by its place in the node list and the region's path,
    SLURM's job id the session. The script run here with srun and scontrol standing in
    (each step runs on this machine), the region a file: both runs finish, in step."""
    from cxlbench import results
    from .conftest import cxlbench
    from .test_fleet import STEP_SRUN, fake, sbatch_lines
    region = tmp_path / "region"                    # made by the two hosts
    suite = tmp_path / "two.toml"
    suite.write_text(TWO_HOSTS.replace('cpus = "${cpu}"\n', "").replace("[vars]\ncpu = 0\n", ""))
    shared = tmp_path / "shared"
    r = cxlbench("fleet", "submit", str(suite), "--hosts", "2", "--shared-dax", str(region),
                 "--nodelist", "n1,n2", "--local-results", "--results", str(shared),
                 "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "--nodelist=n1,n2" in sbatch_lines(r.stdout) and "--no-kill" in sbatch_lines(r.stdout)
    assert f"# two hosts sharing {region}: host 0 and host 1 by their place" in r.stdout
    # the dry run's folder stands in for the fleet's
    text = r.stdout.replace(f"{shared}/fleet/<stamp>", str(tmp_path / "fleet"))
    (tmp_path / "fleet" / "logs").mkdir(parents=True)
    (tmp_path / "fleet" / "two.toml").write_text(suite.read_text())
    bin_dir = tmp_path / "bin"
    fake(bin_dir, "srun", STEP_SRUN)
    fake(bin_dir, "scontrol", "print('\\n'.join(sys.argv[3].split(',')))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CXLBENCH_SHARED")}
    done = subprocess.run(["bash", "-c", text], capture_output=True, text=True, timeout=300,
                          env={**env, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                               "STEPS": str(tmp_path / "steps.jsonl"),
                               "SLURM_JOB_NODELIST": "n1,n2", "SLURM_JOB_ID": "41"})
    logs = "".join(p.read_text() for p in (tmp_path / "fleet" / "logs").glob("*"))
    assert done.returncode == 0, done.stderr + logs[-3000:]
    runs = sorted(p.parent for p in shared.glob("*/*/run.json"))
    assert len(runs) == 2
    hosts = sorted(",".join(sorted(set(results.load(run)["host"].astype(str)))) for run in runs)
    assert hosts == ["0", "1"]
    for run in runs:
        meta = json.loads((run / "run.json").read_text())
        assert all(c.get("status", "ok") == "ok" for c in meta.get("cases", [])), meta
    # one more case on one host than the other: told, not measured out of step
    assert "--hosts 2: two machines" in cxlbench(
        "fleet", "submit", str(suite), "--hosts", "2", "--shared-dax", str(region),
        "--nodes", "3", "--local-results", "--results", str(shared), "--dry-run").stderr



def test_a_pool_slice_left_to_cxlbench_fits_the_region(tmp_path, monkeypatch):
    """slice=0: 256 MiB past the caches; half of a smaller DAX device (whole 2 MiB); 8 MiB
    in an emulator, each with why. A region file (or a path where one is made) grows to
    the largest slice: one a small case made earlier does not shrink the next."""
    from cxlbench.benchmarks.crosshost import SharedPool
    from cxlbench.shared_region import Region
    from .test_region_safety import fake_dax
    both = {"slice": 0, "host": "both", "region": ""}
    monkeypatch.delenv("CXLBENCH_EMULATED", raising=False)
    largest = (256 << 20, "256 MiB: past the caches of most machines")
    assert SharedPool.slice_bytes(both) == largest
    region = tmp_path / "r"
    assert SharedPool.slice_bytes({**both, "host": "1", "region": str(region)}) == largest
    with Region(str(region), 3 * 4096):             # a region file, of three pages
        pass
    assert SharedPool.slice_bytes({**both, "host": "1", "region": str(region)}) == largest
    dax = fake_dax(tmp_path / "sys", monkeypatch, 64 << 20, 2 << 20)
    across = {"slice": 0, "host": "1", "region": dax}
    assert SharedPool.slice_bytes(across) == (30 << 20, f"half of what {dax} holds")
    assert SharedPool.slice_bytes({**across, "slice": 1 << 20}) == (1 << 20, "as set")
    monkeypatch.setenv("CXLBENCH_EMULATED", "{}")
    assert SharedPool.slice_bytes(across)[0] == 8 << 20


def test_a_pool_on_one_machine_reads_each_slice_whole(tmp_path):
    """Two CPUs as the two hosts: each slice's read checksum checked; the share kept is
    beside over alone."""
    from .conftest import cxlbench
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("two hosts need two CPUs")
    r = cxlbench("run", "--bench", "shared_pool", "--set", "slice=4M", "--set", "repeat=2",
                 "--results-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    from cxlbench import results
    (run,) = [p.parent for p in tmp_path.glob("*/*/run.json")]
    df = results.load(run)
    reps = df.pivot_table(index="repetition", columns="metric", values="value")
    assert len(reps) == 2 and (reps["alone"] > 0).all() and (reps["beside"] > 0).all()
    assert (reps["kept"] - 100 * reps["beside"] / reps["alone"]).abs().max() < 1e-6
    assert set(df["unit"]) == {"GB/s", "%"}


def test_a_host_that_leaves_a_case_early_leaves_both_in_step_for_the_next():
    """Case A of four meetings: host 1 fails after its second (a figure it checks, say)
    and gives up the rest; host 0 is told, and gives up its rest too. Case B then finds
    both at the same meeting, of the same case."""
    from cxlbench.benchmarks.crosshost import _Seat
    params = {"wait": 10, "warmup": 1, "repeat": 3}

    def host(h):
        def run(addr):
            seat = _Seat(addr, REGION, h, 5, 0xA, params)
            failed = None
            for k in range(4):
                try:
                    seat.meet()
                    if h == 1 and k == 1:
                        raise ValueError("host 1's check failed")
                    seat.done()
                except (ValueError, NativeError) as e:
                    seat.leave()
                    failed = (k, str(e))
                    break
            b = _Seat(addr, REGION, h, 5, 0xB, params)
            return failed, b.meet()
        return run
    (failed0, next0), theirs = both(host(0), host(1))
    failed1, next1 = theirs["ok"]
    assert failed1 == [1, "host 1's check failed"]
    # told at its third meeting, or at the end of its second (where host 1's mark came
    # before host 0 had looked a last time)
    assert (failed0[0], f"host 1 gave up meeting {failed0[0] + 1}" in failed0[1]) in \
        ((1, True), (2, True)), failed0
    assert next0 == next1 == 5 << 32 | 5             # case B's first: after A's four


def test_a_new_session_starts_with_its_barriers_cleared():
    """An earlier session's barrier words, left in the region, must not let a new
    session's hosts through before both are there (the atomic's end, the pool's phases)."""
    mm, addr = region()
    for session in (5, 9):
        def side(host, delay=0.0):
            def run(addr_):
                g = meet(addr_, host, session=session)
                time.sleep(delay)
                t = time.monotonic()
                native.xh_together(addr_, REGION, host, g, 1, 10)
                return time.monotonic() - t
            return run
        pid = os.fork()
        if pid == 0:
            side(1, delay=0.5)(addr)
            os._exit(0)
        if session == 5:                             # leave session 5 far ahead
            waited = side(0)(addr)
            os.waitpid(pid, 0)
            for _ in range(3):
                pid = os.fork()
                if pid == 0:
                    g = meet(addr, 1, session=5)
                    native.xh_together(addr, REGION, 1, g, 7, 10)
                    os._exit(0)
                g = meet(addr, 0, session=5)
                native.xh_together(addr, REGION, 0, g, 7, 10)
                os.waitpid(pid, 0)
        else:
            waited = side(0)(addr)
            os.waitpid(pid, 0)
        assert waited > 0.3, (session, waited)        # host 0 waited for host 1
    mm.close()
