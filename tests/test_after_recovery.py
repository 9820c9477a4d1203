"""Paper A's relation before and after recovery (core.analysis.after_recovery), on
synthetic stored runs: slice runs with their window NLLs, recover runs naming them."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from core.analysis.after_recovery import (
    NO_RECOVERY,
    ONE_SHOT,
    RECOVERED,
    TOO_FEW,
    Group,
    before_after_curves,
    recovered_relation,
)
from core.analysis.laws import Means
from core.analysis.sweep_report import relation_on
from core.names import RECOVER, T_EVAL_WINDOWS
from core.settings.config import (
    CalibConfig,
    DataSpec,
    EvalConfig,
    ModelSpec,
    PruneConfig,
    RecoverConfig,
    RunConfig,
)

MODEL = ModelSpec("tiny-llama", "cpu", "float32")
S = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4)  # three points where the local first order is read
WINDOWS = 32
APP = str(Path(__file__).resolve().parents[1] / "app.py")


def _put(store, cfg: RunConfig, nll: np.ndarray, metrics: dict) -> str:
    with store.begin(cfg) as w:
        w.write_table(T_EVAL_WINDOWS, [{"window": i, "nll": v} for i, v in enumerate(nll)])
        w.commit({"ppl": float(np.exp(nll.mean())), **metrics})
    return cfg.run_id


def _dense(store, rng) -> tuple[str, np.ndarray]:
    nll = 3.4 + 0.3 * rng.standard_normal(WINDOWS)
    cfg = RunConfig("eval", MODEL, EvalConfig(), extra=(("tag", "dense"),))
    return _put(store, cfg, nll, {}), nll


def _slice(store, dense_id, dense_nll, s, seed, rng) -> str:
    calib = CalibConfig(DataSpec("pydoc", "train"), 4, 64, seed)
    cfg = RunConfig("slice", MODEL, EvalConfig(), calib, PruneConfig("slicegpt", s))
    # (A1) exactly, up to a seed jitter far below any effect tested here: these tests check
    # which points feed which fit, not a statistic's pass rate (test_laws.py has those)
    nll = dense_nll / (1 - s) * (1 + 1e-4 * rng.standard_normal())
    dense_ppl = float(np.exp(dense_nll.mean()))
    return _put(store, cfg, nll, {"dense_run": dense_id, "dense_ppl": dense_ppl})


def _recover(store, parent, steps, nll) -> str:
    rc = dataclasses.asdict(RecoverConfig(parent, steps))
    cfg = RunConfig(RECOVER, MODEL, EvalConfig(), extra=((RECOVER, rc),))
    return _put(store, cfg, nll, {"parent_run": parent})


def _world(store, recover_s=S, seeds=2, steps=10):
    """A dense run, slice runs at every s of S (``seeds`` each), and recover runs of those at
    ``recover_s``: recovery moves ln PPL halfway back to the dense model's."""
    rng = np.random.default_rng(0)
    dense_id, dense_nll = _dense(store, rng)
    slices: dict[float, list[str]] = {}
    after: dict[float, list[tuple[str, np.ndarray]]] = {}
    for s in S:
        for k in range(seeds):
            sid = _slice(store, dense_id, dense_nll, s, k, rng)
            slices.setdefault(s, []).append(sid)
            if s in recover_s:
                nll = store.load(sid).table(T_EVAL_WINDOWS)["nll"].to_numpy()
                back = (nll + dense_nll) / 2
                rid = _recover(store, sid, steps, back)
                after.setdefault(s, []).append((rid, back))
    return dense_id, dense_nll, slices, after


def test_no_recovery_gives_the_empty_message(store) -> None:
    _world(store, recover_s=())
    out = recovered_relation(store)
    assert out["group"] is None and out["points"] == [] and out["fits"] == []
    assert out["message"] == NO_RECOVERY and "python -m core recover --run" in out["message"]


