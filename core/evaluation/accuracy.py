"""Zero-shot multiple-choice accuracy, scored the way lm-evaluation-harness scores it.

The six tasks the pruning papers report (Wanda, SparseGPT, SliceGPT: PIQA, HellaSwag,
ARC-Easy, ARC-Challenge, WinoGrande, BoolQ). Each document becomes an ``McItem``: the
(context, continuation) pairs lm-eval 0.4 builds from its task definitions, the choice strings
its length normalisation uses, and the gold index. The log-likelihoods come from lm-eval's own
``HFLM.loglikelihood`` on the in-memory model (its tokenisation of context + continuation,
batching and scoring), so a pruned or sliced model needs no saving first.

Metrics per task, as lm-eval's ``ConfigurableTask.process_results`` computes them:

    acc      = mean_i [argmax_j ll_ij == gold_i]
    acc_norm = mean_i [argmax_j ll_ij / len(choice_ij) == gold_i]   (len in characters, which
               is the UTF-8 byte length for the ASCII text of these sets)

with the sample standard error sd(x) / sqrt(n). WinoGrande and BoolQ report acc only, as in
lm-eval. Documents come from local files (the ``shared/data/tasks`` layout, see
``TASK_FILES``) or from the Hugging Face hub (the datasets lm-eval names); ``limit`` keeps the
first N documents of each task, like lm-eval's ``--limit``.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from core.errors import ConfigError
from core.evaluation.tasks import (
    TASKS,
    McItem,
    TaskData,
    TaskSpec,
    arc_item,
    boolq_item,
    hellaswag_item,
    hellaswag_preprocess,
    load_task,
    piqa_item,
    winogrande_item,
)
from core.names import TASK_NAMES
from core.progress import ProgressFn, report
from core.settings.patterns import parse_tasks

# Requests per HFLM call: large enough for its length sorting to pay, small enough to report.
CHUNK = 256


# ---- scoring -----------------------------------------------------------------------------------
def predictions(lls: Sequence[float], choices: Sequence[str]) -> tuple[int, int]:
    """(argmax ll, argmax ll / len(choice)): lm-eval's acc and acc_norm picks."""
    ll = torch.tensor(lls, dtype=torch.float64)
    lens = torch.tensor([max(len(c), 1) for c in choices], dtype=torch.float64)
    return int(ll.argmax()), int((ll / lens).argmax())


def mean_stderr(values: Sequence[float]) -> tuple[float, float]:
    """Mean and lm-eval's standard error: sample sd (n - 1) / sqrt(n)."""
    x = torch.tensor(values, dtype=torch.float64)
    if x.numel() < 2:
        return float(x.mean()), math.nan
    return float(x.mean()), float(x.std(unbiased=True) / math.sqrt(x.numel()))


def score_items(
    items: Sequence[McItem], lls_per_item: Sequence[Sequence[float]], metrics: Sequence[str]
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Task metrics and one row per item from per-choice log-likelihoods."""
    rows, acc, acc_norm = [], [], []
    for i, (item, lls) in enumerate(zip(items, lls_per_item, strict=True)):
        pred, pred_norm = predictions(lls, item.choices)
        acc.append(float(pred == item.gold))
        acc_norm.append(float(pred_norm == item.gold))
        rows.append(
            {
                "item": i,
                "gold": item.gold,
                "pred": pred,
                "pred_norm": pred_norm,
                "n_choices": len(lls),
                "lls": json.dumps([round(v, 4) for v in lls]),
            }
        )
    out: dict[str, float] = {"n": len(items)}
    out["acc"], out["acc_stderr"] = mean_stderr(acc)
    if "acc_norm" in metrics:
        out["acc_norm"], out["acc_norm_stderr"] = mean_stderr(acc_norm)
    out["chance"] = sum(1.0 / len(it.pairs) for it in items) / len(items)
    return out, rows


class LoglikelihoodScorer:
    """lm-eval's HFLM around an in-memory model: sum of log p(continuation | context) per
    (context, continuation) pair, with lm-eval's tokenisation, batching and float32 softmax."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, batch_size: int = 8) -> None:
        try:
            from lm_eval.models.huggingface import HFLM
        except ImportError as exc:
            raise ConfigError(
                "zero-shot evaluation needs lm-evaluation-harness: pip install lm-eval==0.4.13"
            ) from exc
        # HFLM warns that a pre-initialised model bypasses its loading options: that is the
        # point here (the model may be pruned or sliced in memory), so the warning is muted.
        lm_log = logging.getLogger("lm_eval")
        level = lm_log.level
        lm_log.setLevel(logging.ERROR)
        try:
            self.lm = HFLM(
                pretrained=model,
                tokenizer=tokenizer,
                batch_size=batch_size,
                softmax_dtype=torch.float32,
            )
        finally:
            lm_log.setLevel(level)

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        from lm_eval.api.instance import Instance

        reqs = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]
        # lm-eval warns once per request that it left-truncates inputs longer than the model's
        # context (long BoolQ passages on small-context models): kept at debug level here.
        lm_log = logging.getLogger("lm_eval")
        level = lm_log.level
        lm_log.setLevel(logging.ERROR)
        try:
            with torch.no_grad():
                out = self.lm.loglikelihood(reqs, disable_tqdm=True)
        finally:
            lm_log.setLevel(level)
        return [float(ll) for ll, _greedy in out]


