"""What an attention-gd run records so that no one mistakes a baseline's mask for a GD result.

Per layer: the kept entries the GD keep mask shares with the magnitude and Wanda masks at the
same sparsity and scope, the trajectory, per-group and per-head tables (attention error, the
assumption checks' verdicts); per run: the agreement metrics and the verdict counts.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from core.methods.attention_gd.objective import to_heads
from core.methods.masks import score_mask
from core.methods.wanda import wanda_scores

# Tables every attention-gd run writes (pages import these names).
TABLE_TRAJECTORY, TABLE_GROUPS = "gd_trajectory", "gd_groups"
TABLE_HEADS, TABLE_AGREEMENT = "gd_heads", "gd_agreement"
UNCHECKED: dict[str, Any] = {"verdict": "not_checked"}
VERDICT_ORDER = ("supported", "contradicted", "inconclusive", "not_checked")
# Why a group was not judged, by the run's ``checks`` option (options.AttentionGDOptions).
UNCHECKED_WHY = {
    "sample": "checks = sample judges one group per layer (the checks cost about twice the "
    "descent); the others are not checked",
    "none": "checks = none: no group is judged",
    "full": "every group is judged; a group without a recorded trajectory is not checked",
}


def checks_option(config: dict[str, Any]) -> str:
    """The ``checks`` option a stored attention-gd run ran with (its default when absent)."""
    options = dict((config.get("prune") or {}).get("options") or ())
    return str(options.get("checks", "sample"))


def verdict_tally(verdicts: list[str], checks: str) -> list[tuple[str, int, str]]:
    """(verdict, count, why) in VERDICT_ORDER, counting every group once, so the counts add up
    to the number of groups; ``why`` is said for "not_checked" only."""
    counts = [(v, sum(x == v for x in verdicts)) for v in VERDICT_ORDER]
    other = len(verdicts) - sum(n for _, n in counts)
    if other:  # a verdict this list does not know is counted, not dropped
        counts.append(("other", other))
    return [(v, n, UNCHECKED_WHY.get(checks, "") if v == "not_checked" else "") for v, n in counts]


def agreement_rows(ctx, W, keep, sparsity, col_sq, scope: str, start=None) -> list[dict[str, Any]]:
    """Per role: kept entries shared with the magnitude / Wanda keep masks (same sparsity,
    same scope), as counts and fractions of the GD keep mask; with ``start`` (role -> the
    binarised M₀), "mask_flip": the fraction of entries whose keep decision GD changed."""
    rows = []
    for role in ("q", "k"):
        s = sparsity[role]
        mag = ~score_mask(W[role].abs(), s, scope)
        wan = ~score_mask(wanda_scores(W[role], col_sq.to(W[role])), s, scope)
        kept = int(keep[role].sum())
        shared_m, shared_w = int((keep[role] & mag).sum()), int((keep[role] & wan).sum())
        rows.append(
            {
                "layer": ctx.index,
                "role": role,
                "kept": kept,
                "shared_magnitude": shared_m,
                "shared_wanda": shared_w,
                "agreement_magnitude": shared_m / max(kept, 1),
                "agreement_wanda": shared_w / max(kept, 1),
                "mask_flip": math.nan
                if start is None
                else float((keep[role] != start[role]).float().mean()),
            }
        )
    return rows


def record_tables(ctx, groups, checks, keep, r, head_dim) -> float:
    """Fill the tables; returns the layer's mean relative attention error (binary masks)."""
    errs = []
    for g, (res, chk) in enumerate(zip(groups, checks, strict=True)):
        qs = slice(g * r * head_dim, (g + 1) * r * head_dim)
        ks = slice(g * head_dim, (g + 1) * head_dim)
        bq = to_heads(keep["q"][qs], head_dim).to(res.problem.Wq)
        bk = keep["k"][ks].T.to(res.problem.Wq)
        fro2, tv = res.problem.data_terms(bq, bk)
        rel = (2 * fro2).sqrt() / res.problem.dense_norms()
        errs += rel.tolist()
        star = chk.get("L_star_lo", math.nan)
        traj = []
        for row in res.trajectory:
            head = g * r + row["head"] if row["matrix"] == "q" else -1
            pl = math.nan
            if row["matrix"] == "group" and row["loss"] - star > 0:
                pl = 0.5 * row["grad_norm"] ** 2 / (row["loss"] - star)
            traj.append({"layer": ctx.index, "group": g, **row, "head": head, "pl_ratio": pl})
        ctx.add_rows(TABLE_TRAJECTORY, traj)
        first, last = res.trajectory[0], res.trajectory[-1 - r - 1]
        ctx.add_rows(
            TABLE_GROUPS,
            [
                {
                    "layer": ctx.index,
                    "group": g,
                    "steps": int(last["step"]),
                    "loss_start": first["loss"],
                    "loss_end": last["loss"],
                    "lam": res.lam,
                    "mask_delta": res.mask_delta,
                    "converged": bool(res.converged),
                    "evaluations": res.evaluations,
                    "seconds": res.seconds,
                    "attn_fro_rel": float(rel.mean()),
                    **chk,
                }
            ],
        )
        ctx.add_rows(
            TABLE_HEADS,
            [
                {
                    "layer": ctx.index,
                    "group": g,
                    "matrix": "q",
                    "head": g * r + h,
                    "attn_fro_rel": float(rel[h]),
                    "attn_tv_max": float(tv[h]),
                    "verdict": chk["verdict"],
                    "mu_hat": chk.get("mu_hat", math.nan),
                    "lipschitz_hessian": chk.get("lipschitz_hessian", math.nan),
                }
                for h in range(r)
            ],
        )
    return float(torch.tensor(errs).mean())


def run_summary(tables: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Run-level metrics: mask agreement with magnitude / Wanda (kept entries shared, over
    all q/k), mean ‖M_T − M₀‖/‖M₀‖, mean fraction of keep decisions changed from bin(M₀)
    ("mask_flip"), the fraction of groups whose optimiser reached ``tol`` ("gd_converged")
    and the verdict counts of the assumption checks."""
    agree, groups = tables.get(TABLE_AGREEMENT, []), tables.get(TABLE_GROUPS, [])
    kept = sum(row["kept"] for row in agree)
    out: dict[str, Any] = {
        "mask_agreement_magnitude": sum(r["shared_magnitude"] for r in agree) / max(kept, 1),
        "mask_agreement_wanda": sum(r["shared_wanda"] for r in agree) / max(kept, 1),
        "mask_delta": sum(r["mask_delta"] for r in groups) / max(len(groups), 1),
        "mask_flip": sum(r.get("mask_flip", math.nan) for r in agree) / max(len(agree), 1),
        "gd_converged": sum(bool(r.get("converged")) for r in groups) / max(len(groups), 1),
    }
    verdicts = [r["verdict"] for r in groups]
    for v in ("supported", "contradicted", "inconclusive"):
        out[f"gd_checks_{v}"] = verdicts.count(v)
    checked = [v for v in verdicts if v != "not_checked"]
    out["gd_verdict"] = (
        "not_checked"
        if not checked
        else "contradicted"
        if "contradicted" in checked
        else "supported"
        if all(v == "supported" for v in checked)
        else "inconclusive"
    )
    return out
