"""Every shipped suite's report has figures a reader can read: none wider than the page
(layout.PAGE_PX at layout.DPI, shown 1:1), none taller than a few screens, fonts of 9 pt
or more, legends of at most layout.MAX_LEGEND entries and layout.LEGEND_CHARS characters
a line, and no option=value text or a `us` where words and µs belong.

The runs are made, not measured: each suite expanded for a machine of two memory nodes
(a CPU node and a CXL node, so per-node legends appear), each case given a measurement
shaped as its benchmark's are: the metrics, units, kernels and info fields of real runs
(tests/data/runs/vm, and the ml and tiering runs of the two-CPU development VM), and for
the GPU families, which no CPU-only machine can run, those their modules emit."""
import re
import zlib
from pathlib import Path

import matplotlib.figure
import pytest
from PIL import Image

from cxlbench import report, runner, suite
from cxlbench.placement import Placement
from cxlbench.report import runs as runs_
from cxlbench.report import figures
from cxlbench.report.figures import layout, panels
from cxlbench.topology import Topology
from cxlbench.units import parse_list

from . import sysfs_fixtures

SUITES = ["calibrate", "ci", "ci-full", "coherence", "full", "gpu", "gpu-quick", "migration",
          "ml", "model-check", "node", "quick", "shared", "tails", "tiering"]
# Their reports take 2.5-4 s each on the two-CPU VM, 15 s together (the rest: 9 s).
SLOW = {"ci-full", "full", "gpu", "migration", "tiering"}
MAX_HEIGHT = 2600       # pixels: a few screens, panels stacked
CPUS = [0, 1, 2, 3]     # the fixture machine's
RAW = re.compile(r"[A-Za-z_.]=|\b(bind|preferred|interleave|weighted):|\(us\)")  # threads=1

H200 = {"index": 0, "name": "NVIDIA H200", "sms": 132, "l2_bytes": 50 << 20}
TIMELINE = {"t_us": [i * 125.0 for i in range(200)],
            "max_ns": [300 + (40_000 if 40 <= i < 60 else 0) for i in range(200)],
            "move_start_us": 5000.0, "move_end_us": 7500.0}
TIERS = {"fast": {"latency_ns": 110.0, "bandwidth": 100.0},
         "slow": {"latency_ns": 275.0, "bandwidth": 25.0},
         "source": "fast: assumed, slow: assumed", "kinds": ["roofline", "roofline"]}

# A dist case's pooled quantiles (info["cdf"], chase.Distribution), as the tails suite's
# run on the two-CPU VM kept them: 4 repetitions of 262,144 batches of 16 loads.
CDF = {"q": [0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999],
       "ns": [62.7, 83.4, 96.5, 123.4, 137.8, 147.2, 156.0, 162.2, 179.1, 222.3, 494.0,
              1660.2, 3032.2], "samples": 1048576}
DIST = {"batch": 16, "batches": 262144, "timer": "rdtscp", "timer_overhead": 47.6,
        "percentiles": {"p50": 131072, "p90": 26214, "p99": 2621, "p99.9": 262, "p99.99": 26},
        "left_out": ["p99.99"], "cdf": CDF}

