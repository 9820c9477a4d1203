"""Joins that pages show as tables (core.tables), on hand-written stored runs."""

from __future__ import annotations

import pytest

from core.config import CalibConfig, DataSpec, EvalConfig, ModelSpec, PruneConfig, RunConfig
from core.tables import DENSE_ACC, accuracy_beside_dense

TINY = ModelSpec("tiny-llama", "cpu", "float32")


def _accuracy_row(acc: float, note: str = "") -> dict:
    return {"task": "piqa", "label": "PIQA", "n": 50, "acc": acc, "acc_stderr": 0.06, "note": note}


def _stored_pair(store) -> tuple[str, str]:
    """(dense zero-shot run id, pruned run id) with one task each."""
    dense = RunConfig(
        "zeroshot", TINY, extra=(("source_run", None), ("zeroshot", {"tasks": ["piqa"]}))
    )
    with store.begin(dense) as w:
        w.write_table("zeroshot", [_accuracy_row(0.7)])
        w.commit({"mean_acc": 0.7})
    cfg = RunConfig(
        "prune",
        TINY,
        EvalConfig(DataSpec("pydoc"), 64, 4),
        CalibConfig(DataSpec("pydoc", "train"), 4, 64),
        PruneConfig("wanda", 0.5),
    )
    with store.begin(cfg) as w:
        w.write_table("zeroshot", [_accuracy_row(0.6, "3 items skipped")])
        w.commit({"mean_acc": 0.6, "dense_zeroshot_run": dense.run_id})
    return dense.run_id, cfg.run_id


def test_accuracy_is_joined_with_the_dense_runs_by_task(store) -> None:
    _, pruned = _stored_pair(store)
    table, notes = accuracy_beside_dense(store, store.load(pruned))
    assert list(table.columns) == ["label", "n", "acc", "acc_stderr", DENSE_ACC]
    assert table.iloc[0]["acc"] == pytest.approx(0.6)
    assert table.iloc[0][DENSE_ACC] == pytest.approx(0.7)
    assert notes == ["3 items skipped"]


def test_no_dense_column_once_the_dense_run_is_gone(store) -> None:
    dense, pruned = _stored_pair(store)
    store.delete(dense)
    table, _ = accuracy_beside_dense(store, store.load(pruned))
    assert DENSE_ACC not in table.columns
