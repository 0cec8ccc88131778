"""Memory shared by two hosts, and the software coherence it needs (native/crosshost.c).

Two hosts attached to one CXL device may share its bytes, but most devices keep no cache
coherent across hosts: the writer flushes what it wrote and fences, the reader flushes
what it is about to read (`protocol=flush`, with the writer's `flush` instruction). These
benchmarks measure what that costs and whether a program that forgets it reads stale or
torn data:

- shared_pingpong: a flag handed back and forth between the hosts; ns a round trip.
- shared_ring: messages of `message` bytes streamed from host 0 to host 1 through a
  single-producer single-consumer ring, every message's sequence number and checksum
  read back; GB/s at the consumer, and the messages read stale or torn.
- shared_atomic: both hosts add to one counter (lock xadd, a compare-and-swap loop, or a
  plain load and store); ns an operation, and the additions lost.
- shared_pool: each host reads its own slice of the region alone, then beside the other
  reading its own; GB/s both ways and the share kept (a pool's noisy neighbour).

`host=both` (the default): the two hosts are two CPUs of this machine (`cpus`), each a
thread on one region placed by `mem` (on a CXL node, the protocol's flushes and reloads
reach the device). `host=0` or `host=1` with `region=PATH`: this machine is one host of
two that map the same DAX device at PATH (or a region file cxlbench makes there, where
nothing is yet: never a file of anyone else's), each running the same suite; they
meet at the region's first page for every repetition (meeting numbers counted in the
region, in a session both name: $CXLBENCH_SHARED_SESSION, or SLURM's job id). Both
options default to $CXLBENCH_SHARED_HOST and $CXLBENCH_SHARED_REGION, which `cxlbench
emulate --topology shared-cxl` and the two-host fleet script set on each host.

Coherent hosts (two CPUs, or two QEMU guests of one machine) read nothing stale without
the protocol: `simulate=true` makes each host see the ring's messages through a private
copy that only the protocol moves, the worst a non-coherent device can do (whether a
protocol is complete, not how often a device serves stale data)."""
from __future__ import annotations

import json
import os
import random
import threading
import zlib

import numpy as np

from .. import shared_region
from ..errors import CheckError, NativeError, UserError
from ..memory import native
from ..options import Option, pick, to_json
from ..shared_region import DAX_ALIGN, PAGE, Region
from .bandwidth import MASK, read_sum
from .common import Measurement, check_placement, measure, place, resolve_cpus, unplaced

