"""The tiering engines' streaming workloads: the optimizer's step over one state buffer of
regions (cxlbench.workloads.optimizer.Epochs) and checkpoint staging into a tiered dst
(cxlbench.workloads.checkpoint.Epochs). Their exact per-page counts against a line-by-line
brute force, bytes, units and waits in closed form, the regions' layout (in `order`, on
pages of their own, no two arrays alike in their low address bits), the placements the
static policies make of them, the options and refusals, each kernel run on this machine
with a wrong result caught, and the model engine end to end in closed form, through
bench.run and the command."""
import numpy as np
import pytest

from cxlbench import benchmarks, native
from cxlbench import workloads
from cxlbench.benchmarks import common
from cxlbench.benchmarks import tiering as bench
from cxlbench.errors import CheckError, UserError
from cxlbench.tiering import model
from cxlbench.tiering.policies import FirstTouch, Interleave
from cxlbench.topology import Topology
from cxlbench.workloads import checkpoint as ckpt
from cxlbench.workloads import optimizer as opt

from .test_tiering import invoke, one_node, policies_or_skip, policy_rows

PAGE = 4096
HUGE = 2 << 20
LINE = 64
FAST, SLOW = model.ASSUMED          # 110 ns, 100 GB/s; 275 ns, 25 GB/s
# The roofline's figures set by hand: the model engine keeps to the roofline whatever
# calibration this machine has.
ROOFLINE = dict(fast_latency=FAST.latency_ns, fast_bandwidth=FAST.bandwidth,
                slow_latency=SLOW.latency_ns, slow_bandwidth=SLOW.bandwidth)


def case(workload, **over):
    """The tiering benchmark's defaults for `workload`, tiny: 3 epochs, 1 repetition; its
    own options by their short names (params, order, size, store...)."""
    p = {k: o.default for k, o in bench.OPTIONS.items()}
    p.update(workload=workload, epochs=3, repeat=1)
    p.update({f"{workload}.{k}" if f"{workload}.{k}" in bench.OPTIONS else k: v
              for k, v in over.items()})
    return p


