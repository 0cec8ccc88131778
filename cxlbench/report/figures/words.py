"""What a figure writes: a parameter's value in the README's words ("table on node 0",
"4 KiB pages", "2 threads") and a metric's axis label in words and units ("p50 step time
(µs)"). One table each, used by every figure's legends, panel titles, groups and axes, so
that a setting reads the same wherever it is shown."""
from __future__ import annotations

from ...errors import PlacementError
from ...options import split_buffer_option
from ...placement import Placement
from ...units import format_list, format_size


def size(n) -> str:
    """Bytes as the README writes them: 16 KiB, 1 GiB, 64 B."""
    text = format_size(int(n))
    return f"{text[:-1]} {text[-1]}iB" if text[-1] in "KMGT" else f"{text} B"


def count(n, one: str) -> str:
    """'1 thread', '2 threads', '1,048,576 rows': a number and its noun."""
    try:
        value = int(n)
    except (TypeError, ValueError):
        return f"{n} {one}s"
    return f"{value:,} {one if value == 1 else one + 's'}"


def placement(spec) -> str:
    """A placement spec in words: 'node 0', 'nodes 0-1 interleaved', 'local'."""
    try:
        p = Placement.of(spec)
    except (PlacementError, ValueError, TypeError):
        return str(spec)
    nodes = format_list(list(p.nodes))
    one = len(p.nodes) == 1
    if p.policy == "local":
        return "local"
    if p.policy == "bind":
        return f"on node{'' if one else 's'} {nodes}"
    if p.policy == "preferred":
        return f"node {nodes} preferred"
    if p.policy == "interleave":
        return f"interleaved over nodes {nodes}"
    if p.policy == "weighted":
        return (f"weighted {':'.join(map(str, p.weights))} over nodes "
                f"{','.join(map(str, p.nodes))}")
    return str(spec)


PAGES = {"4k": "4 KiB pages", "thp": "THP", "2m": "2 MiB pages", "1g": "1 GiB pages"}


def _buffer(base: str, buffer: str, value) -> str:
    """mem.<buffer> and page.<buffer>: the buffer named first, 'table on node 0'."""
    if base == "mem":
        where = placement(value)
        return f"{buffer} {where}" if where != "local" else f"{buffer} local"
    return f"{buffer} in {PAGES.get(str(value), str(value))}"


def _yes(word: str, no: str):
    """The words of a yes-or-no option: one for true, one for false."""
    return lambda v: word if str(v).lower() in ("true", "1") else no


def _share(v) -> str:
    """A fraction as a percentage: 0.0625 -> 6.25 %."""
    return f"{float(v) * 100:g} %"


def _batch_pages(v) -> str:
    """migrate's batch: pages a call, 0 the whole buffer."""
    return "whole buffer a call" if str(v) == "0" else count(v, "page") + " a call"


