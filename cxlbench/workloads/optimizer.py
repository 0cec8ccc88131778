"""The optimizer step of training: one fused Adam or AdamW pass over the parameters, their
gradients and both moments (and in mixed precision the fp32 master copy), each in its own
buffer. Its option table, real models' parameter counts, the buffers' sizes and the arrays
laid out in them (`State`, staggered), bf16 rounding, numpy's step in the kernel's order,
and the check of a step against it on all or a sample of the parameters, and the epochs
the tiering engines drive (all the arrays in one tiered buffer, region after region). The
optimizer benchmark runs it; checkpoint's background Adam step lays its arrays out the same
way."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..errors import CheckError, UserError
from ..memory import native
from ..options import Option
from .epochs import Demand

NAME = "optimizer"

KINDS = ("adam", "adamw")                   # CXB_ADAM_*, tested against native
PRECISIONS = ("fp32", "mixed")              # CXB_PRECISION_*
# Bytes a parameter moves in a step, read + written. fp32: p, g, m, v read, p, m, v
# written. mixed: bf16 g, fp32 m, v and master read; those three and bf16 p written.
TRAFFIC = {"fp32": 16 + 12, "mixed": 14 + 14}
MEMORY = {"fp32": 28, "mixed": 28 + 2}      # + the bf16 parameters' write-allocate
LINE_FLOATS = 16                            # the kernel's threads take whole lines
FULL_CHECK = 1 << 22                        # up to this many parameters: all are checked
SAMPLE = 1 << 20                            # beyond it: this many, strided, and the edges

# Parameter counts, from each model's published configuration (embeddings, attention,
# MLP and norms added up; Llama's output projection is untied).
PRESETS = {"opt-1.3b": 1_315_758_080, "llama-2-7b": 6_738_415_616,
           "llama-2-70b": 68_976_648_192}

# The workload's own options; the benchmark adds where and how it runs.
OPTIONS = {
    "preset": Option("preset", "choice", "custom", "a real model's parameter count (custom: "
                     "params)", choices=("custom", *PRESETS)),
    "scale": Option("scale", "float", 1.0, "a preset's parameters times this, to fit the "
                    "machine", min=1e-9, max=1.0),
    "params": Option("params", "int", 1 << 24, "parameters (custom)", min=4096, max=1 << 40),
    "optim": Option("optim", "choice", "adam", "Adam (weight decay added to the gradient) or "
                    "AdamW (decoupled weight decay)", choices=KINDS),
    "precision": Option("precision", "choice", "fp32", "fp32 everything, or mixed: bf16 "
                        "parameters and gradients, fp32 master copy and moments",
                        choices=PRECISIONS),
    "lr": Option("lr", "float", 1e-3, "learning rate", min=0.0, max=1e6),
    "beta1": Option("beta1", "float", 0.9, "first moment's decay", min=0.0, max=0.999999),
    "beta2": Option("beta2", "float", 0.999, "second moment's decay", min=0.0, max=0.999999),
    "eps": Option("eps", "float", 1e-8, "added to the denominator", min=0.0, max=1.0),
    "weight_decay": Option("weight_decay", "float", 0.01, "weight decay", min=0.0, max=1.0),
    "triad": Option("triad", "bool", True, "time the STREAM triad on the same buffers in every "
                    "repetition (the bound the step is measured against)"),
    "seed": Option("seed", "int", 1, "seed of the parameters, gradients and moments", min=0),
}


def count(params: dict) -> int:
    preset = PRESETS.get(params["preset"])
    return params["params"] if preset is None else max(4096, math.ceil(preset * params["scale"]))


STAGGER = 1024 + 48     # floats (4 KiB and 3 lines) between the arrays of `states`


def padded(n: int) -> int:
    """The distance in floats from one state array to the next in `states`: n in whole
    lines, plus STAGGER, so m[i] and v[i] differ in their low address bits too (below
    4 KiB: no store to m aliasing a load of v) and in the cache sets above them. Lying a
    power of two apart, as they do at the usual sizes without it, the step ran at
    950-1,250 M params/s instead of 1,400-1,900 (64 M parameters, alternated; allocated
    apart they run at the latter). STREAM offsets its arrays for the same reason."""
    return -(-n // LINE_FLOATS) * LINE_FLOATS + STAGGER


def sizes(n: int, precision: str) -> dict[str, int]:
    wide = 4 if precision == "fp32" else 2
    return {"params": n * wide, "grads": n * wide,
            "states": padded(n) * 4 * (2 if precision == "fp32" else 3)}


class State:
    """The step's arrays: parameters and gradients (float32, or bf16 bits as uint16 with
    the float32 master copy w), the float32 moments m and v."""

    def __init__(self, p, g, m, v, w=None):
        self.p, self.g, self.m, self.v, self.w = p, g, m, v, w
        self.n, self.mixed = len(m), w is not None

    @classmethod
    def of(cls, buffers, n: int, precision: str) -> "State":
        """Views of the placed params, grads and states buffers."""
        params, grads, states = buffers
        wide = np.uint16 if precision == "mixed" else np.float32
        f, s = states.array(np.float32), padded(n)
        return cls(params.array(wide)[:n], grads.array(wide)[:n], f[:n], f[s:s + n],
                   f[2 * s:2 * s + n] if precision == "mixed" else None)

    def fill(self, rng: np.random.Generator) -> None:
        """Values of a model mid-training: small weights, gradients and moments, v >= 0."""
        for lo in range(0, self.n, 1 << 22):
            hi = min(lo + (1 << 22), self.n)
            k = hi - lo
            weights = rng.standard_normal(k, dtype=np.float32) * np.float32(0.02)
            grads = rng.standard_normal(k, dtype=np.float32) * np.float32(1e-3)
            self.m[lo:hi] = rng.standard_normal(k, dtype=np.float32) * np.float32(1e-4)
            self.v[lo:hi] = rng.random(k, dtype=np.float32) * np.float32(1e-6)
            if self.mixed:
                self.w[lo:hi] = weights
                self.p[lo:hi], self.g[lo:hi] = to_bf16(weights), to_bf16(grads)
            else:
                self.p[lo:hi], self.g[lo:hi] = weights, grads

    def master(self, idx) -> np.ndarray:
        return self.w[idx] if self.mixed else self.p[idx]

    def grad(self, idx) -> np.ndarray:
        return from_bf16(self.g[idx]) if self.mixed else self.g[idx]


def to_bf16(x: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bits, rounded to nearest even (the kernel's rounding)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)) \
        .astype(np.uint16)


def from_bf16(h: np.ndarray) -> np.ndarray:
    return (h.astype(np.uint32) << np.uint32(16)).view(np.float32)


def reference(p, g, m, v, params: dict, step: int):
    """numpy's step on float32 arrays, the kernel's order and coefficients: returns the
    new parameters (the master copy in mixed precision) and moments."""
    f = np.float32
    lr, b1, b2 = f(params["lr"]), f(params["beta1"]), f(params["beta2"])
    wd, adamw = f(params["weight_decay"]), params["optim"] == "adamw"
    size = f(params["lr"] / (1 - params["beta1"] ** step))
    inv_bc2 = f(1 / math.sqrt(1 - params["beta2"] ** step))
    g = g if adamw else g + wd * p
    m = b1 * m + (f(1) - b1) * g
    v = b2 * v + (f(1) - b2) * g * g
    shrink = f(1) - lr * wd if adamw else f(1)
    return p * shrink - size * m / (np.sqrt(v) * inv_bc2 + f(params["eps"])), m, v


def sample(n: int, threads: int, rng: np.random.Generator) -> np.ndarray:
    """The parameters a step is checked on: all of them up to FULL_CHECK; beyond it a
    strided sample from a random start, and 64 either side of every thread's slice edge
    (where a slicing or tail mistake would show) and the last 64."""
    if n <= FULL_CHECK:
        return np.arange(n)
    stride = n // SAMPLE
    lines = -(-n // LINE_FLOATS)
    edges = [min(n, lines * t // threads * LINE_FLOATS) for t in range(threads + 1)]
    near = np.concatenate([np.arange(e - 64, e + 64) for e in edges])
    picked = np.concatenate((np.arange(int(rng.integers(stride)), n, stride), near))
    return np.unique(picked[(picked >= 0) & (picked < n)])


def check_step(st: State, idx: np.ndarray, before, params: dict, step: int) -> None:
    """The step's parameters and moments at `idx` against numpy's from their values before.
    The parameters twice: their new values, and the update itself (new less old) to 0.1 %
    or two units in the weight's last place, which a missing term of lr x weight decay
    (1e-5 of a weight) would fail at the usual learning rates; the bf16
    parameters exactly as the kernel's own master copy rounds to nearest even."""
    want_p, want_m, want_v = reference(*before, params, step)
    got_p = st.master(idx)
    # the update is a difference of weights: it cannot be closer than their last bits
    ulps = 2 * np.spacing(np.maximum(np.abs(before[0]), np.abs(want_p)))
    for name, got, want, rtol, floor in (
            ("m", st.m[idx], want_m, 1e-5, 0), ("v", st.v[idx], want_v, 1e-5, 0),
            ("parameters", got_p, want_p, 1e-5, 0),
            ("the update", got_p - before[0], want_p - before[0], 1e-3, ulps)):
        close = np.isclose(got, want, rtol=rtol, atol=np.maximum(
            rtol * 0.1 * float(np.abs(want).max(initial=0)), floor))
        if not close.all():
            i = int(idx[np.flatnonzero(~close)[0]])
            raise CheckError(f"optimizer: {name} of parameter {i} is {got[~close][0]!r}, "
                             f"numpy's step gives {want[~close][0]!r}")
    if st.mixed:
        bad = st.p[idx] != to_bf16(got_p)
        if bad.any():
            i = int(idx[np.flatnonzero(bad)[0]])
            raise CheckError(f"optimizer: bf16 parameter {i} is "
                             f"{from_bf16(st.p[idx][bad][:1])[0]!r}, not its master copy "
                             "rounded to nearest even")


