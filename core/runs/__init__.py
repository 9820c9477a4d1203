"""Run kinds, one module each, sharing one skeleton (``common``) and one edge (``plan``).

    eval (dense)  prune  slice  relation sweep  zeroshot  recover  sensitivity
    effdim (a report over stored runs)

Every run is planned once first (``plan``: a ``planned.Plan`` holding the resolved, validated
``RunConfig`` whose hash is the run id, its geometry, roles and method), then its kind
executes the plan (``execute``). Entry points: the ``run_*`` functions of ``parts`` (parts
in, result dict out) and ``execute(plan, store, ...)`` (or a resolved config, planned there).
"""

from core.runs.common import RunOptions
from core.runs.effdim import effdim_report
from core.runs.execute import KINDS, execute
from core.runs.parts import run_eval, run_prune, run_relation_sweep, run_slice
from core.runs.plan import (
    plan_config,
    plan_eval,
    plan_prune,
    plan_relation_sweep,
    plan_run,
    plan_slice,
    plan_zeroshot,
)
from core.runs.planned import Plan
from core.runs.resources import get_calib_windows, get_eval_windows, get_model, resolve_model_spec
from core.runs.zeroshot import run_zeroshot

__all__ = [
    "KINDS",
    "Plan",
    "RunOptions",
    "effdim_report",
    "execute",
    "get_calib_windows",
    "get_eval_windows",
    "get_model",
    "plan_config",
    "plan_eval",
    "plan_prune",
    "plan_relation_sweep",
    "plan_run",
    "plan_slice",
    "plan_zeroshot",
    "resolve_model_spec",
    "run_eval",
    "run_prune",
    "run_relation_sweep",
    "run_slice",
    "run_zeroshot",
]
