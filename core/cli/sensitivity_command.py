"""``python -m core sensitivity RUN --seeds 1,2,3 [--calib CORPUS] [--json]``: how much a stored
prune run's keep masks depend on its calibration data (core.runs.sensitivity), per layer and
linear beside the floor of two random masks, and the perplexity spread of the draws."""

from __future__ import annotations

import argparse
from typing import Any

from core.names import T_AGREEMENT
from core.requests.request import sensitivity_request
from core.runs import RunOptions, execute
from core.store.run_store import RunStore


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sensitivity",
        help="how much a prune run's keep masks depend on its calibration draw or corpus",
    )
    p.add_argument("run_id", metavar="RUN", help="a finished prune run (a unique prefix is enough)")
    p.add_argument("--seeds", required=True, help="calibration seeds of the draws, e.g. 1,2,3")
    p.add_argument(
        "--calib", default=None, help="draw from this corpus instead of the run's (train split)"
    )
    p.add_argument("--data-dir", default=None, help="local copy of the shared/data layout")
    p.add_argument("--store", default=None, help="results store folder (default $PRUNESCOPE_HOME)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--force", action="store_true", help="recompute the draws and the report")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def cmd_sensitivity(args: argparse.Namespace, progress: Any) -> dict[str, Any]:
    """Plan (every check before any work), run, and add the per-linear rows."""
    store = RunStore(args.store)
    cfg = sensitivity_request(store, args.run_id, args.seeds, args.calib, args.data_dir)
    out = execute(cfg, store, progress, RunOptions(force=args.force))
    out["linears"] = store.load(out["run_id"]).table(T_AGREEMENT).to_dict(orient="records")
    return out


def human_text(out: dict[str, Any]) -> str:
    """Per draw and per layer: Jaccard and kept-again beside their random-mask floors, then
    the perplexity spread."""
    m = out["metrics"]
    reused = " (stored result reused; --force recomputes)" if out.get("cached") else ""
    lines = [
        f"run {out['run_id']}{reused}: calibration sensitivity of run {m['source_run']} "
        f"(calibrated on {m['source_dataset']}; draws from {m['calib_dataset']}, seeds "
        f"{', '.join(map(str, m['seeds']))})",
        f"kept sets, every linear pooled: Jaccard {m['jaccard']:.4f} (lowest draw "
        f"{m['jaccard_min']:.4f}; two random masks: {m['jaccard_floor']:.4f}), run's kept "
        f"weights kept again {m['kept_again']:.4f} (random: {m['kept_again_floor']:.4f})",
        "draw  seed  dataset     Jaccard  kept again  perplexity  run",
    ]
    lines += [
        f"{d['draw']:>4}  {d['seed']:>4}  {d['dataset']:<10}  {d['jaccard']:>7.4f}  "
        f"{d['kept_again']:>10.4f}  {d['ppl']:>10.4f}  {d['run_id']}"
        + ("  (the run itself)" if d["draw"] in m["own_draws"] else "")
        for d in m["draws"]
    ]
    lines.append("layer  Jaccard  (lowest)  floor   kept again  floor")
    lines += [
        f"{r['layer']:>5}  {r['jaccard']:>7.4f}  ({r['jaccard_min']:.4f})  "
        f"{r['jaccard_floor']:.4f}  {r['kept_again']:>10.4f}  {r['kept_again_floor']:.4f}"
        for r in m["layers"]
    ]
    s = m["ppl_spread"]
    lines.append(
        f"perplexity over the run and its draws (n = {s['n']}): mean {s['mean']:.4f}, sd "
        f"{s['sd']:.4f}, range {s['min']:.4f}-{s['max']:.4f} ({s['rel_range']:.2%} of the mean)"
    )
    lines.append("per linear: --json (key 'linears') or python -m core runs show <id>")
    return "\n".join(lines)
