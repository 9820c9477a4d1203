"""The assumption rule's stated power (core/methods/attention_gd/power.py) on controls that
match a real layer (synthetic_layer.py): dimension ≥ 10⁴, 64 starts, exact μ and L. Each stated
rate is bounded against the control's known truth, so a rule forced to say "inconclusive" or
"supported" everywhere fails here (a recount through the same code would not notice); the
controls' derivatives, μ and L are checked on their own; the stored production table is
the one the rule gives now; the production tally sits beside what the controls predict."""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pytest
import torch

from core.methods.attention_gd import synthetic_layer as lc
from core.methods.attention_gd.power import (
    CONTROLS,
    PRODUCTION_OPTIMIZER,
    PRODUCTION_STEPS,
    STARTS,
    detection_power,
    stored_table,
)
from core.methods.attention_gd.verdict_notes import power_note, tally_beside_controls

F64 = torch.float64


@functools.cache  # each control judged once for the module's tests (deterministic: seeded)
def measured(control: str) -> dict:
    """The control judged afresh at the production budget (not the stored table)."""
    return detection_power(PRODUCTION_STEPS, control, STARTS, PRODUCTION_OPTIMIZER)


def test_the_controls_match_a_layer_in_size_and_draws():
    assert lc.DIM >= 10_000 and STARTS >= 64
    p = measured("layer density")
    assert p["dim"] == lc.DIM and p["supported"]["n"] == STARTS
    assert p["mu"] == pytest.approx(8.6475e-6, rel=1e-9) and p["L"] == pytest.approx(382.47)


@pytest.mark.parametrize("kind", lc.KINDS)
def test_derivatives_are_exact(kind):
    """Gradient and Hessian-vector product against central differences of the value."""
    obj = lc.SeparableControl(kind, 3, lc.PROVISIONAL, n=64)
    gen = torch.Generator().manual_seed(4)
    x, v = torch.rand(64, generator=gen, dtype=F64), torch.randn(64, generator=gen, dtype=F64)
    _, g = obj.value_grad(x)
    eps = 1e-6
    fd = (obj.value_grad(x + eps * v)[0] - obj.value_grad(x - eps * v)[0]) / (2 * eps)
    assert fd == pytest.approx((g * v).sum().item(), rel=1e-6)
    hv = (obj.value_grad(x + eps * v)[1] - obj.value_grad(x - eps * v)[1]) / (2 * eps)
    torch.testing.assert_close(obj.hvp(x, v, g), hv, rtol=1e-5, atol=1e-6)
    assert obj.value_grad(obj.c)[0] == 0.0  # f* = 0 at c


def test_the_pl_control_has_its_stated_mu_l_and_negative_curvature():
    """μ = min(λ⁺, κ·a), L = max(λ⁺, 4a); the Hessian at the starts is indefinite down to the
    density's most negative value; PL holds at sampled points with exactly that μ at worst."""
    obj = lc.SeparableControl("pl", 0, lc.PROVISIONAL, n=1024)
    lam = lc.PROVISIONAL.quantiles(1024)
    assert obj.mu == pytest.approx(min(lam[lam > 0].min(), lc.KAPPA * (-lam[lam < 0]).max() / 2))
    assert obj.lip == pytest.approx(max(lam.max(), 4 * (-lam.min()) / 2))
    y = torch.linspace(-3, 3, 60001, dtype=F64)
    a = 0.7  # one wiggle coordinate: its PL ratio ≥ κ·a, reached at z = ωy ≈ 2.2
    g = a * (0.5 * y**2 + 1.5 * torch.sin(lc.OMEGA * y) ** 2 / lc.OMEGA**2)
    dg = a * (y + 1.5 * torch.sin(2 * lc.OMEGA * y) / lc.OMEGA)
    ratio = (dg**2 / (2 * g))[y.abs() > 1e-3]
    assert ratio.min().item() == pytest.approx(lc.KAPPA * a, rel=1e-4)
    y0 = obj._rot(lc.start(0, 1024) - obj.c)[: obj.nw]  # the wiggles at the start
    g2 = obj.h[: obj.nw] * (1 + 3 * torch.cos(2 * lc.OMEGA * y0))
    assert (g2 < 0).float().mean().item() > 0.2  # negative curvature where the runs start
    assert g2.min().item() >= lam.min() - 1e-12


