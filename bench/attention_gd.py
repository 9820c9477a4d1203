"""Attention-matrix GD pruning (Paper B): where it fails against Wanda, and which GD reading.

    python bench/attention_gd.py [--seeds 0 1 2] [--headroom-layers 0 4 ... 28]
        [--headroom-sizes 8 16 36] [--headroom-json FILE] ...
        (the default: the headroom table, 8 layers x 3 seeds x calibration sizes 8 sequences
        to 4·d tokens, and the sentence locating the failure; protocol and attribution rule in
        bench/attention_gd_headroom.py; ~5 min on 2 cores)
    python bench/attention_gd.py --spectrum | --mu-lambda [--spectrum-layer 8]
        (one group's Hessian spectrum by Lanczos, stored as the layer controls' density;
        μ̂ against λ_rel on that group and on a control with known μ(λ):
        bench/attention_gd_spectrum.py)
    python bench/attention_gd.py --power
        (the assumption rule's power on the layer-matched controls at the production budget,
        stored for the pages, and the production tally beside what the controls predict)
    python bench/attention_gd.py --readings [--sparsities 0.3 0.5 0.7] [--seeds 0 1 2]
        [--layers 15] [--ppl-sparsities 0.5] [--nsamples 4] [--seqlen 64] [--max-windows 16]
        [--steps 20] [--store DIR]
        (the earlier sweep of plain-GD readings below)

Protocol of --readings. The embedded model; only q_proj/k_proj are pruned, everything else stays
dense. For every calibration seed (C4 train, nsamples × seqlen tokens) the dense q_proj inputs
of the sweep layers are captured once; every GD configuration and the three baselines prune
those layers from the same inputs (layer-wise, not sequential), and the relative attention
error ‖P̃ − P‖_F/‖P‖_F (mean over the layers' heads) is measured on the calibration windows
and on 4 held-out C4 validation windows. The default is the configuration with the lowest
calibration error averaged over the sparsities (chosen before looking at held-out numbers);
the table reports held-out mean ± std over seeds, the GD masks' agreement with the magnitude
and Wanda masks, and seconds per layer. Then, for seed 0 only, perplexity (C4 validation,
--max-windows windows of 256, at --ppl-sparsities) of the chosen default and of the three baselines
through the full pipeline (Q/K-only, all layers, sequential calibration; assumption checks off
there), and the chosen default's seconds per layer on 8 × 256 tokens with and without the checks.
"""

from __future__ import annotations

import statistics
import time

import torch
from attention_gd_headroom import add_args, attn_error, baseline, headroom
from attention_gd_spectrum import add_args as add_spectrum_args
from attention_gd_spectrum import mu_lambda, power_report, spectrum
from protocol import open_store, protocol_parser
from torch import nn

from core.evaluation.attention_error import AttentionProbe, form
from core.methods.attention_gd import AttentionGD, AttentionGDOptions
from core.methods.attention_gd.options import CHECKS
from core.methods.base import LayerContext, LinearStats
from core.runs import get_calib_windows, get_eval_windows, get_model, run_prune
from core.settings.config import CalibConfig, DataSpec, EvalConfig, ModelSpec, PruneConfig

# The readings of this sweep are plain GD as Paper B runs it, on the windows the sweep was
# written for (the defaults moved to Adam + swap search after --headroom; issue 32).
PAPER_GD = {"optimizer": "gd", "refine": "none", "tol": 1e-3, "max_len": 256}
# GD readings swept (fixed before the run). Everything else: PAPER_GD, then the defaults.
CONFIGS: dict[str, dict] = {
    "paper: M0=1, |M*W|": {"init": "ones", "binarize": "mask_times_weight"},
    "M0=1, M": {"init": "ones", "binarize": "mask"},
    "M0=magnitude, M": {"init": "magnitude", "binarize": "mask"},
    "M0=wanda, M": {"init": "wanda", "binarize": "mask"},
    "M0=random, M": {"init": "random", "binarize": "mask"},
    "M0=wanda, M, anneal": {"init": "wanda", "binarize": "mask", "lam_schedule": "anneal"},
    "M0=wanda mask, M": {"init": "wanda_mask", "binarize": "mask"},
}
# Supplementary readings (not in the default sweep): a penalty large enough to matter.
EXTRA_CONFIGS: dict[str, dict] = {
    "M0=wanda, M, lam=1": {"init": "wanda", "binarize": "mask", "lam": 1.0},
    "M0=wanda, M, lam=1, anneal": {
        "init": "wanda",
        "binarize": "mask",
        "lam": 1.0,
        "lam_schedule": "anneal",
    },
    "M0=1, M, lam=1": {"init": "ones", "binarize": "mask", "lam": 1.0},
}
CONFIGS_ALL = {name: {**PAPER_GD, **cfg} for name, cfg in {**CONFIGS, **EXTRA_CONFIGS}.items()}
BASELINES = ("magnitude", "wanda", "sparsegpt")


