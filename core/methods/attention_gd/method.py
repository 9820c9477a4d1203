"""The registered ``attention-gd`` method: Paper B on every layer, with its own audit.

Per layer: joint Q/K mask GD per GQA group (optimiser), binarisation at the target sparsity,
W ← M_bin∘W; then what the run records so no one mistakes a baseline's mask for a GD result:
the fraction of the GD keep mask shared with the magnitude and Wanda masks at the same
sparsity and scope, ‖M_T − M₀‖/‖M₀‖, the fraction of entries whose keep/prune decision differs
from binarising M₀ ("mask_flip"), whether the optimiser reached its tolerance, and the
assumption checks (diagnostics) per group. With ``refine="swap"`` the binarised masks are then
refined by the swap search (swaps.py) on the same objective before they are written.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from core.errors import ConfigError, ModelLoadError
from core.evaluation.attention_ops import rope_tables
from core.methods import get_method, register
from core.methods.attention_gd.audit import (
    TABLE_AGREEMENT,
    UNCHECKED,
    agreement_rows,
    record_tables,
    run_summary,
)
from core.methods.attention_gd.bound import lipschitz_upper_bound, spectral_norms
from core.methods.attention_gd.cost_terms import descent_flops
from core.methods.attention_gd.group_view import judge_group
from core.methods.attention_gd.headroom import standing
from core.methods.attention_gd.objective import HeadExtras, to_heads, to_linear
from core.methods.attention_gd.optimiser import GroupResult, gd_prune_group, initial_mask
from core.methods.attention_gd.options import BINARIZE_RULES, DTYPES, AttentionGDOptions
from core.methods.attention_gd.relax import Budget
from core.methods.attention_gd.saliency import obd_masks
from core.methods.attention_gd.swaps import swap_search
from core.methods.base import LayerContext, LinearReport, Method
from core.methods.linear import relative_reconstruction_error
from core.methods.masks import check_sparsity, scope_dim, topk_prune_mask
from core.methods.work import LayerWork, WorkShape

log = logging.getLogger(__name__)


def mask_scores(M: Tensor, W: Tensor, rule: str) -> Tensor:
    """Binarisation scores, higher = keep: M itself ("mask") or |M∘W| ("mask_times_weight")."""
    if rule == "mask":
        return M
    if rule == "mask_times_weight":
        return (M * W).abs()
    raise ConfigError(f"binarize must be one of {BINARIZE_RULES}, got {rule!r}")


def group_rows(group: int, r: int, head_dim: int) -> tuple[slice, slice]:
    """The q_proj rows (its r query heads) and k_proj rows (its KV head) of GQA group g."""
    return (
        slice(group * r * head_dim, (group + 1) * r * head_dim),
        slice(group * head_dim, (group + 1) * head_dim),
    )


def binarize(scores: Tensor, sparsity: float, scope: str) -> Tensor:
    """Bool keep mask (out, in) with exactly ⌊sparsity·n⌋ False per row ("row") or per matrix
    ("matrix"); among equal scores the lower index is pruned first (stable sort,
    core.methods.masks)."""
    return ~topk_prune_mask(scores, check_sparsity(sparsity), scope_dim(scope))


def head_extras(ctx: LayerContext, r: int, head_dim: int, group: int) -> HeadExtras:
    """Biases and q/k norms of GQA group ``group`` (objective.HeadExtras); ConfigError for a
    q/k norm that is not a per-head RMSNorm with ``weight`` and an epsilon."""
    lin_q, lin_k = ctx.linears["q"], ctx.linears["k"]
    bq = None if lin_q.bias is None else lin_q.bias.detach()[group * r * head_dim :]
    bk = None if lin_k.bias is None else lin_k.bias.detach()[group * head_dim :]
    try:
        q_gain, k_gain, eps = ctx.adapter.qk_gains(ctx.layer)
    except ModelLoadError as exc:
        raise ConfigError(
            f"attention-gd: {exc}; the attention objective does not cover it"
        ) from exc
    for gain in (q_gain, k_gain):
        if gain is not None and gain.numel() != head_dim:
            raise ConfigError(
                f"attention-gd: a q/k norm of width {gain.numel()} is not per head "
                f"({head_dim}); the attention objective does not cover it"
            )
    gains = [None if g is None else g.float() for g in (q_gain, k_gain)]
    return HeadExtras(
        bq=None if bq is None else bq[: r * head_dim].float().view(r, head_dim),
        bk=None if bk is None else bk[:head_dim].float(),
        q_gain=gains[0],
        k_gain=gains[1],
        norm_eps=float(eps),
    )


@register
class AttentionGD(Method):
    """Paper B on every layer: joint Q/K mask GD per GQA group, then binarise and write back.

    Needs the q_proj inputs (``ctx.inputs["q"]``) and, with ``rope``, the layer's RoPE tables.
    Tables: "gd_trajectory" (per layer, group, block, step), "gd_groups" (per group: steps,
    ‖M_T − M₀‖, assumption checks), "gd_heads" (per query head: attention error),
    "gd_agreement" (per layer and q/k: overlap with the magnitude and Wanda keep masks);
    arrays ``mask.layer{i}.q`` / ``.k``: bool keep masks in nn.Linear layout.
    """

    name = "attention-gd"
    updates_weights = False  # W <- keep * W: the mask alone rebuilds the model
    options_cls = AttentionGDOptions
    options: AttentionGDOptions
    needs_gram = True  # rel_error of q/k, and Wanda/SparseGPT for ``others``
    needs_inputs = frozenset({"q"})
    supports_patterns = ("unstructured",)
    calib_passes = 3.0  # the runner keeps q_proj's raw inputs: one more pass
    cost_overhead = 1.3  # the share of its phase the counted descent misses, measured

    def layer_work(self, shape: WorkShape) -> LayerWork:
        """The q/k mask descent (``descent_flops``); V, O and the MLP by ``others``, whose
        own terms count them (every linear of the family but q and k)."""
        opts = self.options
        gd = descent_flops(opts, shape.geo, shape.nsamples, shape.seqlen)
        if opts.others == "none":
            return LayerWork(gd)
        cls = get_method(opts.others)
        rest = tuple(r for r in shape.linears if r not in ("q", "k"))
        work = cls(cls.options_cls()).layer_work(replace(shape, roles=rest))
        return replace(work, products=gd + work.products)

    def refusal(self, geometry: Any, calib_seqlen: int | None = None) -> str | None:
        """The objective is softmax(causal, scale·q̂k̂ᵀ) with q̂, k̂ after the biases, the
        per-head RMSNorms and full RoPE (objective.py): a family whose attention differs from
        that on the calibration sequences is refused when the run is planned."""
        t = geometry.traits
        if t.positions == "rope_partial":
            return "its RoPE rotates only part of each head; the objective rotates whole heads"
        if not math.isclose(t.attn_scale, geometry.head_dim**-0.5, rel_tol=1e-9):
            return (
                f"its attention scales q·kᵀ by {t.attn_scale:.4g} (query_pre_attn_scalar), "
                f"the objective by 1/√head_dim = {geometry.head_dim**-0.5:.4g}"
            )
        length = min(calib_seqlen or 0, self.options.max_len)
        if t.sliding_window and length > t.sliding_window:
            return (
                f"its sliding-window layers attend to the last {t.sliding_window} tokens and "
                f"the objective would use {length}; calibrate with seqlen (or max_len) <= "
                f"{t.sliding_window}"
            )
        return None

    @classmethod
    def check_plan(cls, roles: tuple[str, ...], pattern: str) -> None:
        """W_Q and W_K are pruned jointly (one mask GD per GQA group)."""
        if {"q", "k"} & set(roles) and not {"q", "k"} <= set(roles):
            raise ConfigError("attention-gd prunes q_proj and k_proj jointly: select both")

    @torch.no_grad()
    def prune_layer(self, ctx: LayerContext) -> list[LinearReport]:
        if ctx.pattern != "unstructured":
            raise ConfigError(f"attention-gd prunes unstructured only, got pattern {ctx.pattern!r}")
        reports = self._prune_qk(ctx) if {"q", "k"} & ctx.linears.keys() else []
        if self.options.others != "none":
            reports += self._prune_others(ctx)
        return reports

    def _prune_qk(self, ctx: LayerContext) -> list[LinearReport]:
        opts = self.options
        if not {"q", "k"} <= ctx.linears.keys():
            raise ConfigError("attention-gd prunes q_proj and k_proj jointly: select both")
        start = time.perf_counter()
        n_kv, head_dim = ctx.adapter.n_kv_heads, ctx.adapter.head_dim
        r = ctx.adapter.n_heads // n_kv
        extras = [head_extras(ctx, r, head_dim, g) for g in range(n_kv)]  # refuse before work
        lin_q, lin_k = ctx.linears["q"], ctx.linears["k"]
        dtype, device = DTYPES[opts.dtype], lin_q.weight.device
        sparsity = {role: check_sparsity(ctx.sparsity.get(role, 0.0)) for role in ("q", "k")}
        X = ctx.inputs["q"][: opts.max_seq, : opts.max_len].to(
            device=device, dtype=dtype
        )  # (N, L, d)
        rope = None
        if opts.rope and ctx.position_embeddings is not None:
            rope = rope_tables(ctx.position_embeddings, X.shape[1], dtype, device)
        elif opts.rope:
            log.warning("layer %d: the model gave no RoPE tables; GD runs without", ctx.index)
        W = {
            "q": lin_q.weight.detach().to(dtype, copy=True),
            "k": lin_k.weight.detach().to(dtype, copy=True),
        }
        stats = ctx.stats.get("q")
        col_sq = stats.col_sq_norms if stats is not None else ctx.inputs["q"].square().sum((0, 1))
        gen = torch.Generator().manual_seed(opts.seed + ctx.index)
        init = "ones" if opts.init == "obd_mask" else opts.init
        M = {
            role: initial_mask(W[role], init, col_sq, gen, sparsity[role], opts.scope)
            for role in ("q", "k")
        }  # "obd_mask": ones here, each group's saliency mask below
        x_norms = spectral_norms(X) if opts.checks != "none" else None
        if opts.init == "obd_mask":  # each group's own saliency mask
            for g in range(n_kv):
                qs, ks = group_rows(g, r, head_dim)
                M["q"][qs], M["k"][ks] = obd_masks(
                    X, W["q"][qs], W["k"][ks], opts, rope, extras[g], sparsity
                )
        M0 = {role: M[role].clone() for role in ("q", "k")}  # GD overwrites M in place
        start_keep = {
            role: binarize(mask_scores(m0, W[role], opts.binarize), sparsity[role], opts.scope)
            for role, m0 in M0.items()
        }
        groups: list[GroupResult] = []
        for g in range(n_kv):
            qs, ks = group_rows(g, r, head_dim)
            budget = Budget(start_keep["q"][qs].sum(-1), start_keep["k"][ks].sum(-1))
            res = gd_prune_group(
                X,
                to_heads(W["q"][qs], head_dim),
                W["k"][ks].T,
                opts,
                rope,
                to_heads(M["q"][qs], head_dim),
                M["k"][ks].T,
                extras[g],
                budget if opts.relax != "free" else None,
            )
            M["q"][qs], M["k"][ks] = to_linear(res.Mq), res.Mk.T
            groups.append(res)
        keep = {
            role: binarize(mask_scores(M[role], W[role], opts.binarize), sparsity[role], opts.scope)
            for role in ("q", "k")
        }
        swaps = self._refine(groups, keep, r, head_dim) if opts.refine == "swap" else 0
        checks = [
            self._check(res, extras[g], x_norms)
            if self._judged(ctx.index, g, n_kv)
            else dict(UNCHECKED)
            for g, res in enumerate(groups)
        ]
        agree = agreement_rows(ctx, W, keep, sparsity, col_sq, opts.scope, start_keep)
        errors = record_tables(ctx, groups, checks, keep, r, head_dim)
        ctx.add_rows(TABLE_AGREEMENT, agree)
        for role in ("q", "k"):
            ctx.arrays[f"mask.layer{ctx.index}.{role}"] = keep[role].cpu()
        delta = math.sqrt(sum(res.mask_delta**2 for res in groups) / len(groups))
        seconds = (time.perf_counter() - start) / 2  # one joint optimisation, split over q, k
        reports = []
        for row, (role, lin) in zip(agree, (("q", lin_q), ("k", lin_k)), strict=True):
            extra = {
                "attn_error": errors,
                "mask_delta": delta,
                "mask_flip": row["mask_flip"],
                "gd_converged": sum(res.converged for res in groups) / len(groups),
                "agree_magnitude": row["agreement_magnitude"],
                "agree_wanda": row["agreement_wanda"],
                "gd_steps": max(int(res.trajectory[-1]["step"]) for res in groups),
                "gd_evaluations": sum(res.evaluations for res in groups),
                "swaps": swaps,
            }
            reports.append(
                _write_masked(ctx, role, lin, keep[role], sparsity[role], seconds, extra)
            )
        return reports

    def _refine(self, groups: list[GroupResult], keep, r: int, head_dim: int) -> int:
        """``refine="swap"``: swap_search on each group's binarised objective from its keep
        masks (``keep`` updated in place); the accepted swaps in all."""
        total = 0
        for g, res in enumerate(groups):
            qs, ks = group_rows(g, r, head_dim)
            sw = swap_search(
                res.problem,
                to_heads(keep["q"][qs], head_dim),
                keep["k"][ks].T,
                self.options.swap_evals,
            )
            keep["q"][qs], keep["k"][ks] = to_linear(sw.keep_q), sw.keep_k.T
            total += sw.swaps
        return total

    def _judged(self, layer: int, group: int, n_groups: int) -> bool:
        """Whether the checks judge this group (options.checks: all, one per layer, none;
        none for a budget relaxation: the checks judge the free objective's descent)."""
        if self.options.relax != "free":
            return False
        if self.options.checks == "sample":
            return group == layer % n_groups
        return self.options.checks == "full"

    def _check(
        self, res: GroupResult, extras: HeadExtras, x_norms: Tensor | None
    ) -> dict[str, Any]:
        """Assumption checks of one group at its last λ (diagnostics rule)."""
        if not res.run.values:
            return dict(UNCHECKED)
        plain = all(v is None for v in (extras.bq, extras.bk, extras.q_gain, extras.k_gain))
        bound = math.nan
        if plain:  # the analytical bound covers Paper B's form only
            box = max(1.0, res.Mq.abs().max().item(), res.Mk.abs().max().item())
            seqs = [ch.X for ch in res.problem.chunks]
            bound = lipschitz_upper_bound(
                torch.cat(seqs), res.problem.Wq, res.problem.Wk, res.lam, box, x_norms
            )
        return judge_group(res, self.options, bound)

    def run_summary(self, tables: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
        """Run-level metrics: mask agreement and verdict counts (``audit.run_summary``)."""
        return run_summary(tables)

    def model_summary(self, model: str) -> dict[str, Any]:
        """Where attention-gd's default stands against Wanda on ``model`` (the stored headroom
        analysis at the calibration size nearest this run's, or "not yet measured")."""
        tokens = self.options.max_seq * self.options.max_len
        return {"standing_vs_wanda": standing(model, tokens)}

    def _prune_others(self, ctx: LayerContext) -> list[LinearReport]:
        """The authors' hybrid: V/O/MLP by Wanda or SparseGPT on the same layer context."""
        roles = [role for role in ctx.linears if role not in ("q", "k")]
        if not roles:
            return []
        cls = get_method(self.options.others)
        sub = replace(
            ctx,
            linears={role: ctx.linears[role] for role in roles},
            stats={role: st for role, st in ctx.stats.items() if role in roles},
            inputs={role: x for role, x in ctx.inputs.items() if role in roles},
            sparsity={role: s for role, s in ctx.sparsity.items() if role in roles},
        )  # tables/arrays are the same dicts, so the delegate's outputs land in this run
        return cls(cls.options_cls()).prune_layer(sub)


def _write_masked(ctx, role, linear, keep, sparsity, seconds, extra) -> LinearReport:
    """W ← keep∘W in place, in the weight's own dtype, and report it."""
    weight = linear.weight
    W = weight.detach().to(torch.float32, copy=True)  # reference for the error
    weight.masked_fill_(~keep.to(weight.device), 0.0)
    stats = ctx.stats.get(role)
    rel = math.nan if stats is None else relative_reconstruction_error(W, weight, stats.error_gram)
    return LinearReport(
        layer=ctx.index,
        role=role,
        shape=(weight.shape[0], weight.shape[1]),
        target_sparsity=sparsity,
        achieved_sparsity=int((weight == 0).sum().item()) / weight.numel(),
        rel_error=rel,
        seconds=seconds,
        extra=dict(extra),
    )
