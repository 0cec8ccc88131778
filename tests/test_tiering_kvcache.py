"""The tiering suite's KV-cache workload (cxlbench.workloads.kvcache.Epochs): its exact
per-page counts against a brute force written here token by token, its bytes, units and
waits in closed form, the sessions each epoch decodes (distinct, Zipf-popular, turned by
phase=shift), its refusal of more active sessions than the pool holds, its C kernel run on
this machine with a corrupted block caught, the benchmark's option plumbing for it, and
the model engine end to end in closed form, through bench.run and through the command."""
import math

import numpy as np
import pytest

from cxlbench import benchmarks
from cxlbench.benchmarks import common, kvcache
from cxlbench.benchmarks import tiering as bench
from cxlbench.errors import CheckError, UserError
from cxlbench.tiering import model
from cxlbench import workloads
from cxlbench.workloads import kvcache as kvcache_workload

from .test_tiering import HERE, invoke, one_node, policies_or_skip, policy_rows

PAGE = 4096
HUGE = 2 << 20
FAST, SLOW = model.ASSUMED          # 110 ns, 100 GB/s; 275 ns, 25 GB/s


def kv_params(**over):
    """The tiering benchmark's defaults for the kvcache workload, tiny: 2 layers of
    Llama-3-8B (scale 1/16) at 2 KiB a token (fp16), blocks of 16 tokens, 8 sessions of 37
    tokens (so each has a partial block), 3 active, 3 steps, 3 epochs."""
    p = {k: o.default for k, o in bench.OPTIONS.items()}
    over = {**dict(workload="kvcache", kv_scale=1 / 16, kv_batch=8, kv_seq_len=37,
                   kv_steps=3, kv_active=3, epochs=3, repeat=1), **over}
    # kv_<name>: the kvcache workload's own option <name>, kvcache.<name> in a case
    p.update({f"kvcache.{k[3:]}" if k.startswith("kv_") else k: v for k, v in over.items()})
    return p


