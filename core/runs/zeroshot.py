"""The 'zeroshot' run kind: zero-shot accuracy (lm-eval scoring, core.evaluation.accuracy) of a
dense model or of a stored run's model, and the accuracy prune/slice runs record beside perplexity.
"""

from __future__ import annotations

from typing import Any

from core.evaluation.accuracy import evaluate_zeroshot, summary_row
from core.machine.environment import environment_record
from core.models.load import LoadedModel
from core.names import T_ZEROSHOT, T_ZEROSHOT_ITEMS
from core.progress import ProgressFn, report
from core.runs.plan import plan_zeroshot
from core.runs.rebuild import model_of_run
from core.runs.resources import get_model
from core.runs.store_access import result, stored_or_wait, tee
from core.settings.config import ModelSpec, RunConfig, ZeroShotConfig, zeroshot_from
from core.store.run_store import RunStore, RunWriter


def _store_accuracy(res: dict[str, Any], writer: RunWriter) -> dict[str, Any]:
    """Store a zero-shot result's tables; return the metrics entries it contributes."""
    writer.write_table(T_ZEROSHOT, list(res["tasks"].values()))
    writer.write_table(T_ZEROSHOT_ITEMS, res["items"])
    kept = {k: v for k, v in res.items() if k != "items"}
    return {"zeroshot": kept, **summary_row(res)}


def _evaluate(lm: LoadedModel, zs: ZeroShotConfig, progress: ProgressFn | None) -> dict:
    return evaluate_zeroshot(
        lm.model, lm.tokenizer, zs.tasks, zs.data_dir, zs.limit, zs.batch_size, progress
    )


def execute_zeroshot(
    cfg: RunConfig,
    src: RunConfig | None,
    store: RunStore,
    on_progress: ProgressFn | None = None,
    force: bool = False,
    lm: LoadedModel | None = None,
) -> dict[str, Any]:
    """Run a planned 'zeroshot' config (``src``: its source run's config, or None)."""
    zs = zeroshot_from(cfg.extra_value("zeroshot"))
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
        res = _evaluate(lm, zs, progress)
        metrics = {
            **_store_accuracy(res, writer),
            "source_run": cfg.extra_value("source_run"),
            "model_from": how,
            "model_name": cfg.model.name,
            "model": lm.adapter.describe(),
        }
        writer.commit(metrics)
    return result(cfg, metrics)


def run_zeroshot(
    model: ModelSpec | None,
    zs: ZeroShotConfig,
    store: RunStore,
    source_run: str | None = None,
    on_progress: ProgressFn | None = None,
    force: bool = False,
    lm: LoadedModel | None = None,
) -> dict[str, Any]:
    """Zero-shot accuracy of a dense model, or of a stored run's pruned/sliced model (its saved
    folder when it has one, else rebuilt by re-running its pruning). Stored as a 'zeroshot' run."""
    cfg, src = plan_zeroshot(model, zs, store, source_run)
    return execute_zeroshot(cfg, src, store, on_progress, force, lm)


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
    cfg: RunConfig,
    lm: LoadedModel,
    dense: dict[str, Any] | None,
    writer: RunWriter,
    progress: ProgressFn | None,
) -> dict[str, Any]:
    """Zero-shot accuracy of the pruned model in memory, beside the dense one's."""
    zs = zeroshot_from(cfg.extra_value("zeroshot"))
    if zs is None or dense is None:
        return {}
    return {
        **_store_accuracy(_evaluate(lm, zs, progress), writer),
        "dense_zeroshot_run": dense["run_id"],
        "dense_mean_acc": dense["metrics"]["mean_acc"],
    }
