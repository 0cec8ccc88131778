"""A job's bytes per device, part by part, each with the formula it comes from: model
states (parameters, gradients, master weights, optimizer moments) as DeepSpeed's ZeRO
paper counts them, activations as Korthikanti et al. (2022) do, the KV-cache, embedding
tables and the checkpoint's staging copy. Where each part lives (GPU or host) follows the
offload asked; which host node or tier it then takes is the placement's job."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import UserError
from .job import DTYPE_BYTES, MAX_BYTES, MAX_PARAMS, Job

MOMENTS = {"adam": 2, "adamw": 2, "sgd": 1, "adagrad": 1}     # fp32 states a parameter
STATES = ("parameters", "master weights", "optimizer moments")  # what a checkpoint saves


@dataclass(frozen=True)
class Part:
    name: str
    bytes: int          # on one device (the pipeline stage planned, of one DP rank)
    where: str          # "gpu" or "host"
    formula: str


def layer_params(job: Job) -> int:
    """One transformer layer: attention's q, k, v and o, a gated (SwiGLU) MLP per expert
    and the MoE router, two norms."""
    attn = job.hidden * job.heads * job.head_dim * 2 + job.hidden * job.kv_heads * job.head_dim * 2
    mlp = 3 * job.hidden * job.ffn * job.experts + (job.hidden * job.experts
                                                     if job.experts > 1 else 0)
    return attn + mlp + 2 * job.hidden


def params(job: Job) -> int:
    """The whole model: layers, untied input and output embeddings, the final norm, and any
    embedding tables."""
    lm = job.layers * layer_params(job) + (2 * job.vocab * job.hidden + job.hidden
                                           if job.layers else 0)
    return lm + sum(job.tables) * job.table_dim


def stage_params(job: Job, stage: int = 0) -> int:
    """Parameters a device of pipeline stage `stage` holds before ZeRO: its layers (equal
    layers a stage, as the frameworks split them by default), the input embedding on the
    first stage, the output one and the final norm on the last, split by TP."""
    lm = stage_layers(job, stage) * layer_params(job)
    if stage == 0:
        lm += job.vocab * job.hidden
    if stage == job.pp - 1:
        lm += job.vocab * job.hidden + job.hidden
    return -(-lm // job.tp) if job.layers else 0


def stage_layers(job: Job, stage: int) -> int:
    """Layers stage `stage` holds: as --layers-per-stage splits them, else equally."""
    return job.layers_per_stage[stage] if job.layers_per_stage else job.layers // job.pp


def in_flight(job: Job, stage: int) -> int:
    """Micro-batches whose activations stage `stage` holds at its peak. 1F1B: it runs
    pp - stage forwards before its first backward (the first stage the most, the last
    one); GPipe: every micro-batch's forward before any backward. Never more than the
    step has. (Interleaved: held_layers counts chunks.)"""
    m = job.micro_batches
    return m if job.schedule == "gpipe" else min(job.pp - stage, m)


def held_layers(job: Job, stage: int) -> tuple[int, str]:
    """Layers' worth of one micro-batch's activations stage `stage` holds at its peak,
    and how. Interleaved 1F1B (Megatron-LM, v chunks of L / (pp v) layers a device):
    2 (pp - stage - 1) + (v - 1) pp warm-up chunk forwards and one more, at most m v:
    pp + (pp - 1) / v micro-batches' layers on the first stage (Korthikanti et al. 2022)."""
    if job.schedule == "interleaved":
        v = job.chunks
        chunk = job.layers // (job.pp * v)
        held = min(2 * (job.pp - stage - 1) + (v - 1) * job.pp + 1, job.micro_batches * v)
        return chunk * held, (f"{chunk} layers a chunk x {held} chunk forwards in flight "
                              f"(interleaved 1F1B, {v} chunks, stage {stage})")
    n, layers = in_flight(job, stage), stage_layers(job, stage)
    return layers * n, (f"{layers} layers x {n} micro-batch{'es' if n > 1 else ''} in "
                        f"flight ({'GPipe' if job.schedule == 'gpipe' else '1F1B'}, stage "
                        f"{stage})")


