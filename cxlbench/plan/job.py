"""A training or serving job as `cxlbench plan` takes it: the model's shape (a preset or
plain fields), its precision and optimizer, and the run's shape (batches, sequence,
parallel degrees, ZeRO stage, recomputation, offload). Built from a TOML file, flags,
or both (flags win)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import UserError
from ..workloads import embedding

try:
    import tomllib
except ImportError:         # Python 3.10
    import tomli as tomllib

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
OPTIMIZERS = ("adam", "adamw", "sgd", "adagrad")
OFFLOADS = ("none", "optimizer", "optimizer+params", "kv")      # kv: serving's KV-cache


def _tables(preset: str) -> dict:
    """A recommender's sparse part as the embedding workload's preset has it (fp32 rows):
    MLPerf DLRM-DCNv2's 26 tables, or the 788 of Meta's 2022 traces (their sizes assumed,
    as that preset says). The dense part (the MLPs, the cross network) is small beside
    them and left out."""
    p = embedding.PRESETS[preset]
    return dict(tables=tuple(p["rows"]), table_dim=p["dim"], table_dtype="fp32",
                pooling=tuple(p["pooling"]))


# From the models' config.json; vocabulary and FFN as published (Llama 3: 128256 tokens).
PRESETS = {
    "llama-3-8b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128,
                       ffn=14336, vocab=128256),
    "llama-3-70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128,
                        ffn=28672, vocab=128256),
    **{name: _tables(name) for name in ("dlrm-dcnv2", "meta-2022-like")},
}


@dataclass(frozen=True)
class Job:
    # the model
    layers: int = 0
    hidden: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    ffn: int = 0
    vocab: int = 0
    experts: int = 1            # MoE: experts per layer (1: dense), top_k of them active
    top_k: int = 1
    tables: tuple = ()          # embedding tables' rows
    table_dim: int = 0
    table_dtype: str = "fp32"
    pooling: tuple = ()         # lookups a sample in each table (one each where not given)
    table_zipf: float = 1.05    # skew of the lookups (the embedding workload's default)
    # precision and optimizer
    dtype: str = "bf16"         # parameters, gradients, activations, KV-cache
    master: str = "fp32"        # the optimizer's copy of the weights ("none": no copy)
    optimizer: str = "adam"
    # the run
    train: bool = True
    micro_batch: int = 1
    global_batch: int = 0       # 0: micro_batch x dp (one micro-batch a step)
    seq: int = 4096
    dp: int = 1
    tp: int = 1
    pp: int = 1
    zero: int = 0               # ZeRO stage 0-3 (3: FSDP's full sharding)
    recompute: bool = False     # full activation recomputation: keep each layer's input only
    flash: bool = True          # attention without its score matrix kept (FlashAttention)
    offload: str = "none"
    ranks_per_host: int = 0     # GPUs (ranks) sharing one host's memory; 0: up to 8
    # serving
    context: int = 0            # tokens a sequence's KV-cache holds (serving)
    kv_block: int = 16
    prefix_shared: float = 0.0  # share of each sequence's context shared by all (one copy)
    name: str = "custom"

    @property
    def micro_batches(self) -> int:
        """Micro-batches a data-parallel rank runs each step."""
        return max(1, (self.global_batch or self.micro_batch * self.dp)
                   // (self.micro_batch * self.dp))

    @property
    def host_ranks(self) -> int:
        """Ranks whose host-side parts one host holds: as given, else every rank up to 8
        (a host of 8 GPUs)."""
        return self.ranks_per_host or min(8, self.dp * self.tp * self.pp)


def _check(job: Job) -> Job:
    bad = []
    if job.dtype not in DTYPE_BYTES or job.table_dtype not in DTYPE_BYTES:
        bad.append(f"dtype: one of {', '.join(DTYPE_BYTES)}")
    if job.master not in (*DTYPE_BYTES, "none"):
        bad.append(f"master: one of {', '.join(DTYPE_BYTES)} or none")
    if job.optimizer not in OPTIMIZERS:
        bad.append(f"optimizer: one of {', '.join(OPTIMIZERS)}")
    if job.offload not in OFFLOADS:
        bad.append(f"offload: one of {', '.join(OFFLOADS)}")
    if job.zero not in (0, 1, 2, 3):
        bad.append("zero: 0, 1, 2 or 3")
    if job.offload == "kv" and job.train:
        bad.append("offload: kv is serving's (--serve)")
    if job.offload in ("optimizer", "optimizer+params") and not job.train:
        bad.append(f"offload: {job.offload} is training's (serving has no optimizer)")
    if job.offload == "optimizer" and job.zero < 1:
        bad.append("offload: optimizer needs ZeRO 1 or more (DeepSpeed offloads the "
                   "partitioned state)")
    if job.offload == "optimizer+params" and job.zero < 3:
        bad.append("offload: optimizer+params needs ZeRO 3 (parameters are offloaded "
                   "partitioned)")
    if job.layers and not job.train and job.context < 1:
        bad.append("context: serving needs the tokens each sequence's KV-cache holds "
                   "(--context)")
    if job.train and job.context:
        bad.append("context: serving's (training has seq)")
    if job.global_batch < 0 or (job.global_batch and
                                job.global_batch % (job.micro_batch * job.dp)):
        bad.append(f"global_batch: a multiple of micro_batch x dp "
                   f"({job.micro_batch * job.dp})")
    if job.ranks_per_host > job.dp * job.tp * job.pp:
        bad.append(f"ranks_per_host: at most the job's ranks (dp x tp x pp = "
                   f"{job.dp * job.tp * job.pp})")
    if job.layers:
        for name in ("hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab"):
            if getattr(job, name) < 1:
                bad.append(f"{name}: at least 1 for a model with layers")
    if job.tables and (min(job.tables) < 1 or job.table_dim < 1):
        bad.append("tables: rows at least 1 a table, and table_dim at least 1")
    if job.pooling and min(job.pooling) < 1:
        bad.append("pooling: at least 1 lookup a table")
    if job.pooling and len(job.pooling) != len(job.tables):
        bad.append(f"pooling: one a table ({len(job.tables)}), not {len(job.pooling)}")
    if job.ranks_per_host < 0:
        bad.append("ranks_per_host: at least 1 (0: up to 8)")
    for name in ("micro_batch", "seq", "dp", "tp", "pp", "experts", "top_k", "kv_block"):
        if getattr(job, name) < 1:
            bad.append(f"{name}: at least 1")
    if job.layers and job.layers % job.pp:
        bad.append(f"pp: {job.pp} stages cannot split {job.layers} layers evenly")
    if job.heads and job.heads % job.tp:
        bad.append(f"tp: {job.tp} cannot split {job.heads} heads evenly")
    if job.heads and job.kv_heads and job.heads % job.kv_heads:
        bad.append(f"kv_heads: {job.kv_heads} does not divide {job.heads} heads")
    if job.top_k > job.experts:
        bad.append(f"top_k: at most experts ({job.experts})")
    if not 0 <= job.prefix_shared <= 1:
        bad.append("prefix_shared: between 0 and 1")
    if not job.layers and not job.tables:
        bad.append("the model: a preset, or layers (and its shape), or embedding tables")
    if bad:
        raise UserError("plan: " + "; ".join(bad))
    return job


FIELDS = {f.name: f for f in dataclasses.fields(Job)}


def make(preset: str | None = None, toml_path: str | None = None, **flags) -> Job:
    """A preset's shape, then a TOML file's fields, then the flags given (None: not
    given). Unknown fields are refused with the known ones named."""
    values: dict = {}
    if toml_path:
        try:
            with open(toml_path, "rb") as f:
                data = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise UserError(f"plan: {toml_path}: {e}") from e
        preset = data.pop("preset", None) if preset is None else preset
        values.update(data)
    values.update({k: v for k, v in flags.items() if v is not None})
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise UserError(f"plan: no field {', '.join(unknown)} (fields: "
                        f"{', '.join(sorted(FIELDS))})")
    if preset is not None:
        if preset not in PRESETS:
            raise UserError(f"plan: no preset {preset!r} (presets: {', '.join(PRESETS)})")
        values = {**PRESETS[preset], "name": preset, **values}
    for name in ("tables", "pooling"):
        if name in values:
            values[name] = tuple(values[name]) if isinstance(values[name], (list, tuple)) \
                else values[name]
    wrong = [f"{k} = {v!r} (want {FIELDS[k].type})" for k, v in values.items()
             if not _typed(v, FIELDS[k].type)]
    if wrong:
        raise UserError("plan: " + "; ".join(wrong))
    return _check(Job(**values))


def _typed(value, kind: str) -> bool:
    """Whether a field's value has its annotated type (the annotations are text here):
    ints for int (not bools), numbers for float, a tuple of ints for tuple."""
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "tuple":
        return isinstance(value, tuple) and all(isinstance(v, int) and not isinstance(v, bool)
                                                for v in value)
    return isinstance(value, {"bool": bool, "str": str}.get(kind, object))
