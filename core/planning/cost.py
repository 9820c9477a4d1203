"""The cost model of a run: its work in floating-point operations, phase by phase, from
the model's shapes (config.json only, ``core.models.geometry``) and the run's token counts.

``core.planning.estimate`` turns it into seconds with the device's measured speed; the formulas
are listed there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache

import torch

from core.adapters import resolve_roles
from core.analysis.effdim import windows_needed
from core.data import C4_EVAL_WINDOWS
from core.methods.attention_gd.options import CHECK_HESSIAN_AT, AttentionGDOptions
from core.methods.base import SAMPLE_ROWS
from core.models.geometry import Geometry
from core.models.load import TINY_MODELS, model_config
from core.names import PRUNE
from core.settings.config import CalibConfig, ModelSpec, RunConfig, zeroshot_from

# Corpus sizes in tokens of a ~50k-vocabulary BPE tokenizer (the byte tokenizer of the
# tiny models reads ~4.4 bytes per such token).
CORPUS_TOKENS = {"wikitext2": 300_000, "pydoc": 400_000}
FILE_TOKENS = 100_000
BYTES_PER_TOKEN = 4.4
# task -> (items in the scored split, choices per item, tokens per context + choice); the
# tokens are the means over the bundled splits with smollm2-135m's tokenizer (context +
# continuation, as core.evaluation.accuracy scores them: piqa 36.3, hellaswag 79.1, arc_easy 31.7,
# arc_challenge 37.1, winogrande 22.5, boolq 152.4); the earlier guesses (60, 110, 50, 55,
# 40, 180) made zero-shot's estimate ~1.7x long.
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
# timed stage by stage on the 2-core machine: an eigvalsh of a d x d float64 Gram costs
# ~20 d^3 (its effective-dimension stage: 169 s for 8 windows, of which ~56 s forwards), and a
# (1, L) forward runs at ~0.4 of the batched rate (its latency stages: 110 s predicted 105).
EIG_FLOPS_PER_D3 = 20.0
BATCH1_SLOWDOWN = 2.5
# Work of a pruning method that is not a batched product, in FLOPs at the device's batched rate,
# fitted on the 50% runs of the quiet demo set (smollm2-135m, 8 x 128 calibration tokens, the
# 2-core machine; its 2:4 runs are the check): choosing the pruned weights (score, sort, mask
# and the per-linear report) cost ~40 ns a weight there (Wanda 50%: 13.7 s measured, 5.6 s of
# products), ~4,700 FLOPs at the ~116 GFLOP/s a forward reached; SparseGPT's OBS sweep
# (Alg. 1) is a Python loop over each linear's input columns, ~270 us a column (49 s measured
# for 150k columns, 8 s of products), ~3e7 FLOPs. Neither shrinks with fewer calibration
# tokens, which is why a pure FLOP ratio measured on a small run overstated big ones.
SELECT_FLOPS_PER_WEIGHT = 4.7e3
COLUMN_FLOPS = 3.0e7
LATENCY_FORWARDS = 6  # core.runs.measure.forward_latency_ms: a warm-up and 5 timed forwards
PROBE_WINDOWS = 2  # core.runs.prune: calibration and held-out windows of the attention probes


@dataclass(frozen=True)
class Shape:
    """What the cost model needs of a model: its geometry and vocabulary."""

    geo: Geometry
    vocab: int
    tiny: bool  # byte tokenizer: more tokens per corpus

    def linears(self) -> dict[str, tuple[int, int]]:
        """role -> (out, in) of one decoder layer's linears."""
        g = self.geo
        attn, kv = g.n_heads * g.head_dim, g.n_kv_heads * g.head_dim
        d, ff = g.hidden_size, g.intermediate_size
        return {
            "q": (attn, d),
            "k": (kv, d),
            "v": (kv, d),
            "o": (d, attn),
            "gate": (ff, d),
            "up": (ff, d),
            "down": (d, ff),
        }

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


def _linear_flops(method: str, out: int, inp: int, tokens: int, shared: bool) -> float:
    """One linear's method work; ``shared``: its input Gram is already counted (q/k/v,
    gate/up read the same input)."""
    if method == "sparsegpt":
        gram = 0.0 if shared else 2.0 * tokens * inp**2
        return gram + float(inp) ** 3 + 2.0 * out * inp**2
    gram = 0.0 if shared else 2.0 * min(tokens, SAMPLE_ROWS) * inp**2
    return gram + 10.0 * out * inp


