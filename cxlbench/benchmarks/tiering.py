"""Tiering: an ML workload runs in epochs while a policy decides which pages of its main
buffer sit on the fast node, under a capacity of `share` of them. The real engine moves the
pages with move_pages(2) and verifies every page each epoch; the model engine predicts the
time from each tier's figures (this machine's calibration, a slow tier scaled by HMAT or a
named profile), and answers on a machine of one node. Every
case reports the workload's throughput, the share of accesses the fast node served, and
what the policy moved; a real case reports the model's prediction beside its measurement.
Knees, slowdowns and the gap to the oracle compare cases (cxlbench tiering, the report)."""
from __future__ import annotations

import math
import time

import numpy as np

from ..errors import UserError
from .. import memory
from ..options import Option, pick
from ..placement import Placement
from ..tiering import calibration, engine, model
from ..tiering.policies import KNOBS, POLICIES, knob_name
from ..tiering.policies import linux as linux_policy
from ..topology import Topology
from ..units import format_list
from ..workloads import TIERED
from . import migrate
from .common import MLP, Measurement, check_placement, place, resolve_cpus, vmstat
from .common import _topology as _estimate_topology

NAME = "tiering"
TITLE = "Tiering policies"
DESCRIPTION = "a workload's pages placed each epoch by a tiering policy within a fast-tier " \
              "share (throughput, fast-node hits, pages moved)"
BUFFERS = tuple(dict.fromkeys(b for w in TIERED.values() for b in w.BUFFERS))


def buffers_of(params: dict) -> tuple[str, ...]:
    return TIERED[params["workload"]].BUFFERS


# Each workload's own options, as <workload>.<option>.
WORKLOAD_OPTIONS = {work: {f"{work}.{name}": opt.but(name=f"{work}.{name}")
                           for name, opt in epochs.OPTIONS.items()}
                    for work, epochs in TIERED.items()}


def own(params: dict, work: str) -> dict:
    """The options of workload `work` in a case's params, by their names in its table."""
    prefix = f"{work}."
    return {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}


def workload(params: dict):
    """The case's workload, its Epochs built from its own options."""
    name = params["workload"]
    return TIERED[name](own(params, name), params["seed"], params["epochs"], params["phase"])


OPTIONS = {
    "workload": Option("workload", "choice", "embedding", "the workload whose pages are "
                       "tiered", choices=tuple(TIERED), expand={"all": tuple(TIERED)}),
    "policy": Option("policy", "choice", "first-touch", "the tiering policy",
                     choices=tuple(POLICIES),
                     expand={"all": tuple(p for p in POLICIES if p != "linux")}),
    "share": Option("share", "float", 0.25, "the fast tier's capacity: this share of the "
                    "tiered buffer's pages (all-slow is share 0)", min=1e-6, max=1.0,
                    expand={"halving": (1.0, 0.5, 0.25, 0.125, 0.0625)}),
    "engine": Option("engine", "choice", "auto", "real: pages moved and the workload timed "
                     "(two memory nodes); model: predicted from each tier's latency and "
                     "bandwidth; auto: real where it can run", choices=("auto", "real", "model")),
    "fast": Option("fast", "int", "auto", "the fast node (auto: the first CPU's)", min=0,
                   words=("auto",)),
    "slow": Option("slow", "int", "auto", "the slow node (auto: a node of memory and no "
                   "CPUs, else the farthest other)", min=0, words=("auto",)),
    "epochs": Option("epochs", "int", 8, "epochs the workload runs, the policy deciding "
                     "after each", min=2, max=1000),
    "phase": Option("phase", "choice", "none", "shift: the hot set moves halfway through "
                    "(which policies adapt)", choices=("none", "shift")),
    "move_ms": Option("move_ms", "float", 0.0, "real engine: an epoch's moves stop at the "
                      "first 1024-page chunk after this many ms (0: no limit)", min=0.0,
                      unit="ms"),
    "mlp": Option("mlp", "float", 10.0, "model: misses a thread keeps in flight (its "
                  "latency is shared among them)", min=1.0, max=1024.0),
    "migrate_gbs": Option("migrate_gbs", "float", 0.0, "model: GB/s pages move at (0: the "
                          "migrate cases of tiers_from, else an assumed 2)", unit="GB/s",
                          min=0.0),
    "calibration": Option("calibration", "path", "", "model: a calibration run (cxlbench "
                          "calibrate) whose node figures the model takes; empty: this "
                          "machine's newest under results/, where there is one"),
    "slow_tier": Option("slow_tier", "choice", "auto", "model: the slow tier where it cannot "
                        "be measured: a named device profile (auto: the node's calibration, "
                        "else its HMAT, else the first profile)",
                        choices=("auto", *calibration.profiles())),
    "tiers_from": Option("tiers_from", "path", "", "model: a catalogue run (its directory) "
                         "whose chase and read-bandwidth cases bound to each node (or node "
                         "matrix) give the tiers' figures"),
    **{f"{tier}_{what}": Option(f"{tier}_{what}", "float", 0.0, f"model: the {tier} tier's "
                                f"read {what} (0: from tiers_from, else its HMAT figure, "
                                "else an assumed one)",
                                unit=unit, min=0.0)
       for tier in ("fast", "slow") for what, unit in (("latency", "ns"),
                                                        ("bandwidth", "GB/s"))},
    **{name: opt.but(name=name, help=f"{policy}: {opt.help}")
       for name, (policy, _, opt) in KNOBS.items()},
    **{name: opt for table in WORKLOAD_OPTIONS.values() for name, opt in table.items()},
    "seed": Option("seed", "int", 1, "seed of the workload's draws (embedding: its indices "
                   "and values; kvcache: its block table and sessions; optimizer: its "
                   "values)", min=0),
    **pick("threads", "cpus", "isa", "repeat", "warmup", "tolerance", "timeout", repeat=3,
           warmup=0),
    "page": Option("page", "choice", "4k", "the pages tiered: 4 KiB, or hugetlb 2 MiB",
                   choices=("4k", "2m")),
}
PAGE_BYTES = {"4k": 4096, "2m": 2 << 20}


