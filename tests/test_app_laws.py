"""The Representation dimension page draws what the CLI reports: every candidate law of (A1)
with its interval and out-of-sample errors, the verdict sentence, the (A2) rule from core,
and each method predicted from the others (AppTest on a synthetic stored sweep)."""

from __future__ import annotations

import numpy as np
from test_app import TINY, open_page, texts

from core.analysis.laws import Means, fit_laws, law_rows, point_rows
from core.analysis.verdicts import ACCURACY_RULE, a1_verdict
from core.names import T_LAW_POINTS, T_LAWS
from core.settings.config import RunConfig
from core.store.run_store import RunStore

S = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)


def fake_law_sweep(store: RunStore) -> str:
    """A sweep whose laws were scored on window NLLs that follow ln PPL = ln PPL₀(1 + 1.15 s),
    stored as core.runs.relation_sweep stores them."""
    rng = np.random.default_rng(0)
    dense = 3.0 + 0.2 * rng.standard_normal(16)
    nll = [dense[None] * (1 + 1.15 * s) * (1 + 0.001 * rng.standard_normal((2, 1))) for s in S]
    res = fit_laws(Means.from_units(S, nll, dense))
    verdict = a1_verdict(res)
    d, ppl0 = 64, float(np.exp(dense.mean()))
    rows = [
        {"s": s, "s_eff": s, "d_prime": int(d * (1 - s)), "params": 1000,
         "ppl": float(np.exp(x.mean())), "predicted_ppl": ppl0 ** (1 / (1 - s)), "rel_error": 0.0}
        for s, x in zip(S, nll, strict=True)
    ]  # fmt: skip
    cfg = RunConfig("sweep", TINY, extra=(("grid", S), ("tag", "laws")))
    with store.begin(cfg) as w:
        w.write_table("sweep", rows)
        w.write_table(T_LAWS, law_rows(res, "s") + law_rows(res, "s_eff"))
        w.write_table(T_LAW_POINTS, point_rows(res, "s") + point_rows(res, "s_eff"))
        metrics = {"ppl0": ppl0, "d": d, **verdict}
        metrics.update({f"{k}_eff": v for k, v in verdict.items()})
        metrics["protocol"] = {
            "n_windows": 16,
            "eval_seqlen": 64,
            "calib_nsamples": 8,
            "calib_seqlen": 64,
            "n_seeds": 2,
        }
        w.commit(metrics)
    return cfg.run_id


def test_repdim_page_shows_every_law_and_the_verdict(store) -> None:
    fake_law_sweep(store)
    at = open_page("repdim")
    assert not at.error, texts(at.error)
    keys = [c.key for c in at.get("plotly_chart")]
    assert keys == ["ppl_dprime", "laws_chart", "law_errors"]
    assert "fails at first order" in texts(at.info)  # κ = 1.15
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["first-order slope κ [95%]"].startswith("1.1")
    assert metrics["best law out of sample"] == "linear"
    table = next(df.value for df in at.dataframe if "leave one s out" in df.value.columns)
    assert len(table) == 4 and {"parameters [95%]", "extrapolated", "verdict"} <= set(table)
    assert table["verdict"].str.contains("best").sum() == 1
    assert "Protocol: 16 windows of 64 tokens" in texts(at.caption)
    at.radio(key="law_error_kind").set_value("loo")
    at.radio(key="law_basis").set_value("s_eff")
    at.run()
    assert not at.error, texts(at.error)
    assert "Verdict (achieved s_eff" in texts(at.info)


def test_accuracy_rule_on_the_page_is_cores(store) -> None:
    from test_app import fake_accuracy_sweep

    fake_accuracy_sweep(store)
    at = open_page("repdim")
    assert not at.error, texts(at.error)
    assert ACCURACY_RULE in texts(at.caption)
    assert "R² ≥ 0.9" not in texts(at.caption)
