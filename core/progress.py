"""Progress reporting: long work calls ``on_progress(stage, done, total, detail)``.

The CLI turns the calls into tqdm bars, background jobs append them to a JSONL file that
the app polls, tests pass ``None``.
"""

from __future__ import annotations

from typing import Protocol


class ProgressFn(Protocol):
    def __call__(self, stage: str, done: int, total: int, detail: str = "") -> None: ...


def no_progress(stage: str, done: int, total: int, detail: str = "") -> None:
    """The default callback: report nothing."""


def report(fn: ProgressFn | None, stage: str, done: int, total: int, detail: str = "") -> None:
    if fn is not None:
        fn(stage, done, total, detail)
