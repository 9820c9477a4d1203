"""Attention-GD's cost terms: the work of its mask descent on one decoder layer, in FLOPs
from the model's widths and the calibration size (the duration estimate asks for it through
``AttentionGD.layer_work``)."""

from __future__ import annotations

from typing import Any

from core.methods.attention_gd.options import CHECK_HESSIAN_AT, AttentionGDOptions


def descent_flops(opts: AttentionGDOptions, geo: Any, nsamples: int, seqlen: int) -> float:
    """The descent on one layer's q/k masks, forward + backward ≈ 3 forwards of the attention
    scores of max_seq × max_len tokens: the steps, the curvature probes and the swap search's
    evaluations (``refine="swap"``), plus, for the
    groups the checks judge (every one, one per layer, none), a long run, 2·check_points
    off-path points and the Hessian's top eigenvalue at ``CHECK_HESSIAN_AT`` iterates."""
    n_seq, L = min(nsamples, opts.max_seq), min(seqlen, opts.max_len)
    T, d = n_seq * L, geo.hidden_size
    proj = 2.0 * T * d * (geo.n_heads + geo.n_kv_heads) * geo.head_dim
    scores = 2.0 * n_seq * L * L * geo.n_heads * geo.head_dim + 5.0 * n_seq * L * L * geo.n_heads
    passes = opts.steps + opts.power_iters + (opts.swap_evals if opts.refine == "swap" else 0)
    judged = {"full": 1.0, "sample": 1.0 / geo.n_kv_heads}.get(opts.checks, 0.0)
    check = max(opts.steps, 10) + 2 * opts.check_points + CHECK_HESSIAN_AT * opts.power_iters
    return 3.0 * (passes + judged * check) * (proj + scores)
