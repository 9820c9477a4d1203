"""Resolve and validate run configurations at the edge, before any expensive work.

Every entry point (CLI, app jobs, the Python API, ``execute``) plans a run here first: a
method name and its options are checked, 'auto' device and dtype are resolved, and every
size the run depends on is checked against the model's geometry read from its config
alone (``core.models.geometry``): sequence lengths against the context, N:M against the input
widths of the targeted linears, SliceGPT's width against rounding and the head size. A bad
configuration raises ConfigError (or ModelLoadError for a model that cannot exist) in
seconds, without loading weights or evaluating a baseline. What planning decided is one
``core.runs.planned.Plan`` (made by ``plan_run`` alone), which execution takes as an argument.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.errors import ConfigError, ModelLoadError, StoreError
from core.methods import get_method, make_method
from core.methods.base import Method
from core.methods.slicegpt import sliced_width
from core.models.geometry import Geometry, model_geometry
from core.models.load import TINY_MODELS
from core.names import (
    F32,
    FULL,
    MODEL_KINDS,
    PRUNE,
    RECOVER,
    RELATION_SWEEP,
    SHAPED_KINDS,
    SLICE,
    STRUCTURED,
    ZEROSHOT,
    family_roles,
)
from core.runs.knob import decoder_counts, with_budget
from core.runs.planned import Plan
from core.runs.resources import resolve_model_spec
from core.settings.config import (
    CalibConfig,
    EvalConfig,
    ModelSpec,
    PruneConfig,
    RunConfig,
    ZeroShotConfig,
    options_tuple,
    zeroshot_dict,
)
from core.settings.patterns import parse_pattern
from core.store.run_store import RunStore


@lru_cache(maxsize=8)
def _geometry(name: str, trust_remote_code: bool, revision: str | None) -> Geometry:
    return model_geometry(ModelSpec(name, trust_remote_code=trust_remote_code, revision=revision))


def geometry(spec: ModelSpec) -> Geometry:
    """The model's geometry from its config (cached per process: sweeps ask once per point)."""
    return _geometry(spec.name, spec.trust_remote_code, spec.revision)


def readable_geometry(spec: ModelSpec) -> Geometry | None:
    """The geometry, or None when the config cannot be read on this machine (a sweep's
    remote workers then check the shapes when they load the model)."""
    try:
        return geometry(spec)
    except (OSError, ValueError, ModelLoadError):
        return None


# ---- checks against the geometry ---------------------------------------------------------------
def check_seqlen(geo: Geometry, seqlen: int, what: str = "seqlen") -> None:
    if geo.max_positions and seqlen > geo.max_positions:
        raise ConfigError(
            f"{what} {seqlen} exceeds the model's context of {geo.max_positions} tokens"
        )


def check_pattern(geo: Geometry, roles: tuple[str, ...], pattern: str) -> None:
    """Reject an N:M pattern whose M does not divide a targeted linear's input width."""
    nm = parse_pattern(pattern)
    if nm is None:
        return
    for role in roles:
        if geo.in_features(role) % nm[1]:
            raise ConfigError(
                f"N:M pattern {pattern} needs input widths divisible by {nm[1]}; "
                f"{role}_proj has {geo.in_features(role)}"
            )


def check_slicing(geo: Geometry, sparsity: float, round_to: int) -> None:
    """SliceGPT's kept width d′ must round to at least one attention head's width."""
    width = sliced_width(geo.hidden_size, sparsity, round_to)  # raises at 0
    if width < geo.head_dim:
        raise ConfigError(
            f"slicing sparsity {sparsity} keeps d′ = {width} of d = {geo.hidden_size}, "
            f"less than one attention head ({geo.head_dim}); use a smaller sparsity"
        )


