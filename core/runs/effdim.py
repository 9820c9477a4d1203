"""The effective-dimension comparison across methods: for stored prune/slice runs, test
Paper A's relation written with the effective dimension of the residual stream,
PPL = PPL₀^(d_eff,dense / d_eff) (core.analysis.relation.effective_relation)."""

from __future__ import annotations

from typing import Any

from core.analysis.relation import effective_relation
from core.errors import StoreError
from core.names import EFFDIM_KEY, EFFDIM_PREFIX, PRUNED_KINDS
from core.store.run_store import RunStore

SECONDARY_KEY = "mean_pca99"  # shown beside the pre-registered statistic, never fitted


def effdim_report(
    store: RunStore, run_ids: list[str] | None = None, key: str = EFFDIM_KEY
) -> dict[str, Any]:
    """Test PPL = PPL₀^(d_eff,dense/d_eff) on stored prune/slice runs, with d_eff the
    statistic fixed in advance (core.analysis.effdim.PRIMARY; ``key`` only for tests of the report).
    Each row carries the statistic's 95% interval and the secondary pca99.

    Runs are grouped by (model, evaluation config); PPL₀ and d_eff,dense come from the dense
    'eval' run of the same group. Returns {"groups": [{model, data, ppl0, d_dense, a, b, r2,
    mean_abs_rel_error, rows}]}.
    """
    metric = f"{EFFDIM_PREFIX}{key}"
    if run_ids:
        recs = [store.get(r) for r in run_ids]
    else:
        recs = [r for r in store.list(status="done") if r.kind in PRUNED_KINDS]
    groups: dict[str, list] = {}
    for rec in recs:
        if rec.status != "done" or rec.kind not in PRUNED_KINDS:
            raise StoreError(
                f"run {rec.id} is a {rec.status} {rec.kind} run, not a finished prune/slice"
            )
        dense_id = rec.summary.get("dense_run")
        if dense_id and metric in rec.summary:
            groups.setdefault(dense_id, []).append(rec)
    out = []
    for dense_id, members in groups.items():
        try:
            dense = store.get(dense_id).summary
        except StoreError:
            continue
        if metric not in dense:
            continue
        rows = [
            {
                "run_id": r.id,
                "method": r.method,
                "sparsity": r.sparsity,
                "pattern": r.pattern,
                "ppl": r.summary["ppl"],
                "d_eff": r.summary[metric],
                "d_eff_lo": r.summary.get(f"{metric}_lo"),
                "d_eff_hi": r.summary.get(f"{metric}_hi"),
                "enough_tokens": r.summary.get(f"{EFFDIM_PREFIX}enough_tokens"),
                SECONDARY_KEY: r.summary.get(f"{EFFDIM_PREFIX}{SECONDARY_KEY}"),
            }
            for r in members
        ]
        rel = effective_relation(dense["ppl"], dense[metric], rows)
        out.append(
            {
                "model": members[0].model,
                "dense_run": dense_id,
                "ppl0": dense["ppl"],
                "d_dense": dense[metric],
                "d_dense_lo": dense.get(f"{metric}_lo"),
                "d_dense_hi": dense.get(f"{metric}_hi"),
                "key": key,
                **rel,
            }
        )
    return {"groups": out}
