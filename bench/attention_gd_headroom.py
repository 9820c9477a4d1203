"""Where attention-matrix GD fails against Wanda, per calibration size: the headroom table.

    python bench/attention_gd_headroom.py [--model smollm2-135m] [--seeds 0 1 2]
        [--headroom-layers 0 4 ... 28] [--headroom-sizes 8 16 36] [--seqlen 64]
        [--headroom-optimizer adam] [--headroom-steps 150] [--swap-evals 20]
        [--headroom-json FILE]
    python bench/attention_gd_headroom.py --smoke      (tiny-llama, pydoc, seconds)

Protocol (fixed before the run). The embedded model, Q/K only at 50 % (row scope), layers
0, 4, ..., 28 pruned layer-wise from dense inputs; on each layer one GQA group is judged
(group = layer mod KV heads: its r query heads and their KV head, so every group position
is judged across the layers) to keep the whole run near 8 minutes on 2 CPU cores. Per
calibration seed, 36 C4-train windows of 64 tokens are drawn once; the calibration sizes are
their first 8 (the paper's 8 sequences, 512 tokens < d = 576), 16 (1024 tokens) and 36
(2304 tokens = 4·d), so the sizes are nested. Held-out: 16 C4-validation windows of 64 tokens,
the same for every seed and size. Rows, all from the same inputs:
  magnitude, wanda: Q/K-only baselines.
  sparsegpt: OBS with H = 2XᵀX/n from the calibration tokens (whole matrices, then the
    group's rows); H has rank ≤ tokens, so at 512 tokens (< d) it is rank-deficient (held up
    only by SparseGPT's percdamp, marked "H<d") and full rank from 1024 tokens on.
  obd (attention H): the second-order saliency of attention-gd's own objective (Optimal
    Brain Damage): keep per row the entries of largest ½·[∇²L]_mm at M = 1, the exact
    diagonal of the data term's Hessian there (``core.methods.attention_gd.saliency``); no
    reconstruction, no optimiser. flip and agree W against Wanda's mask.
  gd M0=wanda / gd M0=1: attention-gd's objective (default λ_rel) from Wanda's keep mask and
    from ones, optimiser ``--headroom-optimizer`` with tol 1e-5 and a cap of
    ``--headroom-steps`` steps; binarised by M per row. Adam is the default because a pilot
    (seed 0, layers 8 and 20, group 0, 512 tokens, caps 40/150/400) gave it the lowest loss
    at every cap (layer 8, cap 150: GD 1.44, L-BFGS 0.44, Adam 0.37 from 3.45). "converged":
    fraction of groups that reached the tolerance (Adam rarely does: its steps do not shrink);
    "cont": the relative attention error of the continuous M_T (the relaxation's own value,
    penalty left out) against the row's calib error, that of bin(M_T): the relaxation gap;
    delta: ‖M_T − M₀‖/‖M₀‖; flip: fraction of keep decisions that differ from bin(M₀);
    agree W: kept entries shared with Wanda's mask.
  swap from wanda: ``core.methods.attention_gd.swaps.swap_search`` on the binarised objective
    from Wanda's mask, at most ``--swap-evals`` evaluations per group: the in-sample headroom
    the objective offers near Wanda's mask, and whether it carries to held-out data.
  gd M0=wanda + swap: the same swap search from bin(M_T) of the "gd M0=wanda" row (a reading
    attention-gd can run: optimizer, then ``refine="swap"``); flip and agree W against Wanda.
  gd polytope / gd anneal / gd topk: the budget-keeping relaxations (``relax=`` of
    attention-gd, ``core.methods.attention_gd.relax``) from Wanda's keep mask with the same
    optimiser and cap; each also "+ swap" (the swap search from its binarised mask).
Errors: relative attention error ‖P̃ − P‖_F/‖P‖_F, mean over the group's heads, mean over
layers; then mean ± std over the seeds. "cont": the relative error of the continuous M_T
projected onto the budget's polytope (``relax.Budget.project``; for "topk" its binary top k),
never of a dense M_T.

Attribution: ``core.methods.attention_gd.attribution`` (its ``RULE``, docs/design-notes.md),
for "gd M0=wanda" (the default's descent) and each budget relaxation's row. The default: the
rule of ``core.analysis.gd_choice`` (a budget row replaces it only by beating "swap
from wanda" held out by an interval excluding 0 at every size). Both rules' outputs and the
JSON the pages read (``--headroom-json``; ``headroom_<model>.json`` beside
``core.methods.attention_gd.headroom``): ``core.analysis.gd_headroom``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import transformers
from protocol import protocol_parser

from core.analysis.gd_choice import COMPARATOR
from core.analysis.gd_headroom import attributions, default_choice, headroom_record, mean_sd, stages
from core.evaluation.attention_error import AttentionProbe, form
from core.evaluation.attention_ops import attention_errors, attention_probs, rope_tables
from core.methods.attention_gd import AttentionGDOptions, binarize, gd_prune_group, initial_mask
from core.methods.attention_gd.objective import GroupProblem, to_heads, to_linear
from core.methods.attention_gd.relax import Budget
from core.methods.attention_gd.saliency import obd_keep
from core.methods.attention_gd.swaps import swap_search
from core.methods.masks import score_mask
from core.methods.sparsegpt import sparsegpt_prune
from core.methods.wanda import wanda_scores
from core.runs import get_calib_windows, get_eval_windows, get_model
from core.settings.config import CalibConfig, DataSpec, EvalConfig, ModelSpec

SPARSITY = 0.5
TOL = 1e-5
OBD = "obd (attention H)"
BUDGET_ROWS = {"gd polytope": "polytope", "gd anneal": "anneal", "gd topk": "topk"}
GD_ROWS = {"gd M0=wanda": ("wanda_mask", "free"), "gd M0=1": ("ones", "free")}
GD_ROWS |= {name: ("wanda_mask", relax) for name, relax in BUDGET_ROWS.items()}
# swap rows: name -> the row whose binary mask the swap search starts from
SWAPS = {"swap from wanda": "wanda", "gd M0=wanda + swap": "gd M0=wanda"}
SWAPS |= {f"{name} + swap": name for name in BUDGET_ROWS}
ROWS = ("magnitude", "wanda", "sparsegpt", OBD, *GD_ROWS, *SWAPS)
SMOKE = {"model": "tiny-llama", "seeds": [0, 1], "headroom_layers": [0, 1],
         "headroom_sizes": [2, 4], "seqlen": 16, "headroom_steps": 4, "swap_evals": 2}  # fmt: skip


def attn_error(X, dense, pruned, geo, rope, qk_form=None) -> float:
    """Mean over heads of ‖P̃ − P‖_F/‖P‖_F on X (N, L, d), pooled over the sequences;
    ``qk_form``: the layer's family form (core.evaluation.attention_error.form)."""
    fro2 = dense2 = 0.0
    for x in X.split(2):
        P = attention_probs(x, *dense, *geo, True, rope, qk_form)
        Pp = attention_probs(x, *pruned, *geo, True, rope, qk_form)
        fro2 = fro2 + attention_errors(P, Pp)["fro"].square()
        dense2 = dense2 + P.square().sum((0, 2, 3))
    return float((fro2 / dense2).sqrt().mean())


