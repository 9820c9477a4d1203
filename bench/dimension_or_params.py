"""Does the representation dimension predict ln PPL across structured methods better than the
fraction of parameters removed? The matched-budget experiment and its verdict
(core.analysis.predictors; the rule: docs/statistics.md, "Dimension or parameters").

    python bench/dimension_or_params.py --models smollm2-135m,gemma3-270m --store DIR
    python bench/dimension_or_params.py --model tiny-llama --corpus pydoc --nsamples 2 \\
        --seqlen 32 --max-windows 2 --budgets 0.25,0.5 --seeds 0,1        # a smoke run

Protocol (the Paper A verdict work's primary one, the same for every method and model):
SliceGPT, ShortGPT, FLAP and structured Wanda at decoder-parameter budgets 0.1, 0.2, 0.3,
0.4 (``--budget params=F``, each mapped to the method's knob), calibrated on 32 x 512 tokens
of WikiText-2 train, seeds 0, 1, 2; perplexity on the first 64 windows of 512 tokens of
WikiText-2 test; every run measures its effective dimension (measure full). Runs go
through the grid sweep (``python -m core sweep --grid ...``, the same run ids), so a store
that holds them already is read, not recomputed; ``--report-only`` reads without running.
Prints per model each point (budget asked, parameters removed, kept dimension, ln PPL with
its interval), each method's mean squared held-out error of ln PPL under both predictors,
and the verdict sentence.
"""

from __future__ import annotations

from pathlib import Path

from protocol import open_store, protocol_parser

METHODS = "slicegpt,shortgpt,flap,wanda-sp"


def main(argv: list[str] | None = None) -> None:
    ap = protocol_parser(__doc__, nsamples=32, seqlen=512, max_windows=64)
    ap.add_argument("--models", default=None, help="comma-separated models (default: --model)")
    ap.add_argument("--methods", default=METHODS)
    ap.add_argument("--budgets", default="0.1,0.2,0.3,0.4")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--corpus", default="wikitext2", help="calibration and evaluation corpus")
    ap.add_argument("--report-only", action="store_true", help="read the store, run nothing")
    args = ap.parse_args(argv)
    store = open_store(args, "dimension-or-params-")
    print(f"store: {store.root}")
    for name in [m.strip() for m in (args.models or args.model).split(",") if m.strip()]:
        print(f"\n==== {name} ====")
        report(args, name, store)


def grid(args, name: str):
    """The experiment's grid on one model (core.requests.request.grid_spec's fields)."""
    from core.requests.request import grid_spec

    data = {} if args.corpus == "pydoc" else {"data_dir": str(Path(args.data_dir).resolve())}
    return grid_spec(
        {
            "model": name,
            "method": args.methods,
            "budgets": args.budgets,
            "seeds": args.seeds,
            "calib": args.corpus,
            "eval": args.corpus,
            "nsamples": args.nsamples,
            "calib_seqlen": args.seqlen,
            "seqlen": args.seqlen,
            "max_windows": args.max_windows,
            "measure": "full",
            **data,
        }
    )


def report(args, name: str, store) -> None:
    from core.analysis.predictors import dimension_or_params, sentence
    from core.analysis.tables import structured_runs
    from core.sweeps.executors import LocalExecutor
    from core.sweeps.grid import resolve_grid
    from core.sweeps.orchestrate import run_sweep_grid

    spec = grid(args, name)
    configs = resolve_grid(spec)
    if not args.report_only:
        out = run_sweep_grid(spec, store, LocalExecutor())
        print(f"{out['computed']} runs computed, {out['cached']} reused")
    ids = {c.run_id for c in configs}
    runs = structured_runs(store, [r for r in store.list(status="done") if r.id in ids])
    if runs.empty:
        print("no finished run of this grid in the store")
        return
    res = dimension_or_params(runs)
    print(f"{'method':<10}{'budget':>7}{'removed':>9}{'dim':>7}{'seeds':>6}  ln PPL [95%]")
    for p in res["points"]:
        print(
            f"{p['method']:<10}{p['point']:>7.3g}{p['params_removed']:>9.4f}"
            f"{p['dim_ratio']:>7.3f}{p['n_seeds']:>6}  {p['ln_ppl']:.4f} "
            f"[{p['ln_ppl_lo']:.4f}, {p['ln_ppl_hi']:.4f}]"
        )
    print(f"\n{'left out':<10}  MSE of ln PPL [95%], dimension   |   parameters")
    for m in res["methods"]:
        dim = f"{m['mse_dim']:.3g} [{m['mse_dim_lo']:.3g}, {m['mse_dim_hi']:.3g}]"
        par = f"{m['mse_params']:.3g} [{m['mse_params_lo']:.3g}, {m['mse_params_hi']:.3g}]"
        print(f"{m['method']:<10}  {dim:<32}|   {par}")
    print(f"\nverdict: {sentence(res)}")


if __name__ == "__main__":
    main()
