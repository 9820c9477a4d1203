import json

import pytest
import torch

from core.errors import StoreError
from core.settings.config import EvalConfig, ModelSpec, RunConfig
from core.store.run_store import RunStore


def _cfg(seqlen=8):
    return RunConfig("eval", ModelSpec("tiny-llama", "cpu", "float32"), EvalConfig(seqlen=seqlen))


def test_run_id_is_hash_of_resolved_config():
    assert _cfg().run_id == _cfg().run_id
    assert _cfg(8).run_id != _cfg(16).run_id
    assert json.loads(_cfg().canonical_json())["eval"]["seqlen"] == 8


def test_write_load_delete(store):
    cfg = _cfg()
    with store.begin(cfg) as w:
        w.write_env({"torch": torch.__version__})
        w.write_table("layers", [{"layer": 0, "x": 1.5}, {"layer": 1, "x": 2.5}])
        w.write_arrays("masks", {"m": torch.ones(2, 3, dtype=torch.bool)})
        w.progress("eval", 1, 2)
        w.commit({"ppl": 3.0})
    run = store.load(cfg.run_id)
    assert run.metrics == {"ppl": 3.0} and run.config["kind"] == "eval"
    assert run.table("layers")["x"].tolist() == [1.5, 2.5]
    assert run.arrays("masks")["m"].dtype == torch.bool
    assert [r.id for r in store.list()] == [cfg.run_id]
    assert store.get(cfg.run_id[:6]).id == cfg.run_id  # a unique prefix is enough
    store.delete(cfg.run_id)
    assert store.list() == [] and not store.run_dir(cfg.run_id).exists()


def test_crash_mid_run_leaves_nothing_marked_done(store):
    cfg = _cfg()
    with pytest.raises(RuntimeError), store.begin(cfg) as w:
        w.write_table("layers", [{"layer": 0}])
        raise RuntimeError("boom")
    rec = store.get(cfg.run_id)
    assert rec.status == "failed" and "boom" in rec.error
    assert not store.run_dir(cfg.run_id).exists()
    assert list((store.root / "tmp").iterdir()) == []
    with pytest.raises(StoreError, match="failed"):
        store.load(cfg.run_id)


def test_cancel_is_recorded(store):
    cfg = _cfg()
    with pytest.raises(KeyboardInterrupt), store.begin(cfg):
        raise KeyboardInterrupt
    assert store.get(cfg.run_id).status == "cancelled"


def test_dead_process_marked_interrupted(store_root):
    store = RunStore(store_root)
    cfg = _cfg()
    store.begin(cfg)  # never committed: simulate a killed process by faking its pid
    store._query("UPDATE runs SET pid=? WHERE id=?", (2**22 + 12345, cfg.run_id))
    RunStore(store_root)  # re-opening reconciles
    rec = store.get(cfg.run_id)
    assert rec.status == "interrupted"
    assert list((store_root / "tmp").iterdir()) == []


def test_failed_rerun_keeps_previous_result(store):
    cfg = _cfg()
    with store.begin(cfg) as w:
        w.commit({"ppl": 1.0})
    with pytest.raises(ValueError), store.begin(cfg, force=True):
        raise ValueError("bad")
    # the index says failed, the old folder is untouched until a rerun commits
    assert store.get(cfg.run_id).status == "failed"
    assert store.run_dir(cfg.run_id).joinpath("metrics.json").is_file()


def test_unwritable_store(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="not writable"):
        RunStore(blocker / "store")


def test_waits_for_a_run_computed_elsewhere(store):
    """A second job needing the same run (a shared dense baseline) waits instead of failing."""
    import subprocess
    import sys
    import time

    cfg = _cfg()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        store.begin(cfg)
        store._query("UPDATE runs SET pid=? WHERE id=?", (sleeper.pid, cfg.run_id))
        assert store.running_elsewhere(cfg.run_id)
        t0 = time.time()
        with pytest.raises(StoreError, match="gave up"):
            store.wait_while_running(cfg.run_id, poll_s=0.05, timeout_s=0.3)
        assert time.time() - t0 >= 0.3
    finally:
        sleeper.kill()
        sleeper.wait()
    store.wait_while_running(cfg.run_id, poll_s=0.05)  # the process died: returns at once
    assert not store.running_elsewhere(cfg.run_id)


def test_version_changes_with_every_index_write(store):
    """RunStore.version keys the app's cached reads: a begun, a finished and a deleted run
    each give a new stamp, and reading gives none."""
    cfg = _cfg()
    stamps = [store.version()]
    with store.begin(cfg) as w:
        stamps.append(store.version())
        w.commit({"ppl": 3.0})
    stamps.append(store.version())
    store.list()
    store.load(cfg.run_id)
    assert store.version() == stamps[-1]
    store.delete(cfg.run_id)
    stamps.append(store.version())
    assert len(set(stamps)) == len(stamps)
