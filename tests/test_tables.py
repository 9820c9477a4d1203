"""Joins that pages show as tables (core.analysis.tables), on hand-written stored runs."""

from __future__ import annotations

import pytest

from core.analysis.tables import DENSE_ACC, accuracy_beside_dense


def test_accuracy_is_joined_with_the_dense_runs_by_task(store, accuracy_runs) -> None:
    table, notes = accuracy_beside_dense(store, store.load(accuracy_runs[1]))
    assert list(table.columns) == ["label", "n", "acc", "acc_stderr", "acc_norm", DENSE_ACC]
    assert table.iloc[0]["acc"] == pytest.approx(0.6)
    assert table.iloc[0][DENSE_ACC] == pytest.approx(0.7)
    assert notes == ["3 items skipped"]


def test_no_dense_column_once_the_dense_run_is_gone(store, accuracy_runs) -> None:
    dense, pruned = accuracy_runs
    store.delete(dense)
    table, _ = accuracy_beside_dense(store, store.load(pruned))
    assert DENSE_ACC not in table.columns
