"""Dense vs pruned on one text (core.evaluation.compare, core.runs.comparison) on tiny models."""

from __future__ import annotations

import json
import math

import pytest
import torch

from core.analysis.departure import (
    agreeing_prefix,
    departure_layer,
    departure_reading,
    generation_reading,
)
from core.errors import ConfigError
from core.evaluation.compare import kl_rows, lens_logits, trace
from core.evaluation.generate import Decoding, generate, next_token
from core.names import A_REBUILD
from core.report import PROVENANCE_ID
from core.runs import run_prune, run_slice
from core.runs.comparison import compare_model, compare_run, how_built, window_nll_diff
from core.runs.resources import get_eval_windows, get_model
from core.settings.config import CalibConfig, DataSpec, EvalConfig, ModelSpec, PruneConfig
from core.store.integrity import MANIFEST

MODEL = ModelSpec("tiny-llama", "cpu", "float32")
EVAL = EvalConfig(DataSpec("pydoc", "test"), seqlen=64, max_windows=3)
CALIB = CalibConfig(DataSpec("pydoc", "train"), nsamples=4, seqlen=64, seed=0)
TEXT = "The cat sat on the mat because it was warm."


def test_last_layer_lens_is_the_models_logits(tiny) -> None:
    ids = torch.tensor(tiny.tokenizer(TEXT)["input_ids"])
    tr = trace(tiny, ids)
    assert len(tr.states) == tiny.adapter.n_layers
    # the same final norm and head on the same hidden state: equal to float rounding
    torch.testing.assert_close(lens_logits(tiny, tr.states[-1]), tr.logits, rtol=1e-5, atol=1e-5)


def test_kl_rows_is_zero_on_itself_and_positive_otherwise() -> None:
    p = torch.log_softmax(torch.randn(5, 11), -1)
    q = torch.log_softmax(torch.randn(5, 11), -1)
    assert torch.equal(kl_rows(p, p), torch.zeros(5))
    assert (kl_rows(p, q) > 0).all()


def test_greedy_is_deterministic_and_sampling_follows_the_seed(tiny) -> None:
    ids = tiny.tokenizer(TEXT)["input_ids"]
    assert generate(tiny, ids, Decoding(8)) == generate(tiny, ids, Decoding(8))
    a = generate(tiny, ids, Decoding(8, temperature=1.0, seed=1))
    assert a == generate(tiny, ids, Decoding(8, temperature=1.0, seed=1))
    seen: list[int] = []
    generate(tiny, ids, Decoding(4), seen.append)
    assert len(seen) == 4
    with pytest.raises(ConfigError):
        Decoding(0)
    with pytest.raises(ConfigError):
        Decoding(8, top_p=0.0)


def test_different_seeds_draw_different_continuations(tiny) -> None:
    ids = tiny.tokenizer(TEXT)["input_ids"]
    draws = {tuple(generate(tiny, ids, Decoding(8, temperature=1.0, seed=s))) for s in range(4)}
    assert len(draws) == 4  # a near-uniform random model: four seeds, four continuations


def draws(logits: list[float], dec: Decoding, n: int = 2000) -> torch.Tensor:
    """How often next_token picks each token over n draws from one seeded stream."""
    gen = torch.Generator().manual_seed(dec.seed)
    picks = [next_token(torch.tensor(logits), dec, gen) for _ in range(n)]
    return torch.bincount(torch.tensor(picks), minlength=len(logits)) / n


def test_sampling_follows_softmax_over_the_temperature() -> None:
    logits = [2.0, 1.0, 0.0]
    for t in (1.0, 2.0):
        expected = torch.softmax(torch.tensor(logits) / t, -1)
        # 2000 draws: each frequency's standard error is at most 0.011
        assert torch.allclose(draws(logits, Decoding(8, temperature=t)), expected, atol=0.04)
    assert draws(logits, Decoding(8, temperature=0.05))[0] == 1.0  # cold: the argmax only


def test_top_p_keeps_the_smallest_nucleus_and_renormalises() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.2])).tolist()
    assert draws(logits, Decoding(8, temperature=1.0, top_p=0.5))[0] == 1.0
    freq = draws(logits, Decoding(8, temperature=1.0, top_p=0.7))
    assert freq[2] == 0.0  # outside the nucleus: never drawn
    assert abs(freq[0] - 0.5 / 0.8) < 0.04 and abs(freq[1] - 0.3 / 0.8) < 0.04


@pytest.fixture
def wanda_run(store) -> dict:
    return run_prune(MODEL, PruneConfig("wanda", 0.5), CALIB, EVAL, store)


def test_mean_token_nll_difference_is_the_stored_perplexity_difference(store, wanda_run) -> None:
    m = wanda_run["metrics"]
    run = store.load(wanda_run["run_id"])
    assert how_built(run) == "stored" and run.array_keys(A_REBUILD)
    windows, _ = get_eval_windows(get_model(MODEL, fresh=False), EVAL)
    diff = window_nll_diff(store, run.id, windows)  # (n, L−1)
    # PPL = exp(mean window NLL): the mean token difference is ln PPL − ln PPL_dense
    expected = math.log(m["ppl"]) - math.log(m["dense_ppl"])
    assert diff.mean() == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_kl_is_zero_for_dense_and_positive_for_a_pruned_run(store, wanda_run) -> None:
    dense = compare_run(store, wanda_run["metrics"]["dense_run"], TEXT, Decoding(4))
    assert dense.layers.kl == [0.0] * len(dense.layers.kl)
    assert dense.layers.rel_error == [0.0] * len(dense.layers.kl)
    assert dense.pruned.text == dense.dense.text
    pruned = compare_run(store, wanda_run["run_id"], TEXT, Decoding(4))
    assert all(k > 0 for k in pruned.layers.kl)
    assert all(e > 0 for e in pruned.layers.rel_error)
    assert pruned.mean_nll_diff == pytest.approx(float(pruned.nll_diff.mean()))
    assert len(pruned.worst()) > 0 and set(pruned.to_dict()) >= {"layer_kl", "continuation"}
    # cached per (run, text, decoding)
    assert compare_run(store, wanda_run["run_id"], TEXT, Decoding(4)) is pruned