# Each benchmark's kernel, metrics {name: (unit, a typical median)} and info, as real runs
# record them; VARIANTS adds what a case of some settings records besides.
SHAPES = {
    "chase": ("chase", {"latency": ("ns", 100.0)}, {"loads": 1048576, "lines": 262144}),
    "bandwidth": ("read", {"bandwidth": ("GB/s", 12.0)},
                  {"passes": 32, "bytes_per_rep": 1 << 29, "threads": 1}),
    "random_bw": ("random_64", {"bandwidth": ("GB/s", 1.5)},
                  {"passes": 32, "bytes_per_rep": 1 << 29, "threads": 1}),
    "loaded_latency": ("chase+read", {"latency": ("ns", 150.0), "bandwidth": ("GB/s", 10.0)},
                       {"generators": 3, "loads": 100000}),
    "matrix": ("chase", {"latency": ("ns", 150.0)}, {"loads": 1048576, "lines": 262144}),
    "interference": ("interference+read", {
        "latency": ("ns", 154.0), "p50": ("ns", 144.7), "p90": ("ns", 162.8),
        "p99": ("ns", 195.4), "p99.9": ("ns", 680.1), "idle_latency": ("ns", 115.8),
        "latency_loss": ("%", 30.8), "bandwidth": ("GB/s", 21.7),
        "idle_bandwidth": ("GB/s", 29.3), "bandwidth_loss": ("%", 22.7),
        "aggressor_bandwidth": ("GB/s", 17.7)},
        {"generators": 1, "idle": DIST, "loaded": DIST}),
    "interleave_sweep": ("read", {"bandwidth": ("GB/s", 17.0)},
                         {"passes": 32, "bytes_per_rep": 1 << 29, "threads": 2}),
    "pingpong": ("pingpong_store", {"latency": ("ns", 92.7)}, {"transfers": 40000}),
    "shared_pingpong": ("xh_pingpong", {"round_trip": ("ns", 141.0), "one_way": ("ns", 70.3)},
                        {"round_trips": 20000}),
    "shared_ring": ("xh_ring", {"bandwidth": ("GB/s", 4.45), "messages": ("M/s", 1.09),
                                "stale": ("messages", 0.0), "torn": ("messages", 0.0)},
                    {"messages": 4000, "slots": 8}),
    "shared_atomic": ("xh_atomic", {"addition": ("ns", 14.2), "lost": ("additions", 0.0)},
                      {"additions": 200000}),
    "shared_pool": ("read", {"alone": ("GB/s", 38.7), "beside": ("GB/s", 23.5),
                             "kept": ("%", 60.7)}, {"slice": 1 << 28, "passes": 4}),
    "atomics": ("atomic_faa", {"throughput": ("Mops/s", 118.6), "fairness": ("jain", 1.0)},
                {"threads": 2}),
    "flush": ("clflush", {"latency": ("ns", 4.4), "bandwidth": ("GB/s", 14.7)},
              {"lines": 4096}),
    "migrate": ("move_pages", {"bandwidth": ("GB/s", 5.0), "return_bandwidth": ("GB/s", 4.9),
                               "pages_per_s": ("pages/s", 1.22e6), "page_latency": ("us", 0.82)},
                {"pages": 4096}),
    "migrate_touch": ("move_pages", {
        "move_time": ("us", 17939.0), "bandwidth": ("GB/s", 0.23), "touch_baseline": ("ns", 330.0),
        "touch_max": ("us", 3965.7), "touch_p99": ("ns", 611.0), "touch_after": ("ns", 31.0),
        "slow_touches": ("touches", 158.0), "stall": ("us", 4704.4),
        "spike_window": ("us", 6773.8)},
        {"pages": 4096, "mover_cpu": 0, "toucher_cpu": 1, "timeline": TIMELINE}),
    "embedding": ("embedding_bag", {"lookups": ("M/s", 38.8), "bandwidth": ("GB/s", 19.8),
                                    "bag_p50": ("us", 0.77), "bag_p99": ("us", 1.03)},
                  {"tables": 1, "rows": 1048576, "dim": 128, "row_bytes": 512, "threads": 1}),
    "checkpoint": ("checkpoint", {"bandwidth": ("GB/s", 7.3), "time": ("ms", 36.3)},
                   {"bytes": 264145920, "threads": 1, "chunks": 252, "evicted": True}),
    "kvcache": ("kvcache", {"bandwidth": ("GB/s", 14.9), "tokens": ("tok/s", 3479.2)},
                {"preset": "llama-3-8b", "layers": 4, "kv_bytes_per_token": 16384,
                 "evicted": True}),
    "optimizer": ("adam-fp32", {"params": ("M/s", 1049.9), "bandwidth": ("GB/s", 29.4)},
                  {"params": 16777216, "bytes_per_param": 28, "evicted": True}),
    "tiering": ("real", {"throughput": ("M/s", 90.9), "kernel_throughput": ("M/s", 95.0),
                         "predicted": ("M/s", 88.0), "fast_hits": ("ratio", 0.8),
                         "fast_share": ("ratio", 0.5), "migrated": ("MB", 20.0),
                         "move_ms": ("ms", 3.0), "pingpong": ("pages", 10.0)},
                {"engine": "real", "pages": 32768, "epochs": 8, "tiers": TIERS}),
    "gpu_stream": ("triad", {"bandwidth": ("GB/s", 4000.0)}, {"device": H200, "blocks": 264}),
    "gpu_chase": ("gpu_chase", {"latency": ("ns", 600.0), "cycles": ("cycles", 1100.0)},
                  {"device": H200}),
    "gpu_copy": ("copy_ce", {"bandwidth": ("GB/s", 50.0), "time": ("us", 20.0)},
                 {"device": H200}),
    "gpu_zero_copy": ("zero_copy", {"bandwidth": ("GB/s", 40.0)}, {"device": H200}),
    "gpu_managed": ("managed", {"bandwidth": ("GB/s", 300.0), "time": ("us", 3000.0)},
                    {"device": H200}),
    "gpu_embedding": ("gpu_embedding", {"lookups": ("M/s", 9000.0), "bandwidth": ("GB/s", 900.0)},
                      {"device": H200}),
    "gpu_kv_swap": ("kv_swap", {"bandwidth": ("GB/s", 40.0), "time": ("us", 800.0),
                                "issue_time": ("us", 30.0)}, {"device": H200}),
}
VARIANTS = [    # (benchmark, whether a case's params add them, the metrics added[, info added])
    ("bandwidth", lambda p: "triad" in str(p.get("kernel")),
     {"bandwidth_memory": ("GB/s", 20.7)}),
    ("chase", lambda p: p.get("chains", 1) > 1, {"parallelism": ("loads", 3.0)}),
    ("chase", lambda p: p.get("dist"), {"p50": ("ns", 95.0), "p99": ("ns", 140.0)}, DIST),
    ("loaded_latency", lambda p: p.get("dist"),
     {"p50": ("ns", 139.7), "p90": ("ns", 156.6), "p99": ("ns", 178.5),
      "p99.9": ("ns", 285.4)}, DIST),
    ("embedding", lambda p: p.get("train", "none") != "none", {"rows_updated": ("M/s", 3.7)}),
    ("checkpoint", lambda p: p.get("interfere", "none") != "none",
     {"bandwidth_shared": ("GB/s", 7.2), "snapshot_slowdown": ("x", 1.01),
      "step_slowdown": ("x", 0.99), "step_time": ("ms", 1.83)}),
    ("kvcache", lambda p: p.get("op", "decode") == "decode",
     {"step_p50": ("us", 1136.9), "step_p99": ("us", 1254.1)}),
    ("kvcache", lambda p: str(p.get("op")).startswith("swap"),
     {"seq_p50": ("us", 2303.1), "seq_p99": ("us", 2369.2)}),
    ("kvcache", lambda p: p.get("op") == "restore",
     {"chunk_p50": ("us", 565.1), "chunk_p99": ("us", 667.6)}),
    ("optimizer", lambda p: p.get("triad", True),
     {"triad": ("GB/s", 22.4), "of_triad": ("ratio", 1.3)}),
]
TIMES = {"ns", "us", "ms", "x", "cycles"}
MODELLED = {"embedding": "lookups", "kvcache": "tokens", "optimizer": "params",
            "checkpoint": "bandwidth"}


