"""How long a suite's cases will take, before any runs: each case's start (a worker of
its own, timed here: 0.5 s on the VM, 7 s in an emulated guest; and a CUDA context for a
GPU case) and the work its benchmark's estimate(params, figures) counts from the case's
options, at this machine's figures per node (Figures: a probe of under a second a node,
measured now and kept a day). The GPU benchmarks count from gpu.ASSUMED (a named
profile's published figures). A benchmark without estimate() leaves its cases
unestimated, and the total says how many."""
from __future__ import annotations

import errno
import json
import math
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from . import PACKAGE_PARENT, benchmarks, gpu, memory, ownfiles, results
from .errors import CxlbenchError, StorageError
from .placement import Placement
from .suite import Case
from .units import MAX_NODES, duration as _words

# The cases' server started (Python, numpy, cxlbench and its C core imported; pandas left
# to first use), once a run. Where it is timed (Figures.start_s), that is taken instead; it
# is also the yardstick of how fast this machine runs Python (Figures.cpu), and the
# benchmarks' CPU costs were fitted under its earlier form: a whole worker's start, pandas
# included, against 0.55 s (WORKER_S; about 15 times that under TCG). On the quiet 2-vCPU
# EPYC VM the server's import takes 0.16-0.21 s and the worker's took 0.37-0.40 (five
# each, side by side): 0.55 s scaled alike, so the factor keeps its meaning.
WORKER_S = 0.55
SERVER_S = 0.25
# A case's process forked from that server, its buffers placed and freed, the process gone:
# 0.03-0.15 s a case (median 0.05) for ten 16 KiB-8 MiB chase cases on the 2-vCPU EPYC VM
# (0.36-0.58 s when each case imported everything itself). Scaled by Figures.cpu.
CASE_S = 0.05
# A GPU case's CUDA context and the library's load on top (assumed: 0.3-1.5 s on
# published H100/H200 figures, the slow end taken).
GPU_CASE_S = 1.5
PROBE_DAYS = 1.0        # a probe's figures are kept this long
# numpy's random fill of a workload's values (rng.random, scaled to [-1, 1)): 1.1 GB/s on
# the VM, 100-115 MB/s in the cxl guest (probed there: its slowdown is numpy's own, not a
# worker start's).
FILL_BPS = 1e9


@dataclass
class NodeFigures:
    """What a node's memory costs the estimate: latency by working set (bytes, ns),
    streaming read rate on one thread and all (B/s), first-touch placement (B/s), and
    numpy's scan of it (B/s: fills and checks)."""
    sweep: list[tuple[float, float]]
    read_1: float
    read_all: float
    touch: float
    scan: float

    def latency_ns(self, working_set: float) -> float:
        """The sweep's latency at this working set (log-linear between its points)."""
        points = sorted(self.sweep)
        if working_set <= points[0][0]:
            return points[0][1]
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            if working_set <= x1:
                f = math.log(working_set / x0) / math.log(x1 / x0)
                return y0 + f * (y1 - y0)
        return points[-1][1]


@dataclass
class Figures:
    source: str                     # where they came from
    nodes: dict[int, NodeFigures]
    start_s: float = SERVER_S        # the server's start: Python, numpy and cxlbench imported
    fill_bps: float = 0.0           # numpy's random fill, B/s (0: not probed)

    @property
    def cpu(self) -> float:
        """How much slower than the VM this machine's CPU runs Python, numpy and kernels'
        own work (the server's start against SERVER_S; about 15 under TCG): memory costs
        are measured per node, CPU costs are scaled by this."""
        return max(1.0, self.start_s / SERVER_S)

    @property
    def case_s(self) -> float:
        """A case's own start: its process forked, placed and gone."""
        return CASE_S * self.cpu

    @property
    def fill(self) -> float:
        """B/s numpy fills a workload's buffers with random values at: probed, else the
        VM's scaled by how slow this machine's CPU is."""
        return self.fill_bps or FILL_BPS / self.cpu

    def of(self, mem) -> NodeFigures:
        """The figures of the slowest node a placement uses (the first node probed where
        it names none: local). KeyError where it names a node not probed."""
        wanted = Placement.of(mem).nodes if mem else ()
        found = [self.nodes[n] for n in wanted] or [self.nodes[min(self.nodes)]]
        return max(found, key=lambda f: f.latency_ns(1 << 30))


