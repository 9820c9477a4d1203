"""Orchestration shared by the CLI and the app: resolve a config, load what it needs, run
it, and store the result. Every entry point returns a plain dict (run id, config, metrics)."""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from typing import Any

import torch

from core.attention_compare import AttentionProbe
from core.attention_compare import summarize as summarize_attention
from core.config import (
    CalibConfig,
    EvalConfig,
    ModelSpec,
    PruneConfig,
    RunConfig,
    ZeroShotConfig,
    options_tuple,
    zeroshot_dict,
    zeroshot_from,
)
from core.data import calibration_windows, eval_windows, load_corpus
from core.device import dtype_name, resolve_device, resolve_dtype
from core.errors import ConfigError, StoreError
from core.memory import (
    peak_rss_mb,
    phase_report,
    proc_status_mb,
    release_freed,
    reset_peak_rss,
    tensor_mb,
    touch_weights,
    weight_mb,
)
from core.methods import get_method
from core.models import LoadedModel, load_model
from core.perplexity import evaluate_perplexity
from core.progress import ProgressFn, report
from core.store import RunStore, environment_record

log = logging.getLogger(__name__)


# ---- resolution ------------------------------------------------------------------------------
def resolve_model_spec(spec: ModelSpec) -> ModelSpec:
    """Replace 'auto' device/dtype by what they resolve to on this machine."""
    device = resolve_device(spec.device)
    dtype = resolve_dtype(spec.dtype, device)
    return dataclasses.replace(spec, device=str(device), dtype=dtype_name(dtype))


def resolve_prune_config(prune: PruneConfig) -> PruneConfig:
    """Validate the method name and fill its options with defaults (options_cls)."""
    cls = get_method(prune.method)
    if prune.pattern != "unstructured" and "nm" not in cls.supports_patterns:
        raise ConfigError(f"method {cls.name} does not support N:M patterns")
    try:
        opts = cls.options_cls(**dict(prune.options))
    except TypeError as exc:
        raise ConfigError(f"bad options for {cls.name}: {exc}") from exc
    return dataclasses.replace(prune, method=cls.name, options=options_tuple(opts))


# ---- models: pristine copy cached once per process, copied per job ----------------------------
_PRISTINE: dict[tuple, LoadedModel] = {}  # at most one entry: a new model evicts the old one


def _load(key: tuple) -> LoadedModel:
    name, dtype, trust_remote_code, revision = key
    return load_model(
        name, "cpu", resolve_dtype(dtype, torch.device("cpu")), trust_remote_code, revision
    )


def get_model(spec: ModelSpec, fresh: bool = True) -> LoadedModel:
    """The model of a resolved spec on its device.

    fresh=False returns the pristine copy cached once per process (never mutate it);
    fresh=True returns a private model: a deep copy of the cached one when a long-lived
    process (the app) holds it, else a direct load, so a one-shot CLI process keeps a single
    copy of the weights in memory.
    """
    key = (spec.name, spec.dtype, spec.trust_remote_code, spec.revision)
    if not fresh:
        if key not in _PRISTINE:
            _PRISTINE.clear()
            _PRISTINE[key] = _load(key)
        lm = _PRISTINE[key]
    else:
        lm = copy.deepcopy(_PRISTINE[key]) if key in _PRISTINE else _load(key)
    lm.model.to(spec.device)
    return lm


def check_pattern(lm: LoadedModel, roles: tuple[str, ...], pattern: str) -> None:
    """Reject an N:M pattern whose M does not divide a targeted linear's input width, before
    any work is done."""
    from core.masks import parse_pattern

    nm = parse_pattern(pattern)
    if nm is None:
        return
    for role, lin in lm.adapter.linears(lm.adapter.layers[0], roles).items():
        if lin.in_features % nm[1]:
            raise ConfigError(
                f"N:M pattern {pattern} needs input widths divisible by {nm[1]}; "
                f"{role}_proj has {lin.in_features}"
            )


def check_seqlen(lm: LoadedModel, seqlen: int, what: str = "seqlen") -> None:
    ctx = lm.adapter.max_positions
    if ctx and seqlen > ctx:
        raise ConfigError(f"{what} {seqlen} exceeds the model's context of {ctx} tokens")


