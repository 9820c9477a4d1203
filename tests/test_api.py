"""core.api on in-memory tiny models: the facade gives what the CLI's machinery gives (the same
pruned weights and run id as ``python -m core prune``, the Compare page's data), refuses bad
calls with the CLI's errors before any work, and fits Paper A's laws to a frame."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from core import api
from core.cli.main import main
from core.data import eval_windows, load_corpus
from core.errors import ConfigError, ModelLoadError
from core.evaluation.generate import Decoding
from core.evaluation.perplexity import evaluate_perplexity
from core.models.load import build_tiny_model, byte_tokenizer
from core.runs.comparison import compare_run

EVAL = api.eval_data("pydoc", seqlen=64, max_windows=4)
SMALL = {"calib": "pydoc", "nsamples": 4, "seqlen": 64}


@pytest.fixture(scope="module")
def tiny():
    return api.load("tiny-llama")


def weights(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_prune_in_memory_reports_every_linear_and_leaves_the_model(tiny):
    model, tok = tiny
    before = weights(model)
    pruned, report = api.prune(model, tok, "wanda", 0.5, evaluate=EVAL, **SMALL)
    assert pruned is not model
    assert all(torch.equal(a, b) for a, b in zip(before, weights(model), strict=True))
    # 4 layers x 7 linears, each at 50 % (Wanda prunes an exact count per row)
    assert len(report.layers) == 28
    assert set(report.layers["role"]) == {"q", "k", "v", "o", "gate", "up", "down"}
    assert report.layers["achieved_sparsity"].tolist() == pytest.approx([0.5] * 28)
    assert (report.layers["rel_error"] > 0).all()
    zeros = sum(int((lin.weight == 0).sum()) for lin in _linears(pruned))
    total = sum(lin.weight.numel() for lin in _linears(pruned))
    assert report.achieved_sparsity == pytest.approx(zeros / total)
    assert report.summary["prune_seconds"] > 0
    # evaluate= is the perplexity of the returned model on those windows
    again = api.perplexity(pruned, tok, EVAL)
    assert report.perplexity.ppl == pytest.approx(again.ppl, rel=1e-12)
    assert again.window_nll == report.perplexity.window_nll


def _linears(model):
    for layer in model.model.layers:
        for mod in (layer.self_attn, layer.mlp):
            for child in mod.children():
                if isinstance(child, torch.nn.Linear):
                    yield child


def test_inplace_prunes_the_model_itself():
    model, tok = build_tiny_model("tiny-llama"), byte_tokenizer()
    pruned, report = api.prune(model, tok, "magnitude", 0.25, inplace=True, **SMALL)
    assert pruned is model
    assert float((model.model.layers[0].mlp.up_proj.weight == 0).float().mean()) == 0.25
    assert report.achieved_sparsity == 0.25


def test_method_options_reach_the_method(tiny):
    """Options as keywords, or in method_options when named like prune's own keywords."""
    model, tok = tiny
    _, report = api.prune(
        model, tok, "sparsegpt", 0.5, percdamp=0.05, method_options={"blocksize": 32}, **SMALL
    )
    options = report.config["prune"]["options"]
    assert options["percdamp"] == 0.05 and options["blocksize"] == 32
    assert options["selection"] == "threshold"  # the default filled in, as in a stored run


def test_perplexity_is_the_reference_protocol(tiny):
    """api.perplexity = evaluate_perplexity on the CLI's windows of the same corpus."""
    model, tok = tiny
    ids = eval_windows(tok, load_corpus(EVAL.data), 64, 4)
    ref = evaluate_perplexity(model, ids, 4)
    got = api.perplexity(model, tok, EVAL)
    assert got.ppl == ref.ppl and got.n_windows == 4 and got.seqlen == 64
    assert api.perplexity(model, tok, ids).window_nll == ref.window_nll  # windows given