def activation_bytes(job: Job) -> tuple[int, str]:
    """One micro-batch's activations in one layer, what backward keeps, with the formula:
    a Llama layer (fused RMSNorm, SwiGLU, GQA) counted tensor by tensor, as
    peers/plan_torch.py measures it in torch. Each norm keeps its input and fp32 1/rms
    (2 x (w h + 4)); attention the norm's output w h, q w a d, k and v 2 w kv d, the
    output w a d and flash's fp32 log-sum-exp 4 a; the MLP the norm's output w h and
    gate, up, silu and their product, 4 w ffn a token's active expert. Tensor parallel
    (no sequence parallelism): the norms' tensors whole on each rank, the rest / t, as
    Korthikanti et al. (2022) split them. Without flash the softmax's output w a s is
    kept a token as well; with full recomputation only the layer's input, w h."""
    s, b, h, t, w = job.seq, job.micro_batch, job.hidden, job.tp, DTYPE_BYTES[job.dtype]
    a, kv, d = job.heads, job.kv_heads, job.head_dim
    if job.recompute:
        return w * s * b * h, f"{w} s b h (full recompute: the layer's input only)"
    whole = 4 * w * h + 8
    # k and v split as the KV heads do: past kv_heads ranks, each holds a whole head
    split = w * (2 * a * d + 4 * job.ffn * job.top_k) + 4 * a \
        + (0 if job.flash else w * a * s)
    per_token = whole + split // t + 2 * w * kv * d // min(t, kv)
    return s * b * per_token, (
        f"s b ({4 * w} h + 8 + ({w} (2 a d + 4 ffn"
        + (" top_k" if job.top_k > 1 else "") + ") + 4 a" + ("" if job.flash else f" + {w} a s")
        + (f") / {t}" if t > 1 else ")") + f" + {2 * w} kv d"
        + (f" / {min(t, kv)}" if t > 1 else "") + f") = {per_token / h:.1f} s b h"
        + (" (flash)" if job.flash else " (scores kept)"))


