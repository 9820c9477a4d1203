"""Compare and recovery on the structured methods' smaller models, as on sliced ones: the
model is rebuilt (or loaded from its folder), a dropped layer reads as unknown beside the
dense layers, and LoRA recovery fine-tunes and saves a model that reloads."""

from __future__ import annotations

import dataclasses
import math

import pytest

from core.errors import ConfigError
from core.evaluation.generate import Decoding
from core.evaluation.perplexity import evaluate_perplexity
from core.methods.structure import load_structured
from core.names import MASKED, STRUCTURED
from core.requests.request import plan_request, run_options
from core.runs import execute, get_eval_windows, run_prune
from core.runs.comparison import compare_run, how_built
from core.runs.resources import get_model
from core.settings.config import CalibConfig, DataSpec, EvalConfig, ModelSpec, PruneConfig

MODEL = ModelSpec("tiny-llama", "cpu", "float32")
EVAL = EvalConfig(DataSpec("pydoc", "test"), seqlen=64, max_windows=3)
CALIB = CalibConfig(DataSpec("pydoc", "train"), nsamples=4, seqlen=64, seed=0)
TEXT = "The cat sat on the mat because it was warm."


def test_shortgpt_compares_layer_by_layer_with_the_dropped_one_unknown(store) -> None:
    res = run_prune(MODEL, PruneConfig("shortgpt", budget=0.25), CALIB, EVAL, store)
    run = store.load(res["run_id"])
    assert how_built(run) == "rebuilt"
    cmp = compare_run(store, res["run_id"], TEXT, Decoding(4))
    dropped = [r["layer"] for r in run.table("structure").to_dict("records") if not r["kept"]]
    assert len(cmp.layers.kl) == 4 and len(dropped) == 1
    for i, (kl, err) in enumerate(zip(cmp.layers.kl, cmp.layers.rel_error, strict=True)):
        assert math.isnan(kl) == (i in dropped) and math.isnan(err) == (i in dropped)
    # the layers before the dropped one are the dense ones: identical outputs
    assert all(cmp.layers.rel_error[i] < 1e-6 for i in range(dropped[0]))
    assert cmp.mean_nll_diff != 0.0 and len(cmp.pruned.nll) == len(cmp.dense.nll)


def _recover(store, run_id, save=None, **values):
    given = {"run": run_id, "steps": 4, "every": 2, "calib": "pydoc", "nsamples": 8, **values}
    cfg = plan_request("recover", {"calib_seqlen": 64, **given}, store)
    opts = dataclasses.replace(run_options("recover", given), save_dir=save)
    return execute(cfg, store, None, opts)


def test_flap_run_recovers_with_lora_and_reloads(store, tmp_path) -> None:
    parent = run_prune(MODEL, PruneConfig("flap", budget=0.3), CALIB, EVAL, store)
    cmp = compare_run(store, parent["run_id"], TEXT, Decoding(4))
    assert all(math.isfinite(k) and k >= 0 for k in cmp.layers.kl)
    res = _recover(store, parent["run_id"], save=str(tmp_path / "rec"), lr=5e-3)
    m = res["metrics"]
    assert m["parent_kind"] == STRUCTURED and m["kept_params"] == m["parent_kept_params"]
    assert m["heldout_ppl_end"] != m["heldout_ppl_start"]
    model = load_structured(tmp_path / "rec")
    windows, _ = get_eval_windows(get_model(MODEL, fresh=False), EVAL)
    assert evaluate_perplexity(model, windows, 4, "cpu").ppl == pytest.approx(m["ppl"], rel=1e-6)
    with pytest.raises(ConfigError, match="no zeros to hold"):
        _recover(store, parent["run_id"], method=MASKED)