def baseline(name: str, W: torch.Tensor, X: torch.Tensor, s: float) -> torch.Tensor:
    flat = X.reshape(-1, X.shape[-1])
    if name == "magnitude":
        return W * ~score_mask(W.abs(), s, "row")
    if name == "wanda":
        return W * ~score_mask(wanda_scores(W, flat.square().sum(0)), s, "row")
    return sparsegpt_prune(W, 2 * flat.T @ flat / flat.shape[0], s)[0]


def parse(argv: list[str] | None = None):
    ap = protocol_parser(__doc__, nsamples=4, seqlen=64, max_windows=16)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--headroom-layers", type=int, nargs="+", default=list(range(0, 30, 4)))
    ap.add_argument("--headroom-sizes", type=int, nargs="+", default=[8, 16, 36])
    ap.add_argument("--headroom-optimizer", default="adam", choices=["gd", "adam", "lbfgs"])
    ap.add_argument("--headroom-steps", type=int, default=150)
    ap.add_argument("--swap-evals", type=int, default=20)
    ap.add_argument("--headroom-json", default=None, help="also write the table as JSON here")
    ap.add_argument("--headroom", action="store_true", help=argparse.SUPPRESS)  # the only mode
    ap.add_argument("--smoke", action="store_true", help="tiny-llama on pydoc text, seconds")
    args = ap.parse_args(argv)
    args.data = ("c4", "train"), ("c4", "validation")
    if args.smoke:
        vars(args).update(SMOKE)
        args.data = ("pydoc", "train"), ("pydoc", "test")
    return args


