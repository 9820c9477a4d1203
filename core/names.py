"""The project's vocabulary, owned here and imported by settings, runs, CLI and pages: method,
role, pattern, dataset and task names, run kinds, progress stages, stored table and array
names, the metric keys pages read and the legend name of a run's series. Plain names only
(no torch), so configs and forms validate without loading anything."""

from __future__ import annotations

import re

from core.errors import ConfigError

# ---- pruning methods: the registry -------------------------------------------------------------
# name -> the module that defines the method and registers it (``core.methods.register``), in
# the order forms and flags list them. A new method is its module and its line here: forms
# and flags read the names from here without importing any method; ``core.methods`` imports
# the modules when a method is first asked for.
METHODS: dict[str, str] = {
    "magnitude": "core.methods.magnitude",
    "wanda": "core.methods.wanda",
    "sparsegpt": "core.methods.sparsegpt",
    "slicegpt": "core.methods.slicegpt",
    "attention-gd": "core.methods.attention_gd",
    "shortgpt": "core.methods.structure.shortgpt",
    "flap": "core.methods.structure.flap",
    "wanda-sp": "core.methods.structure.wanda_sp",
}


def method_names() -> tuple[str, ...]:
    """The registered methods' names, in the registry's order (read at every call, so a
    method registered later is listed too)."""
    return tuple(METHODS)


# ---- what a user picks: patterns, linear targets, datasets, measures, mask scopes ----------------
PATTERNS = ("unstructured", "2:4", "4:8")
TARGETS = ("all", "attention", "mlp", "qk")
DATASETS = ("wikitext2", "c4", "pydoc")  # plus "file:<path>" for any text/jsonl file
# the zero-shot tasks (``core.evaluation.tasks`` builds their items), in the order tables list them
TASK_NAMES = ("piqa", "hellaswag", "arc_easy", "arc_challenge", "winogrande", "boolq")
NO_PROTOCOL = "none"  # a sweep protocol that fixes no field (``core.requests.protocol_fields``)
# What a prune/slice run measures beyond perplexity and kept parameters: "full" adds the
# forward latency before and after the change and the changed model's effective dimension;
# "lean" skips both. The default is left out of the canonical JSON, so every run id from
# before this setting existed stays the same.
FULL, LEAN = "full", "lean"
MEASURES = (FULL, LEAN)
# How calibration sequences are drawn (``core.data``): "window", a random window inside a random
# long document (Wanda/SparseGPT); "documents", whole documents from their start, concatenated
# with "\n\n" (SliceGPT's reference). The default is left out of the canonical JSON.
WINDOW, DOCUMENTS = "window", "documents"
CALIB_SAMPLERS = (WINDOW, DOCUMENTS)
# The precision of the layer-wise runner's calibration forwards (the passes that feed the
# statistics and the next layer's inputs; ``core.pruning.layerwise``): "float32", the
# reference implementations' arithmetic; "bfloat16", their matrix products in bfloat16 with
# float32 accumulation (autocast). Statistics, factorisations and weight updates stay
# float32/float64 either way. The default is left out of the canonical JSON.
F32, BF16 = "float32", "bfloat16"
CALIB_DTYPES = (F32, BF16)
SCOPES = ("row", "matrix")  # where a mask's threshold is taken: per output row or per matrix

# ---- linear roles --------------------------------------------------------------------------------
# Every family's decoder layer is described by the same seven roles; a family without a gate
# (OPT's fc1/fc2 MLP) lacks that role (``core.adapters.roles`` views a role inside a fused
# projection).
ROLES: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")
ROLE_GROUPS: dict[str, tuple[str, ...]] = {  # named groups users pick from
    "all": ROLES,
    "attention": ("q", "k", "v", "o"),
    "mlp": ("gate", "up", "down"),
    "qk": ("q", "k"),
}
# Linears that read the same tensor share one set of input statistics.
SHARED_INPUT: dict[str, str] = {"k": "q", "v": "q", "up": "gate"}