def check_stream(cfg: RunConfig, geo: Geometry) -> None:
    """What a streamed run (``ModelSpec.stream``) cannot do, from the config alone: models
    without safetensors files (the tiny ones are built in memory), remote code, zero-shot
    scoring (it runs the whole model), SliceGPT on a LayerNorm family (its residual stream
    is centred in every layer before slicing starts, which needs all layers at once)."""
    spec = cfg.model
    if not spec.stream:
        return
    if spec.name in TINY_MODELS:
        raise ConfigError(
            f"{spec.name} is built in memory, not read from files: save it to a folder "
            "(save_pretrained) to stream it"
        )
    folder = Path(spec.name).expanduser()
    if folder.is_dir() and not any(folder.glob("*.safetensors")):
        raise ConfigError(f"{spec.name} has no safetensors files; streaming reads only those")
    if spec.trust_remote_code:
        raise ConfigError(
            "a streamed model is built from transformers' own classes: drop "
            "trust_remote_code or stream off"
        )
    if cfg.kind == ZEROSHOT or cfg.extra_value("zeroshot") is not None:
        raise ConfigError("zero-shot tasks score the whole model at once: run them without stream")
    if cfg.kind == STRUCTURED:
        raise ConfigError(f"{cfg.prune.method} runs in memory: run it without stream")
    if cfg.prune is not None and cfg.prune.method == "slicegpt" and geo.traits.norm == "layernorm":
        raise ConfigError(
            f"slicegpt cannot be streamed on a {geo.family} model (LayerNorm: the residual "
            "stream is centred in every layer before slicing starts); slice it without stream"
        )


def plan_run(cfg: RunConfig, geo: Geometry | None = None, method: Method | None = None) -> Plan:
    """The ``Plan`` of ``cfg``: every size it depends on, against its model's geometry (no
    weights loaded): ``geo``, else the geometry read from the model's config. The plan holds
    what was resolved on the way (roles, the method built once, or ``method`` when the
    caller built it), for the run's execution to take as an argument."""
    geo = geo or geometry(cfg.model)
    check_stream(cfg, geo)
    if cfg.kind != ZEROSHOT:
        check_seqlen(geo, cfg.eval.seqlen)
    if cfg.calib is not None:
        check_seqlen(geo, cfg.calib.seqlen, "calibration seqlen")
    if cfg.prune is None:
        return Plan(cfg, geo)
    method = method or make_method(cfg.prune.method, cfg.prune.options)
    calib_seqlen = cfg.calib.seqlen if cfg.calib is not None else None
    why = method.refusal(geo, calib_seqlen)  # the method runs on the model's family
    if why:
        raise ConfigError(f"{method.name} cannot prune this {geo.family} model: {why}")
    roles: tuple[str, ...] = ()
    if cfg.kind == PRUNE:
        roles = family_roles(cfg.prune.targets, geo.traits.roles, geo.family)
        check_pattern(geo, roles, cfg.prune.pattern)
        method.check_plan(roles, cfg.prune.pattern)
    elif cfg.kind in (SLICE, RELATION_SWEEP):
        for s in cfg.extra_value("sparsities") or (cfg.prune.sparsity,):
            check_slicing(geo, s, method.options.round_to)
    elif cfg.kind == STRUCTURED:
        method.check_knob(decoder_counts(cfg.model), cfg.prune.sparsity)
    return Plan(cfg, geo, roles, method)


def plan_config(cfg: RunConfig) -> Plan:
    """The plan of a config a caller holds alone (the CLI's, a background job's file, a
    sweep worker's): ``plan_run``, except zero-shot and recovery configs, which are checked
    against their source or parent run when they execute."""
    if cfg.kind in (ZEROSHOT, RECOVER):
        return Plan(cfg)
    return plan_run(cfg)


# ---- plans: the resolved config (hence the run id) a run will have -------------------------------
def resolve_prune(prune: PruneConfig) -> tuple[PruneConfig, Method]:
    """Validate the method name, build the method once with its options (the dataclass the
    edge typed, or pairs of a stored config) and fill them with defaults: the resolved
    config, whose options are the sorted pairs the run id hashes, and the method."""
    cls = get_method(prune.method)
    if prune.pattern != "unstructured" and "nm" not in cls.supports_patterns:
        raise ConfigError(f"method {cls.name} does not support N:M patterns")
    if cls.run_kind in SHAPED_KINDS and prune.allocation != "uniform":
        raise ConfigError(f"{cls.name} sets every layer's shapes itself: use allocation 'uniform'")
    if cls.run_kind in SHAPED_KINDS and prune.calib_dtype != F32:
        raise ConfigError(
            f"{cls.name} computes its {'rotations' if cls.run_kind == SLICE else 'scores'} "
            f"from float32 calibration forwards: use calibration precision {F32}"
        )
    if cls.run_kind == STRUCTURED and prune.targets != "all":
        raise ConfigError(f"{cls.name} chooses the structures it removes: use targets 'all'")
    method = make_method(prune.method, prune.options)
    options = options_tuple(method.options)
    return dataclasses.replace(prune, method=cls.name, options=options), method


