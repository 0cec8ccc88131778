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

Here the two hosts are two CPUs of this machine (`cpus`), each a thread on one region
placed by `mem` (on a CXL node, the protocol's flushes and reloads reach the device).
Their caches are kept coherent by the hardware, so without the protocol nothing goes
wrong: `simulate=true` makes each host see the ring's messages through a private copy that
only the protocol moves, the worst a non-coherent device can do (whether a protocol is
complete, not how often a device serves stale data). Two emulated or real hosts on one
shared region are the next step of issue 32."""
from __future__ import annotations

import os
import threading

import numpy as np

from ..errors import CheckError, UserError
from ..memory import native
from ..options import Option, pick
from .common import Measurement, check_placement, measure, place, resolve_cpus

TITLE = "Memory shared by two hosts"
BUFFERS = ("region",)
PROTOCOLS = ("none", "flush")               # CXB_XH_*, in value order
FLUSHES = ("clflush", "clflushopt", "clwb")  # the protocol's writer: CXB_FLUSH_* 0-2
PAGE = 4096
PAGES = 3               # the meeting block, the flag lines, the ring's indices
LINE = 64
APART = 128             # bytes between words two hosts write (native/crosshost.c)
FLAG_WORDS = (PAGE // 8, (PAGE + APART) // 8)       # host 0's flag, host 1's
WAIT_S = 60.0           # the longest wait for the other host before the case fails

SIMULATED = ("each host sees the messages through a private copy that only the protocol "
             "moves: the worst a non-coherent device can do (every line the reader holds is "
             "stale), which tells whether a program's protocol is complete, not how often a "
             "real device serves stale data")
COHERENT = ("the two hosts are two CPUs of one machine, whose hardware keeps their caches "
            "coherent: without the protocol nothing is read stale here (simulate=true "
            "shows what a non-coherent device would)")


def _options(extra: dict) -> dict:
    return {
        "protocol": Option("protocol", "choice", "flush", "the software-coherence protocol: "
                           "none, or the writer's flush and fence and the reader's flush "
                           "before it reads", choices=PROTOCOLS, expand={"all": PROTOCOLS}),
        "flush": Option("flush", "choice", "clflush", "the instruction the protocol's writer "
                        "flushes with", choices=FLUSHES, expand={"all": FLUSHES}),
        **extra,
        "cpus": Option("cpus", "cpus", "", "the two CPUs standing in for host 0 and host 1 "
                       "(a,b); default: the first two allowed"),
        **pick("mem", "page", "repeat", "warmup", "tolerance", "timeout"),
    }


def _cpus(params: dict) -> list[int]:
    cpus = resolve_cpus({**params, "threads": "all"})
    if len(cpus) < 2:
        raise UserError("two hosts need two CPUs (cpus=a,b)")
    return cpus[:2]


def _unused(params: dict) -> dict[str, str]:
    if params["protocol"] == "none":
        return {"flush": "protocol=none flushes nothing"}
    if params.get("simulate"):
        return {"flush": "simulate moves the private copies by memcpy, flushing nothing"}
    return {}


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


def _run(m: Measurement, params: dict, size: int, op, figures) -> Measurement:
    """The region placed (its meeting block cleared), then each repetition a meeting of
    the two hosts (its own generation), op(addr, host, generation) on both, and
    figures((host 0's, host 1's results), buf, generation)."""
    if _unsupported(m, params):
        return m
    (buf,) = place({**params, "size": size}, m.cpus, BUFFERS)
    buf.array(np.uint8)[:PAGES * PAGE] = 0
    generation = 0

    def once() -> dict[str, float]:
        nonlocal generation
        generation += 1

        def host(h):
            native.xh_meet(buf.addr, size, h, generation, WAIT_S)
            return op(buf.addr, h, generation)
        return figures(_both(m.cpus, lambda: host(0), lambda: host(1)), buf, generation)
    return measure(m, params, [buf], once)


class SharedPingPong:
    NAME = "shared_pingpong"
    TITLE = TITLE
    BUFFERS = BUFFERS
    DESCRIPTION = "a flag handed between two hosts on one region, with or without the " \
                  "flush protocol; ns a round trip"
    OPTIONS = _options({"iterations": Option("iterations", "int", 20000, "round trips", min=1)})
    unused = staticmethod(_unused)

    @staticmethod
    def validate(params: dict, topology) -> None:
        check_placement({**params, "size": PAGES * PAGE}, _cpus(params), topology, BUFFERS)

    @staticmethod
    def run(params: dict) -> Measurement:
        n = params["iterations"]
        m = Measurement(kernel="xh_pingpong", isa="scalar", cpus=_cpus(params),
                        units={"round_trip": "ns", "one_way": "ns"},
                        info={"round_trips": n, "hosts": COHERENT})

        def figures(result, buf, generation) -> dict[str, float]:
            (ns, _) = result
            flags = [int(f) for f in buf.array(np.uint64)[list(FLAG_WORDS)]]
            want = (generation << 32) + n           # the flags count from the generation
            if flags != [want, want]:
                raise CheckError(f"the flags ended at {flags}, not {want} each")
            return {"round_trip": ns / n, "one_way": ns / n / 2}

        def op(addr, h, generation):
            return native.xh_pingpong(addr, PAGES * PAGE, h, n, params["protocol"],
                                      params["flush"], WAIT_S, generation)
        return _run(m, params, PAGES * PAGE, op, figures)


class SharedRing:
    NAME = "shared_ring"
    TITLE = TITLE
    BUFFERS = BUFFERS
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
    unused = staticmethod(_unused)

    @staticmethod
    def ring_bytes(params: dict) -> int:
        """The region the ring uses: the three pages and `slots` messages, each rounded
        up to lines (the placed buffer is whole pages; the ring sees only these)."""
        return PAGES * PAGE + params["slots"] * (-(-params["message"] // LINE) * LINE)

    @classmethod
    def size(cls, params: dict) -> int:
        return -(-cls.ring_bytes(params) // PAGE) * PAGE

    @classmethod
    def validate(cls, params: dict, topology) -> None:
        check_placement({**params, "size": cls.size(params)}, _cpus(params), topology,
                        BUFFERS)

    @classmethod
    def run(cls, params: dict) -> Measurement:
        n, message, size = params["messages"], params["message"], cls.size(params)
        protocol, simulate = params["protocol"], params["simulate"]
        # simulated: what the protocol leaves stale or torn, counted; its time is memcpy
        # between private copies, no figure of the region's.
        units = {"stale": "messages", "torn": "messages"} if simulate else \
            {"bandwidth": "GB/s", "messages": "M/s", "stale": "messages", "torn": "messages"}
        m = Measurement(kernel="xh_ring", isa="scalar", cpus=_cpus(params), units=units,
                        info={"messages": n, "slots": params["slots"],
                              "hosts": COHERENT if not simulate else SIMULATED})

        def figures(result, buf, generation) -> dict[str, float]:
            _, (ns, stale, torn) = result
            if protocol == "flush" and stale + torn:
                raise CheckError(f"with the protocol, {stale} messages were read stale and "
                                 f"{torn} torn: the region does not keep what was flushed")
            counts = {"stale": stale, "torn": torn}
            if simulate:
                return counts
            return {"bandwidth": n * message / ns, "messages": n / ns * 1e3, **counts}

        def op(addr, h, generation):
            return native.xh_ring(addr, cls.ring_bytes(params), h, n, message, protocol,
                                  params["flush"], WAIT_S, generation, simulate=simulate)
        return _run(m, params, size, op, figures)


BENCHMARKS = (SharedPingPong, SharedRing)
