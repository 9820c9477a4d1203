"""The run's measurement setting (core.settings.config.MEASURES): "full" keeps every run id from
before the setting existed; "lean" skips the latency and the changed model's effective
dimension, in the run, the estimate and the pages' tables."""

import json
import math

import pytest

from core.analysis.tables import effdim_points
from core.analysis.teaching import budget_points
from core.cli.main import main
from core.errors import ConfigError
from core.names import FULL, LEAN
from core.planning.cost import changed_model_flops, model_shape
from core.requests.request import plan_request
from core.runs.estimate import estimate_seconds
from core.runs.plan import relation_sweep_points
from core.settings.config import CalibConfig, PruneConfig, RunConfig

# Run ids computed on main at 97d5811, before ``measure`` existed: a default config must
# keep them (every stored run stays found).
IDS_BEFORE = {
    "eval": "60dd1d8a3b6b5516",
    "prune": "a41ee24cc70075ed",
    "sweep": "cdbf35d2ad268117",
}


def _configs(measure: str = FULL) -> dict[str, RunConfig]:
    slicegpt = PruneConfig("slicegpt", 0.0)
    grid = (("sparsities", (0.1, 0.2)),)
    return {
        "eval": RunConfig("eval"),
        "prune": RunConfig("prune", calib=CalibConfig(), prune=PruneConfig(), measure=measure),
        "sweep": RunConfig(
            "sweep", calib=CalibConfig(), prune=slicegpt, extra=grid, measure=measure
        ),
    }


def test_default_measure_keeps_the_run_ids_from_before() -> None:
    assert {k: c.run_id for k, c in _configs().items()} == IDS_BEFORE
    assert "measure" not in _configs()["prune"].to_dict()


def test_lean_is_its_own_run_and_round_trips() -> None:
    lean = _configs(LEAN)["prune"]
    assert lean.run_id != IDS_BEFORE["prune"] and lean.to_dict()["measure"] == LEAN
    back = RunConfig.from_dict(json.loads(lean.canonical_json()))
    assert back == lean and back.run_id == lean.run_id and back.lean


def test_unknown_measure_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="measure"):
        RunConfig("prune", measure="some")


TINY = {
    "model": "tiny-llama",
    "device": "cpu",
    "dtype": "float32",
    "calib": "pydoc",
    "eval": "pydoc",
    "nsamples": 4,
    "seqlen": 64,
    "max_windows": 4,
}


def test_measure_reaches_prune_slice_and_sweep_points() -> None:
    prune = plan_request("prune", {**TINY, "measure": "lean"})
    slice_ = plan_request("slice", {**TINY, "measure": "lean"})
    sweep = plan_request("sweep", {**TINY, "sparsities": "0.1,0.2", "measure": "lean"})
    assert prune.lean and slice_.lean and sweep.lean
    assert all(c.lean for _, configs in relation_sweep_points(sweep) for c in configs)
    assert not plan_request("prune", TINY).lean


def test_estimate_counts_less_for_a_lean_run() -> None:
    full, lean = plan_request("prune", TINY), plan_request("prune", {**TINY, "measure": "lean"})
    shape = model_shape(full.model)
    assert changed_model_flops(lean, shape) < changed_model_flops(full, shape)
    assert estimate_seconds(lean) < estimate_seconds(full)


def test_lean_run_has_neither_latency_nor_effdim_and_pages_skip_it(store, tiny_flags) -> None:
    flags = ["--method", "wanda", "--sparsity", "0.5", "--measure", "lean", "--json"]
    assert main(["prune", *tiny_flags, *flags]) == 0
    [rec] = store.list(kind="prune", status="done")
    m = store.load(rec.id).metrics
    assert rec.config["measure"] == LEAN
    assert not {"latency", "latency_ms", "latency_ms_dense"} & set(m)
    assert not [k for k in m if k.startswith("effdim_")]
    assert "effdim" not in store.load(rec.id).tables()
    assert math.isfinite(m["ppl"]) and 0 < m["kept_params"] < 1
    points = budget_points(store.list(status="done"))
    assert len(points) == 1 and points["latency"].isna().all()  # not on the latency axis
    assert rec.id not in set(effdim_points(store)["run_id"])  # the dense run only
