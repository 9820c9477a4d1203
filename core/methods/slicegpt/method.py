"""SliceGPT as a registered method: ``apply`` runs the whole-model procedure (``slice_model``)
instead of the layer-wise runner, and its runs are stored as kind 'slice'."""

from __future__ import annotations

from typing import Any

import torch

from core.methods import register
from core.methods.base import ApplyPlan, Method
from core.methods.slicegpt.budget import width_for_budget
from core.methods.slicegpt.modules import family_refusal
from core.methods.slicegpt.options import SliceOptions, SliceReport
from core.methods.slicegpt.procedure import slice_model
from core.methods.structure.budget import DecoderCounts, Knob
from core.methods.work import LayerWork, WorkShape
from core.progress import ProgressFn


@register
class SliceGPT(Method):
    """SliceGPT: rotate by PCA and slice the representation dimension d to (1 − s)·d."""

    name = "slicegpt"
    options_cls = SliceOptions
    run_kind = "slice"
    structured = True
    removes = "dimension slicing"
    needs_gram = False
    supports_patterns = ("unstructured",)
    options: SliceOptions
    cost_overhead = 1.5  # the share of its phase the counted products miss, measured

    def layer_work(self, shape: WorkShape) -> LayerWork:
        """Per layer: two PCA covariances 2·tokens·d² and eigendecompositions ~9·d³ (its
        two residual boundaries), and the rotation of every linear, 2·out·in·d."""
        d = shape.geo.hidden_size
        products = 2 * (2.0 * shape.tokens * d * d + 9.0 * d**3)
        products += sum(2.0 * o * i * d for o, i in shape.linears.values())
        return LayerWork(products)

    def budget_knob(self, counts: DecoderCounts, budget: float) -> Knob:
        """The kept width d′ nearest the budget (``width_for_budget``), as its s."""
        return width_for_budget(counts, budget, self.options.round_to, self.options.slice_head)

    def refusal(self, geometry: Any, calib_seqlen: int | None = None) -> str | None:
        """Families whose residual stream cannot be rotated (``family_refusal``)."""
        return family_refusal(geometry.traits)

    def apply(self, model: Any, calib: torch.Tensor, plan: ApplyPlan) -> SliceReport:
        """Slice ``model`` in place to d′ = sliced_width(d, plan.sparsity)."""
        offload = (plan.runner_kw or {}).get("offload")  # a streamed residency, when given
        return slice_model(
            model, calib, plan.sparsity, self.options, plan.device, plan.on_progress, offload
        )

    def slice(
        self,
        model: Any,
        calib_ids: torch.Tensor,
        sparsity: float,
        device: torch.device | str = "cpu",
        on_progress: ProgressFn | None = None,
    ) -> SliceReport:
        """``slice_model`` with this method's options."""
        return slice_model(model, calib_ids, sparsity, self.options, device, on_progress)
