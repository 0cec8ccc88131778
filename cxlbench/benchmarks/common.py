"""What every benchmark does around its kernel: resolve CPUs, place and verify buffers,
warm up, repeat, and report. Runs inside the case's worker process."""
from __future__ import annotations

import functools

import os
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable

from ..errors import CxlbenchError, UserError
from ..memory import PAGE_SIZES, Buffer, Placement, check_request
from ..options import buffer_spec
from ..tiering import calibration, model
from ..topology import Topology
from ..units import format_list, parse_list


@dataclass
class Measurement:
    kernel: str
    isa: str
    cpus: list[int]
    units: dict[str, str]                       # metric -> unit
    reps: list[dict[str, float]] = field(default_factory=list)
    placement: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    status: str = "ok"
    error: str | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


VMSTAT_PREFIXES = ("pgpromote_", "pgdemote_", "pgmigrate_", "numa_")


def vmstat(path: str = "/proc/vmstat") -> dict[str, int]:
    """The migration and NUMA counters of /proc/vmstat."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key.startswith(VMSTAT_PREFIXES):
                    out[key] = int(value)
    except OSError:
        pass
    return out


def as_case_of(bench, params: dict, **fixed) -> dict:
    """`params` as a case of another benchmark (matrix cells, sweep points): its defaults,
    then the options the two share, then `fixed`."""
    out = {name: opt.default for name, opt in bench.OPTIONS.items()}
    out.update({k: v for k, v in params.items() if k in bench.OPTIONS})
    out.update(fixed)
    return out


def estimate_of_another(delegate):
    """estimate() of a benchmark whose cases are another's: the other's, for the case
    `delegate` makes (None where the other has no estimate)."""
    def estimate(params: dict, figures) -> float:
        bench, p = delegate(params, _topology())
        if not hasattr(bench, "estimate"):
            raise KeyError(bench.NAME)      # counted as not estimated
        return bench.estimate(p, figures)
    return estimate


@functools.lru_cache(maxsize=1)
def _topology() -> Topology:
    """Read once for a run's estimates (delegates ask it for every case)."""
    return Topology.read(probe_gpus=False)


def cases_of_another(delegate, info=None):
    """validate and run of a benchmark whose cases are another's (matrix cells, sweep points,
    random_bw): `delegate(params, topology=None) -> (benchmark, its params)`; `info(params,
    its params)`, if given, adds to the Measurement's info."""
    def validate(params: dict, topology):
        bench, p = delegate(params, topology)
        return bench.validate(p, topology)

    def run(params: dict):
        bench, p = delegate(params)
        m = bench.run(p)
        if info is not None:
            m.info.update(info(params, p))
        return m
    return validate, run


# Set while cases are checked against a topology (precheck): its CPUs, not this process's.
_CHECKED_CPUS: ContextVar[list[int] | None] = ContextVar("checked_cpus", default=None)


@contextmanager
def cpus_of(topology: Topology):
    """resolve_cpus answers for `topology`'s allowed CPUs inside this block."""
    token = _CHECKED_CPUS.set(topology.allowed_cpus)
    try:
        yield
    finally:
        _CHECKED_CPUS.reset(token)


def resolve_cpus(params: dict) -> list[int]:
    """cpus (default: the CPUs this process may use) narrowed to `threads` of them."""
    allowed = _CHECKED_CPUS.get() or sorted(os.sched_getaffinity(0))
    cpus = parse_list(params["cpus"]) if params.get("cpus") else allowed
    missing = sorted(set(cpus) - set(allowed))
    if missing:
        raise UserError(f"CPUs {format_list(missing)} are not available here "
                        f"(allowed: {format_list(allowed)})")
    threads = params.get("threads", 1)
    if threads == "all":
        return cpus
    if threads > len(cpus):
        raise UserError(f"threads={threads} needs {threads} CPUs, only {len(cpus)} "
                        f"given ({format_list(cpus)})")
    return cpus[:threads]


def _sizes(params: dict, buffers: tuple[str, ...] | dict[str, int]) -> dict[str, int]:
    """Bytes of each buffer: given by name, or params['size'] each."""
    return buffers if isinstance(buffers, dict) else dict.fromkeys(buffers, params["size"])


