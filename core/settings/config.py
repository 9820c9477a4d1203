"""Frozen, validated run configurations. The sha256 of a resolved config is the run id.

A config is resolved when every default is filled in and "auto" choices (device, dtype)
are replaced by what they resolved to, so two runs with the same id computed the same thing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from core.errors import ConfigError
from core.names import (
    CALIB_DTYPES,
    CALIB_SAMPLERS,
    DATASETS,
    F32,
    FULL,
    LEAN,
    LORA,
    MEASURES,
    RECOVER_METHODS,
    WINDOW,
    resolve_roles,
)
from core.settings.patterns import check_budget, check_sparsity, parse_pattern, parse_tasks

AUTO = "auto"
STREAM_MODES = {"on": True, "off": False}  # the words of --stream / the form for True / False


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


@dataclass(frozen=True)
class ModelSpec:
    """A model and where it runs. stream: never hold it; build it on the meta device and read
    one module at a time from its safetensors files, writing the changed model shard by
    shard (``core.stream``; same numbers as in memory). It enters the config only when on,
    so in-memory runs keep their ids. "auto" (the commands' default; "on"/"off" are read as
    True/False) is decided by ``core.planning.fit`` when the spec is resolved, so a resolved
    config always holds True or False."""

    name: str = "smollm2-135m"
    device: str = "auto"
    dtype: str = "auto"
    trust_remote_code: bool = False
    revision: str | None = None
    stream: bool | str = False

    def __post_init__(self) -> None:
        _check(bool(self.name.strip()), "model name is empty")
        stream = self.stream
        if isinstance(stream, str):
            stream = STREAM_MODES.get(stream, stream)
        ok = stream is True or stream is False or stream == AUTO
        _check(ok, f"stream must be auto, on or off, got {self.stream!r}")
        object.__setattr__(self, "stream", stream)


@dataclass(frozen=True)
class DataSpec:
    """A corpus: 'wikitext2' | 'c4' | 'pydoc' | 'file:<path>'; data_dir = local copy of the
    shared/data layout (None: Hugging Face datasets, falling back to nothing)."""

    dataset: str = "wikitext2"
    split: str = "test"
    data_dir: str | None = None

    def __post_init__(self) -> None:
        ok = self.dataset in DATASETS or self.dataset.startswith("file:")
        _check(ok, f"unknown dataset {self.dataset!r}; use {', '.join(DATASETS)} or file:<path>")
        _check(self.split in ("train", "test", "validation"), f"unknown split {self.split!r}")


@dataclass(frozen=True)
class EvalConfig:
    data: DataSpec = field(default_factory=DataSpec)
    seqlen: int = 512
    max_windows: int | None = None
    batch_size: int = 4

    def __post_init__(self) -> None:
        _check(self.seqlen >= 2, f"seqlen must be >= 2, got {self.seqlen}")
        _check(self.max_windows is None or self.max_windows >= 1, "max-windows must be >= 1")
        _check(self.batch_size >= 1, "batch size must be >= 1")


@dataclass(frozen=True)
class CalibConfig:
    """Calibration sample: nsamples sequences of seqlen tokens. sampler: "window" (Wanda/
    SparseGPT: a random window of a random long document) or "documents" (SliceGPT's
    reference: whole documents from their start); see ``core.data``."""

    data: DataSpec = field(default_factory=lambda: DataSpec("c4", "train"))
    nsamples: int = 32
    seqlen: int = 512
    seed: int = 0
    sampler: str = WINDOW

    def __post_init__(self) -> None:
        _check(self.nsamples >= 1, f"nsamples must be >= 1, got {self.nsamples}")
        _check(self.seqlen >= 2, f"calibration seqlen must be >= 2, got {self.seqlen}")
        _check(
            self.sampler in CALIB_SAMPLERS,
            f"calibration sampler must be one of {', '.join(CALIB_SAMPLERS)}, got {self.sampler!r}",
        )


@dataclass(frozen=True)
class PruneConfig:
    """What to prune and how. ``options``: the method's own, as sorted (key, value) pairs in
    a resolved config (what the run id hashes); before planning, the options dataclass the
    edge built (``core.methods.options.typed_options``), which planning hands to the
    method it builds (``core.runs.plan.resolve_prune``)."""

    method: str = "wanda"
    sparsity: float = 0.5
    pattern: str = "unstructured"  # or "N:M"
    targets: str = "all"  # all | attention | mlp | qk | comma list of roles
    allocation: str = "uniform"  # uniform | owl
    owl_lambda: float = 0.08
    owl_m: float = 5.0
    options: Any = ()
    calib_dtype: str = F32  # CALIB_DTYPES: the precision of the calibration forwards
    # The fraction of decoder parameters to remove (``--budget params=F``), structured
    # methods only: planning maps it to the method's knob, which ``sparsity`` then holds.
    budget: float | None = None

    def __post_init__(self) -> None:
        check_sparsity(self.sparsity)  # the one rule of a sparsity's range
        if self.budget is not None:
            check_budget(self.budget)
        _check(
            self.calib_dtype in CALIB_DTYPES,
            f"calibration precision must be one of {', '.join(CALIB_DTYPES)}, "
            f"got {self.calib_dtype!r}",
        )
        _check(self.allocation in ("uniform", "owl"), f"unknown allocation {self.allocation!r}")
        _check(self.owl_lambda >= 0 and self.owl_m > 0, "OWL needs lambda >= 0 and M > 0")
        if self.pattern != "unstructured":
            parse_pattern(self.pattern)  # raises ConfigError on a bad N:M
        resolve_roles(self.targets)


@dataclass(frozen=True)
class ZeroShotConfig:
    """Zero-shot multiple-choice evaluation (core.evaluation.accuracy): which tasks, the first
    ``limit`` items of each (None: all), task files under data_dir/tasks (None: the hub)."""

    tasks: tuple[str, ...] = (
        "piqa",
        "hellaswag",
        "arc_easy",
        "arc_challenge",
        "winogrande",
        "boolq",
    )
    limit: int | None = None
    data_dir: str | None = None
    batch_size: int = 8

    def __post_init__(self) -> None:
        object.__setattr__(self, "tasks", parse_tasks(self.tasks))
        _check(
            self.limit is None or self.limit >= 1,
            f"limit must be >= 1 item per task (omit it for all items), got {self.limit}",
        )
        _check(self.batch_size >= 1, "batch size must be >= 1")


@dataclass(frozen=True)
class RunConfig:
    """A whole run: kind in {'eval', 'prune', 'slice', 'structured', 'sweep', 'zeroshot',
    'recover', 'sensitivity'} (``core.runs.execute.KINDS``);
    ``measure``: FULL or LEAN (see MEASURES), in the run id only when LEAN."""

    kind: str
    model: ModelSpec = field(default_factory=ModelSpec)
    eval: EvalConfig = field(default_factory=EvalConfig)
    calib: CalibConfig | None = None
    prune: PruneConfig | None = None
    extra: tuple[tuple[str, Any], ...] = ()  # kind-specific settings (e.g. sweep grid)
    measure: str = FULL

    def __post_init__(self) -> None:
        _check(self.measure in MEASURES, f"measure must be one of {MEASURES}, got {self.measure!r}")

    @property
    def lean(self) -> bool:
        return self.measure == LEAN

    def to_dict(self) -> dict[str, Any]:
        out = _plain(dataclasses.asdict(self))
        # defaults of options added later stay out, so the ids of runs from before them hold
        if not self.model.stream:
            del out["model"]["stream"]
        if self.measure == FULL:
            del out["measure"]
        if out.get("calib") and out["calib"]["sampler"] == WINDOW:
            del out["calib"]["sampler"]
        if out.get("prune") and out["prune"]["calib_dtype"] == F32:
            del out["prune"]["calib_dtype"]
        if out.get("prune") and out["prune"]["budget"] is None:
            del out["prune"]["budget"]
        return out

    def canonical_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @property
    def run_id(self) -> str:
        """First 16 hex digits of sha256(canonical JSON): same config, same id."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]

    def extra_value(self, key: str, default: Any = None) -> Any:
        return dict(self.extra).get(key, default)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        """Inverse of ``to_dict`` (a stored run's config), with the same run id."""

        def data(x: dict[str, Any]) -> DataSpec:
            return DataSpec(**x)

        ev = dict(d["eval"])
        calib = dict(d["calib"]) if d.get("calib") else None
        prune = dict(d["prune"]) if d.get("prune") else None
        if prune is not None:
            prune["options"] = options_tuple(prune.get("options") or {})
        return cls(
            kind=d["kind"],
            model=ModelSpec(**d["model"]),
            eval=EvalConfig(**{**ev, "data": data(ev["data"])}),
            calib=CalibConfig(**{**calib, "data": data(calib["data"])}) if calib else None,
            prune=PruneConfig(**prune) if prune else None,
            extra=tuple(sorted((d.get("extra") or {}).items())),
            measure=d.get("measure", FULL),
        )


