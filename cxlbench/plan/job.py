"""A training or serving job as `cxlbench plan` takes it: the model's shape (a preset or
plain fields), its precision and optimizer, and the run's shape (batches, sequence,
parallel degrees, ZeRO stage, recomputation, offload). Built from a TOML file, flags,
or both (flags win)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import UserError
from ..options import Option
from ..workloads import embedding

try:
    import tomllib
except ImportError:         # Python 3.10
    import tomli as tomllib

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
OPTIMIZERS = ("adam", "adamw", "sgd", "adagrad")
OFFLOADS = ("none", "optimizer", "optimizer+params", "kv")      # kv: serving's KV-cache
SCHEDULES = ("1f1b", "gpipe", "interleaved")   # pipeline schedules (interleaved: 1F1B's)


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
    """A job's fields, each described (kind, bounds, help) in OPTIONS below."""
    # the model
    layers: int = 0
    hidden: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    ffn: int = 0
    vocab: int = 0
    experts: int = 1
    top_k: int = 1
    tables: tuple = ()
    table_dim: int = 0
    table_dtype: str = "fp32"
    pooling: tuple = ()
    table_zipf: float = 1.05
    # precision and optimizer
    dtype: str = "bf16"
    master: str = "fp32"
    optimizer: str = "adam"
    # the run
    train: bool = True
    micro_batch: int = 1
    global_batch: int = 0
    seq: int = 4096
    dp: int = 1
    tp: int = 1
    pp: int = 1
    schedule: str = "1f1b"
    chunks: int = 2             # interleaved: model chunks a device runs
    layers_per_stage: tuple = ()    # a split of the layers (default: equal)
    zero: int = 0
    recompute: bool = False
    flash: bool = True
    offload: str = "none"
    ranks_per_host: int = 0
    # serving
    context: int = 0
    kv_block: int = 16
    prefix_shared: float = 0.0
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
    """What no one field's bounds say: the fields against each other (each value is
    already of its kind and within its bounds, so nothing here divides by zero)."""
    bad = []
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
    if job.global_batch % (job.micro_batch * job.dp):
        bad.append(f"global_batch: a multiple of micro_batch x dp "
                   f"({job.micro_batch * job.dp})")
    if job.ranks_per_host > job.dp * job.tp * job.pp:
        bad.append(f"ranks_per_host: at most the job's ranks (dp x tp x pp = "
                   f"{job.dp * job.tp * job.pp})")
    if job.layers:
        for name in ("hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab"):
            if getattr(job, name) < 1:
                bad.append(f"{name}: at least 1 for a model with layers")
    if job.tables and job.table_dim < 1:
        bad.append("table_dim: at least 1 for embedding tables")
    if job.pooling and len(job.pooling) != len(job.tables):
        bad.append(f"pooling: one a table ({len(job.tables)}), not {len(job.pooling)}")
    if job.layers_per_stage:
        if len(job.layers_per_stage) != job.pp or sum(job.layers_per_stage) != job.layers:
            bad.append(f"layers_per_stage: one count a stage ({job.pp}) adding up to the "
                       f"layers ({job.layers}), not {list(job.layers_per_stage)}")
        if job.schedule == "interleaved":
            bad.append("layers_per_stage: with the interleaved schedule, layers are split "
                       "equally (chunks of pp x chunks)")
    elif job.layers and job.layers % job.pp:
        bad.append(f"pp: {job.pp} stages cannot split {job.layers} layers evenly "
                   "(--layers-per-stage gives another split)")
    if job.schedule == "interleaved" and job.layers and job.layers % (job.pp * job.chunks):
        bad.append(f"chunks: {job.pp} stages x {job.chunks} chunks cannot split "
                   f"{job.layers} layers evenly")
    if job.heads and job.heads % job.tp:
        bad.append(f"tp: {job.tp} cannot split {job.heads} heads evenly")
    if job.heads and job.kv_heads and job.heads % job.kv_heads:
        bad.append(f"kv_heads: {job.kv_heads} does not divide {job.heads} heads")
    if job.top_k > job.experts:
        bad.append(f"top_k: at most experts ({job.experts})")
    if not job.layers and not job.tables:
        bad.append("the model: a preset, or layers (and its shape), or embedding tables")
    if bad:
        raise UserError("plan: " + "; ".join(bad))
    return job