def nodes(params: dict, topology: Topology) -> tuple[int | None, int | None]:
    """(fast, slow) nodes: the options, else the first CPU's node and a CPU-less memory
    node (else the farthest other node with memory); slow is None on a machine of one."""
    cpu = resolve_cpus({**params, "threads": 1})[0]
    home = next((n.id for n in topology.nodes if cpu in n.cpus), None)
    fast = home if params["fast"] == "auto" else params["fast"]
    if params["slow"] != "auto":
        return fast, params["slow"]
    others = [n for n in topology.nodes if n.has_memory and n.id != fast]
    far = [n for n in others if n.far_memory]
    if far:
        return fast, far[0].id
    by_distance = {n.id: n.distances for n in topology.nodes}.get(fast, {})
    return fast, max((n.id for n in others), key=lambda i: by_distance.get(i, 0), default=None)


def engine_of(params: dict, topology: Topology) -> str:
    fast, slow = nodes(params, topology)
    if params["engine"] != "auto":
        return params["engine"]
    here = topology.memory_nodes
    return "real" if fast in here and slow in here and slow != fast else "model"


# CPU work a unit of the workload (a lookup) costs, for the estimate, scaled by the
# machine's (Figures.cpu): drawing and counting it once for the whole run (Zipf's draw and
# its page's count: 120 ns on the VM, 1.1 us in the cxl guest); an epoch's kernel on it
# (the embedding kernel's floor); and numpy's check of it (the reference gather: 95 ns on
# the VM, 1.6 us in the guest on node 0).
UNIT_S = 80e-9
KERNEL_UNIT_S = 15e-9
CHECK_UNIT_S = 70e-9
# A random row's bytes cost this many times a streaming read's, the kernel's and the
# check's alike: 1.7 and 1.1 in two boots of the cxl guest (its emulated far node, whose
# streaming read the probe found at 95 and 58 MB/s), under 1 on node 0.
GATHER = 1.5
# An epoch's work a page of the tiered buffer, beside its lookups (its count, the policy's
# sort, the node map read back): 32 us a page in the cxl guest, fitted over two table
# sizes; about 1 us a page at the VM's CPU speed.
PAGE_EPOCH_S = 1e-6