TITLE = "Memory shared by two hosts"
BUFFERS = ("region",)
PROTOCOLS = ("none", "flush")               # CXB_XH_*, in value order
FLUSHES = ("clflush", "clflushopt", "clwb")  # the protocol's writer: CXB_FLUSH_* 0-2
OPS = ("add", "cas", "plain")               # shared_atomic's: CXB_XHOP_*, in value order
HOSTS = ("both", "0", "1")
HOST_ENV, REGION_ENV = "CXLBENCH_SHARED_HOST", "CXLBENCH_SHARED_REGION"
SESSION_ENVS = ("CXLBENCH_SHARED_SESSION", "SLURM_JOB_ID")
PAGES = 3               # the meeting block, the flag lines and counter, the ring's indices
LINE = 64
APART = 128             # bytes between words two hosts write (native/crosshost.c)
FLAG_WORDS = (PAGE // 8, (PAGE + APART) // 8)       # host 0's flag, host 1's
POOL_SLICE = 256 << 20  # shared_pool's slice a host, where the case leaves it to cxlbench
EMULATED_SLICE = 8 << 20

SIMULATED = ("each host sees the messages through a private copy that only the protocol "
             "moves: the worst a non-coherent device can do (every line the reader holds is "
             "stale), which tells whether a program's protocol is complete, not how often a "
             "real device serves stale data")
COHERENT = ("the two hosts are two CPUs of one machine, whose hardware keeps their caches "
            "coherent: without the protocol nothing is read stale here (simulate=true "
            "shows what a non-coherent device would)")
EMULATED = ("the two hosts are QEMU guests of one machine mapping one file: their loads "
            "and stores stay coherent, so nothing is read stale or torn for want of a flush "
            "here, but one guest's locked instructions are not atomic against the other's "
            "(QEMU emulates each access to the device on its own), so additions are lost "
            "as on a device without cross-host coherence; every figure is the emulator's, "
            "not a device's")
TWO_HOSTS = ("this is host {host} of two hosts mapping {region}: whether the device keeps "
             "their caches coherent is the device's (most CXL devices today do not: the "
             "protocol is then what keeps data whole)")


def _options(extra: dict) -> dict:
    return {
        "protocol": Option("protocol", "choice", "flush", "the software-coherence protocol: "
                           "none, or the writer's flush and fence and the reader's flush "
                           "before it reads", choices=PROTOCOLS, expand={"all": PROTOCOLS}),
        "flush": Option("flush", "choice", "clflush", "the instruction the protocol's writer "
                        "flushes with", choices=FLUSHES, expand={"all": FLUSHES}),
        **extra,
        "host": Option("host", "choice", os.environ.get(HOST_ENV) or "both", "which host "
                       "this machine is of two sharing `region` (0 or 1), or both (two CPUs "
                       f"of this machine); default ${HOST_ENV} or both", choices=HOSTS),
        "region": Option("region", "path", os.environ.get(REGION_ENV, ""), "the DAX device "
                         "both hosts map, with host=0 or 1 (or a path not there yet, where "
                         f"cxlbench makes a region file); default ${REGION_ENV}; none: a "
                         "region placed by mem"),
        "wait": Option("wait", "int", 120, "seconds a host waits for the other before the "
                       "case fails", "s", min=1, max=86400),
        "cpus": Option("cpus", "cpus", "", "the two CPUs standing in for host 0 and host 1 "
                       "(a,b), or with host=0 or 1 this host's one; default: the first "
                       "allowed"),
        **pick("mem", "page", "repeat", "warmup", "tolerance", "timeout"),
    }


def _across(params: dict) -> bool:
    """This machine is one of two hosts (host=0 or 1), not both."""
    return params["host"] in ("0", "1")


def _cpus(params: dict) -> list[int]:
    cpus = resolve_cpus({**params, "threads": "all"})
    if _across(params):
        return cpus[:1]
    if len(cpus) < 2:
        raise UserError("two hosts need two CPUs (cpus=a,b)")
    return cpus[:2]


def _unused(params: dict) -> dict[str, str]:
    out = {}
    if params["protocol"] == "none":
        out["flush"] = "protocol=none flushes nothing"
    elif params.get("simulate"):
        out["flush"] = "simulate moves the private copies by memcpy, flushing nothing"
    if not _across(params):
        out["region"] = "host=both: the region is placed by mem"
    elif params.get("region"):
        out.update(mem=f"the region is {params['region']}", page="the region is mapped "
                   "whole, in the device's own pages")
    return out


def session() -> int:
    """The run both hosts belong to, as the C side numbers it (1 to 2^32 - 1): from
    $CXLBENCH_SHARED_SESSION, or SLURM's job id."""
    for name in SESSION_ENVS:
        text = os.environ.get(name, "").strip()
        if text:
            return zlib.crc32(f"{name}={text}".encode()) or 1
    raise UserError("two hosts name their run alike: set CXLBENCH_SHARED_SESSION to the "
                    "same word on both (a new one for each run; under SLURM the job id is "
                    "used)")


def case_key(bench: str, params: dict) -> int:
    """What both hosts must agree on: the benchmark and its options, less those that are
    each host's own (which host, where its region is, its CPUs and memory)."""
    mine = {"host", "region", "cpus", "mem", "page", "wait", "timeout"}
    shown = {k: v for k, v in to_json(params).items() if k not in mine and "." not in k}
    return zlib.crc32(json.dumps([bench, shown], sort_keys=True).encode())


def validate_hosts(params: dict, size: int, topology) -> None:
    """In the parent, before anything runs (a dry run too): host, region and session fit
    together (cross-host: the region a DAX device, or a region file of cxlbench's or none
    yet, never a user's file), or the region can be placed (both)."""
    if params["host"] not in HOSTS:
        raise UserError(f"host={params['host']!r} (from ${HOST_ENV}?): choose from "
                        f"{', '.join(HOSTS)}")
    if not _across(params):
        check_placement({**params, "size": size}, _cpus(params), topology, BUFFERS)
        return
    if not params["region"]:
        raise UserError(f"host={params['host']}: name the region both hosts map, "
                        f"region=/dev/daxX.Y (or a path not there yet, where cxlbench "
                        f"makes a region file), or set ${REGION_ENV}")
    shared_region.check(params["region"], size)
    session()
    _cpus(params)


def _both(cpus: list[int], host0, host1):
    """host0() on this thread and host1() on a second one, each on its CPU (cffi lets go
    of the GIL inside C, so both spin at once): their results. This thread's CPUs are
    given back after; a failure of host 1 is raised before host 0's (whose is most often
    the wait for host 1 that ended)."""
    out: dict = {}

    def second():
        os.sched_setaffinity(0, {cpus[1]})
        try:
            out["host 1"] = host1()
        except BaseException as e:          # noqa: BLE001 - raised again on this thread
            out["error"] = e
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpus[0]})
    t = threading.Thread(target=second, name="host 1")
    t.start()
    try:
        first = host0()
    except BaseException as e:
        t.join()
        if "error" in out:
            raise out["error"] from e
        raise
    finally:
        t.join()
        os.sched_setaffinity(0, allowed)
    if "error" in out:
        raise out["error"]
    return first, out["host 1"]


