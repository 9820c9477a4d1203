"""The store survives its index (core.store.reindex): a damaged index is named with the way
out and kept aside, ``runs reindex`` rebuilds it from the run folders with every run, metric
and table as before (ids equal), and a missing index is rebuilt by itself."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
import torch

from core.cli.main import main
from core.errors import StoreError, StoreIndexError
from core.settings.config import EvalConfig, ModelSpec, RunConfig
from core.store.reindex import INDEX_FILE, index_damage, rebuild_index
from core.store.run_store import RunStore

APP = Path(__file__).resolve().parents[1] / "app.py"
N_RUNS = 40  # enough rows for an index of several pages, so a truncation cuts rows off


def _cfg(i: int) -> RunConfig:
    return RunConfig("eval", ModelSpec("tiny-llama", "cpu", "float32"), EvalConfig(seqlen=8 + i))


def _fill(store: RunStore) -> None:
    """N_RUNS finished runs with metrics, a table and arrays, plus one failed run."""
    for i in range(N_RUNS):
        with store.begin(_cfg(i)) as w:
            w.write_table("layers", [{"layer": j, "x": i + j / 10} for j in range(3)])
            w.write_arrays("masks", {"m": torch.ones(2, i + 1, dtype=torch.bool)})
            w.commit({"ppl": 10.0 + i, "notes": "x" * 400, "model": {"n_params": 1000 + i}})
    with pytest.raises(RuntimeError), store.begin(_cfg(N_RUNS)):
        raise RuntimeError("boom")


def _snapshot(store: RunStore) -> dict[str, tuple]:
    """Every done run: (kind, status, model, metrics, config, tables with their rows)."""
    out = {}
    for rec in store.list(status="done"):
        run = store.load(rec.id)
        tables = {t: run.table(t).to_dict(orient="list") for t in run.tables()}
        arrays = {k: v.tolist() for k, v in run.arrays("masks").items()}
        out[rec.id] = (rec.kind, rec.model, rec.summary, rec.config, tables, arrays)
    return out


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A store with N_RUNS done runs (and its snapshot), checkpointed so the index file holds
    every row (no -wal left beside it)."""
    root = tmp_path_factory.mktemp("filled") / "store"
    store = RunStore(root)
    _fill(store)
    db = sqlite3.connect(root / INDEX_FILE)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return root, _snapshot(store)


@pytest.fixture
def copy(filled, tmp_path):
    root, snap = filled
    dest = tmp_path / "store"
    shutil.copytree(root, dest)
    return dest, snap


def _drop_side_files(root) -> None:
    for suffix in ("-wal", "-shm"):
        (root / f"{INDEX_FILE}{suffix}").unlink(missing_ok=True)


def _garbage(root) -> None:
    (root / INDEX_FILE).write_bytes(os.urandom(4096))
    _drop_side_files(root)


