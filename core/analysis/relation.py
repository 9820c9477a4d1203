"""Representation dimension: Paper A's perplexity relation and effective residual dimensions.

Paper A (Xu, Alazraki, Mandic; arXiv 2503.04377; papers.md §2) states for SliceGPT

    (A1)  ln PPL₀ / ln PPL = 1 − s,   i.e.   PPL = PPL₀^{1/(1−s)} = PPL₀^{d/d′},

with s the fraction of the residual width d removed. ``predicted_ppl`` evaluates (A1);
``relation_fit`` fits ratio = a·(1−s) + b to measured sweeps (the spec treats (A1) as a
hypothesis to fit per model, not an identity).

The seed question asks whether the representation dimension plays the same role for
methods that keep d fixed (Wanda, SparseGPT, attention-matrix pruning). ``core.analysis.effdim``
measures the dimension a residual stream actually uses (one statistic fixed in advance), and
``effective_relation`` tests (A1) written with that dimension: PPL = PPL₀^{d_eff,dense / d_eff}.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from core.analysis.effdim import collect_residual_dims, effective_dims
from core.errors import ConfigError
from core.methods.slicegpt import sliced_width

__all__ = ["collect_residual_dims", "effective_dims"]  # measured in core.analysis.effdim


# ---- Paper A relation ----------------------------------------------------------------------------
def predicted_ppl(ppl0: float, s: float) -> float:
    """PPL = PPL₀^{1/(1−s)} (Paper A, relation A1)."""
    if not 0.0 <= s < 1.0:
        raise ConfigError(f"sparsity must be in [0, 1), got {s}")
    return float(ppl0) ** (1.0 / (1.0 - s))


def _log_ppl(ppl: float, what: str) -> float:
    if not math.isfinite(ppl) or ppl <= 1.0:
        raise ConfigError(f"{what} must be a finite perplexity > 1 (ln PPL > 0), got {ppl}")
    return math.log(ppl)


def linear_fit(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, float]:
    """Least squares y ≈ a·x + b; returns (a, b, r²). NaNs when x has < 2 distinct values."""
    xs = torch.tensor(x, dtype=torch.float64)
    ys = torch.tensor(y, dtype=torch.float64)
    if xs.numel() != ys.numel():
        raise ConfigError(f"{xs.numel()} x values but {ys.numel()} y values")
    if torch.unique(xs).numel() < 2:
        return math.nan, math.nan, math.nan
    A = torch.stack([xs, torch.ones_like(xs)], dim=1)  # (n, 2)
    a, b = torch.linalg.lstsq(A, ys.unsqueeze(1)).solution.squeeze(1).tolist()
    ss_res = ((ys - (a * xs + b)) ** 2).sum().item()
    ss_tot = ((ys - ys.mean()) ** 2).sum().item()
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else math.nan)
    return a, b, r2


def relation_fit(
    s_values: Sequence[float],
    ppl_values: Sequence[float],
    ppl0: float,
    d: int | None = None,
    round_to: int = 8,
    use_effective: bool = False,
) -> dict[str, Any]:
    """Fit ln PPL₀ / ln PPL = a·(1−s) + b by least squares (Paper A, A1 has a = 1, b = 0).

    With the model width ``d`` the rows also carry d′ = sliced_width(d, s) and
    s_eff = 1 − d′/d, and ``use_effective`` fits against 1 − s_eff instead of 1 − s.
    Returns {"a", "b", "r2", "rows"}; each row: s, s_eff, d_sliced, measured, predicted
    (A1 with the same s used for the fit), rel_error = (predicted − measured)/measured,
    ratio, and predicted_fit / rel_error_fit from the fitted line. a, b, r2 are NaN with
    fewer than two distinct sparsities.
    """
    if len(s_values) != len(ppl_values):
        raise ConfigError(f"{len(s_values)} sparsities but {len(ppl_values)} perplexities")
    if use_effective and d is None:
        raise ConfigError("use_effective needs the model width d")
    log0 = _log_ppl(ppl0, "ppl0")
    rows: list[dict[str, Any]] = []
    for s, ppl in zip(s_values, ppl_values, strict=True):
        d_sliced = None if d is None else sliced_width(d, s, round_to)
        s_eff = s if d_sliced is None else 1.0 - d_sliced / d
        s_used = s_eff if use_effective else s
        predicted = predicted_ppl(ppl0, s_used)
        rows.append(
            {
                "s": float(s),
                "s_eff": float(s_eff),
                "d_sliced": d_sliced,
                "measured": float(ppl),
                "predicted": predicted,
                "rel_error": (predicted - ppl) / ppl,
                "ratio": log0 / _log_ppl(ppl, "perplexity"),
                "x": 1.0 - s_used,
            }
        )
    a, b, r2 = linear_fit([r["x"] for r in rows], [r["ratio"] for r in rows])
    for row in rows:
        fitted = a * row.pop("x") + b
        row["predicted_fit"] = math.exp(log0 / fitted) if fitted > 0 else math.inf
        row["rel_error_fit"] = (row["predicted_fit"] - row["measured"]) / row["measured"]
    return {"a": a, "b": b, "r2": r2, "rows": rows}


# ---- Paper A, accuracy relation (A2) ------------------------------------------------------------
HELD_R2 = 0.9  # a relation "held" on a sweep when its fit explains >= 90% of the variance


def accuracy_relation(
    s_values: Sequence[float], acc_values: Sequence[float], acc0: float, chance: float
) -> dict[str, Any]:
    """Fit Paper A's accuracy relation (A2) ln(acc/acc₀) ∝ (1 − s) to a sweep.

    With acc₀ the dense accuracy, (A2) cannot hold through the origin (at s = 0 the left side
    is 0 while 1 − s = 1), so two readings are fitted (papers.md §2):

    - dense:  ln(acc/acc_dense) = κ·(1 − s) + c, least squares with an intercept; the dense
      point (s = 0, ln 1 = 0) is included. "held" = R² ≥ HELD_R2 and κ > 0.
    - chance: ln(acc/chance) = κ'·(1 − s) through the origin (acc₀ read as the level reached
      as s → 1); R² against the mean. "held" = R² ≥ HELD_R2 and κ' > 0.

    s_values / acc_values: the pruned points (s > 0). Returns the two fits and one row per
    point (dense first) with the measured and both predicted accuracies.
    """
    if len(s_values) != len(acc_values):
        raise ConfigError(f"{len(s_values)} sparsities but {len(acc_values)} accuracies")
    pts = [(0.0, float(acc0))] + [(float(s), float(a)) for s, a in zip(s_values, acc_values)]  # noqa: B905
    if any(not 0 <= a <= 1 for _, a in pts) or not 0 < chance < 1:
        raise ConfigError(
            f"accuracies must be in [0, 1] and chance in (0, 1); got "
            f"{[a for _, a in pts]}, chance={chance}"
        )
    # ln 0 is undefined: 0% points are left out (all of them when the dense model scores 0)
    usable = [(s, a) for s, a in pts if a > 0] if acc0 > 0 else []
    x = [1.0 - s for s, _ in usable]
    y = [math.log(a / acc0) for _, a in usable]
    kappa, c, r2 = linear_fit(x, y)
    if len(set(y)) == 1:  # accuracy never moved: nothing for a fit to explain
        r2 = math.nan
    kappa_ch = r2_ch = math.nan
    if usable:
        yc = [math.log(a / chance) for _, a in usable]
        xs, ycs = torch.tensor(x, dtype=torch.float64), torch.tensor(yc, dtype=torch.float64)
        kappa_ch = float((xs * ycs).sum() / (xs * xs).sum())
        ss_tot = float(((ycs - ycs.mean()) ** 2).sum())
        ss_res = float(((ycs - kappa_ch * xs) ** 2).sum())
        r2_ch = 1.0 - ss_res / ss_tot if ss_tot > 1e-12 else math.nan
    rows = []
    for s, a in pts:
        xi = 1.0 - s
        rows.append(
            {
                "s": s,
                "acc": a,
                "ln_ratio": math.log(a / acc0) if a > 0 < acc0 else math.nan,
                "predicted": acc0 * math.exp(kappa * xi + c) if math.isfinite(kappa) else math.nan,
                "predicted_chance": chance * math.exp(kappa_ch * xi),
            }
        )
    return {
        "acc0": float(acc0),
        "chance": float(chance),
        "n_points": len(usable),
        "kappa": kappa,
        "intercept": c,
        "r2": r2,
        "held": bool(math.isfinite(r2) and r2 >= HELD_R2 and kappa > 0),
        "kappa_chance": kappa_ch,
        "r2_chance": r2_ch,
        "held_chance": bool(math.isfinite(r2_ch) and r2_ch >= HELD_R2 and kappa_ch > 0),
        "rows": rows,
    }


def effective_relation(ppl0: float, d: float, rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Test (A1) with effective dimensions: PPL = PPL₀^{d / d_eff} for any pruning method.

    d: the dense model's effective dimension (e.g. its mean pca99); rows: one per run with
    "ppl" (measured) and "d_eff" (the same statistic on the pruned model), other keys kept.
    For SliceGPT with d_eff = d′ this is (A1) itself. Returns {"rows" (with predicted,
    rel_error, ratio = ln PPL₀/ln PPL, dim_ratio = d_eff/d), "mean_abs_rel_error", and
    "a", "b", "r2" of the fit ratio = a·dim_ratio + b}.
    """
    if not d > 0:
        raise ConfigError(f"the dense effective dimension must be > 0, got {d}")
    log0 = _log_ppl(ppl0, "ppl0")
    out_rows = []
    for row in rows:
        if "ppl" not in row or "d_eff" not in row:
            raise ConfigError(f"each run needs 'ppl' and 'd_eff', got keys {sorted(row)}")
        ppl, d_eff = float(row["ppl"]), float(row["d_eff"])
        if not d_eff > 0:
            raise ConfigError(f"effective dimension must be > 0, got {d_eff}")
        predicted = math.exp(log0 * d / d_eff)
        out_rows.append(
            {
                **row,
                "measured": ppl,
                "predicted": predicted,
                "rel_error": (predicted - ppl) / ppl,
                "ratio": log0 / _log_ppl(ppl, "perplexity"),
                "dim_ratio": d_eff / d,
            }
        )
    if not out_rows:
        raise ConfigError("effective_relation needs at least one run")
    a, b, r2 = linear_fit([r["dim_ratio"] for r in out_rows], [r["ratio"] for r in out_rows])
    mae = sum(abs(r["rel_error"]) for r in out_rows) / len(out_rows)
    return {"rows": out_rows, "mean_abs_rel_error": mae, "a": a, "b": b, "r2": r2}
