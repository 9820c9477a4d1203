"""The cost model of a run: its work in floating-point operations, phase by phase, from
the model's shapes (config.json only, ``core.models.geometry``) and the run's token counts.

``core.runs.estimate`` turns it into seconds with the device's measured speed; the formulas
are listed there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from core.analysis.effdim import windows_needed
from core.data import C4_EVAL_WINDOWS
from core.methods import make_method
from core.methods.base import Method
from core.methods.work import LayerWork, WorkShape
from core.models.geometry import Geometry
from core.models.load import TINY_MODELS, model_config
from core.names import BF16, PRUNE, ROLES, family_roles
from core.settings.config import CalibConfig, ModelSpec, RunConfig, zeroshot_from

# Corpus sizes in tokens of a ~50k-vocabulary BPE tokenizer (the byte tokenizer of the
# tiny models reads ~4.4 bytes per such token).
CORPUS_TOKENS = {"wikitext2": 300_000, "pydoc": 400_000}
FILE_TOKENS = 100_000
BYTES_PER_TOKEN = 4.4
# task -> (items in the scored split, choices per item, tokens per context + choice); the
# tokens are the means over the bundled splits with smollm2-135m's tokenizer (context +
# continuation, as core.evaluation.accuracy scores them), rounded.
TASK_SIZES = {
    "piqa": (1838, 2, 36),
    "hellaswag": (10042, 4, 79),
    "arc_easy": (2376, 4, 32),
    "arc_challenge": (1172, 4, 37),
    "winogrande": (1267, 2, 23),
    "boolq": (3270, 2, 152),
}
OTHER_TASK = (2000, 4, 80)
# Work that is not a batched forward, in FLOPs of one, fitted to a Wanda run of smollm2-135m
# timed stage by stage (docs/benchmarks.md, "Cost model constants"): an eigvalsh of a d x d
# float64 Gram costs ~20 d^3, and a (1, L) forward runs at ~0.4 of the batched rate.
EIG_FLOPS_PER_D3 = 20.0
BATCH1_SLOWDOWN = 2.5
# Work of a pruning method that is not a batched product, in FLOPs at the device's batched rate,
# fitted on the 50% runs of the quiet demo set (docs/benchmarks.md, "Cost model constants"):
# choosing the pruned weights (score, sort, mask and the per-linear report) per weight, and
# SparseGPT's OBS sweep (Alg. 1), a Python loop over each linear's input columns, per column.
# Neither shrinks with fewer calibration tokens, which is why a pure FLOP ratio measured on a
# small run overstated big ones.
SELECT_FLOPS_PER_WEIGHT = 4.7e3
COLUMN_FLOPS = 3.0e7
LATENCY_FORWARDS = 6  # core.runs.measure.forward_latency_ms: a warm-up and 5 timed forwards
PROBE_WINDOWS = 2  # core.runs.prune: calibration and held-out windows of the attention probes
# Calibration forwards in bfloat16 (PruneConfig.calib_dtype) count as this many times fewer
# float32 FLOPs: on an AVX512_BF16 CPU their products ran 2.1x faster and the forwards as a
# whole (attention kernel and norms unchanged) 1.6x (profiles in docs/benchmarks.md).
BF16_FORWARD_SPEEDUP = 1.6


@dataclass(frozen=True)
class Shape:
    """What the cost model needs of a model: its geometry and vocabulary."""

    geo: Geometry
    vocab: int
    tiny: bool  # byte tokenizer: more tokens per corpus

    def linears(self) -> dict[str, tuple[int, int]]:
        """role -> (out, in) of one decoder layer's linears, those its family has (OPT's
        MLP has no gate)."""
        g = self.geo
        attn, kv = g.n_heads * g.head_dim, g.n_kv_heads * g.head_dim
        d, ff = g.hidden_size, g.intermediate_size
        shapes = {
            "q": (attn, d),
            "k": (kv, d),
            "v": (kv, d),
            "o": (d, attn),
            "gate": (ff, d),
            "up": (ff, d),
            "down": (d, ff),
        }
        return {role: shapes[role] for role in ROLES if role in g.traits.roles}

    @property
    def layer_params(self) -> int:
        return sum(o * i for o, i in self.linears().values())

    @property
    def n_params(self) -> int:
        return self.geo.n_layers * self.layer_params + 2 * self.vocab * self.geo.hidden_size

    def layer_flops(self, seqlen: int) -> float:
        """FLOPs per token through one decoder layer (weights + causal attention)."""
        g = self.geo
        return 2.0 * self.layer_params + 2.0 * seqlen * g.n_heads * g.head_dim

    def forward_flops(self, seqlen: int) -> float:
        """FLOPs per token through the whole model, the LM head included."""
        head = 2.0 * self.vocab * self.geo.hidden_size
        return self.geo.n_layers * self.layer_flops(seqlen) + head


@lru_cache(maxsize=16)
def _shape(name: str, trust_remote_code: bool, revision: str | None) -> Shape:
    config = model_config(name, trust_remote_code, revision)
    vocab = int(getattr(config, "vocab_size", 0) or 32_000)
    return Shape(Geometry.from_config(config), vocab, name in TINY_MODELS)


def model_shape(spec: ModelSpec) -> Shape:
    return _shape(spec.name, spec.trust_remote_code, spec.revision)


def device_type(spec: ModelSpec) -> str:
    """'cpu' | 'cuda' | 'mps' of a (resolved or 'auto') device."""
    if spec.device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        return "mps" if mps is not None and mps.is_available() else "cpu"
    return spec.device.split(":")[0]


# ---- work of each phase --------------------------------------------------------------------------
def eval_tokens(cfg: RunConfig, shape: Shape) -> int:
    """Tokens a perplexity evaluation reads (every window unless max_windows)."""
    data, L = cfg.eval.data, cfg.eval.seqlen
    if data.dataset == "c4":
        windows = C4_EVAL_WINDOWS
    else:
        corpus = CORPUS_TOKENS.get(data.dataset, FILE_TOKENS)
        windows = max(1, int(corpus * (BYTES_PER_TOKEN if shape.tiny else 1.0)) // L)
    if cfg.eval.max_windows is not None:
        windows = min(windows, cfg.eval.max_windows)
    return windows * L


def eval_flops(cfg: RunConfig, shape: Shape) -> float:
    return eval_tokens(cfg, shape) * shape.forward_flops(cfg.eval.seqlen)


def zeroshot_flops(extra_zs, shape: Shape) -> float:
    zs = zeroshot_from(extra_zs)
    if zs is None:
        return 0.0
    tokens = 0
    for task in zs.tasks:
        items, choices, per = TASK_SIZES.get(task, OTHER_TASK)
        tokens += min(items, zs.limit or items) * choices * per
    return tokens * shape.forward_flops(128)


def work_shape(cfg: RunConfig, shape: Shape) -> WorkShape:
    """What a method's cost terms are computed from: one layer's linears, the targeted roles
    the family has, the calibration size."""
    g = shape.geo
    roles = family_roles(cfg.prune.targets, g.traits.roles, g.family)
    return WorkShape(g, shape.linears(), roles, cfg.calib.nsamples, cfg.calib.seqlen)


def method_of(cfg: RunConfig, method: Method | None = None) -> Method:
    """The run's method with its options (``method`` when the plan already built it)."""
    return method if method is not None else make_method(cfg.prune.method, cfg.prune.options)