# Words by parameter name: the value given, the words returned. A name not here reads
# "name value".
WORDS = {
    "mem": lambda v: "memory " + placement(v),
    "page": lambda v: PAGES.get(str(v), str(v)),
    "threads": lambda v: "all CPUs" if v == "all" else count(v, "thread"),
    "size": lambda v: size(v),
    "load_size": lambda v: f"load over {size(v)}",
    "window": lambda v: "no window" if str(v) == "0" else f"{size(v)} window",
    "chunk": lambda v: f"{size(v)} chunks",
    "step_size": lambda v: f"step arrays of {size(v)}",
    "stride": lambda v: f"{size(v)} stride",
    **{name: str for name in ("kernel", "isa", "dtype", "policy", "workload", "measure",
                              "method", "flush", "ratio")},
    "op": lambda v: {"swap_out": "swap out", "swap_in": "swap in",
                     "restore": "prefix restore"}.get(str(v), str(v)),
    "copy": lambda v: {"block": "a copy per block", "batched": "runs batched"}.get(str(v),
                                                                                    str(v)),
    "dist": lambda v: {"zipf": "Zipf", "uniform": "uniform", "reuse": "reuse profile",
                       "True": "batches timed", "False": "whole walk timed"}.get(str(v),
                                                                                 str(v)),
    "alpha": lambda v: f"α={v:g}" if isinstance(v, float) else f"α={v}",
    "precision": lambda v: "mixed precision" if v == "mixed" else str(v),
    "optim": lambda v: {"adam": "Adam", "adamw": "AdamW"}.get(str(v), str(v)),
    "preset": lambda v: "no preset" if v == "custom" else str(v),
    "scale": lambda v: f"scale {v:g}" if isinstance(v, float) else f"scale {v}",
    "rows": lambda v: count(v, "row"),
    "tables": lambda v: count(v, "table"),
    "dim": lambda v: f"dim {v}",
    "pooling": lambda v: count(v, "lookup") + " a bag",
    "pool": lambda v: f"{v} pooling",
    "prefetch": lambda v: "no prefetch" if str(v) == "0" else f"prefetch {v}",
    "train": lambda v: {"none": "no training", "sgd": "SGD step",
                        "adagrad": "Adagrad step"}.get(str(v), str(v)),
    "profile": lambda v: f"{v} profile",
    "seq_len": lambda v: count(v, "token"),
    "steps": lambda v: count(v, "step"),
    "block": lambda v: f"{v}-token blocks",
    "chunk_tokens": lambda v: f"{v}-token chunks",
    "fragmentation": lambda v: {0.0: "contiguous blocks", 1.0: "scattered blocks"}.get(
        v, f"{_share(v)} of blocks scattered"),
    "cold": _yes("cold caches", "warm caches"),
    "params": lambda v: count(v, "parameter"),
    "triad": _yes("with triad", "no triad"),
    "store": lambda v: {"regular": "regular stores", "nt": "NT stores", "rep": "rep movsb",
                        "auto": "stores picked by a probe"}.get(str(v), str(v)),
    "persist": _yes("clwb + sfence", "not persisted"),
    "interfere": lambda v: {"none": "alone", "triad": "beside a triad",
                            "adam": "beside an Adam step"}.get(str(v), str(v)),
    "dirty": lambda v: "whole state" if not v else f"{_share(v)} of rows dirty",
    "from": lambda v: f"from node {v}",
    "to": lambda v: f"to node {v}",
    "pages": lambda v: {"written": "pages just written",
                        "untouched": "pages untouched"}.get(str(v), str(v)),
    "access": lambda v: f"{v} touches",
    "state": lambda v: f"{v} lines",
    "write": _yes("write + flush", "flush only"),
    "mode": lambda v: str(v).replace("_", " "),
    "granularity": lambda v: f"{size(v)} blocks",
    "mix": lambda v: {"rw_3_1": "3:1 reads:writes", "rw_2_1": "2:1 reads:writes",
                      "rw_1_1": "1:1 reads:writes", "write_nt": "NT writes",
                      "read": "reads", "write": "writes"}.get(str(v), str(v)),
    "chains": lambda v: count(v, "chain"),
    # loaded latency's pause after every 8 lines a generator streams: 0 the hardest load
    "delay": lambda v: {"idle": "idle (no load)", "0": "full load (no pause)"}.get(
        str(v), f"pause {v} per 8 lines"),
    "lines_per_page": lambda v: "every line a page" if str(v) == "0" else count(v, "line") +
    " a page",
    "initiator": lambda v: f"CPUs of node {v}",
    "target": lambda v: f"memory on node {v}",
    "share": lambda v: f"{_share(v)} fast",
    "phase": lambda v: {"none": "steady hot set", "shift": "hot set shifting"}.get(str(v),
                                                                                   str(v)),
    "engine": lambda v: {"real": "real engine", "model": "model engine",
                         "auto": "engine auto", "ce": "copy engines",
                         "sm": "SM copy kernel"}.get(str(v), str(v)),
    "epochs": lambda v: count(v, "epoch"),
    "fast": lambda v: f"fast node {v}",
    "slow": lambda v: f"slow node {v}",
    "direction": lambda v: {"h2d": "host to device", "d2h": "device to host",
                            "bidir": "both ways", "in": "swap in",
                            "out": "swap out"}.get(str(v), str(v)),
    "host": lambda v: {"wc": "write-combined", "pinned": "pinned"}.get(str(v), str(v)) +
    " host memory",
    "table": lambda v: f"table in {'HBM' if v == 'hbm' else str(v) + ' memory'}",
    "device": lambda v: f"GPU {v}",
    "blocks_per_sm": lambda v: "full grid" if v == "full" else count(v, "block") + " per SM",
    # the checkpoint figures' own: already words
    "snapshot": str,
    "slowed": str,
}

# Words where one name means different things in different families.
FAMILY_WORDS = {
    ("embedding", "batch"): lambda v: count(v, "bag") + " a table",
    # size 0: the table is sized by its rows (a panel of floor cases was titled "0 B")
    ("embedding", "size"): lambda v: f"{size(v)} table" if float(v) else "table sized by rows",
    ("embedding", "far"): lambda v: "every lookup over the table" if float(v) >= 1 else
    f"1 in {round(1 / float(v))} lookups over the table",
    ("kvcache", "batch"): lambda v: count(v, "sequence"),
    ("chase", "batch"): lambda v: count(v, "load") + " a batch",
    ("migrate", "batch"): _batch_pages,
    ("migrate_touch", "batch"): _batch_pages,
    ("gpu", "threads"): lambda v: count(v, "thread") + " a block",
    ("gpu", "batch"): lambda v: count(v, "bag") + " a launch",
    **{(family, "host"): (lambda v: "two CPUs as the hosts" if str(v) == "both" else
                          f"host {v}")
       for family in ("shared_pingpong", "shared_ring", "shared_atomic", "shared_pool")},
    ("shared_atomic", "op"): lambda v: {"add": "lock xadd", "cas": "compare-and-swap loop",
                                        "plain": "plain load + store"}.get(str(v), str(v)),
}