def test_stored_prune_is_the_cli_run_with_the_same_weights(tiny, store, tiny_flags, capsys):
    """store= makes the run `python -m core prune` makes with the same settings (same id, so
    the CLI reuses it), and its model has exactly the in-memory call's weights."""
    model, tok = tiny
    kept, report = api.prune(model, tok, "sparsegpt", 0.5, evaluate=EVAL, store=store, **SMALL)
    mem, mem_report = api.prune(model, tok, "sparsegpt", 0.5, evaluate=EVAL, **SMALL)
    assert all(torch.equal(a, b) for a, b in zip(weights(kept), weights(mem), strict=True))
    assert report.perplexity.ppl == pytest.approx(mem_report.perplexity.ppl, rel=1e-9)
    assert report.layers["achieved_sparsity"].tolist() == pytest.approx(
        mem_report.layers["achieved_sparsity"].tolist()
    )
    capsys.readouterr()
    assert main(["prune", *tiny_flags, "--method", "sparsegpt", "--sparsity", "0.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run_id"] == report.run_id and out["cached"] is True
    frame = api.runs(store)
    assert set(frame["id"]) == {report.run_id, out["metrics"]["dense_run"]}


def test_compare_in_memory_is_the_compare_pages_data(tiny, store):
    """api.compare on the models in memory gives what the Compare page shows for the stored
    run of the same pruning (its model rebuilt from the store)."""
    model, tok = tiny
    pruned, report = api.prune(model, tok, "wanda", 0.5, evaluate=EVAL, store=store, **SMALL)
    text = "The capital of France is"
    got = api.compare(model, pruned, tok, text, max_new_tokens=6)
    page = compare_run(store, report.run_id, text, Decoding(6))
    assert got.pruned.new_ids == page.pruned.new_ids
    assert got.dense.new_ids == page.dense.new_ids
    np.testing.assert_allclose(got.nll_diff, page.nll_diff, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.layers.kl, page.layers.kl, rtol=1e-4, atol=1e-9)
    assert got.mean_nll_diff != 0.0 and max(got.layers.kl) > 0
    # the dense model beside itself: nothing differs (a control)
    same = api.compare(model, model, tok, text, max_new_tokens=4)
    assert same.mean_nll_diff == 0.0 and max(same.layers.kl) == 0.0


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"method": "nope"}, ConfigError, "nope"),
        ({"pattern": "3:7"}, ConfigError, "divisible by 7"),
        ({"lam": 0.1}, ConfigError, "has no option lam"),
        ({"sparsity": 1.5}, ConfigError, "sparsity"),
        ({"seqlen": 4096}, ConfigError, "context of 1024"),
        ({"method": "slicegpt", "allocation": "owl"}, ConfigError, "uniform"),
        ({"method": "slicegpt", "method_options": {"round_to": 0}}, ConfigError, "round_to"),
    ],
)
def test_bad_calls_fail_before_any_work_with_the_cli_errors(
    tiny, kwargs, error, words, monkeypatch
):
    model, tok = tiny
    monkeypatch.setattr(
        "core.api.pruning.apply_prune", lambda *a, **k: pytest.fail("pruning started")
    )
    monkeypatch.setattr(
        "core.api.inputs.get_calib_windows", lambda *a, **k: pytest.fail("data drawn")
    )
    args = {"method": "wanda", "sparsity": 0.5, **SMALL, **kwargs}
    with pytest.raises(error, match=words):
        api.prune(model, tok, args.pop("method"), args.pop("sparsity"), **args)


def test_an_unsupported_family_is_refused():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=260))
    with pytest.raises(ModelLoadError, match="gpt2"):
        api.prune(gpt2, byte_tokenizer(), "wanda", 0.5, **SMALL)
    with pytest.raises(ConfigError, match="tokenizer"):
        api.perplexity(build_tiny_model("tiny-llama"), None, EVAL)


def test_runs_frame_of_reports_has_the_runs_page_columns(tiny, store):
    model, tok = tiny
    dense = api.perplexity(model, tok, EVAL)
    reports = [
        api.prune(model, tok, "magnitude", s, evaluate=EVAL, **SMALL).report for s in (0.2, 0.4)
    ]
    frame = api.runs(reports, dense=dense)
    stored = api.runs(store)
    assert list(frame.columns) == [*stored.columns, api.WINDOW_NLL]
    assert frame["method"].tolist() == ["dense", "magnitude", "magnitude"]
    assert frame["ppl"].tolist() == [dense.ppl, *(r.perplexity.ppl for r in reports)]
    assert frame[api.WINDOW_NLL].map(len).tolist() == [4, 4, 4]


# ---- Paper A's laws on a frame -------------------------------------------------------------------
GRID = (0.05, 0.1, 0.15, 0.3, 0.4, 0.5)  # three points where the local first order lives


def synthetic_frame(kappa: float, seed: int, seeds: int = 2, windows: int = 64) -> pd.DataFrame:
    """Window NLLs of a dense model (ln PPL₀ ≈ 3, window spread 0.3) and points whose mean NLL
    follows L = L₀·(1 + κ·s + s²/(1 − s)·κ) (κ = 1: (A1) exactly), each window scaled alike
    plus small per-seed noise."""
    rng = np.random.default_rng(seed)
    base = 3.0 + 0.3 * rng.standard_normal(windows)
    rows = [{"method": "dense", "sparsity": None, api.WINDOW_NLL: base.tolist()}]
    for s in GRID:
        factor = 1 + kappa * s + kappa * s * s / (1 - s)
        for _ in range(seeds):
            nll = base * factor + 0.01 * rng.standard_normal(windows)
            rows.append({"method": "slicegpt", "sparsity": s, api.WINDOW_NLL: nll.tolist()})
    return pd.DataFrame(rows)