def _gd_flops(cfg: RunConfig, shape: Shape, opts: dict) -> float:
    """Attention-GD's descent on one layer's q/k masks (forward + backward ≈ 3 forwards)."""
    o = {**asdict(AttentionGDOptions()), **opts}
    g = shape.geo
    n_seq, L = min(cfg.calib.nsamples, o["max_seq"]), min(cfg.calib.seqlen, o["max_len"])
    T, d = n_seq * L, g.hidden_size
    proj = 2.0 * T * d * (g.n_heads + g.n_kv_heads) * g.head_dim
    scores = 2.0 * n_seq * L * L * g.n_heads * g.head_dim + 5.0 * n_seq * L * L * g.n_heads
    # evaluations: the descent and its curvature probe; the checks (diagnostics.
    # check_assumptions) cost a long run + 2·points + 5·power_iters more
    passes = o["steps"] + o["power_iters"]
    # the checks judge every GQA group ("full"), one group per layer ("sample") or none
    judged = {"full": 1.0, "sample": 1.0 / g.n_kv_heads}.get(o["checks"], 0.0)
    check = max(o["steps"], 10) + 2 * o["check_points"] + CHECK_HESSIAN_AT * o["power_iters"]
    return 3.0 * (passes + judged * check) * (proj + scores)


def _targeted(cfg: RunConfig, shape: Shape) -> tuple[str, list[tuple[int, int]]]:
    """The layer-wise method that edits weights and the (out, in) of the linears it edits in
    one layer (attention-GD's q/k are its descent's, counted in ``_gd_flops``)."""
    p, linears = cfg.prune, shape.linears()
    if p.method == "slicegpt":
        return p.method, []
    if p.method == "attention-gd":
        others = dict(p.options).get("others", "none")
        roles = [] if others == "none" else [r for r in linears if r not in ("q", "k")]
        return others, [linears[r] for r in roles]
    return p.method, [linears[r] for r in resolve_roles(p.targets)]


def loop_flops(cfg: RunConfig, shape: Shape) -> float:
    """A method's work that does not shrink with its calibration tokens, in FLOP-equivalents
    (``SELECT_FLOPS_PER_WEIGHT``, ``COLUMN_FLOPS``): choosing every edited weight, and
    SparseGPT's loop over every edited input column. All layers."""
    method, edited = _targeted(cfg, shape)
    per_layer = SELECT_FLOPS_PER_WEIGHT * sum(o * i for o, i in edited)
    if method == "sparsegpt":
        per_layer += COLUMN_FLOPS * sum(i for _, i in edited)
    return shape.geo.n_layers * per_layer


def method_flops(cfg: RunConfig, shape: Shape) -> float:
    """The pruning method's own products, all layers (calibration forwards excluded)."""
    p, g = cfg.prune, shape.geo
    tokens = cfg.calib.nsamples * cfg.calib.seqlen
    opts = dict(p.options)
    if p.method == "slicegpt":
        d = g.hidden_size
        per_layer = 2 * (2.0 * tokens * d * d + 9.0 * d**3)
        per_layer += sum(2.0 * o * i * d for o, i in shape.linears().values())
        return g.n_layers * per_layer
    linears = shape.linears()
    roles = list(resolve_roles(p.targets))
    per_layer, method = 0.0, p.method
    if p.method == "attention-gd":
        per_layer += _gd_flops(cfg, shape, opts)
        method = opts.get("others", "none")
        roles = [] if method == "none" else [r for r in linears if r not in ("q", "k")]
    seen: set[int] = set()
    for role in roles:
        out, inp = linears[role]
        group = {"q": 0, "k": 0, "v": 0, "gate": 1, "up": 1}.get(role, hash(role))
        per_layer += _linear_flops(method, out, inp, tokens, group in seen)
        seen.add(group)
    return g.n_layers * per_layer


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
    if cfg.kind != PRUNE or not {"q", "k"} & set(resolve_roles(cfg.prune.targets)):
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


def prune_phase_flops(cfg: RunConfig, shape: Shape) -> float:
    """Calibration passes plus the method's work (products and loops): what a run's
    prune_seconds measures."""
    passes = 3.0 if cfg.prune.allocation == "owl" or cfg.prune.method == "attention-gd" else 2.0
    work = calib_flops(cfg.calib, shape, passes) + method_flops(cfg, shape)
    return work + loop_flops(cfg, shape)