def unused(params: dict) -> dict[str, str]:
    """The options this case ignores, each with why (the registry refuses them set)."""
    if params["preset"] == "custom":
        return {"scale": "scale shrinks a preset; custom takes params"}
    return {"params": f"preset={params['preset']} has a parameter count of its own (scale "
                      "shrinks it)"}


# ---- the tiering engines' epochs ---------------------------------------------------------

LINE = 64                   # bytes of a cache line: what memory moves
REGIONS = ("params", "grads", "m", "v", "master")
WRITTEN = ("params", "m", "v", "master")    # the step's stores; the gradients are only read
ALIGN = 4096                # each region starts on a (base) page of its own
APART = (STAGGER - 1024) * 4    # 192 B: STAGGER's 3 lines below a page, for the same reason


def lines_per_page(first: int, nbytes: int, pages: int, page: int) -> np.ndarray:
    """The cache lines of bytes [first, first + nbytes) on each of `pages` pages."""
    out = np.zeros(pages, dtype=np.int64)
    lo, hi, per = first // LINE, -(-(first + nbytes) // LINE), page // LINE
    p = np.arange(lo // per, -(-hi // per))
    out[p] = np.minimum(hi, (p + 1) * per) - np.maximum(lo, p * per)
    return out


class Order(Option):
    """An option naming the regions in their order, comma-separated, each once: params,
    grads, m and v, and master where a case wants the mixed precision's copy elsewhere
    than last. Checked as --set and suites convert it (Epochs checks master against the
    precision)."""

    def convert(self, raw) -> str:
        names = [w.strip() for w in str(raw).split(",")]
        stray = [w for w in names if w not in REGIONS]
        twice = sorted({w for w in names if names.count(w) > 1})
        missing = [w for w in REGIONS[:4] if w not in names]
        for bad, why in ((stray, "no region"), (twice, "named twice"), (missing, "missing")):
            if bad:
                raise ValueError(f"{raw!r}: {', '.join(map(repr, bad))}: {why} (order names "
                                 f"{', '.join(REGIONS[:4])} each once, and master in mixed "
                                 "precision where not last)")
        return ",".join(names)


def order_of(text: str, mixed: bool) -> tuple[str, ...]:
    """The regions in the order `text` names them, master last where mixed and not named;
    UserError naming the option for anything else (an Epochs built from unchecked text)."""
    try:
        names = tuple(Epochs.OPTIONS["order"].convert(text).split(","))
    except ValueError as e:
        raise UserError(f"optimizer.order: {e}") from None
    if "master" in names and not mixed:
        raise UserError(f"optimizer.order={text}: precision=fp32 has no master copy")
    return names + (("master",) if mixed and "master" not in names else ())


def step_demand(n: int, precision: str) -> Demand:
    """One step as the tier model charges it: every array streamed once from memory (all
    evicted first), its reads, and its writes to lines it has just read (no allocating
    read), as MEMORY counts them; mixed precision's bf16 parameters pull their lines in
    before the write."""
    written = {"fp32": 12, "mixed": 14}[precision]
    return Demand(units=n, read=n * (MEMORY[precision] - written), write=n * written,
                  in_place=True, kernel=f"adam-{precision}")


class Epochs:
    """Training's optimizer step as the tiering engines drive it: one Adam or AdamW step
    an epoch over one tiered buffer, "state", holding every array of the step region after
    region (parameters, gradients, both moments and in mixed precision the fp32 master
    copy) in `order`, each region on pages of its own. A step streams every line of every
    region alike, so the pages' heat never moves: what a share buys is which arrays sit on
    the fast node. first-touch at a share fills the regions first in `order` (order
    params,grads,m,v at share 0.5: the moments on the slow node), interleave spreads them
    N:M; regions() says where each lies."""
    TIERED = "state"
    BUFFERS = ("state",)
    UNIT = "params"
    RATE = ("M/s", 1e6)         # what throughput is reported in: unit, units a second each
    # The options a tiering case takes, as optimizer.<name>: 4 Mi parameters, 64 MiB of
    # state in either precision (16 B a parameter), a step of a few ms on a small machine.
    OPTIONS = {
        "params": OPTIONS["params"].but(default=1 << 22, help="parameters the step updates"),
        "precision": OPTIONS["precision"],
        "optim": OPTIONS["optim"],
        "order": Order("order", "list", "params,grads,m,v", "the regions of the state "
                       "buffer in address order, comma-separated (master: last unless named; "
                       "first-touch fills the first ones fast)"),
    }

    def __init__(self, own: dict, seed: int, epochs: int, phase: str):
        if phase != "none":
            raise UserError(f"optimizer: phase={phase} moves a hot set, and a step reads "
                            "every line of its state alike: there is none (use phase=none)")
        own = {**{name: opt.default for name, opt in self.OPTIONS.items()}, **own}
        # lr, betas, eps, weight decay: the optimizer benchmark's defaults
        self.params = {**{name: opt.default for name, opt in OPTIONS.items()}, **own}
        self.n, self.seed, self.epochs = own["params"], seed, epochs
        mixed = own["precision"] == "mixed"
        self.order = order_of(own["order"], mixed)
        wide = 2 if mixed else 4
        nbytes = {"params": self.n * wide, "grads": self.n * wide, "m": self.n * 4,
                  "v": self.n * 4, "master": self.n * 4}
        # Region i's array starts i x APART into it (no two arrays alike in their low
        # address bits: see padded), every region keeping room for the largest offset,
        # so regions of one width span as many pages and a share falls on their edges.
        slack, at = APART * (len(self.order) - 1), 0
        self.spans, self.arrays = {}, {}
        for i, name in enumerate(self.order):
            span = -(-(nbytes[name] + slack) // ALIGN) * ALIGN
            self.spans[name], self.arrays[name] = (at, at + span), (at + i * APART, nbytes[name])
            at += span
        self.size = at

    @classmethod
    def unused(cls, own: dict) -> dict[str, str]:
        return {}

    def regions(self, page: int) -> dict[str, tuple[int, int]]:
        """Each region's pages, [first, end), in address order. At a page larger than
        ALIGN (hugetlb 2m) a region's edge page may hold its neighbour's lines too."""
        return {name: (lo // page, -(-hi // page)) for name, (lo, hi) in self.spans.items()}

    def sizes(self) -> dict[str, int]:
        return {"state": self.size}

    def _lines(self, which) -> int:
        return sum(-(-nbytes // LINE) for name, (_, nbytes) in self.arrays.items()
                   if name in which)

    def epoch_bytes(self) -> int:
        """Bytes a step moves: every line read (mixed precision's bf16 parameters by the
        write's allocating read), the parameters, moments and master copy written back."""
        return LINE * (self._lines(REGIONS) + self._lines(WRITTEN))

    def units(self) -> int:
        """Parameters a step updates."""
        return self.n

    def waits(self, counts: np.ndarray) -> int:
        """Misses waited: the lines read (a write goes back to a line just read)."""
        return self._lines(REGIONS)

    def counts(self, epoch: int, pages: int, page: int) -> np.ndarray:
        """Each page's accesses in a step, the same every epoch: its lines of each array,
        once read, and once more written back where the step stores to the array."""
        return sum((1 + (name in WRITTEN)) * lines_per_page(at, nbytes, pages, page)
                   for name, (at, nbytes) in self.arrays.items())

    def demand(self, epoch: int, page: int) -> Demand:
        """The step as the calibrated model charges it (step_demand), each page's bytes
        its counts' lines."""
        c = self.counts(epoch, -(-self.size // page), page)
        return replace(step_demand(self.n, self.params["precision"]),
                       stream_pages=c * float(LINE))

    def choose_isa(self, asked: str) -> str:
        return native.driver("adam").choose_isa(asked)

    def prepare(self, buffers, isa: str, cpus: list[int]) -> None:
        """The step's arrays as views of their regions, filled as the benchmark fills them."""
        (self.buf,) = buffers
        self.isa, self.cpus, self.step = isa, list(cpus), 0
        raw, mixed = self.buf.array(np.uint8), self.params["precision"] == "mixed"
        view = {name: raw[at:at + nbytes].view(np.uint16 if mixed and name in ("params", "grads")
                                                else np.float32)
                for name, (at, nbytes) in self.arrays.items()}
        self.st = State(view["params"], view["grads"], view["m"], view["v"], view.get("master"))
        self.rng = np.random.default_rng(self.seed)
        self.st.fill(self.rng)

    def run(self, epoch: int) -> int:
        """One step by the C kernel from memory (the state evicted first), timed there, and
        checked against numpy's on all or a sample of the parameters: ns. Steps follow on
        from one another, as training's do (the bias correction's step counts them)."""
        st, p = self.st, self.params
        self.step += 1
        idx = sample(st.n, len(self.cpus), self.rng)
        before = (st.master(idx).copy(), st.grad(idx).copy(), st.m[idx].copy(), st.v[idx].copy())
        native.evict(self.buf.addr, self.size)
        ns = native.adam(st.p, st.g, st.m, st.v, st.w, p["optim"], p["precision"], self.isa,
                         p["lr"], (p["beta1"], p["beta2"]), p["eps"], p["weight_decay"],
                         self.step, self.cpus)
        check_step(st, idx, before, p, self.step)
        return ns