def _unsupported(m: Measurement, params: dict) -> bool:
    """The protocol's flush instruction, where this CPU lacks it (the meeting's and the
    indices' flushes are clflush on x86-64, a fence elsewhere)."""
    kind = params["flush"]
    if params["protocol"] == "none" or native.flush_supported(kind):
        return False
    m.status, m.error = "unsupported", f"{kind} is not supported by this CPU"
    return True


class _Seat:
    """One host's place in a case's meetings (warm-ups and repetitions, one each): which
    it is in, how many it has held; leave() gives up every one of the case's it will not
    hold, so the other host leaves at the same meeting and both go on to the next case in
    step."""

    def __init__(self, addr: int, size: int, host: int, session: int, key: int,
                 params: dict):
        self.addr, self.size, self.host, self.session, self.key = addr, size, host, session, key
        self.wait, self.planned = params["wait"], params["warmup"] + params["repeat"]
        self.current = self.held = 0

    def meet(self) -> int:
        try:
            self.current = native.xh_meet(self.addr, self.size, self.host, self.session,
                                          self.key, self.wait)
        except NativeError as e:
            self.current = getattr(e, "generation", 0)
            raise
        return self.current

    def done(self) -> None:
        self.held, self.current = self.held + 1, 0

    def leave(self) -> None:
        left = max(self.planned - self.held, 1)
        native.xh_abort(self.addr, self.size, self.host, self.session, self.current, left)


def _attend(seat: _Seat, op):
    """A meeting and op(addr, host, generation) on it: its result. A failure gives up the
    rest of the case's meetings (a figure checked after it still counts the meeting)."""
    try:
        return op(seat.addr, seat.host, seat.meet())
    except BaseException:
        seat.leave()
        raise