def test_each_stated_power_is_bounded_by_the_controls_truth():
    """At the production budget on 64 draws of dimension 10⁴: PL on a spectrum 1..10 is
    supported in ≥ 90 % and never contradicted; x⁴ and |x|^{3/2} are contradicted in ≥ 90 %
    and never supported; on the layer's density (PL true, μ = 8.6e-6) the rule never says
    "supported" wrongly by construction, and its false contradictions stay below 10 %."""
    easy, layer = measured("spectrum 1..10"), measured("layer density")
    quart, three = measured("x⁴"), measured("|x|^{3/2}")
    assert easy["truth"] == layer["truth"] == "supported"
    assert quart["truth"] == three["truth"] == "contradicted"
    assert easy["supported"]["rate"] >= 0.9 and easy["contradicted"]["hits"] == 0
    for bad in (quart, three):
        assert bad["contradicted"]["rate"] >= 0.9 and bad["supported"]["hits"] == 0
    assert layer["contradicted"]["rate"] <= 0.1
    for p in (easy, layer, quart, three):
        hits = [p[v]["hits"] for v in ("supported", "contradicted", "inconclusive")]
        assert sum(hits) == STARTS


def test_the_note_states_each_power_with_its_upper_limit():
    easy, layer = measured("spectrum 1..10"), measured("layer density")
    quart, three = measured("x⁴"), measured("|x|^{3/2}")
    note = power_note("inconclusive", PRODUCTION_STEPS)
    assert note.startswith(f"inconclusive: at {PRODUCTION_STEPS} Adam steps")
    assert f"dimension {lc.DIM:,} ({STARTS} starts each)" in note
    s = easy["supported"]
    assert f"spectrum 1..10 in {s['rate']:.0%} [{s['lo']:.0%}, {s['hi']:.0%}]" in note
    assert f"in at most {layer['supported']['hi']:.0%} ({layer['supported']['rate']:.0%}" in note
    c = quart["contradicted"]
    assert f"(x⁴) in {c['rate']:.0%} [{c['lo']:.0%}, {c['hi']:.0%}]" in note
    assert f"|x|^{{3/2}}) in {three['contradicted']['rate']:.0%}" in note
    assert f"layer's density in at most {layer['contradicted']['hi']:.0%}" in note


def test_the_stored_production_table_is_the_one_the_rule_gives_now():
    """The pages read ``power_production.json``: every Adam row matches a fresh judging of
    its 64 draws (within 2 draws per verdict, for another CPU's rounding)."""
    table = stored_table()
    assert table, "power_production.json is missing or was measured on other controls"
    for control in CONTROLS:
        row, now = table[(PRODUCTION_OPTIMIZER, PRODUCTION_STEPS, control)], measured(control)
        for v in ("supported", "contradicted", "inconclusive"):
            assert abs(row[v]["hits"] - now[v]["hits"]) <= 2, (control, v)
        assert ("gd", PRODUCTION_STEPS, control) in table


def test_the_tally_beside_what_the_controls_predict():
    counts = {"supported": 3, "inconclusive": 25, "contradicted": 2}
    rows = {r["verdict"]: r for r in tally_beside_controls(counts, PRODUCTION_STEPS)}
    layer = stored_table()[(PRODUCTION_OPTIMIZER, PRODUCTION_STEPS, "layer density")]
    for v, r in rows.items():
        assert r["groups"] == counts[v]
        assert r["if PL holds"] == pytest.approx(30 * layer[v]["rate"])
        assert r["if PL holds hi"] == pytest.approx(30 * layer[v]["hi"])
    assert not math.isnan(rows["contradicted"]["if PL fails (x⁴)"])
    assert np.isclose(sum(r["if PL holds"] for r in rows.values()), 30)


def test_a_stored_lanczos_spectrum_becomes_the_density(tmp_path, monkeypatch):
    """``--spectrum`` stores Ritz values and quadrature weights; the PL control then draws its
    eigenvalues from them, keeping the extremes of each sign exactly."""
    ritz = [-1.5, -0.1, 1e-5, 0.3, 2.0, 300.0]
    weights = [0.05, 0.05, 0.3, 0.3, 0.2, 0.1]
    (tmp_path / "spectrum_fake.json").write_text(json.dumps({"ritz": ritz, "weights": weights}))
    monkeypatch.setattr(lc, "HERE", tmp_path)
    lc.density.cache_clear()
    try:
        dens = lc.density("fake")
        assert dens.values == tuple(ritz) and sum(dens.weights) == pytest.approx(1.0)
        q = dens.quantiles(200)
        assert q.min() == -1.5 and q.max() == 300.0 and q[q > 0].min() == 1e-5
        assert (q < 0).mean() == pytest.approx(0.1, abs=0.01)
        assert lc.density("other") is lc.PROVISIONAL  # nothing stored for it
    finally:
        lc.density.cache_clear()