def check_placement(params: dict, cpus: list[int], topology: Topology,
                    buffers: tuple[str, ...] | dict[str, int], claimed: dict | None = None) -> None:
    """In the parent, before a run directory exists: refuse what the machine cannot give
    the named buffers (of params['size'] each, or the bytes given), all of them together
    on each node, each in whole pages. `claimed` carries the tally across calls for one
    case's buffers placed from different CPUs."""
    groups: dict[tuple[Placement, str], list[str]] = {}
    sizes = _sizes(params, buffers)
    for name in sizes:
        groups.setdefault(buffer_spec(params, name), []).append(name)
    claimed = {} if claimed is None else claimed
    for (mem, page), names in groups.items():
        pages = sum(-(-sizes[n] // PAGE_SIZES[page]) for n in names)
        try:
            check_request(mem, page, pages * PAGE_SIZES[page], topology, cpus, claimed)
        except UserError as e:
            if len(groups) == 1:
                raise
            raise type(e)(f"buffer{'s' * (len(names) > 1)} {', '.join(names)} (mem={mem} "
                          f"page={page}): {e}") from None


def place(params: dict, cpus: list[int], buffers: tuple[str, ...] | dict[str, int],
          topology: Topology | None = None) -> list[Buffer]:
    """The named buffers (of params['size'] each, or the bytes given), each placed by its
    own mem.<name> and page.<name> or else the case's mem and page, prefaulted from `cpus`.
    Each Buffer checks its request against what is free now (check_placement's check ran
    in the parent, before the run). Refuses to go on if the kernel did not honour a
    placement (or, for page=thp, gave small pages)."""
    topology = topology or Topology.read(probe_gpus=False)
    sizes = _sizes(params, buffers)
    specs = {name: buffer_spec(params, name) for name in sizes}
    out = [Buffer(sizes[name], mem=mem, page=page, cpus=cpus, topology=topology,
                  tolerance=params["tolerance"], name=name)
           for name, (mem, page) in specs.items()]
    for b in out:
        b.ensure_placed("after allocation")
    return out


def timed_in_one_call(timed: Callable[[], list],
                      figures: Callable[[object], dict[str, float]]
                      ) -> Callable[[], dict[str, float]]:
    """once() for measure() where one call of C times every repetition itself (the GPU's
    launches, events around each): the first once() makes that call (`timed()`, each
    repetition's time in order, warm-ups first), each once() hands out the next's figures."""
    left: list = []
    started = False

    def once() -> dict[str, float]:
        nonlocal started
        if not started:
            started = True
            left.extend(reversed(timed()))
        return figures(left.pop())
    return once


def unplaced(spec: str) -> dict:
    """The placement record of memory cxlbench did not place (the CUDA driver's, device
    memory): what it is, nothing verified."""
    return {"spec": spec, "page": None, "method": None, "verified": []}


def measure(m: Measurement, params: dict, buffers: list[Buffer],
            once: Callable[[], dict[str, float]]) -> Measurement:
    """Warm up, repeat, then verify placement again. A placement that drifted, or huge
    pages split, fails the case, but the repetitions and the verified counts and huge
    fraction of each buffer are kept either way."""
    before = vmstat()
    for _ in range(params["warmup"]):
        once()
    m.reps = [once() for _ in range(params["repeat"])]
    after = vmstat()
    # What the kernel moved meanwhile (NUMA balancing, promotion, demotion, migration).
    m.info["vmstat"] = {k: after[k] - before.get(k, 0) for k in after
                        if after[k] != before.get(k, 0)}
    verified = [b.verify() for b in buffers]
    methods = {b.placement_method for b in buffers}
    m.placement = {"spec": str(params["mem"]), "page": params["page"],
                   "method": methods.pop() if len(methods) == 1 else
                   " ".join(f"{b.name}={b.placement_method}" for b in buffers) or None,
                   "verified": [{"buffer": b.name, "spec": str(b.placement), "page": b.page,
                                 "method": b.placement_method, **v.to_dict()}
                                for b, v in zip(buffers, verified)]}
    for b, v in zip(buffers, verified):
        if not v.ok:
            m.status, m.error = "failed", b.failure(v, "after the case")
            break
    return m


def predict(m: Measurement, buffer: Buffer, demand, metric: str, per_ns: float) -> None:
    """The calibrated model's figure for `metric` (demand.units / ns x per_ns), recorded
    in m.info["model"] beside the measurement with the calibration it came from, where
    this machine has one of the node `buffer` sits on (bound to one node, or local: the
    CPUs' own). Nothing where it has none, or the demand is None (not modelled)."""
    where = buffer.placement
    cpu_node = next((n.id for n in Topology.read(probe_gpus=False).nodes
                     if m.cpus and m.cpus[0] in n.cpus), None)
    node = where.nodes[0] if where.policy == "bind" else \
        cpu_node if where.policy == "local" else None
    if demand is None or node is None:
        return
    try:
        cal = calibration.measured(node)
    except CxlbenchError as e:      # the measurement stands; the prediction says why not
        m.info["model_unavailable"] = str(e)
        return
    if cal is None:
        return
    ns = model.predict_ns(demand, (cal, cal), len(m.cpus))
    m.info["model"] = {"metric": metric, "predicted": demand.units / ns * per_ns,
                       "node": node, "kind": cal.kind, "source": cal.source}
    # The same work on the default slow-tier profile of this node: the slowdown a
    # machine without a slower node can only be told by the model.
    name = calibration.default_profile()
    slow = calibration.profile_tier(cal, name, None)
    m.info["model"]["slower"] = {"profile": name, "source": slow.source, "slowdown":
                                 model.predict_ns(demand, (slow, slow), len(m.cpus)) / ns - 1}


# numpy's random draws and gathers run about this many times slower than its scan (the
# estimate's rate for a workload's fills and references; 2-3 GB/s against 24 on the VM).
NUMPY_SLOWER = 10.0
MLP = 8.0       # misses one thread of a workload's kernel keeps in flight, for the estimate
# numpy's normal draw, one float32 (rng.standard_normal: 9.8 ns on the VM; uniform 1.8 ns).
DRAW_S = 10e-9


def workload_seconds(params: dict, figures, buffer: str, placed: int, per_rep: float,
                     randoms: float = 0.0, working_set: float = 0.0,
                     numpy_bytes: float = 0.0, numpy_per_rep: float = 0.0,
                     draws_per_rep: float = 0.0) -> float:
    """A workload benchmark's estimated seconds at the figures of its main buffer's node:
    its buffers placed and filled, then every repetition's streamed bytes at one thread's
    or all threads' rate and its random accesses at the working set's latency (MLP in
    flight), plus numpy's gathers and reference sums (bytes), once and per repetition,
    and its random draws per repetition."""
    f = figures.of(params.get(f"mem.{buffer}") or params["mem"])
    rate = f.read_1 if params.get("threads", 1) == 1 else f.read_all
    reps = params["warmup"] + params["repeat"]
    numpy = NUMPY_SLOWER / f.scan
    per = per_rep / rate + randoms * f.latency_ns(working_set) * 1e-9 / MLP + \
        numpy_per_rep * numpy + draws_per_rep * DRAW_S * figures.cpu
    return placed * (1 / f.touch + 1 / f.scan) + numpy_bytes * numpy + reps * per

