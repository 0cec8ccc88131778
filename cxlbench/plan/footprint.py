"""A job's bytes per device, part by part, each with the formula it comes from: model
states (parameters, gradients, master weights, optimizer moments) as DeepSpeed's ZeRO
paper counts them, activations as Korthikanti et al. (2022) do, the KV-cache, embedding
tables and the checkpoint's staging copy. Where each part lives (GPU or host) follows the
offload asked; which host node or tier it then takes is the placement's job."""
from __future__ import annotations

from dataclasses import dataclass

from .job import DTYPE_BYTES, Job

MOMENTS = {"adam": 2, "adamw": 2, "sgd": 1, "adagrad": 1}     # fp32 states a parameter


@dataclass(frozen=True)
class Part:
    name: str
    bytes: int          # on the most loaded device (pipeline stage 0)
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


def stage_params(job: Job) -> int:
    """Parameters a device holds before ZeRO: its stage's layers (stage 0 also holds the
    input embedding; the output one, on the last stage, is as large), split by TP."""
    lm = job.layers // job.pp * layer_params(job) + job.vocab * job.hidden
    if job.pp == 1:
        lm += job.vocab * job.hidden + job.hidden
    return -(-lm // job.tp) if job.layers else 0


def activation_bytes(job: Job) -> tuple[int, str]:
    """One micro-batch's activations in one layer, 16-bit, with the formula used."""
    s, b, h, a, t = job.seq, job.micro_batch, job.hidden, job.heads, job.tp
    if job.recompute:
        return 2 * s * b * h, "2 s b h (full recompute: the layer's input only)"
    scores = 0 if job.flash else 5 * a * s * s * b // t
    if t == 1:
        return 34 * s * b * h + scores, ("s b h (34 + 5 a s / h)" if not job.flash else
                                         "34 s b h (flash: no score matrix)")
    return s * b * h * 10 + 24 * s * b * h // t + scores, \
        "s b h (10 + 24/t" + (" + 5 a s / (h t))" if not job.flash else ") (flash)")


def footprint(job: Job) -> list[Part]:
    """The parts on the most loaded device (stage 0 of the pipeline, one DP rank)."""
    out = []
    n, w = job.dp, DTYPE_BYTES[job.dtype]
    p = stage_params(job)
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
        if job.master != "none" and job.master != job.dtype:
            m = DTYPE_BYTES[job.master]
            out.append(Part("master weights", p * m // shard, "host" if optim_host else "gpu",
                            f"{m} B x stage parameters / tp{note}"))
        k = MOMENTS[job.optimizer]
        out.append(Part("optimizer moments", p * 4 * k // shard, "host" if optim_host else "gpu",
                        f"{4 * k} B x stage parameters / tp{note} ({job.optimizer}: {k} fp32 "
                        f"state{'s' if k > 1 else ''})"))
    if job.train and job.layers:
        per, formula = activation_bytes(job)
        in_flight = min(job.pp, job.micro_batches)      # 1F1B: stage 0 holds pp of them
        out.append(Part("activations", per * (job.layers // job.pp) * in_flight, "gpu",
                        f"{formula} x {job.layers // job.pp} layers x {in_flight} micro-"
                        f"batch{'es' if in_flight > 1 else ''} in flight (1F1B, stage 0)"))
    if job.context and job.layers:
        kv_split = min(job.tp, job.kv_heads)
        per_token = 2 * (job.layers // job.pp) * job.kv_heads * job.head_dim * w // kv_split
        tokens = round(job.context * (job.micro_batch - (job.micro_batch - 1) *
                                      job.prefix_shared))
        out.append(Part("KV-cache", per_token * -(-tokens // job.kv_block) * job.kv_block,
                        "gpu", f"2 x {job.layers // job.pp} layers x {job.kv_heads} KV heads x "
                        f"{job.head_dim} x {w} B / {kv_split} (tp) a token, x {tokens} tokens "
                        f"in {job.kv_block}-token blocks"))
    if job.tables:
        tb = DTYPE_BYTES[job.table_dtype]
        out.append(Part("embedding tables", sum(job.tables) * job.table_dim * tb, "host",
                        f"{len(job.tables)} tables, {sum(job.tables)} rows x {job.table_dim} x "
                        f"{tb} B"))
    if job.train and p:
        states = sum(x.bytes for x in out if x.name in ("parameters", "master weights",
                                                          "optimizer moments"))
        out.append(Part("checkpoint staging", states, "host",
                        "a copy of this device's parameters, master weights and moments"))
    return out


def model_states(job: Job) -> int:
    """Parameters, gradients, master weights and moments on one device."""
    return sum(x.bytes for x in footprint(job) if x.name in (
        "parameters", "gradients", "master weights", "optimizer moments"))