def _run(m: Measurement, bench: str, params: dict, size: int, op, figures) -> Measurement:
    """Each repetition a meeting of the two hosts, op(addr, host, generation) on each,
    and figures({host: its result}, region words) (both hosts' results and the region's
    words where this machine is both, its own result and None where it is one of two)."""
    if _across(params):
        return _run_across(m, bench, params, size, op, figures)
    if _unsupported(m, params):
        return m
    (buf,) = place({**params, "size": size}, m.cpus, BUFFERS)
    buf.array(np.uint8)[:PAGES * PAGE] = 0
    sess, key = random.randrange(1, 1 << 32), case_key(bench, params)
    seats = [_Seat(buf.addr, size, h, sess, key, params) for h in (0, 1)]

    def once() -> dict[str, float]:
        r0, r1 = _both(m.cpus, lambda: _attend(seats[0], op), lambda: _attend(seats[1], op))
        for seat in seats:
            seat.done()
        return figures({0: r0, 1: r1}, buf.array(np.uint64))
    m.info["hosts"] = COHERENT if not params.get("simulate") else SIMULATED
    return measure(m, params, [buf], once)


def _run_across(m: Measurement, bench: str, params: dict, size: int, op,
                figures) -> Measurement:
    """This machine as host 0 or 1 of two on `region`: a host that fails, or cannot run
    the case, gives up the case's meetings so the other stops waiting at once."""
    h, sess, key = int(params["host"]), session(), case_key(bench, params)
    os.sched_setaffinity(0, set(m.cpus))
    emulated = bool(os.environ.get("CXLBENCH_EMULATED"))
    m.info.update(host=h, session=sess, hosts=SIMULATED if params.get("simulate") else
                  EMULATED if emulated else
                  TWO_HOSTS.format(host=h, region=params["region"]))
    with Region(params["region"], size) as region:
        seat = _Seat(region.addr, size, h, sess, key, params)
        if _unsupported(m, params):
            seat.leave()
            return m

        def once() -> dict[str, float]:
            result = _attend(seat, op)
            try:
                out = figures({h: result}, None)
            except BaseException:
                seat.leave()
                raise
            seat.done()
            return out
        measure(m, params, [], once)
    m.placement = unplaced(f"region {params['region']} (host {h} of 2)")
    return m


class _Shared:
    """What every shared-memory benchmark has alike: its heading, its one buffer (the
    region), the options it ignores, and the check of where its hosts are."""
    TITLE = TITLE
    BUFFERS = BUFFERS
    unused = staticmethod(_unused)

    @classmethod
    def size(cls, params: dict) -> int:
        """Bytes of the region the case uses: the three pages, and what it adds."""
        return PAGES * PAGE

    @classmethod
    def validate(cls, params: dict, topology) -> None:
        validate_hosts(params, cls.size(params), topology)

    @staticmethod
    def figures_of(params: dict, figures):
        """The estimate's figures for the region: its placement's node where this machine
        is both hosts; the slowest node probed where it maps a region of two (its node
        is not known here: the slowest is the safe side)."""
        if _across(params):
            return max(figures.nodes.values(), key=lambda f: f.latency_ns(1 << 30))
        return figures.of(params["mem"])

    @classmethod
    def handoff_s(cls, params: dict, figures) -> float:
        """A line handed from one host to the other: a miss at the region's latency, and
        with the flush protocol the writer's flush and the reader's miss on top."""
        lat = cls.figures_of(params, figures).latency_ns(1 << 30) * 1e-9
        return lat * (2 if params["protocol"] == "flush" else 1)


