"""The spectrum of a real layer's problem, and μ̂ against the penalty λ (issue 32, item 3).

    python bench/attention_gd.py --spectrum [--spectrum-layer 8] [--lanczos 300]
    python bench/attention_gd.py --mu-lambda [--spectrum-layer 8]

--spectrum. One GQA group (layer mod KV heads) of ``--spectrum-layer`` at attention-gd's default
calibration (C4 train, seed 0, 8 windows of 64 tokens: the 8 × 64 the method uses), float64.
The Hessian of the objective the checks judge, L(M) = data + ½λ‖M‖² at the default λ_rel, is
probed by ``--lanczos`` Lanczos steps (full reorthogonalisation) on exact Hessian-vector
products (autograd through the forward, not differences of gradients), at two points of the
production run: M₀ = Wanda's keep mask and M_T after attention-gd's optimiser (default
options). Printed per point: λ_max (the top Ritz value, which converges first), the smallest
positive and the most negative Ritz values with their residual bounds, decades =
log10(λ_max / smallest positive), and the smallest positive Ritz value that has converged
(residual < 10 % of it): the values near 0 do not converge (their residuals exceed them), so
the small end is located only to within those residuals. λI shifts every eigenvalue and
leaves the Krylov space unchanged, so the data term's own Ritz values are those minus λ (also
printed). The Ritz values at M_T and their Gauss-quadrature weights (the spectral density's
estimate from the Lanczos start) are written to ``spectrum_<model>.json`` beside
``core.methods.attention_gd.synthetic_layer``, whose PL control then takes its density (rerun
--power afterwards: the stored power table names the density it was measured on).

--power. The assumption rule's power on the layer-matched controls (``power.CONTROLS``,
dimension 10⁴, 64 starts) at the production budget for Adam and plain GD, stored for the
pages (``power_production.json``), and the production tally (3 supported / 25 inconclusive
/ 2 contradicted of 30 groups, smollm2-135m) beside what the controls predict for 30 groups
when PL holds with the layer's density and when it fails as x⁴ does.

--mu-lambda. μ̂ (``check_assumptions``' PL estimate: the smallest PL ratio over the sampled
points, beside the median and 90th percentile of the ratios) as λ_rel varies, on the same
group (production run: Adam from Wanda's mask, default budget, the checks' default settings)
and on a control with known μ(λ): the matched quadratic μ₀ = 1e-4, L = 1 plus ½λ‖x‖², for
which μ = μ₀ + λ, judged at the production budget (``power.judge_control``) from 8 starts.
"""

from __future__ import annotations

import json
import math
import statistics
import time

import torch

from core.evaluation.attention_error import AttentionProbe
from core.evaluation.attention_ops import rope_tables
from core.methods.attention_gd import AttentionGDOptions, gd_prune_group, initial_mask
from core.methods.attention_gd.controls import ridge_quadratic
from core.methods.attention_gd.group_view import judge_group
from core.methods.attention_gd.objective import GroupProblem, to_heads
from core.methods.attention_gd.optimiser import effective_lam
from core.methods.attention_gd.power import (
    CONTROLS,
    PRODUCTION_STEPS,
    judge_control,
    power,
    write_stored,
)
from core.methods.attention_gd.synthetic_layer import HERE as CONTROLS_DIR
from core.methods.attention_gd.verdict_notes import budget_words, tally_beside_controls
from core.runs import get_calib_windows
from core.settings.config import CalibConfig, DataSpec

SPARSITY = 0.5
LAM_RELS = (0.0, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)
CONTROL_MU0, CONTROL_LAMS = 1e-4, (0.0, 1e-4, 1e-3, 1e-2, 1e-1)
RIDGE_STARTS = 8  # the ridge control's 8-dimensional starts
# the verdicts of the default run's assumption checks on smollm2-135m (docs/design-notes.md)
PRODUCTION_TALLY = {"supported": 3, "contradicted": 2, "inconclusive": 25}