class GroupErrors:
    """Relative attention error of one GQA group's r heads on windows X (N, L, d): the dense
    probabilities are computed once; ``error`` is the mean over the heads of
    ‖P̃_h − P_h‖_F/‖P_h‖_F pooled over the windows."""

    def __init__(self, X, Wq, Wk, rope, r: int, head_dim: int) -> None:
        self.X, self.rope, self.geo = X.split(4), rope, (r, 1, head_dim)
        self.P = [attention_probs(x, Wq, Wk, *self.geo, True, rope) for x in self.X]
        self.dense2 = sum(P.square().sum((0, 2, 3)) for P in self.P)

    def error(self, Wq, Wk) -> float:
        fro2 = sum(
            (attention_probs(x, Wq, Wk, *self.geo, True, self.rope) - P).square().sum((0, 2, 3))
            for x, P in zip(self.X, self.P, strict=True)
        )
        return float((fro2 / self.dense2).sqrt().mean())


def gd_group(X, Wq, Wk, rope, opts, start: str, col_sq, head_dim: int):
    """The optimiser on one group's rows Wq (r·d_h, d), Wk (d_h, d) from M₀ = ``start`` with
    ``opts.relax``; (keep masks, binarised M₀, diagnostics, the group's problem). "cont": the
    relative error of M_T on the budget's polytope (its binary top k for "topk")."""
    M0 = [initial_mask(W, start, col_sq, None, SPARSITY, "row") for W in (Wq, Wk)]
    start_keep = [binarize(M, SPARSITY, "row") for M in M0]
    budget = Budget(start_keep[0].sum(-1), start_keep[1].sum(-1))
    res = gd_prune_group(
        X, to_heads(Wq, head_dim), Wk.T, opts, rope, to_heads(M0[0], head_dim), M0[1].T,
        budget=budget if opts.relax != "free" else None,
    )  # fmt: skip
    at = budget.binary if opts.relax == "topk" else budget.project
    data = res.problem.data_terms(*at(res.Mq, res.Mk))[0]
    cont = ((2 * data).sqrt() / res.problem.dense_norms()).mean().item()
    keep = [binarize(to_linear(res.Mq), SPARSITY, "row"), binarize(res.Mk.T, SPARSITY, "row")]
    info = {
        "cont": cont,
        "delta": res.mask_delta,
        "converged": float(res.converged),
        "steps": float(res.trajectory[-1]["step"]),
    }
    return keep, start_keep, info, res.problem


def overlap(keep, start, wanda) -> dict[str, float]:
    """flip: fraction of (q, k) keep decisions differing from ``start``; agree: kept entries
    shared with Wanda's keep masks."""
    n = sum(k.numel() for k in keep)
    kept = sum(int(k.sum()) for k in keep)
    return {
        "flip": sum(int((a != b).sum()) for a, b in zip(keep, start, strict=True)) / n,
        "agree": sum(int((a & b).sum()) for a, b in zip(keep, wanda, strict=True)) / kept,
    }


