"""Duration estimates of planned runs (core.runs.estimate): more tokens take longer, costlier
methods take longer, a GPU is faster than a CPU, stored runs are free, and stored timings
calibrate the device's speed by the rule of core.planning.speed (hand-made records, no timing)."""

from __future__ import annotations

import dataclasses
import json
import sqlite3

import pytest

from core.planning.cost import (
    changed_model_flops,
    dense_flops,
    loop_flops,
    model_shape,
    prune_phase_flops,
)
from core.planning.speed import (
    Sample,
    Speed,
    default_speed,
    fit_speed,
    load_seconds,
    measured_speed,
    run_sample,
)
from core.requests import request as requests
from core.runs import RunOptions, execute
from core.runs.estimate import estimate_many, estimate_seconds
from core.sweeps.grid import GridSpec, resolve_grid

BASE = {"model": "smollm2-135m", "device": "cpu", "calib": "pydoc", "eval": "pydoc"}
QUICK = {"nsamples": 8, "calib_seqlen": 128, "seqlen": 128, "max_windows": 8}


def plan(command: str = "prune", **values):
    given = {**BASE, **QUICK, **values}
    if command == "eval":  # a dense evaluation has no calibration
        given = {k: v for k, v in given.items() if k not in ("calib", "nsamples", "calib_seqlen")}
        given["dataset"] = given.pop("eval")
    return requests.plan_request(command, given)


def on_gpu(cfg):
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, device="cuda"))


@pytest.mark.parametrize(
    "field, small, large",
    [
        ("nsamples", 8, 64),
        ("calib_seqlen", 64, 512),
        ("max_windows", 4, 64),
        ("seqlen", 64, 512),
    ],
)
@pytest.mark.parametrize("method", ["wanda", "sparsegpt"])
def test_more_tokens_take_longer(field, small, large, method) -> None:
    fast = estimate_seconds(plan(method=method, **{field: small}))
    slow = estimate_seconds(plan(method=method, **{field: large}))
    assert slow > fast > 0


def test_costlier_methods_take_longer() -> None:
    seconds = {m: estimate_seconds(plan(method=m)) for m in ("magnitude", "wanda", "sparsegpt")}
    gd = estimate_seconds(plan(method="attention-gd", targets="qk"))
    assert seconds["sparsegpt"] > seconds["wanda"] >= seconds["magnitude"]
    # on the same weights (W_Q, W_K), the descent costs more than SparseGPT's sweep
    assert gd > estimate_seconds(plan(method="sparsegpt", targets="qk"))
    # attention-GD's checks are part of its cost: switching them off is faster
    no_checks = estimate_seconds(plan(method="attention-gd", targets="qk", option=["checks=none"]))
    assert no_checks < gd


def test_zero_shot_tasks_and_owl_add_time() -> None:
    plain = estimate_seconds(plan())
    assert estimate_seconds(plan(tasks="piqa", limit=50)) > plain
    assert estimate_seconds(plan(tasks="piqa", limit=500)) > estimate_seconds(
        plan(tasks="piqa", limit=50)
    )
    assert estimate_seconds(plan(allocation="owl")) > plain


@pytest.mark.parametrize("command", ["eval", "prune", "slice", "sweep"])
def test_gpu_is_faster_than_cpu(command) -> None:
    cfg = plan(command) if command != "sweep" else plan("sweep", sparsities="0.1,0.3")
    assert estimate_seconds(on_gpu(cfg)) < estimate_seconds(cfg)


def test_every_kind_has_an_estimate(store) -> None:
    dense = estimate_seconds(plan("eval"))
    sliced = estimate_seconds(plan("slice"))
    sweep = estimate_seconds(plan("sweep", sparsities="0.1,0.2,0.3"))
    # a three-point sweep: three slice runs sharing one dense baseline
    assert sliced < sweep < 3 * sliced
    assert dense < sliced
    zs = requests.plan_request(
        "zeroshot", {"model": "smollm2-135m", "device": "cpu", "tasks": "piqa", "limit": 20}, store
    )
    assert (
        0
        < estimate_seconds(zs)
        < estimate_seconds(
            dataclasses.replace(zs, extra=(("source_run", None), ("zeroshot", {"tasks": ["piqa"]})))
        )
    )


