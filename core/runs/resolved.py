"""What planning resolved for a run, handed to its execution so that nothing derives it
twice: the model's geometry, the targeted roles its family has, and the method built once
with its typed options.

``core.runs.plan.check_run`` makes one for every config it checks and keeps the newest few by
run id; ``execute`` and the run kinds' steps take it from there (``core.runs.plan.resolved``),
so a config planned in this process is not checked again, and one read from a file (a
background job's JSON) is checked once, when it is executed.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from core.methods.base import Method
from core.settings.config import RunConfig

KEEP = 64  # resolved configs kept per process (a grid sweep plans one per point)


@dataclass(frozen=True)
class Resolved:
    """cfg: the checked config. geo: its model's ``core.models.geometry.Geometry``. roles: the
    linears a prune run targets that the family has (empty for other kinds). method: the
    configured method (None for runs without one)."""

    cfg: RunConfig
    geo: Any
    roles: tuple[str, ...] = ()
    method: Method | None = None


_KEPT: OrderedDict[str, Resolved] = OrderedDict()


def keep(resolved: Resolved) -> Resolved:
    """Remember ``resolved`` for its config's execution in this process."""
    key = resolved.cfg.run_id
    _KEPT[key] = resolved
    _KEPT.move_to_end(key)
    while len(_KEPT) > KEEP:
        _KEPT.popitem(last=False)
    return resolved


def recall(cfg: RunConfig) -> Resolved | None:
    """The resolved form of exactly ``cfg`` when this process checked it, else None."""
    found = _KEPT.get(cfg.run_id)
    return found if found is not None and found.cfg == cfg else None
