"""Paged KV-cache decode steps, prefill, swaps and prefix restores."""
from __future__ import annotations

from .draw import bars, lines


def kvcache(frame, runs):
    """Decode-step latency against sequence length, a line per placement; the copies
    (swaps, restores) and prefill as bars of bandwidth."""
    op = frame["params"].map(lambda p: p.get("op", "decode"))
    yield lines(frame[op == "decode"], "seq_len", "step_p50", logx=True, logy=True,
                xlabel="tokens per sequence before the step", key="kvcache-decode-step",
                family="kvcache", exclude=("op",),
                title="KV-cache decode step against sequence length",
                measured="Time of one decode step (µs, the median step of a repetition, "
                         "timed in C): a token appended to each sequence of the batch, then "
                         "every block of each read, all layers, K and V")
    yield bars(frame[op != "decode"], ("op", "copy"), "bandwidth", key="kvcache-copies",
               family="kvcache", title="KV-cache prefill, swaps and prefix restores",
               measured="Bandwidth (GB/s: bytes copied, each once; for prefill, bytes "
                        "written) of prompts written, whole sequences swapped between cache "
                        "and offload, and 256-token chunks restored, one memcpy per block or "
                        "runs of blocks batched")


PLOTTERS = {"kvcache": kvcache}
