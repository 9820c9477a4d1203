"""ShortGPT, FLAP and structured Wanda as runs: a parameter budget met and stored, the saved
folder reloading to the stored perplexity (through transformers where the config states
the smaller model), the families each refuses and why, and the refusals at planning."""

from __future__ import annotations

import json

import pytest
from transformers import AutoModelForCausalLM

from core.cli.main import main
from core.errors import ConfigError
from core.evaluation.perplexity import evaluate_perplexity
from core.methods import make_method
from core.models.geometry import Geometry
from core.models.load import load_model, tiny_config
from core.names import PARAMS_REMOVED, STRUCTURED, T_STRUCTURE
from core.requests.request import plan_request
from core.runs import get_eval_windows, run_prune
from core.runs.common import RunOptions
from core.runs.rebuild import load_saved
from core.settings.config import (
    CalibConfig,
    DataSpec,
    EvalConfig,
    ModelSpec,
    PruneConfig,
    RunConfig,
)

EVAL = EvalConfig(DataSpec("pydoc", "test"), seqlen=64, max_windows=4)
CALIB = CalibConfig(DataSpec("pydoc", "train"), nsamples=4, seqlen=64)
METHODS = ("shortgpt", "flap", "wanda-sp")
LEAN = "lean"


def _model(name: str) -> ModelSpec:
    return ModelSpec(name, "cpu", "float32")


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
@pytest.mark.parametrize("method", METHODS)
def test_budget_is_met_and_the_saved_folder_gives_the_stored_perplexity(
    store, tmp_path, name, method
) -> None:
    folder = tmp_path / "saved"
    res = run_prune(
        _model(name),
        PruneConfig(method, budget=0.25),
        CALIB,
        EVAL,
        store,
        opts=RunOptions(save_dir=str(folder)),
    )
    m, cfg = res["metrics"], RunConfig.from_dict(res["config"])
    assert cfg.kind == STRUCTURED and cfg.prune.budget == 0.25
    # shortgpt: 1 of 4 layers is the nearest whole number (exactly 0.25 here)
    assert m[PARAMS_REMOVED] == pytest.approx(0.25, abs=0.01)
    if method == "shortgpt":
        assert m[PARAMS_REMOVED] == 0.25 and m["removed"].startswith("1 of 4 layers")
    assert m["ppl"] != m["dense_ppl"]
    assert len(store.load(res["run_id"]).table(T_STRUCTURE)) == 4
    lm = load_saved(cfg, str(folder))
    windows, _ = get_eval_windows(load_model(name), EVAL)
    assert evaluate_perplexity(lm.model, windows, 4, "cpu").ppl == pytest.approx(m["ppl"], rel=1e-6)
    n_layers = sum(p.numel() for p in lm.adapter.layers.parameters())
    assert n_layers == m["n_layer_params"]
    if method != "flap":  # fewer layers, or one head count and MLP width: transformers alone
        plain = AutoModelForCausalLM.from_pretrained(folder).eval()
        ppl = evaluate_perplexity(plain, windows, 4, "cpu").ppl
        assert ppl == pytest.approx(m["ppl"], rel=1e-6)
    else:  # per-layer widths and added biases: PruneScope's loader
        with pytest.raises((RuntimeError, ValueError, OSError)):
            AutoModelForCausalLM.from_pretrained(folder)


def test_cli_lists_the_methods_with_their_options_and_families(capsys) -> None:
    assert main(["methods", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    listed = {m["method"]: m for m in out["methods"]}
    assert listed["shortgpt"]["options"] == {"batch_size": 8}
    assert listed["flap"]["options"] == {"metric": "WIFV", "bias": True, "batch_size": 8}
    assert listed["wanda-sp"]["options"] == {"batch_size": 8}
    assert all(listed[m]["structured"] for m in METHODS)
    phi3 = next(f for f in out["families"] if f["family"] == "phi3")["methods"]
    assert phi3["shortgpt"]["supported"]
    for method in ("flap", "wanda-sp"):
        assert "fused qkv_proj" in phi3[method]["refusal"]
    for family in out["families"]:
        if family["family"] != "phi3":
            assert all(family["methods"][m]["supported"] for m in METHODS), family["family"]


def test_phi3_is_refused_before_any_weight_loads(store) -> None:
    geo = Geometry.from_config(tiny_config("tiny-phi3"))
    assert make_method("flap").refusal(geo) is not None
    with pytest.raises(ConfigError, match="fused qkv_proj"):
        run_prune(_model("tiny-phi3"), PruneConfig("wanda-sp", budget=0.25), CALIB, EVAL, store)
    assert store.list() == []


def test_cli_budget_and_its_refusals(store_root, tiny_flags, capsys) -> None:
    args = ["prune", "--method", "shortgpt", "--budget", "params=0.5", *tiny_flags, "--json"]
    assert main([*args, "--measure", LEAN]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["prune"]["sparsity"] == 0.5 and out["metrics"][PARAMS_REMOVED] == 0.5
    base = {"model": "tiny-llama", "device": "cpu", "calib": "pydoc", "eval": "pydoc"}
    refusals = [
        ({"method": "wanda", "budget": "params=0.3"}, "not a parameter budget"),
        ({"method": "flap", "budget": "latency=0.3"}, "--budget takes params=F"),
        ({"method": "shortgpt", "sparsity": 0.1}, "rounds to 0"),
        ({"method": "flap", "targets": "attention"}, "use targets 'all'"),
        ({"method": "flap", "allocation": "owl"}, "allocation 'uniform'"),
        ({"method": "flap", "budget": "params=0.95"}, "keep every layer"),
        ({"method": "flap", "sparsity": 0.95}, "keep every layer"),
    ]
    for given, message in refusals:
        with pytest.raises(ConfigError, match=message):
            plan_request("prune", {**base, **given})


def test_slicegpt_takes_the_budget_as_its_width(store) -> None:
    cfg = plan_request(
        "slice", {"model": "tiny-llama", "device": "cpu", "budget": "params=0.25", "calib": "pydoc"}
    )
    # d = 64 in steps of 8: d′ = 40 removes 0.263 of the decoder (its shortcuts included),
    # the nearest of the widths to 0.25
    assert cfg.prune.budget == 0.25 and cfg.prune.sparsity == pytest.approx(0.375)


def test_a_grid_of_budgets_matches_every_method_on_parameters() -> None:
    """``sweep --grid --budgets``: one point per method, budget and seed, each config asking
    the budget and holding the method's knob; a method without a budget is refused by name."""
    from core.requests.request import grid_spec
    from core.sweeps.grid import resolve_grid

    base = {"model": "tiny-llama", "device": "cpu", "calib": "pydoc", "eval": "pydoc"}
    spec = grid_spec({**base, "method": "shortgpt,slicegpt", "budgets": "0.25,0.5", "seeds": "0,1"})
    points = [c for c in resolve_grid(spec) if c.prune is not None]
    assert len(points) == 2 * 2 * 2
    knobs = {(c.prune.method, c.prune.budget): c.prune.sparsity for c in points}
    assert knobs[("shortgpt", 0.25)] == 0.25 and knobs[("shortgpt", 0.5)] == 0.5
    assert knobs[("slicegpt", 0.25)] == pytest.approx(0.375)  # d′ = 40 of 64
    with pytest.raises(ConfigError, match=r"method=wanda budget=0\.25"):
        resolve_grid(grid_spec({**base, "method": "wanda", "budgets": "0.25"}))
