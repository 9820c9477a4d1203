"""The contract between the shared layer-wise runner and every pruning method.

The runner (``core.runner``) walks the decoder layers one at a time. For each layer it
collects the statistics a method asks for on the calibration inputs, hands the method a
``LayerContext``, lets it edit the layer's weights in place, and then re-runs the layer to
produce the inputs of the next one (Wanda / SparseGPT "sequential" calibration).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn


@dataclass
class LinearStats:
    """Input statistics of one ``nn.Linear`` on the calibration tokens.

    Full mode (``Method.needs_gram``): gram (in, in) float32 = Σ_tokens x xᵀ, from which
    SparseGPT builds H = 2·gram/n and errors are exact. The runner adds one float32 product per
    sequence, in order, into a float64 sum and casts once, so its batch does not change it.
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
    adapter: Any  # core.adapter.ModelAdapter (Any to avoid an import cycle)
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


class Method:
    """Base class of a registered pruning method.

    Subclasses set ``name``, ``options_cls`` (a frozen dataclass of their own options) and
    implement ``prune_layer``. ``needs_gram`` (full Gram matrices, else column norms plus a
    token sample) and ``needs_inputs`` (roles whose raw inputs are kept) tell the runner what
    to collect.
    """

    name: ClassVar[str] = ""
    options_cls: ClassVar[type] = object
    needs_gram: ClassVar[bool] = True
    needs_inputs: ClassVar[frozenset[str]] = frozenset()
    supports_patterns: ClassVar[tuple[str, ...]] = ("unstructured", "nm")
    # Structured methods (SliceGPT) change shapes: the pipeline calls their own procedure
    # instead of masking linears through the runner.
    structured: ClassVar[bool] = False

    def __init__(self, options: Any) -> None:
        self.options = options

    def prune_layer(self, ctx: LayerContext) -> list[LinearReport]:
        raise NotImplementedError
