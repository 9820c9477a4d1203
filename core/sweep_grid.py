"""A sweep's grid: methods × sparsities × patterns × allocations × calibration seeds, resolved
into the ordered, deduplicated ``RunConfig``s that compute it, dense baselines first.

Validation happens here, once, before any work: an empty axis, a point no method accepts
(an N:M pattern for SliceGPT, an unknown option), or one the model's shapes forbid (an M that
does not divide a linear's input width, a slicing fraction that leaves no dimension, a window
longer than the context) raises ``ConfigError`` naming the point. The shape checks read the
model's architecture config only, never its weights.

An N:M point is one run per (method, allocation, seed) at the sparsity the pattern has,
(M − N)/M: the grid's sparsities apply to unstructured points (N:M masks ignore them).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

import torch

from core.adapter import resolve_roles
from core.config import (
    CalibConfig,
    EvalConfig,
    ModelSpec,
    PruneConfig,
    RunConfig,
    ZeroShotConfig,
    zeroshot_dict,
)
from core.device import dtype_name, resolve_device, resolve_dtype
from core.errors import ConfigError, ModelLoadError
from core.masks import parse_pattern
from core.methods import get_method
from core.methods.slicegpt import sliced_width
from core.models import model_config
from core.names import SLICE
from core.runs.plan import resolve_prune_config

# Which input width each role's linear reads (N:M groups run along the input dimension).
_INPUT_WIDTH = {
    "q": "hidden",
    "k": "hidden",
    "v": "hidden",
    "gate": "hidden",
    "up": "hidden",
    "o": "attn",
    "down": "intermediate",
}


@dataclass(frozen=True)
class SweepSpec:
    """What to sweep. Axes are tuples; every combination is one point of the grid."""

    model: ModelSpec
    methods: tuple[str, ...]
    sparsities: tuple[float, ...]
    calib: CalibConfig
    eval: EvalConfig
    patterns: tuple[str, ...] = ("unstructured",)
    allocations: tuple[str, ...] = ("uniform",)
    seeds: tuple[int, ...] = (0,)  # calibration sampler seeds: the spread over them is reported
    targets: str = "all"
    options: tuple[tuple[str, Any], ...] = ()  # applied to every method of the grid
    zeroshot: ZeroShotConfig | None = None
    # (method, options) pairs: one method's own options, on top of ``options``
    method_options: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()

    def __post_init__(self) -> None:
        for axis in ("methods", "sparsities", "patterns", "allocations", "seeds"):
            values = tuple(dict.fromkeys(getattr(self, axis)))  # ordered, without repeats
            if not values:
                raise ConfigError(f"the sweep grid is empty: give at least one of {axis}")
            object.__setattr__(self, axis, values)
        for s in self.sparsities:
            if not 0.0 <= s < 1.0:
                raise ConfigError(f"grid point sparsity={s}: sparsity must be in [0, 1)")

    def points(self) -> list[dict[str, Any]]:
        """Every combination, N:M patterns collapsed to their own sparsity."""
        out = []
        for method, pattern, alloc, seed in itertools.product(
            self.methods, self.patterns, self.allocations, self.seeds
        ):
            nm = parse_pattern(pattern) if pattern != "unstructured" else None
            grid = ((nm[1] - nm[0]) / nm[1],) if nm else self.sparsities
            for s in grid:
                out.append(
                    {
                        "method": method,
                        "sparsity": s,
                        "pattern": pattern,
                        "allocation": alloc,
                        "seed": seed,
                    }
                )
        return out


def point_label(p: dict[str, Any]) -> str:
    return (
        f"method={p['method']} sparsity={p['sparsity']:g} pattern={p['pattern']} "
        f"allocation={p['allocation']} seed={p['seed']}"
    )


def resolve_model_for(spec: ModelSpec, device: str | None = None) -> ModelSpec:
    """The resolved model spec. ``device`` ('cpu' | 'cuda'): where remote workers run, used
    for 'auto' without requiring this (driver) machine to have it; None: resolve here."""
    if device is None:
        dev = resolve_device(spec.device)  # checks that this machine has it
    else:
        try:
            dev = torch.device(device if spec.device == "auto" else spec.device)
        except RuntimeError as exc:
            raise ConfigError(
                f"unknown device {spec.device!r} (use auto, cpu, cuda, cuda:N)"
            ) from exc
    return dataclasses.replace(
        spec, device=str(dev), dtype=dtype_name(resolve_dtype(spec.dtype, dev))
    )


def point_options(spec: SweepSpec, method: str) -> tuple[tuple[str, Any], ...]:
    """The grid's shared options with ``method``'s own on top."""
    own = dict(dict(spec.method_options).get(method, ()))
    return tuple(sorted({**dict(spec.options), **own}.items()))


def plan_point(
    spec: SweepSpec, model: ModelSpec, p: dict[str, Any]
) -> RunConfig:  # the same config pipeline.plan_prune / slicing.plan_slice build
    prune = resolve_prune_config(
        PruneConfig(
            p["method"],
            p["sparsity"],
            p["pattern"],
            spec.targets,
            p["allocation"],
            options=point_options(spec, p["method"]),
        )
    )
    calib = dataclasses.replace(spec.calib, seed=p["seed"])
    extra = (("zeroshot", zeroshot_dict(spec.zeroshot)),) if spec.zeroshot is not None else ()
    kind = get_method(prune.method).run_kind
    if kind == SLICE:
        if prune.pattern != "unstructured":
            raise ConfigError("slicegpt slices whole dimensions: use pattern 'unstructured'")
        if prune.allocation != "uniform":
            raise ConfigError("slicegpt slices every layer alike: use allocation 'uniform'")
    return RunConfig(kind, model, spec.eval, calib, prune, extra)


def baselines(spec: SweepSpec, model: ModelSpec) -> list[RunConfig]:
    """The dense runs every point compares with: perplexity, and accuracy when asked."""
    out = [RunConfig("eval", model, spec.eval)]
    if spec.zeroshot is not None:  # as pipeline.plan_zeroshot builds it for a dense model
        extra = (("source_run", None), ("zeroshot", zeroshot_dict(spec.zeroshot)))
        out.append(RunConfig("zeroshot", model, EvalConfig(), extra=extra))
    return out


def resolve_grid(spec: SweepSpec, device: str | None = None) -> list[RunConfig]:
    """Dense baselines first, then every point in grid order, each run id once. Raises
    ConfigError naming the first invalid point before anything runs."""
    model = resolve_model_for(spec.model, device)
    arch = architecture(model)
    configs = baselines(spec, model)
    for p in spec.points():
        try:
            cfg = plan_point(spec, model, p)
            if arch is not None:
                check_shapes(cfg, arch)
        except ConfigError as exc:
            raise ConfigError(f"grid point {point_label(p)}: {exc}") from exc
        configs.append(cfg)
    return list({c.run_id: c for c in configs}.values())


# ---- shapes from the architecture config alone --------------------------------------------------
def architecture(model: ModelSpec) -> Any | None:
    """The model's transformers config (no weights), or None when it cannot be read here (the
    workers then check shapes when they load the model)."""
    try:
        return model_config(model.name, model.trust_remote_code, model.revision)
    except (OSError, ValueError, ModelLoadError):
        return None


def check_shapes(cfg: RunConfig, arch: Any) -> None:
    """The checks a worker would make after loading the model, made on its config."""
    ctx = int(getattr(arch, "max_position_embeddings", 0) or 0)
    for what, n in (("seqlen", cfg.eval.seqlen), ("calibration seqlen", cfg.calib.seqlen)):
        if ctx and n > ctx:
            raise ConfigError(f"{what} {n} exceeds the model's context of {ctx} tokens")
    hidden = int(arch.hidden_size)
    if cfg.kind == "slice":
        sliced_width(hidden, cfg.prune.sparsity, int(dict(cfg.prune.options).get("round_to", 8)))
        return
    nm = parse_pattern(cfg.prune.pattern)
    if nm is None:
        return
    head_dim = getattr(arch, "head_dim", None) or hidden // arch.num_attention_heads
    widths = {
        "hidden": hidden,
        "attn": arch.num_attention_heads * head_dim,
        "intermediate": int(arch.intermediate_size),
    }
    for role in resolve_roles(cfg.prune.targets):
        width = widths[_INPUT_WIDTH[role]]
        if width % nm[1]:
            raise ConfigError(
                f"N:M pattern {cfg.prune.pattern} needs input widths divisible by "
                f"{nm[1]}; {role}_proj has {width}"
            )
