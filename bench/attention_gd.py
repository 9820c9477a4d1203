"""Attention-matrix GD pruning (Paper B) against magnitude, Wanda and SparseGPT on W_Q/W_K.

    python bench/attention_gd.py [--sparsities 0.3 0.5 0.7] [--nsamples 8] [--seqlen 256]
                                 [--max-windows 32] [--option lam=0.01 ...] [--store DIR]

Protocol (issue #5): the embedded model; only q_proj/k_proj are pruned (everything else stays
dense, identical across methods); calibration = nsamples x seqlen tokens from the C4 train head
(seed 0); held-out text = C4 validation (perplexity on its first --max-windows windows, and the
attention error on two of them). For every sparsity and method it prints the attention error
(mean relative Frobenius error over layers x heads, and the worst row-wise total variation) on
calibration and held-out text, the perplexity, and seconds per layer; then the closed-form vs
autograd gradient time on one GQA group, and the empirical Lipschitz / PL constants of GD.
"""

from __future__ import annotations

import math
import time

import torch
from protocol import open_store, protocol_parser

METHODS = ("attention-gd", "magnitude", "wanda", "sparsegpt")


def gradient_timing(
    lm, calib_ids: torch.Tensor, layer: int, nseq: int
) -> tuple[float, float, float]:
    """Seconds of one closed-form and one autograd loss+gradient on GQA group 0 of ``layer``,
    and their gradients' relative difference."""
    from core.attention_compare import AttentionProbe
    from core.methods.attention_gd import group_loss_and_grad, group_loss_autograd, to_heads

    ad = lm.adapter
    probe = AttentionProbe.capture(ad, calib_ids[:nseq], "calib", "cpu")
    X = probe.X[layer]
    Wq, Wk = probe.dense[layer]
    r, hd = ad.n_heads // ad.n_kv_heads, ad.head_dim
    Wq_heads = to_heads(Wq, hd)[:r]  # (r, d, dh): group 0's query heads
    Wk_g = to_heads(Wk, hd)[0]  # (d, dh)
    gen = torch.Generator().manual_seed(0)
    Mq = 1 - 0.3 * torch.rand(Wq_heads.shape, generator=gen)
    Mk = 1 - 0.3 * torch.rand(Wk_g.shape, generator=gen)
    args = (X, Wq_heads, Wk_g, Mq, Mk, 1e-2, True, probe.rope)
    times = []
    grads = []
    for fn in (group_loss_and_grad, group_loss_autograd):
        fn(*args)  # warm-up
        t0 = time.perf_counter()
        res = fn(*args)
        times.append(time.perf_counter() - t0)
        grads.append(torch.cat([res.grad_q.flatten(), res.grad_k.flatten()]))
    rel = float((grads[0] - grads[1]).norm() / grads[1].norm())
    return times[0], times[1], rel