def _nodes(params: dict) -> list[int]:
    """The nodes the case's memory is bound to (its buffers' too)."""
    out = []
    for k, v in params.items():
        if k == "mem" or k.startswith("mem."):
            p = Placement.of(v)
            out += list(p.nodes) if p.policy == "bind" else []
    return out


def _metrics(case) -> tuple[str, dict, dict]:
    """The kernel, metrics and info a case of its benchmark and settings records."""
    p = case.params
    kernel, metrics, info = SHAPES[case.bench]
    metrics, info = dict(metrics), dict(info)
    for bench, applies, more, *extra in VARIANTS:
        if bench == case.bench and applies(p):
            metrics.update(more)
            for added in extra:
                info.update(added)
    if case.bench in ("matrix", "interleave_sweep"):       # one metric, what it measures
        latency = p.get("measure") in ("latency", "loaded")
        metrics = {"latency": ("ns", 150.0)} if latency else {"bandwidth": ("GB/s", 17.0)}
    if case.bench == "gpu_zero_copy" and p.get("op") == "chase":
        metrics = {"latency": ("ns", 1500.0)}
    if case.bench == "tiering":
        kernel = f"{p.get('workload', 'embedding')}:real"
        if p.get("workload") == "kvcache":
            metrics = {m: ("tok/s" if u == "M/s" else u, v) for m, (u, v) in metrics.items()}
    if case.bench == "kvcache":
        kernel = f"kvcache_{p.get('op', 'decode')}"
    if case.bench in ("migrate", "migrate_touch"):
        info.update({"pages": p["size"] // 4096, "from": p["from"], "to": p["to"]})
    return kernel, metrics, info


def _value(case, metric: str, unit: str, typical: float) -> float:
    """A median that moves with what the case varies: slower on the far node, latency
    growing with the working set, tiering's throughput with the fast share."""
    p = case.params
    far = sum(_nodes(p))
    slower = 1 + 0.8 * far if unit in TIMES else 1 / (1 + 0.8 * far)
    jitter = 1 + (zlib.crc32(case.id.encode()) % 100) / 400
    v = typical * slower * jitter
    size = p.get("size")
    if isinstance(size, int) and case.bench in ("chase", "gpu_chase") and unit == "ns":
        v *= 0.02 if size <= 48 << 10 else 0.05 if size <= 2 << 20 else \
            0.3 if size <= 60 << 20 else 1.0
    if case.bench == "tiering" and unit != "ratio":
        share = {"all-fast": 1.0, "all-slow": 0.0}.get(p.get("policy"), p.get("share", 1.0))
        v *= 0.4 + 0.6 * float(share) ** (0.3 if p.get("policy") == "oracle" else 0.8)
    return v


def measurement(case, threads_all: int, modelled: bool) -> dict:
    """A made-up measurement of the case, shaped as its benchmark's real ones; modelled:
    with the calibrated model's prediction beside it, as on a machine calibrated first."""
    kernel, metrics, info = _metrics(case)
    p = case.params
    threads = p.get("threads", 1)
    cpus = parse_list(p["cpus"]) if case.bench == "pingpong" and p.get("cpus") else \
        CPUS[:threads_all if threads == "all" or case.bench.startswith("gpu") else threads]
    reps = max(int(p.get("repeat", 3)), 2)
    medians = {m: _value(case, m, u, v) for m, (u, v) in metrics.items()}
    if "cdf" in info:       # the distribution moves with the case's mean
        scale = medians["latency"] / 137.6
        info["cdf"] = {**info["cdf"], "ns": [v * scale for v in info["cdf"]["ns"]]}
    if modelled and case.bench in MODELLED:
        metric = MODELLED[case.bench]
        info["model"] = {"metric": metric, "predicted": medians[metric] * 1.15, "node": 0,
                         "kind": "measured", "source": "measured: results/fixture/calibrate-1"}
    return {"status": "ok", "kernel": kernel, "isa": "avx2", "cpus": cpus,
            "units": {m: u for m, (u, _) in metrics.items()},
            "reps": [{m: v * (1 + 0.01 * (i - reps // 2)) for m, v in medians.items()}
                     for i in range(reps)],
            "info": info,
            "placement": {"spec": str(p.get("mem", "local")), "page": str(p.get("page", "4k")),
                          "method": "mbind",
                          "verified": [{"buffer": "a", "text": "0:512", "ok": True}]}}


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory) -> Topology:
    """A CPU node and a CXL node (interleaved_cxl): every bind:* case twice."""
    root = sysfs_fixtures.write(tmp_path_factory.mktemp("machine"), "interleaved_cxl")
    return Topology.read(root / "sys", root / "proc", probe_gpus=False)


def made_run(name: str, topo: Topology, results: Path) -> Path:
    """A run folder of the suite's every case, as `cxlbench run` leaves it."""
    s = suite.load(name)
    cases = suite.expand_for(s, topo)
    run = runner.start(s, cases, topo, str(results))
    for case in cases:
        m = measurement(case, len(CPUS), modelled=name == "model-check")
        run.append(case.id, runner.rows_for(run, case, m), runner.journal_entry(case, m, 0.1))
    return run.path


def _overlap(a, b) -> bool:
    """Whether two boxes on the canvas share any area."""
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.fixture
def drawn(monkeypatch) -> list[dict]:
    """What each figure saved showed: its texts, the smallest font, axis labels, legends'
    entries and whether a legend covers a plot (read once the figure is drawn)."""
    seen = []
    save = matplotlib.figure.Figure.savefig

    def savefig(fig, *args, **kwargs):
        out = save(fig, *args, **kwargs)
        texts = [t for t in fig.findobj(matplotlib.text.Text)
                 if t.get_visible() and t.get_text().strip()]
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + fig.legends
        plots = [ax.get_window_extent() for ax in fig.axes]
        seen.append({"texts": [t.get_text() for t in texts],
                     "smallest": min(t.get_fontsize() for t in texts),
                     "ylabels": [ax.get_ylabel() for ax in fig.axes],
                     "legends": [[t.get_text() for t in leg.get_texts()] for leg in legends],
                     "covering": [leg for leg in legends if any(
                         _overlap(leg.get_window_extent(), p) for p in plots)]})
        return out
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return seen


def test_the_suites_are_those_shipped():
    assert sorted(suite.shipped_names()) == SUITES


@pytest.mark.filterwarnings("error::UserWarning")    # a layout that could not fit its text
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in SUITES])
def test_every_figure_of_a_suites_report_reads_at_page_width(name, two_nodes, tmp_path,
                                                             drawn):
    path = made_run(name, two_nodes, tmp_path / "results")
    html_path, _ = report.build([path], tmp_path / "report")
    pngs = sorted((html_path.parent / "figures").glob("*.png"))
    assert pngs and len(pngs) == len(drawn), (name, [p.name for p in pngs])
    for png in pngs:
        width, height = Image.open(png).size
        assert width <= layout.PAGE_PX and 150 <= height <= MAX_HEIGHT, (png.name, width,
                                                                           height)
    for fig in drawn:
        what = fig["texts"][:2]
        for entries in fig["legends"]:
            assert len(entries) <= layout.MAX_LEGEND, (what, entries)
            longest = max(len(line) for e in entries for line in e.splitlines())
            assert longest <= layout.LEGEND_CHARS, (what, entries)
        assert not fig["covering"], (what, "a legend over a plot")
        assert fig["smallest"] >= 9, what
        raw = [t for t in fig["texts"] if RAW.search(t) or t.strip() == "-"]
        assert not raw, (what, raw)
        assert not [y for y in fig["ylabels"] if "_" in y], (what, fig["ylabels"])  # step_p50
    if any("bind:*" in str(job) for job in suite.load(name).data.values()
           if isinstance(job, dict)):
        # the two nodes told apart in words, somewhere in the report's figures
        assert any("node 1" in t for fig in drawn for t in fig["texts"]), name


def test_jobs_of_other_settings_get_a_panel_each(two_nodes, tmp_path):
    """The ml suite's embedding jobs (skew, row types, DLRM-DCNv2, meta-2022-like, SGD,
    Adagrad) were pooled under one skew label, a legend entry per parameter string and a
    group named '-': each is a panel of its own now, titled by its job and what sets it
    apart, its x what it varies, its legend the placement, all in words."""
    runs = runs_.load_runs([made_run("ml", two_nodes, tmp_path)])
    frame = report.summary(runs)
    lookups = frame[(frame["benchmark"] == "embedding") & (frame["metric"] == "lookups")]
    got = panels.split(lookups.reset_index(drop=True), ("dist", "alpha"))
    assert [p.title.splitlines()[0] for p in got] == [
        "embedding_skew", "embedding_dtype", "embedding_dlrm", "embedding_meta2022",
        "embedding_sgd", "embedding_adagrad"]
    skew, dtype, dlrm, meta, sgd, adagrad = got
    assert list(dict.fromkeys(skew.groups)) == ["α=0", "α=0.8", "α=1.05", "α=1.2"]
    assert list(dict.fromkeys(dtype.groups)) == ["fp32", "fp16", "bf16", "int8"]
    assert list(dict.fromkeys(dlrm.groups)) == ["1 thread", "4 threads"]
    assert set(meta.groups) == {""}         # the preset draws its own rows: no skew to name
    assert set(sgd.groups) == {"Zipf, α=1.05"}
    assert set(skew.series) == set(dlrm.series) == {"table on node 0", "table on node 1"}
    assert set(adagrad.series) == {"state on node 0", "state on node 1"}
    assert "fp16, dlrm-dcnv2" in dlrm.title and sgd.title.endswith("SGD step")


def test_an_embedding_tables_size_and_far_share_read_as_words():
    """A table sized by its rows (size 0) is not "0 B", and the calibration's sparse
    gathers read as a share of the lookups (a calibration report's panels)."""
    from cxlbench.report.figures import words
    assert words.value("size", 0, "embedding") == "table sized by rows"
    assert words.value("size", 1 << 20, "embedding") == "1 MiB table"
    assert words.value("far", 0.125, "embedding") == "1 in 8 lookups over the table"
    assert words.value("far", 1.0, "embedding") == "every lookup over the table"


@pytest.fixture
def shown(monkeypatch) -> dict:
    """Each figure's axes as drawn, by its title (the figure's suptitle)."""
    seen = {}
    png = layout.png

    def keep(fig):
        title = fig._suptitle.get_text().replace("\n", " ") if fig._suptitle else ""
        seen[title] = [{"xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
                        "title": ax.get_title(), "xlabel": ax.get_xlabel(),
                        "yticks": [t.get_text() for t in ax.get_yticklabels()],
                        "texts": [t.get_text() for t in ax.texts],
                        "legend": [t.get_text() for t in ax.get_legend().get_texts()]
                        if ax.get_legend() else []}
                       for ax in fig.axes if ax.get_label() != "<colorbar>"]
        return png(fig)
    monkeypatch.setattr(layout, "png", keep)
    return seen


def _tails_figures(topo: Topology, tmp_path: Path) -> dict:
    """The tails suite's figures, by key, of loaded latency and interference."""
    runs = runs_.load_runs([made_run("tails", topo, tmp_path)])
    frame = report.summary(runs)
    out = {}
    for family in ("loaded_latency", "interference"):
        sub = frame[frame["benchmark"] == family].reset_index(drop=True)
        out.update({f.key: f for f in figures.figures_for(family, sub, runs)})
    return out


def test_the_tails_suite_draws_each_nodes_latency_distribution_on_log_axes(two_nodes,
                                                                           tmp_path, shown):
    """Per memory node, the share of batches slower than each latency (1 - q) on a log
    axis down to the tail, idle and under each mix's hardest load; the caption says what
    the samples are."""
    figs = _tails_figures(two_nodes, tmp_path)
    cdf = figs["latency-distribution"]
    assert cdf.title.startswith("Latency distribution per memory node")
    axes = shown[cdf.title]
    assert [a["title"] for a in axes] == ["memory on node 0", "memory on node 1"]
    assert all(a["yscale"] == "log" and a["xscale"] == "log" for a in axes)
    assert "0.001" in axes[0]["yticks"] and "p99.9" in axes[0]["texts"]
    assert [e for a in axes for e in a["legend"]] == [
        "idle (no load)", "reads, full load (no pause)",
        "writes, full load (no pause)", "NT writes, full load (no pause)"]
    assert "a batch of 16 dependent loads" in cdf.caption
    assert "1,048,576 batches a case" in cdf.caption


def test_the_tails_suite_draws_the_interference_matrix(two_nodes, tmp_path, shown):
    """Victim node x aggressor node by aggressor threads, a table per mix and loss, each
    cell its % and the same node said so."""
    figs = _tails_figures(two_nodes, tmp_path)
    matrix = figs["interference-matrix"]
    axes = shown[matrix.title]
    assert [a["title"] for a in axes] == [
        "read bandwidth lost (%)\naggressors' reads",
        "read bandwidth lost (%)\naggressors' NT writes",
        "latency added (%)\naggressors' reads", "latency added (%)\naggressors' NT writes"]
    for a in axes:
        assert a["yticks"] == ["0 ← 0 (same node)", "0 ← 1", "1 ← 0", "1 ← 1 (same node)"]
        assert len(a["texts"]) == 4 * 5 and all(t.endswith(" %") for t in a["texts"])
    assert "The aggressors drew" in matrix.caption


def test_on_one_node_the_aggressors_have_no_second_node(tmp_path, shown):
    root = sysfs_fixtures.write(tmp_path / "machine", "vm")
    topo = Topology.read(root / "sys", root / "proc", probe_gpus=False)
    figs = _tails_figures(topo, tmp_path / "results")
    matrix = figs["interference-matrix"]
    assert {t for a in shown[matrix.title] for t in a["yticks"]} == {
        "0 ← 0 (no second node)"}
    assert "no second node" in matrix.caption
    assert [a["title"] for a in shown[figs["latency-distribution"].title]] == [
        "memory on node 0"]


def test_the_tail_and_interference_metrics_read_as_words():
    from cxlbench.report.figures import words
    assert words.metric("p99.9", "ns") == "p99.9 latency (ns)"
    assert words.metric("p99.99", "ns") == "p99.99 latency (ns)"
    assert words.metric("bandwidth_loss", "%") == "bandwidth lost (%)"
    assert words.metric("latency_loss", "%") == "latency added (%)"
    assert words.metric("aggressor_bandwidth", "GB/s") == "aggressors' bandwidth (GB/s)"
    assert words.value("delay", "idle") == "idle (no load)"
    assert words.value("delay", 0) == "full load (no pause)"