def _plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        # option tuples of (key, value) pairs become dicts for readability
        if obj and all(
            isinstance(p, tuple | list) and len(p) == 2 and isinstance(p[0], str) for p in obj
        ):
            return {k: _plain(v) for k, v in obj}
        return [_plain(v) for v in obj]
    return obj


def zeroshot_dict(zs: ZeroShotConfig) -> dict[str, Any]:
    return _plain(dataclasses.asdict(zs))


def zeroshot_from(value: Any) -> ZeroShotConfig | None:
    """A ZeroShotConfig from a config's extra value (dict) or None."""
    if value is None or isinstance(value, ZeroShotConfig):
        return value
    return ZeroShotConfig(**{**dict(value), "tasks": tuple(dict(value)["tasks"])})


def options_tuple(options: Any) -> tuple[tuple[str, Any], ...]:
    """A method's options dataclass (or dict) as a sorted tuple of pairs (hashable, frozen)."""
    if options is None:
        return ()
    items = dataclasses.asdict(options) if dataclasses.is_dataclass(options) else dict(options)
    return tuple(sorted(items.items()))


@dataclass(frozen=True)
class RecoverConfig:
    """Recovery fine-tuning of a stored prune/slice run's model (the 'recover' kind, papers:
    Wanda §5 and SliceGPT §4 recover with LoRA or dense fine-tuning). ``parent``: the run id
    whose model is trained, so a recovery's id changes with its parent's. method: LORA
    (adapters of ``rank`` on the pruned linears, merged with the parent's zeros re-applied)
    or MASKED (the pruned linears themselves, gradient and weight masked every step).
    ``batch_size`` windows of the calibration config's length per step; the training loss
    and held-out perplexity (on the first ``curve_windows`` evaluation windows) are recorded,
    and a checkpoint written, every ``every`` steps; ``seed`` draws the LoRA initialisation
    and the order of the training windows."""

    parent: str
    steps: int
    method: str = LORA
    rank: int = 8
    alpha: float = 16.0
    lr: float = 2e-4
    batch_size: int = 2
    every: int = 10
    curve_windows: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        _check(bool(str(self.parent).strip()), "recovery needs the id of a stored run (--run)")
        _check(self.steps >= 1, f"steps must be >= 1, got {self.steps}")
        _check(
            self.method in RECOVER_METHODS,
            f"recovery method must be one of {', '.join(RECOVER_METHODS)}, got {self.method!r}",
        )
        _check(self.rank >= 1, f"rank must be >= 1, got {self.rank}")
        _check(self.alpha > 0, f"LoRA alpha must be > 0, got {self.alpha}")
        _check(0 < self.lr < 1, f"learning rate must be in (0, 1), got {self.lr}")
        _check(self.batch_size >= 1, f"batch size must be >= 1, got {self.batch_size}")
        _check(self.every >= 1, f"the curve's interval must be >= 1 step, got {self.every}")
        _check(self.curve_windows >= 1, "the curve needs at least one held-out window")
        _check(self.seed >= 0, f"seed must be >= 0, got {self.seed}")


def recover_dict(rc: RecoverConfig) -> dict[str, Any]:
    return dataclasses.asdict(rc)


def recover_from(value: Any) -> RecoverConfig | None:
    """A RecoverConfig from a config's extra value (dict) or None."""
    if value is None or isinstance(value, RecoverConfig):
        return value
    return RecoverConfig(**dict(value))
