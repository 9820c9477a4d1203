"""The 'sensitivity' run kind: how much a stored prune run's keep masks depend on its
calibration data.

The run's method is run again with other calibration draws (``seeds``) of its corpus, or of
another corpus; each draw is an ordinary prune run (stored, and reused when stored: the same
run ``python -m core prune --seed N [--calib CORPUS]`` makes, zero-shot tasks left out). Then,
per decoder layer and linear, the keep set of each draw is compared with the run's own
(``core.analysis.agreement``: Jaccard and the fraction of the run's kept weights kept again,
beside the floor of two random masks at those keep fractions), and the perplexity of the run
and its draws gives the spread the calibration draw alone causes. ``--force`` recomputes the
draws, so a draw with the run's own seed checks that pruning is deterministic (agreement 1).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from core.analysis.agreement import AGREEMENT_KEYS, mask_agreement, per_layer, pooled, ppl_spread
from core.errors import ConfigError, StoreError
from core.machine.environment import environment_record
from core.names import A_REBUILD, PRUNE, SENSITIVITY, T_AGREEMENT, T_DRAWS, T_LAYERS
from core.progress import ProgressFn, report
from core.runs.common import RunOptions
from core.runs.plan import plan_run
from core.runs.planned import Plan
from core.runs.prune import execute_prune
from core.runs.store_access import result, reusable, tee, writing
from core.settings.config import DataSpec, RunConfig
from core.store.run_store import Run, RunStore

KEEP_SUFFIX = ".keep"  # A_REBUILD keys: layer{i}.{role}.keep (core.runs.restore)


def plan_sensitivity(
    store: RunStore, run_id: str, seeds: tuple[int, ...], calib: DataSpec | None = None
) -> RunConfig:
    """The resolved config of the sensitivity of run ``run_id`` (a unique prefix is enough):
    its method re-run with calibration ``seeds`` on its own corpus, or on ``calib``. A run
    that is not a finished, in-memory prune run is refused: only those store keep masks."""
    rec = store.get(run_id)
    if rec.status != "done" or rec.kind != PRUNE:
        raise ConfigError(
            f"run {rec.id} is a {rec.status} {rec.kind} run; calibration sensitivity compares "
            f"the keep masks of a finished {PRUNE} run (SliceGPT keeps no mask)"
        )
    src = RunConfig.from_dict(rec.config)
    if src.model.stream is True:
        raise ConfigError(
            f"run {rec.id} was streamed and stored no keep masks; prune it without stream"
        )
    if not seeds or len(set(seeds)) != len(seeds) or any(s < 0 for s in seeds):
        raise ConfigError(f"seeds must be distinct non-negative integers, got {list(seeds)}")
    extra: tuple = (("seeds", tuple(int(s) for s in seeds)), ("source_run", rec.id))
    if calib is not None:
        extra = (("calib_data", dataclasses.asdict(calib)), *extra)
    return RunConfig(SENSITIVITY, src.model, src.eval, src.calib, src.prune, extra, src.measure)


def draw_configs(cfg: RunConfig) -> list[RunConfig]:
    """The prune run of every calibration draw of a sensitivity config."""
    data = cfg.extra_value("calib_data")
    calib = cfg.calib if data is None else dataclasses.replace(cfg.calib, data=DataSpec(**data))
    seeded = [dataclasses.replace(calib, seed=int(seed)) for seed in cfg.extra_value("seeds")]
    return [RunConfig(PRUNE, cfg.model, cfg.eval, c, cfg.prune, (), cfg.measure) for c in seeded]


def keep_masks(run: Run) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """A prune run's packed keep masks by 'layer{i}.{role}', and each linear's weight count."""
    keys = [k for k in run.array_keys(A_REBUILD) if k.endswith(KEEP_SUFFIX)]
    if not keys:
        raise StoreError(
            f"run {run.id} stored no keep masks (made before they were recorded); "
            "re-run it with --force"
        )
    arrays = run.arrays(A_REBUILD, keys)
    masks = {k.removesuffix(KEEP_SUFFIX): arrays[k].numpy() for k in keys}
    sizes = {
        f"layer{int(r.layer)}.{r.role}": int(np.prod(list(r.shape)))
        for r in run.table(T_LAYERS).itertuples()
    }
    return masks, sizes


def _rows(
    draw: int, seed: int, src: dict[str, np.ndarray], sizes: dict[str, int], masks: dict
) -> list[dict[str, Any]]:
    """One agreement row per linear of the source run (``src``: its packed keep masks)."""
    rows = []
    for name, bits in src.items():
        if name not in masks:
            raise StoreError(f"a calibration draw stored no keep mask for {name}")
        layer, role = name.removeprefix("layer").split(".")
        row = mask_agreement(bits, masks[name], sizes[name])
        rows.append({"draw": draw, "seed": seed, "layer": int(layer), "role": role, **row})
    return rows


def execute_sensitivity(
    plan: Plan, store: RunStore, on_progress: ProgressFn | None, opts: RunOptions
) -> dict[str, Any]:
    """Every draw's prune run (each a run of its own, planned on the sensitivity run's
    geometry), then the agreement of its keep sets with the source run's and the perplexity
    spread (module docstring)."""
    cfg = plan.cfg
    cached = reusable(store, cfg, opts.force, None)
    if cached is not None:
        return cached
    source = store.load(cfg.extra_value("source_run"))
    src, sizes = keep_masks(source)  # read before any draw: --force may rewrite the source
    draws = draw_configs(cfg)
    with writing(store, cfg, opts.force, "the sensitivity run") as writer:
        progress = tee(writer.progress, on_progress)
        writer.write_env(environment_record(cfg.model.device))
        rows: list[dict[str, Any]] = []
        draw_rows: list[dict[str, Any]] = []
        for i, draw in enumerate(draws):
            seed, data = draw.calib.seed, draw.calib.data.dataset
            report(progress, SENSITIVITY, i, len(draws), f"seed {seed} of {data}")
            draw_plan = plan_run(draw, plan.geo)
            out = execute_prune(draw_plan, store, progress, RunOptions(force=opts.force))
            found = _rows(i, seed, src, sizes, keep_masks(store.load(out["run_id"]))[0])
            rows += found
            overall = pooled(found)
            draw_rows.append(
                {"draw": i, "run_id": out["run_id"], "seed": seed, "dataset": data,
                 "ppl": out["metrics"]["ppl"], **overall}
            )  # fmt: skip
        report(progress, SENSITIVITY, len(draws), len(draws))
        writer.write_table(T_AGREEMENT, rows)
        writer.write_table(T_DRAWS, draw_rows)
        metrics = _metrics(cfg, source, rows, draw_rows)
        writer.commit(metrics)
    return result(cfg, metrics)


def _metrics(cfg: RunConfig, source: Run, rows: list[dict], draws: list[dict]) -> dict[str, Any]:
    """Agreement over every linear (mean over draws, the lowest draw) and per layer, over the
    draws that are not the run itself (a draw with its own seed and corpus is the run, reused,
    or re-run with --force: a determinism check listed with the draws, kept out of the
    means unless it is the only draw); the perplexity spread over the run and its draws."""
    own = [d["draw"] for d in draws if d["run_id"] == source.id]
    kept = [d for d in draws if d["draw"] not in own] or draws
    used = {d["draw"] for d in kept}
    ppl = {source.id: source.metrics["ppl"], **{d["run_id"]: d["ppl"] for d in draws}}
    data = cfg.extra_value("calib_data")
    return {
        "source_run": source.id,
        "source_ppl": source.metrics["ppl"],
        "dense_ppl": source.metrics.get("dense_ppl"),
        "calib_dataset": (data or dataclasses.asdict(cfg.calib.data))["dataset"],
        "source_dataset": cfg.calib.data.dataset,
        "seeds": list(cfg.extra_value("seeds")),
        **{k: float(np.mean([d[k] for d in kept])) for k in AGREEMENT_KEYS},
        "jaccard_min": min(d["jaccard"] for d in kept),
        "own_draws": own,
        "layers": per_layer([r for r in rows if r["draw"] in used]),
        "draws": draws,
        "ppl_spread": {**ppl_spread(list(ppl.values())), "runs": list(ppl)},
        "model": source.metrics.get("model", {}),
    }