def value(name: str, v, family: str | None = None) -> str:
    """One parameter's value in words: `family`'s own words for the name where it has
    them, else the name's; a workload's option (embedding.rows) as the option itself."""
    split = split_buffer_option(name)
    if split:
        return _buffer(*split, v)
    kind = "gpu" if family and family.startswith("gpu_") else family
    word = FAMILY_WORDS.get((kind, name)) or WORDS.get(name)
    if word is None and "." in name:            # tiering's embedding.rows: rows
        workload, _, option = name.partition(".")
        return value(option, v, workload)
    if word is None:
        return f"{name} {v}"
    try:
        return word(v)
    except (TypeError, ValueError):             # a value of an unexpected kind
        return f"{name} {v}"


def setting(params: dict, keys, family: str | None = None) -> str:
    """The values of `keys` in params, in words, comma-separated; a buffer's placement
    the same as the case's (mem.src beside mem) says nothing more, and is left out."""
    keys = [k for k in keys if k in params]
    same = {k for k in keys if (split := split_buffer_option(k)) and split[0] in keys
            and params[k] == params[split[0]]}
    return ", ".join(value(k, params[k], family) for k in keys if k not in same)


# Axis words by metric name; the unit comes from the rows (UNITS below).
METRICS = {
    "latency": "latency", "bandwidth": "bandwidth",
    "bandwidth_memory": "memory bandwidth", "bandwidth_shared": "bandwidth beside the step",
    "return_bandwidth": "bandwidth back", "triad": "triad bandwidth",
    "of_triad": "share of triad bandwidth",
    "lookups": "lookups", "rows_updated": "rows updated", "params": "parameters",
    "tokens": "token rate", "throughput": "throughput",
    "kernel_throughput": "throughput without moves", "predicted": "predicted throughput",
    "bag_p50": "p50 bag time", "bag_p99": "p99 bag time",
    "step_p50": "p50 step time", "step_p99": "p99 step time",
    "seq_p50": "p50 sequence time", "seq_p99": "p99 sequence time",
    "chunk_p50": "p50 chunk time", "chunk_p99": "p99 chunk time",
    # the chase's percentiles (chase.PERCENTILES): p99.9, not p999
    "p50": "p50 latency", "p90": "p90 latency", "p99": "p99 latency",
    "p99.9": "p99.9 latency", "p99.99": "p99.99 latency",
    "idle_latency": "idle latency", "latency_loss": "latency added",
    "idle_bandwidth": "idle bandwidth", "bandwidth_loss": "bandwidth lost",
    "aggressor_bandwidth": "aggressors' bandwidth",
    "parallelism": "loads in flight",
    "slowdown": "slowdown", "step_slowdown": "step slowdown",
    "snapshot_slowdown": "snapshot slowdown",
    "time": "time", "step_time": "step time", "move_time": "move time",
    "page_latency": "time per page", "pages_per_s": "pages moved",
    "touch_max": "worst touch", "touch_p99": "p99 touch", "touch_baseline": "touch before",
    "touch_after": "touch after", "slow_touches": "slow touches", "stall": "stall",
    "spike_window": "spike window",
    "fairness": "fairness (Jain's index)",
    "migrated": "migrated", "move_ms": "time moving pages",
    "fast_hits": "accesses served by the fast tier", "fast_share": "fast-tier share",
    "pingpong": "pages moved back and forth", "cycles": "cycles a load",
    "issue_time": "issue time",
}
# Units as an axis shows them: none where the words say it (a ratio, a share).
UNITS = {"us": "µs", "x": "×", "Mops/s": "M ops/s", "tok/s": "tokens/s", "ratio": "",
         "jain": "", "loads": "", "cycles": ""}


def unit(u) -> str:
    """A unit as axes show it: µs, ×; '' for a ratio."""
    return UNITS.get(str(u), str(u))


def metric(name: str, u=None) -> str:
    """A metric's axis label: its words, then its unit in brackets where it has one."""
    words = METRICS.get(name, name.replace("_", " "))
    shown = unit(u) if u is not None else ""
    return f"{words} ({shown})" if shown else words