class SharedPingPong(_Shared):
    NAME = "shared_pingpong"
    DESCRIPTION = "a flag handed between two hosts on one region, with or without the " \
                  "flush protocol; ns a round trip"
    OPTIONS = _options({"iterations": Option("iterations", "int", 20000, "round trips", min=1)})

    @classmethod
    def estimate(cls, params: dict, figures) -> float:
        """Seconds of the case's work: each repetition's round trips, two handoffs each."""
        reps = params["warmup"] + params["repeat"]
        return reps * params["iterations"] * 2 * cls.handoff_s(params, figures)

    @staticmethod
    def run(params: dict) -> Measurement:
        n = params["iterations"]
        m = Measurement(kernel="xh_pingpong", isa="scalar", cpus=_cpus(params),
                        units={"round_trip": "ns", "one_way": "ns"},
                        info={"round_trips": n})

        def figures(results, words) -> dict[str, float]:
            # Each host's clock spans every round trip (host 1's from its first wait).
            ns, generation = results.get(0, results.get(1))
            if words is not None:
                flags = [int(f) for f in words[list(FLAG_WORDS)]]
                want = ((generation & 0xffffffff) << 32) + n
                if flags != [want, want]:
                    raise CheckError(f"the flags ended at {flags}, not {want} each")
            return {"round_trip": ns / n, "one_way": ns / n / 2}

        def op(addr, h, generation):
            ns = native.xh_pingpong(addr, PAGES * PAGE, h, n, params["protocol"],
                                    params["flush"], params["wait"], generation)
            return ns, generation
        return _run(m, SharedPingPong.NAME, params, PAGES * PAGE, op, figures)


