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

import numpy as np
import torch

from core.analysis.effdim import collect_residual_dims, effective_dims
from core.analysis.laws import law_verdict
from core.analysis.uncertainty import DEFAULT_BOOT, Bootstrap, Interval, percentile_interval
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
def accuracy_relation(
    s_values: Sequence[float], acc_values: Sequence[float], acc0: float, chance: float
) -> dict[str, Any]:
    """Fit Paper A's accuracy relation (A2) ln(acc/acc₀) ∝ (1 − s) to a sweep.

    With acc₀ the dense accuracy, (A2) cannot hold through the origin (at s = 0 the left side
    is 0 while 1 − s = 1), so two readings are fitted (papers.md §2):

    - dense:  ln(acc/acc_dense) = κ·(1 − s) + c, least squares with an intercept; the dense
      point (s = 0, ln 1 = 0) is included.
    - chance: ln(acc/chance) = κ'·(1 − s) through the origin (acc₀ read as the level reached
      as s → 1); R² against the mean.

    These are point fits (also of the mean over tasks, which has no items to resample); the
    verdict on (A2) needs intervals and is read by one rule, core.analysis.verdicts.
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
        "kappa_chance": kappa_ch,
        "r2_chance": r2_ch,
        "rows": rows,
    }


def effective_relation(
    ppl0: float, d: float, rows: Iterable[Mapping[str, Any]], boot: Bootstrap = DEFAULT_BOOT
) -> dict[str, Any]:
    """Test (A1) with effective dimensions: PPL = PPL₀^{d / d_eff} for any pruning method.

    d: the dense model's effective dimension (e.g. its mean pca99); rows: one per run with
    "ppl" (measured) and "d_eff" (the same statistic on the pruned model), other keys kept.
    For SliceGPT with d_eff = d′ this is (A1) itself. Returns {"rows" (with predicted,
    rel_error, ratio = ln PPL₀/ln PPL, dim_ratio = d_eff/d), "mean_abs_rel_error", "a",
    "b", "r2" of the fit ratio = a·dim_ratio + b, and "held_out": the same two forms asked
    to predict each method from the others (``method_out_of_sample``)}.
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
    held_out = method_out_of_sample(log0, out_rows, boot)
    return {
        "rows": out_rows,
        "mean_abs_rel_error": mae,
        "a": a,
        "b": b,
        "r2": r2,
        "held_out": held_out,
    }


def ols_lines(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares y ≈ a·x + b along the last axis (x varies per replicate too); NaN where
    x has no spread."""
    xc = x - x.mean(axis=-1, keepdims=True)
    sxx = (xc * xc).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(sxx > 1e-12, (xc * y).sum(axis=-1) / sxx, np.nan)
    return a, y.mean(axis=-1) - a * x.mean(axis=-1)


def _method_errors(log0: float, x: np.ndarray, ratio: np.ndarray, methods: np.ndarray):
    """|PPL_pred/PPL − 1| per run, (A1) with d_eff (no fit) and the line fitted on the other
    methods' runs (NaN where those runs cannot fit a line). x, ratio: (..., R)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_ppl = log0 / ratio
        exact = np.abs(np.expm1(log0 / x - log_ppl))
        line = np.full(ratio.shape, np.nan)
        for m in np.unique(methods):
            out = methods == m
            if (~out).sum() < 2:  # too few other runs to fit a line
                continue
            a, b = ols_lines(x[..., ~out], ratio[..., ~out])
            pred = a[..., None] * x[..., out] + b[..., None]
            pred_log = np.where(pred > 0, log0 / pred, np.nan)
            line[..., out] = np.abs(np.expm1(pred_log - log_ppl[..., out]))
    return exact, line


def method_out_of_sample(
    log0: float, rows: list[dict[str, Any]], boot: Bootstrap = DEFAULT_BOOT
) -> dict[str, Any]:
    """Leave-one-method-out for the effective-dimension relation: each method's runs are
    predicted by ratio = d_eff/d ((A1) with d_eff, nothing fitted) and by the line
    ratio = a·d_eff/d + b fitted on the *other* methods' runs. Errors |PPL_pred/PPL − 1|;
    mean per method and over all runs, with 95% intervals from resampling runs within each
    method (a method with one run gets no interval, and with one run per method nothing is
    judged). Verdict per form (core.analysis.laws.law_verdict with tolerance PPL_TOL):
    supported when the interval of the mean held-out error lies at or under 10%."""
    methods = np.array([str(r.get("method")) for r in rows])
    x = np.array([r["dim_ratio"] for r in rows], dtype=float)
    ratio = np.array([r["ratio"] for r in rows], dtype=float)
    exact, line = _method_errors(log0, x, ratio, methods)
    rng = np.random.default_rng(boot.seed)
    idx = np.arange(len(rows))
    draws = np.concatenate(  # (n_boot, R): runs resampled within each method, order kept
        [
            rng.choice(idx[methods == m], size=(boot.n_boot, int((methods == m).sum())))
            for m in np.unique(methods)
        ],
        axis=1,
    )
    order = np.concatenate([idx[methods == m] for m in np.unique(methods)])
    b_exact, b_line = _method_errors(log0, x[draws], ratio[draws], methods[order])
    sorted_exact, sorted_line = exact[order], line[order]
    out: dict[str, Any] = {"methods": []}
    spread = len(rows) > len(np.unique(methods))  # some method has two runs to resample
    for m in np.unique(methods):
        sel = methods[order] == m
        alone = sel.sum() < 2  # one run: resampling it gives no interval
        out["methods"].append(
            {
                "method": str(m),
                "n_runs": int(sel.sum()),
                **_mean_iv(b_exact[:, sel], sorted_exact[sel], alone).as_dict("exact_error"),
                **_mean_iv(b_line[:, sel], sorted_line[sel], alone).as_dict("line_error"),
            }
        )
    for name, reps, est in (("exact", b_exact, sorted_exact), ("line", b_line, sorted_line)):
        iv = _mean_iv(reps, est, not spread)
        out[name] = iv.as_dict(f"{name}_error")
        out[f"{name}_verdict"] = law_verdict(iv, iv)
    return out


def _mean_iv(reps: np.ndarray, est: np.ndarray, no_interval: bool = False) -> Interval:
    """Mean |error| with its percentile interval (NaN bounds when nothing was resampled)."""
    iv = percentile_interval(reps.mean(axis=-1), float(est.mean()))
    return Interval(iv.estimate, math.nan, math.nan) if no_interval else iv