def resolve_prune_config(prune: PruneConfig) -> PruneConfig:
    """``resolve_prune``'s config alone."""
    return resolve_prune(prune)[0]


def dense_config(model: ModelSpec, eval_cfg: EvalConfig) -> RunConfig:
    """The config of dense perplexity of ``model`` on ``eval_cfg`` (its model resolved),
    unchecked: a prune run's dense baseline, whose sizes the run's own plan checked."""
    return RunConfig("eval", resolve_model_spec(model, eval_cfg=eval_cfg), eval_cfg)


def plan_eval(model: ModelSpec, eval_cfg: EvalConfig) -> Plan:
    return plan_run(dense_config(model, eval_cfg))


def plan_prune(
    model: ModelSpec,
    prune: PruneConfig,
    calib: CalibConfig,
    eval_cfg: EvalConfig,
    zeroshot: ZeroShotConfig | None = None,
    measure: str = FULL,
) -> Plan:
    """The plan of a run applying ``prune.method``: kind 'prune' for layer-wise methods, the
    method's own kind ('slice' for SliceGPT) otherwise. Zero-shot settings enter the config
    only when given, so runs without keep their ids; so does ``measure``
    (core.settings.config.MEASURES) at its default."""
    model = resolve_model_spec(model, calib=calib, eval_cfg=eval_cfg)
    prune, method = resolve_prune(prune)
    prune = with_budget(prune, method, model)  # a parameter budget: the method's knob
    return plan_run(_prune_run(model, prune, calib, eval_cfg, zeroshot, measure), method=method)


def require_kind(plan: Plan, kind: str | None) -> Plan:
    """``plan`` when its run kind is ``kind`` (or ``kind`` is None), else ConfigError."""
    cfg = plan.cfg
    if kind is not None and cfg.kind != kind:
        raise ConfigError(f"{cfg.prune.method} makes '{cfg.kind}' runs, not '{kind}' runs")
    return plan


def plan_slice(*parts: Any, **kwargs: Any) -> Plan:
    """``plan_prune`` (the same arguments) for a method that slices (runs of kind 'slice')."""
    return require_kind(plan_prune(*parts, **kwargs), SLICE)


def prune_run_config(
    model: ModelSpec,
    prune: PruneConfig,
    calib: CalibConfig,
    eval_cfg: EvalConfig,
    zeroshot: ZeroShotConfig | None,
    measure: str = FULL,
) -> RunConfig:
    """The config of ``plan_prune`` for an already resolved ``model``, before the geometry
    checks (a sweep's grid makes them once it knows whether the config is readable)."""
    prune, method = resolve_prune(prune)
    prune = with_budget(prune, method, model)
    return _prune_run(model, prune, calib, eval_cfg, zeroshot, measure)


def _prune_run(
    model: ModelSpec,
    prune: PruneConfig,
    calib: CalibConfig,
    eval_cfg: EvalConfig,
    zeroshot: ZeroShotConfig | None,
    measure: str,
) -> RunConfig:
    """The run config of a resolved ``prune``, of its method's run kind."""
    extra = (("zeroshot", zeroshot_dict(zeroshot)),) if zeroshot is not None else ()
    kind = get_method(prune.method).run_kind
    return RunConfig(kind, model, eval_cfg, calib, prune, extra, measure)