DEFAULTS = {f.name: f.default for f in dataclasses.fields(Job)}


def _field(name: str, kind: str, help: str, unit: str | None = None, **kw) -> Option:
    return Option(name, kind, DEFAULTS[name], help, unit, **kw)


# Each field's kind, bounds and help; its default is Job's. The bounds pass every model
# trained or served so far and keep each product the plan forms far from a float's range
# (the parameter count and each part's bytes are bounded once the job is whole).
_ROWS, _DIM = embedding.OPTIONS["rows"], embedding.OPTIONS["dim"]
OPTIONS = {o.name: o for o in [
    _field("layers", "int", "transformer layers (0: none, embedding tables alone)", min=0,
           max=10_000),
    _field("hidden", "int", "the model's width", min=0, max=1 << 20),
    _field("heads", "int", "attention heads", min=0, max=1 << 16),
    _field("kv_heads", "int", "key and value heads (grouped-query attention)", min=0,
           max=1 << 16),
    _field("head_dim", "int", "a head's width", min=0, max=1 << 16),
    _field("ffn", "int", "the MLP's inner width", min=0, max=1 << 22),
    _field("vocab", "int", "the vocabulary", "tokens", min=0, max=1 << 24),
    _field("experts", "int", "MoE: experts a layer (1: dense), top_k of them active", min=1,
           max=1 << 16),
    _field("top_k", "int", "MoE: experts active a token", min=1, max=1 << 16),
    _field("tables", "int", "embedding tables' rows, a list: one a table", "rows",
           min=_ROWS.min, max=_ROWS.max),
    _field("table_dim", "int", "elements a table's row (0: no tables)", min=0, max=_DIM.max),
    _field("table_dtype", "choice", "a table's elements", choices=tuple(DTYPE_BYTES)),
    _field("pooling", "int", "lookups a sample in each table, a list (one each where not "
           "given)", min=1, max=embedding.OPTIONS["pooling"].max),
    embedding.OPTIONS["alpha"].but(name="table_zipf", default=DEFAULTS["table_zipf"],
                                   help="skew of the lookups: Zipf's exponent, as the "
                                   "embedding workload's alpha"),
    _field("dtype", "choice", "parameters, gradients, activations, KV-cache",
           choices=tuple(DTYPE_BYTES)),
    _field("master", "choice", "the optimizer's copy of the weights (none: no copy)",
           choices=(*DTYPE_BYTES, "none")),
    _field("optimizer", "choice", "the optimizer", choices=OPTIMIZERS),
    _field("train", "bool", "training (false: serving)"),
    _field("micro_batch", "int", "samples a micro-batch", min=1, max=1 << 20),
    _field("global_batch", "int", "samples a step (0: micro_batch x dp, one micro-batch a "
           "step)", min=0, max=1 << 40),
    _field("seq", "int", "sequence length (training)", "tokens", min=1, max=1 << 24),
    _field("dp", "int", "data-parallel degree", min=1, max=1 << 20),
    _field("tp", "int", "tensor-parallel degree", min=1, max=1 << 16),
    _field("pp", "int", "pipeline-parallel degree", min=1, max=1 << 16),
    _field("schedule", "choice", "the pipeline's schedule: 1f1b, gpipe or interleaved "
           "(1F1B over chunks)", choices=SCHEDULES),
    _field("chunks", "int", "model chunks a device runs (interleaved schedule)", min=2,
           max=1 << 10),
    _field("layers_per_stage", "int", "layers each pipeline stage holds, a list (default: "
           "equal)", min=0, max=1 << 20),
    _field("zero", "int", "ZeRO stage 0-3 (3: FSDP's full sharding)", min=0, max=3),
    _field("recompute", "bool", "full activation recomputation: each layer's input kept "
           "only"),
    _field("flash", "bool", "attention without its score matrix kept (FlashAttention)"),
    _field("offload", "choice", "what lives on the host: training's optimizer (and "
           "params), serving's kv", choices=OFFLOADS),
    _field("ranks_per_host", "int", "GPUs (ranks) sharing one host's memory (0: up to 8)",
           min=0, max=1 << 16),
    _field("context", "int", "tokens a sequence's KV-cache holds (serving)", "tokens", min=0,
           max=1 << 30),
    _field("kv_block", "int", "tokens a KV-cache block", "tokens", min=1, max=1 << 20),
    _field("prefix_shared", "float", "share of each sequence's context shared by all (one "
           "copy)", min=0.0, max=1.0),
]}
LISTS = ("tables", "pooling", "layers_per_stage")   # lists: one value a table (a stage)
MAX_TABLES = 1 << 14
MAX_NAME = 100                          # name: free text (no option kind), printable
MAX_PARAMS = 10 ** 15                   # a thousand times the largest dense model's
MAX_BYTES = 1 << 60                     # a part's bytes on one device
MAX_CONFIG = 1 << 20                    # a job's TOML file
assert set(OPTIONS) | {"name"} == set(DEFAULTS), "every field of Job has an option"


