"""FLAP (An et al., AAAI 2024, "Fluctuation-based adaptive structured pruning for large
language models"; reference CASIA-IVA-Lab/FLAP, ``prune_flap`` with its defaults: metric
WIFV, structure AL-AM).

1. **Fluctuation metric.** For input channel j of a residual writer W (o_proj or down_proj),
   on the dense model's calibration tokens:

       S_j = Var_t(x_{t,j}) · ‖W[:, j]‖²₂        (WIFV; IFV: the variance alone)

   with the sample variance over tokens. A channel that barely moves is well replaced by
   its mean (step 3).
2. **Standardised, ranked globally (AL-AM).** Attention: S_j² standardised over the layer's
   o_proj channels (subtract their mean, divide by their std), then averaged over the
   channels of each KV group (a KV head and the query heads that read it go together under
   GQA). MLP: S_j standardised over the layer's channels. Every layer's group and channel
   scores are then ranked together, and the lowest are removed until the removed decoder
   parameters come nearest the budget (each structure weighted by the parameters it holds:
   the reference's ``compression_weight``).
3. **Baseline bias compensation.** What the removed channels contributed on average,
   W[:, removed] · mean(x[removed]), is added to the writer's bias, so on the calibration
   tokens the block's mean output is unchanged. With post-block norms (Gemma-3) that is the
   mean of o_proj's / down_proj's output; the norm after it rescales each token, so the
   residual's mean is kept only approximately.

Deliberate differences from the reference: the variance is the Bessel-corrected one over all
calibration tokens (the reference's running update counts sequences, not tokens, and skips
the first sequence: a factor common to a layer's channels, removed by the standardisation,
bar that sequence); the number of structures removed is the one whose removed parameters
come nearest the target (the reference's cumulative-sum threshold keeps one structure fewer
or more at its boundary); each layer keeps at least its best KV group and MLP channel (a
layer without attention heads cannot run in transformers); every layer's o_proj and
down_proj get the bias (zero where nothing was removed), so the parameter count is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from core.adapters import ModelAdapter
from core.errors import ConfigError
from core.methods import register
from core.methods.base import ApplyPlan
from core.methods.structure.budget import DecoderCounts, Knob, measure_counts
from core.methods.structure.edit import add_bias, group_size, keep_channels, keep_groups
from core.methods.structure.method import StructuredMethod, width_refusal
from core.methods.structure.stats import writer_walk
from core.methods.work import LayerWork, WorkShape
from core.settings.field import option
from core.settings.patterns import check_budget

METRICS = ("WIFV", "IFV")


@dataclass(frozen=True)
class FLAPOptions:
    """metric: WIFV (variance × squared column norm, FLAP's) or IFV (variance alone); bias:
    the baseline bias compensation (off: an ablation); batch_size: sequences per forward."""

    metric: str = option(
        "WIFV",
        "Fluctuation metric",
        "WIFV: input variance × squared weight column norm (FLAP's); IFV: the variance alone",
        METRICS,
    )
    bias: bool = option(
        True,
        "Bias compensation",
        "add the removed channels' mean contribution as a bias of o_proj / down_proj",
    )
    batch_size: int = option(
        8, "Sequences per forward", "calibration batch", (1, 1024), expert=True
    )

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ConfigError(f"metric must be one of {METRICS}, got {self.metric!r}")
        if not isinstance(self.bias, bool):
            raise ConfigError(f"bias must be true or false, got {self.bias!r}")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {self.batch_size!r}")


# ---- the formulas ------------------------------------------------------------------------------
def fluctuation(variance: torch.Tensor, W: torch.Tensor, metric: str = "WIFV") -> torch.Tensor:
    """S_j = Var(x_j)·‖W[:, j]‖² (WIFV) or Var(x_j) (IFV), W (out, in): (in,) float64."""
    var = variance.double()
    return var if metric == "IFV" else var * W.double().pow(2).sum(0)


def standardise(x: torch.Tensor) -> torch.Tensor:
    """(x − mean(x)) / std(x) over the last axis (the sample std, as torch.std)."""
    return (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)


def group_scores(fluct: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Attention: S_j² standardised over the layer's o_proj channels, then the mean over
    each KV group's channels: (n_groups · gs · hd,) -> (n_groups,)."""
    return standardise(fluct.pow(2)).view(n_groups, -1).mean(1)


def compensation(W: torch.Tensor, mean: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """W[:, removed] · mean(x[removed]) (out,) float64: the removed channels' average output."""
    gone = ~keep.to(W.device)
    return W.double()[:, gone] @ mean.double().to(W.device)[gone]


def flap_target(counts: DecoderCounts, fraction: float, bias: bool) -> int:
    """Structure parameters to remove so that the decoder ends ``fraction`` smaller: the
    fraction of its parameters, plus the biases compensation adds to every layer (none at 0:
    nothing is removed)."""
    if fraction <= 0:
        return 0
    return round(fraction * counts.decoder) + (counts.n_layers * counts.writer_bias if bias else 0)


def flap_knob(counts: DecoderCounts, budget: float, bias: bool = True) -> Knob:
    """FLAP's knob is the fraction itself; a budget beyond what leaves each layer one KV
    group and one MLP channel is refused."""
    budget = check_budget(budget)
    most = counts.n_layers * (
        (counts.n_groups - 1) * counts.group + (counts.n_channels - 1) * counts.channel
    )
    if flap_target(counts, budget, bias) > most:
        raise ConfigError(f"FLAP cannot remove {budget:g} of the decoder and keep every layer")
    return Knob(budget, budget, f"{budget:g} of the decoder's parameters, ranked globally")


def select_global(
    scores: torch.Tensor, params: torch.Tensor, protected: torch.Tensor, target: int
) -> torch.Tensor:
    """Which structures to remove: the lowest-scoring ones, in ascending order (ties: the
    earlier first), as many as bring their summed ``params`` nearest ``target``;
    ``protected`` ones never. All (N,); returns a (N,) bool mask of removals."""
    candidates = (~protected).nonzero().flatten()
    order = candidates[torch.sort(scores[candidates].double(), stable=True).indices]
    removed = torch.cat([torch.zeros(1, dtype=torch.long), params[order].long().cumsum(0)])
    k = int((removed - target).abs().argmin())
    out = torch.zeros(scores.numel(), dtype=torch.bool)
    out[order[:k]] = True
    return out


def best_of_each(scores: torch.Tensor) -> torch.Tensor:
    """(L, n) -> (L, n) bool: True at each row's highest score (kept whatever the budget)."""
    out = torch.zeros_like(scores, dtype=torch.bool)
    out[torch.arange(scores.shape[0]), scores.argmax(1)] = True
    return out


@register
class FLAP(StructuredMethod):
    """FLAP: fluctuation-ranked KV groups and MLP channels, adaptive across layers, with
    baseline bias compensation."""

    name = "flap"
    options_cls = FLAPOptions
    options: FLAPOptions
    removes = "KV groups and MLP channels (adaptive)"

    @property
    def adds_bias(self) -> bool:  # type: ignore[override]
        return self.options.bias

    def layer_work(self, shape: WorkShape) -> LayerWork:
        """Per layer: Σx and Σx² of the two writers' inputs, 2·tokens·(o_in + I), and the
        squared column norms, d·(o_in + I)."""
        widths = shape.geo.in_features("o") + shape.geo.intermediate_size
        return LayerWork((2.0 * shape.tokens + shape.geo.hidden_size) * widths)

    def refusal(self, geometry: Any, calib_seqlen: int | None = None) -> str | None:
        return width_refusal(geometry.traits)

    def budget_knob(self, counts: DecoderCounts, budget: float) -> Knob:
        return flap_knob(counts, budget, self.options.bias)

    def check_knob(self, counts: DecoderCounts, sparsity: float) -> None:
        if sparsity > 0:  # nothing to reach at 0
            flap_knob(counts, sparsity, self.options.bias)

    def shrink(
        self, adapter: ModelAdapter, calib: torch.Tensor, plan: ApplyPlan
    ) -> tuple[list[dict[str, Any]], list[int], str]:
        counts = measure_counts(adapter)
        self.check_knob(counts, plan.sparsity)
        moments = writer_walk(
            adapter, calib, plan.device, self.options.batch_size, None, plan.on_progress
        )
        G, L, metric = counts.n_groups, adapter.n_layers, self.options.metric
        attn, mlp = [], []
        for layer, m in zip(adapter.layers, moments, strict=True):
            o, down = adapter.attn_writer(layer), adapter.mlp_writer(layer)
            attn.append(group_scores(fluctuation(m.attn.variance, o.weight, metric), G))
            mlp.append(standardise(fluctuation(m.mlp.variance, down.weight, metric)))
        attn_s, mlp_s = torch.stack(attn), torch.stack(mlp)  # (L, G), (L, I)
        n_attn = attn_s.numel()
        remove = select_global(
            torch.cat([attn_s.flatten(), mlp_s.flatten()]),
            torch.tensor([counts.group] * n_attn + [counts.channel] * mlp_s.numel()),
            torch.cat([best_of_each(attn_s).flatten(), best_of_each(mlp_s).flatten()]),
            flap_target(counts, plan.sparsity, self.options.bias),
        )
        keep_g, keep_c = ~remove[:n_attn].view(L, G), ~remove[n_attn:].view(L, -1)
        rows = []
        for i, (layer, m) in enumerate(zip(adapter.layers, moments, strict=True)):
            self._compress(adapter, layer, keep_g[i], keep_c[i], m)
            rows.append(
                {
                    "layer": i,
                    "kept": True,
                    "kv_groups_removed": int((~keep_g[i]).sum()),
                    "channels_removed": int((~keep_c[i]).sum()),
                }
            )
        groups, channels = int((~keep_g).sum()), int((~keep_c).sum())
        what = f"{groups} of {L * G} KV groups and {channels} of {keep_c.numel()} MLP channels"
        return rows, list(range(L)), what

    def _compress(self, adapter, layer, keep_g, keep_c, moments) -> None:
        """One layer: biases from the dense writers first, then the narrowing."""
        o, down = adapter.attn_writer(layer), adapter.mlp_writer(layer)
        _, gs = group_size(adapter, layer)
        keep_o = keep_g.repeat_interleave(gs * adapter.head_dim)  # per o_proj channel
        if self.options.bias:
            add_bias(o, compensation(o.weight, moments.attn.mean, keep_o))
            add_bias(down, compensation(down.weight, moments.mlp.mean, keep_c))
        if not bool(keep_g.all()):
            keep_groups(adapter, layer, keep_g)
        if not bool(keep_c.all()):
            keep_channels(adapter, layer, keep_c)