def test_laws_on_a_frame_reach_the_sweeps_verdict():
    """The frame's rows reach (A1)'s verdict as a sweep's points do: seeds grouped by s, the
    dense row as L₀. (A1)-exact data pass the joint test and agree at first order; κ = 1.5
    data are rejected and depart (the verdict itself, with its controls over many draws, is
    core.analysis.verdicts': tests/test_laws.py)."""
    fit = api.laws(synthetic_frame(1.0, 0))
    assert fit.verdict["joint"] == "not rejected" and fit.verdict["first_order"] == "agrees"
    assert fit.verdict["kappa_local"] == pytest.approx(1.0, abs=0.02)
    assert fit.n_seeds == 2 and fit.n_windows == 64
    assert set(fit.laws["law"]) == {"a1", "line", "linear", "curved"}
    assert fit.laws.set_index("law").at["a1", "verdict"] == "supported"
    assert fit.sentence.startswith("(A1) is not rejected by the joint test")
    assert fit.ratios["s"].tolist() == list(GRID)
    steep = api.laws(synthetic_frame(1.5, 0))
    assert steep.verdict["joint"] == "rejected" and steep.verdict["first_order"] == "departs"
    assert steep.verdict["kappa_local"] == pytest.approx(1.5, abs=0.02)
    assert steep.laws.set_index("law").at["a1", "verdict"] == "contradicted"


def test_laws_refuse_a_frame_they_cannot_fit():
    frame = synthetic_frame(1.0, 0)
    with pytest.raises(ConfigError, match="window_nll"):
        api.laws(frame.drop(columns=api.WINDOW_NLL))
    with pytest.raises(ConfigError, match="2 dense rows"):
        api.laws(pd.concat([frame.iloc[:1], frame]))
    with pytest.raises(ConfigError, match="two sparsities"):
        api.laws(frame[(frame["sparsity"].isna()) | (frame["sparsity"] == 0.1)])
    short = frame.copy()
    short.at[0, api.WINDOW_NLL] = short.at[0, api.WINDOW_NLL][:10]
    with pytest.raises(ConfigError, match="different windows"):
        api.laws(short)


def test_laws_on_a_stored_frame_match_the_frame_of_reports(tiny, store):
    """The store's frame with windows (runs stored by prune(store=...)) fits the same laws
    as the frame of the same prunes made in memory."""
    model, tok = tiny
    dense = api.perplexity(model, tok, EVAL)
    reports = [
        api.prune(model, tok, "magnitude", s, evaluate=EVAL, store=store, **SMALL).report
        for s in (0.2, 0.4)
    ]
    stored = api.runs(store, windows=True)
    memory = api.runs(reports, dense=dense)
    a, b = api.laws(stored), api.laws(memory)
    assert a.sentence == b.sentence
    ka, kb = (f.laws.set_index("law").at["linear", "kappa"] for f in (a, b))
    assert math.isfinite(ka) and math.isclose(ka, kb, rel_tol=1e-9)  # the same fitted slope


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_same_calls_run_on_a_cuda_model():
    """Unchanged calls on the model moved to CUDA: the work runs there, and the figures match
    the CPU's (float32 both)."""
    model, tok = api.load("tiny-llama", device="cpu", dtype="float32")
    cpu_pruned, cpu = api.prune(model, tok, "sparsegpt", 0.5, evaluate=EVAL, **SMALL)
    gpu_model = model.to("cuda")
    pruned, rep = api.prune(gpu_model, tok, "sparsegpt", 0.5, evaluate=EVAL, **SMALL)
    assert next(pruned.parameters()).device.type == "cuda"
    assert rep.perplexity.ppl == pytest.approx(cpu.perplexity.ppl, rel=1e-3)
    masks = [(p == 0) for p in pruned.parameters()]
    cpu_masks = [(p == 0) for p in cpu_pruned.parameters()]
    agree = sum(int((a.cpu() == b).sum()) for a, b in zip(masks, cpu_masks, strict=True))
    assert agree / sum(m.numel() for m in masks) > 0.99
    cmp = api.compare(gpu_model, pruned, tok, "The capital of France is", max_new_tokens=4)
    assert len(cmp.layers.kl) == 4 and cmp.mean_nll_diff != 0.0
