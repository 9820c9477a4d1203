"""A grid sweep's grid: methods × sparsities (or parameter budgets) × patterns × allocations ×
calibration seeds,
resolved into the ordered, deduplicated ``RunConfig``s that compute it, dense baselines first
(``resolve_grid``), and the resolved grid a background job receives as JSON (``GridJob``).

Validation happens here, once, before any work: an empty axis, a point no method accepts
(an N:M pattern for SliceGPT, an unknown option), or one the model's shapes forbid (an M that
does not divide a linear's input width, a slicing fraction that leaves no dimension, a window
longer than the context) raises ``ConfigError`` naming the point. The shape checks are
``core.runs.plan.plan_run``'s, on the model's config only, never its weights.

An N:M point is one run per (method, allocation, seed) at the sparsity the pattern has,
(M − N)/M: the grid's sparsities apply to unstructured points (N:M masks ignore them).
With ``budgets`` (fractions of decoder parameters to remove) every point asks a budget
instead of a sparsity, which planning maps to each method's knob (core.runs.knob): the
structured methods and SliceGPT at matched parameters.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from dataclasses import dataclass
from typing import Any

from core.errors import ConfigError
from core.methods.options import typed_pairs
from core.names import EVAL, GRID_SWEEP
from core.runs.plan import plan_run, prune_run_config, readable_geometry, zeroshot_run_config
from core.runs.resources import resolve_model_spec
from core.settings.config import (
    CalibConfig,
    EvalConfig,
    ModelSpec,
    PruneConfig,
    RunConfig,
    ZeroShotConfig,
)
from core.settings.patterns import check_budget, parse_pattern


@dataclass(frozen=True)
class GridSpec:
    """What a grid sweep sweeps. Axes are tuples; every combination is one point of the grid."""

    model: ModelSpec
    methods: tuple[str, ...]
    sparsities: tuple[float, ...]
    calib: CalibConfig
    eval: EvalConfig
    patterns: tuple[str, ...] = ("unstructured",)
    allocations: tuple[str, ...] = ("uniform",)
    seeds: tuple[int, ...] = (0,)  # calibration sampler seeds: the spread over them is reported
    targets: str = "all"
    options: tuple[str, ...] = ()  # KEY=VALUE texts applied to every method of the grid
    zeroshot: ZeroShotConfig | None = None
    # (method, KEY=VALUE texts) pairs: one method's own options, on top of ``options``
    method_options: tuple[tuple[str, tuple[str, ...]], ...] = ()
    measure: str = (
        RunConfig.measure
    )  # every point's (core.settings.config.MEASURES; the run's default)
    budgets: tuple[float, ...] = ()  # fractions of decoder parameters: replace sparsities

    def __post_init__(self) -> None:
        object.__setattr__(self, "budgets", tuple(dict.fromkeys(self.budgets)))
        for b in self.budgets:
            check_budget(b)
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
            asked = [(s, None) for s in grid] if nm or not self.budgets else []
            asked += [(0.0, b) for b in self.budgets if not nm]
            for s, budget in asked:
                out.append(
                    {
                        "method": method,
                        "sparsity": s,
                        "budget": budget,
                        "pattern": pattern,
                        "allocation": alloc,
                        "seed": seed,
                    }
                )
        return out


def point_label(p: dict[str, Any]) -> str:
    asked = (
        f"budget={p['budget']:g}" if p.get("budget") is not None else f"sparsity={p['sparsity']:g}"
    )
    return (
        f"method={p['method']} {asked} pattern={p['pattern']} "
        f"allocation={p['allocation']} seed={p['seed']}"
    )


def point_options(spec: GridSpec, method: str) -> tuple[tuple[str, Any], ...]:
    """The grid's shared options with ``method``'s own on top, typed by ``method``'s option
    kinds (as ``prune --option`` types them)."""
    given = {text.partition("=")[0]: text for text in spec.options}
    given |= {text.partition("=")[0]: text for text in dict(spec.method_options).get(method, ())}
    return typed_pairs(method, list(given.values()))


def plan_point(spec: GridSpec, model: ModelSpec, p: dict[str, Any]) -> RunConfig:
    """The config ``plan_prune`` builds for the point (``model`` is already resolved)."""
    prune = PruneConfig(
        p["method"],
        p["sparsity"],
        p["pattern"],
        spec.targets,
        p["allocation"],
        options=point_options(spec, p["method"]),
        budget=p.get("budget"),
    )
    calib = dataclasses.replace(spec.calib, seed=p["seed"])
    return prune_run_config(model, prune, calib, spec.eval, spec.zeroshot, spec.measure)


def baselines(spec: GridSpec, model: ModelSpec) -> list[RunConfig]:
    """The dense runs every point compares with: perplexity, and accuracy when asked."""
    out = [RunConfig(EVAL, model, spec.eval)]
    if spec.zeroshot is not None:
        out.append(zeroshot_run_config(model, spec.zeroshot))
    return out


def resolve_grid(spec: GridSpec, device: str | None = None) -> list[RunConfig]:
    """Dense baselines first, then every point in grid order, each run id once. Raises
    ConfigError naming the first invalid point before anything runs. ``device``: where
    remote workers run (``resolve_model_spec``)."""
    model = resolve_model_spec(spec.model, device)
    geo = readable_geometry(model)
    configs = baselines(spec, model)
    for p in spec.points():
        try:
            cfg = plan_point(spec, model, p)
            if geo is not None:
                plan_run(cfg, geo)  # checked here; each point's worker plans it when it runs
        except ConfigError as exc:
            raise ConfigError(f"grid point {point_label(p)}: {exc}") from exc
        configs.append(cfg)
    return list({c.run_id: c for c in configs}.values())


@dataclass(frozen=True)
class GridJob:
    """A resolved grid (``resolve_grid``'s configs, dense baselines first, each run id once):
    what a background grid job receives, so it runs exactly the run ids its launcher planned
    and showed, with nothing re-read from form values or flags."""

    configs: tuple[RunConfig, ...]

    def __post_init__(self) -> None:
        if not self.configs:
            raise ConfigError("a grid job needs at least one configuration")
        object.__setattr__(self, "configs", tuple(self.configs))

    def to_json(self) -> str:
        return json.dumps({"kind": GRID_SWEEP, "configs": [c.to_dict() for c in self.configs]})

    @classmethod
    def from_json(cls, text: str) -> GridJob:
        """Inverse of ``to_json``; ConfigError for a document that is not a grid job."""
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"not a grid job: {exc}") from exc
        return cls.from_dict(doc)

    @classmethod
    def from_dict(cls, doc: Any) -> GridJob:
        """A parsed ``to_json`` document; ConfigError for one that is not a grid job."""
        if not is_grid_job(doc):
            raise ConfigError(f"not a grid job: its kind is not {GRID_SWEEP!r}")
        try:
            return cls(tuple(RunConfig.from_dict(c) for c in doc["configs"]))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"not a grid job: {exc!r}") from exc


def is_grid_job(doc: Any) -> bool:
    """Whether a job document (parsed JSON) is a ``GridJob`` (else a single RunConfig)."""
    return isinstance(doc, dict) and doc.get("kind") == GRID_SWEEP
