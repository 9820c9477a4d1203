"""Duration estimates of planned runs (core.estimate): more tokens take longer, costlier
methods take longer, a GPU is faster than a CPU, stored runs are free, and stored timings
calibrate the device's speed."""

from __future__ import annotations

import dataclasses

import pytest

from core import requests
from core.cost import model_shape, prune_phase_flops
from core.estimate import Speed, default_speed, estimate_many, estimate_seconds, measured_speed
from core.runs import RunOptions, execute
from core.sweep_grid import SweepSpec, resolve_grid

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
    assert gd > seconds["sparsegpt"]
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
    spec = SweepSpec(plan().model, ("wanda", "sparsegpt"), (0.3, 0.5), plan().calib, plan().eval)
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
