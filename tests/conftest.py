"""Shared fixtures: offline Hugging Face, a temp results store, tiny models, shared data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Tests never touch the network: transformers / datasets must not try the Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def store_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "store"
    monkeypatch.setenv("PRUNESCOPE_HOME", str(root))
    return root


@pytest.fixture
def store(store_root):
    from core.store import RunStore

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
    from core.models import load_model

    return load_model("tiny-llama")
