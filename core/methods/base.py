"""The contract between the shared layer-wise runner and every pruning method.

The runner (``core.pruning.layerwise``) walks the decoder layers one at a time. For each layer it
collects the statistics a method asks for on the calibration inputs, hands the method a
``LayerContext``, lets it edit the layer's weights in place, and then re-runs the layer to
produce the inputs of the next one (Wanda / SparseGPT "sequential" calibration).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from core.errors import ConfigError
from core.methods.work import LayerWork, MissingCostTerms, WorkShape


@dataclass
class LinearStats:
    """Input statistics of one ``nn.Linear`` on the calibration tokens.

    Full mode (``Method.needs_gram``): gram (in, in) float32 = Σ_tokens x xᵀ, from which
    SparseGPT builds H = 2·gram/n and errors are exact. The runner sums float32 products over
    fixed chunks of sequences in float64 and casts once (``core.pruning.gram``), so its batch
    does not change it.
    Light mode (Wanda, magnitude: they only need column norms): sq_norms (in,) = Σ x_j² and
    sample (k, in), an evenly strided subsample of at most ``SAMPLE_ROWS`` token rows on which
    reconstruction errors are measured. Light mode skips the O(tokens·in²) Gram products.
    """

    gram: torch.Tensor | None = None
    n_tokens: int = 0
    sq_norms: torch.Tensor | None = None
    sample: torch.Tensor | None = None
    _sample_gram: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def col_sq_norms(self) -> torch.Tensor:  # (in,) = ‖X_j‖²
        return self.gram.diagonal() if self.gram is not None else self.sq_norms

    @property
    def error_gram(self) -> torch.Tensor:
        """(in, in) Gram the reconstruction error is measured with (exact or on the sample).
        The sample's is computed once: q/k/v and gate/up share one LinearStats."""
        if self.gram is not None:
            return self.gram
        if self._sample_gram is None:
            self._sample_gram = self.sample.T @ self.sample
        return self._sample_gram

    @property
    def has_error_gram(self) -> bool:
        """Whether ``error_gram`` is at hand without a product."""
        return self.gram is not None or self._sample_gram is not None

    @property
    def error_tokens(self) -> int:
        return self.n_tokens if self.gram is not None else int(self.sample.shape[0])


SAMPLE_ROWS = 2048


@dataclass
class LinearReport:
    """One row of the per-layer table: what pruning did to one linear."""

    layer: int
    role: str  # q, k, v, o, gate, up, down
    shape: tuple[int, int]  # (out, in)
    target_sparsity: float
    achieved_sparsity: float
    rel_error: float  # ||WX - ŴX||_F / ||WX||_F on the calibration inputs
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class LayerContext:
    """Everything a method may look at when pruning decoder layer ``index``.

    linears: role -> nn.Linear of this layer (already on ``device``).
    stats: role -> LinearStats for the roles the method asked for (gram on ``device``, float32).
    inputs: role -> (N, L, in) float32 raw inputs of that linear, only for roles in
        ``Method.needs_inputs`` (CPU or device, see runner).
    sparsity: role -> target sparsity for this layer (after per-layer allocation).
    pattern: "unstructured" or "N:M".
    position_embeddings: (cos, sin) each (1, L, head_dim) for RoPE models, else None.
    """

    index: int
    n_layers: int
    layer: nn.Module
    adapter: Any  # core.adapters.ModelAdapter (Any to avoid an import cycle)
    linears: dict[str, nn.Linear]
    stats: dict[str, LinearStats]
    inputs: dict[str, torch.Tensor]
    sparsity: dict[str, float]
    pattern: str
    device: torch.device
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None
    # Free-form outputs a method wants stored with the run: named tables (lists of flat
    # dict rows, e.g. a GD trajectory) and named arrays (saved as safetensors).
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    arrays: dict[str, torch.Tensor] = field(default_factory=dict)

    def add_rows(self, table: str, rows: list[dict[str, Any]]) -> None:
        self.tables.setdefault(table, []).extend(rows)


@dataclass
class ApplyPlan:
    """What a run asks a method to do to a model (``Method.apply``).

    sparsity: the run's target (SliceGPT: the slicing fraction s). roles: the linears to
    prune. layer_sparsity: per decoder layer, role -> target after allocation (uniform or
    OWL). runner: the shared layer-wise runner (``core.pruning.layerwise.run_method``), handed
    in by the run so that methods never import it. runner_kw: its keyword options
    (activations_on_cpu).
    """

    sparsity: float
    roles: tuple[str, ...]
    pattern: str
    device: torch.device
    layer_sparsity: list[dict[str, float]] = field(default_factory=list)
    runner: Callable[..., Any] | None = None
    on_progress: Callable[..., None] | None = None
    runner_kw: dict[str, Any] = field(default_factory=dict)


