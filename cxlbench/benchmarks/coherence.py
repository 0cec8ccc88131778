"""Cache-line transfer and atomics on a line homed on a chosen node (CPU-less included).

pingpong: two threads hand one line back and forth (a store or a compare-and-swap);
ns per one-way transfer. atomics: threads increment a shared word (fetch-and-add or CAS),
words on lines of their own, or neighbouring words of one line (false sharing);
operations per second and Jain's fairness over the threads' rates."""
from __future__ import annotations

import numpy as np

from ..errors import CheckError, UserError
from ..memory import native
from ..options import Option, pick
from .common import Measurement, check_placement, measure, place, resolve_cpus

# CXB_PINGPONG_* and CXB_ATOMIC_* in native/cxlbench.h, in value order (tested against
# native's): the option table needs them where the core is not built.
PINGPONG_MODES = ("store", "cas")
ATOMIC_MODES = ("faa", "cas", "private", "false_sharing")
LINE, PAGE = 64, 4096
LINE_WORDS = LINE // 8          # false sharing: one 64-bit counter per thread in one line


def _options(modes: tuple, default_iterations: int, extra: dict) -> dict:
    return {
        "mode": Option("mode", "choice", modes[0], "how the line changes hands",
                       choices=modes, expand={"all": modes}),
        "iterations": Option("iterations", "int", default_iterations,
                             "round trips (pingpong) or operations per thread (atomics)",
                             min=1),
        **extra,
        **pick("mem", "page", "repeat", "warmup", "tolerance", "timeout"),
    }


def _buffer_size(threads: int) -> int:
    """Whole pages holding a line per thread (mode private); the shared line is the first."""
    return -(-threads * LINE // PAGE) * PAGE


def _line_buffer(params: dict, cpus: list[int], buffers: tuple[str, ...]):
    """The pages placed by `mem`; the line(s) at their start are the shared ones."""
    (buf,) = place({**params, "size": _buffer_size(len(cpus))}, cpus, buffers)
    return buf, buf.array(np.uint64)


class PingPong:
    NAME = "pingpong"
    TITLE = "Cache-line transfer (ping-pong)"
    BUFFERS = ("line",)
    DESCRIPTION = "one cache line bounced between two CPUs; ns per one-way transfer"
    OPTIONS = _options(PINGPONG_MODES, 200000, {
        "cpus": Option("cpus", "cpus", "", "the two CPUs (a,b); * = one CPU per node against "
                       "each other plus two CPUs of one node; default: the first two allowed",
                       nodes="pairs")})

    @staticmethod
    def cpus(params: dict) -> list[int]:
        cpus = resolve_cpus({**params, "threads": "all"})
        if len(cpus) < 2:
            raise UserError("pingpong needs two CPUs (cpus=a,b)")
        return cpus[:2]

    @classmethod
    def validate(cls, params: dict, topology) -> None:
        check_placement({**params, "size": PAGE}, cls.cpus(params), topology, cls.BUFFERS)

    @staticmethod
    def estimate(params: dict, figures) -> float:
        """Seconds of the case's work: each repetition's round trips, a transfer each way
        at the line's node's memory latency (a cross-node one pays about that)."""
        f = figures.of(params["mem"])
        reps = params["warmup"] + params["repeat"]
        return reps * 2 * params["iterations"] * f.latency_ns(1 << 30) * 1e-9

    @classmethod
    def run(cls, params: dict) -> Measurement:
        cpus = cls.cpus(params)
        buf, words = _line_buffer(params, cpus, cls.BUFFERS)
        mode, n = PINGPONG_MODES.index(params["mode"]), params["iterations"]

        def once() -> dict[str, float]:
            words[0] = 0
            ns, _ = native.pingpong(buf.addr, mode, n, cpus)
            if int(words[0]) != 2 * n:
                raise CheckError(f"the line counted {int(words[0])} transfers, not {2 * n}")
            return {"latency": ns / (2 * n)}

        m = Measurement(kernel=f"pingpong_{params['mode']}", isa="scalar", cpus=cpus,
                        units={"latency": "ns"}, info={"transfers": 2 * n})
        return measure(m, params, [buf], once)


class Atomics:
    NAME = "atomics"
    TITLE = "Atomics and sharing"
    BUFFERS = ("lines",)
    DESCRIPTION = "atomics on shared, private and falsely shared lines; Mops/s and fairness"
    OPTIONS = _options(ATOMIC_MODES, 1000000, pick("threads", "cpus", threads="all"))

    @staticmethod
    def clipped_cpus(params: dict) -> tuple[list[int], str | None]:
        """The case's CPUs, and a note where false sharing clipped threads=all to a line's
        words (so "all" sweeps run on machines of any size). An explicit count above them
        is refused: its results would carry a thread count that did not run."""
        cpus = resolve_cpus(params)
        if params["mode"] == "false_sharing" and len(cpus) > LINE_WORDS:
            if params["threads"] != "all":
                raise UserError(f"atomics: false sharing fits {LINE_WORDS} threads in a "
                                f"{LINE}-byte line, not threads={params['threads']}")
            return cpus[:LINE_WORDS], (f"false sharing fits {LINE_WORDS} threads in a "
                                       f"{LINE}-byte line: runs {LINE_WORDS} of the "
                                       f"{len(cpus)} CPUs threads=all gives")
        return cpus, None

    @classmethod
    def validate(cls, params: dict, topology) -> str | None:
        cpus, note = cls.clipped_cpus(params)
        check_placement({**params, "size": _buffer_size(len(cpus))}, cpus, topology,
                        cls.BUFFERS)
        return note

    @staticmethod
    def estimate(params: dict, figures) -> float:
        """Seconds of the case's work: each repetition's operations, every thread's in turn
        on a shared line (a transfer each, at the node's latency), or alone on its own
        (a cached add, a few ns)."""
        f = figures.of(params["mem"])
        threads = len(Atomics.clipped_cpus(params)[0])
        each = 5e-9 if params["mode"] == "private" else f.latency_ns(1 << 30) * 1e-9
        shared = 1 if params["mode"] == "private" else threads
        return (params["warmup"] + params["repeat"]) * params["iterations"] * shared * each

    @classmethod
    def run(cls, params: dict) -> Measurement:
        cpus, note = cls.clipped_cpus(params)
        buf, words = _line_buffer(params, cpus, cls.BUFFERS)
        mode, n = ATOMIC_MODES.index(params["mode"]), params["iterations"]

        def once() -> dict[str, float]:
            words[:] = 0
            ns, per_thread = native.atomics(buf.addr, mode, n, cpus)
            total = int(words.sum())
            if total != len(cpus) * n:
                raise CheckError(f"counters sum to {total}, not {len(cpus)} x {n}")
            rates = [n / t for t in per_thread]
            fairness = sum(rates) ** 2 / (len(rates) * sum(r * r for r in rates))
            return {"throughput": len(cpus) * n / ns * 1e3, "fairness": fairness}

        m = Measurement(kernel=f"atomic_{params['mode']}", isa="scalar", cpus=cpus,
                        units={"throughput": "Mops/s", "fairness": "jain"},
                        info={"threads": len(cpus), **({"note": note} if note else {})})
        return measure(m, params, [buf], once)


BENCHMARKS = (PingPong, Atomics)     # the registry's records of this module
