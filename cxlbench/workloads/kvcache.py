"""The paged KV-cache workload of LLM serving, in the layout paged-attention engines (vLLM)
keep: per layer, K and V each of (blocks, block tokens, kv_heads, head_dim), a block table
per sequence naming its blocks, scattered over the pool by `fragmentation`. Its layout,
the block table, the tokens' check hashes numpy computes on its own, the copy plans of
swaps and restores, one case's pools driven through the C kernel (`Cache`), and the epochs
the tiering engines drive. The kvcache benchmark and the tiering engines run it."""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..errors import CheckError, UserError
from ..memory import native
from ..options import Option
from .epochs import Demand, pages_touched

NAME = "kvcache"
OPS = ("decode", "prefill", "swap_out", "swap_in", "restore")
OFFLOADING = ("swap_out", "swap_in", "restore")     # the ops that place `offload`
ELEM_BYTES = {"fp16": 2, "bf16": 2, "fp8": 1, "fp32": 4}
COPIES = ("block", "batched")


# From the models' config.json (num_hidden_layers, num_key_value_heads, hidden_size /
# num_attention_heads): 2 x layers x kv_heads x head_dim x 2 bytes a token in fp16.
PRESETS = {
    "llama-3-8b": {"layers": 32, "kv_heads": 8, "head_dim": 128},     # 128 KiB a token
    "llama-3-70b": {"layers": 80, "kv_heads": 8, "head_dim": 128},    # 320 KiB a token
}


CUSTOM = ("layers", "kv_heads", "head_dim")     # what a preset sets itself


# The workload's own options; the benchmark adds where and how it runs.
OPTIONS = {
    "op": Option("op", "choice", "decode", "decode: append a token to each sequence, read "
                 "all its blocks; prefill: write the prompts; swap_out, swap_in: copy whole "
                 "sequences between cache and offload; restore: bring back 256-token chunks",
                 choices=OPS),
    "preset": Option("preset", "choice", "llama-3-8b", "a model's KV shape (layers, kv_heads, "
                     "head_dim its own); custom: layers x kv_heads x head_dim",
                     choices=("custom", *PRESETS)),
    "scale": Option("scale", "float", 1.0, "a preset's layers times this (at least 1), to fit "
                    "the machine", min=1e-9, max=1.0),
    "layers": Option("layers", "int", 32, "layers (custom)", min=1, max=(1 << 15) - 1),
    "kv_heads": Option("kv_heads", "int", 8, "KV heads (custom)", min=1, max=1024),
    "head_dim": Option("head_dim", "int", 128, "elements per head (custom)", min=1,
                       max=65536),
    "dtype": Option("dtype", "choice", "fp16", "KV element type (sets the bytes; the words "
                    "stored are check hashes)", choices=tuple(ELEM_BYTES)),
    "block": Option("block", "int", 16, "tokens per block", "tokens", min=1, max=4096),
    "batch": Option("batch", "int", 8, "sequences", min=1, max=1 << 16),
    "seq_len": Option("seq_len", "int", 1024, "tokens each sequence holds (decode: before "
                      "the first step; restore: whole chunks)", "tokens", min=1,
                      max=1 << 30),
    "steps": Option("steps", "int", 16, "decode steps a repetition, each timed (step_p99 "
                    "is in effect the slowest step when fewer than 100)", min=1,
                    max=1 << 16),
    "fragmentation": Option("fragmentation", "float", 1.0, "fraction of the pool's blocks "
                            "shuffled: 0, each sequence's blocks contiguous; 1, all "
                            "scattered", min=0.0, max=1.0),
    "copy": Option("copy", "choice", "block", "swaps and restores: block, one memcpy per "
                   "block, layer and K/V; batched, runs of blocks consecutive on both sides "
                   "merged into one copy", choices=COPIES),
    "chunk_tokens": Option("chunk_tokens", "int", 256, "tokens a restore brings back at once "
                           "(LMCache's chunk)", "tokens", min=1, max=1 << 20),
    "prefetch": Option("prefetch", "int", 0, "decode: lines of the next block asked for "
                       "before each block is read (0: none)", "lines", min=0, max=1 << 16),
    "cold": Option("cold", "bool", True, "the data each timed region reads out of the "
                   "caches first, untimed (decode: each step's blocks before it; the others: "
                   "their buffers before the call), as a server finds its KV-cache after the "
                   "weights streamed through; false: left cached from the last step or "
                   "repetition"),
    "seed": Option("seed", "int", 1, "seed of the block table", min=0),
}