def output_bytes(job: Job) -> tuple[int, str]:
    """One micro-batch's activations of the last stage's output layer: the final norm's
    input and 1/rms, the output projection's input, and the loss's log-softmax over the
    vocabulary (split by tp: a vocabulary-parallel loss)."""
    s, b, h, w = job.seq, job.micro_batch, job.hidden, DTYPE_BYTES[job.dtype]
    return s * b * (2 * w * h + 4 + w * job.vocab // job.tp), \
        f"s b ({2 * w} h + 4 + {w} vocab / tp): final norm, projection input, log-softmax"


def kv_token_bytes(job: Job, stage: int = 0) -> int:
    """A token's K and V in every layer of stage `stage`, on one rank: the KV heads split
    by tp (past kv_heads ranks, each holds a whole head)."""
    return 2 * stage_layers(job, stage) * job.kv_heads * job.head_dim * \
        DTYPE_BYTES[job.dtype] // min(job.tp, job.kv_heads)


def footprint(job: Job, stage: int = 0) -> list[Part]:
    """The parts on a device of pipeline stage `stage`, of one DP rank."""
    out = []
    n, w = job.dp, DTYPE_BYTES[job.dtype]
    p = stage_params(job, stage)
    optim_host = job.offload != "none"
    if p:
        shard = n if job.zero >= 3 else 1
        out.append(Part("parameters", p * w // shard,
                        "host" if job.offload == "optimizer+params" else "gpu",
                        f"{w} B x stage parameters / tp" + (" / dp (ZeRO-3)" if shard > 1 else "")))
    if job.train and p:
        shard = n if job.zero >= 2 else 1
        out.append(Part("gradients", p * w // shard, "gpu",
                        f"{w} B x stage parameters / tp" + (" / dp (ZeRO-2+)" if shard > 1
                                                           else "")))
        shard, note = (n, " / dp (ZeRO-1+)") if job.zero >= 1 else (1, "")
        if optim_host or (job.master != "none" and job.master != job.dtype):
            # offloaded, the CPU step updates a copy of its own (fp32 where none is named)
            m = DTYPE_BYTES[job.master] if job.master != "none" else 4
            out.append(Part("master weights", p * m // shard, "host" if optim_host else "gpu",
                            f"{m} B x stage parameters / tp{note}"
                            + (" (the CPU step's copy)" if job.master in ("none", job.dtype)
                               else "")))
        k = MOMENTS[job.optimizer]
        out.append(Part("optimizer moments", p * 4 * k // shard, "host" if optim_host else "gpu",
                        f"{4 * k} B x stage parameters / tp{note} ({job.optimizer}: {k} fp32 "
                        f"state{'s' if k > 1 else ''})"))
        if optim_host:
            # DeepSpeed's CPU offload keeps the rank's gradient partition on the host in
            # fp32, the CPU optimizer's input (stage_1_and_2.py: single_grad_partition).
            shard = n if job.zero >= 1 else 1
            out.append(Part("host gradients", p * 4 // shard, "host",
                            f"4 B x stage parameters / tp{note} (fp32, the CPU step's input)"))
    if job.train and job.layers:
        per, formula = activation_bytes(job)
        layers, how = held_layers(job, stage)
        held = per * layers
        if job.recompute:       # and, in backward, the one layer being recomputed, whole
            held += activation_bytes(dataclasses.replace(job, recompute=False))[0]
            formula += " + one layer's whole set, recomputed in backward"
        out.append(Part("activations", held, "gpu", f"{formula}; x {how}"))
        if stage == job.pp - 1:         # the output layer is the last stage's
            per, formula = output_bytes(job)
            # interleaved: the last chunk's forward is followed by its backward at once
            held_n = 1 if job.schedule == "interleaved" else in_flight(job, stage)
            out.append(Part("output activations", per * held_n, "gpu", formula + (
                f"; x {held_n} micro-batches in flight" if held_n > 1 else "")))
    if job.context and job.layers:
        tokens = round(job.context * (job.micro_batch - (job.micro_batch - 1) *
                                      job.prefix_shared))
        out.append(Part("KV-cache", kv_token_bytes(job, stage) * -(-tokens // job.kv_block) *
                        job.kv_block, "host" if job.offload == "kv" else "gpu",
                        f"2 x {stage_layers(job, stage)} layers x {job.kv_heads} KV heads x "
                        f"{job.head_dim} x {w} B / {min(job.tp, job.kv_heads)} (tp) a token, "
                        f"x {tokens} tokens in {job.kv_block}-token blocks"))
    if job.tables:
        tb = DTYPE_BYTES[job.table_dtype]
        out.append(Part("embedding tables", sum(job.tables) * job.table_dim * tb, "host",
                        f"{len(job.tables)} tables, {sum(job.tables)} rows x {job.table_dim} x "
                        f"{tb} B"))
    if job.train and p:
        # A sharded checkpoint (DeepSpeed's, torch DCP's): each rank writes its share of
        # the parameters, and its own master weights and moments.
        sharded = {"parameters": job.zero >= 3, "master weights": job.zero >= 1,
                   "optimizer moments": job.zero >= 1}
        states = sum(x.bytes // (1 if sharded[x.name] else n) for x in out
                     if x.name in STATES)
        out.append(Part("checkpoint staging", states, "host",
                        "this rank's 1/dp of the parameters, master weights and moments (a "
                        "sharded checkpoint)"))
    return out


def gpu_bytes(parts: list[Part]) -> int:
    return sum(x.bytes for x in parts if x.where == "gpu")


def heaviest_stage(job: Job) -> int:
    """The pipeline stage with the most GPU bytes, which decides whether the job fits. Of
    equal splits, the first (the most micro-batches in flight, the input embedding) or the
    last (the output layer's weights and activations): a stage between holds no more than
    the first. A split of one's own: every stage weighed."""
    candidates = range(job.pp) if job.layers_per_stage else sorted({0, job.pp - 1})
    return max(candidates, key=lambda s: (gpu_bytes(footprint(job, s)), -s))


def shown_stages(job: Job, also: int = 0) -> list[int]:
    """The stages a per-stage table shows: every one up to 8, else the first three, the
    middle, the last three and `also` (the one that decides the fit)."""
    pp = job.pp
    if pp <= 8:
        return list(range(pp))
    return sorted({0, 1, 2, pp // 2, pp - 3, pp - 2, pp - 1, also})


def model_states(job: Job) -> int:
    """Parameters, gradients, master weights and moments on one device."""
    return sum(x.bytes for x in footprint(job) if x.name in (
        "parameters", "gradients", "master weights", "optimizer moments"))


def within_bounds(job: Job, stage: int = 0) -> list[Part]:
    """The parts of stage `stage`, where the job's parameters and each part stay within
    what any machine could hold; UserError naming the first that does not."""
    n = params(job)
    if n > MAX_PARAMS:
        raise UserError(f"plan: the model has {n / 1e12:.3g} T parameters, past the "
                        f"{MAX_PARAMS / 1e12:g} T a plan takes: check layers, hidden, ffn, "
                        "vocab, experts, tables and table_dim")
    parts = footprint(job, stage)
    big = [p for p in parts if p.bytes > MAX_BYTES]
    if big:
        raise UserError(f"plan: {big[0].name}: {big[0].bytes:.3g} bytes a device, past the "
                        f"{MAX_BYTES >> 60} EiB a plan takes (its formula: {big[0].formula})")
    return parts