def pages_of(w, page=PAGE):
    return -(-w.sizes()[w.TIERED] // page)


def brute_counts(w, pages, page):
    """Every line of every array, one by one: read once, written once more where the step
    stores to it; counted on the page its address falls on."""
    out = np.zeros(pages, dtype=np.int64)
    for name, (at, nbytes) in w.arrays.items():
        for addr in range(at - at % LINE, at + nbytes, LINE):
            out[addr // page] += 1 + (name in ("params", "m", "v", "master"))
    return out


def lines(nbytes):
    return -(-nbytes // LINE)


# ---- the optimizer's regions and counts ------------------------------------------------------
LAYOUTS = [
    ({}, PAGE),
    ({"params": 5000}, PAGE),                                 # 20000 B: partial lines, pages
    ({"params": 5000, "precision": "mixed"}, PAGE),
    ({"params": 4096, "order": "v,m,grads,params"}, PAGE),    # 16 KiB arrays: whole pages
    ({"params": 7000, "precision": "mixed", "order": "master,m,params,v,grads"}, PAGE),
    ({"params": 1 << 19, "precision": "mixed"}, HUGE),        # 2 MiB pages: 1-2 MiB arrays
]


@pytest.mark.parametrize("over,page", LAYOUTS[1:])
def test_optimizer_counts_match_a_line_by_line_brute_force(over, page):
    w = opt.Epochs(over, 1, 3, "none")
    pages = pages_of(w, page)
    want = brute_counts(w, pages, page)
    for e in range(3):                       # every step alike
        assert (w.counts(e, pages, page) == want).all()


@pytest.mark.parametrize("over,page", LAYOUTS)
def test_optimizer_counts_sum_to_the_regions_lines_each_on_its_pages(over, page):
    """Reads of every line, writes of params, m, v and master: the sum is each array's
    lines times 1 or 2, and a region's pages carry exactly its own (at 4 KiB pages)."""
    w = opt.Epochs(over, 1, 3, "none")
    pages = pages_of(w, page)
    c = w.counts(0, pages, page)
    n, mixed = w.n, w.params["precision"] == "mixed"
    wide = 2 if mixed else 4
    reads = 2 * lines(n * wide) + (3 if mixed else 2) * lines(n * 4)   # every array
    writes = lines(n * wide) + (3 if mixed else 2) * lines(n * 4)      # params, m, v[, master]
    assert c.sum() == reads + writes
    assert w.waits(c) == reads
    assert w.epoch_bytes() == LINE * (reads + writes)
    assert w.units() == n
    if page == PAGE:
        for name, (lo, hi) in w.regions(page).items():
            each = 1 + (name != "grads")
            assert c[lo:hi].sum() == each * lines(w.arrays[name][1])


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_optimizer_epoch_bytes_are_the_benchmarks_traffic_per_parameter(precision):
    """With whole lines (n a multiple of 32) a step moves MEMORY bytes a parameter: the
    optimizer benchmark's traffic, mixed precision's write-allocate of bf16 params too."""
    w = opt.Epochs({"params": 1 << 16, "precision": precision}, 1, 3, "none")
    assert w.epoch_bytes() == (1 << 16) * opt.MEMORY[precision]
    c = w.counts(0, pages_of(w), PAGE)
    assert c.sum() * LINE == w.epoch_bytes()


@pytest.mark.parametrize("over", [over for over, _ in LAYOUTS])
def test_regions_cover_the_buffer_in_order_without_overlap(over):
    w = opt.Epochs(over, 1, 3, "none")
    regions = w.regions(PAGE)
    order = over.get("order", "params,grads,m,v").split(",")
    if over.get("precision") == "mixed" and "master" not in order:
        order.append("master")
    assert list(regions) == order == list(w.order)
    ends = [0]
    for name, (lo, hi) in regions.items():
        assert lo == ends[-1] and hi > lo                        # each after the last
        at, nbytes = w.arrays[name]
        assert lo * PAGE <= at and at + nbytes <= hi * PAGE      # its array inside it
        ends.append(hi)
    assert ends[-1] == pages_of(w) and w.sizes() == {"state": ends[-1] * PAGE}
    # No two arrays alike in their low 12 address bits (no 4 KiB aliasing between them).
    lows = [at % 4096 for at, _ in w.arrays.values()]
    assert len(set(lows)) == len(lows) and all(x % LINE == 0 for x in lows)
    # Regions of one width span as many pages: a share falls on their edges.
    spans = {}
    for name, (lo, hi) in regions.items():
        spans.setdefault(w.arrays[name][1], set()).add(hi - lo)
    assert all(len(s) == 1 for s in spans.values())


def test_regions_at_huge_pages_share_their_edge_pages():
    """1 Mi fp32 parameters: 4 MiB arrays, regions 4 KiB apart from a 2 MiB edge: each
    takes a third 2 MiB page in part, which the next region starts on."""
    w = opt.Epochs({"params": 1 << 20}, 1, 3, "none")
    assert w.regions(HUGE) == {"params": (0, 3), "grads": (2, 5), "m": (4, 7), "v": (6, 9)}
    assert w.regions(PAGE) == {"params": (0, 1025), "grads": (1025, 2050),
                               "m": (2050, 3075), "v": (3075, 4100)}


def test_default_state_is_64_mib_and_a_page_a_region():
    """4 Mi parameters of 16 B in either precision (fp32 p, g, m, v; mixed bf16 p, g and
    fp32 m, v, master), and a page of slack a region."""
    w = bench.workload(case("optimizer"))
    assert w.n == 1 << 22 and w.order == ("params", "grads", "m", "v")
    assert w.sizes() == {"state": (64 << 20) + 4 * PAGE}
    m = bench.workload(case("optimizer", precision="mixed"))
    assert m.order[-1] == "master" and m.sizes()["state"] == (64 << 20) + 5 * PAGE


# ---- what the static policies make of the regions --------------------------------------------
def fast_regions(w, fast, page=PAGE):
    """The regions wholly on the fast node, and whether any other has a fast page."""
    whole = [n for n, (lo, hi) in w.regions(page).items() if fast[lo:hi].all()]
    partly = any(fast[lo:hi].any() for n, (lo, hi) in w.regions(page).items()
                 if n not in whole)
    return whole, partly


@pytest.mark.parametrize("over,share,want", [
    ({"params": 1 << 16}, 0.5, ["params", "grads"]),           # the moments on the slow node
    ({"params": 5000}, 0.5, ["params", "grads"]),
    ({"params": 1 << 16, "order": "m,v,params,grads"}, 0.5, ["m", "v"]),
    ({"params": 1 << 16}, 0.75, ["params", "grads", "m"]),
    ({"params": 1 << 16}, 0.25, ["params"]),
    # mixed: bf16 params and grads are half a moment's pages: (2 x 33 + 65) of 261 pages
    ({"params": 1 << 16, "precision": "mixed", "order": "params,grads,master,m,v"},
     131 / 261, ["params", "grads", "master"]),
])
def test_first_touch_at_a_share_puts_the_first_regions_of_order_fast(over, share, want):
    policies_or_skip()
    w = opt.Epochs(over, 1, 3, "none")
    pages = pages_of(w)
    cap = bench.capacity({"policy": "first-touch", "share": share}, pages)
    fast = FirstTouch(pages, cap).initial()
    assert fast_regions(w, fast) == (want, False)
    assert cap == sum(hi - lo for n, (lo, hi) in w.regions(PAGE).items() if n in want)


def test_interleave_spreads_every_region_n_to_m():
    """1:1 at share 0.5 puts every other page fast, half of each region; 1:3 at 0.25 a
    quarter of each."""
    policies_or_skip()
    w = opt.Epochs({"params": 1 << 16}, 1, 3, "none")
    pages = pages_of(w)                                         # 4 regions of 65 pages
    for n, m, share in ((1, 1, 0.5), (1, 3, 0.25)):
        cap = bench.capacity({"policy": "interleave", "share": share}, pages)
        fast = Interleave(pages, cap, {"fast_weight": n, "slow_weight": m}).initial()
        assert (fast == (np.arange(pages) % (n + m) < n)).all()
        for lo, hi in w.regions(PAGE).values():
            assert abs(fast[lo:hi].sum() - (hi - lo) * share) <= 1


# ---- the optimizer's options and refusals ----------------------------------------------------
def test_order_is_checked_strictly_where_it_is_set(tmp_path):
    o = bench.OPTIONS["optimizer.order"]
    assert o.default == "params,grads,m,v"
    assert o.convert(" m, v ,params,grads") == "m,v,params,grads"
    assert o.convert("master,params,grads,m,v") == "master,params,grads,m,v"
    for bad, why in (("params,grads,m", "'v': missing"),
                     ("params,grads,m,v,m", "'m': named twice"),
                     ("params,grads,m,w", "'w': no region"), ("", "'': no region")):
        with pytest.raises(ValueError, match=why):
            o.convert(bad)
    r = invoke("--workload", "optimizer", "--policies", "first-touch", "--set",
               "optimizer.order=m,v,grads", "--results-dir", str(tmp_path), "--dry-run")
    assert r.exit_code == 2
    assert "option 'optimizer.order': 'm,v,grads': 'params': missing" in r.stderr


def test_master_follows_the_precision():
    with pytest.raises(UserError, match="optimizer.order=params,grads,m,v,master: "
                                        "precision=fp32 has no master copy"):
        bench.validate(case("optimizer", order="params,grads,m,v,master", engine="model"),
                       Topology.read(probe_gpus=False))
    w = opt.Epochs({"precision": "mixed", "order": "m,v,params,grads"}, 1, 3, "none")
    assert w.order == ("m", "v", "params", "grads", "master")
    with pytest.raises(UserError, match="optimizer.order: 'm,v': 'params', 'grads': missing"):
        opt.Epochs({"order": "m,v"}, 1, 3, "none")


@pytest.mark.parametrize("workload", ["optimizer", "checkpoint"])
def test_phase_shift_is_refused_naming_the_option(workload):
    """A step (a snapshot) touches every line alike: no hot set for a shift to move."""
    with pytest.raises(UserError, match=f"{workload}: phase=shift moves a hot set"):
        bench.workload(case(workload, phase="shift"))


def test_options_buffers_and_units_of_both_workloads():
    o = bench.OPTIONS
    assert {"checkpoint", "optimizer"} <= set(o["workload"].choices)
    assert workloads.TIERED["optimizer"] is opt.Epochs
    assert workloads.TIERED["checkpoint"] is ckpt.Epochs
    assert (o["optimizer.params"].default, o["optimizer.precision"].default,
            o["optimizer.optim"].default) == (1 << 22, "fp32", "adam")
    assert o["optimizer.precision"].choices == ("fp32", "mixed")
    assert o["optimizer.optim"].choices == ("adam", "adamw")
    assert (o["checkpoint.size"].default, o["checkpoint.store"].default) == (64 << 20, "regular")
    assert o["checkpoint.store"].choices == ("regular", "nt", "rep")
    assert bench.buffers_of(case("optimizer")) == ("state",)
    assert bench.buffers_of(case("checkpoint")) == ("dst", "src")
    assert {"state", "dst", "src"} <= set(bench.BUFFERS)
    for work, unit in (("optimizer", "M/s"), ("checkpoint", "GB/s")):
        units = bench.units_of(workloads.TIERED[work], False)
        assert units["throughput"] == units["kernel_throughput"] == unit
    # The other workloads' options are noted unused; the registry refuses one set.
    u = bench.unused(case("optimizer"))
    assert set(bench.WORKLOAD_OPTIONS["checkpoint"]) <= set(u)
    assert not {k for k in u if k.startswith("optimizer.")}
    reg = benchmarks.get("tiering")
    assert reg.set_but_ignored(case("optimizer", order="m,v,params,grads")) == {}
    assert reg.set_but_ignored({**case("embedding"), "optimizer.order": "m,v,params,grads"}) == \
        {"optimizer.order": ("m,v,params,grads", "an option of the optimizer workload")}


# ---- checkpoint's counts ---------------------------------------------------------------------
@pytest.mark.parametrize("size,store,page", [
    (64 << 20, "regular", PAGE), (10000 * LINE, "nt", PAGE), (10000 * LINE, "regular", HUGE),
    (4096, "regular", PAGE)])
def test_checkpoint_counts_each_dst_line_written_once(size, store, page):
    w = ckpt.Epochs({"size": size, "store": store}, 1, 3, "none")
    assert w.sizes() == {"dst": size, "src": size}                # dst (tiered) first
    pages = pages_of(w, page)
    c = w.counts(1, pages, page)
    want = np.bincount(np.arange(0, size, LINE) // page, minlength=pages)
    assert (c == want).all() and c.sum() == size // LINE
    assert w.waits(c) == size // LINE and w.units() == size
    # src read, dst written, and with regular stores dst's lines read first
    assert w.epoch_bytes() == size * (2 if store == "nt" else 3)


# ---- what the calibrated model is given ------------------------------------------------------
@pytest.mark.parametrize("precision,written", [("fp32", 12), ("mixed", 14)])
def test_optimizer_demand_streams_the_benchmarks_bytes_split_by_page(precision, written):
    """Read and written bytes as the optimizer benchmark's demand states them (16 B a
    parameter read, 12 or 14 written), each page's share its own bytes: first-touch at 0.5
    holds params and grads, 3 of 7 (fp32) lines moved."""
    w = opt.Epochs({"params": 1 << 16, "precision": precision}, 1, 3, "none")
    d = w.demand(2, PAGE)
    assert (d.units, d.read, d.write, d.nt, d.block) == \
        (1 << 16, 16 << 16, written << 16, False, 0)
    assert (d.stream_pages == LINE * w.counts(2, pages_of(w), PAGE)).all()
    if precision == "fp32":
        fast = FirstTouch(260, 130).initial()
        assert d.stream_pages[fast].sum() / d.stream_pages.sum() == pytest.approx(3 / 7)


@pytest.mark.parametrize("store,read", [("regular", 2), ("nt", 1)])
def test_checkpoint_demand_is_the_copys_bytes_dst_on_its_pages(store, read):
    """src read and dst written (regular stores: dst read first too); dst's pages carry
    the bytes it moves, the rest (src's reads) are on no tiered page."""
    w = ckpt.Epochs({"size": 1 << 20, "store": store}, 1, 3, "none")
    d = w.demand(0, PAGE)
    assert (d.units, d.read, d.write, d.nt) == (1 << 20, read << 20, 1 << 20, store == "nt")
    assert d.read + d.write == w.epoch_bytes()
    assert len(d.stream_pages) == 256 and (d.stream_pages == (read << 12)).all()


# ---- the kernels on this machine -------------------------------------------------------------
def placed(w, p):
    cpus = common.resolve_cpus(p)
    buffers = common.place({**p, "mem": "local", "page": "4k"}, cpus, w.sizes())
    assert [b.name for b in buffers] == list(w.BUFFERS)
    w.prepare(buffers, w.choose_isa(p["isa"]), cpus)
    return buffers


@pytest.mark.parametrize("over", [
    {"params": 5000},
    {"params": 7000, "precision": "mixed", "optim": "adamw", "order": "master,m,params,v,grads"},
    {"params": 1 << 16, "order": "v,m,grads,params"}])
def test_optimizer_run_steps_the_state_in_its_regions_checked(over):
    """Each epoch a step from the state the last one left (its values in the regions'
    views), checked against numpy's; its bytes outside the arrays untouched."""
    p = case("optimizer", **over)
    w = bench.workload(p)
    (state,) = placed(w, p)
    raw = state.array(np.uint8)
    raw_before = raw.copy()
    m0 = w.st.m.copy()
    for e in range(3):
        ns = w.run(e)
        assert isinstance(ns, int) and ns > 0
    assert w.step == 3 and not np.array_equal(w.st.m, m0)
    outside = np.ones(len(raw), dtype=bool)
    for at, nbytes in w.arrays.values():
        outside[at:at + nbytes] = False
    assert outside.sum() > 0 and np.array_equal(raw[outside], raw_before[outside])
    for name, got in (("params", w.st.p), ("grads", w.st.g), ("m", w.st.m), ("v", w.st.v),
                      ("master", w.st.w)):
        if name in w.arrays:
            assert got.ctypes.data == state.addr + w.arrays[name][0]
            assert got.nbytes == w.arrays[name][1]


def test_optimizer_run_catches_a_wrong_step(monkeypatch):
    p = case("optimizer", params=5000)
    w = bench.workload(p)
    placed(w, p)
    real = native.adam

    def off_by_one(*args, **kw):
        ns = real(*args, **kw)
        w.st.v[4321] += np.float32(1e-3)
        return ns
    monkeypatch.setattr(native, "adam", off_by_one)
    with pytest.raises(CheckError, match="optimizer: v of parameter 4321 is"):
        w.run(0)


@pytest.mark.parametrize("store", ["regular", "nt", "rep"])
def test_checkpoint_run_copies_a_checked_snapshot(store, monkeypatch):
    p = case("checkpoint", size=3 << 20, store=store)
    w = bench.workload(p)
    if store == "nt" and not native.flush_supported("nt"):
        with pytest.raises(UserError, match="checkpoint.store=nt"):
            w.choose_isa("auto")
        return
    dst, src = placed(w, p)
    for e in range(2):
        assert w.run(e) > 0
        assert np.array_equal(dst.array(np.uint64), src.array(np.uint64))
    real = native.checkpoint

    def torn(*args, **kw):
        r = real(*args, **kw)
        dst.array(np.uint64)[12345] ^= np.uint64(1)
        return r
    monkeypatch.setattr(native, "checkpoint", torn)
    with pytest.raises(CheckError, match="checkpoint: the checksum of dst"):
        w.run(2)


@one_node
@pytest.mark.parametrize("workload,over", [
    ("optimizer", {"params": 1 << 15, "precision": "mixed"}),
    ("checkpoint", {"size": 1 << 20})])
def test_real_engine_runs_the_kernel_each_epoch_on_one_node(monkeypatch, workload, over):
    """The real engine forced onto node 0 as both tiers (all-fast: nothing to move): every
    epoch runs and checks the kernel; the model's prediction sits beside it."""
    policies_or_skip()
    monkeypatch.setattr(bench, "engine_of", lambda params, topology: "real")
    m = bench.run(case(workload, policy="all-fast", fast=0, slow=0, **over))
    assert m.status == "ok", m.error
    assert m.kernel == f"{workload}:real" and m.isa != ""
    assert len(m.info["epoch_ns"]) == 3 and all(ns > 0 for ns in m.info["epoch_ns"])
    rep = m.reps[0]
    assert rep["throughput"] == rep["kernel_throughput"] > 0 and rep["predicted"] > 0
    assert rep["fast_hits"] == rep["fast_share"] == 1.0
    placed_ = [r["buffer"] for r in m.placement["verified"]]
    assert placed_ == list(workloads.TIERED[workload].BUFFERS)


# ---- the model engine ------------------------------------------------------------------------
def roofline(on_fast, on_slow, waits_per, access_bytes, mlp, threads=1):
    """The model by hand: each count waits its tier's latency (times the misses a count
    waits) over mlp x threads in flight, each tier streams its own counts' bytes; the longer."""
    return max((on_fast * FAST.latency_ns + on_slow * SLOW.latency_ns) * waits_per
               / (mlp * threads), on_fast * access_bytes / FAST.bandwidth,
               on_slow * access_bytes / SLOW.bandwidth)


# 64 Ki fp32 parameters: 4096 lines an array. A step: 4 x 4096 lines read, 3 x 4096 written
# (28672 counts of 64 B, 16384 waited). The regions: 65 pages each (one of slack).
L = 4096


@one_node
@pytest.mark.parametrize("policy,share,fast_counts,mlp,threads", [
    ("all-fast", 1.0, 7 * L, 10.0, 1),          # latency-bound: 16384 x 11 ns
    ("all-slow", 1.0, 0, 10.0, 1),
    ("all-fast", 1.0, 7 * L, 1000.0, 2),        # bandwidth-bound: 28672 x 0.64 ns
    ("first-touch", 0.5, 3 * L, 10.0, 1),       # params (2L: read, written), grads (L) fast
    ("first-touch", 0.5, 3 * L, 1000.0, 1),     # the moments' 4L x 2.56 ns on the slow tier
    ("first-touch", 0.25, 2 * L, 10.0, 2),
])
def test_model_run_of_the_optimizer_in_closed_form(policy, share, fast_counts, mlp, threads):
    policies_or_skip()
    p = case("optimizer", params=1 << 16, policy=policy, share=share, mlp=mlp,
             threads=threads, engine="model", **ROOFLINE)
    each = roofline(fast_counts, 7 * L - fast_counts, 4 / 7, 64, mlp, threads)
    m = bench.run(p)
    assert m.status == "ok" and m.kernel == "optimizer:model"
    assert m.units == bench.units_of(opt.Epochs, False)
    rep = m.reps[0]
    assert rep["throughput"] == rep["kernel_throughput"] == pytest.approx(
        (1 << 16) / each * 1e3, rel=1e-12)                     # M params/s
    assert rep["fast_hits"] == pytest.approx(fast_counts / (7 * L), rel=1e-12)
    assert m.info["pages"] == 260 and m.info["epoch_ns"] == [round(each)] * 3
    assert rep["migrated"] == rep["move_ms"] == rep["pingpong"] == 0


@one_node
@pytest.mark.parametrize("store,policy,mlp,each_line", [
    ("regular", "all-fast", 10.0, 11.0),        # latency: 110 / 10 > 192 B / 100 GB/s
    ("regular", "all-slow", 10.0, 27.5),        # 275 / 10 > 192 / 25 = 7.68
    ("regular", "all-fast", 100.0, 1.92),       # bandwidth: 192 B / 100 > 1.1
    ("nt", "all-slow", 100.0, 5.12),            # 128 B / 25 > 2.75
])
def test_model_run_of_checkpoint_in_closed_form(store, policy, mlp, each_line):
    """1 MiB snapshots: 16384 lines of dst, each one count and one wait; 3 (regular) or 2
    (nt) lines' bytes moved a count."""
    policies_or_skip()
    p = case("checkpoint", size=1 << 20, store=store, policy=policy, mlp=mlp,
             engine="model", **ROOFLINE)
    fast = policy == "all-fast"
    each = roofline(16384 * fast, 16384 * (not fast), 1.0, 192 if store == "regular" else 128,
                    mlp)
    assert each == pytest.approx(16384 * each_line, rel=1e-12)
    m = bench.run(p)
    assert m.status == "ok" and m.kernel == "checkpoint:model"
    assert m.units == bench.units_of(ckpt.Epochs, False)
    assert m.reps[0]["throughput"] == pytest.approx((1 << 20) / each, rel=1e-12)   # GB/s
    assert m.info["pages"] == 256 and m.info["epoch_ns"] == [round(each)] * 3


@one_node
def test_tiering_command_optimizer_end_to_end(tmp_path):
    """`cxlbench tiering --workload optimizer`: all-fast in M params/s, and at share 0.5
    first-touch keeping params and grads fast (3L of 7L counts), the oracle the three
    written regions' most of it (params, m and a part of v: 2L lines a region) and
    interleave half of each region."""
    policies_or_skip()
    sets = ["repeat=1", "epochs=3", "optimizer.params=65536",
            *(f"{k}={v}" for k, v in ROOFLINE.items())]
    r = invoke("--workload", "optimizer", "--policies", "all-fast,oracle,first-touch,interleave",
               "--shares", "1,0.5", *[a for s in sets for a in ("--set", s)],
               "--results-dir", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert "(8 cases, 0 failed)" in r.stderr       # both bounds, whatever --policies
    out = r.stdout
    assert "tiering: optimizer (model engine: PREDICTED" in out
    top = roofline(7 * L, 0, 4 / 7, 64, 10.0)
    assert f"all-fast {(1 << 16) / top * 1e3:.4g} M/s" in out
    w = bench.workload(case("optimizer", params=1 << 16))
    c = w.counts(0, 260, PAGE)

    def slowdown(fast):
        return roofline(c[fast].sum(), c[~fast].sum(), 4 / 7, 64, 10.0) / top - 1
    ft = FirstTouch(260, 130).initial()
    oracle = np.zeros(260, dtype=bool)
    oracle[np.lexsort((np.arange(260), -c))[:130]] = True
    il = Interleave(260, 130).initial()
    rows = policy_rows(out, ["policy", "1", "0.5", "knee", "gap", "moved", "MB"])
    assert set(rows) == {"oracle", "first-touch", "interleave"}
    for name, fast in (("first-touch", ft), ("oracle", oracle), ("interleave", il)):
        assert rows[name][:3] == [name, "0.0%", f"{slowdown(fast):.1%}"]
    assert slowdown(oracle) < slowdown(il) < slowdown(ft)
