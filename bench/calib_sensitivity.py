"""How much the masks depend on their calibration data: Wanda, SparseGPT and magnitude at 50 %
and 2:4, each against other draws of its corpus and against another corpus.

    python bench/calib_sensitivity.py [--model smollm2-135m] [--seeds 1,2,3] [--other-seeds 0,1,2]
        [--calib c4] [--other wikitext2] [--nsamples 32] [--seqlen 512] [--max-windows 64]
        [--methods wanda,sparsegpt,magnitude] [--patterns unstructured,2:4] [--measure lean]
        [--store DIR]

For every method x pattern: one prune run calibrated on ``--calib`` (C4 train, seed 0: the
reference protocol) and evaluated on the first ``--max-windows`` windows of WikiText-2 test
(``--measure lean``: perplexity and kept parameters only; the agreement and the perplexity
spread need neither the latency nor the changed model's effective dimension, which took most
of a run's time here);
then ``python -m core sensitivity RUN --seeds 1,2,3`` (three other draws of C4) and
``python -m core sensitivity RUN --seeds 0,1,2 --calib wikitext2`` (three draws of WikiText-2
train). Every step is the CLI's own command, run in this process; a run already in
``--store`` is reused. Printed: one markdown row per (method, pattern, draws): the kept sets'
Jaccard with the run's (mean over draws, the lowest draw) beside two random masks', the
fraction of the run's kept weights kept again beside random, and the perplexity of the run
and its draws (mean ± sd, range as % of the mean). ``--model tiny-llama --calib pydoc``
checks the script end to end in a minute (pydoc needs no data folder; WikiText-2 does).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

from protocol import ROOT, protocol_parser, store_path

sys.path.insert(0, str(ROOT))

from core.cli.main import main


def cli(*argv: str) -> dict:
    """``python -m core ARGV --json``, in this process; its JSON."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--json", "--quiet"])
    if code != 0:
        raise SystemExit(f"python -m core {' '.join(argv)} failed ({code})")
    return json.loads(out.getvalue())


def row(method: str, pattern: str, draws: str, m: dict) -> str:
    s = m["ppl_spread"]
    return (
        f"| {method} | {pattern} | {draws} | {m['jaccard']:.3f} ({m['jaccard_min']:.3f}) | "
        f"{m['jaccard_floor']:.3f} | {m['kept_again']:.3f} | {m['kept_again_floor']:.3f} | "
        f"{s['mean']:.2f} ± {s['sd']:.2f} | {s['rel_range']:.1%} |"
    )


def main_bench(argv: list[str] | None = None) -> None:
    ap = protocol_parser(__doc__, nsamples=32, seqlen=512, max_windows=64)
    ap.add_argument("--calib", default="c4", help="the runs' calibration corpus")
    ap.add_argument("--other", default="wikitext2", help="the other corpus' draws")
    ap.add_argument("--seeds", default="1,2,3", help="other draws of the runs' corpus")
    ap.add_argument("--other-seeds", default="0,1,2", help="draws of the other corpus")
    ap.add_argument("--eval", default="wikitext2")
    ap.add_argument("--methods", default="wanda,sparsegpt,magnitude")
    ap.add_argument("--patterns", default="unstructured,2:4")
    ap.add_argument("--measure", default="lean", help="the prune runs' measurements")
    args = ap.parse_args(argv)
    store = store_path(args, "calib-sensitivity-")
    data = ("--data-dir", args.data_dir, "--store", store)
    print(
        "| method | pattern | draws | Jaccard (lowest draw) | random | kept again | random | "
        "perplexity, run and draws | range |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for method in args.methods.split(","):
        for pattern in args.patterns.split(","):
            run = cli(
                "prune", "--model", args.model, "--method", method, "--sparsity", "0.5",
                "--pattern", pattern, "--calib", args.calib, "--nsamples", str(args.nsamples),
                "--seqlen", str(args.seqlen), "--eval", args.eval, "--max-windows",
                str(args.max_windows), "--measure", args.measure, *data,
            )["run_id"]  # fmt: skip
            same = cli("sensitivity", run, "--seeds", args.seeds, *data)["metrics"]
            print(row(method, pattern, f"{args.calib} seeds {args.seeds}", same), flush=True)
            other = cli(
                "sensitivity", run, "--seeds", args.other_seeds, "--calib", args.other, *data
            )["metrics"]
            print(row(method, pattern, f"{args.other} seeds {args.other_seeds}", other), flush=True)
    print(f"\nstore: {store}")


if __name__ == "__main__":
    main_bench()
