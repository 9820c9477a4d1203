"""SliceGPT runs, sweeps and the effective-dimension report through the pipeline and CLI."""

import dataclasses
import json

import pytest

from core.cli.main import main
from core.errors import ConfigError
from core.runs import effdim_report, run_prune, run_relation_sweep, run_slice
from core.settings.config import CalibConfig, DataSpec, EvalConfig, ModelSpec, PruneConfig

MODEL = ModelSpec("tiny-llama", "cpu", "float32")
EVAL = EvalConfig(DataSpec("pydoc", "test"), seqlen=64, max_windows=4)
CALIB = CalibConfig(DataSpec("pydoc", "train"), nsamples=4, seqlen=64, seed=42)


def test_slice_run_is_smaller_and_stored(store):
    res = run_slice(MODEL, PruneConfig("slicegpt", 0.25), CALIB, EVAL, store)
    m = res["metrics"]
    assert m["d"] == 64 and m["d_sliced"] == 48 and m["s_eff"] == 0.25
    assert m["n_layer_params_sliced"] < m["n_layer_params_dense"]
    assert m["latency_ms_dense"] > 0 and m["latency_ms"] > 0
    run = store.load(res["run_id"])
    assert run.record.kind == "slice" and "boundaries" in run.tables()
    assert run.table("effdim")["width"].max() <= 64


def test_slice_metrics_say_what_they_count(store):
    calib = CalibConfig(DataSpec("pydoc", "train"), nsamples=2, seqlen=64, seed=42)
    res = run_slice(MODEL, PruneConfig("slicegpt", 0.25), calib, EVAL, store)
    m = res["metrics"]
    assert m["n_tokens"] == m["n_windows"] * 64 == 256  # evaluation tokens
    assert m["calib_tokens"] == 2 * 64  # the PCAs' calibration tokens
    assert m["latency"] == pytest.approx(m["latency_ms"] / m["latency_ms_dense"])
    # The tiny Llama ties its embeddings: slicing unties the head, so parameters can grow.
    assert m["kept_params"] == pytest.approx(m["n_params_sliced"] / m["n_params_dense"], rel=0.01)
    windows = store.load(res["run_id"]).table("eval_windows")
    assert len(windows) == 4 and windows["nll"].mean() == pytest.approx(m["nll"])


def test_slice_at_zero_keeps_perplexity(store):
    res = run_slice(MODEL, PruneConfig("slicegpt", 0.0), CALIB, EVAL, store)
    assert res["metrics"]["ppl"] == pytest.approx(res["metrics"]["dense_ppl"], rel=1e-4)


def test_prune_dispatches_slicegpt(store):
    res = run_prune(MODEL, PruneConfig("slicegpt", 0.5), CALIB, EVAL, store)
    assert store.get(res["run_id"]).kind == "slice" and res["metrics"]["d_sliced"] == 32


def test_sweep_relation_and_effdim(store):
    res = run_relation_sweep(MODEL, (0.0, 0.25, 0.5), CALIB, EVAL, store)
    sweep = store.load(res["run_id"]).table("sweep")
    assert sweep["d_prime"].tolist() == [64, 48, 32]
    assert sweep["predicted_ppl"].iloc[0] == pytest.approx(res["metrics"]["ppl0"])
    assert {"a", "b", "r2", "ppl0"} <= set(res["metrics"])
    run_prune(MODEL, PruneConfig("wanda", 0.5), CALIB, EVAL, store)
    groups = effdim_report(store)["groups"]
    assert len(groups) == 1 and {r["method"] for r in groups[0]["rows"]} == {"slicegpt", "wanda"}


@pytest.mark.parametrize(
    "s, message", [(1.0, "sparsity"), (-0.1, "sparsity"), (0.99, "rounds down to 0")]
)
def test_bad_slicing(store, s, message):
    with pytest.raises(ConfigError, match=message):
        run_slice(MODEL, PruneConfig("slicegpt", s), CALIB, EVAL, store)


def test_slicegpt_rejects_nm(store):
    with pytest.raises(ConfigError):
        run_prune(MODEL, PruneConfig("slicegpt", 0.5, "2:4"), CALIB, EVAL, store)


def test_cli_slice_sweep_effdim(capsys, store_root, tiny_flags):
    common = tiny_flags
    assert main(["slice", "--sparsity", "0.25", *common, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["d_sliced"] == 48
    assert main(["sweep", "--sparsities", "0,0.5", *common]) == 0
    assert "(A1) against s:" in capsys.readouterr().out
    assert main(["effdim", "--store", str(store_root)]) == 0
    assert "predicted" in capsys.readouterr().out
    assert main(["sweep", "--sparsities", "0,x", *common]) == 2
    assert "--sparsities" in capsys.readouterr().err


def test_sweep_over_seeds_has_intervals_and_a_verdict(store):
    res = run_relation_sweep(MODEL, (0.0, 0.25, 0.5), CALIB, EVAL, store, seeds=(0, 1))
    m = res["metrics"]
    assert m["n_seeds"] == 2 and m["n_windows"] == 4
    for sfx in ("", "_eff"):
        assert m["a_lo" + sfx] <= m["a" + sfx] <= m["a_hi" + sfx]
        assert m["first_order" + sfx] in ("supported", "contradicted", "inconclusive")
        assert m["sentence" + sfx].startswith("(A1)")
    assert {r["law"] for r in m["laws"]} == {"a1", "line", "linear", "curved"}
    assert m["protocol"]["n_windows"] == 4 and m["protocol"]["n_seeds"] == 2
    table = store.load(res["run_id"]).table("sweep")
    assert (table["ppl_lo"] <= table["ppl"]).all() and (table["ppl"] <= table["ppl_hi"]).all()
    assert all(len(ids.split(",")) == 2 for ids in table["run_ids"])
    # The seeds are ordinary slice runs: the same (s, seed) planned alone has the same id.
    one = run_slice(
        MODEL, PruneConfig("slicegpt", 0.25), dataclasses.replace(CALIB, seed=1), EVAL, store
    )
    assert one["cached"] and one["run_id"] in table["run_ids"].iloc[1]
