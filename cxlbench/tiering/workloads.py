"""ML workloads as the tiering engines drive them: epochs of work over one tiered buffer,
each epoch's exact per-page access counts taken from the workload's own index stream (no
sampling, so it runs anywhere), and the epoch itself run by the workload's C kernel with
its output checked."""
from __future__ import annotations

import functools

import numpy as np

from ..memory import native


def pages_touched(first_byte: np.ndarray, nbytes: int, page: int) -> np.ndarray:
    """Per access at first_byte of nbytes: the index of every page it touches, all
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
    UNIT = "lookups"

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

    def counts(self, epoch: int, pages: int, page: int) -> np.ndarray:
        """Each page's accesses in the epoch: the lookups of rows on it (a row over a
        page boundary counts on both)."""
        first = self._streams[epoch] * self.lay.row_bytes
        return np.bincount(pages_touched(first, self.lay.row_bytes, page), minlength=pages)

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


WORKLOADS = {w.NAME: w for w in (Embedding,)}