def _truncate(root) -> None:
    path = root / INDEX_FILE
    size = path.stat().st_size
    assert size >= 4 * 4096, "the index should span several pages"
    with open(path, "r+b") as fh:
        fh.truncate(size // 2)
    _drop_side_files(root)


def _reindex_cli(root, capsys) -> dict:
    assert main(["runs", "reindex", "--store", str(root), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("damage", [_garbage, _truncate], ids=["garbage", "truncated"])
def test_damaged_index_is_named_and_reindex_restores_every_run(copy, damage, capsys) -> None:
    root, before = copy
    damage(root)
    assert index_damage(root) is not None
    with pytest.raises(StoreIndexError) as err:
        RunStore(root)
    msg = str(err.value)
    assert "damaged" in msg and str(root / INDEX_FILE) in msg
    assert "runs reindex" in msg and "not writable" not in msg
    assert f"The {N_RUNS} run folder(s)" in msg
    # every command says the same, once, with exit 2
    assert main(["runs", "list", "--store", str(root)]) == 2
    assert "runs reindex" in capsys.readouterr().err
    out = _reindex_cli(root, capsys)
    assert out["runs"] == N_RUNS and not out["skipped"]
    kept = [p for p in root.iterdir() if p.name.startswith(f"{INDEX_FILE}.damaged-")]
    assert kept and [str(p) for p in kept] == out["kept_aside"]
    after = RunStore(root)
    assert _snapshot(after) == before  # ids, metrics, configs, tables and arrays
    # and the rebuilt index works as before: a new run, a deletion
    with after.begin(_cfg(99)) as w:
        w.commit({"ppl": 1.0})
    after.delete(_cfg(0).run_id)
    assert len(after.list(status="done")) == N_RUNS


def test_missing_index_is_rebuilt_by_itself(copy) -> None:
    root, before = copy
    (root / INDEX_FILE).unlink()
    _drop_side_files(root)
    assert _snapshot(RunStore(root)) == before


def test_healthy_index_is_not_flagged_and_reindex_keeps_rows_without_folders(copy) -> None:
    """Negative control: a healthy, busy index is never called damaged; an explicit rebuild
    of a readable index also carries over the failed run's row (it has no folder)."""
    root, before = copy
    store = RunStore(root)
    for i in range(50):  # many small writes through the WAL
        store.beat(_cfg(i % N_RUNS).run_id)
    assert index_damage(root) is None
    failed = store.get(_cfg(N_RUNS).run_id)
    assert failed.status == "failed"
    done = rebuild_index(root, "replaced")
    assert done.runs == N_RUNS and done.carried == 1
    after = RunStore(root)
    assert _snapshot(after) == before
    assert after.get(failed.id).status == "failed" and "boom" in after.get(failed.id).error


def test_older_layout_is_migrated_or_rebuilt(copy) -> None:
    root, before = copy
    # an index from before heartbeats and datasets: columns are added, rows kept
    db = sqlite3.connect(root / INDEX_FILE)
    db.execute("ALTER TABLE runs DROP COLUMN heartbeat")
    db.execute("ALTER TABLE runs DROP COLUMN dataset")
    db.close()
    store = RunStore(root)
    assert _snapshot(store) == before
    assert store.get(_cfg(N_RUNS).run_id).status == "failed"  # rows kept in place
    # a layout without a required column cannot be read: set aside and rebuilt
    db = sqlite3.connect(root / INDEX_FILE)
    db.execute("DROP TABLE runs")
    db.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, status TEXT)")
    db.close()
    assert _snapshot(RunStore(root)) == before
    assert any(p.name.startswith(f"{INDEX_FILE}.older-layout-") for p in root.iterdir())


def test_a_folder_whose_config_does_not_hash_to_its_name_is_skipped(copy, capsys) -> None:
    root, before = copy
    bad = root / "runs" / _cfg(1).run_id
    cfg = json.loads((bad / "config.json").read_text())
    cfg["eval"]["seqlen"] = 999
    (bad / "config.json").write_text(json.dumps(cfg))
    _garbage(root)
    out = _reindex_cli(root, capsys)
    assert out["runs"] == N_RUNS - 1 and [s[0] for s in out["skipped"]] == [bad.name]
    assert set(_snapshot(RunStore(root))) == set(before) - {bad.name}


def test_unwritable_store_is_still_called_unwritable(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="not writable") as err:
        RunStore(blocker / "store")
    assert not isinstance(err.value, StoreIndexError)


def test_real_run_survives_a_rebuild(store_root, tiny_flags, capsys) -> None:
    """A tiny-llama eval run from the CLI: same id, metrics and window table after a
    garbage index is rebuilt."""
    flags = [f for f in tiny_flags if f != "--quiet"]
    eval_flags = [*flags[: flags.index("--calib")], *flags[flags.index("--eval") :]]
    eval_flags[eval_flags.index("--eval")] = "--dataset"
    assert main(["eval", *eval_flags, "--quiet", "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    before = _snapshot(RunStore(store_root))
    _garbage(store_root)
    _reindex_cli(store_root, capsys)
    after = _snapshot(RunStore(store_root))
    assert after == before and run_id in after


def test_app_shows_the_message_and_rebuilds(copy, monkeypatch) -> None:
    """The app says what the CLI says and offers the rebuild; one click restores the runs."""
    from streamlit.testing.v1 import AppTest

    root, before = copy
    monkeypatch.setenv("PRUNESCOPE_HOME", str(root))
    _garbage(root)
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.error) == 1
    msg = at.error[0].value
    assert "damaged" in msg and "runs reindex" in msg and "not writable" not in msg
    rebuild = next(b for b in at.button if b.label == "Rebuild the index from the run folders")
    rebuild.click()
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert f"Index rebuilt from {N_RUNS} run folder(s)" in at.success[0].value
    assert _snapshot(RunStore(root)) == before
