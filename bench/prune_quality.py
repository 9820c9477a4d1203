"""Pruning quality, speed and memory of magnitude / Wanda / SparseGPT (+ OWL) on one protocol.

    python bench/prune_quality.py [--model smollm2-135m] [--data-dir ../shared/data]
                                  [--nsamples 32] [--seqlen 512] [--max-windows 64] [--only NAME
                                  ...]

e.g. only SparseGPT: --only "sparsegpt 50%" "sparsegpt 50% exact" "sparsegpt 2:4"

Protocol: calibration 32 x 512 tokens from the C4 train head (seed 0), evaluation on
the first 64 windows of 512 tokens of WikiText-2 test. Each configuration runs in its own
process through the CLI (``python -m core prune --json``), so peak RSS is per configuration.
Prints one table: perplexity, pruning seconds, peak RSS of the pruning phase beside its
budget (the process with the model loaded and its weights resident + calibration activations +
attention-probe buffers; core.machine.process_memory) and the margin used, achieved sparsity.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from protocol import ROOT, protocol_parser, store_path

CONFIGS: list[tuple[str, list[str]]] = [
    ("magnitude 50%", ["--method", "magnitude", "--sparsity", "0.5"]),
    ("wanda 50%", ["--method", "wanda", "--sparsity", "0.5"]),
    ("sparsegpt 50%", ["--method", "sparsegpt", "--sparsity", "0.5"]),
    # the exact-count mask selection beside the reference's threshold (default)
    (
        "sparsegpt 50% exact",
        ["--method", "sparsegpt", "--sparsity", "0.5", "--option", "selection=exact"],
    ),
    ("magnitude 2:4", ["--method", "magnitude", "--sparsity", "0.5", "--pattern", "2:4"]),
    ("wanda 2:4", ["--method", "wanda", "--sparsity", "0.5", "--pattern", "2:4"]),
    ("sparsegpt 2:4", ["--method", "sparsegpt", "--sparsity", "0.5", "--pattern", "2:4"]),
    ("wanda+owl 50%", ["--method", "wanda", "--sparsity", "0.5", "--allocation", "owl"]),
    ("sparsegpt+owl 50%", ["--method", "sparsegpt", "--sparsity", "0.5", "--allocation", "owl"]),
    ("wanda 70%", ["--method", "wanda", "--sparsity", "0.7"]),
    ("wanda+owl 70%", ["--method", "wanda", "--sparsity", "0.7", "--allocation", "owl"]),
    ("sparsegpt 70%", ["--method", "sparsegpt", "--sparsity", "0.7"]),
    ("sparsegpt+owl 70%", ["--method", "sparsegpt", "--sparsity", "0.7", "--allocation", "owl"]),
]


def run_cli(argv: list[str], env: dict[str, str]) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "core", *argv, "--json", "--quiet"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{proc.stderr}")
    return json.loads(proc.stdout)


def main() -> None:
    ap = protocol_parser(__doc__, nsamples=32, seqlen=512, max_windows=64)
    ap.add_argument("--only", nargs="*", default=None, help="names of configurations to run")
    args = ap.parse_args()
    unknown = set(args.only or ()) - {name for name, _ in CONFIGS}
    if unknown:
        ap.error(f"unknown configuration(s) {sorted(unknown)}; one of {[n for n, _ in CONFIGS]}")

    env = dict(os.environ, PRUNESCOPE_HOME=store_path(args, "prunebench-"))
    common = ["--model", args.model, "--data-dir", args.data_dir, "--seqlen", str(args.seqlen)]
    evalargs = [*common, "--max-windows", str(args.max_windows)]
    dense = run_cli(["eval", *evalargs, "--dataset", "wikitext2"], env)["metrics"]
    rows = [{"name": "dense", "ppl": dense["ppl"]}]
    print(
        f"dense perplexity {dense['ppl']:.3f} ({dense['n_windows']} windows x {args.seqlen})",
        flush=True,
    )
    for name, extra in CONFIGS:
        if args.only and name not in args.only:
            continue
        m = run_cli(
            [
                "prune",
                *evalargs,
                "--eval",
                "wikitext2",
                "--calib",
                "c4",
                "--nsamples",
                str(args.nsamples),
                "--seed",
                "0",
                *extra,
            ],
            env,
        )["metrics"]
        rows.append({"name": name, **m})
        print(f"  {name}: ppl {m['ppl']:.3f}", flush=True)

    print()
    print(
        f"model {args.model}; calibration C4 train head {args.nsamples} x {args.seqlen} (seed 0); "
        f"eval WikiText-2 test, first {args.max_windows} windows of {args.seqlen}"
    )
    cols = [
        ("ppl", 10, ".3f"),
        ("prune_seconds", 9, ".1f"),
        ("prune_peak_rss_mb", 10, ".0f"),
        ("memory_budget_mb", 10, ".0f"),
        ("over_budget_mb", 9, "+.0f"),
        ("achieved_sparsity", 10, ".4f"),
    ]
    names = {
        "ppl": "ppl",
        "prune_seconds": "prune s",
        "prune_peak_rss_mb": "peak MB",
        "memory_budget_mb": "budget MB",
        "over_budget_mb": "margin",
        "achieved_sparsity": "sparsity",
    }
    head = f"{'configuration':<20}" + "".join(f"{names[c]:>{w}}" for c, w, _ in cols)
    print(head)
    print("-" * len(head))
    for r in rows:
        cells = "".join(f"{format(r[c], f) if c in r else '-':>{w}}" for c, w, f in cols)
        print(f"{r['name']:<20}{cells}")
    last = rows[-1]
    if "memory_budget_mb" in last:
        print(
            f"budget = process with the model loaded and its weights resident "
            f"({last['loaded_rss_mb']:.0f} MB, of which weights {last['weight_mb']:.0f}) + "
            f"calibration activations ({last['calib_buffers_mb']:.0f}) + attention probes "
            f"({last['analysis_buffers_mb']:.0f}); margin = peak - budget"
        )


if __name__ == "__main__":
    main()
