"""Seconds of a dense/pruned comparison on a new text, in the process (what the Compare page
pays on the server, without the browser).

    python bench/compare_latency.py [--model smollm2-135m] [--store DIR] [--repeat 3]

Makes (or reuses) the demo set's Wanda 50 % and SparseGPT 50 % pieces on the model
(core.demo: the "demo" preset), then times ``compare_run`` (32 new
tokens, greedy) on texts never seen before:

- ``cold``: nothing loaded yet (the dense model is read, the run's model rebuilt from its
  stored masks / weights, both continue the text and are traced layer by layer);
- ``first of a run``: the dense model already loaded, the run's model not built yet (a run
  picked for the first time on an open page);
- ``new prompt``: both models built (a new text on an open page), median of --repeat.

Targets (docs/benchmarks.md): a first comparison ≤ 5 s for a run rebuildable from what it
stored; a new prompt on an open page ≤ 2 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def demo_run(store, model: str, key: str) -> str:
    """The demo set's piece ``key`` (core.demo), computed once per store."""
    from core.demo import demo_pieces, piece_config
    from core.runs import RunOptions, execute

    piece = next(p for p in demo_pieces(model) if p.key == key)
    return execute(piece_config(store, piece), store, None, RunOptions())["run_id"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--store", type=Path, help="results store (default: a temp folder)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--pieces", default="wanda,sparsegpt", help="demo-set pieces to compare")
    args = ap.parse_args()

    from core.evaluation.generate import Decoding
    from core.runs import comparison as cmp
    from core.runs import resources
    from core.store.run_store import RunStore

    store = RunStore(args.store or tempfile.mkdtemp(prefix="compare-bench-"))
    t0 = time.perf_counter()
    runs = {m: demo_run(store, args.model, m) for m in args.pieces.split(",")}
    print(f"runs ready in {time.perf_counter() - t0:.1f} s: {runs}")
    resources._PRISTINE.clear()  # a process that has not loaded the model yet
    dec = Decoding(args.tokens)

    def timed(run_id: str) -> float:
        text = f"A new text typed at {time.time():.6f} to miss every cache, then continued."
        t = time.perf_counter()
        cmp.compare_run(store, run_id, text, dec)
        return time.perf_counter() - t

    rows = []
    for i, (method, rid) in enumerate(runs.items()):
        how = cmp.how_built(store.load(rid))
        first = timed(rid)
        label = "cold (nothing loaded)" if i == 0 else "first of a run (dense loaded)"
        rows.append((f"{method}: {label}", first, how))
        again = [timed(rid) for _ in range(args.repeat)]
        rows.append(
            (f"{method}: new prompt (median of {args.repeat})", statistics.median(again), how)
        )
    width = max(len(r[0]) for r in rows)
    print(f"{'seconds, ' + args.model + f', {args.tokens} new tokens':{width}}  {'s':>6}  model")
    for name, secs, how in rows:
        print(f"{name:{width}}  {secs:6.2f}  {cmp.HOW[how]}")


if __name__ == "__main__":
    main()