def nodes_of(cases, local: int) -> set[int]:
    """The nodes the cases place memory on (`local` for those that name none)."""
    out = set()
    for c in cases:
        mem = c.params.get("mem")
        out |= set(Placement.of(mem).nodes) if mem else set()
        if not mem or not Placement.of(mem).nodes:
            out.add(local)
    return out


def scaled(near: NodeFigures, ratio: dict) -> NodeFigures:
    """A far node's figures as an emulated guest's probe found it against the near one
    (emulate/probe.py's "tcg": loads, reads and first touches so many times slower)."""
    slow, read = ratio["slower"], ratio["read_slower"]
    touch = ratio.get("touch_slower", read)         # a guest's probe before it was timed
    return NodeFigures([(ws, ns * slow) for ws, ns in near.sweep], near.read_1 / read,
                       near.read_all / read, near.touch / touch, near.scan / read)


def for_cases(cases, topology, skipped=frozenset()) -> Estimate:
    """The cases' estimate, this machine's nodes probed where a CPU case needs them; in an
    emulated guest, the far node's the near node's scaled by the ratio the guest's probe
    measured (probing it would take long: the emulator makes it slow)."""
    cpu = [c for c in cases if c.id not in skipped and not c.bench.startswith("gpu_")
           and benchmarks.get(c.bench).estimate is not None]
    present = set(topology.memory_nodes)
    local = topology.memory_nodes[0] if topology.memory_nodes else 0
    wanted = nodes_of(cpu, local) & present
    if any(c.bench == "tiering" for c in cpu):      # its fast and slow nodes: every node
        wanted |= present
    ratio = ((topology.machine.get("emulated") or {}).get("far_memory_check") or {}).get("tcg")
    far = {ratio["far"]} & wanted if ratio else set()
    fig = figures((wanted - far) | ({ratio["near"]} if far else set()))
    if far and ratio["near"] in fig.nodes:
        fig.nodes[ratio["far"]] = scaled(fig.nodes[ratio["near"]], ratio)
        fig.source += (f"; node {ratio['far']} scaled from node {ratio['near']} by the "
                       f"emulator's measured {ratio['slower']:.0f}x")
    return of(cases, fig, skipped)


def _probe_node(node: int) -> NodeFigures:
    """Under a second of measurement: a chase at three working sets (L1, L2, past the
    caches), read bandwidth on one thread and all, and placing and scanning 16 MiB, all
    bound to the node (small: an emulated far node is slow)."""
    mem = str(Placement.bind(node))
    sweep = []
    for size in (32 << 10, 1 << 20, 64 << 20):
        m = benchmarks.get("chase").run({**_defaults("chase"), "size": size, "mem": mem,
                                         "loads": 20000, "repeat": 1, "warmup": 1})
        sweep.append((float(size), float(m.reps[-1]["latency"])))
    rates = []
    for n in (1, "all"):
        m = benchmarks.get("bandwidth").run({**_defaults("bandwidth"), "size": 16 << 20,
                                             "mem": mem, "threads": n, "passes": 2,
                                             "repeat": 1, "warmup": 0})
        rates.append(float(m.reps[-1]["bandwidth"]) * 1e9)
    t0 = time.perf_counter()
    a = memory.array(2 << 20, np.float64, mem=mem)
    a[:] = 1.0
    touch = a.nbytes / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    float(a.sum())
    scan = a.nbytes / (time.perf_counter() - t0)
    return NodeFigures(sweep, rates[0], rates[1], touch, scan)