def resolve_roles(targets: str) -> tuple[str, ...]:
    """'all' | 'attention' | 'mlp' | 'qk' | comma list of roles -> ordered roles."""
    if targets in ROLE_GROUPS:
        return ROLE_GROUPS[targets]
    roles = tuple(r.strip() for r in targets.split(",") if r.strip())
    bad = [r for r in roles if r not in ROLES]
    if bad or not roles:
        raise ConfigError(
            f"unknown linear role(s) {bad or targets!r}; use one of {sorted(ROLE_GROUPS)} "
            f"or a comma list of {list(ROLES)}"
        )
    return tuple(r for r in ROLES if r in roles)


def family_roles(targets: str, have: tuple[str, ...], family: str) -> tuple[str, ...]:
    """The roles ``targets`` names that a family whose layers have the roles ``have`` can
    prune: a named group keeps those present (OPT's "mlp" is up, down); an explicit role it
    lacks, or a group of which it has none, is an error. The one rule of roles per family."""
    roles = resolve_roles(targets)
    missing = [r for r in roles if r not in have]
    if missing and targets not in ROLE_GROUPS:
        raise ConfigError(
            f"{family} models have no {'/'.join(missing)} projection; their roles are "
            f"{', '.join(have)}"
        )
    present = tuple(r for r in roles if r in have)
    if not present:
        raise ConfigError(f"{family} models have none of the roles {targets!r} names")
    return present


# ---- run kinds (RunConfig.kind) ------------------------------------------------------------------
# Two things are called a sweep, named apart here:
# - RELATION_SWEEP: SliceGPT over a grid of s with Paper A's relation fitted (core.runs.
#   relation_sweep), one stored run of its own; its stored kind string stays "sweep" (data: run
#   ids of stored runs hash it).
# - GRID_SWEEP: any method over methods x sparsities x patterns x allocations x seeds
#   (core.sweeps), no run of its own: each point is an ordinary prune/slice run. The name is
#   the kind of the job document a background grid job receives (core.sweeps.grid.GridJob).
EVAL, PRUNE, SLICE, RELATION_SWEEP, ZEROSHOT = "eval", "prune", "slice", "sweep", "zeroshot"
# A structured method that removes whole decoder layers, attention heads or MLP channels
# (ShortGPT, FLAP, structured Wanda): a smaller dense model (core.runs.structured).
STRUCTURED = "structured"
GRID_SWEEP = "grid-sweep"
MODEL_KINDS = (EVAL, PRUNE, SLICE, STRUCTURED)  # kinds whose model a zeroshot run can evaluate
# kinds that change a model and compare it with the dense one
PRUNED_KINDS = (PRUNE, SLICE, STRUCTURED)
SHAPED_KINDS = (SLICE, STRUCTURED)  # kinds whose model has smaller shapes (no zeros to hold)
RECOVER = "recover"  # fine-tunes a stored prune/slice run's model, keeping its zeros
# re-prunes a stored prune run with other calibration draws or another corpus (each draw an
# ordinary prune run) and measures how much its keep masks agree (core.runs.sensitivity)
SENSITIVITY = "sensitivity"
JOB_KINDS = (*PRUNED_KINDS, RECOVER)  # kinds whose background job id is the run id

# ---- recovery fine-tuning (the recover kind) -----------------------------------------------------
LORA, MASKED = "lora", "masked"  # adapters merged under the mask | the pruned linears, masked
RECOVER_METHODS = (LORA, MASKED)

# ---- progress stages -> what the app says while a job is in one ----------------------------------
STAGES: dict[str, str] = {
    "load": "loading the model",
    "owl": "measuring outlier ratios (OWL)",
    "probe": "capturing dense attention references",
    "prune": "pruning layer by layer",
    "eval": "evaluating perplexity",
    "effdim": "measuring the effective dimension",
    "sweep": "slicing at each s",  # the relation sweep's stage
    "slice": "slicing the model",
    "structure": "removing layers, heads or channels",
    "zeroshot": "zero-shot tasks (lm-eval scoring)",
    "recover": "fine-tuning to recover (sparsity held)",
    "sensitivity": "re-pruning with other calibration draws",
}