def plan_relation_sweep(
    model: ModelSpec,
    sparsities: tuple[float, ...],
    calib: CalibConfig,
    eval_cfg: EvalConfig,
    options: tuple = (),
    zeroshot: ZeroShotConfig | None = None,
    seeds: tuple[int, ...] = (),
    measure: str = FULL,
    protocol: str | None = None,
) -> Plan:
    """A SliceGPT sweep over the grid; every point is validated. ``seeds``: calibration seeds,
    one slice run per (s, seed) so the intervals resample the calibration draw too (empty:
    the calibration config's own seed, and the run id of a sweep without seeds).
    ``protocol``: the named protocol its values were fixed by (core.requests.protocol_fields;
    it enters the sweep's id, never its points')."""
    grid = tuple(sorted({float(s) for s in sparsities}))
    if not grid:
        raise ConfigError("the sweep needs at least one sparsity")
    if len(set(seeds)) != len(seeds) or any(not isinstance(x, int) or x < 0 for x in seeds):
        raise ConfigError(f"seeds must be distinct non-negative integers, got {list(seeds)}")
    base = PruneConfig("slicegpt", 0.0, options=options)  # as given: it is the sweep's id
    resolve_prune_config(base)
    extra: tuple = (("sparsities", grid),)
    if seeds:
        extra += (("seeds", tuple(seeds)),)
    if zeroshot is not None:
        extra += (("zeroshot", zeroshot_dict(zeroshot)),)
    if protocol is not None:
        extra += (("protocol", protocol),)
    model = resolve_model_spec(model)
    cfg = RunConfig(RELATION_SWEEP, model, eval_cfg, calib, base, extra=extra, measure=measure)
    return plan_run(cfg)


def relation_sweep_points(cfg: RunConfig) -> list[tuple[float, list[RunConfig]]]:
    """(s, the slice runs' configs, one per calibration seed) for every point of a sweep."""
    extra = tuple((k, v) for k, v in cfg.extra if k == "zeroshot")
    seeds = cfg.extra_value("seeds") or (cfg.calib.seed,)
    calibs = [dataclasses.replace(cfg.calib, seed=int(seed)) for seed in seeds]
    points = []
    for s in cfg.extra_value("sparsities"):
        prune = resolve_prune_config(dataclasses.replace(cfg.prune, sparsity=s))
        configs = [
            RunConfig(SLICE, cfg.model, cfg.eval, c, prune, extra, cfg.measure) for c in calibs
        ]
        points.append((s, configs))
    return points


def plan_zeroshot(
    model: ModelSpec | None, zs: ZeroShotConfig, store: RunStore, source_run: str | None = None
) -> tuple[RunConfig, RunConfig | None]:
    """(zeroshot run config, the source run's config or None). With a source run the model
    comes from that run; a different explicit model is an error."""
    src = None
    if source_run is not None:
        rec = store.get(source_run)
        if rec.status != "done" or rec.kind not in MODEL_KINDS:
            raise StoreError(
                f"run {rec.id} is a {rec.status} {rec.kind} run; zero-shot "
                f"evaluation needs a finished {'/'.join(MODEL_KINDS)} run"
            )
        src = RunConfig.from_dict(store.load(rec.id).config)  # a damaged folder: refused here
        if model is not None and model.name != src.model.name:
            raise ConfigError(f"run {rec.id} is of model {src.model.name!r}, not {model.name!r}")
        # a streamed run's model is rebuilt and scored in memory
        spec, source_run = dataclasses.replace(src.model, stream=False), rec.id
    elif model is None:
        raise ConfigError("zero-shot evaluation needs a model or a stored run")
    elif model.stream is True:
        raise ConfigError("zero-shot tasks score the whole model at once: run them without stream")
    else:  # in memory, checked to fit (core.planning.fit)
        spec = resolve_model_spec(dataclasses.replace(model, stream=False))
        geometry(spec)  # the model exists and is a causal LM
    return zeroshot_run_config(spec, zs, source_run), src


def zeroshot_run_config(
    model: ModelSpec, zs: ZeroShotConfig, source_run: str | None = None
) -> RunConfig:
    """The config of zero-shot accuracy of ``model`` (resolved), or of a stored run's model."""
    extra = (("source_run", source_run), ("zeroshot", zeroshot_dict(zs)))
    return RunConfig(ZEROSHOT, model, EvalConfig(), extra=extra)
