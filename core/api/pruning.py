"""``prune``: a registered method on a model a notebook holds, as ``python -m core prune`` runs
it, handing back the pruned model and what pruning did per layer.

The edge is the CLI's: the method's options are typed by its options dataclass
(``typed_options``), the prune config checked by its dataclass and ``resolve_prune``, and
every size against the model's own geometry (``plan_run``: N:M against the targeted widths,
sequence lengths against the context, the method's refusal of the family), so a bad call is
one ``core.errors`` error before any work. Then ``core.pruning.apply.apply_prune`` changes the
model, on the device its weights are on. With ``store`` the call is a stored run instead
(``core.runs``: the dense baseline, perplexity, the run id of the same CLI command), the
model handed over standing in for the one its name would load.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pandas as pd
from torch import nn

from core.api.inputs import Calib, Data, as_eval, calib_config, calib_ids, windows
from core.api.memory import device_of, evaluating, geometry_of, loaded, spec_of
from core.errors import ConfigError
from core.evaluation.perplexity import PerplexityResult, evaluate_perplexity
from core.methods.options import typed_options
from core.names import F32, PRUNE, T_ALLOCATION, T_BOUNDARIES, T_EVAL_WINDOWS, T_LAYERS
from core.progress import ProgressFn
from core.pruning.apply import apply_prune
from core.runs.common import RunOptions
from core.runs.execute import execute
from core.runs.measure import weight_sparsity
from core.runs.plan import plan_prune, plan_run, resolve_prune
from core.runs.prune import layer_rows
from core.runs.rebuild import model_of_run
from core.runs.resources import holding
from core.runs.restore import restorable, restore_model
from core.settings.config import CalibConfig, EvalConfig, PruneConfig, RunConfig
from core.store.run_store import Run, RunStore

StoreArg = RunStore | str | None


@dataclass(frozen=True)
class PruneReport:
    """What pruning did. ``layers``: one row per pruned linear (layer, role, shape,
    target_sparsity, achieved_sparsity, rel_error = ‖WX − ŴX‖_F/‖WX‖_F on the calibration
    inputs, seconds, the method's own columns); SliceGPT: one row per residual boundary.
    ``allocation``: each layer's target sparsity (uniform or OWL). ``summary``:
    achieved_sparsity (of the targeted linears), decoder_sparsity, prune_seconds and the
    method's own run metrics. ``perplexity``: of the pruned model when ``evaluate`` was given.
    ``run_id``: the stored run's id when ``store`` was given."""

    model: str
    method: str
    sparsity: float
    pattern: str
    layers: pd.DataFrame = field(repr=False)
    allocation: pd.DataFrame = field(repr=False)
    summary: dict[str, Any] = field(repr=False)
    config: dict[str, Any] = field(repr=False)
    perplexity: PerplexityResult | None = field(default=None, repr=False)
    run_id: str | None = None

    @property
    def achieved_sparsity(self) -> float | None:
        return self.summary.get("achieved_sparsity")


class Pruned(NamedTuple):
    """``model, report = api.prune(...)``."""

    model: nn.Module
    report: PruneReport


def open_store(store: StoreArg) -> RunStore:
    """A RunStore, or the one at a folder; None: the CLI's and the app's ($PRUNESCOPE_HOME)."""
    return store if isinstance(store, RunStore) else RunStore(store)


def prune(
    model: nn.Module,
    tokenizer: Any,
    method: str,
    sparsity: float,
    *,
    calib: Calib = "c4",
    pattern: str = "unstructured",
    targets: str = "all",
    allocation: str = "uniform",
    nsamples: int = 32,
    seqlen: int = 512,
    seed: int = 0,
    data_dir: str | None = None,
    calib_dtype: str = F32,
    evaluate: Data | None = None,
    inplace: bool = False,
    store: StoreArg | bool = False,
    progress: ProgressFn | None = None,
    method_options: dict[str, Any] | None = None,
    **options: Any,
) -> Pruned:
    """Prune ``model`` (a Hugging Face causal LM of a supported family) with ``method`` at
    ``sparsity`` (or the N:M ``pattern``), calibrated on ``calib``: a corpus name (its train
    split: ``nsamples`` windows of ``seqlen`` tokens drawn with ``seed``, as ``--calib``), a
    CalibConfig, or token ids (N, L); the defaults are ``python -m core prune``'s. ``options``:
    the method's own (``python -m core methods`` lists them; one named like a keyword here,
    e.g. SliceGPT's ``seed``, goes in ``method_options``). A copy is pruned unless
    ``inplace``. ``evaluate``: a corpus name, ``eval_data(...)`` or windows to measure the
    pruned model's perplexity on. ``store``: a
    RunStore, a folder, or True for $PRUNESCOPE_HOME: the call becomes the stored run the same
    CLI command makes (evaluated on ``evaluate``, by default WikiText-2 as the CLI), under the
    model's name (its config's ``name_or_path``), which must load the same weights."""
    lm = loaded(model, tokenizer)
    # unknown keys: ConfigError naming the method's options
    typed = typed_options(method, {**(method_options or {}), **options})
    cfg_prune = PruneConfig(method, sparsity, pattern, targets, allocation, options=typed,
                            calib_dtype=calib_dtype)  # fmt: skip
    calib_cfg = calib_config(calib, nsamples, seqlen, seed, data_dir)
    cfg_prune, built = resolve_prune(cfg_prune)
    if store is not False and store is not None:
        where = None if store is True else store
        return _stored(lm, cfg_prune, calib_cfg, evaluate, open_store(where), inplace, progress)
    width = calib_cfg.seqlen if calib_cfg is not None else calib.shape[1]  # type: ignore[union-attr]
    cfg = RunConfig(built.run_kind, spec_of(model), EvalConfig(seqlen=width), calib_cfg, cfg_prune)
    planned = plan_run(cfg, geometry_of(model), built)  # every size against the geometry
    target = lm if inplace else loaded(copy.deepcopy(model), tokenizer, lm.name)
    ids = calib_ids(target, calib, calib_cfg)
    device = device_of(model)
    with evaluating(target.model):
        t0 = time.perf_counter()
        result, alloc = apply_prune(
            target, cfg_prune, ids, device, progress, method=built, roles=planned.roles or None
        )
        seconds = time.perf_counter() - t0
        ppl = None
        if evaluate is not None:
            ppl = evaluate_perplexity(target.model, windows(target, evaluate), device=device)
    if built.run_kind == PRUNE:
        layers = layer_rows(result.reports)
        summary = {
            **weight_sparsity(target, planned.roles),
            "prune_seconds": seconds,
            "layer_seconds": result.layer_seconds,
            **built.run_summary(result.tables),
        }
    else:  # SliceGPT: the PCA cut at every residual boundary
        layers, summary = result.rows, {**result.summary(), "prune_seconds": seconds}
        summary.pop("options", None)
    return Pruned(target.model, _report(lm.name, cfg, layers, alloc, summary, ppl))


def _report(
    name: str,
    cfg: RunConfig,
    layers: list[dict[str, Any]] | pd.DataFrame,
    alloc: list[dict[str, Any]] | pd.DataFrame,
    summary: dict[str, Any],
    ppl: PerplexityResult | None,
    run_id: str | None = None,
) -> PruneReport:
    p = cfg.prune
    config = {k: v for k, v in cfg.to_dict().items() if k in ("prune", "calib")}
    return PruneReport(
        name, p.method, p.sparsity, p.pattern, pd.DataFrame(layers), pd.DataFrame(alloc),
        summary, config, ppl, run_id,
    )  # fmt: skip


def _stored(
    lm: Any,
    cfg_prune: PruneConfig,
    calib_cfg: CalibConfig | None,
    evaluate: Data | None,
    store: RunStore,
    inplace: bool,
    progress: ProgressFn | None,
) -> Pruned:
    """The stored run of this prune (reused when stored), its model rebuilt from what it
    stored (``core.runs.restore``) or by re-running it (SliceGPT)."""
    if inplace:
        raise ConfigError("a stored run prunes its own copy of the model: drop inplace")
    if calib_cfg is None:
        raise ConfigError("a stored run draws its calibration itself: give calib as a corpus name")
    eval_cfg = as_eval(evaluate) if evaluate is not None else EvalConfig()
    if eval_cfg is None:
        raise ConfigError("a stored run evaluates on a corpus: give evaluate as a name or config")
    plan = plan_prune(spec_of(lm.model, lm.name), cfg_prune, calib_cfg, eval_cfg)
    cfg = plan.cfg
    with holding(cfg.model, lm):
        out = execute(plan, store, progress, RunOptions())
        run = store.load(out["run_id"])
        if restorable(run):
            model = restore_model(run, cfg.model)
        else:
            model = model_of_run(cfg, store, run.id, progress)[0]
    summary = {k: v for k, v in run.metrics.items() if not isinstance(v, dict | list)}
    ppl = _stored_ppl(run)
    layers = run.table(T_LAYERS) if T_LAYERS in run.tables() else run.table(T_BOUNDARIES)
    alloc = run.table(T_ALLOCATION) if T_ALLOCATION in run.tables() else pd.DataFrame()
    return Pruned(model.model, _report(lm.name, cfg, layers, alloc, summary, ppl, run.id))


def _stored_ppl(run: Run) -> PerplexityResult:
    """The stored run's perplexity as ``evaluate_perplexity`` returns it."""
    m = run.metrics
    nll = tuple(run.table(T_EVAL_WINDOWS).sort_values("window")["nll"].tolist())
    return PerplexityResult(
        m["ppl"], m["nll"], m["n_windows"], m["n_tokens"] // max(m["n_windows"], 1),
        m["n_tokens"], 0.0, m.get("eval_tokens_per_s", 0.0), nll,
    )  # fmt: skip