def test_grid_counts_the_baseline_once() -> None:
    spec = GridSpec(plan().model, ("wanda", "sparsegpt"), (0.3, 0.5), plan().calib, plan().eval)
    configs = resolve_grid(spec)
    total = estimate_many(configs)
    singles = sum(estimate_seconds(c) for c in configs if c.kind == "prune")
    assert total < singles  # the singles each count the dense baseline
    assert total > estimate_seconds(configs[1])


def test_stored_runs_are_free_and_calibrate_the_speed(store) -> None:
    values = {
        "model": "tiny-llama",
        "device": "cpu",
        "calib": "pydoc",
        "eval": "pydoc",
        "nsamples": 2,
        "seqlen": 32,
        "max_windows": 2,
    }
    cfg = requests.plan_request("prune", values)
    before = estimate_seconds(cfg, store)
    assert measured_speed(store, "cpu") == default_speed("cpu")
    execute(cfg, store, None, RunOptions())
    assert estimate_seconds(cfg, store) == 0.0
    speed = measured_speed(store, "cpu")
    assert speed.n_runs >= 1 and speed.flops_per_s > 0 and "wanda" in speed.overhead
    assert "measured" in speed.source
    # the dense baseline is stored too: a new sparsity costs less than the first run did
    other = requests.plan_request("prune", {**values, "sparsity": 0.3})
    assert estimate_seconds(other, store, default_speed("cpu")) < before
    # prune_seconds divided by the predicted prune-phase seconds is the method's factor
    shape = model_shape(cfg.model)
    assert prune_phase_flops(cfg, shape) > 0


def test_speed_scales_the_estimate() -> None:
    cfg = plan()
    slow, fast = Speed("cpu", 1e9), Speed("cpu", 1e11)
    assert estimate_seconds(cfg, speed=fast) < estimate_seconds(cfg, speed=slow)


# ---- the calibration rule (core.planning.speed) on hand-made stored-run records, no timing -------
def _wall(cfg, rate: float, prune_s: float, dense_inline: bool = False) -> float:
    """The wall time a run of ``cfg`` takes at ``rate`` by the cost model."""
    shape = model_shape(cfg.model)
    work = changed_model_flops(cfg, shape) + (dense_flops(cfg, shape) if dense_inline else 0.0)
    return load_seconds(shape) + prune_s + work / rate


def _phase_s(cfg, rate: float) -> float:
    return prune_phase_flops(cfg, model_shape(cfg.model)) / rate


def _record(store, cfg, wall: float, metrics: dict, created: float = 1000.0) -> None:
    """One finished run in the store's index, as RunWriter.commit leaves it."""
    method = cfg.prune.method if cfg.kind in ("prune", "slice") else None
    row = (cfg.run_id, cfg.kind, "done", created, created + wall, cfg.model.name, method)
    with sqlite3.connect(store.root / "index.sqlite") as db:
        db.execute(
            "INSERT INTO runs (id, kind, status, created, finished, model, method, summary,"
            " config) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*row, json.dumps(metrics), json.dumps(cfg.to_dict())),
        )


def test_a_runs_rate_is_its_work_over_its_time_less_load_and_phase() -> None:
    cfg, rate = plan(method="wanda", measure="full"), 5e10
    prune_s = 1.2 * _phase_s(cfg, rate)
    got = run_sample(cfg, _wall(cfg, rate, prune_s), {"prune_seconds": prune_s}, False)
    assert (got.model, got.method) == ("smollm2-135m", "wanda")
    assert got.rate == pytest.approx(rate) and got.prune_seconds == prune_s
    assert fit_speed("cpu", [got]).factor("wanda") == pytest.approx(1.2)
    # a baseline computed inside the run's time is work of that time
    inline = run_sample(cfg, _wall(cfg, rate, prune_s, True), {"prune_seconds": prune_s}, True)
    assert inline.rate == pytest.approx(rate)
    # negative control: forwards shorter than the (predicted) load they are measured net of
    # give no rate, only the phase; its ratio is then taken at the other runs' median rate
    lean = plan(method="wanda", measure="lean")
    short = run_sample(lean, _wall(lean, 1e12, prune_s), {"prune_seconds": prune_s}, False)
    assert short.rate is None and short.prune_seconds == prune_s
    speed = fit_speed("cpu", [short, Sample("smollm2-135m", rate=rate)])
    assert speed.flops_per_s == rate and speed.n_runs == 1
    assert speed.factor("wanda") == pytest.approx(prune_s / _phase_s(lean, rate))