def estimate(params: dict, figures) -> float:
    """Seconds of the case's work at the figures of its fast and slow nodes: the run's
    units drawn and counted per page; the real engine then places its buffers (the tiered
    one on the slow node, its share then moved up) and fills the tiered one with random
    values at numpy's rate; each repetition's epochs read their rows twice (the kernel,
    then numpy's check of it), the fast share at the fast node's figures and the rest at
    the slow node's (a policy keeping the hot pages fast does better), go over every page,
    and (online policies) move up to an eighth of the fast tier between epochs.
    KeyError (not estimated) where a node has no figures."""
    topology = _estimate_topology()
    work = workload(params)
    draws = work.units() * work.epochs * UNIT_S * figures.cpu
    if engine_of(params, topology) != "real":
        return draws
    fast_node, slow_node = nodes(params, topology)
    fast, slow = figures.nodes[fast_node], figures.nodes[slow_node]
    share = {"all-fast": 1.0, "all-slow": 0.0}.get(params["policy"],
                                                   min(max(params["share"], 0.0), 1.0))
    sizes = work.sizes()
    tiered = sizes[work.TIERED]
    # the tiered buffer is placed on the slow node (the policy's first placement then
    # moves its share up; Linux's own tiering starts it local), the rest on the fast one
    policy = POLICIES[params["policy"]]
    placed = (sum(sizes.values()) - tiered) * (1 / fast.touch + 1 / fast.scan) + (
        tiered / fast.touch if policy.KERNEL else
        tiered / slow.touch + share * tiered * (1 / slow.read_1 + 1 / fast.touch))

    def epoch(f) -> float:
        cpu = (KERNEL_UNIT_S + CHECK_UNIT_S) * figures.cpu
        return work.units() * (f.latency_ns(tiered) * 1e-9 / MLP + cpu) + \
            2 * GATHER * work.epoch_bytes() / f.read_1
    pages = tiered / PAGE_BYTES[params["page"]] * PAGE_EPOCH_S * figures.cpu
    # an online policy moves up to an eighth of the fast tier between epochs, a page read
    # on one node and written on the other (the slow one's first touch: under an
    # emulator, the slowest part); static policies and Linux's own move nothing here
    online = share < 1 and not (policy.STATIC or policy.KERNEL)
    moves = share * tiered / 8 * (1 / migrate.MOVE_BPS + 1 / slow.touch) if online else 0.0
    reps = params["warmup"] + params["repeat"]
    return draws + placed + tiered / figures.fill + reps * (
        work.epochs * (share * epoch(fast) + (1 - share) * epoch(slow) + pages) +
        (work.epochs - 1) * moves)


def skip(params: dict, topology: Topology) -> str | None:
    if params["policy"] == "linux":
        if engine_of(params, topology) == "model":
            return "the model cannot predict what Linux's own tiering would do"
        return linux_policy.unavailable()
    return None


def validate(params: dict, topology: Topology) -> None:
    fast, slow = nodes(params, topology)
    memory = topology.memory_nodes
    if params["tiers_from"]:        # a run that is not one fails here, not in a worker
        model.tiers_for(params, topology, fast, slow)
    if params["calibration"] and fast is not None:      # likewise
        calibration.measured(fast, path=params["calibration"])
    kind = engine_of(params, topology)
    work = workload(params)        # its own refusals, on any engine
    if slow is not None and slow == fast:
        raise UserError(f"fast={fast} and slow={slow}: tiering needs two nodes (on a machine "
                        "of one the model takes the slow tier's figures from options or "
                        "tiers_from, naming its node with slow=N)")
    for name, node in (("fast", fast), ("slow", slow)):
        # The model may take another machine's nodes (their figures from tiers_from).
        if kind == "real" and node is not None and node not in memory:
            raise UserError(f"{name}={node}: no such node with memory (nodes with memory: "
                            f"{format_list(memory)})")
    if POLICIES[params["policy"]].KERNEL and fast != nodes({**params, "fast": "auto"},
                                                           topology)[0]:
        raise UserError(f"policy={params['policy']}: the kernel's fast node is the CPUs' own; "
                        f"fast={fast} is not theirs (set cpus on it instead)")
    if kind == "real":
        if slow is None:
            have = (f"one (node {memory[0]})" if len(memory) == 1 else
                    f"{len(memory)} (nodes {format_list(memory)})")
            raise UserError("engine=real moves pages between two nodes with memory; this "
                            f"machine has {have}: use engine=model, or cxlbench emulate "
                            "for a machine with a far node")
        check_placement(buffer_params(params, fast, slow), resolve_cpus(params), topology,
                        work.sizes())
    return None


def buffer_params(params: dict, fast: int, slow: int) -> dict:
    """Every buffer on the fast node but the tiered one, which starts on the slow node
    (the policy's first placement then moves its share up). Under Linux's own tiering it
    starts local instead, with no policy of its own that would keep the kernel from
    promoting its pages."""
    tiered = TIERED[params["workload"]].TIERED
    start = Placement("local") if POLICIES[params["policy"]].KERNEL else Placement.bind(slow)
    return {**params, "mem": Placement.bind(fast), f"mem.{tiered}": start}