def evaluate_task(
    scorer: Callable[[Sequence[tuple[str, str]]], list[float]],
    name: str,
    data: TaskData,
    progress: ProgressFn | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Score every item of one task; returns (metrics, per-item rows)."""
    spec = TASKS[name]
    pairs = [p for item in data.items for p in item.pairs]
    lls: list[float] = []
    t0 = time.perf_counter()
    for start in range(0, len(pairs), CHUNK):
        report(progress, "zeroshot", start, len(pairs), f"{spec.label}")
        lls.extend(scorer(pairs[start : start + CHUNK]))
    report(progress, "zeroshot", len(pairs), len(pairs), f"{spec.label}")
    per_item, k = [], 0
    for item in data.items:
        per_item.append(lls[k : k + len(item.pairs)])
        k += len(item.pairs)
    metrics, rows = score_items(data.items, per_item, spec.metrics)
    for row in rows:
        row["task"] = name
    metrics.update(
        task=name,
        label=spec.label,
        source=data.source,
        note=data.note,
        seconds=time.perf_counter() - t0,
    )
    return metrics, rows


def evaluate_zeroshot(
    model: torch.nn.Module,
    tokenizer: Any,
    tasks: Sequence[str],
    data_dir: str | None,
    limit: int | None = None,
    batch_size: int = 8,
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """acc / acc_norm of a model on each task. Returns {"tasks": {name: metrics},
    "mean_acc", "limit", "items": per-item rows}; every task's data loads before any scoring,
    so a missing file fails fast."""
    names = parse_tasks(tasks)
    data = {n: load_task(n, data_dir, limit) for n in names}
    was_training = model.training
    model.eval()
    scorer = LoglikelihoodScorer(model, tokenizer, batch_size)
    per_task, items = {}, []
    try:
        for n in names:
            per_task[n], rows = evaluate_task(scorer, n, data[n], progress)
            items.extend(rows)
    finally:
        model.train(was_training)
    return {
        "tasks": per_task,
        "mean_acc": sum(m["acc"] for m in per_task.values()) / len(names),
        "limit": limit,
        "items": items,
    }


def summary_row(zs: dict[str, Any]) -> dict[str, float]:
    """Flat columns for tables: acc_<task>, acc_norm_<task> (where reported), mean_acc."""
    out: dict[str, float] = {}
    for name, m in zs["tasks"].items():
        out[f"acc_{name}"] = m["acc"]
        if "acc_norm" in m:
            out[f"acc_norm_{name}"] = m["acc_norm"]
    out["mean_acc"] = zs["mean_acc"]
    return out


__all__ = [
    "CHUNK",
    "TASKS",
    "TASK_NAMES",
    "LoglikelihoodScorer",
    "McItem",
    "TaskData",
    "TaskSpec",
    "arc_item",
    "boolq_item",
    "evaluate_task",
    "evaluate_zeroshot",
    "hellaswag_item",
    "hellaswag_preprocess",
    "load_task",
    "mean_stderr",
    "parse_tasks",
    "piqa_item",
    "predictions",
    "score_items",
    "summary_row",
    "winogrande_item",
]