def test_each_recovered_run_is_paired_with_its_parents_s(store) -> None:
    dense_id, _, slices, _ = _world(store, recover_s=(0.2, 0.4))
    out = recovered_relation(store)
    assert out["group"] == Group("tiny-llama", dense_id, 10)
    assert [p["s"] for p in out["points"]] == [0.2, 0.4]
    for p in out["points"]:
        parents = slices[p["s"]]
        before = np.mean([store.get(i).summary["ppl"] for i in parents])
        assert p["n_slice_runs"] == p["n_recover_runs"] == 2
        assert p["ppl_before"] == pytest.approx(before, rel=1e-12)
        assert p["ppl_after"] < p["ppl_before"]
        assert p["ratio_after"] == pytest.approx(
            math.log(p["dense_ppl"]) / math.log(p["ppl_after"])
        )
    curves = before_after_curves(out["points"])
    assert {c["series"] for c in curves} == {ONE_SHOT, RECOVERED} and len(curves) == 4


def test_one_s_recovered_shows_points_but_no_fit(store) -> None:
    _world(store, recover_s=(0.3,))
    out = recovered_relation(store)
    assert len(out["points"]) == 1 and out["recovered"] is None and out["message"] == TOO_FEW


def test_recovered_fit_is_the_sweeps_reading_of_the_recovered_points(store) -> None:
    _, dense_nll, slices, after = _world(store)
    out = recovered_relation(store)
    s = list(S)
    # seeds stacked in run-id order, as recovered_relation reads them
    nll = [np.stack([v for _, v in sorted(after[x], key=lambda p: p[0])]) for x in s]
    direct = relation_on(Means.from_units(s, nll, dense_nll), RECOVERED)
    # same kernels on the same stored floats: equal bit for bit (NaN where a law lacks a param)
    assert pd.DataFrame(out["recovered"]["laws"]).equals(pd.DataFrame(direct["laws"]))
    assert out["recovered"]["sentence"] == direct["sentence"]
    table = [[store.load(i).table(T_EVAL_WINDOWS)["nll"] for i in sorted(slices[x])] for x in s]
    before = relation_on(Means.from_units(s, [np.stack(t) for t in table], dense_nll), ONE_SHOT)
    assert out["one_shot"]["sentence"] == before["sentence"]
    fits = {f["fit"]: f for f in out["fits"]}
    # the one-shot points follow (A1) (local κ = 1 agrees); recovery halves the excess
    # ln PPL, so its local κ is about 1/2 and the first order departs
    assert fits[ONE_SHOT]["first_order"] == "agrees"
    assert fits[RECOVERED]["first_order"] == "departs"
    assert fits[RECOVERED]["kappa_local"] == pytest.approx(0.5, abs=0.05)
    assert fits[RECOVERED]["joint"] == "rejected"


def _repdim_after_recovery() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("pages/repdim.py")
    at.run()
    at.session_state["repdim_section"] = "After recovery"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_page_says_how_to_recover_when_nothing_is_recovered(store) -> None:
    _world(store, recover_s=())
    at = _repdim_after_recovery()
    assert NO_RECOVERY in [i.value for i in at.info]
    assert not at.get("plotly_chart")


def test_page_draws_before_and_after_and_both_fits(store) -> None:
    _world(store)
    at = _repdim_after_recovery()
    assert [c.key for c in at.get("plotly_chart")] == ["recovery_chart"]
    fits = next(d.value for d in at.dataframe if "fit" in d.value)
    assert list(fits["fit"]) == [ONE_SHOT, RECOVERED]
    text = "\n".join(m.value for m in at.markdown)
    assert f"**{RECOVERED}**: (A1) is rejected by the joint test" in text
    recovered = next(m for m in text.split("\n") if m.startswith(f"**{RECOVERED}**"))
    one_shot = next(m for m in text.split("\n") if m.startswith(f"**{ONE_SHOT}**"))
    assert "its local first order departs" in recovered
    assert "its local first order agrees" in one_shot
