"""Where a command writes: checked once, at the edge, before any run is read or model loaded.

One rule for every output path a user names (``runs report OUT``, ``runs export DEST``,
``--save DIR`` of prune, slice, recover and ``run --config``):

- its parent must be an existing folder that this process can write into (a missing parent
  is refused, not created: a mistyped path should not grow a tree of folders);
- a file target (``runs report``) must not be a folder; an existing file is replaced only
  with ``--force``;
- a folder target (``--save``, the run's copy under ``runs export DEST``) must not be a file;
  an existing folder that is not empty is written over only with ``--force`` (an empty one
  is used as it is).

The app names no output path: its downloads stream bytes to the browser and a model it saves
goes to its own folder in the store (``core.jobs.records.model_dir``).
"""

from __future__ import annotations

import os
from pathlib import Path

from core.errors import ConfigError

FILE, FOLDER = "file", "folder"


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def check_output(path: str | Path, what: str, kind: str = FILE, force: bool = False) -> Path:
    """The absolute path ``what`` (e.g. "the report") is written to, or ``ConfigError``
    saying why it cannot be (see the module docstring). ``kind``: FILE or FOLDER."""
    target = Path(path).expanduser().absolute()
    parent = target.parent
    if not parent.is_dir():
        why = "is a file, not a folder" if parent.exists() else "does not exist (create it first)"
        raise ConfigError(f"{what} cannot go to {target}: the folder {parent} {why}")
    if not _writable(parent):
        raise ConfigError(f"{what} cannot go to {target}: {parent} is not writable")
    if kind == FILE:
        if target.is_dir():
            raise ConfigError(f"{what} is a file: {target} is a folder; name a file in it")
        if target.exists() and not force:
            raise ConfigError(f"{target} exists; --force replaces it with {what}")
        if target.exists() and not os.access(target, os.W_OK):
            raise ConfigError(f"{what} cannot replace {target}: the file is not writable")
    elif kind == FOLDER:
        if target.exists() and not target.is_dir():
            raise ConfigError(f"{what} is a folder: {target} is a file")
        if target.is_dir() and any(target.iterdir()) and not force:
            raise ConfigError(f"{target} is not empty; --force writes {what} over it")
        if target.is_dir() and not _writable(target):
            raise ConfigError(f"{what} cannot go to {target}: the folder is not writable")
    else:
        raise ValueError(f"unknown output kind {kind!r}")
    return target
