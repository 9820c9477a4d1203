"""The project's vocabulary, owned here and imported by runs, CLI and pages: run kinds,
progress stages, stored table and array names, and the metric keys pages read."""

from __future__ import annotations

# ---- run kinds (RunConfig.kind) -------------------------------------------------------------------
EVAL, PRUNE, SLICE, SWEEP, ZEROSHOT = "eval", "prune", "slice", "sweep", "zeroshot"
MODEL_KINDS = (EVAL, PRUNE, SLICE)  # kinds whose model a zeroshot run can evaluate
PRUNED_KINDS = (PRUNE, SLICE)  # kinds that change a model and compare it with the dense one

# ---- progress stages -> what the app says while a job is in one ----------------------------------
STAGES: dict[str, str] = {
    "load": "loading the model",
    "owl": "measuring outlier ratios (OWL)",
    "probe": "capturing dense attention references",
    "prune": "pruning layer by layer",
    "eval": "evaluating perplexity",
    "effdim": "measuring the effective dimension",
    "sweep": "slicing at each s",
    "slice": "slicing the model",
    "zeroshot": "zero-shot tasks (lm-eval scoring)",
}

# ---- stored tables ---------------------------------------------------------------------------------
T_LAYERS = "layers"  # prune: one row per (layer, linear)
T_ALLOCATION = "allocation"  # prune: per-layer target sparsity (uniform / OWL)
T_ATTENTION_ERRORS = "attention_errors"  # prune of q/k: per-head attention error
T_BOUNDARIES = "boundaries"  # slice: PCA cut at every residual boundary
T_EFFDIM = "effdim"  # effective dimension of the residual stream per layer
T_SWEEP = "sweep"  # sweep: one row per s
T_ACCURACY = "accuracy"  # sweep with tasks: accuracy per (s, task)
T_ACCURACY_FIT = "accuracy_fit"  # sweep with tasks: (A2) fits per task and mean
T_ZEROSHOT = "zeroshot"  # zero-shot accuracy per task
T_ZEROSHOT_ITEMS = "zeroshot_items"  # zero-shot per-item predictions
T_EVAL_WINDOWS = "eval_windows"  # eval/prune/slice: NLL of every evaluation window

# ---- stored arrays ---------------------------------------------------------------------------------
A_METHOD = "method"  # a method's own arrays (masks)
A_QK = "qk"  # pruned W_Q/W_K per layer for attention heatmaps
A_SPECTRA = "spectra"  # slice: eigenvalues at every boundary

# ---- metric keys -------------------------------------------------------------------------------------
SUMMARY_COLUMNS = ("ppl", "dense_ppl", "achieved_sparsity", "prune_seconds")  # runs table
EFFDIM_PREFIX = "effdim_"
# The effective-dimension statistic fixed in advance (core.effdim.PRIMARY, mean over layers);
# the cross-method relation is tested with it only.
EFFDIM_KEY = "mean_erank_c"
DEFAULT_DIM = EFFDIM_PREFIX + EFFDIM_KEY