def layer_rows(i, X, Xh, dense, ropes, lm, args) -> dict[str, dict[str, float]]:
    """Every row on GQA group i mod n_kv of layer i at one calibration size."""
    ad = lm.adapter
    hd, n_kv = ad.head_dim, ad.n_kv_heads
    r = ad.n_heads // n_kv
    g = i % n_kv
    qs, ks = slice(g * r * hd, (g + 1) * r * hd), slice(g * hd, (g + 1) * hd)
    Wq, Wk = dense
    Wqg, Wkg = Wq[qs], Wk[ks]
    cal = GroupErrors(X, Wqg, Wkg, ropes[0], r, hd)
    held = GroupErrors(Xh, Wqg, Wkg, ropes[1], r, hd)
    col_sq = X.reshape(-1, X.shape[-1]).square().sum(0)
    wanda_keep = [~score_mask(wanda_scores(W, col_sq), SPARSITY, "row") for W in (Wqg, Wkg)]
    rope = rope_tables((ropes[0][0][None], ropes[0][1][None]), X.shape[1], torch.float32, "cpu")
    out: dict[str, dict[str, float]] = {}
    keeps, problem = {"wanda": wanda_keep}, None
    for name in ROWS:
        t0 = time.perf_counter()
        extra: dict[str, float] = {}
        if name in ("magnitude", "wanda", "sparsegpt"):  # whole matrices, then the group's rows
            pruned = (baseline(name, Wq, X, SPARSITY)[qs], baseline(name, Wk, X, SPARSITY)[ks])
        elif name == OBD:
            keep = obd_keep(
                GroupProblem(X, to_heads(Wqg, hd), Wkg.T, True, rope),
                dict.fromkeys("qk", SPARSITY),
            )
            extra.update(overlap(keep, wanda_keep, wanda_keep))
            pruned = (Wqg * keep[0], Wkg * keep[1])
        elif name in GD_ROWS:
            start, relax = GD_ROWS[name]
            opts = AttentionGDOptions(
                optimizer=args.headroom_optimizer, steps=args.headroom_steps, tol=TOL,
                power_iters=1, checks="none", relax=relax,
            )  # fmt: skip
            keep, start_keep, extra, prob = gd_group(X, Wqg, Wkg, rope, opts, start, col_sq, hd)
            keeps[name], problem = keep, problem or prob
            extra.update(overlap(keep, start_keep, wanda_keep))
            pruned = (Wqg * keep[0], Wkg * keep[1])
        else:
            start_keep = keeps[SWAPS[name]]
            sw = swap_search(problem, to_heads(start_keep[0], hd), start_keep[1].T, args.swap_evals)
            keep = [to_linear(sw.keep_q), sw.keep_k.T]
            extra.update(overlap(keep, wanda_keep, wanda_keep))
            pruned = (Wqg * keep[0], Wkg * keep[1])
        out[name] = {
            "calib": cal.error(*pruned),
            "held": held.error(*pruned),
            **extra,
            "t": time.perf_counter() - t0,
        }
    return out


def headroom(args, lm) -> None:
    """Run the protocol of the module docstring and print the table and the attribution."""
    t_start = time.perf_counter()
    ad = lm.adapter
    held_ids, _ = get_eval_windows(
        lm, EvalConfig(DataSpec(*args.data[1], args.data_dir), args.seqlen, 16)
    )
    sizes = sorted(args.headroom_sizes)
    for i in args.headroom_layers:
        f = form(ad, i)
        if any(t is not None for t in (f.bq, f.bk, f.q_gain, f.k_gain)):
            raise SystemExit(f"layer {i} has q/k biases or norms; not covered")
    # res[(size, row)] -> per seed: {key: mean over layers}; held[row][size]: (seeds, layers)
    res: dict[tuple[int, str], list[dict[str, float]]] = {}
    held: dict[str, dict[int, list[list[float]]]] = {name: {n: [] for n in sizes} for name in ROWS}
    for seed in args.seeds:
        calib = CalibConfig(DataSpec(*args.data[0], args.data_dir), sizes[-1], args.seqlen, seed)
        ids, _ = get_calib_windows(lm, calib)
        pc = AttentionProbe.capture(ad, ids, "calib", "cpu")
        ph = AttentionProbe.capture(ad, held_ids, "heldout", "cpu", dense=pc.dense)
        for n in sizes:
            per_layer = [
                layer_rows(
                    i, pc.X[i][:n], ph.X[i], pc.dense[i], (pc.ropes[i], ph.ropes[i]), lm, args
                )
                for i in args.headroom_layers
            ]
            for name in ROWS:
                keys = per_layer[0][name].keys()
                row = {k: statistics.mean(lr[name][k] for lr in per_layer) for k in keys}
                res.setdefault((n, name), []).append(row)
                held[name][n].append([lr[name]["held"] for lr in per_layer])
            print(
                f"  seed {seed}, {n} x {args.seqlen} tokens: "
                + ", ".join(f"{nm} {res[(n, nm)][-1]['calib']:.4f}" for nm in ROWS),
                flush=True,
            )
    print_table(args, res, held, sizes, ad)
    if args.headroom_json:
        protocol = {
            "model": args.model, "sparsity": SPARSITY, "layers": args.headroom_layers,
            "seeds": args.seeds, "optimizer": args.headroom_optimizer,
            "steps": args.headroom_steps, "swap_evals": args.swap_evals,
        }  # fmt: skip
        path = Path(args.headroom_json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(headroom_record(protocol, args.seqlen, res, held, sizes), indent=1)
        )
        print(f"wrote {path}")
    print(f"\nheadroom wall time {(time.perf_counter() - t_start) / 60:.1f} min")


