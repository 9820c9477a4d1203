"""The rule 'does the representation dimension predict ln PPL across methods better than the
parameters removed' (core.analysis.predictors, docs/statistics.md) on synthetic runs: each
of its three answers has a control whose pass rate over 50 draws is asserted (>= 90%).

A draw: 4 methods x 4 budgets x 3 calibration seeds, every run evaluated on the same 32
windows. The runs' ln PPL follows (A1)'s shape in one kept fraction x, ln PPL = L0 + c(1/x - 1),
plus window noise (shared by every run: the windows are paired) and seed noise. 400
bootstrap replicates per draw keep the controls fast (the rule's default is 2000)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from core.analysis.predictors import (
    NO,
    UNDECIDED,
    YES,
    dimension_or_params,
    lomo_errors,
    sentence,
    verdict,
)
from core.analysis.uncertainty import Bootstrap
from core.errors import ConfigError

BOOT = Bootstrap(n_boot=400)
DRAWS, PASS = 50, 0.9
BUDGETS = (0.1, 0.2, 0.3, 0.4)
LINKS = {"slicegpt": 1.6, "shortgpt": 0.5, "flap": 0.8, "wanda-sp": 1.2}  # x_dim = 1 - k·p
L0, C, WINDOWS, SEEDS = 3.0, 0.8, 32, 3


def synthetic_runs(truth: str, rng: np.random.Generator) -> pd.DataFrame:
    """truth: "dim" (ln PPL made by the dimension; dimension and parameters linked by a
    method-specific slope), "params" (the reverse), "equal" (both are the same kept fraction
    measured with the same noise, per seed)."""
    window = rng.normal(0.0, 0.3, WINDOWS)  # a window's difficulty, the same for every run
    rows = []
    for method, k in LINKS.items():
        for p in BUDGETS:
            for seed in range(SEEDS):
                x_par, x_dim = 1.0 - p, 1.0 - k * p / 1.7
                if truth == "equal":
                    x_dim = x_par * (1 + rng.normal(0, 0.02))
                    x_par = x_par * (1 + rng.normal(0, 0.02))
                    x = 1.0 - p
                else:
                    x = x_dim if truth == "dim" else x_par
                level = L0 + C * (1.0 / x - 1.0) + rng.normal(0, 0.01)  # seed noise
                nll = level + window + rng.normal(0, 0.05, WINDOWS)
                rows.append(
                    {
                        "method": method,
                        "point": p,
                        "seed": seed,
                        "params_removed": 1.0 - x_par,
                        "dim_ratio": x_dim,
                        "nll": nll,
                    }
                )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("truth, answer", [("dim", YES), ("params", NO), ("equal", UNDECIDED)])
def test_each_answer_has_its_control(truth: str, answer: str) -> None:
    rng = np.random.default_rng({"dim": 1, "params": 2, "equal": 3}[truth])
    got = [dimension_or_params(synthetic_runs(truth, rng), BOOT)["verdict"] for _ in range(DRAWS)]
    rate = got.count(answer) / DRAWS
    assert rate >= PASS, (truth, {a: got.count(a) for a in set(got)})


class _Exact:
    """A generator without noise: the draw's expected values (infinite windows and seeds)."""

    def normal(self, loc, scale, size=None):
        return np.zeros(size) if size else 0.0


@pytest.mark.parametrize("truth", ["dim", "params"])
def test_the_interval_covers_the_difference_of_the_expected_values(truth: str) -> None:
    """Coverage: Δ of the noise-free runs lies in the 95% interval in >= 90% of 50 draws
    (squared errors: the noise of ln PPL adds the same σ² to both scores and cancels)."""
    true = dimension_or_params(synthetic_runs(truth, _Exact()), BOOT)["delta"].estimate
    rng = np.random.default_rng({"dim": 11, "params": 12}[truth])
    draws = [dimension_or_params(synthetic_runs(truth, rng), BOOT)["delta"] for _ in range(DRAWS)]
    assert sum(d.lo <= true <= d.hi for d in draws) / DRAWS >= PASS


def test_lomo_errors_fit_on_the_other_methods_only() -> None:
    """Two methods on one exact (A1)-shaped curve predict each other without error; moving
    one method's points moves only the other method's prediction errors."""
    x = np.array([0.9, 0.8, 0.7, 0.85, 0.75, 0.65])
    L = 2.0 + 0.5 / x
    methods = np.array(["a", "a", "a", "b", "b", "b"])
    assert np.allclose(lomo_errors(x, L, methods), 0.0, atol=1e-12)
    shifted = L + np.array([0.3, 0.3, 0.3, 0, 0, 0])
    err = lomo_errors(x, shifted, methods)
    assert np.allclose(err, [-0.3] * 3 + [0.3] * 3)  # each from the other's curve, 0.3 apart
    one_x = np.array([0.9, 0.9, 0.9, 0.85, 0.75, 0.65])
    assert np.isnan(lomo_errors(one_x, L, methods)[3:]).all()  # a: no two distinct x


def test_the_result_carries_its_numbers_and_a_sentence() -> None:
    res = dimension_or_params(synthetic_runs("dim", np.random.default_rng(0)), BOOT)
    d = res["delta"]
    assert d.lo <= d.estimate <= d.hi and res["n_points"] == 16 and res["n_seeds"] == 3
    assert {m["method"] for m in res["methods"]} == set(LINKS)
    assert all(p["ln_ppl_lo"] <= p["ln_ppl"] <= p["ln_ppl_hi"] for p in res["points"])
    assert sentence(res).startswith("Yes: the representation dimension")
    assert verdict(float("nan"), float("nan")) == UNDECIDED


def test_too_few_methods_is_undecided_and_bad_tables_are_refused() -> None:
    runs = synthetic_runs("dim", np.random.default_rng(0))
    alone = dimension_or_params(runs[runs["method"] == "flap"], BOOT)
    assert alone["verdict"] == UNDECIDED and "fewer than two methods" in alone["reason"]
    with pytest.raises(ConfigError, match="lacks columns"):
        dimension_or_params(runs.drop(columns="dim_ratio"), BOOT)
    with pytest.raises(ConfigError, match="positive"):
        dimension_or_params(runs.assign(params_removed=1.0), BOOT)