EFFDIM_WINDOWS = 4  # held-out windows on which the residual stream's dimension is measured
_WINDOW_CACHE: dict[tuple, tuple[torch.Tensor, dict[str, Any]]] = {}


def get_eval_windows(lm: LoadedModel, cfg: EvalConfig) -> tuple[torch.Tensor, dict[str, Any]]:
    """Evaluation windows (n, L) and a description of the corpus, cached per process."""
    key = (lm.name, cfg.data, cfg.seqlen, cfg.max_windows)
    if key not in _WINDOW_CACHE:
        corpus = load_corpus(cfg.data)
        windows = eval_windows(lm.tokenizer, corpus, cfg.seqlen, cfg.max_windows)
        info = {"dataset": corpus.name, "split": corpus.split, "source": corpus.source,
                "comparable": corpus.comparable}  # fmt: skip
        _WINDOW_CACHE[key] = (windows, info)
    return _WINDOW_CACHE[key]


def get_calib_windows(lm: LoadedModel, cfg: CalibConfig) -> tuple[torch.Tensor, dict[str, Any]]:
    corpus = load_corpus(cfg.data)
    ids = calibration_windows(lm.tokenizer, corpus, cfg.nsamples, cfg.seqlen, cfg.seed)
    return ids, {"dataset": corpus.name, "split": corpus.split, "source": corpus.source}


