"""Zero-shot accuracy of the dense and SliceGPT-sliced embedded model, and Paper A's accuracy
relation ln(acc/acc0) against (1 - s).

    python bench/zeroshot.py [--sparsities 0.1,0.2,0.3] [--limit 200] [--tasks all] [--store DIR]

Protocol: the embedded model (float32); SliceGPT calibrated on 32 x 512 tokens of
the WikiText-2 train subset (seed 42), as in bench/repdim_sweep.py; perplexity on the first 64
windows of 512 tokens of WikiText-2 test; zero-shot on the first --limit items of each task
from shared/data/tasks, scored through lm-evaluation-harness (acc, acc_norm). Prints acc and
acc_norm per task and s, then the fits per task and for the mean over tasks.
"""

from __future__ import annotations

import time
from pathlib import Path

from protocol import open_store, protocol_parser


def main() -> None:
    ap = protocol_parser(__doc__, nsamples=32, seqlen=512, max_windows=64)
    ap.add_argument("--sparsities", default="0.1,0.2,0.3")
    ap.add_argument("--tasks", default="all")
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=8, help="zero-shot batch size")
    args = ap.parse_args()

    from core.runs import run_relation_sweep
    from core.settings.config import CalibConfig, DataSpec, EvalConfig, ModelSpec, ZeroShotConfig

    data_dir = str(Path(args.data_dir).resolve())
    store = open_store(args, "zeroshot-")
    model = ModelSpec(args.model)
    evalc = EvalConfig(DataSpec("wikitext2", "test", data_dir), args.seqlen, args.max_windows)
    calib = CalibConfig(DataSpec("wikitext2", "train", data_dir), args.nsamples, args.seqlen, 42)
    zs = ZeroShotConfig(args.tasks, args.limit, data_dir, args.batch_size)
    grid = tuple(float(s) for s in args.sparsities.split(","))

    t0 = time.perf_counter()
    sweep = run_relation_sweep(model, grid, calib, evalc, store, zeroshot=zs)
    wall = time.perf_counter() - t0
    run = store.load(sweep["run_id"])
    acc = run.table("accuracy")
    fits = run.table("accuracy_fit")
    table = run.table("sweep")
    m = sweep["metrics"]

    print(
        f"model {args.model} (float32); SliceGPT calibrated on WikiText-2 train "
        f"{args.nsamples} x {args.seqlen} (seed 42); zero-shot: first {args.limit} items "
        f"per task from {data_dir}/tasks, lm-evaluation-harness scoring"
    )
    print(f"sweep run {sweep['run_id']}; wall time {wall:.0f} s")
    print()
    first = acc[acc["s"] == 0.0]
    labels = dict(zip(first["task"], first["label"], strict=True))
    print(
        f"{'s':>5}{'d_prime':>9}{'ppl':>10}  "
        + "".join(f"{labels[t][:13]:>14}" for t in zs.tasks)
        + f"{'mean acc':>10}"
    )
    ppl = {0.0: m["ppl0"], **dict(zip(table["s"], table["ppl"], strict=True))}
    for s, group in acc.groupby("s", sort=True):
        by_task = {r.task: r for r in group.itertuples()}
        cells = ""
        for t in zs.tasks:
            r = by_task[t]
            norm = (
                f"{r.acc_norm:.3f}"
                if r.acc_norm == r.acc_norm and r.acc_norm is not None
                else "  -  "
            )
            cells += f"{r.acc:>8.3f}/{norm}"
        print(
            f"{s:>5.2f}{int(group['d_prime'].iloc[0]):>9}{ppl[s]:>10.3f}  {cells}"
            f"{group['acc'].mean():>10.4f}"
        )
    print(
        "cells: acc/acc_norm (WinoGrande and BoolQ: acc only, as lm-eval reports them); mean "
        f"standard error of one acc at n={args.limit}: {acc['acc_stderr'].mean():.3f}"
    )
    if "hellaswag" in zs.tasks:
        print("HellaSwag: llama.cpp text extraction (ctx_b not capitalised), close to lm-eval's")
    print()
    print("Paper A (A2): ln(acc/acc0) ∝ (1 - s)")
    from core.analysis.verdicts import ACCURACY_RULE

    print(f"{'task':<16}{'kappa':>8}{'c':>8}{'R2':>7}   {'kappa_ch':>9}{'R2_ch':>7}  (A2) verdict")
    for r in fits.itertuples():
        verdict = getattr(r, "kappa_verdict", None)
        print(
            f"{r.label[:15]:<16}{r.kappa:>8.3f}{r.intercept:>8.3f}{r.r2:>7.3f}"
            f"   {r.kappa_chance:>9.3f}{r.r2_chance:>7.3f}  "
            f"{verdict if isinstance(verdict, str) else '- (not judged)'}"
        )
    print(
        "dense reading: ln(acc/acc_dense) = kappa(1-s) + c with the dense point; "
        "chance reading: ln(acc/chance) = kappa_ch(1-s) through the origin (point fits). "
        + ACCURACY_RULE
    )


if __name__ == "__main__":
    main()
