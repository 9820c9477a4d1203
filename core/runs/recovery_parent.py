"""Recovery is a run of its own whose model is a stored run's: the parent it fine-tunes,
checked once (``parent_of_recovery``), and the recovery's resolved config (``plan_recover``)."""

from __future__ import annotations

import dataclasses

from core.errors import ConfigError
from core.names import EVAL, LORA, MASKED, PRUNED_KINDS, RECOVER, SHAPED_KINDS, SLICE
from core.runs.plan import check_seqlen, geometry
from core.settings.config import (
    CalibConfig,
    RecoverConfig,
    RunConfig,
    ZeroShotConfig,
    recover_dict,
    zeroshot_dict,
)
from core.store.run_store import RunRecord, RunStore


def parent_of_recovery(store: RunStore, rc: RecoverConfig) -> tuple[RunRecord, RunConfig]:
    """The stored run a recovery fine-tunes and its config, or one clear error: an unknown
    id (StoreError), a run that is not a finished prune/slice run, a streamed run (recovery
    trains the whole model in memory), masked fine-tuning of a sliced model."""
    rec = store.get(rc.parent)
    if rec.status != "done" or rec.kind not in PRUNED_KINDS:
        raise ConfigError(
            f"run {rec.id} is a {rec.status} {rec.kind} run; recovery fine-tunes the model of "
            f"a finished {' or '.join(PRUNED_KINDS)} run"
            + (" (a dense model has no pruning to recover from)" if rec.kind == EVAL else "")
        )
    src = RunConfig.from_dict(store.load(rec.id).config)  # a damaged folder: refused here
    if src.model.stream is True:
        raise ConfigError(
            f"run {rec.id} was streamed (its model never held in memory); recovery trains the "
            "whole model in memory: prune it again without stream to recover it"
        )
    if rc.method == MASKED and src.kind in SHAPED_KINDS:
        raise ConfigError(
            f"run {rec.id} is {'sliced' if src.kind == SLICE else 'structured'}: its shapes "
            f"are the pruning and it has no zeros to hold; recover it with --method {LORA}"
        )
    return rec, src


def plan_recover(
    store: RunStore,
    rc: RecoverConfig,
    calib: CalibConfig,
    zeroshot: ZeroShotConfig | None = None,
) -> RunConfig:
    """The resolved config of recovering run ``rc.parent`` (a unique prefix is enough):
    the parent's model, evaluation windows and pruning, ``calib`` to train on (it must be
    another draw than the pruning's calibration), the recovery settings with the parent's
    full id. Zero-shot settings enter only when given."""
    rec, src = parent_of_recovery(store, rc)
    if src.calib is not None and calib == src.calib:
        raise ConfigError(
            f"these are run {rec.id}'s own calibration windows (seed {calib.seed}); recovery "
            "trains on another draw: pick another --seed"
        )
    check_seqlen(geometry(src.model), calib.seqlen, "training seqlen")
    rc = dataclasses.replace(rc, parent=rec.id)
    extra: tuple = (("recover", recover_dict(rc)),)
    if zeroshot is not None:
        extra += (("zeroshot", zeroshot_dict(zeroshot)),)
    return RunConfig(RECOVER, src.model, src.eval, calib, src.prune, extra, src.measure)
