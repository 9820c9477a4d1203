"""``python -m core compare RUN_ID [RUN_ID ...] --prompt TEXT [--json]``: stored runs beside
their dense model on one text (core.runs.comparison), as the Compare page shows them."""

from __future__ import annotations

import argparse
from typing import Any

from core.analysis.departure import departure_reading, generation_reading, nll_reading
from core.evaluation.generate import Decoding
from core.runs.comparison import HOW, compare_run
from core.store.run_store import RunStore


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="a run beside its dense model on your text, layer by layer")
    p.add_argument("run_ids", nargs="+", metavar="RUN_ID", help="prune/slice/eval run ids")
    p.add_argument("--prompt", required=True, help="the text to continue and to score")
    p.add_argument("--max-new-tokens", type=int, default=32, help="tokens to generate")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (same for every model)")
    p.add_argument("--store", default=None, help="results store folder (default $PRUNESCOPE_HOME)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def cmd_compare(args: argparse.Namespace, progress: Any) -> dict[str, Any]:
    """Every run beside the dense model; decoding checked before any model is built."""
    dec = Decoding(args.max_new_tokens, args.temperature, args.top_p, args.seed)
    store = RunStore(args.store)
    # unknown, unfinished or damaged runs fail before any model is built
    ids = [store.load(r).id for r in args.run_ids]
    runs = [compare_run(store, rid, args.prompt, dec, progress=progress) for rid in ids]
    return {
        "prompt": args.prompt,
        "decoding": dec.describe(),
        "dense_continuation": runs[0].dense.text,
        "runs": [c.to_dict() for c in runs],
    }


def human_text(out: dict[str, Any]) -> str:
    """The comparison as a few readable lines per run."""
    lines = [
        f"prompt: {out['prompt']!r} ({out['decoding']})",
        f"dense : {out['dense_continuation']!r}",
    ]
    for r in out["runs"]:
        name = f"run {r['run_id'][:8]}"
        lines += [
            "",
            f"{name} ({HOW.get(r['model_from'], r['model_from'])})",
            f"  continuation: {r['continuation']!r}",
            f"  {generation_reading(r['dense_new_ids'], r['new_ids'], name)}",
            f"  {nll_reading(r['mean_nll_diff'], r['worst_tokens'], name)}",
            f"  {departure_reading(r['layer_kl'], name)}",
            "  layer  KL(dense||pruned)  rel. error",
        ]
        lines += [
            f"  {i:>5}  {kl:>17.4g}  {err:>10.4g}"
            for i, (kl, err) in enumerate(zip(r["layer_kl"], r["layer_rel_error"], strict=True))
        ]
        lines.append(f"  {r['note']}")
    return "\n".join(lines)
