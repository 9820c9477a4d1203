"""Shared fixtures: offline Hugging Face, a temp results store, tiny models, shared data."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

# Tests never touch the network: transformers / datasets must not try the Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked ``long`` first (a stable sort): under pytest-xdist (``make test``, with
    ``--no-loadscope-reorder``) their files then start at once and run beside the rest, instead
    of the longest test starting last and running alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def pytest_collection_finish(session) -> None:
    """Freeze the heap the test modules' imports built (torch, transformers, pandas), as
    pages/serve.py does for the app: every run's ``release_freed`` collects garbage, and a
    full collection walked those objects each time (about 0.2 s a call)."""
    gc.freeze()


@pytest.fixture
def store_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "store"
    monkeypatch.setenv("PRUNESCOPE_HOME", str(root))
    return root


@pytest.fixture
def store(store_root):
    from core.store.run_store import RunStore

    return RunStore(store_root)


@pytest.fixture
def tiny_flags(store_root) -> list[str]:
    """CLI flags of a run of the tiny Llama on CPU: pydoc text, 4 calibration windows of 64
    tokens, 4 evaluation windows, stored in the test's own store."""
    return [
        *("--model", "tiny-llama", "--device", "cpu", "--dtype", "float32"),
        *("--calib", "pydoc", "--nsamples", "4", "--seqlen", "64"),
        *("--eval", "pydoc", "--max-windows", "4"),
        *("--store", str(store_root), "--quiet"),
    ]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "wikitext-2-raw").is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def tiny():
    from core.models.load import load_model

    return load_model("tiny-llama")


@pytest.fixture
def accuracy_runs(store) -> tuple[str, str]:
    """(dense zero-shot run id, pruned run id) stored by hand: PIQA accuracy 0.7 dense and
    0.6 pruned (with a note), linked as a prune run links its dense zero-shot run."""
    from core.settings.config import (
        CalibConfig,
        DataSpec,
        EvalConfig,
        ModelSpec,
        PruneConfig,
        RunConfig,
    )

    tiny = ModelSpec("tiny-llama", "cpu", "float32")
    row = {"task": "piqa", "label": "PIQA", "n": 50, "acc_stderr": 0.06, "acc_norm": 0.7}
    dense = RunConfig(
        "zeroshot", tiny, extra=(("source_run", None), ("zeroshot", {"tasks": ["piqa"]}))
    )
    with store.begin(dense) as w:
        w.write_table("zeroshot", [{**row, "acc": 0.7, "note": ""}])
        w.commit({"mean_acc": 0.7, "acc_piqa": 0.7})
    pruned = RunConfig(
        "prune",
        tiny,
        EvalConfig(DataSpec("pydoc"), 64, 4),
        CalibConfig(DataSpec("pydoc", "train"), 4, 64),
        PruneConfig("wanda", 0.5),
    )
    with store.begin(pruned) as w:
        w.write_table("zeroshot", [{**row, "acc": 0.6, "note": "3 items skipped"}])
        w.commit(
            {
                "dense_ppl": 250.0,
                "ppl": 260.0,
                "achieved_sparsity": 0.5,
                "mean_acc": 0.6,
                "acc_piqa": 0.6,
                "dense_mean_acc": 0.7,
                "dense_zeroshot_run": dense.run_id,
            }
        )
    return dense.run_id, pruned.run_id