# ---- stored tables -------------------------------------------------------------------------------
T_LAYERS = "layers"  # prune: one row per (layer, linear)
T_ALLOCATION = "allocation"  # prune: per-layer target sparsity (uniform / OWL)
T_ATTENTION_ERRORS = "attention_errors"  # prune of q/k: per-head attention error
T_BOUNDARIES = "boundaries"  # slice: PCA cut at every residual boundary
T_EFFDIM = "effdim"  # effective dimension of the residual stream per layer
T_SWEEP = "sweep"  # relation sweep: one row per s
T_ACCURACY = "accuracy"  # relation sweep with tasks: accuracy per (s, task)
T_ACCURACY_FIT = "accuracy_fit"  # relation sweep with tasks: (A2) fits per task and mean
T_LAWS = "laws"  # relation sweep: candidate laws of (A1) per s basis, scored out of sample
T_LAW_POINTS = "law_points"  # relation sweep: each law's fitted and held-out errors per s
T_LAW_DIFFERENCES = "law_differences"  # relation sweep: paired differences of laws' errors
T_KAPPA_RANGE = "kappa_range"  # relation sweep: the nesting law's κ against its fit range
T_ZEROSHOT = "zeroshot"  # zero-shot accuracy per task
T_ZEROSHOT_ITEMS = "zeroshot_items"  # zero-shot per-item predictions
T_EVAL_WINDOWS = "eval_windows"  # eval/prune/slice: NLL of every evaluation window
T_RECOVERY = "recovery"  # recover: training loss and held-out perplexity every K steps
T_AGREEMENT = "agreement"  # sensitivity: kept-set agreement per (draw, layer, linear)
T_DRAWS = "draws"  # sensitivity: one row per calibration draw (its run, seed, corpus, ppl)
T_STRUCTURE = "structure"  # structured: one row per dense decoder layer (what it kept)

# ---- stored arrays -------------------------------------------------------------------------------
A_METHOD = "method"  # a method's own arrays (masks)
A_QK = "qk"  # pruned W_Q/W_K per layer for attention heatmaps
A_SPECTRA = "spectra"  # slice: eigenvalues at every boundary
A_REBUILD = "rebuild"  # prune: packed keep masks (and changed weights) to rebuild the model

# ---- metric keys ---------------------------------------------------------------------------------
SUMMARY_COLUMNS = ("ppl", "dense_ppl", "achieved_sparsity", "prune_seconds")  # runs table
EFFDIM_PREFIX = "effdim_"
# The effective-dimension statistic fixed in advance (core.analysis.effdim.PRIMARY, mean over
# layers); the cross-method relation is tested with it only.
EFFDIM_KEY = "mean_erank_c"
DEFAULT_DIM = EFFDIM_PREFIX + EFFDIM_KEY
# Names of an effective dimension: core.analysis.relation's pca99, pca90, erank, erank_sv and
# erank_c, optionally prefixed mean_ / final_ and effdim_ (run metrics).
DIM_KEY = re.compile(r"^(eff_?dim_)?(mean_|final_)?(pca\d+|erank|erank_sv|erank_c)$")
# The fraction of decoder-layer parameters a slice or structured run removed (1 − after/before,
# embeddings and head left out): what a parameter budget (``--budget params=F``) matches.
PARAMS_REMOVED = "params_removed"
BUDGET_KINDS = ("params",)  # what a budget counts: ``--budget params=0.25``


def is_dim_key(name: str) -> bool:
    """Whether a metric / column names an effective dimension (``DIM_KEY``, or eff_dim...)."""
    return str(name).startswith("eff_dim") or bool(DIM_KEY.match(str(name)))


def series_name(
    method: str,
    pattern: str | None,
    model: str | None,
    many_models: bool,
    targets: str | None = None,
) -> str:
    """Legend name of a run: the method, its N:M pattern when structured, the linears it
    pruned when not all of them, and the model when several are mixed."""
    name = method or "?"
    if isinstance(pattern, str) and pattern != "unstructured":
        name += f" {pattern}"
    if isinstance(targets, str) and targets != "all":
        name += f" [{targets}]"
    if many_models and model:
        name += f" ({model})"
    return name
