"""Paper A's open question made testable: across structured methods at matched budgets, does
the representation dimension predict ln PPL better than the fraction of parameters removed?

The rule is written in docs/statistics.md ("Dimension or parameters, across structured
methods"), before any real-model run of it:

- a point is one method at one budget; its ln PPL (mean window NLL), its dimension x_dim
  (kept fraction: d′/d for SliceGPT, d_eff/d_eff,dense for the others) and its parameters
  x_par = 1 − p (p: the fraction of decoder parameters removed) are means over its seeds;
- each predictor enters (A1)'s shape, ln PPL = a + b/x, fitted by least squares on the other
  methods' points and scored on the left-out method's by the squared error
  (ln PPL_pred − ln PPL)²; a predictor's score E is the mean over methods of each method's
  mean squared error (nats²). Squared, so that the noise of the measured ln PPL adds the
  same σ² to both scores and cancels in their difference (an absolute error's does not);
- Δ = E(x_par) − E(x_dim) with a 95% percentile interval from a paired bootstrap (evaluation
  windows drawn once for all runs, each point's seeds drawn on their own);
- yes when the interval lies above +``MARGIN``, no when below −``MARGIN``, else undecided.

``dimension_or_params`` is pure: a runs table in, the verdict and its numbers out.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from core.analysis.relation import ols_lines
from core.analysis.uncertainty import (
    DEFAULT_BOOT,
    Bootstrap,
    Interval,
    percentile_interval,
    unit_weights,
)
from core.errors import ConfigError

# nats²: a difference in mean squared held-out error under (1% of perplexity)² decides nothing
MARGIN = 1e-4
YES, NO, UNDECIDED = "yes", "no", "undecided"
COLUMNS = ("method", "point", "seed", "params_removed", "dim_ratio", "nll")
RULE = (
    "Each method's ln PPL is predicted from the other methods' points by ln PPL = a + b/x, "
    "x the kept fraction of the representation dimension or of the decoder's parameters; "
    "yes when the parameters' mean squared held-out error exceeds the dimension's by more "
    f"than {MARGIN:g} nats² with 95% confidence (windows and seeds resampled), no when the "
    "reverse, else undecided (docs/statistics.md)."
)


def _points(runs: pd.DataFrame) -> tuple[list[tuple[str, Any]], list[np.ndarray], np.ndarray]:
    """((method, point) keys in order, each point's run rows, the (R, W) NLL matrix)."""
    missing = set(COLUMNS) - set(runs.columns)
    if missing:
        raise ConfigError(f"the runs table lacks columns {sorted(missing)}")
    if runs.empty:
        raise ConfigError("no runs to compare")
    nll = np.stack([np.asarray(v, dtype=float) for v in runs["nll"]])
    if nll.ndim != 2:
        raise ConfigError("every run needs its windows' NLLs, all on the same windows")
    keys, rows = [], []
    for key, g in runs.reset_index(drop=True).groupby(["method", "point"], sort=True):
        keys.append((str(key[0]), key[1]))
        rows.append(g.index.to_numpy())
    return keys, rows, nll


def lomo_errors(x: np.ndarray, L: np.ndarray, methods: np.ndarray) -> np.ndarray:
    """ln PPL_pred − ln PPL of every point, predicted by ln PPL = a + b/x fitted on the
    other methods' points. x, L: (..., P); methods: (P,). NaN where the others' points do
    not have two distinct x."""
    u = 1.0 / x
    err = np.full(L.shape, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        for m in np.unique(methods):
            out = methods == m
            if (~out).sum() < 2:  # no other method's points to fit
                continue
            b, a = ols_lines(u[..., ~out], L[..., ~out])
            pred = a[..., None] + b[..., None] * u[..., out]
            err[..., out] = pred - L[..., out]
    return err


def method_means(err: np.ndarray, methods: np.ndarray) -> np.ndarray:
    """(..., P) point errors -> (..., M) each method's mean squared error, methods sorted."""
    sq = err * err
    return np.stack([sq[..., methods == m].mean(-1) for m in np.unique(methods)], axis=-1)


def verdict(delta_lo: float, delta_hi: float, margin: float = MARGIN) -> str:
    """The rule's answer from Δ's interval (NaN bounds: undecided)."""
    if delta_lo > margin:
        return YES
    if delta_hi < -margin:
        return NO
    return UNDECIDED


def _resampled(keys, rows, nll, dim, kept, boot: Bootstrap):
    """(n_boot, P) ln PPL, x_dim and x_par of every point on paired replicates: the windows
    drawn once per replicate for every run, each point's seeds drawn on their own."""
    rng = np.random.default_rng(boot.seed)
    run_means = unit_weights(rng, nll.shape[1], boot.n_boot) @ nll.T  # (B, R)
    out = [np.empty((boot.n_boot, len(keys))) for _ in range(3)]
    for p, idx in enumerate(rows):
        pick = idx[rng.integers(0, len(idx), size=(boot.n_boot, len(idx)))]  # (B, S_p)
        out[0][:, p] = np.take_along_axis(run_means, pick, axis=1).mean(1)
        out[1][:, p] = dim[pick].mean(1)
        out[2][:, p] = kept[pick].mean(1)
    return out


def dimension_or_params(runs: pd.DataFrame, boot: Bootstrap = DEFAULT_BOOT) -> dict[str, Any]:
    """The rule on a runs table: one row per run with ``COLUMNS`` (nll: its evaluation
    windows' NLLs, the same windows for every run; dim_ratio: x_dim; params_removed: p).

    Returns verdict, reason, delta / mse_dim / mse_params (Intervals, nats²), per method its
    points and mean squared held-out errors, per point ln PPL with its interval and both
    held-out prediction errors (signed, nats), and the sizes (methods, points, seeds,
    windows, replicates)."""
    keys, rows, nll = _points(runs)
    dim = runs["dim_ratio"].to_numpy(float)
    kept = 1.0 - runs["params_removed"].to_numpy(float)
    if not (np.isfinite(dim).all() and (dim > 0).all() and (kept > 0).all()):
        raise ConfigError("every run needs a positive dimension ratio and kept fraction")
    methods = np.array([k[0] for k in keys])
    L_hat = np.array([nll[idx].mean() for idx in rows])
    xd_hat = np.array([dim[idx].mean() for idx in rows])
    xp_hat = np.array([kept[idx].mean() for idx in rows])
    L_b, xd_b, xp_b = _resampled(keys, rows, nll, dim, kept, boot)
    err = {}
    for name, x_hat, x_b in (("dim", xd_hat, xd_b), ("params", xp_hat, xp_b)):
        err[name] = (lomo_errors(x_hat, L_hat, methods), lomo_errors(x_b, L_b, methods))
    per = {n: (method_means(e, methods), method_means(b, methods)) for n, (e, b) in err.items()}
    score = {n: (float(m.mean()), b.mean(-1)) for n, (m, b) in per.items()}
    delta = percentile_interval(
        score["params"][1] - score["dim"][1], score["params"][0] - score["dim"][0]
    )
    n_methods = len(np.unique(methods))
    reason = ""
    if n_methods < 2:
        reason = "fewer than two methods: nothing is predicted out of sample"
    elif not math.isfinite(delta.estimate):
        reason = "a left-out method's fit lacks two distinct x among the other methods"
    answer = UNDECIDED if reason else verdict(delta.lo, delta.hi)
    method_rows = [
        {
            "method": str(m),
            "n_points": int((methods == m).sum()),
            **percentile_interval(per["dim"][1][:, j], per["dim"][0][j]).as_dict("mse_dim"),
            **percentile_interval(per["params"][1][:, j], per["params"][0][j]).as_dict(
                "mse_params"
            ),
        }
        for j, m in enumerate(np.unique(methods))
    ]
    point_rows = [
        {
            "method": m,
            "point": key,
            "n_seeds": len(rows[p]),
            "params_removed": 1.0 - xp_hat[p],
            "dim_ratio": xd_hat[p],
            **percentile_interval(L_b[:, p], L_hat[p]).as_dict("ln_ppl"),
            "error_dim": err["dim"][0][p],
            "error_params": err["params"][0][p],
        }
        for p, (m, key) in enumerate(keys)
    ]
    return {
        "verdict": answer,
        "reason": reason,
        "delta": delta,
        "mse_dim": percentile_interval(score["dim"][1], score["dim"][0]),
        "mse_params": percentile_interval(score["params"][1], score["params"][0]),
        "methods": method_rows,
        "points": point_rows,
        "n_methods": n_methods,
        "n_points": len(keys),
        "n_seeds": max(len(r) for r in rows),
        "n_windows": int(nll.shape[1]),
        "n_boot": boot.n_boot,
        "margin": MARGIN,
        "rule": RULE,
    }


def sentence(result: dict[str, Any]) -> str:
    """The verdict in one sentence with its numbers."""
    d = result["delta"]
    ed, ep = (_root(result[k]) for k in ("mse_dim", "mse_params"))
    head = {
        YES: "Yes: the representation dimension predicts ln PPL across methods better",
        NO: "No: the fraction of parameters removed predicts ln PPL across methods better",
        UNDECIDED: "Undecided",
    }[result["verdict"]]
    if result["reason"]:
        return f"{head}: {result['reason']}."
    return (
        f"{head}. Root mean squared error of ln PPL, each method predicted from the others: "
        f"dimension {ed} nats, parameters {ep} nats; Δ(MSE) = {d} nats² (margin "
        f"±{result['margin']:g}; "
        f"{result['n_methods']} methods, {result['n_points']} points, {result['n_seeds']} "
        f"seed(s), {result['n_windows']} windows)."
    )


def _root(iv: Interval) -> str:
    """An MSE interval read as RMSE (the square root keeps percentile bounds)."""
    return str(Interval(*(math.sqrt(max(v, 0.0)) for v in (iv.estimate, iv.lo, iv.hi))))