def test_method_factors_are_medians_bounded_to_half_and_double() -> None:
    def run(method: str, ratio: float) -> Sample:  # a run whose phase took ratio × predicted
        return Sample("m", method, 1e10, ratio * 1e10, 1e20)

    runs = [run("wanda", r) for r in (1.1, 1.3, 9.4)]
    runs += [run("sparsegpt", 0.1), run("slicegpt", 1.4), Sample("m", rate=3e10)]
    speed = fit_speed("cpu", runs)
    assert speed.flops_per_s == pytest.approx(1e10) and speed.n_runs == 6
    assert speed.factor("wanda") == pytest.approx(1.3)  # one outlier does not move a median
    assert speed.factor("sparsegpt") == 0.5  # bounded
    assert fit_speed("cpu", [run("wanda", 9.4)]).factor("wanda") == 2.0  # bounded
    assert speed.factor("slicegpt") == pytest.approx(1.4)  # inside the bounds: as measured
    assert speed.factor("magnitude") == 1.0  # no run: the default
    # no run with a rate: the device's default speed
    assert fit_speed("cuda", [Sample("m", "wanda", None, 1.0, 1e12)]) == default_speed("cuda")


def test_fixed_loop_work_does_not_shrink_with_calibration_tokens() -> None:
    few, many = plan(method="sparsegpt", nsamples=8), plan(method="sparsegpt", nsamples=128)
    shape = model_shape(few.model)
    assert loop_flops(few, shape) == loop_flops(many, shape) > 0
    assert prune_phase_flops(many, shape) > prune_phase_flops(few, shape)
    # SparseGPT's column loop on top of choosing the weights; SliceGPT edits no weight by mask
    assert loop_flops(few, shape) > loop_flops(plan(method="wanda"), shape) > 0
    assert loop_flops(plan(method="slicegpt"), shape) == 0
    # attention-GD edits W_Q/W_K by its descent (counted there), its others by their method
    gd = plan(method="attention-gd", targets="qk")
    assert loop_flops(gd, shape) == 0
    assert loop_flops(plan(method="attention-gd", targets="qk", option=["others=wanda"]), shape) > 0


def test_a_small_runs_ratio_does_not_inflate_a_big_run() -> None:
    """A small Wanda run that took what the model predicts (its loop work included) gives a
    factor 1; the old pure-FLOP ratio of the same run was > 1.5 and would scale every run."""
    small = plan(method="wanda", nsamples=8, measure="full")
    big, rate = plan(method="wanda", nsamples=128), 1e11
    shape = model_shape(small.model)
    prune_s = _phase_s(small, rate)
    sample = run_sample(small, _wall(small, rate, prune_s), {"prune_seconds": prune_s}, False)
    speed = fit_speed("cpu", [sample])
    assert speed.factor("wanda") == pytest.approx(1.0)
    flops_only = prune_s / ((prune_phase_flops(small, shape) - loop_flops(small, shape)) / rate)
    assert flops_only > 1.5
    plain = Speed("cpu", rate)
    assert estimate_seconds(big, speed=speed) == pytest.approx(estimate_seconds(big, speed=plain))


def test_measured_speed_prefers_runs_of_the_planned_model(store) -> None:
    tiny = requests.plan_request(
        "prune", {**BASE, "model": "tiny-llama", "nsamples": 2, "seqlen": 32, "max_windows": 2}
    )
    small = plan(method="wanda", measure="full")
    _record(store, tiny, _wall(tiny, 1e8, 9.0), {"prune_seconds": 9.0})
    _record(store, small, _wall(small, 1e11, 4.0), {"prune_seconds": 4.0}, created=2000.0)
    own = measured_speed(store, "cpu", "smollm2-135m")
    assert own.flops_per_s == pytest.approx(1e11) and own.n_runs == 1
    assert measured_speed(store, "cpu", "tiny-llama").flops_per_s == pytest.approx(1e8)
    # a model without stored runs: every run on the device
    anyone = measured_speed(store, "cpu", "gemma3-270m")
    assert anyone.n_runs == 2 and 1e8 < anyone.flops_per_s < 1e11
    # a stored run is free; another sparsity is estimated at the measured speed
    assert estimate_seconds(small, store) == 0.0
    other = plan(method="wanda", sparsity=0.3, measure="full")
    assert estimate_seconds(other, store) == pytest.approx(estimate_seconds(other, speed=own))
