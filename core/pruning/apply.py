"""Change a model with a resolved prune config: per-layer allocation, then ``Method.apply``.

Shared by the prune and slice run kinds and by rebuilding a stored run's model
(``core.runs.rebuild``): the same calibration windows and config give the same model.
"""

from __future__ import annotations

from typing import Any

import torch

from core.adapters import resolve_roles
from core.methods import make_method
from core.methods.base import ApplyPlan, LayerContext, LinearReport, Method
from core.methods.wanda import wanda_scores
from core.models.load import LoadedModel
from core.progress import ProgressFn
from core.pruning.allocation import layer_outlier_ratio, owl_allocation, uniform_allocation
from core.pruning.layerwise import run_layerwise, run_method
from core.settings.config import PruneConfig


def allocate_sparsity(
    lm: LoadedModel,
    prune: PruneConfig,
    roles: tuple[str, ...],
    calib_ids: torch.Tensor,
    device: torch.device,
    progress: ProgressFn | None,
    **runner_kw: Any,
) -> tuple[list[dict[str, float]], list[dict[str, Any]]]:
    """Per-layer target sparsity (uniform or OWL) and the rows explaining it.

    OWL needs each layer's outlier ratio of Wanda scores |W|·‖X‖ (Wanda Eq. 1), measured by
    one extra dense pass of the shared runner that prunes nothing.
    """
    n = lm.adapter.n_layers
    ratios: list[float | None]
    if prune.allocation == "uniform":
        per_layer = uniform_allocation(n, prune.sparsity)
        ratios = [None] * n
    else:
        ratios = []

        def measure(ctx: LayerContext) -> list[LinearReport]:
            # float32 copies: a count above a threshold, not a ranking, and a layer's scores
            # are held at once
            scores = [
                wanda_scores(lin.weight.detach().float(), ctx.stats[r].col_sq_norms).float()
                for r, lin in ctx.linears.items()
            ]
            ratios.append(layer_outlier_ratio(scores, prune.owl_m))
            return []

        run_layerwise(
            lm.adapter,
            calib_ids,
            measure,
            roles,
            None,
            prune.pattern,
            device,
            needs_gram=False,
            on_progress=progress,
            stage="owl",
            changes=False,
            **runner_kw,
        )
        params = [
            sum(lin.weight.numel() for lin in lm.adapter.linears(layer, roles).values())
            for layer in lm.adapter.layers
        ]
        per_layer = owl_allocation(ratios, prune.sparsity, prune.owl_lambda, params)
    rows = [
        {"layer": i, "sparsity": s, "outlier_ratio": r}
        for i, (s, r) in enumerate(zip(per_layer, ratios, strict=True))
    ]
    return [dict.fromkeys(roles, s) for s in per_layer], rows


def apply_prune(
    lm: LoadedModel,
    prune: PruneConfig,
    calib_ids: torch.Tensor,
    device: torch.device,
    progress: ProgressFn | None = None,
    *,
    method: Method | None = None,
    roles: tuple[str, ...] | None = None,
    **runner_kw: Any,
) -> tuple[Any, list[dict[str, Any]]]:
    """Change ``lm`` in place with a resolved config: allocation, then the method's
    ``apply`` (the shared runner for layer-wise methods, SliceGPT's own procedure).
    ``method`` and ``roles``: what the run's plan resolved (``core.runs.planned.Plan``);
    built from the config when not given (a direct call). Returns (the method's result,
    allocation rows)."""
    roles = roles or resolve_roles(prune.targets)
    method = method or make_method(prune.method, prune.options)
    runner_kw = {**runner_kw, "calib_dtype": prune.calib_dtype}
    layer_sparsity, alloc_rows = allocate_sparsity(
        lm, prune, roles, calib_ids, device, progress, **runner_kw
    )
    plan = ApplyPlan(
        prune.sparsity,
        roles,
        prune.pattern,
        device,
        layer_sparsity,
        run_method,
        progress,
        runner_kw,
    )
    return method.apply(lm, calib_ids, plan), alloc_rows
