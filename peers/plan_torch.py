"""`cxlbench plan`'s footprints against what torch (the CPU build does) actually holds,
for a Llama-architecture decoder at small scale, one table at the end, each ratio beside
its target.

The model is built from the planner's Job with plain torch modules: nn.Embedding, per
layer nn.RMSNorm, q/k/v/o nn.Linear without bias, rotary embedding on q and k (cos/sin
buffers), F.scaled_dot_product_attention(is_causal=True, enable_gqa=True) (flash-style:
no score matrix kept), a residual, nn.RMSNorm, a SwiGLU MLP, a residual; then a final
nn.RMSNorm, an untied output nn.Linear and F.cross_entropy. Parameters in job.dtype
(bf16 or fp32). Measured, for one micro-batch and one optimizer step:

  parameters          sum of p.nbytes                                  within 5 %
  gradients           sum of p.grad.nbytes after one backward          within 5 %
  master weights      an fp32 clone of each parameter (mixed precision) within 5 %
  optimizer moments   torch.optim.Adam over the masters after step():
                      exp_avg and exp_avg_sq                           within 5 %
  activations/layer   the storages autograd saves during the forward
                      (torch.autograd.graph.saved_tensors_hooks), each
                      counted once, parameters and buffers left out,
                      attributed to the decoder layer whose forward saved
                      them; the layers' mean vs fp.activation_bytes     within 20 %
  activations         all layers' vs the plan's "activations" part     within 20 %
  outside layers      what the final norm, the output Linear and the
                      loss save (and the token ids) vs the plan's
                      "output activations"                             within 20 %

Then every pipeline stage at pp 2 and 4 (the model given 4 layers, 4 micro-batches a
step): each stage built from the same modules (the embedding on the first, the final
norm, output Linear and loss on the last, a hidden state received from the stage before
elsewhere), its forwards run as 1F1B holds them in flight at that stage (pp - s before
the first backward), and what autograd saves counted:

  stage s activations    its layers' saved bytes, all forwards in flight,
                         vs the plan's "activations" of stage s          to the byte
  stage s output layer   the last stage's outside-layer bytes vs the
                         plan's "output activations" (token ids beside)  within 1 %

Attribution: a layer's bytes include its input (saved by its first norm: the embedding's
output for layer 0, the previous layer's output after), so each layer counts the same;
the last layer's output, saved by the final norm, is counted outside the layers in place
of the embedding output. With job.recompute each layer runs under
torch.utils.checkpoint, which keeps only the layer's input.

Exits 1 when a judged row misses its target, 2 on an error (no verdict). Without torch
(pip install -e '.[peers]' --extra-index-url https://download.pytorch.org/whl/cpu) it
says so and exits 0. Usage:

  python peers/plan_torch.py [CONFIG ...] [--json PATH] [--detail] [--norm torch|fused]

  CONFIG: default, mha, mb4-s256, recompute (the default set) and fp32; --detail prints
  the saved tensors of one layer and outside the layers for the first config. The norms
  are by default a function that saves what a fused GPU kernel saves (its input and the
  fp32 reciprocal RMS), as the plan's formula counts them; --norm torch uses nn.RMSNorm,
  whose CPU decomposition keeps two fp32 copies of its input instead (8 s b h a layer
  more: what eager CPU training would hold)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import traceback
from dataclasses import asdict, dataclass, field

from cxlbench.plan import footprint as fp
from cxlbench.plan import job as plan_job

NOT_INSTALLED = ("not run (torch not installed: pip install -e '.[peers]' "
                 "--extra-index-url https://download.pytorch.org/whl/cpu)")

# the smallest Llama-3-shaped model that still has every part (GQA 4:1, SwiGLU 3.5x)
BASE = dict(layers=2, hidden=256, heads=8, kv_heads=2, head_dim=32, ffn=896, vocab=1000,
            seq=128, micro_batch=2)
CONFIGS = {
    "default": {},
    "mha": dict(kv_heads=8, ffn=512),               # GQA off, FFN 2x hidden
    "mb4-s256": dict(micro_batch=4, seq=256),
    "recompute": dict(recompute=True),
    "fp32": dict(dtype="fp32"),                     # master == dtype: no master copy
}
DEFAULT_CONFIGS = ("default", "mha", "mb4-s256", "recompute")
STATE_TARGET = 0.05         # parameters, gradients, master weights, moments: exact formulas
ACT_TARGET = 0.20           # activations
STAGE_TARGET = 0.0          # a stage's layers' activations: to the byte
OUTPUT_TARGET = 0.01        # the last stage's output layer (the token ids and targets beside)
PIPELINES = (2, 4)          # pp of the stage check, over STAGE_LAYERS layers
STAGE_LAYERS = 4


def make_job(name: str, **extra):
    return plan_job.make("llama-3-8b", **{**BASE, **CONFIGS[name], **extra})


# ---- the model -------------------------------------------------------------------------
def build(job, norm: str = "fused", seed: int = 0):
    """The decoder as torch modules, parameters in job.dtype."""
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[job.dtype]
    torch.manual_seed(seed)

    class FusedRMSNormFn(torch.autograd.Function):
        """RMSNorm saving what a fused kernel does (torch's CUDA _fused_rms_norm, Apex,
        Transformer Engine): its input and the fp32 reciprocal RMS of each row."""
        @staticmethod
        def forward(ctx, x, w, eps):
            rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
            ctx.save_for_backward(x, w, rstd)
            return (x.float() * rstd).to(x.dtype) * w

        @staticmethod
        def backward(ctx, g):
            x, w, rstd = ctx.saved_tensors
            xhat = x.float() * rstd
            gw = (g.float() * xhat).sum(tuple(range(g.dim() - 1))).to(w.dtype)
            gx = g.float() * w.float()
            gx = rstd * (gx - xhat * (gx * xhat).mean(-1, keepdim=True))
            return gx.to(x.dtype), gw, None

    class FusedRMSNorm(nn.RMSNorm):
        def forward(self, x):
            return FusedRMSNormFn.apply(x, self.weight, self.eps or 1e-6)

    Norm = nn.RMSNorm if norm == "torch" else FusedRMSNorm

    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            h, a, kv, d = job.hidden, job.heads, job.kv_heads, job.head_dim
            self.q_proj = nn.Linear(h, a * d, bias=False, dtype=dtype)
            self.k_proj = nn.Linear(h, kv * d, bias=False, dtype=dtype)
            self.v_proj = nn.Linear(h, kv * d, bias=False, dtype=dtype)
            self.o_proj = nn.Linear(a * d, h, bias=False, dtype=dtype)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            d = job.head_dim
            q = self.q_proj(x).view(b, s, job.heads, d).transpose(1, 2)
            k = self.k_proj(x).view(b, s, job.kv_heads, d).transpose(1, 2)
            v = self.v_proj(x).view(b, s, job.kv_heads, d).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return self.o_proj(o.transpose(1, 2).reshape(b, s, job.heads * d))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(job.hidden, job.ffn, bias=False, dtype=dtype)
            self.up_proj = nn.Linear(job.hidden, job.ffn, bias=False, dtype=dtype)
            self.down_proj = nn.Linear(job.ffn, job.hidden, bias=False, dtype=dtype)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_norm = Norm(job.hidden, eps=1e-5, dtype=dtype)
            self.attn = Attention()
            self.post_attn_norm = Norm(job.hidden, eps=1e-5, dtype=dtype)
            self.mlp = MLP()

        def forward(self, x, cos, sin):
            x = x + self.attn(self.input_norm(x), cos, sin)
            return x + self.mlp(self.post_attn_norm(x))

    class Checkpointed(nn.Module):
        """A layer run under torch.utils.checkpoint. Reentrant: the layer runs under
        no_grad and the checkpoint's Function saves its tensor inputs (x; cos and sin are
        buffers) with save_for_backward, inside this module's forward, so the hooks see
        what it keeps and whose it is. The non-reentrant checkpoint keeps the same inputs,
        but in its own closure, behind its own saved-tensor hooks that hide them from
        ours. No dropout here, so no RNG state is kept (a ctx attribute, not a saved
        tensor, anyway)."""
        def __init__(self, layer):
            super().__init__()
            self.layer = layer

        def forward(self, x, cos, sin):
            return checkpoint(self.layer, x, cos, sin, use_reentrant=True,
                              preserve_rng_state=False)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(job.vocab, job.hidden, dtype=dtype)
            self.layers = nn.ModuleList(Checkpointed(Layer()) if job.recompute else Layer()
                                        for _ in range(job.layers))
            self.norm = Norm(job.hidden, eps=1e-5, dtype=dtype)
            self.lm_head = nn.Linear(job.hidden, job.vocab, bias=False, dtype=dtype)
            d = job.head_dim
            inv = 1.0 / (500000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
            ang = torch.outer(torch.arange(job.seq, dtype=torch.float32), inv)
            ang = torch.cat((ang, ang), dim=-1)
            # in the model's dtype, so no per-call cast makes a new (saved) tensor
            self.register_buffer("cos", ang.cos().to(dtype), persistent=False)
            self.register_buffer("sin", ang.sin().to(dtype), persistent=False)

        def forward(self, tokens, targets):
            s = tokens.shape[1]
            cos, sin = self.cos[:s], self.sin[:s]
            x = self.embed(tokens)
            for layer in self.layers:
                x = layer(x, cos, sin)
            logits = self.lm_head(self.norm(x))
            return F.cross_entropy(logits.view(-1, job.vocab), targets.view(-1))

    return Decoder()


# ---- the measurement -------------------------------------------------------------------
@dataclass
class Saved:
    """One storage autograd kept during the forward."""
    where: str          # "layer N" or "outside"
    module: str         # the module whose forward was running when it was saved
    made_by: str        # the aten op that allocated it (--detail), else ""
    shape: tuple
    dtype: str
    nbytes: int


@dataclass
class Measured:
    parameters: int
    gradients: int
    master: int
    moments: int
    layers: list            # bytes saved by each decoder layer
    outside: int            # bytes saved outside the layers
    saved: list = field(default_factory=list)     # Saved, first seen order

    @property
    def per_layer(self) -> float:
        return sum(self.layers) / len(self.layers)


def measure(job, norm: str = "fused", detail: bool = False) -> Measured:
    """One forward (saved tensors recorded), backward and Adam step of the job's model."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    model = build(job, norm)
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, job.vocab, (job.micro_batch, job.seq), generator=gen)
    targets = torch.randint(0, job.vocab, (job.micro_batch, job.seq), generator=gen)

    # parameters' and buffers' storages (views of them, e.g. a Linear's W.t(), share these)
    excluded = {t.untyped_storage().data_ptr() for t in
                (*model.parameters(), *model.buffers())}
    names = {m: n for n, m in model.named_modules()}
    layer_of = {m: f"layer {i}" for i, m in enumerate(model.layers)}
    stack: list = []        # modules whose forward is running, outermost first

    def pre(mod, _args):
        stack.append(mod)

    def post(mod, _args, _out):
        stack.pop()

    handles = [m.register_forward_pre_hook(pre) for m in model.modules()]
    handles += [m.register_forward_hook(post) for m in model.modules()]

    made_by: dict = {}      # storage -> the op that allocated it (detail only)

    class Producers(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            ins = {a.untyped_storage().data_ptr() for a in
                   torch.utils._pytree.tree_leaves((args, kwargs))
                   if isinstance(a, torch.Tensor)}
            for o in torch.utils._pytree.tree_leaves(out):
                if isinstance(o, torch.Tensor):
                    ptr = o.untyped_storage().data_ptr()
                    if ptr not in ins:          # a new allocation, not a view or in-place
                        made_by[ptr] = func.overloadpacket.__name__
            return out

    seen: dict = {}         # storage -> Saved, each counted once, where first saved

    def pack(t):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr and ptr not in excluded and ptr not in seen:
            where = next((layer_of[m] for m in stack if m in layer_of), "outside")
            module = names.get(stack[-1], "?") if stack else "(loss)"
            seen[ptr] = Saved(where, module or "(model)", made_by.get(ptr, ""),
                              tuple(t.shape), str(t.dtype).replace("torch.", ""),
                              st.nbytes())
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            if detail:
                with Producers():
                    loss = model(tokens, targets)
            else:
                loss = model(tokens, targets)
    finally:
        for h in handles:
            h.remove()
    saved = list(seen.values())
    if detail:      # the producer of a storage is known once the forward is done
        for ptr, s in seen.items():
            s.made_by = made_by.get(ptr, "(input)")     # made before the forward
    layers = [sum(s.nbytes for s in saved if s.where == f"layer {i}")
              for i in range(job.layers)]
    outside = sum(s.nbytes for s in saved if s.where == "outside")

    loss.backward()
    params = list(model.parameters())
    p_bytes = sum(p.nbytes for p in params)
    g_bytes = sum(p.grad.nbytes for p in params)

    if job.master not in ("none", job.dtype):
        # mixed precision: the optimizer steps an fp32 copy, the gradients widened to it
        masters = [p.detach().float().clone() for p in params]
        for m, p in zip(masters, params):
            m.grad = p.grad.float()
        m_bytes = sum(m.nbytes for m in masters)
    else:
        masters, m_bytes = params, 0
    opt = torch.optim.Adam(masters, lr=1e-3)
    opt.step()
    # exp_avg and exp_avg_sq only: Adam's per-parameter 'step' is a 0-dim fp32 tensor
    # (4 B each, a few hundred bytes in all), bookkeeping the planner does not count
    moments = sum(v.nbytes for st in opt.state.values() for k, v in st.items()
                  if k in ("exp_avg", "exp_avg_sq"))
    return Measured(p_bytes, g_bytes, m_bytes, moments, layers, outside, saved)


# ---- the comparison --------------------------------------------------------------------
@dataclass
class Row:
    config: str
    part: str
    planned: int | None
    torch: float | None
    target: float | None        # relative: |torch / planned - 1| <= target; None: not judged
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.planned is None or self.torch is None:
            return None
        if not self.planned:
            return 1.0 if not self.torch else float("inf")
        return self.torch / self.planned

    @property
    def missed(self) -> bool:
        return self.target is not None and self.ratio is not None and \
            abs(self.ratio - 1) > self.target + 1e-12

    def verdict(self) -> str:
        if self.planned is None:
            return "not in the plan"
        if self.target is None:
            return ""
        return "MISSED" if self.missed else "ok"


def plan_parts(job) -> dict:
    return {p.name: p for p in fp.footprint(job)}


def compare(name: str, job, m: Measured) -> list[Row]:
    parts = plan_parts(job)
    rows = []
    for part, got in (("parameters", m.parameters), ("gradients", m.gradients),
                      ("master weights", m.master), ("optimizer moments", m.moments)):
        planned = parts[part].bytes if part in parts else (0 if part == "master weights"
                                                          else None)
        rows.append(Row(name, part, planned, got, STATE_TARGET,
                        "" if part in parts else f"master = {job.dtype}: no copy"))
    per, formula = fp.activation_bytes(job)
    spread = f"layers {min(m.layers)}-{max(m.layers)}" if min(m.layers) != max(m.layers) \
        else f"{len(m.layers)} layers equal"
    rows.append(Row(name, "activations/layer", per, m.per_layer, ACT_TARGET,
                    f"{formula}; {spread}"))
    act = parts.get("activations")
    # Under recompute the plan's part also holds the layer recomputed in backward, which
    # the forward's hooks cannot see: compared without it.
    again = fp.activation_bytes(dataclasses.replace(job, recompute=False))[0] \
        if job.recompute else 0
    rows.append(Row(name, "activations", act.bytes - again if act else None, sum(m.layers),
                    ACT_TARGET if act else None, "the plan's part vs all layers"
                    + (" (less the layer recomputed in backward)" if again else "")))
    logits = parts.get("output activations")
    rows.append(Row(name, "outside layers", logits.bytes if logits else None, m.outside,
                    ACT_TARGET if logits else None,
                    "final norm, lm_head input, loss, token ids" +
                    (f" (plan: {logits.name})" if logits else "")))
    return rows


def measure_stage(job, stage: int, norm: str = "fused") -> tuple[int, int]:
    """Stage `stage` of job.pp run as 1F1B holds it: in_flight forwards of micro-batches
    whose backwards have not run, what autograd saves counted once a storage, parameters
    and buffers left out: (its layers' bytes, the bytes outside them)."""
    import torch
    import torch.nn.functional as F

    model = build(job, norm)
    per = job.layers // job.pp
    mine = list(model.layers)[stage * per:(stage + 1) * per]
    first, last = stage == 0, stage == job.pp - 1
    excluded = {t.untyped_storage().data_ptr() for t in
                (*model.parameters(), *model.buffers())}
    inside: list = []           # the stage's layers whose forward is running

    def enter(mod, _args):
        inside.append(mod)

    def leave(mod, _args, _out):        # returns None: the output stays the layer's
        inside.pop()

    handles = [m.register_forward_pre_hook(enter) for m in mine]
    handles += [m.register_forward_hook(leave) for m in mine]
    seen: dict = {}             # storage -> (in a layer, bytes)

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() and st.data_ptr() not in excluded:
            seen.setdefault(st.data_ptr(), (bool(inside), st.nbytes()))
        return t

    gen = torch.Generator().manual_seed(stage)
    dtype = model.embed.weight.dtype
    b, s = job.micro_batch, job.seq
    cos, sin = model.cos[:s], model.sin[:s]
    kept = []                   # the forwards' outputs: their graphs, and what they saved, alive
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            for _ in range(fp.in_flight(job, stage)):
                if first:
                    x = model.embed(torch.randint(0, job.vocab, (b, s), generator=gen))
                else:           # what the stage before sent
                    x = torch.randn(b, s, job.hidden, generator=gen).to(dtype)
                    x.requires_grad_(True)
                for layer in mine:
                    x = layer(x, cos, sin)
                if last:
                    targets = torch.randint(0, job.vocab, (b, s), generator=gen)
                    x = F.cross_entropy(model.lm_head(model.norm(x)).view(-1, job.vocab),
                                        targets.view(-1))
                kept.append(x)
    finally:
        for h in handles:
            h.remove()
    layers = sum(n for in_layer, n in seen.values() if in_layer)
    return layers, sum(n for in_layer, n in seen.values() if not in_layer)


def compare_stages(name: str, norm: str = "fused") -> list[Row]:
    """Every stage's activations at each pipeline depth against the plan's."""
    rows = []
    for pp in PIPELINES:
        mb = CONFIGS[name].get("micro_batch", BASE["micro_batch"])
        job = make_job(name, layers=STAGE_LAYERS, pp=pp, global_batch=mb * 4)
        for stage in range(pp):
            layers, outside = measure_stage(job, stage, norm)
            parts = {p.name: p.bytes for p in fp.footprint(job, stage)}
            again = fp.activation_bytes(dataclasses.replace(job, recompute=False))[0] \
                if job.recompute else 0
            n = fp.in_flight(job, stage)
            rows.append(Row(name, f"pp {pp} stage {stage} activations",
                            parts["activations"] - again, layers, STAGE_TARGET,
                            f"{job.layers // pp} layers x {n} micro-batches in flight"
                            + (" (less the layer recomputed in backward)" if again else "")))
            if stage == pp - 1:
                rows.append(Row(name, f"pp {pp} stage {stage} output layer",
                                parts["output activations"], outside, OUTPUT_TARGET,
                                "final norm, lm_head input, loss; token ids, targets"))
    return rows


def print_table(rows: list[Row]) -> None:
    head = ("config", "part", "planned B", "torch B", "ratio", "target", "", "note")
    cells = [head]
    for r in rows:
        cells.append((r.config, r.part, "-" if r.planned is None else f"{r.planned:,}",
                      "-" if r.torch is None else f"{r.torch:,.0f}",
                      "-" if r.ratio is None else f"{r.ratio:.3f}",
                      "-" if r.target is None else f"±{r.target:.0%}",
                      r.verdict(), r.note))
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    for c in cells:
        print("  ".join(x.ljust(w) for x, w in zip(c, widths)).rstrip())


def print_detail(name: str, job, m: Measured) -> None:
    """The saved storages of layer 0 and outside the layers, in the order saved."""
    sbh = job.seq * job.micro_batch * job.hidden
    print(f"\n{name}: saved tensors (s b h = {sbh:,}; bytes / (s b h) in the last column)")
    for where in ("layer 0", "outside"):
        rows = [s for s in m.saved if s.where == where]
        total = sum(s.nbytes for s in rows)
        print(f"  {where}: {total:,} B = {total / sbh:.2f} s b h")
        cells = [("module", "made by", "shape", "dtype", "bytes", "/sbh")]
        cells += [(s.module, s.made_by, "x".join(map(str, s.shape)) or "()", s.dtype,
                   f"{s.nbytes:,}", f"{s.nbytes / sbh:.3f}") for s in rows]
        widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
        for c in cells:
            print("    " + "  ".join(x.ljust(w) for x, w in zip(c, widths)).rstrip())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="*", metavar="CONFIG",
                    help=f"some of: {', '.join(CONFIGS)} (default: {' '.join(DEFAULT_CONFIGS)})")
    ap.add_argument("--json", metavar="PATH", help="write the rows to PATH")
    ap.add_argument("--detail", action="store_true",
                    help="print the first config's saved tensors, one layer and outside")
    ap.add_argument("--norm", choices=("torch", "fused"), default="fused",
                    help="fused (the plan's formula): saves the input and reciprocal RMS "
                         "only, as GPU training's fused kernels do; torch: nn.RMSNorm (on "
                         "the CPU decomposed, two fp32 copies of the input kept)")
    args = ap.parse_args(argv)
    unknown = set(args.configs) - set(CONFIGS)
    if unknown:
        ap.error(f"no config {', '.join(sorted(unknown))} ({', '.join(CONFIGS)})")
    try:
        import torch
    except ImportError:
        print(NOT_INSTALLED)
        return 0
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    chosen = args.configs or list(DEFAULT_CONFIGS)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), norm={args.norm}")
    rows = []
    try:
        for i, name in enumerate(chosen):
            job = make_job(name)
            print(f"{name}: layers={job.layers} hidden={job.hidden} heads={job.heads} "
                  f"kv_heads={job.kv_heads} head_dim={job.head_dim} ffn={job.ffn} "
                  f"vocab={job.vocab} seq={job.seq} micro_batch={job.micro_batch} "
                  f"dtype={job.dtype} recompute={job.recompute}; {fp.params(job):,} params")
            m = measure(job, args.norm, detail=args.detail and i == 0)
            rows += compare(name, job, m)
            rows += compare_stages(name, args.norm)
            if args.detail and i == 0:
                print_detail(name, job, m)
    except Exception:       # no verdict: not exit 1, which says a target was missed
        traceback.print_exc()
        return 2
    print()
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{**asdict(r), "ratio": r.ratio, "verdict": r.verdict()} for r in rows],
                      f, indent=1)
    judged = [r for r in rows if r.target is not None and r.ratio is not None]
    missed = [r for r in judged if r.missed]
    print(f"\n{len(judged)} judged rows, {len(missed)} missed")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