# ---- eval ---------------------------------------------------------------------------------------
def run_eval(
    model: ModelSpec, eval_cfg: EvalConfig, store: RunStore, on_progress: ProgressFn | None = None,
    force: bool = False, lm: LoadedModel | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Dense perplexity of a model; reuses a finished run with the same config unless forced."""
    cfg = RunConfig("eval", resolve_model_spec(model), eval_cfg)
    cached = stored_or_wait(store, cfg, force, on_progress, "the same dense baseline")
    if cached is not None:
        return cached
    with store.begin(cfg, force) as writer:
        progress = tee(writer.progress, on_progress)
        report(progress, "load", 0, 1, f"loading {cfg.model.name}")
        lm = lm or get_model(cfg.model, fresh=False)
        check_seqlen(lm, eval_cfg.seqlen)
        windows, data_info = get_eval_windows(lm, eval_cfg)
        writer.write_env(environment_record(cfg.model.device))
        res = evaluate_perplexity(
            lm.model, windows, eval_cfg.batch_size, cfg.model.device, progress
        )
        eff = residual_effdim(lm, windows[:EFFDIM_WINDOWS], cfg.model.device, progress)
        writer.write_table("effdim", eff["rows"])
        metrics = {**res.to_dict(), "data": data_info, "model": lm.adapter.describe(),
                   **{f"effdim_{k}": v for k, v in eff["overall"].items()}}  # fmt: skip
        writer.commit(metrics)
    return {"run_id": cfg.run_id, "config": cfg.to_dict(), "metrics": metrics, "cached": False}


def cached_result(store: RunStore, cfg: RunConfig, force: bool) -> dict[str, Any] | None:
    if force:
        return None
    try:
        rec = store.get(cfg.run_id)
    except Exception:
        return None
    if rec.status != "done" or rec.id != cfg.run_id:
        return None
    return {
        "run_id": rec.id,
        "config": rec.config,
        "metrics": store.load(rec.id).metrics,
        "cached": True,
    }


def stored_or_wait(
    store: RunStore, cfg: RunConfig, force: bool, on_progress: ProgressFn | None, what: str
) -> dict[str, Any] | None:
    """The stored result of ``cfg``; when another process is computing it (a baseline that
    several jobs share), wait for that process first instead of failing or repeating it."""
    if not force and store.running_elsewhere(cfg.run_id):
        report(on_progress, "load", 0, 1, f"waiting for a job computing {what}")
        store.wait_while_running(cfg.run_id)
    return cached_result(store, cfg, force)


def tee(*fns: ProgressFn | None) -> ProgressFn:
    live = [f for f in fns if f is not None]

    def fn(stage: str, done: int, total: int, detail: str = "") -> None:
        for f in live:
            f(stage, done, total, detail)

    return fn


# ---- prune --------------------------------------------------------------------------------------
def allocate_sparsity(
    lm: LoadedModel, prune: PruneConfig, roles: tuple[str, ...], calib_ids: torch.Tensor,
    device: torch.device, progress: ProgressFn | None, **runner_kw: Any,
) -> tuple[list[dict[str, float]], list[dict[str, Any]]]:  # fmt: skip
    """Per-layer target sparsity (uniform or OWL) and the rows explaining it.

    OWL needs each layer's outlier ratio of Wanda scores |W|·‖X‖, measured by one extra
    dense pass of the shared runner that prunes nothing.
    """
    from core.allocation import layer_outlier_ratio, owl_allocation, uniform_allocation
    from core.runner import run_layerwise

    n = lm.adapter.n_layers
    if prune.allocation == "uniform":
        per_layer = uniform_allocation(n, prune.sparsity)
        ratios = [None] * n
    else:
        ratios: list[float] = []

        def measure(ctx) -> list:
            scores = [lin.weight.detach().float().abs() * ctx.stats[r].col_sq_norms.sqrt()
                      for r, lin in ctx.linears.items()]  # fmt: skip
            ratios.append(layer_outlier_ratio(scores, prune.owl_m))
            return []

        run_layerwise(lm.adapter, calib_ids, measure, roles, None, prune.pattern, device,
                      needs_gram=False, on_progress=progress, stage="owl", **runner_kw)  # fmt: skip
        params = [sum(lin.weight.numel() for lin in lm.adapter.linears(layer, roles).values())
                  for layer in lm.adapter.layers]  # fmt: skip
        per_layer = owl_allocation(ratios, prune.sparsity, prune.owl_lambda, params)
    rows = [{"layer": i, "sparsity": s, "outlier_ratio": r}
            for i, (s, r) in enumerate(zip(per_layer, ratios, strict=True))]  # fmt: skip
    return [dict.fromkeys(roles, s) for s in per_layer], rows


def weight_sparsity(lm: LoadedModel, roles: tuple[str, ...]) -> dict[str, float]:
    """Fraction of exact zeros over the targeted linears and over every decoder linear."""
    z_t = n_t = z_a = n_a = 0
    for layer in lm.adapter.layers:
        for role, lin in lm.adapter.linears(layer).items():
            w = lin.weight
            z, n = int((w == 0).sum()), w.numel()
            z_a, n_a = z_a + z, n_a + n
            if role in roles:
                z_t, n_t = z_t + z, n_t + n
    return {"achieved_sparsity": z_t / max(n_t, 1), "decoder_sparsity": z_a / max(n_a, 1)}


def qk_arrays(lm: LoadedModel, max_hidden: int = 2048) -> dict[str, torch.Tensor]:
    """Pruned W_Q/W_K (float16) per layer for attention heatmaps of any prompt later.

    Only for models with hidden size <= max_hidden (SmolLM2: ~26 MB); larger models keep the
    masks the method stored and the heatmaps computed at prune time.
    """
    if lm.adapter.hidden_size > max_hidden:
        return {}
    out = {}
    for i, layer in enumerate(lm.adapter.layers):
        for role, lin in lm.adapter.linears(layer, ("q", "k")).items():
            out[f"layer{i}.{role}"] = lin.weight.detach().to("cpu", torch.float16)
    return out


def prepare_run(
    cfg: RunConfig, store: RunStore, writer, progress: ProgressFn,
    roles: tuple[str, ...] | None = None,
) -> tuple[LoadedModel, Any, dict[str, Any], float | None]:  # fmt: skip
    """Common start of a prune or slice run: load a private copy of the model, check sizes
    before any work, record the environment, and compute (or reuse) the dense baseline on
    that copy before it is changed. Returns (model, method instance, dense result, RSS once
    loaded in MiB)."""
    report(progress, "load", 0, 1, f"loading {cfg.model.name}")
    lm = get_model(cfg.model, fresh=True)
    touch_weights(lm.model)  # memory-mapped weights resident, so the baseline counts them
    release_freed()
    loaded_rss = proc_status_mb("VmRSS")  # interpreter + libraries + tokenizer + the weights
    check_seqlen(lm, cfg.eval.seqlen)
    check_seqlen(lm, cfg.calib.seqlen, "calibration seqlen")
    if roles is not None:
        check_pattern(lm, roles, cfg.prune.pattern)
    writer.write_env(environment_record(cfg.model.device))
    dense = run_eval(cfg.model, cfg.eval, store, progress, lm=lm)
    cls = get_method(cfg.prune.method)
    return lm, cls(cls.options_cls(**dict(cfg.prune.options))), dense, loaded_rss


def plan_prune(
    model: ModelSpec, prune: PruneConfig, calib: CalibConfig, eval_cfg: EvalConfig,
    zeroshot: ZeroShotConfig | None = None,
) -> RunConfig:  # fmt: skip
    """The resolved config (hence the run id) a prune run will have; validates everything.
    Zero-shot settings enter the config only when given, so runs without keep their ids."""
    extra = (("zeroshot", zeroshot_dict(zeroshot)),) if zeroshot is not None else ()
    return RunConfig(
        "prune", resolve_model_spec(model), eval_cfg, calib, resolve_prune_config(prune), extra
    )


def apply_prune(
    lm: LoadedModel, prune: PruneConfig, calib_ids: torch.Tensor, device: torch.device,
    progress: ProgressFn | None = None, **runner_kw: Any,
) -> tuple[Any, list[dict[str, Any]]]:  # fmt: skip
    """Prune ``lm`` in place with a resolved unstructured/N:M config: per-layer allocation,
    then the method on the shared runner. Returns (RunnerResult, allocation rows)."""
    from core.adapter import resolve_roles
    from core.runner import run_method

    roles = resolve_roles(prune.targets)
    cls = get_method(prune.method)
    method = cls(cls.options_cls(**dict(prune.options)))
    sparsities, alloc_rows = allocate_sparsity(
        lm, prune, roles, calib_ids, device, progress, **runner_kw
    )
    result = run_method(method, lm.adapter, calib_ids, roles, sparsities, prune.pattern, device,
                        on_progress=progress, **runner_kw)  # fmt: skip
    return result, alloc_rows


def run_prune(
    model: ModelSpec, prune: PruneConfig, calib: CalibConfig, eval_cfg: EvalConfig,
    store: RunStore, on_progress: ProgressFn | None = None, force: bool = False,
    save_dir: str | None = None, activations_on_cpu: bool = False,
    zeroshot: ZeroShotConfig | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Prune a model with a registered method, evaluate it against the dense model (perplexity,
    and zero-shot accuracy when ``zeroshot`` is given), store it."""
    from core.adapter import resolve_roles

    cfg = plan_prune(model, prune, calib, eval_cfg, zeroshot)
    prune = cfg.prune
    if get_method(prune.method).structured:
        from core.slicing import run_slice

        return run_slice(model, prune, calib, eval_cfg, store, on_progress, force, save_dir,
                         zeroshot)  # fmt: skip
    cached = cached_result(store, cfg, force) if save_dir is None else None
    if cached is not None:
        return cached
    device = torch.device(cfg.model.device)
    roles = resolve_roles(prune.targets)
    with store.begin(cfg, force) as writer:
        progress = tee(writer.progress, on_progress)
        lm, method, dense, loaded_rss = prepare_run(cfg, store, writer, progress, roles)
        dense_zs = dense_zeroshot(cfg, store, lm, progress)
        windows, data_info = get_eval_windows(lm, eval_cfg)
        calib_ids, calib_info = get_calib_windows(lm, calib)
        kw = {"activations_on_cpu": activations_on_cpu}

        probes = []
        if {"q", "k"} & set(roles):  # attention error of the pruned W_Q/W_K (Paper B's measure)
            report(progress, "probe", 0, 1, "dense attention references")
            calib_probe = AttentionProbe.capture(lm.adapter, calib_ids[:2], "calib", device)
            probes = [calib_probe, AttentionProbe.capture(lm.adapter, windows[:2], "heldout", device,
                                                          dense=calib_probe.dense)]  # fmt: skip

        start_phase()  # the budget below is for the pruning phase itself
        t0 = time.perf_counter()
        result, alloc_rows = apply_prune(lm, prune, calib_ids, device, progress, **kw)
        prune_seconds = time.perf_counter() - t0
        memory = memory_report(lm, calib_ids, loaded_rss, probe_mb(probes),
                               runner_widths(lm, method, roles))  # fmt: skip

        pruned = evaluate_perplexity(lm.model, windows, eval_cfg.batch_size, device, progress)
        layer_rows = [dataclasses.asdict(r) for r in result.reports]
        for row in layer_rows:
            row["shape"] = list(row["shape"])
            extra = row.pop("extra")
            row.update({k: v for k, v in extra.items() if isinstance(v, int | float | str | bool)})
        writer.write_table("layers", layer_rows)
        attn_rows = [row for probe in probes for row in probe.errors(lm.adapter)]
        if attn_rows:
            writer.write_table("attention_errors", attn_rows)
        writer.write_table("allocation", alloc_rows)
        for name, rows in result.tables.items():
            writer.write_table(name, rows)
        if result.arrays:
            writer.write_arrays("method", result.arrays)
        qk = qk_arrays(lm)
        if qk:
            writer.write_arrays("qk", qk)
        eff = residual_effdim(lm, windows[:EFFDIM_WINDOWS], device, progress)
        writer.write_table("effdim", eff["rows"])
        metrics = {
            "dense_ppl": dense["metrics"]["ppl"], "dense_run": dense["run_id"],
            "ppl": pruned.ppl, "nll": pruned.nll, "n_windows": pruned.n_windows,
            "n_tokens": pruned.n_tokens, "eval_tokens_per_s": pruned.tokens_per_s,
            "prune_seconds": prune_seconds, "layer_seconds": result.layer_seconds,
            **weight_sparsity(lm, roles), **{f"effdim_{k}": v for k, v in eff["overall"].items()},
            **(summarize_attention(attn_rows) if attn_rows else {}),
            **method.run_summary(result.tables),
            "data": data_info, "calib": calib_info, "model": lm.adapter.describe(),
        }  # fmt: skip
        metrics.update(memory, peak_rss_mb=peak_rss_mb())
        metrics.update(pruned_zeroshot(cfg, lm, dense_zs, writer, progress))
        if save_dir:
            metrics["saved_to"] = save_model(lm, save_dir)
        writer.commit(metrics)
    return {"run_id": cfg.run_id, "config": cfg.to_dict(), "metrics": metrics, "cached": False}


def probe_mb(probes: list[AttentionProbe]) -> float:
    """Bytes the attention probes hold (shared dense weights counted once), in MiB."""
    seen: set[int] = set()
    total = 0.0
    for probe in probes:
        total += tensor_mb(*probe.X)
        for w in (w for pair in probe.dense for w in pair):
            if id(w) not in seen:
                seen.add(id(w))
                total += tensor_mb(w)
    return total


def start_phase() -> None:
    """Return memory freed by set-up to the OS and restart the peak, just before pruning."""
    release_freed()
    reset_peak_rss()


def memory_report(
    lm: LoadedModel, calib_ids: torch.Tensor, loaded_rss_mb: float | None,
    analysis_mb: float = 0.0, widths: int | None = None,
) -> dict[str, float]:  # fmt: skip
    """The pruning phase's peak RSS beside its budget (core.memory): the process once the
    model is loaded with its weights resident + the calibration activations, float32 +
    analysis buffers kept on purpose (attention probes).

    widths: features per calibration token the phase holds: d for the shared runner, which
    overwrites one buffer in place, plus the inputs a method keeps (``Method.needs_inputs``);
    the default 2·d is inputs and outputs of a layer (SliceGPT keeps both)."""
    widths = 2 * lm.adapter.hidden_size if widths is None else widths
    act = calib_ids.numel() * widths * 4 / 2**20
    return phase_report(peak_rss_mb(), loaded_rss_mb, weight_mb(lm.model), act, analysis_mb)


def runner_widths(lm: LoadedModel, method: Any, roles: tuple[str, ...]) -> int:
    """Features per calibration token the shared runner holds for ``method`` (memory_report)."""
    linears = lm.adapter.linears(lm.adapter.layers[0], roles)
    kept = sum(linears[r].in_features for r in method.needs_inputs if r in linears)
    return lm.adapter.hidden_size + kept


def residual_effdim(
    lm: LoadedModel, windows: torch.Tensor, device, progress=None
) -> dict[str, Any]:
    """Effective dimension of the residual stream on held-out windows (core.repdim)."""
    from core.repdim import collect_residual_dims

    report(progress, "effdim", 0, 1, "effective dimension of the residual stream")
    res = collect_residual_dims(lm.adapter, windows, device)
    report(progress, "effdim", 1, 1)
    return res


def save_model(lm: LoadedModel, folder: str) -> str:
    """save_pretrained (safetensors) + tokenizer: reloadable by plain transformers."""
    from pathlib import Path

    path = Path(folder).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    lm.model.save_pretrained(path, safe_serialization=True)
    lm.tokenizer.save_pretrained(path)
    return str(path)


# ---- zero-shot accuracy ---------------------------------------------------------------------------
ZS_SOURCES = ("eval", "prune", "slice")  # run kinds whose model a zeroshot run can evaluate


def _zeroshot_result(res: dict[str, Any], writer) -> dict[str, Any]:
    """Store a zero-shot result's tables; return the metrics entries it contributes."""
    from core.zeroshot import summary_row

    writer.write_table("zeroshot", list(res["tasks"].values()))
    writer.write_table("zeroshot_items", res["items"])
    kept = {k: v for k, v in res.items() if k != "items"}
    return {"zeroshot": kept, **summary_row(res)}


def dense_zeroshot(
    cfg: RunConfig, store: RunStore, lm: LoadedModel, progress: ProgressFn | None
) -> dict[str, Any] | None:
    """The dense model's zero-shot run for a prune/slice config that asks for accuracy (run
    on ``lm`` before it is pruned; reused from the store when already computed)."""
    zs = zeroshot_from(cfg.extra_value("zeroshot"))
    if zs is None:
        return None
    return run_zeroshot(cfg.model, zs, store, on_progress=progress, lm=lm)


def pruned_zeroshot(
    cfg: RunConfig, lm: LoadedModel, dense: dict[str, Any] | None, writer, progress
) -> dict[str, Any]:
    """Zero-shot accuracy of the pruned model in memory, beside the dense one's."""
    from core.zeroshot import evaluate_zeroshot

    zs = zeroshot_from(cfg.extra_value("zeroshot"))
    if zs is None or dense is None:
        return {}
    res = evaluate_zeroshot(lm.model, lm.tokenizer, zs.tasks, zs.data_dir, zs.limit,
                            zs.batch_size, progress)  # fmt: skip
    return {**_zeroshot_result(res, writer), "dense_zeroshot_run": dense["run_id"],
            "dense_mean_acc": dense["metrics"]["mean_acc"]}  # fmt: skip


def plan_zeroshot(
    model: ModelSpec | None, zs: ZeroShotConfig, store: RunStore, source_run: str | None = None
) -> tuple[RunConfig, RunConfig | None]:
    """(zeroshot run config, the source run's config or None). With a source run the model
    comes from that run; a different explicit model is an error."""
    src = None
    if source_run is not None:
        rec = store.get(source_run)
        if rec.status != "done" or rec.kind not in ZS_SOURCES:
            raise StoreError(f"run {rec.id} is a {rec.status} {rec.kind} run; zero-shot "
                             f"evaluation needs a finished {'/'.join(ZS_SOURCES)} run")  # fmt: skip
        src = RunConfig.from_dict(rec.config)
        if model is not None and model.name != src.model.name:
            raise ConfigError(f"run {rec.id} is of model {src.model.name!r}, not {model.name!r}")
        spec, source_run = src.model, rec.id
    elif model is None:
        raise ConfigError("zero-shot evaluation needs a model or a stored run")
    else:
        spec = resolve_model_spec(model)
    extra = (("source_run", source_run), ("zeroshot", zeroshot_dict(zs)))
    return RunConfig("zeroshot", spec, EvalConfig(), extra=extra), src


def run_zeroshot(
    model: ModelSpec | None, zs: ZeroShotConfig, store: RunStore, source_run: str | None = None,
    on_progress: ProgressFn | None = None, force: bool = False, lm: LoadedModel | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Zero-shot accuracy of a dense model, or of a stored run's pruned/sliced model (its saved
    folder when it has one, else rebuilt by re-running its pruning). Stored as a 'zeroshot' run."""
    from core.zeroshot import evaluate_zeroshot

    cfg, src = plan_zeroshot(model, zs, store, source_run)
    cached = stored_or_wait(store, cfg, force, on_progress, "the same accuracy")
    if cached is not None:
        return cached
    with store.begin(cfg, force) as writer:
        progress = tee(writer.progress, on_progress)
        writer.write_env(environment_record(cfg.model.device))
        how = "dense"
        if lm is None and src is None:
            report(progress, "load", 0, 1, f"loading {cfg.model.name}")
            lm = get_model(cfg.model, fresh=False)  # read-only use: the shared pristine copy
        elif lm is None:
            lm, how = model_of_run(src, store, cfg.extra_value("source_run"), progress)
        res = evaluate_zeroshot(lm.model, lm.tokenizer, zs.tasks, zs.data_dir, zs.limit,
                                zs.batch_size, progress)  # fmt: skip
        metrics = {**_zeroshot_result(res, writer), "source_run": cfg.extra_value("source_run"),
                   "model_from": how, "model_name": cfg.model.name,
                   "model": lm.adapter.describe()}  # fmt: skip
        writer.commit(metrics)
    return {"run_id": cfg.run_id, "config": cfg.to_dict(), "metrics": metrics, "cached": False}


def model_of_run(
    src: RunConfig, store: RunStore, run_id: str, progress: ProgressFn | None
) -> tuple[LoadedModel, str]:
    """The model a stored run produced, and how it was obtained ('dense', 'saved', 'rebuilt')."""
    from pathlib import Path

    if src.kind == "eval":
        report(progress, "load", 0, 1, f"loading {src.model.name}")
        return get_model(src.model, fresh=False), "dense"
    saved = store.load(run_id).metrics.get("saved_to")
    if saved and Path(saved).is_dir():
        report(progress, "load", 0, 1, f"loading the saved model {saved}")
        return _load_saved(src, saved), "saved"
    report(progress, "load", 0, 1, f"rebuilding run {run_id}'s model by re-running its pruning")
    lm = rebuild_model(src, progress)
    expected = store.load(run_id).metrics.get("achieved_sparsity")
    if expected is not None:
        got = weight_sparsity(lm, _roles(src))["achieved_sparsity"]
        if abs(got - expected) > 1e-9:
            raise StoreError(f"rebuilding run {run_id} gave sparsity {got:.6f}, the run "
                             f"recorded {expected:.6f}; the run cannot be reproduced here")  # fmt: skip
    return lm, "rebuilt"


def _roles(cfg: RunConfig) -> tuple[str, ...]:
    from core.adapter import resolve_roles

    return resolve_roles(cfg.prune.targets)


def _load_saved(src: RunConfig, folder: str) -> LoadedModel:
    from core.adapter import ModelAdapter
    from core.methods.slicegpt import load_sliced

    device = torch.device(src.model.device)
    dtype = resolve_dtype(src.model.dtype, device)
    if src.kind == "slice":
        from transformers import AutoTokenizer

        model = load_sliced(folder, device, dtype)
        return LoadedModel(model, AutoTokenizer.from_pretrained(folder),
                           ModelAdapter.from_model(model), src.model.name, "saved", folder)  # fmt: skip
    return load_model(folder, device, dtype)


def rebuild_model(cfg: RunConfig, progress: ProgressFn | None = None) -> LoadedModel:
    """Re-run a stored prune/slice config's pruning in memory (no evaluation): the same
    model, since calibration windows, seeds and every method are deterministic."""
    lm = get_model(cfg.model, fresh=True)
    calib_ids, _ = get_calib_windows(lm, cfg.calib)
    device = torch.device(cfg.model.device)
    cls = get_method(cfg.prune.method)
    if cls.structured:
        method = cls(cls.options_cls(**dict(cfg.prune.options)))
        method.slice(lm.model, calib_ids, cfg.prune.sparsity, device, progress)
    else:
        apply_prune(lm, cfg.prune, calib_ids, device, progress)
    return lm
