"""A run's plan: what planning decided for one run, handed to its execution as an argument.

``core.runs.plan`` alone makes Plans: ``plan_run`` checks a resolved ``RunConfig`` against
its model's geometry (read from the config alone) and builds the method once with its typed
options; ``plan_config`` plans a config a caller holds alone (a job's file). Execution
(``core.runs.execute`` and the run kinds it dispatches to) takes the Plan and derives none
of it again. How many plans a job makes is written in docs/architecture.md ("One run",
step 3): one in the process that launches it, one in the job's own process, from its file.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from core.methods.base import Method
from core.models.geometry import Geometry
from core.planning.fit import Fit, plan_fit
from core.settings.config import RunConfig


@dataclass(frozen=True)
class Plan:
    """cfg: the checked, resolved config (its hash is the run id; a background job's file is
    this config as JSON). geo: its model's geometry (None for zero-shot and recovery configs,
    checked against their source or parent run when they execute). roles: the linears a
    prune run targets that the family has (empty for other kinds). method: the configured
    method, built once with its typed options (None for runs without one)."""

    cfg: RunConfig
    geo: Geometry | None = None
    roles: tuple[str, ...] = ()
    method: Method | None = None

    @cached_property
    def placement(self) -> Fit:
        """Where the run's model fits (``core.planning.fit``): in memory or streamed
        (``stream``), with the figures that chose it. A path that fits nowhere was refused
        with these figures when the config was resolved, so a Plan never holds one; computed
        when first asked (the forms' caption), once per Plan."""
        return plan_fit(self.cfg.model, self.cfg.calib, self.cfg.eval)