def _probe_start() -> float:
    """Seconds the cases' server takes to start: a Python importing what it does (under
    an emulator, seconds)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import cxlbench.worker"],
                   cwd=PACKAGE_PARENT, check=True, capture_output=True, timeout=300)
    return time.perf_counter() - t0


def _probe_fill() -> float:
    """B/s of numpy's random fill as the workloads do it (1 MiB of float32 in [-1, 1)),
    the best of three."""
    rng, best = np.random.default_rng(1), math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        rng.random(1 << 18, dtype=np.float32) * 2 - 1
        best = min(best, time.perf_counter() - t0)
    return (1 << 20) / max(best, 1e-9)


def duration(seconds: float) -> str:
    """units.duration's words ('40 s', '3 min 20 s'); under half a second the figure
    itself ('0.4 s', '1e-300 s'), where the words would say 0 s of something that is not."""
    return f"{seconds:.2g} s" if 0 < abs(seconds) < 0.5 else _words(seconds)


def apart(a: float, b: float) -> tuple[str, str]:
    """Two durations (an estimate and the limit it is past) written with as many digits
    as it takes to tell them apart where the words would read alike (1.4 s past 1.2 s)."""
    out, digits = (duration(a), duration(b)), 2
    while out[0] == out[1] and a != b and digits <= 17:
        out, digits = (f"{a:.{digits}g} s", f"{b:.{digits}g} s"), digits + 1
    return out


def _defaults(bench: str) -> dict:
    return {k: o.default for k, o in benchmarks.get(bench).options.items()}


def _cache_file() -> Path:
    """This machine's kept figures (UserError where CXLBENCH_CACHE is empty or relative)."""
    return ownfiles.cache_root() / f"estimate-{results.machine_id()}.json"


def figures(nodes, probe=_probe_node, start=_probe_start, fill=_probe_fill) -> Figures:
    """This machine's figures for `nodes`, its workers' start and numpy's fill: a probe's
    kept from the last day, else probed now (and kept). What the cache holds is believed
    only as _read_cache lets it through; the rest is probed again, and said so."""
    path = _cache_file()
    kept, damaged = _read_cache(path)
    if damaged:
        print(f"note: discarded the estimate cache {path}: {damaged}; probing again",
              file=sys.stderr)
    fresh = {n: v for n, v in kept["nodes"].items() if _fresh(v)}
    changed = bool(damaged)
    found = {}
    for node in sorted(set(nodes)):
        if node not in fresh:
            try:
                f = asdict(probe(node))
                entry = {**f, "sweep": [list(p) for p in f["sweep"]], "when": time.time()}
                _node_entry(entry)      # a probe's NaN or nonsense is no figure either
            except Exception:   # noqa: BLE001 - a node not probed has no estimate, no more
                continue
            fresh[node], changed = entry, True
        f = {k: v for k, v in fresh[node].items() if k != "when"}
        found[node] = NodeFigures(**{**f, "sweep": [tuple(p) for p in f["sweep"]]})
    cpu = {}
    for key, measure, fallback in (("start", start, SERVER_S), ("fill", fill, 0.0)):
        if kept[key] is not None and _fresh(kept[key]):
            cpu[key] = kept[key]
            continue
        cpu[key], changed = _measured(key, measure, fallback), True
    if changed:
        text = json.dumps({"nodes": {str(n): v for n, v in fresh.items()}, **cpu})
        try:        # never through a link or onto a file left at its name
            ownfiles.write_atomic(ownfiles.cache_folder() / path.name, text, shared=True)
        except StorageError as e:
            print(f"note: the estimate's figures are not kept ({e}): probed again next run",
                  file=sys.stderr)
    return Figures("probed here (under a second a node, kept a day)", found,
                   cpu["start"]["value"], cpu["fill"]["value"])


