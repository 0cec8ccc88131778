"""Embedding-bag gathers on the GPU, the sparse half of recommendation models (DLRM) as
FBGEMM's table-batched embeddings run them: `batch` bags, each the fp32 sum of `pooling`
rows of a table of rows x dim floats, one warp a bag. The table lives in device memory
(hbm), in pinned host memory the driver allocates (pinned), or in a cxlbench buffer
placed, and verified, on the node `mem` names and registered mapped (registered: DRAM, a
remote socket, a CXL node onlined with a normal zone); the host tables are read in place
over the link, as a GPU reads an embedding table too large for its HBM. The indices are
drawn as the CPU `embedding` benchmark draws them for one table (uniform, or Zipf(alpha)
over rows scattered by a hash, from `seed`), so the two gather the same rows. Each
repetition is one launch between two CUDA events; after the timing every output element is
checked against the host's sum of the same rows (the values make every sum exact in fp32).
M lookups/s, and GB/s of rows gathered (bags x pooling x dim x 4 bytes)."""
from __future__ import annotations

import numpy as np

from .. import gpu
from ..errors import CheckError
from ..options import Option, pick
from ..workloads import embedding
from .common import (Measurement, check_placement, measure, place, timed_in_one_call, resolve_cpus,
                     unplaced)
from .gpu_stream import OPTIONS as STREAM_OPTIONS
from .gpu_stream import checked_times, grid

NAME = "gpu_embedding"
TITLE = "Embedding-bag gathers on the GPU"
BUFFERS = ("table",)
DESCRIPTION = "embedding-bag gathers on the GPU from a table in HBM, pinned host memory, or " \
              "host memory placed on each node (M lookups/s, GB/s of rows)"
DISTS = ("uniform", "zipf")

OPTIONS = {
    "table": Option("table", "choice", "hbm", "where the table lives: hbm (device memory), "
                    "pinned (cudaHostAlloc'd by the driver, read over the link), registered "
                    "(a buffer placed and verified on the mem node, read over the link)",
                    choices=gpu.EMBEDDING_TABLES, expand={"all": gpu.EMBEDDING_TABLES}),
    "rows": Option("rows", "int", 1 << 20, "rows of the table", min=1, max=1 << 40),
    "dim": Option("dim", "int", 128, "fp32 elements per row (a multiple of 4 is read "
                  "in 16-byte loads, any other a float at a time)", min=1, max=65536),
    "pooling": Option("pooling", "int", 32, "rows summed into each bag (lookups a bag)",
                      min=1, max=65536),
    "batch": Option("batch", "int", 8192, "bags a launch", min=1, max=1 << 24),
    "dist": Option("dist", "choice", "zipf", "row popularity: uniform, or Zipf(alpha) over "
                   "rows scattered by a hash (as the CPU embedding benchmark draws them)",
                   choices=DISTS),
    "alpha": Option("alpha", "float", 1.05, "Zipf exponent (dist=zipf)", min=0.0, max=10.0),
    "seed": Option("seed", "int", 1, "seed of the indices (the CPU embedding benchmark's "
                   "seed draws the same ones)", min=0),
    "threads": STREAM_OPTIONS["threads"],
    "blocks_per_sm": STREAM_OPTIONS["blocks_per_sm"],
    "device": STREAM_OPTIONS["device"],
    **pick("mem", "page", "cpus", "repeat", "warmup", "tolerance", "timeout", repeat=10,
           warmup=1),
}


def layout(params: dict) -> embedding.Layout:
    """The CPU benchmark's layout of one custom fp32 table of the same shape."""
    return embedding.Layout((params["rows"],), (params["pooling"],), params["dim"], "fp32",
                            params["batch"])


def make_indices(params: dict) -> np.ndarray:
    """batch x pooling row numbers (int64, C order), bag after bag: what the CPU
    `embedding` benchmark draws for one table with the same seed, dist and alpha."""
    cpu = {"seed": params["seed"], "dist": params["dist"], "alpha": params["alpha"],
           "preset": "custom", "trace": ""}
    indices, _ = embedding.make_indices(layout(params), cpu)
    return np.ascontiguousarray(indices, dtype=np.int64)


