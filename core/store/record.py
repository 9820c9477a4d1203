"""A stored run read back: its index row (``RunRecord``) and its folder (``Run``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import torch
from safetensors import SafetensorError, safe_open

from core.errors import DamagedRunError, StoreError
from core.store.integrity import (
    ARRAYS,
    MANIFEST,
    REQUIRED,
    TABLES,
    check_folder,
    damaged_message,
    json_problem,
    manifest,
)


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
    """A finished run read back from disk. Every read of its files meets damage (a file
    missing, cut short or unreadable) with one ``DamagedRunError`` naming the run, the file
    and the way out (``core.store.integrity``); ``check`` looks at the whole folder at once."""

    def __init__(self, record: RunRecord, folder: Path) -> None:
        self.record, self.dir = record, folder

    @property
    def id(self) -> str:
        return self.record.id

    def check(self) -> None:
        """Raise ``DamagedRunError`` unless every file of the folder is whole."""
        check_folder(self.id, self.dir)

    def _damaged(self, rel: str, problem: str) -> DamagedRunError:
        return DamagedRunError(damaged_message(self.id, self.dir, rel, problem), self.id, rel)

    def _listed(self) -> dict[str, int]:
        """The files the run wrote (its manifest; empty for a run stored before manifests)."""
        listed, problem = manifest(self.dir)
        if problem is not None:
            raise self._damaged(MANIFEST, problem)
        return listed or {}

    def _path(self, rel: str, required: bool = False) -> Path | None:
        """The file's path; None when the run never wrote it; damaged when it wrote it (or
        must have) and it is gone."""
        path = self.dir / rel
        if path.is_file():
            return path
        if required or rel in self._listed():
            raise self._damaged(rel, "missing")
        return None

    def _json(self, name: str) -> dict[str, Any]:
        path = self._path(name, required=name in REQUIRED)
        if path is None:
            return {}
        problem = json_problem(path)
        if problem is not None:
            raise self._damaged(name, problem)
        return json.loads(path.read_text())

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
        """The run's tables: those in its folder and those it wrote (a missing one is then
        named as damaged when read, not taken for a table the run never had)."""
        found = {p.stem for p in (self.dir / "tables").glob("*.parquet")}
        listed = {Path(k).stem for k in self._listed() if k.startswith(TABLES)}
        return sorted(found | listed)

    def table(self, name: str) -> pd.DataFrame:
        rel = f"{TABLES}{name}.parquet"
        path = self._path(rel)
        if path is None:
            raise StoreError(f"run {self.id} has no table {name!r} (has: {self.tables()})")
        try:
            return pd.read_parquet(path)
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise self._damaged(rel, f"cannot be read as a table: {exc}") from exc

    def arrays(self, name: str, keys: list[str] | None = None) -> dict[str, torch.Tensor]:
        def read(fh: Any) -> dict[str, torch.Tensor]:
            names = keys or list(fh.keys())
            absent = sorted(set(names) - set(fh.keys()))
            if absent:  # asked for arrays the run never stored: not damage
                raise StoreError(f"run {self.id}'s {name!r} arrays hold no {absent[:3]}")
            return {k: fh.get_tensor(k) for k in names}

        return self._safetensors(name, read, {})

    def array_keys(self, name: str) -> list[str]:
        return self._safetensors(name, lambda fh: list(fh.keys()), [])

    def _safetensors(self, name: str, read: Callable[[Any], Any], none: Any) -> Any:
        """``read(handle)`` of the run's ``name`` arrays; ``none`` when it stored none."""
        rel = f"{ARRAYS}{name}.safetensors"
        path = self._path(rel)
        if path is None:
            return none
        try:
            with safe_open(str(path), framework="pt") as fh:
                return read(fh)
        except (SafetensorError, OSError, ValueError) as exc:
            raise self._damaged(rel, f"cannot be read as arrays: {exc}") from exc