def _fresh(entry: dict) -> bool:
    """Kept for less than PROBE_DAYS."""
    return time.time() - entry["when"] < PROBE_DAYS * 86400


def _measured(key: str, measure, fallback: float) -> dict:
    """A CPU figure measured now (`fallback` where that fails or gives nonsense, kept as
    stale: measured again next time)."""
    try:
        entry = {"value": measure(), "when": time.time()}
        _cpu_entry(key, entry)
        return entry
    except (OSError, subprocess.SubprocessError, ValueError):
        return {"value": fallback, "when": 0}


# What a kept figure may be and still be believed. A probe's lie well inside: loads of 1 ns
# to a few µs (an emulated far node), rates of MB/s (under TCG) to TB/s, a worker's start
# of 0.4 s (7 s under TCG) within the 300 s its probe waits at most. Outside them the file was damaged or
# written by another hand, and an estimate made from it would refuse every run.
NS = (0.01, 1e6)
BYTES = (1.0, float(1 << 63))
RATE = (1e4, 1e15)
START_S = (1e-3, 300.0)
# A probe's time a little ahead of the clock (the clock stepped back since) is believed;
# more is a date that would keep its entry for good.
CLOCK_SLACK_S = 300.0
# The cache is a few kB: more is not ours, and is not read whole.
CACHE_BYTES = 1 << 20
_NODE_FIELDS = frozenset(f.name for f in fields(NodeFigures)) | {"when"}


def _read_cache(path: Path) -> tuple[dict, str]:
    """The estimate cache's entries that read back exactly as figures() writes them
    ({"nodes": {node: entry}, "start": entry or None, "fill": entry or None}), and what
    was wrong with the rest ("" where nothing was). Each node's entry and each CPU figure
    stands or falls alone; a file that is not the cache's shape, or not a plain file of
    its own name (a link is never read through), falls whole."""
    none = {"nodes": {}, "start": None, "fill": None}
    try:
        raw = ownfiles.read_ours(path, CACHE_BYTES + 1)
    except FileNotFoundError:
        return none, ""
    except OSError as e:
        why = "a symbolic link" if e.errno == errno.ELOOP else e.strerror or str(e)
        return none, f"{why}, not a file cxlbench wrote"
    try:
        if len(raw) > CACHE_BYTES:
            raise ValueError(f"over {CACHE_BYTES} bytes")
        data = json.loads(raw)
    except (ValueError, RecursionError) as e:
        return none, f"not JSON ({str(e)[:80]})"
    if not isinstance(data, dict):
        return none, f"a JSON {type(data).__name__}, not an object of nodes, start and fill"
    if set(data) != {"nodes", "start", "fill"}:
        return none, f"fields {str(sorted(data))[:80]}, not nodes, start and fill"
    if not isinstance(data["nodes"], dict):
        return none, "nodes is not an object of node numbers"
    out, wrong = {"nodes": {}, "start": None, "fill": None}, []
    for key, entry in data["nodes"].items():
        try:
            node = _node_key(key)
            out["nodes"][node] = _node_entry(entry)
        except ValueError as e:
            wrong.append(f"node {key[:20]!r}: {e}")
    for key in ("start", "fill"):
        try:
            out[key] = _cpu_entry(key, data[key])
        except ValueError as e:
            wrong.append(f"{key}: {e}")
    return out, "; ".join(wrong[:3]) + (f"; and {len(wrong) - 3} more" if len(wrong) > 3 else "")


def _node_key(key: str) -> int:
    """A node's number as figures() writes it: decimal, canonical, one Linux can have."""
    if not (key.isascii() and key.isdigit() and str(int(key)) == key and
            int(key) < MAX_NODES):
        raise ValueError(f"not a node number below {MAX_NODES}")
    return int(key)