def add_args(ap) -> None:
    ap.add_argument("--spectrum", action="store_true", help="Lanczos spectrum of one group")
    ap.add_argument("--mu-lambda", action="store_true", help="μ̂ against λ_rel (table)")
    ap.add_argument("--spectrum-layer", type=int, default=8)
    ap.add_argument("--lanczos", type=int, default=300, help="Lanczos steps per point")
    ap.add_argument(
        "--power", action="store_true", help="the rule's power on the layer-matched controls"
    )


def group_inputs(lm, args, layer: int):
    """(X (8, 64, d), Wq heads (r, d, d_h), Wk (d, d_h), rope, col_sq, group) of the layer's
    group layer mod KV heads at the default calibration."""
    ad = lm.adapter
    calib = CalibConfig(DataSpec("c4", "train", args.data_dir), 8, 64, 0)
    ids, _ = get_calib_windows(lm, calib)
    pc = AttentionProbe.capture(ad, ids, "calib", "cpu")
    hd, n_kv = ad.head_dim, ad.n_kv_heads
    r, g = ad.n_heads // n_kv, layer % n_kv
    Wq, Wk = pc.dense[layer]
    Wqg, Wkg = Wq[g * r * hd : (g + 1) * r * hd], Wk[g * hd : (g + 1) * hd]
    X = pc.X[layer]
    cos, sin = pc.ropes[layer]
    rope = rope_tables((cos[None], sin[None]), X.shape[1], torch.float32, "cpu")
    col_sq = X.reshape(-1, X.shape[-1]).square().sum(0)
    return X, Wqg, Wkg, rope, col_sq, g


def start_masks(Wqg, Wkg, col_sq, hd: int):
    """Wanda's keep masks of the group in the problem's layout: (r, d, d_h), (d, d_h)."""
    Mq, Mk = (initial_mask(W, "wanda_mask", col_sq, None, SPARSITY, "row") for W in (Wqg, Wkg))
    return to_heads(Mq, hd), Mk.T


def hvp_fn(problem: GroupProblem, lam: float):
    """Exact v ↦ ∇²L(x)v for x = (vec M_Q, vec M_K), by double backward through the forward."""
    n_q = problem.Wq.numel()

    def loss(x):
        Mq, Mk = x[:n_q].view(problem.Wq.shape), x[n_q:].view(problem.Wk.shape)
        Qt, Kt = Mq * problem.Wq, Mk * problem.Wk
        data = sum(
            0.5 * (problem.intermediates(ch, Qt, Kt)[-1] - ch.Y).square().sum()
            for ch in problem.chunks
        )
        return data + 0.5 * lam * x.square().sum()

    def at(x):
        x = x.detach().requires_grad_(True)
        with torch.enable_grad():
            (g,) = torch.autograd.grad(loss(x), x, create_graph=True)

        def hv(v):
            with torch.enable_grad():
                return torch.autograd.grad(g, x, v, retain_graph=True)[0].detach()

        return hv

    return at