def gd_layer(lm, i: int, X, Wq, Wk, rope, s: float, opts: AttentionGDOptions):
    """The registered method on one layer from cached inputs: pruned (Wq, Wk), q report."""
    ad = lm.adapter
    linears = {}
    for role, W in (("q", Wq), ("k", Wk)):
        lin = nn.Linear(W.shape[1], W.shape[0], bias=False)
        lin.weight.data.copy_(W)
        linears[role] = lin
    flat = X.reshape(-1, X.shape[-1])
    stats = LinearStats(flat.T @ flat, flat.shape[0])
    ctx = LayerContext(
        i,
        ad.n_layers,
        ad.layers[i],
        ad,
        linears,
        {"q": stats, "k": stats},
        {"q": X},
        {"q": s, "k": s},
        "unstructured",
        torch.device("cpu"),
        None if rope is None else (rope[0][None], rope[1][None]),
    )
    reports = AttentionGD(opts).prune_layer(ctx)
    return (linears["q"].weight.detach(), linears["k"].weight.detach()), reports[0]


def mean_std(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.4f} ± {statistics.stdev(xs) if len(xs) > 1 else 0.0:.4f}"


def main() -> None:
    ap = protocol_parser(__doc__, nsamples=4, seqlen=64, max_windows=16)
    ap.add_argument("--sparsities", type=float, nargs="+", default=[0.3, 0.5, 0.7])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--layers", type=int, nargs="+", default=[15])
    ap.add_argument("--steps", type=int, default=20, help="GD cap of the sweep's readings")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS_ALL))
    ap.add_argument("--ppl-sparsities", type=float, nargs="*", default=[0.5])
    ap.add_argument("--timing-checks", nargs="*", default=list(CHECKS), choices=list(CHECKS))
    add_args(ap)
    add_spectrum_args(ap)
    args = ap.parse_args()
    if args.power:  # no model: the layer-matched controls (bench/attention_gd_spectrum.py)
        power_report(args)
        return
    t_start = time.perf_counter()
    torch.manual_seed(0)
    store = open_store(args, "attngd-")
    model = ModelSpec(args.model, "cpu", "float32")
    lm = get_model(model, fresh=False)
    if args.spectrum or args.mu_lambda:  # bench/attention_gd_spectrum.py
        for wanted, run in ((args.spectrum, spectrum), (args.mu_lambda, mu_lambda)):
            if wanted:
                run(args, lm)
        return
    if not args.readings:  # the headroom table is the default (issue 32's done-when)
        headroom(args, lm)
        return
    ad = lm.adapter
    geo = (ad.n_heads, ad.n_kv_heads, ad.head_dim)
    evalc = EvalConfig(DataSpec("c4", "validation", args.data_dir), args.seqlen, 4)
    held_ids, _ = get_eval_windows(lm, evalc)
    # res[(name, s)] -> per seed: dict(calib, held, agree_m, agree_w, delta, spl)
    res: dict[tuple[str, float], list[dict]] = {}
    for seed in args.seeds:
        calib = CalibConfig(
            DataSpec("c4", "train", args.data_dir), args.nsamples, args.seqlen, seed
        )
        ids, _ = get_calib_windows(lm, calib)
        pc = AttentionProbe.capture(ad, ids, "calib", "cpu")
        ph = AttentionProbe.capture(ad, held_ids, "heldout", "cpu", dense=pc.dense)
        for s in args.sparsities:
            for name in [*BASELINES, *args.configs]:
                acc = {"calib": [], "held": [], "agree_m": [], "agree_w": [], "delta": [], "t": []}
                for i in args.layers:
                    X, (Wq, Wk) = pc.X[i], pc.dense[i]
                    t0 = time.perf_counter()
                    if name in BASELINES:
                        pruned = (baseline(name, Wq, X, s), baseline(name, Wk, X, s))
                    else:
                        opts = AttentionGDOptions(
                            **CONFIGS_ALL[name], steps=args.steps, checks="none", seed=seed
                        )
                        pruned, rep = gd_layer(lm, i, X, Wq, Wk, pc.ropes[i], s, opts)
                        acc["agree_m"].append(rep.extra["agree_magnitude"])
                        acc["agree_w"].append(rep.extra["agree_wanda"])
                        acc["delta"].append(rep.extra["mask_delta"])
                    acc["t"].append(time.perf_counter() - t0)
                    f = form(ad, i)
                    acc["calib"].append(attn_error(X, (Wq, Wk), pruned, geo, pc.ropes[i], f))
                    acc["held"].append(attn_error(ph.X[i], (Wq, Wk), pruned, geo, ph.ropes[i], f))
                row = {k: statistics.mean(v) if v else float("nan") for k, v in acc.items()}
                res.setdefault((name, s), []).append(row)
                print(
                    f"  seed {seed} {s:.0%} {name}: calib {row['calib']:.4f} held {row['held']:.4f}"
                    f" ({row['t']:.1f} s/layer)",
                    flush=True,
                )

    def avg(name: str, key: str) -> float:
        return statistics.mean(r[key] for s in args.sparsities for r in res[(name, s)])

    chosen = min(args.configs, key=lambda n: avg(n, "calib"))
    print()
    print(
        f"model {args.model}; Q/K only; layers {args.layers} pruned layer-wise from dense inputs; "
        f"calibration C4 train {args.nsamples} x {args.seqlen}, seeds {args.seeds}; held-out "
        f"4 C4 validation windows of {args.seqlen}; GD cap {args.steps} steps, checks off"
    )
    head = (
        f"{'sparsity':>8}  {'configuration':<22}{'seeds':>6}{'calib err':>11}"
        f"{'held-out err (mean ± std)':>27}{'agree mag':>10}{'agree wanda':>12}"
        f"{'|M_T-M0|':>10}{'s/layer':>9}"
    )
    print(head)
    print("-" * len(head))
    for s in args.sparsities:
        for name in [*BASELINES, *args.configs]:
            rows = res[(name, s)]
            mark = " *" if name == chosen else ""
            print(
                f"{s:>8.0%}  {(name + mark):<22}{len(rows):>6}"
                f"{statistics.mean(r['calib'] for r in rows):>11.4f}"
                f"{mean_std([r['held'] for r in rows]):>27}"
                f"{statistics.mean(r['agree_m'] for r in rows):>10.3f}"
                f"{statistics.mean(r['agree_w'] for r in rows):>12.3f}"
                f"{statistics.mean(r['delta'] for r in rows):>10.3f}"
                f"{statistics.mean(r['t'] for r in rows):>9.2f}"
            )
    print()
    print(
        f"chosen default (lowest calibration attention error over sparsities): {chosen} "
        f"= {CONFIGS_ALL[chosen]}"
    )
    for s in args.sparsities:
        best = min(
            [*BASELINES, *args.configs],
            key=lambda n: statistics.mean(r["held"] for r in res[(n, s)]),
        )
        gd = statistics.mean(r["held"] for r in res[(chosen, s)])
        wa = statistics.mean(r["held"] for r in res[("wanda", s)])
        print(
            f"{s:.0%}: lowest held-out attention error: {best}; "
            f"chosen GD {gd:.4f} vs Wanda {wa:.4f}"
        )

    if args.ppl_sparsities:
        perplexities(args, model, chosen, store)
    timing(lm, chosen, args)
    print(f"\nbench wall time {(time.perf_counter() - t_start) / 60:.1f} min")