def brute_counts(w, epoch, pages, page):
    """Each page's accesses, enumerated one by one from the pool's layout as vLLM keeps
    it (per layer, K's blocks then V's): at step i every active session reads, in every
    layer and K/V, tokens 0 .. seq_len + i of its table's blocks, one access a block (the
    contiguous span of the tokens it holds so far), and writes token seq_len + i, one
    access; an access counts once on every page its bytes [first, first + size) touch."""
    lay = w.lay
    tb, bb = lay.token_bytes, lay.block * lay.token_bytes
    blocks = lay.batch * -(-(lay.seq_len + lay.steps) // lay.block)
    kv_bytes, layer_bytes = blocks * bb, 2 * blocks * bb
    out = np.zeros(pages, dtype=np.int64)

    def touch(first, size):
        for pg in range(first // page, (first + size - 1) // page + 1):
            out[pg] += 1
    for i in range(lay.steps):
        last = lay.seq_len + i                      # read 0 .. last; written: last
        for s in w._active[epoch].tolist():
            for layer in range(lay.layers):
                for kv in range(2):
                    base = layer * layer_bytes + kv * kv_bytes
                    for b in range(last // lay.block + 1):
                        held = min(lay.block, last + 1 - b * lay.block)
                        touch(base + int(w.table[s, b]) * bb, held * tb)
                    b, t = divmod(last, lay.block)
                    touch(base + int(w.table[s, b]) * bb + t * tb, tb)
    return out


def pages_of(w, page):
    return -(-w.sizes()["cache"] // page)


# ---- counts against the brute force -------------------------------------------------------
@pytest.mark.parametrize("over,page", [
    ({}, PAGE),                                           # 32 KiB blocks: 8 pages each
    ({"kv_fragmentation": 0.0}, PAGE),                    # each session's blocks in a row
    ({"kv_batch": 16, "kv_seq_len": 45}, HUGE),           # 6 MiB pool: 64 blocks a page
    ({"kv_scale": 1 / 32, "kv_dtype": "fp8", "kv_block": 3}, PAGE),   # 3 KiB blocks
    ({"kv_dtype": "fp8", "kv_block": 1, "kv_active": 5}, PAGE),       # 1 KiB blocks
    ({"kv_dtype": "fp8", "kv_block": 5, "kv_seq_len": 21, "kv_steps": 4}, PAGE),
])
def test_counts_match_a_token_by_token_brute_force(over, page):
    """counts() is the brute force's, page for page, every epoch: whole blocks, the
    partial last block read as far as it is filled, the token written, pages shared by
    several blocks (1 KiB blocks, 2 MiB pages), blocks that start mid-page and straddle
    two (3 KiB and 5 KiB blocks)."""
    w = bench.workload(kv_params(**over))
    lay = w.lay
    assert w.lay.cache_pool(0).kv_bytes == lay.blocks * lay.block_bytes
    assert w.lay.cache_pool(0).layer_bytes == 2 * lay.blocks * lay.block_bytes
    if page % lay.block_bytes and lay.block_bytes % page:
        # Some block starts inside a page and runs over its end.
        starts = np.arange(lay.blocks) * lay.block_bytes
        assert ((starts % PAGE + lay.block_bytes) > PAGE).any()
    pages = pages_of(w, page)
    for e in range(w.epochs):
        got = w.counts(e, pages, page)
        want = brute_counts(w, e, pages, page)
        assert got.shape == (pages,)
        np.testing.assert_array_equal(got, want)
        # Only pages of the active sessions' blocks are touched.
        assert got.sum() > 0 and (got > 0).sum() < pages or page == HUGE


def test_counts_leave_room_for_more_pages_than_the_pool_fills():
    """counts() has as many entries as asked (minlength), the extra ones zero."""
    w = bench.workload(kv_params())
    pages = pages_of(w, PAGE)
    c = w.counts(0, pages + 5, PAGE)
    assert c.shape == (pages + 5,) and not c[pages:].any()
    np.testing.assert_array_equal(c[:pages], w.counts(0, pages, PAGE))


def test_counts_of_aligned_blocks_in_closed_form():
    """32 KiB blocks, 2 KiB tokens, 4 KiB pages: per session, layer and K/V, a step
    reading n tokens touches 8 pages a full block, ceil(2 rest / 4) of the partial one,
    and 1 for the token written: with n = 38, 39, 40, 20 + 21 + 21 = 62."""
    w = bench.workload(kv_params())
    per = sum(16 // 16 * 8 * (n // 16) + -(-(n % 16) * 2048 // PAGE) + 1 for n in (38, 39, 40))
    assert per == 62
    for e in range(3):
        assert w.counts(e, pages_of(w, PAGE), PAGE).sum() == 3 * 2 * 2 * per


# ---- bytes, units, waits --------------------------------------------------------------------
@pytest.mark.parametrize("over", [{}, {"kv_dtype": "fp8", "kv_block": 3, "kv_active": 8},
                                  {"kv_scale": 1 / 32, "kv_steps": 1}])
def test_epoch_bytes_units_and_waits_in_closed_form(over):
    """epoch_bytes: one token is layers x 2 (K, V) x token_bytes; each active session's
    step i reads seq_len + i + 1 tokens and writes one. units: active x steps tokens.
    waits: every page access is waited (counts' sum). With pages of one token each, the
    counts' sum is the tokens moved, so it times the token's bytes is epoch_bytes."""
    p = kv_params(**over)
    w = bench.workload(p)
    lay = w.lay
    tb = lay.layers * 2 * lay.token_bytes
    steps = p["kvcache.steps"]
    reads = steps * p["kvcache.seq_len"] + steps * (steps + 1) // 2
    assert w.epoch_bytes() == tb * p["kvcache.active"] * (reads + p["kvcache.steps"])
    assert w.units() == p["kvcache.active"] * p["kvcache.steps"]
    for e in range(w.epochs):
        c = w.counts(e, pages_of(w, PAGE), PAGE)
        assert w.waits(c) == int(c.sum()) and isinstance(w.waits(c), int)
        per_token = w.counts(e, w.sizes()["cache"] // lay.token_bytes, lay.token_bytes)
        assert int(per_token.sum()) * lay.token_bytes == w.epoch_bytes()


def test_sizes_are_the_pool_of_the_kvcache_benchmark():
    """The tiered buffer is the kvcache benchmark's decode pool (tokens seq_len + steps,
    block tables of ceil((37 + 3) / 16) = 3 blocks) and its block table."""
    p = kv_params()
    w = bench.workload(p)
    assert w.sizes() == {"cache": 2 * 2 * 8 * 3 * 16 * 2048}
    lay = w.lay
    assert (lay.layers, lay.block, lay.batch, lay.seq_len, lay.steps, lay.op) == \
        (2, 16, 8, 37, 3, "decode")
    np.testing.assert_array_equal(w.table, kvcache.block_table(lay, 1.0, p["seed"]))


# ---- sessions -----------------------------------------------------------------------------------
@pytest.mark.parametrize("batch,active,alpha", [(8, 3, 1.0), (32, 32, 1.0), (16, 5, 0.0),
                                                (2, 1, 10.0)])
def test_each_epoch_decodes_kv_active_distinct_sessions(batch, active, alpha):
    """Every epoch draws kv_active sessions without replacement, all within the pool
    (all of them when kv_active = kv_batch, any alpha)."""
    w = bench.workload(kv_params(kv_batch=batch, kv_active=active, kv_alpha=alpha,
                                    epochs=20))
    assert len(w._active) == 20
    for s in w._active:
        assert len(s) == active == len(set(s.tolist()))
        assert s.min() >= 0 and s.max() < batch


def test_popular_sessions_stay_popular():
    """With a steep Zipf (alpha 3) the sessions drawn most in the first half of the run
    are the ones drawn most in the second."""
    w = bench.workload(kv_params(kv_batch=32, kv_active=4, kv_alpha=3.0, epochs=200))
    first = np.bincount(np.concatenate(w._active[:100]), minlength=32)
    second = np.bincount(np.concatenate(w._active[100:]), minlength=32)
    top = lambda c: set(np.argsort(-c, kind="stable")[:4].tolist())    # noqa: E731
    assert len(top(first) & top(second)) >= 3
    # Skewed: the 4 most drawn take well over 4/32 of the draws.
    assert np.sort(first)[-4:].sum() > 0.5 * first.sum()


def test_alpha_zero_draws_sessions_about_uniformly():
    """alpha 0: every session is as likely; 8 sessions, 2 a time, 1000 epochs: 250 each
    expected (sd about 14), within a loose 180 .. 320."""
    w = bench.workload(kv_params(kv_batch=8, kv_active=2, kv_alpha=0.0, epochs=1000))
    drawn = np.bincount(np.concatenate(w._active), minlength=8)
    assert drawn.sum() == 2000
    assert drawn.min() > 180 and drawn.max() < 320


@pytest.mark.parametrize("epochs,batch", [(6, 8), (5, 9), (2, 2)])
def test_phase_shift_turns_the_second_halfs_sessions_by_half_the_pool(epochs, batch):
    """phase=shift: epochs before epochs // 2 decode phase=none's sessions; from it on
    each session s of phase=none's draw becomes (s + batch // 2) % batch."""
    active = 2 if batch > 2 else 1
    none = bench.workload(kv_params(epochs=epochs, kv_batch=batch, kv_active=active))
    shift = bench.workload(kv_params(epochs=epochs, kv_batch=batch, kv_active=active,
                                        phase="shift"))
    for e in range(epochs):
        turned = none._active[e] if e < epochs // 2 else \
            (none._active[e] + batch // 2) % batch
        np.testing.assert_array_equal(shift._active[e], turned)
    assert any((shift._active[e] != none._active[e]).all() for e in range(epochs // 2, epochs))
    np.testing.assert_array_equal(shift.table, none.table)


def test_phase_shift_moves_the_counts_to_the_turned_sessions_pages():
    """After the shift the hot pages are the turned sessions': the counts of a shifted
    epoch are those of a phase=none workload whose draws are turned by hand."""
    none = bench.workload(kv_params(epochs=4))
    shift = bench.workload(kv_params(epochs=4, phase="shift"))
    pages = pages_of(none, PAGE)
    np.testing.assert_array_equal(shift.counts(1, pages, PAGE), none.counts(1, pages, PAGE))
    none._active[3] = (none._active[3] + 4) % 8
    np.testing.assert_array_equal(shift.counts(3, pages, PAGE), none.counts(3, pages, PAGE))


def test_the_seed_draws_the_sessions_and_the_table():
    """The same seed gives the same sessions and table; another seed other ones."""
    a, b = (bench.workload(kv_params(seed=s, epochs=8)) for s in (1, 2))
    again = bench.workload(kv_params(seed=1, epochs=8))
    assert all((x == y).all() for x, y in zip(a._active, again._active))
    assert any((x != y).any() for x, y in zip(a._active, b._active))
    assert (a.table != b.table).any()


# ---- refusals -------------------------------------------------------------------------------
def test_more_active_sessions_than_the_pool_holds_are_refused():
    """active > batch is a UserError naming both; active = batch is fine."""
    with pytest.raises(UserError, match=r"^kvcache\.active=9 sessions cannot decode out of "
                                        r"kvcache\.batch=8$"):
        bench.workload(kv_params(kv_active=9, kv_batch=8))
    bench.workload(kv_params(kv_active=8, kv_batch=8))      # all of them: fine


@one_node
def test_the_check_refuses_more_active_sessions_than_the_pool_holds_before_running():
    """The parent's check refuses what every case would fail on, on either engine, before
    a run directory exists."""
    with pytest.raises(UserError, match="kvcache.active=9 sessions cannot decode"):
        bench.validate(kv_params(kv_active=9, kv_batch=8, engine="model"), HERE)


# ---- run() on this machine ----------------------------------------------------------------------
def test_run_decodes_the_active_sessions_and_catches_a_corrupted_block():
    """The pool placed locally and written; every epoch's decode returns its ns. A word
    changed in a token no one reads (the last block's unused slots, a session that is not
    decoding) passes; one changed in a prompt token of a session that decodes is caught."""
    p = kv_params(epochs=6)
    w = bench.workload(p)
    cpus = common.resolve_cpus(p)
    (cache,) = common.place({**p, "mem": "local", "page": "4k"}, cpus, w.sizes())
    assert cache.name == "cache" and cache.size >= w.sizes()["cache"]
    w.prepare([cache], w.choose_isa(p["isa"]), cpus)
    for e in range(w.epochs):
        ns = w.run(e)
        assert isinstance(ns, int) and ns > 0
    lay = w.lay
    words = cache.array(np.uint64)

    def word_of(session, layer, kv, token):
        b, t = divmod(token, lay.block)
        at = layer * 2 * lay.blocks * lay.block_bytes + kv * lay.blocks * lay.block_bytes \
            + int(w.table[session, b]) * lay.block_bytes + t * lay.token_bytes
        return at // 8

    # The last block holds 37 + 3 = 40 of its 48 slots: slot 47 is never read.
    s = int(w._active[0][0])
    words[word_of(s, 1, 1, 47)] += np.uint64(1)
    assert w.run(0) > 0
    # A session that epoch 0 does not decode, but a later epoch does.
    later = {int(x) for act in w._active[1:] for x in act} - set(w._active[0].tolist())
    assert later
    idle = min(later)
    words[word_of(idle, 0, 1, 5)] += np.uint64(1)
    assert w.run(0) > 0
    e = next(e for e in range(1, w.epochs) if idle in w._active[e].tolist())
    # The message names the session, not its row among the epoch's active ones.
    with pytest.raises(CheckError, match=(
            r"kvcache: decode read 1 blocks that do not hold what was written to them, first "
            rf"layer 0 V, sequence {idle}, block 0 of the sequence, physical block "
            rf"{int(w.table[idle, 0])}$")):
        w.run(e)


# ---- the benchmark's options ----------------------------------------------------------------------
def test_each_workload_lists_the_others_options_as_unused():
    """A kvcache case ignores the embedding's options and an embedding case the kv_ ones
    (the shared seed, epochs, phase are used by both); the registry refuses them set."""
    kv = bench.unused(kv_params())
    assert {f"embedding.{k}" for k in ("rows", "batch", "dim", "tables", "pooling", "dist",
                                       "alpha", "prefetch")} <= set(kv)
    assert all(kv[k] == "an option of the embedding workload"
               for k in bench.WORKLOAD_OPTIONS["embedding"])
    assert not {k for k in kv if k.startswith("kvcache.")}
    assert not {"seed", "epochs", "phase", "page", "share"} & set(kv)
    emb = bench.unused(kv_params(workload="embedding"))
    assert set(bench.WORKLOAD_OPTIONS["kvcache"]) <= set(emb)
    assert {"kvcache.batch", "kvcache.active", "kvcache.alpha", "kvcache.seq_len"} <= set(emb)
    assert all(emb[k] == "an option of the kvcache workload"
               for k in bench.WORKLOAD_OPTIONS["kvcache"])
    assert not {"embedding.rows", "embedding.batch", "embedding.dim"} & set(emb)
    # The registry refuses an embedding option set on a kvcache case, and the other way.
    reg = benchmarks.get("tiering")
    assert reg.set_but_ignored(kv_params()) == {}
    assert reg.set_but_ignored({**kv_params(), "embedding.rows": 4096}) == \
        {"embedding.rows": (4096, "an option of the embedding workload")}
    assert reg.set_but_ignored(kv_params(workload="embedding", kv_steps=3, kv_batch=8,
                                         kv_seq_len=37, kv_active=3, kv_scale=1.0 / 16))[
        "kvcache.active"] == (3, "an option of the kvcache workload")


def test_kv_options_and_their_defaults():
    """The kvcache workload's options' defaults and bounds, and the defaults' pool size by hand."""
    o = bench.OPTIONS
    assert {"embedding", "kvcache"} <= set(o["workload"].choices)
    assert (o["kvcache.batch"].default, o["kvcache.batch"].min) == (32, 2)
    assert (o["kvcache.seq_len"].default, o["kvcache.steps"].default, o["kvcache.active"].default) == \
        (256, 64, 8)
    assert (o["kvcache.scale"].default, o["kvcache.alpha"].default, o["kvcache.alpha"].min) == \
        (0.125, 1.0, 0.0)
    assert "custom" not in o["kvcache.preset"].choices
    # The defaults' pool: 32 sessions of 320 tokens, 20 blocks, 4 layers at 2 KiB.
    w = bench.workload({**{k: v.default for k, v in o.items()}, "workload": "kvcache"})
    assert w.sizes()["cache"] == 4 * 2 * 32 * 20 * 16 * 2048 == 160 << 20


def test_buffers_and_units_of_the_kvcache_workload():
    """The kvcache workload places one buffer, the pool, and reports its rates in tok/s."""
    assert bench.buffers_of(kv_params()) == ("cache",)
    assert bench.buffers_of(kv_params(workload="embedding")) == ("table", "indices", "out")
    assert "cache" in bench.BUFFERS
    assert benchmarks.get("tiering").case_buffers(kv_params()) == ("cache",)
    for real in (True, False):
        units = bench.units_of(kvcache_workload.Epochs, real)
        assert units["throughput"] == units["kernel_throughput"] == "tok/s"
        assert ("predicted" in units) == real
    assert bench.units_of(kvcache_workload.Epochs, True)["predicted"] == "tok/s"
    assert workloads.TIERED["kvcache"] is kvcache_workload.Epochs


# ---- the model engine ----------------------------------------------------------------------
def model_ns(c, fast, ebytes, mlp, threads=1):
    """The roofline by hand: each access waits its tier's latency over mlp x threads
    misses in flight, each tier streams its share of the epoch's bytes; the longer."""
    on_fast, on_slow = float(c[fast].sum()), float(c[~fast].sum())
    each = ebytes / c.sum()
    return max((on_fast * FAST.latency_ns + on_slow * SLOW.latency_ns) / (mlp * threads),
               on_fast * each / FAST.bandwidth, on_slow * each / SLOW.bandwidth)


@one_node
@pytest.mark.parametrize("policy,mlp,bound", [
    ("all-fast", 10.0, "bandwidth"),    # 744 x 11 ns < 2949120 B / 100 GB/s
    ("all-fast", 2.0, "latency"),       # 744 x 55 ns > 29491 ns
    ("all-slow", 10.0, "bandwidth"),    # 744 x 27.5 ns < 2949120 B / 25 GB/s
    ("all-slow", 1.0, "latency"),
])
def test_model_run_of_a_bound_in_closed_form(policy, mlp, bound):
    """744 page accesses an epoch (3 sessions x 4 layer-K/V x 62), 2949120 bytes; tok/s
    is 9 tokens an epoch over the epoch's modelled time."""
    policies_or_skip()
    p = kv_params(policy=policy, engine="model", mlp=mlp)
    tier = FAST if policy == "all-fast" else SLOW
    waiting, streaming = 744 * tier.latency_ns / mlp, 2949120 / tier.bandwidth
    each = max(waiting, streaming)
    assert (waiting > streaming) == (bound == "latency")
    m = bench.run(p)
    assert m.status == "ok" and m.kernel == "kvcache:model" and m.isa == ""
    assert m.units == bench.units_of(kvcache_workload.Epochs, False)
    rep = m.reps[0]
    assert rep["throughput"] == rep["kernel_throughput"] == pytest.approx(9 / each * 1e9,
                                                                          rel=1e-12)
    assert rep["fast_hits"] == rep["fast_share"] == (1.0 if policy == "all-fast" else 0.0)
    assert rep["migrated"] == rep["move_ms"] == rep["pingpong"] == 0
    assert m.info["pages"] == 768 and m.info["page_bytes"] == PAGE
    assert m.info["epoch_ns"] == [round(each)] * 3


@one_node
def test_model_run_of_first_touch_and_oracle_from_the_brute_force():
    """At share 0.5 first-touch keeps the first 384 pages fast (layer 0, K and V), the
    oracle the 384 most accessed over the run (ties: lower page); both are static."""
    policies_or_skip()
    w = bench.workload(kv_params())
    counts = [brute_counts(w, e, 768, PAGE) for e in range(3)]
    profile = np.sum(counts, axis=0)
    ft = np.zeros(768, dtype=bool)
    ft[:384] = True
    oracle = np.zeros(768, dtype=bool)
    oracle[np.lexsort((np.arange(768), -profile))[:384]] = True
    for policy, fast in (("first-touch", ft), ("oracle", oracle)):
        m = bench.run(kv_params(policy=policy, share=0.5, engine="model", mlp=2.0))
        ns = [model_ns(c, fast, w.epoch_bytes(), 2.0) for c in counts]
        assert m.reps[0]["throughput"] == pytest.approx(9 * 3 / sum(ns) * 1e9, rel=1e-12)
        assert m.reps[0]["fast_hits"] == pytest.approx(
            np.mean([c[fast].sum() / c.sum() for c in counts]), rel=1e-12)
        assert m.info["epoch_ns"] == [round(x) for x in ns]


# ---- cxlbench tiering --workload kvcache -----------------------------------------------------
KV_SETS = ["repeat=1", "epochs=3", "kvcache.scale=0.0625", "kvcache.batch=8",
           "kvcache.seq_len=37", "kvcache.steps=3", "kvcache.active=3", "mlp=2"]


def sets(*pairs):
    return [a for s in pairs for a in ("--set", s)]


@one_node
def test_tiering_command_kvcache_end_to_end(tmp_path):
    """The model's figures for the KV-cache: all-fast in tok/s from the closed form
    (latency-bound at mlp 2: 744 accesses x 55 ns an epoch), the policies' slowdowns at
    share 0.5 from the brute-force counts."""
    policies_or_skip()
    r = invoke("--workload", "kvcache", "--policies", "all-fast,oracle,first-touch",
               "--shares", "1,0.5", *sets(*KV_SETS), "--results-dir", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert "(6 cases, 0 failed)" in r.stderr       # both bounds, whatever --policies
    out = r.stdout
    assert "tiering: kvcache (model engine: PREDICTED from the tiers' figures, not " \
           "measured)" in out
    top = 3 * max(744 * FAST.latency_ns / 2.0, 2949120 / FAST.bandwidth)
    assert top == 3 * 744 * 55.0
    assert f"all-fast {9 * 3 / top * 1e9:.4g} tok/s" in out
    w = bench.workload(kv_params(mlp=2.0))
    counts = [brute_counts(w, e, 768, PAGE) for e in range(3)]
    profile = np.sum(counts, axis=0)

    def time_of(fast_pages):
        fast = np.zeros(768, dtype=bool)
        fast[fast_pages] = True
        return sum(model_ns(c, fast, w.epoch_bytes(), 2.0) for c in counts)
    t_ft = time_of(np.arange(384))
    t_or = time_of(np.lexsort((np.arange(768), -profile))[:384])
    rows = policy_rows(out, ["policy", "1", "0.5", "knee", "gap", "moved", "MB"])
    assert set(rows) == {"oracle", "first-touch"}

    def knee(t):
        return "0.5" if t / top - 1 <= 0.05 else "1"
    assert rows["oracle"] == ["oracle", "0.0%", f"{t_or / top - 1:.1%}", knee(t_or), "0.0%",
                              "0"]
    assert rows["first-touch"] == ["first-touch", "0.0%", f"{t_ft / top - 1:.1%}", knee(t_ft),
                                   f"{t_ft / t_or - 1:.1%}", "0"]
    assert t_or <= t_ft


@one_node
def test_tiering_command_all_workloads_gives_a_scenario_each(tmp_path):
    """--workload all: every tiered workload (embedding, KV-cache, optimizer, checkpoint)
    gets its own scenario, each in its own unit (M/s of lookups, tok/s of tokens); options
    of the other workloads are noted, not refused."""
    policies_or_skip()
    r = invoke("--workload", "all", "--policies", "all-fast,first-touch", "--shares", "0.5",
               *sets(*KV_SETS, "embedding.rows=4096", "embedding.batch=64"), "--results-dir", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert "(12 cases, 0 failed)" in r.stderr      # both bounds of each workload
    out = r.stdout
    assert "tiering: embedding (model engine: PREDICTED" in out
    assert "tiering: kvcache (model engine: PREDICTED" in out
    emb = next(line for line in out.splitlines() if line.startswith("tiering: embedding"))
    kv = next(line for line in out.splitlines() if line.startswith("tiering: kvcache"))
    assert emb.endswith(" M/s") and kv.endswith(" tok/s")
    assert f"all-fast {9 * 3 / (3 * 744 * 55.0) * 1e9:.4g} tok/s" in kv
    assert "kvcache.batch is not used by 3 of its 4 cases" in r.stderr


def test_tiering_command_takes_kvcache_as_a_workload(tmp_path):
    """A dry run lists the kvcache cases with the kv options set; an unknown workload is
    refused with the choices."""
    r = invoke("--workload", "kvcache", "--policies", "all-fast,oracle", "--shares", "0.5",
               "--set", "kvcache.batch=8", "--results-dir", str(tmp_path), "--dry-run")
    assert r.exit_code == 0, r.output
    cases = r.stdout.splitlines()
    assert len(cases) == 3 and all("workload=kvcache" in c and "kvcache.batch=8" in c
                                   for c in cases)
    r = invoke("--workload", "kv", "--results-dir", str(tmp_path), "--dry-run")
    assert r.exit_code == 2 and "--workload: no workload 'kv' (choose from checkpoint, " \
        "embedding, kvcache, optimizer, or all)" in r.stderr


def test_closed_form_constants():
    """The figures the model tests use, worked from the layout: 744 accesses, 2949120 B."""
    w = bench.workload(kv_params())
    assert w.epoch_bytes() == 2 * 2 * 2048 * 3 * (38 + 39 + 40 + 3) == 2949120
    assert pages_of(w, PAGE) == 768
    assert math.isclose(w.epoch_bytes() / 744, 3963.870967741935)