class Method:
    """Base class of a registered pruning method.

    Subclasses set ``name`` and ``options_cls`` (a frozen dataclass of their own options).
    Layer-wise methods implement ``prune_layer(ctx: LayerContext) -> list[LinearReport]`` and
    inherit ``apply``, which hands them to the shared runner layer by layer; ``needs_gram``
    (full Gram matrices, else column norms plus a token sample) and ``needs_inputs`` (roles
    whose raw inputs are kept) tell the runner what to collect. Methods that change shapes
    (SliceGPT) override ``apply`` with their own procedure and set ``run_kind`` to the run
    kind that stores their result.
    """

    name: ClassVar[str] = ""
    options_cls: ClassVar[type] = object
    needs_gram: ClassVar[bool] = True
    needs_inputs: ClassVar[frozenset[str]] = frozenset()
    supports_patterns: ClassVar[tuple[str, ...]] = ("unstructured", "nm")
    run_kind: ClassVar[str] = "prune"  # the run kind (core.runs) that applies and stores it
    # Describes the method for listings: True when it removes whole dimensions, and what.
    structured: ClassVar[bool] = False
    removes: ClassVar[str] = ""
    # False when the method only zeroes weights (the pristine weights times its keep mask give
    # the pruned model back: core.runs.restore stores the mask alone); True when it changes
    # the kept weights too (SparseGPT's update), or may.
    updates_weights: ClassVar[bool] = True

    # Its cost, for the duration estimate (core.planning.cost): calibration passes through
    # every layer (statistics, then the changed layer's outputs for the next one), and the
    # share of its phase the counted work misses, measured (core.planning.speed refits it).
    calib_passes: ClassVar[float] = 2.0
    cost_overhead: ClassVar[float] = 1.0

    def __init__(self, options: Any) -> None:
        self.options = options

    def layer_work(self, shape: WorkShape) -> LayerWork:
        """The method's own work on one decoder layer of the model ``shape`` describes, for
        the duration estimate. Every method declares it; none is assumed for it."""
        raise MissingCostTerms(f"method {self.name!r} declares no cost terms (layer_work)")

    def apply(self, model: Any, calib: torch.Tensor, plan: ApplyPlan) -> Any:
        """Prune ``model`` (a LoadedModel) in place on calibration tokens ``calib`` (N, L).

        Layer-wise: the plan's runner calls ``prune_layer`` on every decoder layer and
        returns its RunnerResult (per-linear reports, method tables and arrays)."""
        return plan.runner(
            self,
            model.adapter,
            calib,
            plan.roles,
            plan.layer_sparsity,
            plan.pattern,
            plan.device,
            on_progress=plan.on_progress,
            **plan.runner_kw,
        )

    def budget_knob(self, counts: Any, budget: float) -> Any:
        """The value of this method's knob (its sparsity) that removes the fraction ``budget``
        of the decoder's parameters, as a ``core.methods.structure.budget.Knob`` computed
        from ``counts`` (``DecoderCounts``). Structured methods only."""
        raise ConfigError(
            f"{self.name} takes a sparsity, not a parameter budget: --budget is for methods "
            "that remove whole structures (shortgpt, flap, wanda-sp, slicegpt)"
        )

    def refusal(self, geometry: Any, calib_seqlen: int | None = None) -> str | None:
        """Why this method cannot run on the model ``geometry`` describes (a
        ``core.models.geometry.Geometry``: shapes and family traits read from the config alone), or
        None when it can. Run planning turns a reason into one ConfigError before any weight
        is loaded; ``python -m core methods`` lists it per family. None by default."""
        return None

    @classmethod
    def check_plan(cls, roles: tuple[str, ...], pattern: str) -> None:
        """Raise ConfigError for targets or a pattern the method cannot prune; called when a
        run is planned, before any model is loaded or anything stored. Nothing by default."""

    def run_summary(self, tables: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
        """Run-level metrics a method derives from its own tables (merged into the run's
        metrics); none by default."""
        return {}

    def model_summary(self, model: str) -> dict[str, Any]:
        """Run-level notes a method derives from the model's name (merged into the run's
        metrics: attention-gd's standing against Wanda on that model); none by default."""
        return {}
