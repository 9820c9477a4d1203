"""Representation dimension: SliceGPT sweep against Paper A's relation, and the effective
dimension of Wanda / SparseGPT models.

    python bench/repdim_sweep.py [--sparsities 0,0.1,...,0.6] [--store DIR]

Protocol (issue #4): the embedded model; SliceGPT calibrated on 32 x 512 tokens of the
WikiText-2 train subset (seed 42); Wanda / SparseGPT calibrated on 32 x 512 tokens of the C4
train head (seed 0) at 30/50/70% unstructured; evaluation on the first 64 windows of 512
tokens of WikiText-2 test. Prints the sweep table (d′, parameters, measured and predicted
perplexity, relative error; fit a, b, R²) and, for every run, its effective dimension and the
perplexity the relation predicts from it.
"""

from __future__ import annotations

from protocol import open_store, protocol_parser


def main() -> None:
    ap = protocol_parser(__doc__, nsamples=32, seqlen=512, max_windows=64)
    ap.add_argument("--sparsities", default="0,0.1,0.2,0.3,0.4,0.5,0.6")
    ap.add_argument("--others", default="0.3,0.5,0.7", help="Wanda/SparseGPT sparsities")
    args = ap.parse_args()

    from core.config import CalibConfig, DataSpec, EvalConfig, ModelSpec, PruneConfig
    from core.runs import effdim_report, run_prune, run_sweep

    store = open_store(args, "repdim-")
    model = ModelSpec(args.model)
    evalc = EvalConfig(DataSpec("wikitext2", "test", args.data_dir), args.seqlen, args.max_windows)
    wiki = CalibConfig(
        DataSpec("wikitext2", "train", args.data_dir), args.nsamples, args.seqlen, 42
    )
    c4 = CalibConfig(DataSpec("c4", "train", args.data_dir), args.nsamples, args.seqlen, 0)
    grid = tuple(float(s) for s in args.sparsities.split(","))

    sweep = run_sweep(model, grid, wiki, evalc, store)
    m = sweep["metrics"]
    table = store.load(sweep["run_id"]).table("sweep")
    ids = [sweep["run_id"], *table["run_id"]]
    print(
        f"model {args.model}; SliceGPT calibrated on WikiText-2 train subset {args.nsamples} x "
        f"{args.seqlen} (seed 42); eval WikiText-2 test, first {args.max_windows} windows of "
        f"{args.seqlen}; PPL0 = {m['ppl0']:.3f}, d = {m['d']}"
    )
    head = (
        f"{'s':>5}{'s_eff':>7}{'d′':>6}{'params':>13}{'layer params':>14}{'ppl':>10}"
        f"{'predicted':>12}{'rel.err':>9}{'ms/fwd':>9}"
    )
    print(head)
    print("-" * len(head))
    for r in table.itertuples():
        print(
            f"{r.s:>5.2f}{r.s_eff:>7.3f}{r.d_prime:>6d}{r.params:>13,}{r.layer_params:>14,}"
            f"{r.ppl:>10.3f}{r.predicted_ppl:>12.3f}{r.rel_error:>9.3f}{r.latency_ms:>9.1f}"
        )
    print(
        f"dense forward {table['latency_ms_dense'].iloc[0]:.1f} ms ({args.seqlen} tokens); "
        f"dense parameters {m['params_dense']:,}"
    )
    print(
        f"fit ln PPL0/ln PPL = a(1-s) + b: a = {m['a']:.4f}, b = {m['b']:.4f}, R^2 = {m['r2']:.4f}"
        "   (the paper's relation is a = 1, b = 0)"
    )
    worst = table["rel_error"].abs().max()
    print(f"largest |relative error| of the paper's prediction: {worst:.1%}")

    for method in ("wanda", "sparsegpt"):
        for s in (float(x) for x in args.others.split(",")):
            res = run_prune(model, PruneConfig(method, s), c4, evalc, store)
            ids.append(res["run_id"])
            print(f"  {method} {s:.0%}: ppl {res['metrics']['ppl']:.3f}", flush=True)

    print()
    for key in ("mean_pca99", "mean_erank"):
        rep = effdim_report(store, ids[1:], key)
        for g in rep["groups"]:
            print(
                f"effective dimension = {key} (dense {g['d_dense']:.1f}); relation "
                f"PPL = PPL0^(d_dense/d_eff), PPL0 = {g['ppl0']:.3f}"
            )
            print(f"{'method':<11}{'s':>6}{'d_eff':>8}{'ppl':>11}{'predicted':>12}{'rel.err':>9}")
            for r in sorted(g["rows"], key=lambda r: (r["method"], r["sparsity"])):
                print(
                    f"{r['method']:<11}{r['sparsity']:>6.2f}{r['d_eff']:>8.1f}{r['ppl']:>11.3f}"
                    f"{r['predicted']:>12.3f}{r['rel_error']:>9.3f}"
                )
            by = {}
            for r in g["rows"]:
                by.setdefault(r["method"], []).append(abs(r["rel_error"]))
            summary = ", ".join(f"{k} {sum(v) / len(v):.1%}" for k, v in sorted(by.items()))
            print(
                f"mean |relative error| by method: {summary}; pooled fit ratio = "
                f"a·(d_eff/d) + b: a = {g['a']:.3f}, b = {g['b']:.3f}, R^2 = {g['r2']:.3f}\n"
            )


if __name__ == "__main__":
    main()