def test_restored_model_equals_the_rebuilt_one(store) -> None:
    """SparseGPT updates the kept weights: the stored values restore them (tiny: exact)."""
    res = run_prune(MODEL, PruneConfig("sparsegpt", 0.5), CALIB, EVAL, store)
    run = store.load(res["run_id"])
    assert how_built(run) == "stored"
    _, how = compare_model(store, run)
    windows, _ = get_eval_windows(get_model(MODEL, fresh=False), EVAL)
    diff = window_nll_diff(store, run.id, windows)
    m = res["metrics"]
    assert how == "stored"
    assert diff.mean() == pytest.approx(math.log(m["ppl"] / m["dense_ppl"]), rel=1e-4, abs=1e-6)


def test_slicegpt_at_zero_compares_equal_to_dense(store) -> None:
    res = run_slice(MODEL, PruneConfig("slicegpt", 0.0), CALIB, EVAL, store)
    cmp = compare_run(store, res["run_id"], TEXT, Decoding(4))
    assert cmp.how == "rebuilt" and "rotated back" in cmp.note
    # float32: the rotations round each logit at ~1e-6, and the KL of two distributions that
    # equal up to rounding sums p·δ of that size (a pruned run's KL is ~1e-2 and more)
    assert max(cmp.layers.kl) < 1e-6
    assert max(cmp.layers.rel_error) < 1e-4
    assert cmp.pruned.text == cmp.dense.text
    assert abs(cmp.mean_nll_diff) < 1e-5


def test_slicegpt_cut_departs_from_dense(store) -> None:
    res = run_slice(MODEL, PruneConfig("slicegpt", 0.5), CALIB, EVAL, store)
    cmp = compare_run(store, res["run_id"], TEXT, Decoding(4))
    assert all(math.isfinite(e) and e > 0 for e in cmp.layers.rel_error)
    assert max(cmp.layers.kl) > 0


def test_bad_text_and_run_kind_are_refused(store, wanda_run) -> None:
    with pytest.raises(ConfigError):
        compare_run(store, wanda_run["run_id"], "   ")


def test_cli_compare_and_report(store_root, tiny_flags, capsys, tmp_path) -> None:
    from core.cli.main import main

    assert main(["prune", "--method", "magnitude", "--sparsity", "0.5", *tiny_flags, "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    store = ["--store", str(store_root), "--quiet"]
    args = ["compare", run_id[:8], "--prompt", TEXT, "--max-new-tokens", "4", *store]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["runs"][0]["run_id"] == run_id and len(out["runs"][0]["layer_kl"]) == 4
    assert main(args) == 0
    human = capsys.readouterr().out
    assert "continuation:" in human and "part" in human and "KL(dense||pruned)" in human
    assert main([*args, "--top-p", "0"]) == 2  # refused before any model is built
    html = tmp_path / "report.html"
    assert main(["runs", "report", run_id, str(html), "--store", str(store_root)]) == 0
    text = html.read_text()
    assert f"id='{PROVENANCE_ID}'" in text and run_id in text and "plotly" in text.lower()
    assert "perplexity [95 % interval]" in text


def test_departure_rule_says_no_for_a_model_against_itself_and_yes_for_a_departure() -> None:
    assert departure_layer([0.0] * 6) is None  # negative control: the dense model vs itself
    assert "does not part" in departure_reading([0.0] * 6, "run")
    assert departure_layer([0.01, 0.2, 0.01, 0.1, 0.3]) == 3  # positive control
    assert "from layer 3 on" in departure_reading([0.01, 0.2, 0.01, 0.1, 0.3], "run")
    assert departure_layer([0.2, 0.3, 0.01]) is None  # back below the threshold at the end
    assert agreeing_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert "first 2 of 3" in generation_reading([1, 2, 3], [1, 2, 4], "run")


def test_an_older_run_is_rebuilt_once_then_restored_from_its_folder(store, wanda_run) -> None:
    from core.runs import comparison

    run = store.load(wanda_run["run_id"])
    # as stored before the arrays (and before runs listed their files in files.json)
    (run.dir / "arrays" / f"{A_REBUILD}.safetensors").unlink()
    (run.dir / MANIFEST).unlink()
    assert how_built(run) == "rebuilt"
    comparison._MODELS.clear()
    _, how = compare_model(store, run)
    assert how == "rebuilt" and how_built(run) == "stored"
    comparison._MODELS.clear()  # a new process
    _, how = compare_model(store, run)
    assert how == "stored"
    windows, _ = get_eval_windows(get_model(MODEL, fresh=False), EVAL)
    m = wanda_run["metrics"]
    expected = math.log(m["ppl"]) - math.log(m["dense_ppl"])
    assert window_nll_diff(store, run.id, windows).mean() == pytest.approx(expected, rel=1e-4)
