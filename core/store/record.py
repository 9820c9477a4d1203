"""A stored run read back: its index row (``RunRecord``) and its folder (``Run``)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from safetensors import safe_open

from core.errors import StoreError


@dataclass(frozen=True)
class RunRecord:
    """One row of the index."""

    id: str
    kind: str
    status: str
    created: float
    finished: float | None
    model: str | None
    method: str | None
    sparsity: float | None
    pattern: str | None
    dataset: str | None
    summary: dict[str, Any]
    config: dict[str, Any]
    error: str | None
    pid: int | None
    host: str | None
    heartbeat: float | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> RunRecord:
        d = dict(row)
        d["summary"] = json.loads(d["summary"] or "{}")
        d["config"] = json.loads(d["config"])
        return cls(**d)


class Run:
    """A finished run read back from disk."""

    def __init__(self, record: RunRecord, folder: Path) -> None:
        self.record, self.dir = record, folder

    @property
    def id(self) -> str:
        return self.record.id

    def _json(self, name: str) -> dict[str, Any]:
        path = self.dir / name
        return json.loads(path.read_text()) if path.is_file() else {}

    @property
    def config(self) -> dict[str, Any]:
        return self._json("config.json")

    @property
    def env(self) -> dict[str, Any]:
        return self._json("env.json")

    @property
    def metrics(self) -> dict[str, Any]:
        return self._json("metrics.json")

    def tables(self) -> list[str]:
        return sorted(p.stem for p in (self.dir / "tables").glob("*.parquet"))

    def table(self, name: str) -> pd.DataFrame:
        path = self.dir / "tables" / f"{name}.parquet"
        if not path.is_file():
            raise StoreError(f"run {self.id} has no table {name!r} (has: {self.tables()})")
        return pd.read_parquet(path)

    def arrays(self, name: str, keys: list[str] | None = None) -> dict[str, torch.Tensor]:
        path = self.dir / "arrays" / f"{name}.safetensors"
        if not path.is_file():
            return {}
        with safe_open(str(path), framework="pt") as fh:
            return {k: fh.get_tensor(k) for k in (keys or list(fh.keys()))}

    def array_keys(self, name: str) -> list[str]:
        path = self.dir / "arrays" / f"{name}.safetensors"
        if not path.is_file():
            return []
        with safe_open(str(path), framework="pt") as fh:
            return list(fh.keys())
