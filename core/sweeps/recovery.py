"""The trade-off after recovery: a grid sweep's pruned points fine-tuned for N steps
(``python -m core sweep ... --recover-steps N``, core.runs.recover), and perplexity against
sparsity before and after, per (method, pattern, allocation, s).

Each point's recovery is an ordinary 'recover' run with the default recovery settings
(LoRA, C4 train, the point's calibration seed + 1), so a point recovered once is reused, and
the table is a pure function of the stored runs, as the sweep's own table is. The
recoveries themselves are planned and run by the sweep command (``core.cli.sweep_command``).
"""

from __future__ import annotations

import statistics
from typing import Any

import pandas as pd

from core.names import RECOVER
from core.store.run_store import RunStore
from core.sweeps.orchestrate import DENSE, TABLE_KEYS

RECOVERED_COLUMNS = (*TABLE_KEYS, "steps", "ppl_before", "ppl_after", "ppl_after_std", "n_runs")


def recovered_table(
    store: RunStore, rows: list[dict[str, Any]], steps: int | None = None
) -> list[dict[str, Any]]:
    """Per pruned row of a sweep table and number of steps (``steps``, or every number
    stored): its mean perplexity before, and after the stored recoveries of its runs (mean
    and sample std over seeds). A row no run of which was recovered is left out, unless
    ``steps`` is given."""
    after: dict[tuple[str, int], list[float]] = {}
    for r in store.list(kind=RECOVER, status="done"):
        rc = (r.config.get("extra") or {}).get("recover") or {}
        if steps in (None, rc.get("steps")) and r.summary.get("ppl") is not None:
            after.setdefault((rc["parent"], rc["steps"]), []).append(r.summary["ppl"])
    counts = sorted({n for _, n in after}) if steps is None else [steps]
    out = []
    for row in rows:
        if row["method"] == DENSE:
            continue
        ids = [i for i in str(row["run_ids"]).split(",") if i]
        for n in counts:
            ppl = [p for i in ids for p in after.get((i, n), [])]
            if not ppl and steps is None:
                continue
            out.append(
                {
                    **{k: row[k] for k in TABLE_KEYS},
                    "steps": n,
                    "ppl_before": row["ppl_mean"],
                    "ppl_after": statistics.fmean(ppl) if ppl else None,
                    "ppl_after_std": statistics.stdev(ppl) if len(ppl) > 1 else None,
                    "n_runs": len(ppl),
                }
            )
    return out


def before_after_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """``recovered_table`` rows as curves for ``core.figures.ppl_vs_sparsity``: per point its
    one-shot perplexity (series "<method> one-shot") and its recovered one ("<method> +N
    steps"); columns method, sparsity, ppl, series."""
    out = []
    for r in rows:
        name = r["method"] + ("" if r["pattern"] == "unstructured" else f" {r['pattern']}")
        name += "" if r["allocation"] == "uniform" else f" {r['allocation']}"
        base = {"method": r["method"], "sparsity": r["sparsity"]}
        out.append({**base, "ppl": r["ppl_before"], "series": f"{name} one-shot"})
        if r["ppl_after"] is not None:
            out.append({**base, "ppl": r["ppl_after"], "series": f"{name} +{r['steps']} steps"})
    frame = pd.DataFrame(out, columns=["method", "sparsity", "ppl", "series"])
    return frame.drop_duplicates()


def recovered_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The table as text: perplexity before and after recovery per point."""
    if not rows:
        return []
    lines = [
        f"after recovery ({rows[0]['steps']} steps of LoRA per point):",
        f"{'method':<14}{'pattern':<14}{'alloc':<9}{'s':>6}{'before':>12}{'after':>22}",
    ]
    for r in rows:
        after = "-" if r["ppl_after"] is None else f"{r['ppl_after']:.4f}"
        if r["ppl_after_std"] is not None:
            after += f" ± {r['ppl_after_std']:.4f}"
        lines.append(
            f"{r['method']:<14}{r['pattern']:<14}{r['allocation']:<9}{r['sparsity']:>6.3g}"
            f"{r['ppl_before']:>12.4f}{after:>22}"
        )
    return lines