def perplexities(args, model, chosen: str, store) -> None:
    calib = CalibConfig(DataSpec("c4", "train", args.data_dir), args.nsamples, args.seqlen, 0)
    evalc = EvalConfig(DataSpec("c4", "validation", args.data_dir), 256, args.max_windows)
    print()
    print(
        f"perplexity, seed 0, full pipeline (Q/K only, {model.name}), C4 validation "
        f"{args.max_windows} x 256:"
    )
    print(
        f"{'sparsity':>8}  {'method':<22}{'ppl':>9}{'held-out err':>14}{'agree mag':>10}"
        f"{'agree wanda':>12}{'gd verdict':>14}{'s/layer':>9}"
    )
    dense = None
    for s in args.ppl_sparsities:
        for name in [chosen, *BASELINES]:
            if name in BASELINES:
                prune = PruneConfig(name, s, targets="qk")
            else:
                opts = {**CONFIGS_ALL[name], "steps": args.steps, "checks": "none"}
                prune = PruneConfig("attention-gd", s, targets="qk", options=tuple(opts.items()))
            m = run_prune(model, prune, calib, evalc, store)["metrics"]
            dense = m["dense_ppl"]
            held = m.get("attn_fro_rel_heldout", float("nan"))
            print(
                f"{s:>8.0%}  {name:<22}{m['ppl']:>9.3f}{held:>14.4f}"
                f"{m.get('mask_agreement_magnitude', float('nan')):>10.3f}"
                f"{m.get('mask_agreement_wanda', float('nan')):>12.3f}"
                f"{m.get('gd_verdict', '-'):>14}"
                f"{m['prune_seconds'] / m['model']['n_layers']:>9.2f}",
                flush=True,
            )
    print(f"dense ppl {dense:.3f}")


def timing(lm, chosen: str, args) -> None:
    """Seconds per layer of the chosen default on 8 × 256 calibration tokens (layer 15)."""
    calib = CalibConfig(DataSpec("c4", "train", args.data_dir), 8, 256, 0)
    ids, _ = get_calib_windows(lm, calib)
    pc = AttentionProbe.capture(lm.adapter, ids, "calib", "cpu")
    i = min(15, lm.adapter.n_layers - 1)
    print()
    for checks in args.timing_checks:
        opts = AttentionGDOptions(**CONFIGS_ALL[chosen], checks=checks)
        t0, c0 = time.perf_counter(), time.process_time()
        _, rep = gd_layer(lm, i, pc.X[i], *pc.dense[i], pc.ropes[i], 0.5, opts)
        tag = " (the default)" if checks == AttentionGDOptions.checks else ""
        print(
            f"chosen default, 8 x 256 tokens, layer {i}, 50%, checks={checks}{tag}: "
            f"{time.perf_counter() - t0:.2f} s/layer wall, {time.process_time() - c0:.2f} s CPU "
            f"on {torch.get_num_threads()} thread(s) ({rep.extra['gd_steps']} steps max, "
            f"{rep.extra['gd_evaluations']} evaluations; goal <= 5 s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