# splitmix64's constants: a token's first word, as kvcache.c's token_base makes it.
GOLDEN, MIX1, MIX2 = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9),
                      np.uint64(0x94D049BB133111EB))


@dataclass(frozen=True)
class Layout:
    op: str
    layers: int
    kv_heads: int
    head_dim: int
    dtype: str
    block: int
    batch: int
    seq_len: int
    steps: int = 1
    chunk: int = 256

    @property
    def token_bytes(self) -> int:
        """One token's K (or V) in one layer."""
        return self.kv_heads * self.head_dim * ELEM_BYTES[self.dtype]

    @property
    def words(self) -> int:
        return self.token_bytes // 8

    @property
    def block_bytes(self) -> int:
        return self.block * self.token_bytes

    @property
    def tokens(self) -> int:
        """Tokens each sequence holds at the end of a repetition."""
        return self.seq_len + (self.steps if self.op == "decode" else 0)

    @property
    def width(self) -> int:
        """Blocks of each sequence's table."""
        return -(-self.tokens // self.block)

    @property
    def blocks(self) -> int:
        return self.batch * self.width

    @property
    def chunk_blocks(self) -> int:
        return self.chunk // self.block

    def sizes(self) -> dict[str, int]:
        cache = self.layers * 2 * self.blocks * self.block_bytes
        return {"cache": cache, **({"offload": cache} if self.op in OFFLOADING else {})}

    def cache_pool(self, addr: int) -> native.KvPool:
        """vLLM's: per layer, K's blocks then V's."""
        bb = self.blocks * self.block_bytes
        return native.KvPool(addr, self.blocks, layer_bytes=2 * bb, kv_bytes=bb)

    def offload_pool(self, addr: int) -> native.KvPool:
        """Swap space in the cache's layout; restore's chunks as LMCache stores them, each
        chunk's K of every layer and then its V together ([2, layers, chunk tokens])."""
        if self.op != "restore":
            return self.cache_pool(addr)
        part = self.chunk_blocks * self.block_bytes
        return native.KvPool(addr, self.blocks, layer_bytes=part,
                             kv_bytes=self.layers * part, group=self.chunk_blocks,
                             group_bytes=2 * self.layers * part)


def demand(params: dict) -> Demand | None:
    """What a repetition of decode steps asks of memory: every block of every sequence,
    layer, K and V read once a step (the last, part-filled block: its tokens), each from
    memory where the step's blocks were evicted first (cold), else at the distance of one
    step's reads; the appended tokens written. None for the other ops (not modelled)."""
    lay = layout(params)
    if lay.op != "decode":
        return None
    per_token = lay.layers * 2 * lay.token_bytes
    blocks = []         # each block's bytes read at a step: whole ones, then the last's tokens
    for i in range(lay.steps):
        whole, part = divmod(lay.seq_len + i + 1, lay.block)
        one = [lay.block_bytes] * whole + ([part * lay.token_bytes] if part else [])
        blocks.append(np.tile(one, lay.batch * lay.layers * 2))
    blocks = np.concatenate(blocks)
    distance = np.inf if params.get("cold", True) else lay.batch * lay.tokens * per_token
    return Demand(units=lay.batch * lay.steps, block=lay.block_bytes, blocks=blocks,
                  reuse=np.full(len(blocks), distance), write=per_token * lay.batch * lay.steps)


def model_shape(params: dict) -> dict:
    """layers, kv_heads, head_dim: a preset's (its layers times `scale`, where the options
    have one), or the custom options'."""
    preset = PRESETS.get(params["preset"])
    if preset is None:
        return {k: params[k] for k in CUSTOM}
    return {**preset, "layers": max(1, round(preset["layers"] * params.get("scale", 1.0)))}


def layout(params: dict) -> Layout:
    shape = model_shape(params)
    return Layout(params["op"], shape["layers"], shape["kv_heads"], shape["head_dim"],
                  params["dtype"], params["block"], params["batch"], params["seq_len"],
                  params["steps"], params["chunk_tokens"])


def block_table(lay: Layout, fragmentation: float, seed: int) -> np.ndarray:
    """(batch, width) physical blocks: sequence s owns blocks s * width ... in order, then a
    `fragmentation` share of all the pool's entries, picked at random, is shuffled among
    itself (1: a random permutation of the pool, as a long-running server's free list)."""
    rng = np.random.default_rng(seed)
    perm = np.arange(lay.blocks, dtype=np.int64)
    moved = rng.choice(lay.blocks, round(fragmentation * lay.blocks), replace=False)
    perm[moved] = moved[rng.permutation(len(moved))]
    return perm.reshape(lay.batch, lay.width)


def token_sums(lay: Layout, gen: int, positions) -> np.ndarray:
    """(layers, 2, batch, len(positions)) uint64: the sum of each token's words as
    kvcache.c writes them (its first word a splitmix64 hash of gen, layer, K/V, sequence
    and position, the others that plus their index), computed here on its own."""
    W = np.uint64(lay.words)
    lkv = np.arange(2 * lay.layers, dtype=np.uint64).reshape(lay.layers, 2, 1, 1)
    seq = np.arange(lay.batch, dtype=np.uint64).reshape(1, 1, -1, 1)
    pos = np.asarray(positions, dtype=np.uint64).reshape(1, 1, 1, -1)
    x = np.full(1, gen, dtype=np.uint64) * GOLDEN + (((lkv << 16 | seq) << 32) | pos)
    x ^= x >> 30
    x *= MIX1
    x ^= x >> 27
    x *= MIX2
    x ^= x >> 31
    return x * W + W * (W - np.uint64(1)) // np.uint64(2)


def pool_token_sums(words: np.ndarray, pool: native.KvPool, lay: Layout) -> np.ndarray:
    """(layers, 2, blocks, block) uint64: the sum of each token's words as numpy reads
    them from a pool's memory (a uint64 view of the buffer)."""
    group = pool.group or pool.blocks
    view = as_strided(words, (lay.layers, 2, pool.blocks // group, group, lay.block, lay.words),
                      (pool.layer_bytes, pool.kv_bytes, pool.group_bytes, lay.block_bytes,
                       lay.token_bytes, 8), writeable=False)
    return view.sum(axis=-1, dtype=np.uint64).reshape(lay.layers, 2, pool.blocks, lay.block)


def _where(lay: Layout, table: np.ndarray, layer: int, kv: int, seq: int, pos: int) -> str:
    b = pos // lay.block
    return (f"layer {layer} {'KV'[kv]}, sequence {seq}, token {pos}: block {b} of the "
            f"sequence, physical block {table[seq, b]}")


def check_written(words: np.ndarray, pool: native.KvPool, lay: Layout, table: np.ndarray,
                  tokens: int, want: np.ndarray, what: str) -> None:
    """Every token [0, tokens) of every sequence, read by numpy through `table` from the
    pool's memory, sums to `want` (layers, 2, batch, tokens)."""
    got = pool_token_sums(words, pool, lay)[:, :, table]     # layers, 2, batch, width, block
    got = got.reshape(lay.layers, 2, lay.batch, -1)[..., :tokens]
    bad = np.argwhere(got != want)
    if len(bad):
        raise CheckError(f"kvcache: {what}: {len(bad)} tokens hold what was not written to "
                         f"them, first at {_where(lay, table, *bad[0])}")


def decode_want(lay: Layout, prompt: np.ndarray, gen: int) -> np.ndarray:
    """(layers, 2, batch * width) uint64: what decode's steps sum from each table entry,
    all steps together: each prompt token is read by every step, appended token j (written
    by step j with this repetition's gen) by steps j to the last."""
    new = token_sums(lay, gen, np.arange(lay.seq_len, lay.tokens))
    reads = np.arange(lay.steps, 0, -1, dtype=np.uint64)            # steps - j
    tok = np.zeros((lay.layers, 2, lay.batch, lay.width * lay.block), dtype=np.uint64)
    tok[..., :lay.seq_len] = prompt * np.uint64(lay.steps)
    tok[..., lay.seq_len:lay.tokens] = new * reads
    return tok.reshape(lay.layers, 2, lay.batch * lay.width, lay.block).sum(
        axis=-1, dtype=np.uint64)


def check_sums(sums: np.ndarray, want: np.ndarray, lay: Layout, table: np.ndarray,
               seqs=None) -> None:
    """seqs: the sequence each row of `table` is (where it holds only some)."""
    bad = np.argwhere(sums != want)
    if len(bad):
        layer, kv, e = bad[0]
        row, b = divmod(int(e), lay.width)
        seq = row if seqs is None else int(seqs[row])
        raise CheckError(f"kvcache: decode read {len(bad)} blocks that do not hold what was "
                         f"written to them, first layer {layer} {'KV'[kv]}, sequence {seq}, "
                         f"block {b} of the sequence, physical block {table[row, b]}")


def copy_plan(lay: Layout, table: np.ndarray, copy: str) -> tuple[np.ndarray, np.ndarray]:
    """Runs (source block, destination block, blocks) and group offsets. A swap moves whole
    sequences, a group (one timed call) each, between their table's blocks and the swap
    space's, allocated to them in order; a restore brings back each sequence's chunks, a
    group each, from chunk storage into the table's blocks. copy=block: one run a block (a
    memcpy per block, layer and K/V, as vLLM's swap_blocks); batched: consecutive blocks on
    both sides merged, as one gather or batched copy streams them."""
    seq_blocks = -(-lay.seq_len // lay.block)
    cache = table[:, :seq_blocks].ravel()
    # the swap space's blocks, or chunk storage's (numbered chunk after chunk), in order
    other = np.arange(lay.batch * seq_blocks, dtype=np.int64)
    src, dst = (cache, other) if lay.op == "swap_out" else (other, cache)
    per = lay.chunk_blocks if lay.op == "restore" else seq_blocks
    starts = np.arange(len(src)) % per == 0             # each group begins a run
    if copy == "batched":
        starts[1:] |= (np.diff(src) != 1) | (np.diff(dst) != 1)
    else:
        starts[:] = True
    first = np.flatnonzero(starts)
    runs = np.stack([src[first], dst[first], np.diff(np.append(first, len(src)))], axis=1)
    group_at = np.flatnonzero(np.arange(len(src)) % per == 0)
    groups = np.append(np.searchsorted(first, group_at), len(first)).astype(np.int64)
    return np.ascontiguousarray(runs, dtype=np.int64), groups


def entry() -> native.Entry:
    return native.driver("kvcache")


# Options only some operations use; anything else would be a separate case that measures
# the same thing.
USED_BY = {"steps": ("decode",), "prefetch": ("decode",), "copy": OFFLOADING,
           "chunk_tokens": ("restore",)}


def unused(params: dict) -> dict[str, str]:
    """The options this case ignores, each with why (the registry refuses them set)."""
    out = {k: f"op={params['op']} (they serve {', '.join(ops)} only)"
           for k, ops in USED_BY.items() if params["op"] not in ops}
    if params["preset"] == "custom":
        out["scale"] = "scale shrinks a preset's layers; custom takes layers"
    else:
        out.update(dict.fromkeys(CUSTOM, f"preset={params['preset']} has layers, kv_heads and "
                                         "head_dim of its own (scale shrinks its layers)"))
    return out


class Cache:
    """One case's pools, table and copy plan, set up untimed; once() is a timed
    repetition, checked. `cache` and `offload` are (address, uint64 view) of memory the
    caller placed."""

    def __init__(self, lay: Layout, table: np.ndarray, cache, offload, isa: str, cpus,
                 copy: str = "block", prefetch: int = 0, cold: bool = True):
        self.lay, self.table, self.isa, self.cpus = lay, table, isa, list(cpus)
        self.prefetch, self.cold = prefetch, cold
        sizes = lay.sizes()
        self.extents = [(cache[0], sizes["cache"])] + \
            ([(offload[0], sizes["offload"])] if offload is not None else [])
        # False off x86-64, where nothing can be evicted: cold runs warm (info says so)
        self.evicted = cold and native.evict(cache[0], 0)
        self.cache_words = cache[1]
        self.cache = lay.cache_pool(cache[0])
        self.offload = self.offload_words = None
        if offload is not None:
            self.offload, self.offload_words = lay.offload_pool(offload[0]), offload[1]
        self.gen = 1
        self.step_ns = np.zeros(max(lay.steps, lay.batch * max(1, lay.seq_len // lay.chunk),
                                    lay.batch), dtype=np.uint64)
        self.sums = np.zeros(lay.layers * 2 * lay.blocks, dtype=np.uint64)
        if lay.op == "decode":          # the prompts, written once and checked
            self.prompt = token_sums(lay, self.gen, np.arange(lay.seq_len))
            self.write(self.cache, table, self.gen)
            check_written(self.cache_words, self.cache, lay, table, lay.seq_len, self.prompt,
                          "the prompts written before decoding")
        if lay.op in OFFLOADING:
            self.runs, self.groups = copy_plan(lay, table, copy)
            # bytes copied, each once: whole blocks, every layer, K and V
            self.copied = int(self.runs[:, 2].sum()) * lay.block_bytes * 2 * lay.layers
            # the swap space's (or chunk storage's) blocks of each sequence, in order
            self.other_table = np.arange(lay.blocks, dtype=np.int64).reshape(lay.batch,
                                                                              lay.width)

    def evict(self) -> None:
        """Untimed: the pools out of the caches, so the call reads (and writes) memory."""
        if self.evicted:
            for addr, size in self.extents:
                native.evict(addr, size)

    def write(self, pool, table, gen) -> native.KvResult:
        r = native.kvcache("write", pool, self.lay.layers, self.lay.block, self.lay.token_bytes,
                           self.isa, self.cpus, table=table, tokens=self.lay.seq_len, gen=gen)
        if r.bad:
            raise CheckError(f"kvcache: {r.bad} table entries named no block of the pool")
        return r

    @property
    def steps(self) -> int:
        return self.lay.steps if self.lay.op == "decode" else len(self.groups) - 1 \
            if self.lay.op in OFFLOADING else 1

    def once(self, seqs=None) -> tuple[native.KvResult, np.ndarray]:
        """A timed repetition and its check: (the result, each step's ns). seqs: decode
        only these sequences (the tiering workload's active ones), in this order."""
        lay = self.lay
        self.gen += 1
        if lay.op == "decode":
            table, prompt = self.table, self.prompt
            if seqs is not None:        # a batch of these rows, each hashed as its row
                table, prompt = np.ascontiguousarray(table[seqs]), prompt[:, :, seqs]
                lay = replace(lay, batch=len(seqs))
            sums = self.sums[:lay.layers * 2 * lay.blocks]
            sums.fill(0)
            r = native.kvcache("decode", self.cache, lay.layers, lay.block, lay.token_bytes,
                               self.isa, self.cpus, table=table, tokens=lay.seq_len,
                               steps=lay.steps, gen=self.gen, sums=sums,
                               step_ns=self.step_ns, prefetch=self.prefetch, cold=self.cold)
            if r.bad:
                raise CheckError(f"kvcache: {r.bad} table entries named no block of the pool")
            check_sums(sums.reshape(lay.layers, 2, -1), decode_want(lay, prompt, self.gen),
                       lay, table, seqs)
            return r, self.step_ns[:lay.steps]
        want = token_sums(lay, self.gen, np.arange(lay.seq_len))
        if lay.op == "prefill":
            self.evict()
            r = self.write(self.cache, self.table, self.gen)
            check_written(self.cache_words, self.cache, lay, self.table, lay.seq_len, want,
                          "prefill")
            return r, self.step_ns[:0]
        # The source rewritten (untimed) with this repetition's tokens, then the copies.
        cache_side = (self.cache, self.cache_words, self.table)
        other_side = (self.offload, self.offload_words, self.other_table)
        (src, _, src_table), (dst, dst_words, dst_table) = (
            (cache_side, other_side) if lay.op == "swap_out" else (other_side, cache_side))
        self.write(src, src_table, self.gen)
        self.evict()            # the source's tail, just written, and the destination
        steps = len(self.groups) - 1
        r = native.kvcache("copy", src, lay.layers, lay.block, lay.token_bytes, self.isa,
                           self.cpus, dst=dst, runs=self.runs, groups=self.groups,
                           steps=steps, step_ns=self.step_ns)
        if r.bad:
            raise CheckError(f"kvcache: {r.bad} copies named blocks outside their pool")
        check_written(dst_words, dst, lay, dst_table, lay.seq_len, want, lay.op)
        return r, self.step_ns[:steps]


class Epochs:
    """LLM serving's paged KV-cache as the tiering engines drive it: a pool holding `batch`
    sessions of `seq_len` tokens (blocks scattered by `fragmentation`) is the tiered
    buffer. Each epoch `active` sessions, drawn without replacement by a Zipf popularity
    (sessions that return often: multi-turn chat), decode `steps` tokens each, every step
    reading all their blocks, every layer, K and V; then the next turn. Popularity holds
    across epochs; with phase=shift the second half's ranks go to other sessions. A
    session's blocks are all hot or all cold together, so the skew is the sessions' and a
    page's count is how often its session decodes."""
    TIERED = "cache"
    BUFFERS = ("cache",)
    UNIT = "tokens"
    RATE = ("tok/s", 1.0)       # what throughput is reported in: unit, units a second each
    # The options a tiering case takes, as kvcache.<name>: a pool of 160 MiB (32 sessions
    # of 256 + 64 tokens, 4 layers of Llama-3-8B's 32 at 16 KiB a token), 8 sessions
    # decoding 64 tokens an epoch: 2.4 GB read an epoch, so that the moves between epochs
    # (an eighth of the fast tier at most, by default) cost a fraction of one.
    OPTIONS = {
        "preset": OPTIONS["preset"].but(choices=tuple(PRESETS), help="a model's KV shape"),
        "scale": OPTIONS["scale"].but(default=0.125),
        "dtype": OPTIONS["dtype"],
        "block": OPTIONS["block"],
        "batch": OPTIONS["batch"].but(default=32, min=2,
                                      help="sessions whose context the pool holds"),
        "seq_len": OPTIONS["seq_len"].but(default=256, help="tokens of each session's context"),
        "steps": OPTIONS["steps"].but(default=64,
                                      help="tokens each active session decodes an epoch"),
        "fragmentation": OPTIONS["fragmentation"],
        "active": Option("active", "int", 8, "sessions that decode each epoch (at most "
                         "kvcache.batch)", min=1, max=1 << 16),
        # (at most 4: the 65536th session's weight stays a float, not 0)
        "alpha": Option("alpha", "float", 1.0, "Zipf exponent of the sessions' popularity "
                        "(0: uniform)", min=0.0, max=4.0),
    }

    def __init__(self, own: dict, seed: int, epochs: int, phase: str):
        own = {**{name: opt.default for name, opt in self.OPTIONS.items()}, **own}
        self.lay = layout({**own, "op": "decode", "chunk_tokens": 256})
        if own["active"] > self.lay.batch:
            raise UserError(f"kvcache.active={own['active']} sessions cannot decode out of "
                            f"kvcache.batch={self.lay.batch}")
        self.active, self.alpha = own["active"], own["alpha"]
        self.seed, self.epochs, self.phase = seed, epochs, phase
        self.table = block_table(self.lay, own["fragmentation"], self.seed)

    @classmethod
    def unused(cls, own: dict) -> dict[str, str]:
        return {}

    @functools.cached_property
    def _active(self) -> list[np.ndarray]:
        """Each epoch's sessions: ranks scattered over the sessions by a seeded
        permutation, rank r drawn with weight 1 / (r + 1)^alpha."""
        n, rng = self.lay.batch, np.random.default_rng(self.seed + 2)
        weight = 1.0 / np.arange(1, n + 1) ** self.alpha
        session_of = rng.permutation(n)
        out = []
        for e in range(self.epochs):
            turned = (session_of + n // 2) % n if self.phase == "shift" and \
                e >= self.epochs // 2 else session_of
            ranks = rng.choice(n, self.active, replace=False, p=weight / weight.sum())
            out.append(turned[ranks])
        return out

    def sizes(self) -> dict[str, int]:
        return self.lay.sizes()

    def epoch_bytes(self) -> int:
        """Bytes an epoch reads and writes: every step reads all tokens so far of each
        active session and writes its new one."""
        lay = self.lay
        reads = sum(lay.seq_len + i + 1 for i in range(lay.steps))
        every_layer = lay.layers * 2 * lay.token_bytes      # one token, every layer, K and V
        return every_layer * self.active * (reads + lay.steps)

    def units(self) -> int:
        """Tokens an epoch decodes."""
        return self.active * self.lay.steps

    def waits(self, counts: np.ndarray) -> int:
        """Misses waited: one a page read (its lines then stream; prefetchers stop at a
        page's end)."""
        return int(counts.sum())

    def counts(self, epoch: int, pages: int, page: int) -> np.ndarray:
        """Each page's accesses in the epoch. An access is one block's span read at one
        step (per active session, layer and K/V: its tokens so far) or the one token
        written; it counts on every page it touches, so a page holding several blocks
        counts each of them read."""
        firsts, sizes, _ = self._accesses(epoch)
        return np.bincount(pages_touched(firsts, sizes, page), minlength=pages)

    def demand(self, epoch: int, page: int) -> Demand:
        """The epoch's block reads as the calibrated model charges them: each a random read
        of a block's tokens so far (a part-filled one: its tokens) on the page it starts on, from memory
        (every step's blocks are evicted before it, as a server finds them after the
        weights streamed through); the appended tokens streamed."""
        firsts, sizes, read = self._accesses(epoch)
        return Demand(units=self.units(), block=self.lay.block_bytes, blocks=sizes[read],
                      reuse=np.full(int(read.sum()), np.inf), pages=firsts[read] // page,
                      write=float(sizes[~read].sum()))

    def _accesses(self, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every access of the epoch in order: its first byte in the pool, its bytes, and
        whether it is a read (else the step's new token, written)."""
        lay, pool = self.lay, self.lay.cache_pool(0)
        tb = lay.token_bytes
        firsts, sizes, reads = [], [], []
        rows = self.table[self._active[epoch]]                 # (active, width)
        lkv = (np.arange(lay.layers)[:, None] * pool.layer_bytes +
               np.arange(2)[None, :] * pool.kv_bytes).reshape(-1, 1, 1)
        for i in range(lay.steps):
            n = lay.seq_len + i + 1                            # tokens read at step i
            full, rest = divmod(n, lay.block)
            spans = np.full(rows.shape[1], lay.block_bytes)
            spans[full:] = 0
            if rest:
                spans[full] = rest * tb
            # the new token, written before the step reads it
            b, t = divmod(n - 1, lay.block)
            firsts.append((rows[:, b] * lay.block_bytes + t * tb + lkv[:, :, 0]).ravel())
            sizes.append(np.full(firsts[-1].size, tb))
            reads.append(np.zeros(firsts[-1].size, dtype=bool))
            block_at = rows * lay.block_bytes + lkv            # (2 x layers, active, width)
            keep = np.broadcast_to(spans > 0, block_at.shape)
            firsts.append(block_at[keep])
            sizes.append(np.broadcast_to(spans, block_at.shape)[keep])
            reads.append(np.ones(firsts[-1].size, dtype=bool))
        return np.concatenate(firsts), np.concatenate(sizes), np.concatenate(reads)

    def choose_isa(self, asked: str) -> str:
        return entry().choose_isa(asked)

    def prepare(self, buffers, isa: str, cpus: list[int]) -> None:
        """Write every session's context (pages first touched in the pool's order)."""
        (cache,) = buffers
        self.work = Cache(self.lay, self.table, (cache.addr, cache.array(np.uint64)), None,
                          isa, cpus)

    def run(self, epoch: int) -> int:
        """The epoch's decode steps by the C kernel, timed there, every block read checked
        against numpy: ns."""
        r, _ = self.work.once(self._active[epoch])
        return r.ns