def unused(params: dict) -> dict[str, str]:
    out = {name: f"a knob of {policy}" for name, (policy, _, _) in KNOBS.items()
           if policy != params["policy"]}
    if params["engine"] == "model":
        out["move_ms"] = "the model engine has no time box"
    if params["policy"] in ("all-fast", "all-slow"):
        out["share"] = f"{params['policy']} is a bound: it places every page itself"
    for name, table in WORKLOAD_OPTIONS.items():
        if name != params["workload"]:
            out.update(dict.fromkeys(table, f"an option of the {name} workload"))
    work = params["workload"]
    out.update({f"{work}.{k}": why
                for k, why in TIERED[work].unused(own(params, work)).items()})
    return {k: v for k, v in out.items() if k in OPTIONS}


def capacity(params: dict, pages: int) -> int:
    if params["policy"] == "all-fast":
        return pages
    return 0 if params["policy"] == "all-slow" else math.floor(params["share"] * pages + 1e-9)


def run(params: dict) -> Measurement:
    topology = Topology.read(probe_gpus=False)
    fast_node, slow_node = nodes(params, topology)
    kind = engine_of(params, topology)
    real = kind == "real"
    work = workload(params)
    page = PAGE_BYTES[params["page"]]
    tiered = work.TIERED
    pages = -(-work.sizes()[tiered] // page)
    clock = time.perf_counter()
    counts = [work.counts(e, pages, page) for e in range(work.epochs)]
    phases = {"draws": time.perf_counter() - clock}     # seconds, for the estimate's check
    tiers, source = model.tiers_for(params, topology, fast_node, slow_node)
    cal = calibrated(params, topology, fast_node, slow_node, work)
    predict = None
    if cal is not None:
        tiers = (cal[0].tier(), cal[1].tier())  # the policies see the measured curves too
        source = "; ".join(f"{name}: {c.kind} ({c.source})" for name, c in zip(("fast", "slow"),
                                                                            cal))

        def predict(e: int, fast: np.ndarray) -> float:
            return model.predict_ns(work.demand(e, page), cal, len(cpus), fast)
    # The figures first: a reader of the table sees what the tiers were, then whence.
    source = ", ".join(f"{name} {t.latency_ns:.3g} ns {t.bandwidth:.3g} GB/s"
                       for name, t in zip(("fast", "slow"), tiers)) + f" ({source})"
    rate, rate_source = model.migrate_rate(params, fast_node, slow_node)
    policy_cls = POLICIES[params["policy"]]
    knobs = {k: params[knob_name(policy_cls.NAME, k)] for k in policy_cls.KNOBS}
    profile = np.sum(counts, axis=0) if policy_cls.PROFILED else None
    cap = capacity(params, pages)
    cpus = resolve_cpus(params)
    buffers, isa = [], ""
    if real:
        buffers = place(buffer_params(params, fast_node, slow_node), cpus, work.sizes(),
                        topology)
        if policy_cls.KERNEL:       # NUMA balancing skips a range with a policy of its own
            buffers[0].release_policy()
        isa = work.choose_isa(params["isa"])
        work.prepare(buffers, isa, cpus)
    phases["place"] = time.perf_counter() - clock - phases["draws"]
    before = vmstat()
    reps = []
    last = None
    for r in range(params["warmup"] + params["repeat"]):
        policy = policy_cls(pages, cap, knobs, profile)
        pages_of = engine.MovedPages(buffers[0], fast_node, slow_node,
                                     params["move_ms"] * 1e6, patient=policy_cls.KERNEL) \
            if real else engine.PlannedPages(pages, page, rate)
        out = engine.drive(policy, work, pages_of, counts, tiers, params["mlp"], len(cpus), real,
                           predict)
        if r >= params["warmup"]:
            reps.append(figures(out, work, page, rate, real))
            last = out
    phases["repetitions"] = time.perf_counter() - clock - phases["draws"] - phases["place"]
    # The kernel says what produced the figures: the workload's C kernel, or the model.
    m = Measurement(kernel=f"{params['workload']}:{kind}", isa=isa, cpus=cpus,
                    units=units_of(work, real), reps=reps)
    after = vmstat()
    m.info = {"engine": kind, "fast_node": fast_node, "slow_node": slow_node, "pages": pages,
              "page_bytes": page, "capacity_pages": cap, "epochs": work.epochs,
              "tiers": {"fast": tier_record(tiers[0]), "slow": tier_record(tiers[1]),
                        "source": source,
                        "kinds": [c.kind for c in cal] if cal else ["roofline", "roofline"]},
              "migrate_gbs": rate, "migrate_source": rate_source,
              "unmoved": last.unmoved, "start_unmoved": last.start_unmoved,
              "drifted": last.drifted,
              "epoch_ns": [round(x) for x in last.ns],
              "epoch_fast_hits": [round(x, 4) for x in last.fast_hits],
              "phase_s": {k: round(v, 3) for k, v in phases.items()},
              "vmstat": {k: after[k] - before.get(k, 0) for k in after
                         if after[k] != before.get(k, 0)}}
    if real:
        m.placement = placement_record(params, buffers, tiered)
        bad = next((b for b, v in zip(buffers, m.placement["verified"])
                    if not v.get("ok", True)), None)
        if bad is not None:
            m.status, m.error = "failed", bad.failure(bad.verify(), "after the case")
        elif last.start_unmoved > params["tolerance"] * pages:
            m.status, m.error = "failed", (
                f"tiering: {last.start_unmoved} of {pages} pages of the {tiered} buffer did "
                f"not reach the policy's first placement (a full node {fast_node}? busy "
                "pages?): the share measured would not be the one asked for")
    return m


def calibrated(params: dict, topology: Topology, fast: int, slow: int | None, work):
    """(fast, slow) calibrations for the model, where the workload states its demand and
    this machine has a calibration of the fast node (or `calibration` names one), and no
    option sets the tiers' figures by hand (those keep the roofline they were given for)."""
    by_hand = params["tiers_from"] or any(params[f"{t}_{w}"] for t in ("fast", "slow")
                                          for w in ("latency", "bandwidth"))
    if by_hand or not hasattr(work, "demand") or fast is None:
        return None
    profile = "" if params["slow_tier"] == "auto" else params["slow_tier"]
    return calibration.tiers(fast, slow, topology, path=params["calibration"], profile=profile)


def tier_record(tier) -> dict:
    """A tier's figures, and its loaded-latency curve where it has one."""
    return {"latency_ns": tier.latency_ns, "bandwidth": tier.bandwidth,
            **({"curve": [list(point) for point in tier.curve]} if tier.curve else {})}


RATES = ("throughput", "kernel_throughput", "predicted")


def units_of(work, real: bool) -> dict[str, str]:
    """The rates in the workload's unit (M/s of lookups, tok/s of tokens)."""
    return {**{k: work.RATE[0] for k in RATES if real or k != "predicted"},
            "fast_hits": "ratio", "fast_share": "ratio", "migrated": "MB", "move_ms": "ms",
            "pingpong": "pages"}


def figures(out: engine.Outcome, work, page: int, rate: float, real: bool) -> dict[str, float]:
    """throughput charges the moves (made synchronously, between epochs);
    kernel_throughput is the workload's time alone. The model's prediction charges the
    same moves at the migration rate."""
    units = work.units() * len(out.ns) * 1e9 / work.RATE[1]       # x 1e9: per ns to per s
    moves = out.promoted + out.demoted
    rep = {"throughput": units / (sum(out.ns) + out.move_ns),
           "kernel_throughput": units / sum(out.ns),
           "fast_hits": float(np.mean(out.fast_hits)),
           "fast_share": float(np.mean(out.fast_share)),
           "migrated": moves * page / 1e6, "move_ms": out.move_ns / 1e6,
           "pingpong": float(out.pingpong)}
    if real:
        rep["predicted"] = units / (sum(out.predicted) + moves * page / rate)
    return rep


def placement_record(params: dict, buffers, tiered: str) -> dict:
    """The untiered buffers verified as any case's; the tiered one was read back page by
    page before every epoch (the engine fails the case on a page astray or moved by
    someone else): its pages per node at the end."""
    rows = []
    for b in buffers:
        if b.name == tiered:
            where = memory.node_map(b)
            counts = {str(n): int(c) for n, c in zip(*np.unique(where, return_counts=True))}
            rows.append({"buffer": b.name, "spec": "tiered", "page": b.page, "counts": counts,
                         "text": ";".join(f"{n}:{c}" for n, c in counts.items()), "ok": True})
        else:
            v = b.verify()
            rows.append({"buffer": b.name, "spec": str(b.placement), "page": b.page,
                         "method": b.placement_method, **v.to_dict()})
    return {"spec": "tiered", "page": params["page"], "method": None, "verified": rows}