def layer_work(cfg: RunConfig, shape: Shape, method: Method | None = None) -> LayerWork:
    """The method's own work on one decoder layer, as the method declares it
    (``Method.layer_work``; a method without cost terms raises MissingCostTerms)."""
    return method_of(cfg, method).layer_work(work_shape(cfg, shape))


def loop_flops(cfg: RunConfig, shape: Shape, method: Method | None = None) -> float:
    """A method's work that does not shrink with its calibration tokens, in FLOP-equivalents
    (``SELECT_FLOPS_PER_WEIGHT``, ``COLUMN_FLOPS``): choosing every edited weight, and a
    Python loop over every edited input column (SparseGPT's). All layers."""
    work = layer_work(cfg, shape, method)
    per_layer = SELECT_FLOPS_PER_WEIGHT * work.weights_chosen
    if work.columns_looped:
        per_layer += COLUMN_FLOPS * work.columns_looped
    return shape.geo.n_layers * per_layer


def method_flops(cfg: RunConfig, shape: Shape, method: Method | None = None) -> float:
    """The pruning method's own products, all layers (calibration forwards excluded)."""
    return shape.geo.n_layers * layer_work(cfg, shape, method).products


def calib_flops(calib: CalibConfig, shape: Shape, passes: float = 2.0) -> float:
    return (
        passes
        * calib.nsamples
        * calib.seqlen
        * shape.geo.n_layers
        * shape.layer_flops(calib.seqlen)
    )