def print_table(args, res, held, sizes, ad) -> None:
    d = ad.hidden_size
    rows = list(held)
    print()
    print(
        f"headroom: model {args.model}, Q/K only, {SPARSITY:.0%} per row; layers "
        f"{args.headroom_layers} layer-wise from dense inputs, GQA group = layer mod "
        f"{ad.n_kv_heads} judged on each; seeds {args.seeds}; held-out 16 C4 "
        f"validation windows of {args.seqlen}; GD: {args.headroom_optimizer}, tol {TOL:g}, cap "
        f"{args.headroom_steps} steps, default λ_rel; swap search: <= {args.swap_evals} "
        f"evaluations per group; errors mean over layers, ± std over seeds; cont: M_T on the "
        f"budget's polytope"
    )
    head = (
        f"{'tokens':>7}  {'row':<22}{'calib err':>17}{'held-out err':>17}"
        f"{'cont err':>9}{'delta':>7}{'flip':>7}{'agree W':>8}{'conv':>6}{'steps':>6}{'s/layer':>8}"
    )
    print(head)
    print("-" * len(head))
    for n in sizes:
        tokens = n * args.seqlen
        for name in rows:
            cells = res[(n, name)]
            c, h = mean_sd(cells, "calib"), mean_sd(cells, "held")
            label = "sparsegpt (H<d)" if name == "sparsegpt" and tokens < d else name

            def opt(key, fmt, cells=cells):
                return format(mean_sd(cells, key)[0], fmt) if key in cells[0] else "-"

            print(
                f"{tokens:>7}  {label:<22}{c[0]:>9.4f} ± {c[1]:.4f}{h[0]:>9.4f} ± {h[1]:.4f}"
                f"{opt('cont', '.4f'):>9}{opt('delta', '.3f'):>7}{opt('flip', '.3f'):>7}"
                f"{opt('agree', '.3f'):>8}"
                f"{opt('converged', '.2f'):>6}{opt('steps', '.0f'):>6}{opt('t', '.2f'):>8}"
            )
    print()
    print(
        f"{'tokens':>7}  {'row judged':<16}{'g_obj':>9}{'g_cont':>9}{'g_bin':>9}{'g_held':>9}  gap"
    )
    for n in sizes:
        for row, label in attributions(res, n).items():
            g = stages(res, n, row).gains()
            print(
                f"{n * args.seqlen:>7}  {row:<16}{g['obj']:>9.4f}{g['cont']:>9.4f}"
                f"{g['bin']:>9.4f}{g['held']:>9.4f}  {label}"
            )
    causes = {n * args.seqlen: attributions(res, n)["gd M0=wanda"] for n in sizes}
    print(
        "\nWhere attention-gd's descent loses its gain over Wanda, by calibration tokens: "
        + "; ".join(f"{t}: {c}" for t, c in causes.items())
        + f" (rule: core/methods/attention_gd/attribution.py; d = {d})."
    )
    row, why, diffs = default_choice(held, sizes)
    print(f"\nheld-out error − {COMPARATOR!r} (paired over seeds and layers, 95 % interval):")
    for cand, per in diffs.items():
        cells = "  ".join(f"{n * args.seqlen}: {iv}" for n, iv in sorted(per.items()))
        print(f"  {cand:<22}{cells}")
    print(f"default (core/analysis/gd_choice.py): {why}.")


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    torch.manual_seed(0)
    transformers.utils.logging.set_verbosity_error()  # the script prints its own table
    headroom(args, get_model(ModelSpec(args.model, "cpu", "float32"), fresh=False))


if __name__ == "__main__":
    main()
