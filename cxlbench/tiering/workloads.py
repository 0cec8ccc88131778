"""ML workloads as the tiering engines drive them: epochs of work over one tiered buffer,
each epoch's exact per-page access counts taken from the workload's own index stream (no
sampling, so it runs anywhere), and the epoch itself run by the workload's C kernel with
its output checked."""
from __future__ import annotations

import functools

import numpy as np

from ..errors import UserError
from ..memory import native


def pages_touched(first_byte: np.ndarray, nbytes, page: int) -> np.ndarray:
    """Per access at first_byte of nbytes (one size, or each access's): the index of every page it touches, all
    concatenated (an access over a page boundary counts on both pages)."""
    p0 = first_byte // page
    span = (first_byte + nbytes - 1) // page - p0 + 1
    if (span == 1).all():
        return p0
    return np.repeat(p0, span) + (np.arange(span.sum()) - np.repeat(np.cumsum(span) - span, span))


class Embedding:
    """Embedding-bag lookups: the stacked tables are the tiered buffer; the indices and the
    pooled output stay on the fast node. One stream of bags is drawn for the whole run and
    cut into epochs, so row popularity holds across them (the generators scatter hot rows
    by a seeded hash); with phase=shift the second half's rows are each table's turned by
    half its rows, so the hot set moves to other pages."""
    NAME = "embedding"
    TIERED = "table"
    BUFFERS = ("table", "indices", "out")
    UNIT = "lookups"
    RATE = ("M/s", 1e6)

    def __init__(self, params: dict):
        # Here, not at the top: the benchmark registry imports this module.
        from ..benchmarks import embedding
        from ..benchmarks.common import as_case_of
        self.emb = embedding
        self.params = as_case_of(embedding, params, train="none", trace="")
        self.epochs, self.phase = params["epochs"], params["phase"]
        self.lay = lay = embedding.layout(self.params)
        self._offsets = np.concatenate(([0], np.cumsum(np.repeat(
            np.asarray(lay.pooling, dtype=np.int64), lay.batch)))).astype(np.int64)

    @functools.cached_property
    def _streams(self) -> list[np.ndarray]:
        """Each epoch's lookups, drawn at first use (sizes() and a check need none)."""
        lay = self.lay
        whole = self.emb.Layout(lay.rows, lay.pooling, lay.dim, lay.dtype,
                                lay.batch * self.epochs)
        indices, _ = self.emb.make_indices(whole, self.params)
        streams = self._cut(indices, whole)
        if self.phase == "shift":
            bases = np.cumsum((0, *lay.rows[:-1]))
            table_of = np.repeat(np.arange(len(lay.rows)), np.asarray(lay.pooling) * lay.batch)
            rows, base = np.asarray(lay.rows)[table_of], bases[table_of]
            for e in range(self.epochs // 2, self.epochs):
                streams[e] = base + (streams[e] - base + rows // 2) % rows
        return streams

    def _cut(self, indices: np.ndarray, whole) -> list[np.ndarray]:
        """The whole run's stream (table after table, batch x epochs bags each) as one
        stream per epoch in the layout the kernel takes (table after table, batch bags)."""
        lay, out, start = self.lay, [[] for _ in range(self.epochs)], 0
        for pooling in lay.pooling:
            per = lay.batch * pooling
            for e in range(self.epochs):
                out[e].append(indices[start + e * per:start + (e + 1) * per])
            start += whole.batch * pooling
        return [np.concatenate(parts) for parts in out]

    def sizes(self) -> dict[str, int]:
        return self.lay.sizes()

    def epoch_bytes(self) -> int:
        """Bytes of rows one epoch reads."""
        return self.lay.lookups * self.lay.row_bytes

    def units(self) -> int:
        """Lookups an epoch does."""
        return self.lay.lookups

    def waits(self, counts: np.ndarray) -> int:
        """Misses waited: one a lookup (a row over two pages is waited once)."""
        return self.units()

    def counts(self, epoch: int, pages: int, page: int) -> np.ndarray:
        """Each page's accesses in the epoch: the lookups of rows on it (a row over a
        page boundary counts on both)."""
        first = self._streams[epoch] * self.lay.row_bytes
        return np.bincount(pages_touched(first, self.lay.row_bytes, page), minlength=pages)

    def resolve_isa(self, asked: str) -> str:
        return self.emb.resolve_bag_isa(asked)

    def prepare(self, buffers, isa: str, cpus: list[int]) -> None:
        """Fill the table (pages first touched in address order) and keep the buffers."""
        self.table, self.idx_buf, self.out_buf = buffers
        self.isa, self.cpus = isa, cpus
        self.raw = self.table.array(np.uint8)
        self.emb.fill_table(self.raw, self.lay, self.params["seed"])
        lay = self.lay
        self.out = self.out_buf.array(np.float32)[:lay.bags * lay.dim].reshape(lay.bags, lay.dim)

    def run(self, epoch: int) -> int:
        """The epoch's lookups by the C kernel, timed there, checked against numpy: ns."""
        lay, p = self.lay, self.params
        space = self.idx_buf.array(np.int64)
        k, b = len(self._streams[epoch]), len(self._offsets)
        space[:k], space[k:k + b] = self._streams[epoch], self._offsets
        indices, offsets = space[:k], space[k:k + b]
        self.out.fill(np.nan)
        r = native.embedding_bag(self.table.addr, sum(lay.rows), lay.row_bytes, lay.dim,
                                 lay.dtype, p["pool"], indices, offsets, self.out, self.isa,
                                 self.cpus, p["prefetch"])
        self.emb.check_output(self.out, self.emb.reference(self.raw, lay, indices, p["pool"],
                                                             offsets), lay, r.bad)
        return r.ns


class KvCache:
    """LLM serving's paged KV-cache: a pool holding kv_batch sessions of kv_seq_len tokens
    (the kvcache benchmark's layout, blocks scattered by kv_fragmentation) is the tiered
    buffer. Each epoch kv_active sessions, drawn without replacement by a Zipf popularity
    (sessions that return often: multi-turn chat), decode kv_steps tokens each,
    every step reading all their blocks, every layer, K and V; then the next turn.
    Popularity holds across epochs; with phase=shift the second half's ranks go to other
    sessions. A session's blocks are all hot or all cold together, so the skew is the
    sessions' and a page's count is how often its session decodes."""
    NAME = "kvcache"
    TIERED = "cache"
    BUFFERS = ("cache",)
    UNIT = "tokens"
    RATE = ("tok/s", 1.0)       # what throughput is reported in: unit, units a second each

    def __init__(self, params: dict):
        from ..benchmarks import kvcache
        self.kv = kvcache
        own = {k[3:]: v for k, v in params.items() if k.startswith("kv_")}
        self.lay = kvcache.layout({**own, "op": "decode", "chunk_tokens": 256})
        if params["kv_active"] > self.lay.batch:
            raise UserError(f"kvcache: kv_active={params['kv_active']} sessions cannot decode "
                            f"out of kv_batch={self.lay.batch}")
        self.active, self.alpha = params["kv_active"], params["kv_alpha"]
        self.seed, self.epochs, self.phase = params["seed"], params["epochs"], params["phase"]
        self.table = kvcache.block_table(self.lay, params["kv_fragmentation"], self.seed)

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
        lay, pool = self.lay, self.lay.cache_pool(0)
        tb = lay.token_bytes
        firsts, sizes = [], []
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
            block_at = rows * lay.block_bytes + lkv            # (2 x layers, active, width)
            keep = np.broadcast_to(spans > 0, block_at.shape)
            firsts.append(block_at[keep])
            sizes.append(np.broadcast_to(spans, block_at.shape)[keep])
            # the new token, written before the step reads it
            b, t = divmod(n - 1, lay.block)
            firsts.append((rows[:, b] * lay.block_bytes + t * tb + lkv[:, :, 0]).ravel())
            sizes.append(np.full(firsts[-1].size, tb))
        return np.bincount(pages_touched(np.concatenate(firsts), np.concatenate(sizes), page),
                           minlength=pages)

    def resolve_isa(self, asked: str) -> str:
        from ..benchmarks.common import resolve_isa
        return resolve_isa(self.kv.entry(), asked)

    def prepare(self, buffers, isa: str, cpus: list[int]) -> None:
        """Write every session's context (pages first touched in the pool's order)."""
        (cache,) = buffers
        self.work = self.kv.Workload(self.lay, self.table, (cache.addr, cache.array(np.uint64)),
                                     None, isa, cpus)

    def run(self, epoch: int) -> int:
        """The epoch's decode steps by the C kernel, timed there, every block read checked
        against numpy: ns."""
        r, _ = self.work.once(self._active[epoch])
        return r.ns


WORKLOADS = {w.NAME: w for w in (Embedding, KvCache)}