def effdim_flops(cfg: RunConfig, shape: Shape) -> float:
    """The residual stream's effective dimension (core.analysis.effdim.collect_residual_dims): the
    first windows holding 10·d tokens read twice (the sums, then one window at a time for
    the jackknife), and per layer a d×d eigendecomposition per reading (2 + one per window)."""
    L, d = cfg.eval.seqlen, shape.geo.hidden_size
    windows = min(windows_needed(d, L), max(1, eval_tokens(cfg, shape) // L))
    forwards = 2.0 * windows * L * shape.forward_flops(L)
    eigs = shape.geo.n_layers * (2 + (windows if windows > 1 else 0))
    return forwards + eigs * EIG_FLOPS_PER_D3 * float(d) ** 3


def dense_flops(cfg: RunConfig, shape: Shape) -> float:
    """A dense evaluation run: perplexity and effective dimension (core.runs.dense)."""
    return eval_flops(cfg, shape) + effdim_flops(cfg, shape)


def latency_flops(cfg: RunConfig, shape: Shape) -> float:
    """The forward latency a prune/slice run measures before and after the change."""
    L = cfg.eval.seqlen
    return 2.0 * LATENCY_FORWARDS * BATCH1_SLOWDOWN * L * shape.forward_flops(L)


def probe_flops(cfg: RunConfig, shape: Shape) -> float:
    """Dense attention references when W_Q or W_K is pruned (core.runs.prune._probes)."""
    g = shape.geo
    if cfg.kind != PRUNE or not {"q", "k"} & set(
        family_roles(cfg.prune.targets, g.traits.roles, g.family)
    ):
        return 0.0
    tokens = PROBE_WINDOWS * (cfg.calib.seqlen + cfg.eval.seqlen)
    return tokens * shape.forward_flops(cfg.eval.seqlen)


def changed_model_flops(cfg: RunConfig, shape: Shape) -> float:
    """Around the change: the latency before and after, the attention probes, then the
    changed model's perplexity, effective dimension and accuracy (a lean run: neither the
    latency nor the effective dimension, core.settings.config.MEASURES)."""
    zeroshot = zeroshot_flops(cfg.extra_value("zeroshot"), shape)
    if cfg.lean:
        return probe_flops(cfg, shape) + eval_flops(cfg, shape) + zeroshot
    extras = latency_flops(cfg, shape) + probe_flops(cfg, shape)
    return extras + dense_flops(cfg, shape) + zeroshot


def prune_phase_flops(cfg: RunConfig, shape: Shape, method: Method | None = None) -> float:
    """Calibration passes (the method's, or OWL's extra pass to measure outliers) plus the
    method's work (products and loops): what a run's prune_seconds measures."""
    method = method_of(cfg, method)
    # OWL's extra pass: at least three (the runner's two, then its own; attention-GD's three)
    owl = cfg.prune.allocation == "owl"
    passes = max(3.0, method.calib_passes) if owl else method.calib_passes
    forwards = calib_flops(cfg.calib, shape, passes)
    if cfg.prune.calib_dtype == BF16:
        forwards /= BF16_FORWARD_SPEEDUP
    work = forwards + method_flops(cfg, shape, method)
    return work + loop_flops(cfg, shape, method)