def _number(value, low: float, high: float, what: str) -> float:
    """value where it is a JSON number (not a boolean) within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not low <= value <= high:       # (NaN fails every comparison)
        raise ValueError(f"{what} is {value!r:.40}, not a number in [{low:g}, {high:g}]")
    return float(value)


def _when(value) -> float:
    """A probe's time: not in the future (beyond the clock's slack)."""
    when = _number(value, 0.0, sys.float_info.max, "when (seconds since 1970)")
    if when > (now := time.time()) + CLOCK_SLACK_S:
        raise ValueError(f"when is {when:.0f}, {when - now:.0f} s in the future")
    return when


def _node_entry(entry) -> dict:
    """A node's kept figures, as figures() writes them: NodeFigures' fields and when."""
    if not isinstance(entry, dict) or set(entry) != _NODE_FIELDS:
        raise ValueError("fields " + (str(sorted(entry))[:80] if isinstance(entry, dict) else
                                      type(entry).__name__) + f", not {sorted(_NODE_FIELDS)}")
    sweep = entry["sweep"]
    if not isinstance(sweep, list) or not 1 <= len(sweep) <= 64 or \
            not all(isinstance(p, list) and len(p) == 2 for p in sweep):
        raise ValueError("sweep is not 1 to 64 pairs [working set, latency]")
    for ws, ns in sweep:
        _number(ws, *BYTES, "a working set (B)")
        _number(ns, *NS, "a latency (ns)")
    for key in ("read_1", "read_all", "touch", "scan"):
        _number(entry[key], *RATE, f"{key} (B/s)")
    _when(entry["when"])
    return entry


def _cpu_entry(key: str, entry) -> dict:
    """A CPU figure kept: {"value", "when"}; a start in START_S, a fill a RATE or 0 (not
    probed)."""
    if not isinstance(entry, dict) or set(entry) != {"value", "when"}:
        raise ValueError("not an object of value and when")
    if key == "start":
        _number(entry["value"], *START_S, "a worker's start (s)")
    elif entry["value"] != 0 or isinstance(entry["value"], bool):
        _number(entry["value"], *RATE, "numpy's fill (B/s)")
    _when(entry["when"])
    return entry


def case_seconds(case, fig: Figures | None, skipped: bool = False) -> float | None:
    """The case's start and its work; a case this machine skips only starts. None where
    its benchmark has no estimate, or a CPU one has no figures here."""
    bench = benchmarks.get(case.bench)
    start = fig.case_s if fig else CASE_S
    if skipped:
        return start
    gpu_case = case.bench.startswith("gpu_")
    if bench.estimate is None or (fig is None and not gpu_case):
        return None
    try:
        work = bench.estimate(case.params, fig)
    except (KeyError, ValueError, CxlbenchError):   # a placement the figures do not cover,
        return None                                 # or values the benchmark refuses
    return start + (GPU_CASE_S if gpu_case else 0.0) + work


@dataclass
class Estimate:
    cases: dict[str, float | None]      # case id -> seconds (None: not estimated)
    jobs: dict[str, tuple[int, float, int]]   # job -> (cases, seconds, cases unestimated)
    gpu: bool                                 # GPU cases among them
    source: str                               # where the CPU figures came from
    figures: Figures | None = None

    def record(self) -> dict:
        """What run.json keeps: the source, the figures and each case's seconds, so the
        estimate can be made again from them and set beside what the cases took."""
        return {"source": self.source,
                "start_s": self.start_s, "case_start_s": self.case_start_s,
                "fill_bps": self.figures.fill_bps if self.figures else 0.0,
                "figures": {str(n): asdict(f) for n, f in self.figures.nodes.items()}
                if self.figures else {},
                "cases": {k: None if v is None else round(v, 3) for k, v in self.cases.items()}}

    @property
    def start_s(self) -> float:
        """The cases' server's start, paid once a run."""
        return self.figures.start_s if self.figures else SERVER_S

    @property
    def case_start_s(self) -> float:
        return self.figures.case_s if self.figures else CASE_S

    @property
    def seconds(self) -> float:
        """Every case's, and the server's start where any case runs."""
        cases = sum(s for _, s, _ in self.jobs.values())
        return cases + (self.start_s if cases else 0.0)

    @property
    def unestimated(self) -> int:
        return sum(u for _, _, u in self.jobs.values())

    def lines(self) -> list[str]:
        """A line a job, then the total, and where the figures come from."""
        out = []
        for job, (n, s, missing) in self.jobs.items():
            more = f" (+{missing} not estimated)" if missing else ""
            out.append(f"  {job}: {n} case{'s' if n != 1 else ''}, ~{duration(s)}{more}")
        total = f"estimated time: ~{duration(self.seconds)}"
        if self.unestimated:
            total += f", and {self.unestimated} cases with no estimate"
        sources = [f"a case's start {self.case_start_s:.2g} s and its server's "
                   f"{self.start_s:.2g} s, once" +
                   (", timed here" if self.figures else ", as on the 2-vCPU VM")]
        if self.source:
            sources.append(f"memory figures {self.source}")
        if self.gpu:
            sources.append(f"GPU cases' work from {gpu.ASSUMED['profile']}")
        out.append(f"{total} ({'; '.join(sources)})")
        return out


def of(cases, fig: Figures | None, skipped=frozenset()) -> Estimate:
    jobs: dict[str, tuple[int, float, int]] = {}
    per: dict[str, float | None] = {}
    for case in cases:
        n, s, missing = jobs.get(case.job, (0, 0.0, 0))
        t = per[case.id] = case_seconds(case, fig, case.id in skipped)
        jobs[case.job] = (n + 1, s + (t or 0.0), missing + (t is None))
    return Estimate(per, jobs, any(c.bench.startswith("gpu_") for c in cases),
                    fig.source if fig else "", fig)


def recorded_figures(meta: dict) -> Figures | None:
    """The figures a run's estimates were made from (run.json's "estimates")."""
    kept = meta.get("estimates", {}).get("figures")
    if not kept:
        return None
    return Figures(meta["estimates"]["source"],
                   {int(n): NodeFigures(**{**f, "sweep": [tuple(p) for p in f["sweep"]]})
                    for n, f in kept.items()},
                   meta["estimates"]["start_s"] if "start_s" in meta["estimates"] else
                   # before the server: a case's whole worker, in today's yardstick
                   meta["estimates"].get("case_start_s", WORKER_S) * SERVER_S / WORKER_S,
                   meta["estimates"].get("fill_bps", 0.0))


# --fit sizes a case to this share of its timeout: room for the estimate's own error.
FIT_SHARE = 0.8
# What --fit lowers, in this order: repetitions; then counts of work (the same thing
# measured, fewer times); then sizes (a smaller working set: a different thing, last).
# A tiering run's workload options are counted as theirs (embedding.batch: lookups).
FIT_ORDER = ("repeat", "loads", "iterations", "epochs", "passes", "steps", "embedding.batch",
             "kvcache.steps", "size", "load_size", "rows", "params", "embedding.rows",
             "optimizer.params", "checkpoint.size")
# Floors --fit keeps: below two repetitions a case has no spread to show; below two
# epochs an online tiering policy never runs on what it moved.
FLOORS = {"repeat": 2, "epochs": 2}


def _smaller(bench, key: str, value):
    """The option's value halved, where the option takes it (its minimum, its multiple);
    None where it cannot go lower (or is a word such as auto)."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 1:
        return None
    option = bench.option(key)
    new = value // 2
    if option.multiple:
        new -= new % option.multiple
    if key in FLOORS:
        new = max(new, FLOORS[key]) if value > FLOORS[key] else value
    try:
        new = option.convert(new)
    except ValueError:
        return None
    return new if new != value else None