def main() -> None:
    ap = protocol_parser(__doc__, nsamples=8, seqlen=256, max_windows=32)
    ap.add_argument("--sparsities", type=float, nargs="+", default=[0.3, 0.5, 0.7])
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--option", action="append", default=[], help="attention-gd option KEY=VALUE")
    args = ap.parse_args()

    from core.config import CalibConfig, DataSpec, EvalConfig, ModelSpec, PruneConfig
    from core.requests import parse_options
    from core.runs import get_calib_windows, get_model, resolve_model_spec, run_prune

    store = open_store(args, "attngd-")
    model = ModelSpec(args.model, "auto", "auto")
    calib = CalibConfig(DataSpec("c4", "train", args.data_dir), args.nsamples, args.seqlen, 0)
    evalc = EvalConfig(DataSpec("c4", "validation", args.data_dir), args.seqlen, args.max_windows)
    gd_opts = parse_options(args.option)

    rows, gd_runs = [], []
    for s in args.sparsities:
        for method in args.methods:
            opts = gd_opts if method == "attention-gd" else ()
            res = run_prune(
                model, PruneConfig(method, s, targets="qk", options=opts), calib, evalc, store
            )
            m = res["metrics"]
            n_layers = m["model"]["n_layers"]
            rows.append(
                (
                    s,
                    method,
                    m["attn_fro_rel_calib"],
                    m["attn_fro_rel_heldout"],
                    m["attn_tv_max_heldout"],
                    m["ppl"],
                    m["prune_seconds"] / n_layers,
                )
            )
            if method == "attention-gd":
                gd_runs.append((s, res["run_id"]))
            print(
                f"  {method} {s:.0%}: held-out attention error {m['attn_fro_rel_heldout']:.4f}, "
                f"ppl {m['ppl']:.3f}",
                flush=True,
            )
    dense_ppl = m["dense_ppl"]

    print()
    print(
        f"model {args.model}; q_proj/k_proj pruned only; calibration C4 train head "
        f"{args.nsamples} x {args.seqlen} (seed 0); held-out C4 validation "
        f"({args.max_windows} windows of {args.seqlen}); dense ppl {dense_ppl:.3f}"
    )
    if gd_opts:
        print(f"attention-gd options: {dict(gd_opts)}")
    head = (
        f"{'sparsity':>8}  {'method':<14}{'attn err calib':>15}{'attn err held':>15}"
        f"{'TV max held':>13}{'ppl':>10}{'s/layer':>9}"
    )
    print(head)
    print("-" * len(head))
    for s, method, ec, eh, tv, ppl, spl in rows:
        print(f"{s:>8.0%}  {method:<14}{ec:>15.4f}{eh:>15.4f}{tv:>13.4f}{ppl:>10.3f}{spl:>9.2f}")

    # Who wins, per sparsity (lower held-out attention error / perplexity)
    print()
    for s in args.sparsities:
        sel = [r for r in rows if r[0] == s]
        best_err = min(sel, key=lambda r: r[3])[1]
        best_ppl = min(sel, key=lambda r: r[5])[1]
        print(
            f"{s:.0%}: lowest held-out attention error: {best_err}; lowest perplexity: {best_ppl}"
        )

    spec = resolve_model_spec(model)
    lm = get_model(spec, fresh=False)
    calib_ids, _ = get_calib_windows(lm, calib)
    layer = lm.adapter.n_layers // 2
    lm.model.to("cpu").float()
    t_cf, t_ag, rel = gradient_timing(lm, calib_ids, layer, min(args.nsamples, 8))
    print()
    print(
        f"gradient on layer {layer}, GQA group 0 ({lm.adapter.n_heads // lm.adapter.n_kv_heads} "
        f"query heads), {min(args.nsamples, 8)} x {args.seqlen} tokens, float32:"
    )
    print(
        f"  closed form {t_cf:.3f} s, autograd {t_ag:.3f} s (x{t_ag / t_cf:.1f}); "
        f"relative difference {rel:.2e}"
    )

    print()
    print("GD assumption checks (per head / key matrix, over the trajectory):")
    print(
        f"{'sparsity':>8}{'L_hat min':>12}{'L_hat max':>12}{'mu min':>12}{'mu max':>12}"
        f"{'as_predicted':>14}"
    )
    for s, run_id in gd_runs:
        traj = store.load(run_id).table("gd_trajectory")
        per = traj[traj["matrix"] != "group"].groupby(["layer", "group", "matrix", "head"])
        L_hat = per["lipschitz_est"].max().dropna()
        mu = per["pl_ratio"].min().dropna()
        heads = store.load(run_id).table("gd_heads")
        ok = (heads["group_verdict"] == "as_predicted").mean()
        fmt = lambda v: f"{v:>12.4g}" if math.isfinite(v) else f"{'nan':>12}"  # noqa: E731
        print(
            f"{s:>8.0%}{fmt(L_hat.min())}{fmt(L_hat.max())}{fmt(mu.min())}{fmt(mu.max())}{ok:>14.0%}"
        )


if __name__ == "__main__":
    main()