class SharedRing(_Shared):
    NAME = "shared_ring"
    DESCRIPTION = "messages from host 0 to host 1 through a ring on one region, each read " \
                  "back by sequence number and checksum; GB/s, and messages stale or torn"
    OPTIONS = _options({
        "message": Option("message", "size", 4096, "bytes a message (64 B to 1 MiB, whole "
                          "words)", "B", min=64, max=1 << 20, multiple=8,
                          expand={"sweep": tuple(64 << (2 * i) for i in range(8))}),
        "messages": Option("messages", "int", 20000, "messages a repetition", min=1),
        "slots": Option("slots", "int", 8, "messages the ring holds", min=2),
        "simulate": Option("simulate", "bool", False, "each host sees the messages through "
                           "a private copy only the protocol moves (the worst a non-coherent "
                           "device can do); counts only"),
    })

    @staticmethod
    def ring_bytes(params: dict) -> int:
        """The region the ring uses: the three pages and `slots` messages, each rounded
        up to lines (the placed buffer is whole pages; the ring sees only these)."""
        return PAGES * PAGE + params["slots"] * (-(-params["message"] // LINE) * LINE)

    @classmethod
    def size(cls, params: dict) -> int:
        return -(-cls.ring_bytes(params) // PAGE) * PAGE

    @classmethod
    def estimate(cls, params: dict, figures) -> float:
        """Seconds of the case's work: each message written and read at one thread's rate
        and its indices handed over (two handoffs)."""
        f = cls.figures_of(params, figures)
        each = 2 * params["message"] / f.read_1 + 2 * cls.handoff_s(params, figures)
        return (params["warmup"] + params["repeat"]) * params["messages"] * each

    @classmethod
    def run(cls, params: dict) -> Measurement:
        n, message = params["messages"], params["message"]
        protocol, simulate = params["protocol"], params["simulate"]
        consumer = params["host"] != "0"
        # simulated: what the protocol leaves stale or torn, counted; its time is memcpy
        # between private copies, no figure of the region's. The counts are the
        # consumer's (host 1's).
        counts = {"stale": "messages", "torn": "messages"} if consumer else {}
        units = counts if simulate else {"bandwidth": "GB/s", "messages": "M/s", **counts}
        if not units:
            units = {"messages_sent": "messages"}
        m = Measurement(kernel="xh_ring", isa="scalar", cpus=_cpus(params), units=units,
                        info={"messages": n, "slots": params["slots"]})

        def figures(results, words) -> dict[str, float]:
            ns, stale, torn = results.get(1, results.get(0))
            if 1 in results and protocol == "flush" and stale + torn:
                raise CheckError(f"with the protocol, {stale} messages were read stale and "
                                 f"{torn} torn: the region does not keep what was flushed")
            out = {"stale": stale, "torn": torn} if 1 in results else {}
            if not simulate:
                out.update(bandwidth=n * message / ns, messages=n / ns * 1e3)
            return out or {"messages_sent": n}

        def op(addr, h, generation):
            return native.xh_ring(addr, cls.ring_bytes(params), h, n, message, protocol,
                                  params["flush"], params["wait"], generation,
                                  simulate=simulate)
        return _run(m, cls.NAME, params, cls.size(params), op, figures)


class SharedAtomic(_Shared):
    NAME = "shared_atomic"
    DESCRIPTION = "both hosts add 1 to one counter on one region, `iterations` times each; " \
                  "ns an addition, and the additions lost"
    OPTIONS = _options({
        "op": Option("op", "choice", "add", "add: lock xadd; cas: a compare-and-swap loop; "
                     "plain: a load and a store (atomic on no machine)",
                     choices=OPS, expand={"all": OPS}),
        "iterations": Option("iterations", "int", 100000, "additions by each host", min=1,
                             max=(1 << 62)),
    })

    @classmethod
    def estimate(cls, params: dict, figures) -> float:
        """Seconds of the case's work: both hosts' additions, each a handoff of the line."""
        reps = params["warmup"] + params["repeat"]
        return reps * 2 * params["iterations"] * cls.handoff_s(params, figures)

    @staticmethod
    def run(params: dict) -> Measurement:
        n, op_name = params["iterations"], params["op"]
        m = Measurement(kernel="xh_atomic", isa="scalar", cpus=_cpus(params),
                        units={"addition": "ns", "lost": "additions"},
                        info={"additions": 2 * n, "atomic_across_hosts":
                              "recorded, not assumed: a device that keeps no coherence "
                              "across hosts does not make their atomics atomic together"})

        def figures(results, words) -> dict[str, float]:
            ns, value = results.get(0, results.get(1))
            lost = 2 * n - value
            # One machine keeps its own atomics: an addition lost there is the kernel's.
            if words is not None and op_name != "plain" and lost:
                raise CheckError(f"{op_name}: the counter came to {value}, not {2 * n}")
            return {"addition": ns / n, "lost": lost}

        def op(addr, h, generation):
            return native.xh_atomic(addr, PAGES * PAGE, h, n, op_name, params["protocol"],
                                    params["flush"], params["wait"], generation)
        return _run(m, SharedAtomic.NAME, params, PAGES * PAGE, op, figures)


class SharedPool(_Shared):
    """Pooling: each host streams over its own slice of one device, first alone, then the
    other alone, then both at once: the bandwidth each keeps beside the other (a pool's
    noisy neighbour). The catalogue's `read` kernel, its checksum checked each time."""
    NAME = "shared_pool"
    DESCRIPTION = "each host reads its own slice of one region, alone and then beside the " \
                  "other host reading its own: GB/s alone and beside, and the share kept"
    OPTIONS = _options({
        "slice": Option("slice", "size", 0, "bytes of each host's slice; 0: 256 MiB (past "
                        "the caches), less where the shared region holds less, 8 MiB in an "
                        "emulator", "B", min=0, multiple=PAGE),
        "passes": Option("passes", "int", 4, "passes over the slice a phase", min=1),
    })
    KERNEL = "read"

    @staticmethod
    def unused(params: dict) -> dict[str, str]:
        why = "each host only reads its slice, no protocol"
        return {**_unused(params), "protocol": why, "flush": why}

    @staticmethod
    def slice_bytes(params: dict) -> tuple[int, str]:
        """Each host's slice, and why that size where the case left it to cxlbench: less
        than the largest only where a DAX device holds less."""
        largest = SharedPool.largest_slice(params)
        if largest[0] != POOL_SLICE or params["slice"] or not _across(params):
            return largest
        found = shared_region.device_size(params["region"])
        if found is None:               # a region file: made or grown to the largest slice
            return largest
        most = (found[0] - PAGES * PAGE) // 2 // DAX_ALIGN * DAX_ALIGN
        if most < POOL_SLICE:
            return max(most, PAGE), f"half of what {params['region']} holds"
        return largest

    @staticmethod
    def largest_slice(params: dict) -> tuple[int, str]:
        """The slice a host takes where the case leaves it to cxlbench and no region
        holds less, and why."""
        if params["slice"]:
            return params["slice"], "as set"
        if os.environ.get("CXLBENCH_EMULATED"):
            return EMULATED_SLICE, ("8 MiB: an emulator reaches the device an access at a "
                                    "time, so a larger slice only takes longer")
        return POOL_SLICE, "256 MiB: past the caches of most machines"

    @classmethod
    def size(cls, params: dict) -> int:
        return PAGES * PAGE + 2 * cls.slice_bytes(params)[0]

    @classmethod
    def estimate(cls, params: dict, figures) -> float:
        """Seconds of the case's work: both slices filled, then each repetition's three
        phases of `passes` over a slice (each host alone at one thread's rate, then both
        at once at all threads'). A region of two hosts is taken at the largest slice
        (one that holds less only takes less)."""
        f = cls.figures_of(params, figures)
        slice_, _ = cls.largest_slice(params)
        phases = 2 * slice_ / f.read_1 + 2 * slice_ / f.read_all
        return 2 * slice_ * (1 / f.touch + 1 / f.scan) + \
            (params["warmup"] + params["repeat"]) * params["passes"] * phases

    @classmethod
    def run(cls, params: dict) -> Measurement:
        k = native.kernel(cls.KERNEL)
        isa = k.best_isa()
        (slice_, why), passes = cls.slice_bytes(params), params["passes"]
        size = PAGES * PAGE + 2 * slice_          # once: a region's size is read from sysfs
        lines = slice_ // 64
        unit = max(k.elem_bytes, 64)
        want = passes * read_sum(lines, unit // 64, k.bytes_read * unit // k.elem_bytes // 64) \
            & MASK
        m = Measurement(kernel=cls.KERNEL, isa=isa, cpus=_cpus(params),
                        units={"alone": "GB/s", "beside": "GB/s", "kept": "%"},
                        info={"slice": slice_, "slice_chosen": why, "passes": passes,
                              "phases": "host 0 alone, host 1 alone, both at once"})
        filled: set[int] = set()

        def stream(addr: int, h: int) -> float:
            cpu = m.cpus[h] if len(m.cpus) > 1 else m.cpus[0]
            r = native.run_kernel(k, isa, [addr], slice_, passes, [cpu])
            if r.checksum != want:
                raise CheckError(f"host {h}: read checksum {r.checksum:#x}, expected "
                                 f"{want:#x}: its slice did not hold what it wrote")
            return slice_ * passes / r.ns

        def op(addr, h, generation):
            mine = addr + PAGES * PAGE + h * slice_
            if h not in filled:         # an index fill, the read kernel's closed form
                words = np.frombuffer(native.ffi.buffer(native.ffi.cast("char *", mine),
                                                        slice_), np.uint64)
                words[:] = np.arange(words.size, dtype=np.uint64)
                del words
                filled.add(h)
            alone = None
            for phase in (1, 2):                    # host 0 alone, then host 1
                native.xh_together(addr, size, h, generation, phase,
                                   params["wait"])
                if phase == h + 1:
                    alone = stream(mine, h)
            native.xh_together(addr, size, h, generation, 3, params["wait"])
            beside = stream(mine, h)
            native.xh_together(addr, size, h, generation, 4, params["wait"])
            return alone, beside

        def figures(results, words) -> dict[str, float]:
            h = 0 if 0 in results else 1
            alone, beside = results[h]
            if 1 - h in results:                # both here: host 1's in info
                other = results[1 - h]
                m.info.setdefault("host 1", []).append(
                    {"alone": other[0], "beside": other[1]})
            return {"alone": alone, "beside": beside, "kept": 100 * beside / alone}
        # No protocol: each host only reads its own slice; the slice as resolved, so two
        # hosts that resolved it apart are told so at their first meeting.
        return _run(m, cls.NAME, {**params, "protocol": "none", "slice": slice_}, size, op,
                    figures)


BENCHMARKS = (SharedPingPong, SharedRing, SharedAtomic, SharedPool)