def lanczos(matvec, n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """k Lanczos steps with full reorthogonalisation from a seeded random start: (Ritz values
    ascending, residual bounds |β_k s_k|, Gauss-quadrature weights s_0², the spectral
    density's estimate from that start)."""
    gen = torch.Generator().manual_seed(seed)
    v = torch.randn(n, generator=gen, dtype=torch.float64)
    V = [v / v.norm()]
    alpha, beta = [], []
    for j in range(k):
        w = matvec(V[j])
        a = torch.dot(w, V[j]).item()
        alpha.append(a)
        Vm = torch.stack(V)
        for _ in range(2):  # reorthogonalise twice
            w = w - Vm.T @ (Vm @ w)
        b = w.norm().item()
        if j == k - 1 or b < 1e-12 * max(abs(a), 1.0):
            break
        beta.append(b)
        V.append(w / b)
    T = torch.diag(torch.tensor(alpha, dtype=torch.float64))
    if beta:
        off = torch.tensor(beta[: len(alpha) - 1], dtype=torch.float64)
        T += torch.diag(off, 1) + torch.diag(off, -1)
    theta, S = torch.linalg.eigh(T)
    return theta, (b * S[-1]).abs(), S[0].square()


def spectrum(args, lm) -> None:
    """--spectrum: the module docstring's protocol; prints one block per point."""
    t0 = time.perf_counter()
    hd = lm.adapter.head_dim
    X, Wqg, Wkg, rope, col_sq, g = group_inputs(lm, args, args.spectrum_layer)
    opts = AttentionGDOptions(checks="full", dtype="float64")  # "full": the run is recorded
    Mq0, Mk0 = start_masks(Wqg, Wkg, col_sq, hd)
    res = gd_prune_group(X, to_heads(Wqg, hd), Wkg.T, opts, rope, Mq0, Mk0)
    problem, lam = res.problem, res.lam
    print(
        f"spectrum: model {args.model}, layer {args.spectrum_layer} group {g}, 8 x 64 C4 train "
        f"tokens (seed 0), float64; L(M) = data + ½λ‖M‖², λ_rel {opts.lam:g} -> λ = {lam:.3e}; "
        f"{problem.n_params} mask entries; {args.lanczos} Lanczos steps, exact Hessian-vector "
        f"products; {opts.optimizer} run: {len(res.run.values) - 1} steps"
    )
    points = {"M0 = Wanda's mask": (Mq0, Mk0), "M_T (after the optimiser)": (res.Mq, res.Mk)}
    for name, (Mq, Mk) in points.items():
        t1 = time.perf_counter()
        x = torch.cat([Mq.reshape(-1), Mk.reshape(-1)]).to(torch.float64)
        theta, resid, weights = lanczos(hvp_fn(problem, lam)(x), x.numel(), args.lanczos)
        pos = theta > 0
        top, top_r = theta[-1].item(), resid[-1].item()
        i_min = int(torch.nonzero(pos)[0]) if pos.any() else None
        low = theta[i_min].item() if i_min is not None else math.nan
        low_r = resid[i_min].item() if i_min is not None else math.nan
        neg = theta[0].item()
        print(f"\n  at {name} ({time.perf_counter() - t1:.0f} s)")
        print(f"    λ_max                   {top:.4e}  (residual {top_r:.1e})")
        print(f"    smallest positive Ritz  {low:.4e}  (residual {low_r:.1e})")
        print(f"    most negative Ritz      {neg:.4e}  (residual {resid[0].item():.1e})")
        print(f"    decades λ_max / smallest positive: {math.log10(top / low):.2f}")
        conv = pos & (resid < 0.1 * theta.abs())
        small = theta[conv].min().item() if conv.any() else math.nan
        print(
            f"    smallest positive Ritz with residual < 10 % of it (converged): {small:.4e}; "
            f"{int((theta.abs() < resid).sum())} Ritz values are below their residual"
        )
        data = theta - lam
        dpos = data[data > 0]
        print(
            f"    data term alone (Ritz − λ): max {data[-1].item():.4e}, smallest positive "
            f"{dpos.min().item() if dpos.numel() else math.nan:.4e}, min {data[0].item():.4e}"
        )
        print(f"    Ritz values (every 10th): {[f'{v:.2e}' for v in theta[::10].tolist()]}")
    path = CONTROLS_DIR / f"spectrum_{args.model}.json"
    path.write_text(
        json.dumps(
            {"layer": args.spectrum_layer, "group": g, "point": "M_T", "lam": lam,
             "ritz": theta.tolist(), "weights": weights.tolist(), "residuals": resid.tolist()}
        )
    )  # fmt: skip
    print(
        f"\nwrote {path}: the layer controls' density (core.methods.attention_gd.synthetic_layer)"
    )
    print(f"\nspectrum wall time {(time.perf_counter() - t0) / 60:.1f} min")


def header(head: str) -> None:
    """A table's header line, underlined."""
    print(head)
    print("-" * len(head))


def mu_lambda(args, lm) -> None:
    """--mu-lambda: μ̂ against λ_rel on one real group and on the control (module docstring)."""
    t0 = time.perf_counter()
    hd = lm.adapter.head_dim
    X, Wqg, Wkg, rope, col_sq, g = group_inputs(lm, args, args.spectrum_layer)
    Mq0, Mk0 = start_masks(Wqg, Wkg, col_sq, hd)
    print(
        f"μ̂ against λ: model {args.model}, layer {args.spectrum_layer} group {g}, 8 x 64 C4 "
        f"train tokens (seed 0); production run (default options, λ_rel varied), checks at "
        f"their defaults; μ̂ = min PL ratio over the sampled points (q50, q90: its spread)"
    )
    header(f"{'λ_rel':>8}{'λ':>11}{'μ̂':>11}{'q50':>11}{'q90':>11}{'μ̂ / λ':>9}  verdict")
    for lam_rel in LAM_RELS:
        opts = AttentionGDOptions(checks="full", lam=lam_rel)  # records the run judged below
        res = gd_prune_group(X, to_heads(Wqg, hd), Wkg.T, opts, rope, Mq0, Mk0)
        out = judge_group(res, opts)
        lam = effective_lam(lam_rel, res.problem)
        ratio = out["mu_hat"] / lam if lam > 0 else math.nan
        print(
            f"{lam_rel:>8g}{lam:>11.3e}{out['mu_hat']:>11.3e}{out['mu_q50']:>11.3e}"
            f"{out['mu_q90']:>11.3e}{ratio:>9.2f}  {out['verdict']}"
        )
    print(
        f"\ncontrol: ½(x − c)ᵀA(x − c) + ½λ‖x‖², A log-spaced over [{CONTROL_MU0:g}, 1] (N = 8), "
        f"μ(λ) = {CONTROL_MU0:g} + λ; production budget {PRODUCTION_STEPS} steps, {RIDGE_STARTS} "
        "starts"
    )
    header(f"{'λ':>8}{'μ(λ)':>11}{'μ̂ median':>11}{'μ̂ min':>11}{'μ̂ max':>11}  supported")
    for lam in CONTROL_LAMS:
        outs = [
            judge_control(ridge_quadratic(CONTROL_MU0, lam, s), s, PRODUCTION_STEPS)
            for s in range(RIDGE_STARTS)
        ]
        mus = [o["mu_hat"] for o in outs]
        sup = sum(o["verdict"] == "supported" for o in outs)
        print(
            f"{lam:>8g}{CONTROL_MU0 + lam:>11.3e}{statistics.median(mus):>11.3e}"
            f"{min(mus):>11.3e}{max(mus):>11.3e}  {sup}/{RIDGE_STARTS}"
        )
    print(f"\nmu-lambda wall time {(time.perf_counter() - t0) / 60:.1f} min")


def power_report(args) -> None:
    """--power: measure the rule's power on the layer-matched controls at the production
    budget (Adam and plain GD), store it for the pages (``power.write_stored``) and print it
    with each rate's interval, then the production tally beside what the controls predict."""
    t0 = time.perf_counter()
    path = write_stored()
    print(f"power at {budget_words(PRODUCTION_STEPS)}; stored in {path}")
    header(f"{'optimizer':>9}  {'control':<16}{'truth':<14}{'supported':>22}{'contradicted':>22}")
    for optimizer in ("adam", "gd"):
        for control in CONTROLS:
            p = power(PRODUCTION_STEPS, control, optimizer)
            cells = [
                f"{p[v]['rate']:>6.0%} [{p[v]['lo']:.0%}, {p[v]['hi']:.0%}]"
                for v in ("supported", "contradicted")
            ]
            print(f"{optimizer:>9}  {control:<16}{p['truth']:<14}{cells[0]:>22}{cells[1]:>22}")
    print("\nproduction tally (smollm2-135m, default run) beside the controls, 30 groups:")
    for row in tally_beside_controls(PRODUCTION_TALLY, PRODUCTION_STEPS):
        print(
            f"  {row['verdict']:<13} observed {row['groups']:>3}   if PL holds "
            f"{row['if PL holds']:5.1f} [{row['if PL holds lo']:.1f}, {row['if PL holds hi']:.1f}]"
            f"   if PL fails (x⁴) {row['if PL fails (x⁴)']:5.1f}"
        )
    print(f"\npower wall time {(time.perf_counter() - t0) / 60:.1f} min")
