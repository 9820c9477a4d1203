"""Recovery fine-tuning (the 'recover' run kind): the parent's zeros are held exactly by
both methods, a killed run resumes to the same weights, a sliced model reloads through
load_sliced, and bad input is refused with one clear error and nothing stored."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file

from core.cli.main import main
from core.errors import ConfigError, StoreError
from core.evaluation.perplexity import evaluate_perplexity
from core.methods.slicegpt import load_sliced
from core.models.load import load_model
from core.names import LORA, MASKED, RECOVER, T_RECOVERY
from core.recovery import Checkpoint, ZeroSet, finetune, pruned_linears
from core.recovery.loop import train
from core.recovery.lora import add_lora, merge_lora
from core.requests.request import plan_request, run_options
from core.runs import execute, get_eval_windows, run_prune, run_slice
from core.runs.recover import scratch_dir
from core.settings.config import (
    CalibConfig,
    DataSpec,
    EvalConfig,
    ModelSpec,
    PruneConfig,
    RecoverConfig,
    RunConfig,
)
from core.sweeps.recovery import before_after_frame, recovered_table

MODEL = ModelSpec("tiny-llama", "cpu", "float32")
EVAL = EvalConfig(DataSpec("pydoc", "test"), seqlen=64, max_windows=4)
CALIB = CalibConfig(DataSpec("pydoc", "train"), nsamples=4, seqlen=64, seed=0)
TRAIN = {"calib": "pydoc", "nsamples": 8, "calib_seqlen": 64}
ROLES = ("q", "k", "v", "o", "gate", "up", "down")


def _nm_pruned_tiny():
    """The tiny Llama with every decoder linear 2:4 pruned by magnitude (an exact zero set)."""
    lm = load_model("tiny-llama")
    linears = pruned_linears(lm, ROLES)
    with torch.no_grad():
        for lin in linears.values():
            w = lin.weight
            groups = w.abs().reshape(w.shape[0], -1, 4)
            drop = groups.argsort(dim=-1)[..., :2]
            keep = torch.ones_like(groups, dtype=torch.bool).scatter_(-1, drop, False)
            w.mul_(keep.reshape(w.shape))
    return lm, linears


def _windows(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n, 32), generator=torch.Generator().manual_seed(seed))


def _rc(method: str = LORA, **kw) -> RecoverConfig:
    return RecoverConfig("parent", kw.pop("steps", 4), method, lr=kw.pop("lr", 5e-2), every=2, **kw)


def test_merged_lora_has_exactly_the_parents_zero_set(tmp_path):
    lm, linears = _nm_pruned_tiny()
    held = ZeroSet.capture(linears)
    before = {n: lin.weight.detach().clone() for n, lin in linears.items()}
    rc = _rc(LORA)
    ck = Checkpoint(tmp_path, "k")
    res = finetune(
        lm.model, linears, held, _windows(8), _windows(2, 1), rc, torch.device("cpu"), ck
    )
    assert res.zero_set_kept and held.same_as(linears)
    for name, lin in linears.items():  # every group of 4 still has exactly 2 zeros
        zeros = (lin.weight == 0).reshape(lin.weight.shape[0], -1, 4).sum(-1)
        assert torch.equal(zeros, torch.full_like(zeros, 2)), name
    changed = sum(int((lin.weight != before[n]).sum()) for n, lin in linears.items())
    assert changed > 0.4 * sum(w.numel() for w in before.values())  # the merge moved the rest
    assert not any("lora" in n for n, _ in lm.model.named_parameters())  # plain linears again


def test_lora_merged_without_the_mask_loses_zeros(tmp_path):
    """Negative control: the merge alone fills the zeros (wanda #83); the re-applied mask is
    what holds them."""
    lm, linears = _nm_pruned_tiny()
    held = ZeroSet.capture(linears)
    for p in lm.model.parameters():
        p.requires_grad_(False)
    params = add_lora(lm.model, list(linears), 8, 16.0, 0, master=False)
    rc = _rc(LORA)
    train(
        lm.model,
        params,
        _windows(8),
        _windows(2, 1),
        rc,
        torch.device("cpu"),
        Checkpoint(tmp_path, "k"),
    )
    merge_lora(lm.model)
    assert not held.same_as(linears)
    held.apply(linears)
    assert held.same_as(linears)


def test_masked_finetune_never_makes_a_pruned_weight_nonzero(tmp_path):
    lm, linears = _nm_pruned_tiny()
    held = ZeroSet.capture(linears)
    before = {n: lin.weight.detach().clone() for n, lin in linears.items()}
    kept_each_step = []

    def check(stage, done, total, detail=""):
        if stage == "recover" and done > 0:
            kept_each_step.append(held.same_as(linears))

    rc = _rc(MASKED, lr=1e-2)
    ck = Checkpoint(tmp_path, "k")
    res = finetune(
        lm.model, linears, held, _windows(8), _windows(2, 1), rc, torch.device("cpu"), ck, check
    )
    assert kept_each_step == [True] * rc.steps and res.zero_set_kept
    assert res.trained_params == sum(w.numel() for w in before.values())
    moved = sum(int((lin.weight != before[n]).sum()) for n, lin in linears.items())
    assert moved > 0.4 * sum(w.numel() for w in before.values())


@pytest.fixture
def wanda_run(store):
    return run_prune(MODEL, PruneConfig("wanda", 0.5), CALIB, EVAL, store)["run_id"]


def _recover(store, run_id, on_progress=None, save=None, **values):
    given = {"run": run_id, "steps": 6, "every": 3, **TRAIN, **values}
    cfg = plan_request("recover", given, store)
    opts = dataclasses.replace(run_options("recover", given), save_dir=save)
    return execute(cfg, store, on_progress, opts)


def test_recover_run_is_stored_with_its_curve_and_parent(store, wanda_run):
    res = _recover(store, wanda_run, lr=5e-3)
    m, cfg = res["metrics"], res["config"]
    assert cfg["kind"] == RECOVER and cfg["extra"]["recover"]["parent"] == wanda_run
    assert cfg["calib"]["seed"] == CALIB.seed + 1  # another draw than the pruning's
    assert cfg["eval"] == store.get(wanda_run).config["eval"]  # the parent's windows
    assert m["achieved_sparsity"] == m["parent_achieved_sparsity"] and m["zero_set_kept"]
    assert m["ppl_lo"] <= m["ppl"] <= m["ppl_hi"] and m["parent_ppl_lo"] <= m["parent_ppl"]
    curve = store.load(res["run_id"]).table(T_RECOVERY)
    assert list(curve["step"]) == [0, 3, 6]
    assert curve["heldout_ppl"].iloc[0] == pytest.approx(m["parent_ppl"], rel=1e-5)
    assert m["heldout_ppl_end"] < m["heldout_ppl_start"]  # it recovers on the tiny model too
    assert not scratch_dir(store, res["run_id"]).exists()  # checkpoint gone once stored
    again = _recover(store, wanda_run, lr=5e-3)
    assert again["cached"] and again["run_id"] == res["run_id"]


def test_killed_recovery_resumes_to_the_same_weights(store, wanda_run, tmp_path):
    whole = _recover(store, wanda_run, save=str(tmp_path / "whole"))

    def kill_at_4(stage, done, total, detail=""):
        if stage == "recover" and done == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # checkpoint at step 3, killed during step 4
        _recover(store, wanda_run, kill_at_4, save=str(tmp_path / "resumed"), every=3)
    assert store.get(whole["run_id"]).status == "cancelled"
    assert (scratch_dir(store, whole["run_id"]) / "checkpoint.pt").is_file()
    resumed = _recover(store, wanda_run, save=str(tmp_path / "resumed"))
    assert resumed["metrics"]["resumed_from"] == 3 and not resumed["cached"]
    a = load_file(tmp_path / "whole" / "model.safetensors")
    b = load_file(tmp_path / "resumed" / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)  # same seed, same kernels: bit for bit
    assert resumed["metrics"]["ppl"] == whole["metrics"]["ppl"]


def test_sliced_run_recovers_with_lora_and_reloads_through_load_sliced(store, tmp_path):
    calib = dataclasses.replace(CALIB, seed=42)
    parent = run_slice(MODEL, PruneConfig("slicegpt", 0.25), calib, EVAL, store)["run_id"]
    res = _recover(store, parent, save=str(tmp_path / "sliced"), lr=5e-3)
    m = res["metrics"]
    assert m["parent_kind"] == "slice" and m["kept_params"] == m["parent_kept_params"]
    assert res["config"]["calib"]["seed"] == 43
    model = load_sliced(tmp_path / "sliced")
    lm = load_model("tiny-llama")
    windows, _ = get_eval_windows(lm, EVAL)
    ppl = evaluate_perplexity(model, windows, 4, "cpu").ppl
    assert ppl == pytest.approx(m["ppl"], rel=1e-5)  # sdpa vs the run's kernels: last bits
    with pytest.raises(ConfigError, match="no zeros to hold"):
        _recover(store, parent, method=MASKED)


# ---- refusals: one clear error, nothing stored ------------------------------------------------
def _rows(store):
    return sorted((r.id, r.status) for r in store.list())


def test_bad_parents_and_steps_are_refused_and_store_nothing(store, wanda_run):
    dense = store.get(store.load(wanda_run).metrics["dense_run"]).id
    streamed = RunConfig(
        "prune", dataclasses.replace(MODEL, stream=True), EVAL, CALIB, PruneConfig("wanda", 0.5)
    )
    with store.begin(streamed) as w:
        w.commit({"ppl": 1.0})
    before = _rows(store)
    cases = [
        ({"run": dense}, ConfigError, "dense model has no pruning"),
        ({"run": wanda_run, "steps": 0}, ConfigError, "steps must be >= 1"),
        ({"run": streamed.run_id}, ConfigError, "was streamed"),
        ({"run": "feedbeef"}, StoreError, "no run 'feedbeef'"),
        ({"run": wanda_run, "seed": CALIB.seed, "nsamples": 4}, ConfigError, "another draw"),
    ]
    for given, err, match in cases:
        with pytest.raises(err, match=match):
            plan_request("recover", {**TRAIN, **given}, store)
    # a config naming a run that is gone is refused by execute too, before anything is written
    cfg = plan_request("recover", {"run": wanda_run, "steps": 2, **TRAIN}, store)
    gone = json.loads(json.dumps(cfg.to_dict()))
    gone["extra"]["recover"]["parent"] = "0" * 16
    with pytest.raises(StoreError, match="no run"):
        execute(RunConfig.from_dict(gone), store)
    assert _rows(store) == before


def test_cli_refusal_prints_one_error(store_root, wanda_run, capsys):
    rc = main(["recover", "--run", wanda_run, "--steps", "0", "--store", str(store_root)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == ["error: steps must be >= 1, got 0"]


def _runs_page(selected: str):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file("../app.py", default_timeout=60)
    at.session_state["selected_run"] = selected  # where the page's run picker starts
    at.run()
    at.switch_page("pages/runs.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_runs_page_offers_the_form_and_shows_a_recovery(store, wanda_run) -> None:
    at = _runs_page(wanda_run)
    assert [b.label for b in at.get("form_submit_button")] == ["Start recovery", "Start the draws"]
    child = _recover(store, wanda_run)["run_id"]
    at = _runs_page(child)
    labels = [m.label for m in at.metric]
    assert labels == ["perplexity before", "perplexity after", "dense perplexity", "fine-tune time"]
    assert len(at.get("plotly_chart")) == 3  # the runs chart, the curve, before/after


def test_sweep_recovers_its_points_and_tabulates_before_and_after(
    store, tiny_flags, shared_data, capsys
) -> None:
    argv = ["sweep", "--method", "wanda", "--sparsities", "0.3,0.6", *tiny_flags]
    assert main([*argv, "--recover-steps", "0"]) == 2  # refused before any work
    assert "--recover-steps must be >= 1" in capsys.readouterr().err
    assert main([*argv, "--recover-steps", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["recovered"]
    assert [r["sparsity"] for r in rows] == [0.3, 0.6]
    assert all(r["n_runs"] == 1 and r["ppl_after"] > 0 and r["steps"] == 2 for r in rows)
    recs = store.list(kind=RECOVER, status="done")
    assert len(recs) == 2
    assert {r.config["extra"]["recover"]["parent"] for r in recs} == set(
        out["table"][1]["run_ids"].split(",") + out["table"][2]["run_ids"].split(",")
    )
    every = recovered_table(store, out["table"])  # every number of steps stored
    assert every == rows
    frame = before_after_frame(every)
    assert sorted(frame["series"].unique()) == ["wanda +2 steps", "wanda one-shot"]
    assert len(frame) == 4