def table_bytes(params: dict) -> int:
    return params["rows"] * params["dim"] * 4


def buffers_of(params: dict) -> tuple[str, ...]:
    return BUFFERS if params.get("table") == "registered" else ()


def unused(params: dict) -> dict[str, str]:
    out = {} if params["dist"] == "zipf" else {"alpha": f"dist={params['dist']} (alpha is "
                                                        "Zipf's)"}
    if params["table"] != "registered":
        why = (f"table={params['table']} is " + ("device memory" if params["table"] == "hbm"
                                                  else "allocated by the CUDA driver") +
               ", not placed")
        out.update({"mem": why, "page": why})
    return out


def skip(params: dict, topology) -> str | None:
    return gpu.unavailable() or (gpu.pinnable(params["mem"])
                                 if params["table"] == "registered" else None)


def validate(params: dict, topology) -> None:
    gpu.check_threads(params["threads"])
    gpu.check_device(params["device"])
    if params["table"] == "registered":
        check_placement(params, resolve_cpus({**params, "threads": 1}), topology,
                        {"table": table_bytes(params)})


def figures(lookups: int, gathered: int):
    """Each launch's ns -> its figures: M lookups/s and GB/s of rows gathered."""
    return lambda ns: {"lookups": lookups / ns * 1e3, "bandwidth": gathered / ns}


def estimate(params: dict, figures=None) -> float:
    """Seconds of the case's own work (gpu.ASSUMED): the table filled (and, registered,
    placed and checked), then each launch's gathered rows from HBM or across the link."""
    a = gpu.ASSUMED
    gathered = params["batch"] * params["pooling"] * params["dim"] * 4
    per = a["hbm"] if params["table"] == "hbm" else a["zero_copy"]
    return (params["warmup"] + params["repeat"]) * gathered / per + \
        3 * table_bytes(params) / a["host"]


def run(params: dict) -> Measurement:
    cpus = resolve_cpus({**params, "threads": 1})
    placed = params["table"] == "registered"
    bufs = place(params, cpus, {"table": table_bytes(params)}) if placed else []
    dev = gpu.device(params["device"])
    blocks = grid(params, dev)
    indices = make_indices(params)
    lookups = len(indices)
    gathered = lookups * params["dim"] * 4
    what = (f"gpu_embedding table={params['table']}: {params['batch']} bags of "
            f"{params['pooling']} rows")

    def timed() -> list[int]:
        ns, bad = gpu.embedding(params["table"], params["rows"], params["dim"], indices,
                                params["pooling"], params["warmup"] + params["repeat"],
                                blocks, params["threads"], bufs[0].addr if bufs else 0,
                                params["device"])
        if bad:
            raise CheckError(f"{what}: {bad} of {params['batch'] * params['dim']} output "
                             "elements differ from the host's sum of the same rows")
        return checked_times(ns, f"{what} (a launch)")

    m = Measurement(kernel="gpu_embedding_bag", isa=f"sm_{dev['major']}{dev['minor']}",
                    cpus=cpus, units={"lookups": "M/s", "bandwidth": "GB/s"},
                    info={"device": dev, "table": params["table"],
                          "table_bytes": table_bytes(params), "lookups": lookups,
                          "bags": params["batch"], "bytes": gathered, "blocks": blocks,
                          "threads": params["threads"],
                          "vector_loads": params["dim"] % 4 == 0,
                          "indices": params["dist"]})
    m = measure(m, params, bufs, timed_in_one_call(timed, figures(lookups, gathered)))
    if not placed:      # device memory, or the driver's: neither placed nor verified
        m.placement = unplaced("device memory (cudaMalloc)" if params["table"] == "hbm"
                               else "cudaHostAlloc (mapped)")
    return m
