"""Pruning quality, speed and memory of magnitude / Wanda / SparseGPT (+ OWL) on one protocol.

    python bench/prune_quality.py [--model smollm2-135m] [--data-dir ../shared/data]
                                  [--nsamples 32] [--seqlen 512] [--max-windows 64] [--only NAME ...]

Protocol (issue #3): calibration 32 x 512 tokens from the C4 train head (seed 0), evaluation on
the first 64 windows of 512 tokens of WikiText-2 test. Each configuration runs in its own
process through the CLI (``python -m core prune --json``), so peak RSS is per configuration.
Prints one table: perplexity, pruning seconds, peak RSS of the pruning phase beside its
budget (process before the model loaded + weight bytes + calibration activations), sparsity.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONFIGS: list[tuple[str, list[str]]] = [
    ("magnitude 50%", ["--method", "magnitude", "--sparsity", "0.5"]),
    ("wanda 50%", ["--method", "wanda", "--sparsity", "0.5"]),
    ("sparsegpt 50%", ["--method", "sparsegpt", "--sparsity", "0.5"]),
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
    proc = subprocess.run([sys.executable, "-m", "core", *argv, "--json", "--quiet"], cwd=ROOT,
                          env=env, capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{proc.stderr}")
    return json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--nsamples", type=int, default=32)
    ap.add_argument("--seqlen", type=int, default=512)
    ap.add_argument("--max-windows", type=int, default=64)
    ap.add_argument("--store", default=None, help="results store (default: a temp dir)")
    ap.add_argument("--only", nargs="*", default=None, help="names of configurations to run")
    args = ap.parse_args()

    env = dict(os.environ, PRUNESCOPE_HOME=args.store or tempfile.mkdtemp(prefix="prunebench-"))
    common = ["--model", args.model, "--data-dir", args.data_dir, "--seqlen", str(args.seqlen)]
    evalargs = [*common, "--max-windows", str(args.max_windows)]
    dense = run_cli(["eval", *evalargs, "--dataset", "wikitext2"], env)["metrics"]
    rows = [("dense", dense["ppl"], 0.0, None, None, 0.0)]
    print(f"dense perplexity {dense['ppl']:.3f} ({dense['n_windows']} windows x {args.seqlen})",
          flush=True)  # fmt: skip
    for name, extra in CONFIGS:
        if args.only and name not in args.only:
            continue
        m = run_cli(["prune", *evalargs, "--eval", "wikitext2", "--calib", "c4",
                     "--nsamples", str(args.nsamples), "--seed", "0", *extra], env)["metrics"]  # fmt: skip
        budget = m["memory_budget_mb"]
        rows.append(
            (
                name,
                m["ppl"],
                m["prune_seconds"],
                m["prune_peak_rss_mb"],
                budget,
                m["achieved_sparsity"],
            )
        )
        print(f"  {name}: ppl {m['ppl']:.3f}", flush=True)

    print()
    print(f"model {args.model}; calibration C4 train head {args.nsamples} x {args.seqlen} (seed 0); "
          f"eval WikiText-2 test, first {args.max_windows} windows of {args.seqlen}")  # fmt: skip
    head = f"{'configuration':<20}{'ppl':>10}{'prune s':>10}{'prune peak MB':>13}{'budget MB':>11}{'sparsity':>10}"
    print(head)
    print("-" * len(head))
    for name, ppl, secs, rss, budget, sp in rows:
        rss_s = f"{rss:>13.0f}" if rss is not None else f"{'-':>13}"
        bud_s = f"{budget:>11.0f}" if budget is not None else f"{'-':>11}"
        print(f"{name:<20}{ppl:>10.3f}{secs:>10.1f}{rss_s}{bud_s}{sp:>10.4f}")


if __name__ == "__main__":
    main()
