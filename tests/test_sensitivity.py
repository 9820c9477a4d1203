"""Calibration sensitivity: the agreement of keep sets on hand-sized masks, the random-mask
floor against random masks, and ``python -m core sensitivity`` on a tiny-llama run (the same
seed re-run agrees fully, another seed less, a stored run of its own with per-layer agreements,
the floor and the perplexity spread in --json)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from test_app import open_page, texts

from core.analysis.agreement import jaccard_floor, mask_agreement, per_layer, pooled, ppl_spread
from core.cli.main import main
from core.errors import ConfigError
from core.figures.sensitivity import agreement_chart
from core.names import SENSITIVITY, T_AGREEMENT, T_DRAWS
from core.requests.request import sensitivity_request
from core.runs.sensitivity import plan_sensitivity
from core.settings.config import (
    CalibConfig,
    DataSpec,
    EvalConfig,
    ModelSpec,
    PruneConfig,
    RunConfig,
)


def packed(bits) -> np.ndarray:
    return np.packbits(np.asarray(bits, dtype=bool).ravel())


def test_agreement_of_hand_sized_masks():
    a = packed([1, 1, 0, 0, 1, 0, 0, 0])  # keeps {0, 1, 4}
    b = packed([1, 0, 1, 0, 1, 0, 0, 0])  # keeps {0, 2, 4}
    row = mask_agreement(a, b, 8)
    assert (row["kept_source"], row["kept_draw"], row["shared"], row["union"]) == (3, 3, 2, 4)
    assert row["jaccard"] == 0.5 and row["kept_again"] == pytest.approx(2 / 3)
    # floor: p = 3/8 each, (9/64) / (6/8 − 9/64)
    assert row["jaccard_floor"] == pytest.approx((9 / 64) / (6 / 8 - 9 / 64))
    assert row["kept_again_floor"] == 3 / 8
    # 11 weights: padded bits are never kept, so they change nothing
    c = mask_agreement(packed([1] * 11), packed([1] * 5 + [0] * 6), 11)
    assert (c["jaccard"], c["kept_again"]) == (5 / 11, 5 / 11)
    with pytest.raises(ConfigError):
        mask_agreement(a, packed([1] * 16), 8)


def test_the_floor_is_k_over_n_over_two_minus_k_over_n():
    for p in (0.1, 0.3, 0.5, 0.75):
        assert jaccard_floor(p, p) == pytest.approx(p / (2 - p))


def random_keep(rng, shape, p: float) -> np.ndarray:
    """A keep mask keeping exactly round(p·n) weights, chosen uniformly at random."""
    n = int(np.prod(shape))
    keep = np.zeros(n, dtype=bool)
    keep[rng.choice(n, round(p * n), replace=False)] = True
    return keep


def random_nm(rng, shape, n_keep: int, m: int) -> np.ndarray:
    """A random N:M keep mask: n_keep of every m consecutive inputs of a row."""
    groups = np.argsort(rng.random((*shape[:-1], shape[-1] // m, m)), axis=-1) < n_keep
    return groups.reshape(shape)


@pytest.mark.parametrize("p", [0.3, 0.5, 0.7])
def test_random_masks_meet_the_floor(p):
    """Two random keep sets at keep fraction k/n share (k/n)/(2 − k/n) of their union: over 50
    random pairs each pair's Jaccard lies within 0.02 of the floor computed from k/n, and so
    does its kept-again fraction of k/n."""
    rng = np.random.default_rng(0)
    shape = (64, 128)
    n = shape[0] * shape[1]
    for _ in range(50):
        row = mask_agreement(
            packed(random_keep(rng, shape, p)), packed(random_keep(rng, shape, p)), n
        )
        expected = (round(p * n) / n) / (2 - round(p * n) / n)
        assert row["jaccard_floor"] == pytest.approx(expected)
        assert abs(row["jaccard"] - expected) < 0.02
        assert abs(row["kept_again"] - row["kept_again_floor"]) < 0.02


def test_random_nm_masks_meet_the_same_floor():
    """2:4 drawn at random within each group of 4: 1/3, as for unstructured masks at 50 %."""
    rng = np.random.default_rng(1)
    shape = (64, 128)
    rows = []
    for _ in range(50):
        a, b = random_nm(rng, shape, 2, 4), random_nm(rng, shape, 2, 4)
        row = mask_agreement(packed(a), packed(b), a.size)
        assert abs(row["jaccard"] - 1 / 3) < 0.02
        rows.append(row)
    assert pooled(rows)["jaccard_floor"] == pytest.approx(1 / 3)


def test_pooling_and_spread():
    rows = [
        {"draw": 0, "layer": 0, "n": 8, "kept_source": 4, "kept_draw": 4, "shared": 4, "union": 4},
        {"draw": 0, "layer": 0, "n": 8, "kept_source": 4, "kept_draw": 4, "shared": 0, "union": 8},
        {"draw": 1, "layer": 0, "n": 8, "kept_source": 4, "kept_draw": 4, "shared": 2, "union": 6},
        {"draw": 1, "layer": 0, "n": 8, "kept_source": 4, "kept_draw": 4, "shared": 2, "union": 6},
    ]
    assert pooled(rows[:2])["jaccard"] == pytest.approx(4 / 12)
    (layer,) = per_layer(rows)
    assert layer["jaccard"] == pytest.approx((4 / 12 + 4 / 12) / 2)
    assert layer["jaccard_floor"] == pytest.approx(1 / 3) and layer["kept_again"] == 0.5
    s = ppl_spread([10.0, 12.0, 14.0])
    assert (s["mean"], s["sd"], s["min"], s["max"]) == (12.0, 2.0, 10.0, 14.0)
    assert s["rel_range"] == pytest.approx(4 / 12)


# ---- the run kind, through the CLI ---------------------------------------------------------------
def run_cli(capsys, *argv) -> dict:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def wanda_run(tiny_flags, capsys) -> str:
    out = run_cli(capsys, "prune", *tiny_flags, "--method", "wanda", "--sparsity", "0.5")
    return out["run_id"]


def test_sensitivity_of_a_tiny_run(wanda_run, store, store_root, capsys):
    flags = ("--store", str(store_root), "--quiet")
    out = run_cli(capsys, "sensitivity", wanda_run[:8], "--seeds", "0,1", "--force", *flags)
    m = out["metrics"]
    assert m["source_run"] == wanda_run and m["seeds"] == [0, 1]
    draws = {d["seed"]: d for d in m["draws"]}
    # seed 0 re-run (--force) is the run itself: every linear's kept set agrees exactly
    assert draws[0]["run_id"] == wanda_run and m["own_draws"] == [0]
    linears = [r for r in out["linears"] if r["draw"] == 0]
    assert len(linears) == 28 and all(r["jaccard"] == 1.0 for r in linears)
    assert all(r["kept_again"] == 1.0 for r in linears)
    # another draw keeps other weights, yet far more than two random masks would share
    other = [r for r in out["linears"] if r["draw"] == 1]
    assert all(r["jaccard_floor"] < r["jaccard"] < 1.0 for r in other)
    assert draws[1]["jaccard"] == pytest.approx(m["jaccard"])  # the mean leaves the run out
    # per-layer agreements, the floor and the perplexity spread in --json
    assert [r["layer"] for r in m["layers"]] == [0, 1, 2, 3]
    for r in m["layers"]:
        assert r["jaccard_floor"] == pytest.approx(1 / 3) and r["kept_again_floor"] == 0.5
        assert 1 / 3 < r["jaccard"] < 1.0 and r["jaccard_min"] <= r["jaccard"]
    assert m["jaccard_floor"] == pytest.approx(1 / 3)
    spread = m["ppl_spread"]
    assert spread["n"] == 2 and set(spread["runs"]) == {wanda_run, draws[1]["run_id"]}
    assert spread["min"] == min(d["ppl"] for d in m["draws"]) < spread["max"]
    # stored as a run of its own, reused unless forced
    rec = store.get(out["run_id"])
    assert rec.kind == SENSITIVITY and rec.status == "done"
    assert {T_AGREEMENT, T_DRAWS} <= set(store.load(rec.id).tables())
    again = run_cli(capsys, "sensitivity", wanda_run, "--seeds", "0,1", *flags)
    assert again["run_id"] == out["run_id"] and again["cached"] is True
    # the human text names the floor and the spread
    capsys.readouterr()
    assert main(["sensitivity", wanda_run, "--seeds", "0,1", *flags]) == 0
    text = capsys.readouterr().out
    assert "two random masks: 0.3333" in text and "(the run itself)" in text
    assert f"range {spread['min']:.4f}" in text


@pytest.fixture
def stored_prune(store) -> str:
    """A finished prune run and its dense run written directly (planning reads only the
    index): no model runs."""
    tiny = ModelSpec("tiny-llama", "cpu", "float32")
    dense = RunConfig("eval", tiny, EvalConfig(DataSpec("pydoc"), 64, 4))
    with store.begin(dense) as w:
        w.commit({"ppl": 250.0})
    cfg = RunConfig(
        "prune",
        tiny,
        EvalConfig(DataSpec("pydoc"), 64, 4),
        CalibConfig(DataSpec("pydoc", "train"), 4, 64),
        PruneConfig("wanda", 0.5, options=(("scope", "row"),)),
    )
    with store.begin(cfg) as w:
        w.commit({"ppl": 260.0, "dense_ppl": 250.0, "dense_run": dense.run_id})
    return cfg.run_id


def test_another_corpus_is_its_own_run(stored_prune, store, tmp_path):
    """--calib makes every draw on that corpus (another config, another run id)."""
    corpus = tmp_path / "text.txt"
    corpus.write_text("\n\n".join(f"Document {i}: " + "words " * 400 for i in range(20)))
    a = plan_sensitivity(store, stored_prune, (1,))
    b = sensitivity_request(store, stored_prune, "1", f"file:{corpus}")
    assert a.run_id != b.run_id
    assert b.extra_value("calib_data")["dataset"] == f"file:{corpus}"
    assert a.extra_value("calib_data") is None and a.calib.data.dataset == "pydoc"


@pytest.mark.parametrize(
    "args, words",
    [
        (("--seeds", "1,x"), "integers"),
        (("--seeds", "1,1"), "distinct"),
        (("--seeds", ""), "distinct"),
        (("--seeds", "1", "--calib", "nope"), "unknown dataset"),
    ],
)
def test_bad_requests_are_refused_before_any_work(stored_prune, store_root, capsys, args, words):
    capsys.readouterr()
    assert main(["sensitivity", stored_prune, *args, "--store", str(store_root), "--quiet"]) == 2
    assert words in capsys.readouterr().err


def test_only_finished_prune_runs_have_a_sensitivity(stored_prune, store, capsys):
    dense = store.get(stored_prune).summary["dense_run"]
    with pytest.raises(ConfigError, match="eval run"):
        plan_sensitivity(store, dense, (1,))
    capsys.readouterr()
    assert main(["sensitivity", "ffffffff", "--seeds", "1", "--store", str(store.root)]) == 2
    assert "ffffffff" in capsys.readouterr().err


def test_agreement_chart_draws_each_measure_beside_its_floor():
    layers = pd.DataFrame(
        {"layer": [1, 0], "jaccard": [0.8, 0.9], "jaccard_min": [0.7, 0.85],
         "jaccard_floor": [1 / 3, 1 / 3], "kept_again": [0.9, 0.95],
         "kept_again_floor": [0.5, 0.5]}
    )  # fmt: skip
    fig = agreement_chart(layers)
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["Jaccard of the kept sets"].y) == [0.9, 0.8]  # in layer order
    floor = by_name["Jaccard of the kept sets: two random masks"]
    assert list(floor.y) == [1 / 3, 1 / 3] and floor.line.dash == "dash"
    assert list(by_name["run's kept weights kept again: two random masks"].y) == [0.5, 0.5]
    assert list(by_name["Jaccard, lowest draw"].y) == [0.85, 0.7]


def test_runs_page_panel_refuses_bad_seeds_with_the_cli_message(stored_prune):
    at = open_page("runs")
    at.selectbox(key="sensitivity_pick").set_value(stored_prune)
    at.run()
    at.text_input(key="sens_seeds").input("1,1")
    next(b for b in at.button if b.label == "Start the draws").click()
    at.run()
    assert "seeds must be distinct" in texts(at.error)


def test_a_method_that_reads_no_calibration_agrees_fully(tiny_flags, store_root, capsys):
    """Magnitude keeps the largest |W| whatever the calibration draw: every other seed keeps
    exactly its kept set, and its perplexity does not move (a control of the whole path)."""
    run = run_cli(capsys, "prune", *tiny_flags, "--method", "magnitude", "--sparsity", "0.5")
    out = run_cli(capsys, "sensitivity", run["run_id"], "--seeds", "1,2", "--store",
                  str(store_root), "--quiet")  # fmt: skip
    m = out["metrics"]
    assert m["own_draws"] == [] and len(out["linears"]) == 2 * 28
    assert all(r["jaccard"] == 1.0 for r in out["linears"])
    assert m["jaccard"] == 1.0 and m["ppl_spread"]["sd"] == 0.0