# A step of --fit that saves less than this share of a case's estimate is passed over for
# the next option (lookups halved where filling the table is most of the time).
MIN_GAIN = 0.05


def _step(bench, params: dict, cost, clash) -> tuple[str, object] | None:
    """The first option in FIT_ORDER that can still go lower and, halved, saves at least
    MIN_GAIN of the case's estimate (cost(params) -> seconds, None where it cannot say)
    without making the case another of its job (clash(params): a sweep's 64M halved onto
    its 32M), and its value halved; None where none does."""
    now = cost(params)
    if now is None:
        return None
    for key in FIT_ORDER:
        if key not in params or (new := _smaller(bench, key, params[key])) is None:
            continue
        after = cost({**params, key: new})
        if after is not None and after <= now * (1 - MIN_GAIN) and \
                not clash({**params, key: new}):
            return key, new
    return None


def _two_hosts(case) -> bool:
    """A case of two hosts sharing a region (host=0 or 1): each host fits its own run, so
    such a case is never scaled (the two would no longer meet on the same case)."""
    return case.params.get("host") in ("0", "1")


def fit(cases, fig: Figures | None, skipped=frozenset(), budget: float | None = None):
    """The cases scaled down until each is estimated within FIT_SHARE of its timeout and,
    with a `budget` (seconds for the whole run), their total within FIT_SHARE of it. A
    step takes the case furthest past its timeout (else the longest), halves the first
    option of FIT_ORDER it can still lower to some gain (MIN_GAIN), and halves it alike
    in every case of its benchmark that was given the same value: cases that shared a
    setting still share it, so they compare (a tiering policy's share against all-fast).
    Returns the cases and what changed: {case id: {"changed": {option: [was, now]},
    "estimate_s": [was, now]}}. A case that cannot go lower is left as it is, to the
    refusals."""
    params = {c.id: dict(c.params) for c in cases}
    est = {c.id: case_seconds(c, fig, c.id in skipped) for c in cases}
    was = dict(est)
    server = fig.start_s if fig else SERVER_S
    movable = [c for c in cases
               if est[c.id] is not None and c.id not in skipped and not _two_hosts(c)]
    stuck: set[str] = set()

    def past(c) -> float:
        return est[c.id] - FIT_SHARE * c.params.get("timeout", 600)

    def cost(c, p):
        return case_seconds(Case(c.id, c.job, c.bench, p), fig)

    def clash(c, p) -> bool:
        return any(d.job == c.job and d.id != c.id and params[d.id] == p for d in cases)

    while True:
        free = [c for c in movable if c.id not in stuck]
        late = [c for c in free if past(c) > 0]
        if late:
            case = max(late, key=past)
        elif free and budget is not None and \
                server + sum(t or 0.0 for t in est.values()) > FIT_SHARE * budget:
            case = max(free, key=lambda c: est[c.id])
        else:
            break
        step = _step(benchmarks.get(case.bench), params[case.id],
                     lambda p, c=case: cost(c, p), lambda p, c=case: clash(c, p))
        if step is None:
            stuck.add(case.id)
            continue
        key, new = step
        old = params[case.id][key]
        for c in cases:         # those that were alike and still are (and will run)
            if c.bench == case.bench and c.params.get(key) == case.params[key] and \
                    params[c.id].get(key) == old and not _two_hosts(c) and \
                    c.id not in skipped:
                params[c.id][key] = new
                if est[c.id] is not None:
                    est[c.id] = cost(c, params[c.id]) or est[c.id]
    out = [Case(c.id, c.job, c.bench, params[c.id]) for c in cases]
    changes = {}
    for c in cases:
        changed = {k: [c.params[k], v] for k, v in params[c.id].items() if v != c.params[k]}
        if changed:         # estimate_s None: a case without an estimate, halved alike
            changes[c.id] = {"changed": changed, "estimate_s": None if was[c.id] is None
                             else [round(was[c.id], 1), round(est[c.id], 1)]}
    return out, changes