def convert(name: str, raw) -> object:
    """A field's value as given (a flag's, a TOML file's, a preset's) -> the Job's.
    ValueError saying what is wrong."""
    if name == "name":
        if not isinstance(raw, str) or not raw.isprintable() or not 0 < len(raw) <= MAX_NAME:
            raise ValueError(f"{raw!r:.40}: a name of printable text, 1 to {MAX_NAME} "
                             "characters")
        return raw
    option = OPTIONS[name]
    if name not in LISTS:
        return option.convert(raw)
    if not isinstance(raw, (list, tuple)):
        raise ValueError(f"{raw!r:.40} is not a list (one value a table: [1000, 5000])")
    if len(raw) > MAX_TABLES:
        raise ValueError(f"{len(raw)} values, more than the {MAX_TABLES} tables a plan takes")
    return tuple(option.convert(v) for v in raw)


def read_input(path: str, what: str, limit: int) -> str:
    """A file the user names (a job's TOML, a plan's JSON) as text: at most `limit` bytes
    read (a device such as /dev/zero would flood the read; a pipe, as from <(...), is
    read like a file), UTF-8 (a BOM dropped). UserError naming `what` and the file."""
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as e:
        raise UserError(f"{what} {path}: cannot be read: {e.strerror or e}") from None
    if len(raw) > limit:
        raise UserError(f"{what} {path}: larger than the {limit >> 20} MiB it may be")
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise UserError(f"{what} {path}: not UTF-8 text (line {line}: {e.reason})") from None


def _config(path: str) -> dict:
    text = read_input(path, "plan: --config", MAX_CONFIG)
    try:
        return tomllib.loads(text)
    except ValueError as e:     # TOMLDecodeError, or an integer of over 4300 digits
        raise UserError(f"plan: --config {path}: not valid TOML: {e}") from None
    except RecursionError:
        raise UserError(f"plan: --config {path}: not valid TOML: nested too deeply") from None


def make(preset: str | None = None, toml_path: str | None = None, **flags) -> Job:
    """A preset's shape, then a TOML file's fields, then the flags given (None: not
    given). Each value is checked against its field's option before anything is computed;
    unknown fields are refused with the known ones named."""
    given: dict = {}        # field: (value, where it was given)
    if toml_path:
        data = _config(toml_path)
        if "preset" in data:        # checked even where --model overrides it
            named = _preset(data.pop("preset"), f"--config {toml_path}: preset")
            preset = named if preset is None else preset
        given.update({k: (v, f"--config {toml_path}: {k}") for k, v in data.items()})
    given.update({k: (v, f"--{k.replace('_', '-')} ({k})") for k, v in flags.items()
                  if v is not None})
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        shown = [k if k.isidentifier() else f"{k!r:.40}" for k in unknown[:5]]
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise UserError(f"plan: no field {', '.join(shown)}{more} (fields: "
                        f"{', '.join(DEFAULTS)})")
    if preset is not None:
        _preset(preset, "--model")
        given = {**{k: (v, f"preset {preset}: {k}") for k, v in PRESETS[preset].items()},
                 "name": (preset, "name"), **given}
    values, bad = {}, []
    for name, (raw, where) in given.items():
        try:
            values[name] = convert(name, raw)
        except ValueError as e:
            bad.append(f"{where}: {e}")
    if bad:
        raise UserError("plan: " + "; ".join(bad))
    return _check(Job(**values))


def _preset(name, where: str) -> str:
    if not isinstance(name, str) or name not in PRESETS:
        raise UserError(f"plan: {where}: no preset {name!r:.40} (presets: "
                        f"{', '.join(PRESETS)})")
    return name


